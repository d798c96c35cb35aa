// CUDA: sigmoid top-k routing and the masked entropy regularizer (formulas in kernels/backend.h; the CPU version in
// kernels/cpu/cpu_routing.c is the reference these kernels mirror).
#include <cfloat>
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/entropy_reg_value.h"

__device__ __forceinline__ float sigmoidf_stable(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

// One thread per (n,g): insertion into the k slots (descending logit, ties to the lower index), exactly as the CPU.
__global__ void k_topk(int32_t *sel, float *gate, const float *logits, const uint8_t *drop, long rows, int G, int E,
                       int k) {
    for (long ng = blockIdx.x * (long)blockDim.x + threadIdx.x; ng < rows; ng += (long)gridDim.x * blockDim.x) {
        int g = (int)(ng % G);
        const float *l = logits + (size_t)ng * E;
        const uint8_t *dr = drop ? drop + (size_t)ng * E : nullptr;
        int32_t *s = sel + (size_t)ng * k;
        float *gv = gate + (size_t)ng * k;
        int count = 0;
        for (int e = 0; e < E; e++) {
            if (dr && dr[e]) continue;
            float val = l[e];
            if (count == k && !(val > gv[k - 1])) continue;
            int pos = count < k ? count : k - 1;
            while (pos > 0 && val > gv[pos - 1]) {
                gv[pos] = gv[pos - 1];
                s[pos] = s[pos - 1];
                pos--;
            }
            gv[pos] = val;
            s[pos] = e;
            if (count < k) count++;
        }
        for (int j = 0; j < count; j++) {
            gv[j] = sigmoidf_stable(gv[j]);
            s[j] += g * E;
        }
        for (int e = 0; e < E && count < k; e++)
            if (dr && dr[e]) {
                s[count] = g * E + e;
                gv[count] = 0.0f;
                count++;
            }
    }
}

void cuda_topk_sigmoid(Backend *be, int32_t *sel, scalar_t *gate, const scalar_t *logits, const uint8_t *drop, int N,
                       int G, int E, int k) {
    if (k < 1 || k > E) die("topk_sigmoid: k=%d must be in [1, E=%d]", k, E);
    long rows = (long)N * G;
    if (rows <= 0) return;
    LAUNCH(k_topk, grid_for((size_t)rows, 128), 128, 0)(sel, gate, logits, drop, rows, G, E, k);
    CHECK_LAUNCH();
}

__global__ void k_topk_bwd(float *dlogits, const float *dgate, const int32_t *sel, const float *gate, long rows, int G,
                           int E, int k) {
    // one thread per (n,g): its k slots hit distinct experts, so the += are race-free
    for (long ng = blockIdx.x * (long)blockDim.x + threadIdx.x; ng < rows; ng += (long)gridDim.x * blockDim.x) {
        int g = (int)(ng % G);
        for (int j = 0; j < k; j++) {
            size_t slot = (size_t)ng * k + j;
            int e = sel[slot] - g * E;
            if (e < 0 || e >= E) continue;
            float y = gate[slot];
            dlogits[(size_t)ng * E + e] += dgate[slot] * y * (1.0f - y);
        }
    }
}

void cuda_topk_sigmoid_backward(Backend *be, scalar_t *dlogits, const scalar_t *dgate, const int32_t *sel,
                                const scalar_t *gate, int N, int G, int E, int k) {
    long rows = (long)N * G;
    if (rows <= 0) return;
    LAUNCH(k_topk_bwd, grid_for((size_t)rows, 128), 128, 0)(dlogits, dgate, sel, gate, rows, G, E, k);
    CHECK_LAUNCH();
}

// ---------------------------------------------------------------- entropy regularizer
// Pass 1: logsumexp (double) of every softmax row (r,b,t,g); one warp per row.
__global__ void k_row_lse(double *lse, const float *logits, long rows, int E) {
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float *l = logits + (size_t)row * E;
    float mx = -FLT_MAX;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    mx = warp_max(mx);
    double s = 0;
    for (int e = lane; e < E; e += 32) s += exp((double)l[e] - mx);
    s = warp_sum_d(s);
    if (lane == 0) lse[row] = (double)mx + log(s);
}

// Pass 2: one block per (b,g): pbar_e = mean over valid (r,t) of softmax, in (r,t) order; H and log pbar.
__global__ void k_pbar(double *logpbar, double *H, const float *logits, const double *lse, const uint8_t *valid,
                       const double *cnt, int R, int B, int T, int G, int E) {
    DYNAMIC_SHARED(double, sh);
    int bg = blockIdx.x, b = bg / G, g = bg % G;
    double h_part = 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        double acc = 0;
        if (cnt[b] > 0) {
            for (int r = 0; r < R; r++)
                for (int t = 0; t < T; t++) {
                    if (valid && !valid[(size_t)b * T + t]) continue;
                    size_t row = (((size_t)r * B + b) * T + t) * G + g;
                    acc += exp((double)logits[row * E + e] - lse[row]);
                }
        }
        double pb = cnt[b] > 0 ? acc / cnt[b] : 0.0;
        if (pb > 0) h_part -= pb * log(pb);
        logpbar[(size_t)bg * E + e] = log(pb > DBL_MIN ? pb : DBL_MIN);
    }
    double h = block_sum_d(h_part, sh);
    if (threadIdx.x == 0) H[bg] = h;
}

// Pass 3: gradient, one warp per row (r,b,t,g).
__global__ void k_entropy_grad(float *dlogits, const float *logits, const double *lse, const double *logpbar,
                               const uint8_t *valid, const double *cnt, int B, int T, int G, int E, long rows,
                               double factor) {
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    int g = (int)(row % G);
    long rbt = row / G;
    int t = (int)(rbt % T), b = (int)((rbt / T) % B);
    float *dl = dlogits + (size_t)row * E;
    if (cnt[b] == 0 || (valid && !valid[(size_t)b * T + t])) {
        for (int e = lane; e < E; e += 32) dl[e] = 0.0f;
        return;
    }
    const float *l = logits + (size_t)row * E;
    const double *lp = logpbar + ((size_t)b * G + g) * E;
    double r_lse = lse[row], part = 0;
    for (int e = lane; e < E; e += 32) part += exp((double)l[e] - r_lse) * lp[e];
    double avg = warp_sum_d(part);
    for (int e = lane; e < E; e += 32) {
        double p = exp((double)l[e] - r_lse);
        dl[e] = (float)(factor * p * (lp[e] - avg));
    }
}

double cuda_entropy_reg(Backend *be, scalar_t *dlogits, const scalar_t *logits, const uint8_t *valid, int R, int B,
                        int T, int G, int E, scalar_t coef) {
    long rows = (long)R * B * T * G;
    size_t n_logits = (size_t)rows * E;
    // counts per sequence on the host (the mask is B*T bytes)
    std::vector<double> cnt(B > 0 ? B : 1, 0.0);
    int n_seq = 0;
    if (valid) {
        uint8_t *hv = (uint8_t *)cuda_host_scratch(be, HS_A, (size_t)B * T);
        CHECK_CUDA(cudaMemcpy(hv, valid, (size_t)B * T, cudaMemcpyDeviceToHost));
        for (int b = 0; b < B; b++) {
            long nv = 0;
            for (int t = 0; t < T; t++) nv += hv[(size_t)b * T + t] != 0;
            cnt[b] = (double)R * (double)nv;
        }
    } else {
        for (int b = 0; b < B; b++) cnt[b] = (double)R * T;
    }
    for (int b = 0; b < B; b++) n_seq += cnt[b] > 0;
    if (n_seq == 0 || R == 0 || rows == 0) {
        if (dlogits && n_logits) CHECK_CUDA(cudaMemsetAsync(dlogits, 0, n_logits * sizeof(float), 0));
        return 0.0;
    }
    double *d_cnt = (double *)cuda_scratch(be, CS_A, (size_t)B * sizeof(double));
    double *d_lse = (double *)cuda_scratch(be, CS_B, (size_t)rows * sizeof(double));
    double *d_logpbar = (double *)cuda_scratch(be, CS_C, (size_t)B * G * E * sizeof(double));
    double *d_H = (double *)cuda_scratch(be, CS_D, (size_t)B * G * sizeof(double));
    CHECK_CUDA(cudaMemcpy(d_cnt, cnt.data(), (size_t)B * sizeof(double), cudaMemcpyHostToDevice));
    LAUNCH(k_row_lse, (unsigned)((rows + 7) / 8), 256, 0)(d_lse, logits, rows, E);
    CHECK_LAUNCH();
    LAUNCH(k_pbar, B * G, 128, 128 * sizeof(double))(d_logpbar, d_H, logits, d_lse, valid, d_cnt, R, B, T, G, E);
    CHECK_LAUNCH();
    std::vector<double> H((size_t)B * G);
    CHECK_CUDA(cudaMemcpy(H.data(), d_H, (size_t)B * G * sizeof(double), cudaMemcpyDeviceToHost));

    // value: the shared host formula (kernels/entropy_reg_value.c), the same order as the CPU backend
    double grad_factor;
    double value = entropy_reg_value(cnt.data(), H.data(), B, G, n_seq, &grad_factor);
    if (dlogits) {
        double factor = (double)coef * grad_factor;
        LAUNCH(k_entropy_grad, (unsigned)((rows + 7) / 8), 256, 0)(dlogits, logits, d_lse, d_logpbar, valid, d_cnt, B, T, G,
                                                             E, rows, factor);
        CHECK_LAUNCH();
    }
    return value;
}
