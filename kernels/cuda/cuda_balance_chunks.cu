// CUDA: the passes shared by the balance statistics (entropy_reg, switch_balance in cuda_routing.cu, seq_balance
// in cuda_seq_balance.cu; BALANCE_CHUNK in cuda_common.cuh says why they are chunked): the first pass's grid, checked
// against the launch limits, the second pass, which adds each output's chunk sums in chunk order, and the counts of
// valid positions, made on the device so that no op reads the mask back.
#include "kernels/cuda/cuda_common.cuh"

constexpr long GRID_Y_MAX = 65535;      // a grid's y dimension (the chunks)
constexpr long GRID_X_MAX = 2147483647; // its x dimension (the output groups)

dim3 balance_grid(const char *op, long groups, long positions) {
    const long chunks = balance_chunks(positions);
    if (chunks > GRID_Y_MAX)
        die("%s: %ld positions per group make %ld chunks of %d, over the grid's limit of %ld (at most %ld positions)",
            op, positions, chunks, BALANCE_CHUNK, GRID_Y_MAX, GRID_Y_MAX * BALANCE_CHUNK);
    if (groups > GRID_X_MAX) die("%s: %ld output groups over the grid's limit of %ld", op, groups, GRID_X_MAX);
    return dim3((unsigned)groups, (unsigned)chunks); // no groups: the op returns before launching
}

// One thread per output i: the chunks' partial sums added in chunk order (deterministic).
__global__ void k_balance_chunk_sums(double *f, double *P, const double *f_part, const double *P_part, long chunks,
                                     size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double load = 0, prob = 0;
        for (long c = 0; c < chunks; c++) {
            load += f_part[(size_t)c * n + i];
            prob += P_part[(size_t)c * n + i];
        }
        f[i] = load;
        P[i] = prob;
    }
}

// cnt[b] = R x (sequence b's valid positions; all T without a mask): one block per sequence, whole counts summed
// (exact in any order).
__global__ void k_valid_counts(double *cnt, const uint8_t *valid, long T, double R) {
    __shared__ double sh[128];
    const long b = blockIdx.x;
    double nv = 0;
    for (long t = threadIdx.x; t < T; t += blockDim.x) nv += valid ? valid[b * T + t] != 0 : 1;
    nv = block_sum_d(nv, sh);
    if (threadIdx.x == 0) cnt[b] = R * nv;
}

void balance_valid_counts(double *cnt, const uint8_t *valid, int B, long T, double R) {
    if (B < 1) return;
    // the mask in (or nothing), a count per sequence out
    LAUNCH(k_valid_counts, (unsigned)B, 128, 0,
           kernel_cost((double)B * T, (valid ? (double)B * T : 0) + (double)B * sizeof(double)))(cnt, valid, T, R);
    CHECK_LAUNCH();
}

void balance_chunk_sums(double *f, double *P, const double *f_part, const double *P_part, long chunks, size_t n) {
    // the partials in, two sums per output out
    LAUNCH(k_balance_chunk_sums, grid_for(n, 256), 256, 0,
           kernel_cost(2.0 * chunks * n, (2.0 * chunks * n + 2.0 * n) * sizeof(double)))(f, P, f_part, P_part, chunks,
                                                                                       n);
    CHECK_LAUNCH();
}
