/* CPU reference: cross-entropy, argmax, AdamW, and the reductions used by gradient clipping. */
#include <math.h>
#include <string.h>

#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "pipeline/base/log.h"

#define PAR_MIN 32768
/* sum_squares splits x into chunks of this many elements; chunk sums are added in chunk order, so the result is the
 * same for any thread count. */
#define SUMSQ_CHUNK 65536

/* logits[N,V], targets[N] (-1 = not counted). Returns the sum of -log softmax[target] over counted rows (summed in
 * row order, in double). losses[N] (optional) = per-row loss (0 when not counted). dlogits (optional, may alias
 * logits) = grad_scale * (softmax - onehot) on counted rows, 0 on the others. */
double cpu_cross_entropy(Backend *be, scalar_t *dlogits, scalar_t *losses, const scalar_t *logits,
                         const int32_t *targets, int N, int V, scalar_t grad_scale) {
    for (int n = 0; n < N; n++)
        if (targets[n] < -1 || targets[n] >= V)
            die("cross_entropy: target %d at row %d is outside [-1, %d)", targets[n], n, V);
    double *row_loss = cpu_scratch(be, SCRATCH_XENT_ROW_LOSS, (size_t)(N > 0 ? N : 1) * sizeof(double)); /* [N] */
    int n_threads = omp_get_max_threads();
    scalar_t *exps = cpu_scratch(be, SCRATCH_XENT_EXPS, (size_t)n_threads * V * sizeof(scalar_t)); /* per thread [V] */
#pragma omp parallel for schedule(static) num_threads(n_threads) if ((size_t)N * V > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const scalar_t *l = logits + (size_t)n * V;
        scalar_t *e = exps + (size_t)omp_get_thread_num() * V;
        int t = targets[n];
        scalar_t mx = l[0];
#pragma omp simd reduction(max : mx)
        for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
        double s = cpu_exp_shift(e, l, mx, V); /* e = exp(l - mx) */
        row_loss[n] = t >= 0 ? (double)mx + log(s) - (double)l[t] : 0.0; /* before dlogits (may alias) is written */
        if (dlogits) {
            scalar_t *dl = dlogits + (size_t)n * V;
            if (t < 0) {
                memset(dl, 0, (size_t)V * sizeof(scalar_t));
            } else {
                scalar_t coef = (scalar_t)((double)grad_scale / s); /* softmax = e / s */
#pragma omp simd
                for (int v = 0; v < V; v++) dl[v] = coef * e[v];
                dl[t] -= grad_scale;
            }
        }
    }
    double total = 0;
    for (int n = 0; n < N; n++) {
        total += row_loss[n];
        if (losses) losses[n] = (scalar_t)row_loss[n];
    }
    return total;
}

/* argmax[N] over the last dim of x[N,V]; ties go to the lowest index. */
void cpu_argmax_rows(Backend *be, int32_t *argmax, const scalar_t *x, int N, int V) {
#pragma omp parallel for schedule(static) if ((size_t)N * V > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const scalar_t *r = x + (size_t)n * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (r[v] > r[best]) best = v;
        argmax[n] = best;
    }
}

/* PyTorch AdamW (single tensor, fp32 arithmetic per element; the step-dependent scalars in double as Python does):
 *   g *= grad_scale (clipping; not written back);  p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). */
void cpu_adamw_step(Backend *be, scalar_t *p, const scalar_t *g, scalar_t *m, scalar_t *v, size_t n, double lr,
                    double beta1, double beta2, double eps, double wd, long t, scalar_t grad_scale) {
    if (t < 1) die("adamw_step: step t=%ld must be >= 1", t);
    const scalar_t decay = (scalar_t)(1.0 - lr * wd);
    const scalar_t b1 = (scalar_t)beta1, b2 = (scalar_t)beta2;
    const scalar_t one_m_b1 = (scalar_t)(1.0 - beta1), one_m_b2 = (scalar_t)(1.0 - beta2);
    const scalar_t step_size = (scalar_t)(lr / (1.0 - pow(beta1, (double)t)));
    const scalar_t bc2_sqrt = (scalar_t)sqrt(1.0 - pow(beta2, (double)t));
    const scalar_t eps_s = (scalar_t)eps;
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        scalar_t gi = g[i] * grad_scale;
        scalar_t pi = p[i] * decay;
        scalar_t mi = b1 * m[i] + one_m_b1 * gi;
        scalar_t vi = b2 * v[i] + one_m_b2 * gi * gi;
        scalar_t denom = sc_sqrt(vi) / bc2_sqrt + eps_s;
        p[i] = pi - step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
    }
}

/* sum x^2 in double, chunked for a thread-count-independent result. */
double cpu_sum_squares(Backend *be, const scalar_t *x, size_t n) {
    if (n == 0) return 0.0;
    size_t n_chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double *partial = cpu_scratch(be, SCRATCH_SUMSQ_PARTIAL, n_chunks * sizeof(double));
#pragma omp parallel for schedule(static) if (n_chunks > 1)
    for (size_t c = 0; c < n_chunks; c++) {
        size_t i0 = c * SUMSQ_CHUNK, i1 = i0 + SUMSQ_CHUNK < n ? i0 + SUMSQ_CHUNK : n;
        double acc = 0;
#pragma omp simd reduction(+ : acc)
        for (size_t i = i0; i < i1; i++) acc += (double)x[i] * (double)x[i];
        partial[c] = acc;
    }
    double total = 0;
    for (size_t c = 0; c < n_chunks; c++) total += partial[c];
    return total;
}

/* 1 if no NaN/Inf in x[n] (an AND over elements: order does not matter). */
int cpu_all_finite(Backend *be, const scalar_t *x, size_t n) {
    int ok = 1;
#pragma omp parallel for schedule(static) reduction(&& : ok) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) ok = ok && isfinite(x[i]);
    return ok;
}
