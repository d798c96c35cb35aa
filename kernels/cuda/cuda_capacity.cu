// CUDA: expert capacity (capacity_drop) and mask_zero (contracts in kernels/backend_ops.h; the CPU reference in
// kernels/cpu/cpu_capacity.c walks the assignments in order instead).
#include "kernels/cuda/cuda_common.cuh"

// q comes before p in the admission order (for assignments of the same expert).
__device__ __forceinline__ bool capacity_before(const float *gate, long q, long p, int N, int k, int score) {
    if (score) return gate[q] > gate[p] || (gate[q] == gate[p] && q < p); // q < p: the lower position
    const long kq = (long)(q % k) * N + q / k, kp = (long)(p % k) * N + p / k; // (j, n) ascending
    return kq < kp;
}

// One thread per assignment p: its rank among its expert's assignments is the number of that expert's assignments
// before it; it is kept iff the rank is below cap. O((N k)^2) comparisons in all, none of them serial, and no
// sort: the capacity decision of one routing decision costs about as much as one small GEMM of the layer.
__global__ void k_capacity_rank(uint8_t *dropped, const float *gate, const int32_t *sel, long M, int N, int k, int cap,
                                int score) {
    for (long p = blockIdx.x * (long)blockDim.x + threadIdx.x; p < M; p += (long)gridDim.x * blockDim.x) {
        const int32_t e = sel[p];
        long rank = 0;
        for (long q = 0; q < M && rank < cap; q++)
            if (q != p && sel[q] == e && capacity_before(gate, q, p, N, k, score)) rank++;
        dropped[p] = rank >= cap;
    }
}

// Apply the decision: dropped gates to 0; count the kept (per expert) and the dropped assignments of valid positions.
__global__ void k_capacity_apply(float *gate, unsigned long long *counts, unsigned long long *n_dropped,
                                 const uint8_t *dropped, const int32_t *sel, const uint8_t *valid, long M, int E,
                                 int k) {
    for (long p = blockIdx.x * (long)blockDim.x + threadIdx.x; p < M; p += (long)gridDim.x * blockDim.x) {
        if (dropped[p]) gate[p] = 0.0f;
        if (valid && !valid[p / k]) continue;
        if (dropped[p]) {
            if (n_dropped) atomicAdd(n_dropped, 1ULL);
        } else if (counts && sel[p] >= 0 && sel[p] < E) { // ids outside [0, E) cannot come from topk_select
            atomicAdd(&counts[sel[p]], 1ULL);
        }
    }
}

void cuda_capacity_drop(Backend *be, uint8_t *dropped, scalar_t *gate, int64_t *counts, int64_t *n_dropped,
                        const int32_t *sel, const uint8_t *valid, int N, int E, int k, int cap, CapacityOrder order) {
    if (N < 0 || E < 1 || k < 1 || k > E) die("capacity_drop: bad shape N=%d E=%d k=%d", N, E, k);
    if (cap < 1) die("capacity_drop: capacity %d must be >= 1", cap);
    if (order != CAPACITY_POSITION && order != CAPACITY_SCORE) die("capacity_drop: unknown order %d", (int)order);
    const long M = (long)N * k;
    if (M == 0) return;
    cuda_weights_written(be, gate, (size_t)M * sizeof(float));
    cuda_weights_written(be, dropped, (size_t)M);
    if (counts) cuda_weights_written(be, counts, (size_t)E * sizeof(int64_t));
    if (n_dropped) cuda_weights_written(be, n_dropped, sizeof(int64_t));
    // two kernels: the ranks read the gates that the second one zeroes
    // each assignment compares itself with up to all M (counted as M each); ids and gates in, a byte out
    LAUNCH(k_capacity_rank, grid_for((size_t)M, 128), 128, 0,
           kernel_cost((double)M * M, (double)M * (sizeof(int32_t) + sizeof(float) + 1)))(dropped, gate, sel, M, N, k,
                                                                                          cap, order == CAPACITY_SCORE);
    CHECK_LAUNCH();
    static_assert(sizeof(unsigned long long) == sizeof(int64_t), "int64 counts as CUDA's 64-bit atomics");
    // the decision, the ids and the gates in, the gates out, an 8-byte counter updated per assignment
    LAUNCH(k_capacity_apply, grid_for((size_t)M, 128), 128, 0,
           kernel_cost((double)M, (double)M * (1 + sizeof(int32_t) + 2 * sizeof(float) + 2 * sizeof(int64_t))))(
        gate, (unsigned long long *)counts, (unsigned long long *)n_dropped, dropped, sel, valid, M, E, k);
    CHECK_LAUNCH();
}

__global__ void k_mask_zero(float *x, const uint8_t *mask, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (mask[i]) x[i] = 0.0f;
}

void cuda_mask_zero(Backend *be, scalar_t *x, const uint8_t *mask, size_t n) {
    cuda_weights_written(be, x, n * sizeof(float));
    if (!n) return;
    LAUNCH(k_mask_zero, grid_for(n, 256), 256, 0, streaming_cost(n, 0, 1 + sizeof(float)))(x, mask, n);
    CHECK_LAUNCH();
}
