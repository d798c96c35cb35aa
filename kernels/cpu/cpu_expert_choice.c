/* CPU reference of expert-choice routing's selection and gate backward (formulas: kernels/backend_ops.h). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/expert_choice_pick.h"
#include "pipeline/base/log.h"

#ifdef SCALAR_F64
#define ec_scores expert_choice_scores_d
#else
#define ec_scores expert_choice_scores_f
#endif

void cpu_expert_choice_select(Backend *be, int32_t *pos, int32_t *expert, scalar_t *gate, const scalar_t *logits,
                              const uint8_t *valid, int N, int E, int c) {
    (void)be;
    if (N < 1 || E < 1) die("expert_choice_select: N=%d E=%d must be >= 1", N, E);
    double *score = xmalloc((size_t)N * E * sizeof *score); /* [N, E] */
    ec_scores(score, logits, N, E);
    expert_choice_pick(pos, expert, score, valid, N, E, c);
    for (long p = 0; p < (long)E * c; p++) gate[p] = (scalar_t)score[(size_t)pos[p] * E + p / c];
    free(score);
}

void cpu_expert_choice_gates_backward(Backend *be, scalar_t *dlogits, scalar_t *dscore, const scalar_t *dgate,
                                      const int32_t *pos, const scalar_t *logits, int N, int E, int c) {
    (void)be;
    memset(dscore, 0, (size_t)N * E * sizeof *dscore);
    for (long p = 0; p < (long)E * c; p++) {
        const int32_t n = pos[p];
        if (n < 0 || n >= N) die("expert_choice_gates_backward: entry %ld holds position %d, not in [0, %d)", p, n, N);
        dscore[(size_t)n * E + p / c] = dgate[p];
    }
#pragma omp parallel for schedule(static) if ((size_t)N * E > 32768)
    for (long n = 0; n < N; n++) {
        const scalar_t *l = logits + (size_t)n * E, *q = dscore + (size_t)n * E;
        double mx = -DBL_MAX, sum = 0, qs = 0;
        for (int e = 0; e < E; e++) mx = (double)l[e] > mx ? (double)l[e] : mx;
        for (int e = 0; e < E; e++) sum += exp((double)l[e] - mx);
        for (int e = 0; e < E; e++) qs += (double)q[e] * (exp((double)l[e] - mx) / sum);
        for (int e = 0; e < E; e++) {
            const double s = exp((double)l[e] - mx) / sum;
            dlogits[(size_t)n * E + e] += (scalar_t)(s * ((double)q[e] - qs));
        }
    }
}
