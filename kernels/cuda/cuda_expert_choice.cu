// CUDA: expert-choice routing's selection and gate backward (formulas in kernels/backend_ops.h; the CPU version in
// kernels/cpu/cpu_expert_choice.c is the reference these mirror).
//
// The selection runs on the host over the downloaded logits [N, E] with the CPU's own code
// (kernels/expert_choice_pick.c), as embedding_backward buckets its tokens on the host: a per-expert top-c over N
// positions is a sort per expert, the logits are a few hundred KB per decision, and sharing the code makes both
// backends pick exactly the same positions. The gate backward is two kernels: the scatter of the entry gradients
// into q[N, E] (an (n, e) pair occurs at most once: no atomics) and the per-row softmax Jacobian.
#include <cfloat>
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/expert_choice_pick.h"

void cuda_expert_choice_select(Backend *be, int32_t *pos, int32_t *expert, scalar_t *gate, const scalar_t *logits,
                               const uint8_t *valid, int N, int E, int c) {
    if (N < 1 || E < 1) die("expert_choice_select: N=%d E=%d must be >= 1", N, E);
    const size_t M = (size_t)E * (size_t)(c > 0 ? c : 0);
    cuda_weights_written(be, pos, M * sizeof(int32_t));
    cuda_weights_written(be, expert, M * sizeof(int32_t));
    cuda_weights_written(be, gate, M * sizeof(float));
    std::vector<float> l((size_t)N * E);
    std::vector<uint8_t> v(valid ? (size_t)N : 0);
    CHECK_CUDA(cudaMemcpy(l.data(), logits, l.size() * sizeof(float), cudaMemcpyDeviceToHost));
    if (valid) CHECK_CUDA(cudaMemcpy(v.data(), valid, v.size(), cudaMemcpyDeviceToHost));
    std::vector<double> score((size_t)N * E);
    expert_choice_scores_f(score.data(), l.data(), N, E);
    std::vector<int32_t> p(M), ex(M);
    expert_choice_pick(p.data(), ex.data(), score.data(), valid ? v.data() : nullptr, N, E, c); // dies on a bad c
    std::vector<float> g(M);
    for (size_t i = 0; i < M; i++) g[i] = (float)score[(size_t)p[i] * E + i / (size_t)c];
    CHECK_CUDA(cudaMemcpy(pos, p.data(), M * sizeof(int32_t), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(expert, ex.data(), M * sizeof(int32_t), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(gate, g.data(), M * sizeof(float), cudaMemcpyHostToDevice));
}

// One thread per entry p: q[pos[p], p / c] = dgate[p]. A position outside [0, N) cannot come from
// expert_choice_select; it is skipped here (the CPU reference dies on it).
__global__ void k_ec_scatter(float *q, const float *dgate, const int32_t *pos, long M, int N, int E, int c) {
    for (long p = blockIdx.x * (long)blockDim.x + threadIdx.x; p < M; p += (long)gridDim.x * blockDim.x) {
        const int32_t n = pos[p];
        if (n < 0 || n >= N) continue;
        q[(size_t)n * E + p / c] = dgate[p];
    }
}

// One thread per row n: dl[n, e] += S_e (q_e - sum_i q_i S_i), in double as the CPU.
__global__ void k_ec_softmax_bwd(float *dlogits, const float *q, const float *logits, int N, int E) {
    for (long n = blockIdx.x * (long)blockDim.x + threadIdx.x; n < N; n += (long)gridDim.x * blockDim.x) {
        const float *l = logits + (size_t)n * E, *qr = q + (size_t)n * E;
        double mx = -DBL_MAX, sum = 0, qs = 0;
        for (int e = 0; e < E; e++) mx = (double)l[e] > mx ? (double)l[e] : mx;
        for (int e = 0; e < E; e++) sum += exp((double)l[e] - mx);
        for (int e = 0; e < E; e++) qs += (double)qr[e] * (exp((double)l[e] - mx) / sum);
        for (int e = 0; e < E; e++) {
            const double s = exp((double)l[e] - mx) / sum;
            dlogits[(size_t)n * E + e] += (float)(s * ((double)qr[e] - qs));
        }
    }
}

void cuda_expert_choice_gates_backward(Backend *be, scalar_t *dlogits, scalar_t *dscore, const scalar_t *dgate,
                                       const int32_t *pos, const scalar_t *logits, int N, int E, int c) {
    if (N <= 0 || E <= 0) return;
    cuda_weights_written(be, dscore, (size_t)N * E * sizeof(float));
    cuda_weights_written(be, dlogits, (size_t)N * E * sizeof(float));
    CHECK_CUDA(cudaMemset(dscore, 0, (size_t)N * E * sizeof(float)));
    const long M = (long)E * c;
    if (M > 0) {
        LAUNCH(k_ec_scatter, grid_for((size_t)M, 128), 128, 0,
               streaming_cost(M, 0, 2 * sizeof(float) + sizeof(int32_t)))(dscore, dgate, pos, M, N, E, c);
        CHECK_LAUNCH();
    }
    // logits and q in, dlogits read and written; the softmax three times over (about 10 operations per element)
    LAUNCH(k_ec_softmax_bwd, grid_for((size_t)N, 128), 128, 0, streaming_cost((double)N * E, 10, 4 * sizeof(float)))(
        dlogits, dscore, logits, N, E);
    CHECK_LAUNCH();
}
