// CUDA: seq_balance, DeepSeek-V3's sequence-wise balance loss (formula: kernels/backend_ops.h; the CPU reference is
// kernels/cpu/cpu_seq_balance.c). The statistics accumulate in position order within each chunk of BALANCE_CHUNK
// positions and then over the chunks in order, per (sequence, expert); the scalar part is the shared formula
// (kernels/seq_balance_value.h) on one device thread: deterministic, and the CPU's sums up to rounding (the same sums
// for T <= 256). Nothing is read back to the host but the value of the op that returns it.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/seq_balance_value.h"

// Device buffers (the routing/balance ops' slots, cuda_common.cuh: no other op's data is alive during this one)
enum {
    SCRATCH_SEQB_FACTOR = 0, // double[B]: coef / (B_c n_b), the gradient's scale per sequence
    SCRATCH_SEQB_NORM = 1,   // double[rows]: each row's normaliser: sum of sigmoids, or log-sum-exp
    SCRATCH_SEQB_STATS = 2,  // double[B, E] | double[B, E] | double[B]: selections per expert, then f | sums of the
                             // normalised scores | counted positions n_b
    SCRATCH_SEQB_LOAD_PARTIAL = 4, // double[chunks, B, E]: each chunk of positions' selections (k_seqb_stats_part)
    SCRATCH_SEQB_PROB_PARTIAL = 5, // double[chunks, B, E]: each chunk's score sums
};

__device__ __forceinline__ double seqb_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// s'_e of a row with normaliser norm (sum of sigmoids, or the log-sum-exp)
__device__ __forceinline__ double seqb_score(double l, double norm, int softmax) {
    return softmax ? exp(l - norm) : seqb_sigmoid(l) / norm;
}

// One thread per row: the normaliser, in double (E is small: a routing row)
__global__ void k_seqb_norm(double *norm, const float *logits, long rows, int E, int softmax) {
    for (long row = blockIdx.x * (long)blockDim.x + threadIdx.x; row < rows; row += (long)gridDim.x * blockDim.x) {
        const float *l = logits + (size_t)row * E;
        double s = 0;
        if (softmax) {
            double mx = -INFINITY;
            for (int e = 0; e < E; e++) mx = fmax(mx, (double)l[e]);
            for (int e = 0; e < E; e++) s += exp((double)l[e] - mx);
            norm[row] = mx + log(s);
        } else {
            for (int e = 0; e < E; e++) s += seqb_sigmoid((double)l[e]);
            norm[row] = s;
        }
    }
}

// One block per (sequence b, chunk of BALANCE_CHUNK of its positions), one thread per expert e (strided): the chunk's
// selections and score sum of e over b's counted positions, in position order. part[chunk, B, E].
__global__ void k_seqb_stats_part(double *f_part, double *P_part, const float *logits, const double *norm,
                                  const int32_t *sel, const uint8_t *valid, int B, int T, int E, int k, int softmax) {
    int b = blockIdx.x;
    int c = blockIdx.y, t0 = c * BALANCE_CHUNK, t1 = min(T, t0 + BALANCE_CHUNK);
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        double load = 0, prob = 0;
        for (int t = t0; t < t1; t++) {
            size_t row = (size_t)b * T + t;
            if (valid && !valid[row]) continue;
            for (int j = 0; j < k; j++) load += sel[row * k + j] == e;
            prob += seqb_score((double)logits[row * E + e], norm[row], softmax);
        }
        size_t o = ((size_t)c * B + b) * E + e;
        f_part[o] = load;
        P_part[o] = prob;
    }
}

// The value, f and the gradient's factors from the counts n_b: the shared formula (kernels/seq_balance_value.h), in
// the CPU backend's order, on one thread (B x E: the micro-batch's sequences by the experts). *value = it (add:
// *value += it, in stream order).
__global__ void k_seqb_value(double *value, double *f, double *P, double *factor, const double *n, int B, int E, int k,
                             double coef, int add) {
    const double v = seq_balance_value(f, P, n, B, E, k, coef, factor);
    *value = add ? *value + v : v;
}

// One thread per row: dl_e += factor_b * w_e * (f_e - sum_i f_i s'_i) at counted positions (f normalised)
__global__ void k_seqb_grad(float *dlogits, const float *logits, const double *norm, const double *f,
                            const double *factor, const uint8_t *valid, long rows, int T, int E, int softmax) {
    for (long row = blockIdx.x * (long)blockDim.x + threadIdx.x; row < rows; row += (long)gridDim.x * blockDim.x) {
        const int b = (int)(row / T);
        if ((valid && !valid[row]) || factor[b] == 0) continue;
        const float *l = logits + (size_t)row * E;
        const double *fb = f + (size_t)b * E;
        double fs = 0;
        for (int e = 0; e < E; e++) fs += fb[e] * seqb_score((double)l[e], norm[row], softmax);
        for (int e = 0; e < E; e++) {
            double s = seqb_score((double)l[e], norm[row], softmax);
            double w = softmax ? s : seqb_sigmoid((double)l[e]) * (1.0 - seqb_sigmoid((double)l[e])) / norm[row];
            dlogits[(size_t)row * E + e] += (float)(factor[b] * w * (fb[e] - fs));
        }
    }
}

// seq_balance with its value written to (add: added to) *value on the device; nothing is read back.
static void seq_balance_queue(Backend *be, double *value, bool add, scalar_t *dlogits, const scalar_t *logits,
                              const int32_t *sel, const uint8_t *valid, int B, int T, int E, int k, RouterKind kind,
                              scalar_t coef) {
    if (kind != ROUTER_SIGMOID && kind != ROUTER_SOFTMAX) die("seq_balance: unknown router kind %d", (int)kind);
    if (dlogits) cuda_weights_written(be, dlogits, (size_t)B * T * E * sizeof(float));
    const int softmax = kind == ROUTER_SOFTMAX;
    const long rows = (long)B * T;
    if (rows == 0) {
        if (!add) CHECK_CUDA(cudaMemsetAsync(value, 0, sizeof(double), 0));
        return;
    }
    const dim3 grid = balance_grid("seq_balance", B, T); // checked before any work
    const size_t BE = (size_t)B * E;
    double *d_norm = (double *)cuda_scratch(be, SCRATCH_SEQB_NORM, (size_t)rows * sizeof(double));
    double *d_stats = (double *)cuda_scratch(be, SCRATCH_SEQB_STATS, (2 * BE + B) * sizeof(double));
    double *d_f = d_stats, *d_P = d_stats + BE, *d_n = d_stats + 2 * BE;
    double *d_factor = (double *)cuda_scratch(be, SCRATCH_SEQB_FACTOR, (size_t)B * sizeof(double));
    balance_valid_counts(d_n, valid, B, T, 1.0);
    // the logits in, one double per row out
    LAUNCH(k_seqb_norm, grid_for((size_t)rows, 128), 128, 0,
           kernel_cost(4.0 * rows * E, (double)rows * (E * sizeof(float) + sizeof(double))))(d_norm, logits, rows, E,
                                                                                             softmax);
    CHECK_LAUNCH();
    // per (sequence, chunk): its logits, normalisers and ids in, a pass over a row's k ids per expert; partials out
    const long chunks = balance_chunks(T);
    double *d_f_part = (double *)cuda_scratch(be, SCRATCH_SEQB_LOAD_PARTIAL, (size_t)chunks * BE * sizeof(double));
    double *d_P_part = (double *)cuda_scratch(be, SCRATCH_SEQB_PROB_PARTIAL, (size_t)chunks * BE * sizeof(double));
    LAUNCH(k_seqb_stats_part, grid, 128, 0,
           kernel_cost((double)rows * E * (k + 4), (double)rows * (E * sizeof(float) + k * sizeof(int32_t) +
                                                                  sizeof(double)) +
                                                       2.0 * chunks * BE * sizeof(double)))(
        d_f_part, d_P_part, logits, d_norm, sel, valid, B, T, E, k, softmax);
    CHECK_LAUNCH();
    balance_chunk_sums(d_f, d_P, d_f_part, d_P_part, chunks, BE);
    // ids outside [0, E) cannot come from topk_select: they count nowhere here (the CPU reference dies on them)
    // f, P and the counts in, f and P normalised, the factors and the value out
    LAUNCH(k_seqb_value, 1, 1, 0, kernel_cost(4.0 * BE, (4.0 * BE + 2.0 * B + 1 + add) * sizeof(double)))(
        value, d_f, d_P, d_factor, d_n, B, E, k, (double)coef, add);
    CHECK_LAUNCH();
    if (dlogits) {
        LAUNCH(k_seqb_grad, grid_for((size_t)rows, 128), 128, 0,
               kernel_cost(10.0 * rows * E, (double)rows * (3 * E * sizeof(float) + sizeof(double)) +
                                                (double)BE * sizeof(double)))(dlogits, logits, d_norm, d_f, d_factor,
                                                                              valid, rows, T, E, softmax);
        CHECK_LAUNCH();
    }
}

double cuda_seq_balance(Backend *be, scalar_t *dlogits, const scalar_t *logits, const int32_t *sel,
                        const uint8_t *valid, int B, int T, int E, int k, RouterKind kind, scalar_t coef) {
    seq_balance_queue(be, &cuda_readback(be)->value, false, dlogits, logits, sel, valid, B, T, E, k, kind, coef);
    return cuda_readback_value(be, 0.0); // the one copy back, with the device's error record
}

void cuda_seq_balance_add(Backend *be, double *sum, scalar_t *dlogits, const scalar_t *logits, const int32_t *sel,
                          const uint8_t *valid, int B, int T, int E, int k, RouterKind kind, scalar_t coef) {
    seq_balance_queue(be, sum, true, dlogits, logits, sel, valid, B, T, E, k, kind, coef);
}
