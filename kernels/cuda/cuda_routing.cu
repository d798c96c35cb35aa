// CUDA: the routing primitives (top-k selection, gating transforms) and the balancing losses (masked entropy
// regularizer, Switch loss) (formulas in kernels/backend_ops.h; the CPU version in
// kernels/cpu/cpu_routing.c is the reference these kernels mirror).
#include <cfloat>
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/entropy_reg_value.h"
#include "kernels/router_gates_grad.h"
#include "kernels/routing_key.h"
#include "kernels/routing_topk.h"
#include "kernels/switch_balance_value.h"

__device__ __forceinline__ float sigmoidf_stable(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

// ---------------------------------------------------------------- costs (cuda_common.cuh)
// A routing row: its E logits in (and a drop byte per expert where there is a mask), about 4 operations per expert
// for the key and the comparison with the current k-th best, the k ids out.
static inline KernelCost topk_cost(long rows, int E, int k, bool drop) {
    return kernel_cost(4.0 * rows * E,
                       (double)rows * E * (sizeof(float) + (drop ? 1 : 0)) + (double)rows * k * sizeof(int32_t));
}
// Gates: sigmoid reads the k selected logits, softmax the whole row; the k ids in and the k gates out.
static inline KernelCost gates_cost(long rows, int E, int k, bool softmax) {
    double slots = (double)rows * k, read = softmax ? (double)rows * E : slots;
    return kernel_cost(softmax ? 3.0 * rows * E + 3.0 * slots : 4.0 * slots,
                       read * sizeof(float) + slots * (sizeof(int32_t) + sizeof(float)));
}
// Gate backward: per slot dgate, the id and the gate in, a logit gradient read and written; the general kernel also
// reads every logit and writes every logit gradient of the row.
static inline KernelCost gates_bwd_cost(long rows, int E, int k, bool whole_row) {
    double slots = (double)rows * k, cells = whole_row ? (double)rows * E : 0;
    return kernel_cost(whole_row ? 6.0 * cells : 4.0 * slots, slots * (2 * sizeof(float) + sizeof(int32_t)) +
                                                                  (whole_row ? 3 * cells : 2 * slots) * sizeof(float));
}
// A softmax row pass over rows x E logits: each logit read once, per element ops_per, per row one double written.
static inline KernelCost row_pass_cost(long rows, int E, double ops_per, bool writes_rows) {
    double cells = (double)rows * E;
    return kernel_cost(ops_per * cells, cells * sizeof(float) * (writes_rows ? 2 : 1) + (double)rows * sizeof(double));
}

// One thread per (n,g): routing_topk_row (kernels/routing_topk.h), the same code as the CPU reference's.
__global__ void k_topk_select(int32_t *sel, const float *logits, const uint8_t *drop, const float *bias, int softmax,
                              long rows, int G, int E, int k, int n_group, int topk_group) {
    for (long ng = blockIdx.x * (long)blockDim.x + threadIdx.x; ng < rows; ng += (long)gridDim.x * blockDim.x) {
        int g = (int)(ng % G);
        routing_topk_row(sel + (size_t)ng * k, logits + (size_t)ng * E, bias ? bias + (size_t)g * E : nullptr,
                         drop ? drop + (size_t)ng * E : nullptr, softmax, g, E, k, n_group, topk_group);
    }
}

void cuda_topk_select(Backend *be, int32_t *sel, const scalar_t *logits, const uint8_t *drop, const scalar_t *bias,
                      RouterKind score, int N, int G, int E, int k, int n_group, int topk_group) {
    cuda_weights_written(be, sel, (size_t)N * G * k * sizeof(int32_t));
    (void)be;
    if (k < 1 || k > E) die("topk_select: k=%d must be in [1, E=%d]", k, E);
    if (score != ROUTER_SIGMOID && score != ROUTER_SOFTMAX) die("topk_select: unknown router kind %d", (int)score);
    if (!routing_groups_ok(E, k, n_group, topk_group))
        die("topk_select: n_group=%d topk_group=%d invalid for E=%d k=%d", n_group, topk_group, E, k);
    long rows = (long)N * G;
    if (rows <= 0) return;
    LAUNCH(k_topk_select, grid_for((size_t)rows, 128), 128, 0, topk_cost(rows, E, k, drop != nullptr))(
        sel, logits, drop, bias, score == ROUTER_SOFTMAX, rows, G, E, k, n_group, topk_group);
    CHECK_LAUNCH();
}

// One thread per (n,g): an atomic increment per counted slot. Ids outside the group cannot come from topk_select;
// they are skipped here (the CPU reference dies on them; a kernel cannot).
__global__ void k_expert_count(unsigned long long *counts, const int32_t *sel, const uint8_t *drop,
                               const uint8_t *valid, long rows, int G, int E, int k) {
    for (long ng = blockIdx.x * (long)blockDim.x + threadIdx.x; ng < rows; ng += (long)gridDim.x * blockDim.x) {
        if (valid && !valid[ng / G]) continue;
        const int g = (int)(ng % G);
        const uint8_t *dr = drop ? drop + (size_t)ng * E : nullptr;
        const int32_t *s = sel + (size_t)ng * k;
        for (int j = 0; j < k; j++) {
            const int e = s[j] - g * E;
            if (e < 0 || e >= E || (dr && dr[e])) continue; // a filler slot (gate 0) routes nothing
            atomicAdd(&counts[(size_t)g * E + e], 1ULL);
        }
    }
}

void cuda_expert_count(Backend *be, int64_t *counts, const int32_t *sel, const uint8_t *drop, const uint8_t *valid,
                       int N, int G, int E, int k) {
    cuda_weights_written(be, counts, (size_t)G * E * sizeof(int64_t));
    (void)be;
    long rows = (long)N * G;
    if (rows <= 0) return;
    static_assert(sizeof(unsigned long long) == sizeof(int64_t), "int64 counts as CUDA's 64-bit atomics");
    // the ids in (and drop bytes, the mask); one atomic read-modify-write of an 8-byte counter per counted slot
    LAUNCH(k_expert_count, grid_for((size_t)rows, 128), 128, 0,
           kernel_cost((double)rows * k, (double)rows * k * (sizeof(int32_t) + 2 * sizeof(int64_t)) +
                                             (drop ? (double)rows * E : 0) + (valid ? (double)N : 0)))(
        (unsigned long long *)counts, sel, drop, valid, rows, G, E, k);
    CHECK_LAUNCH();
}

// One thread per (n,g). Expert ids outside the group cannot come from topk_select; they are skipped (gate 0) here
// and reported by the CPU reference in the tests.
__global__ void k_router_gates(float *gate, const float *logits, const int32_t *sel, const uint8_t *drop, long rows,
                               int G, int E, int k, int softmax, int renorm) {
    for (long ng = blockIdx.x * (long)blockDim.x + threadIdx.x; ng < rows; ng += (long)gridDim.x * blockDim.x) {
        int g = (int)(ng % G);
        const float *l = logits + (size_t)ng * E;
        const uint8_t *dr = drop ? drop + (size_t)ng * E : nullptr;
        const int32_t *s = sel + (size_t)ng * k;
        float *gv = gate + (size_t)ng * k;
        double mx = 0, sum = 1;
        if (softmax) routing_softmax_stats_f(l, E, &mx, &sum);
        double total = 0;
        for (int j = 0; j < k; j++) {
            int e = s[j] - g * E;
            if (e < 0 || e >= E || (dr && dr[e])) gv[j] = 0.0f;
            else gv[j] = softmax ? (float)(exp((double)l[e] - mx) / sum) : sigmoidf_stable(l[e]);
            total += gv[j];
        }
        if (renorm && total > 0)
            for (int j = 0; j < k; j++) gv[j] = (float)((double)gv[j] / total);
    }
}

void cuda_router_gates(Backend *be, scalar_t *gate, const scalar_t *logits, const int32_t *sel, const uint8_t *drop,
                       int N, int G, int E, int k, RouterKind kind, int renorm) {
    cuda_weights_written(be, gate, (size_t)N * G * k * sizeof(float));
    (void)be;
    if (kind != ROUTER_SIGMOID && kind != ROUTER_SOFTMAX) die("router_gates: unknown router kind %d", (int)kind);
    long rows = (long)N * G;
    if (rows <= 0) return;
    LAUNCH(k_router_gates, grid_for((size_t)rows, 128), 128, 0, gates_cost(rows, E, k, kind == ROUTER_SOFTMAX))(
        gate, logits, sel, drop, rows, G, E, k, kind == ROUTER_SOFTMAX, renorm != 0);
    CHECK_LAUNCH();
}

// Sigmoid without renorm (MoEUT): dl += dgate * gate * (1 - gate) at the selected experts; one thread per (n,g), its
// k slots hit distinct experts, so the += are race-free.
__global__ void k_sigmoid_gates_bwd(float *dlogits, const float *dgate, const int32_t *sel, const float *gate,
                                    const uint8_t *drop, long rows, int G, int E, int k) {
    for (long ng = blockIdx.x * (long)blockDim.x + threadIdx.x; ng < rows; ng += (long)gridDim.x * blockDim.x) {
        int g = (int)(ng % G);
        const uint8_t *dr = drop ? drop + (size_t)ng * E : nullptr;
        for (int j = 0; j < k; j++) {
            size_t slot = (size_t)ng * k + j;
            int e = sel[slot] - g * E;
            if (e < 0 || e >= E || (dr && dr[e])) continue;
            float y = gate[slot];
            dlogits[(size_t)ng * E + e] += dgate[slot] * y * (1.0f - y);
        }
    }
}

// The general case (kernels/router_gates_grad.h, shared with the CPU reference), one thread per (n,g).
__global__ void k_router_gates_bwd(float *dlogits, const float *dgate, const float *gate, const float *logits,
                                   const int32_t *sel, const uint8_t *drop, long rows, int G, int E, int k,
                                   int softmax, int renorm) {
    for (long ng = blockIdx.x * (long)blockDim.x + threadIdx.x; ng < rows; ng += (long)gridDim.x * blockDim.x) {
        int g = (int)(ng % G);
        const float *l = logits + (size_t)ng * E;
        const uint8_t *dr = drop ? drop + (size_t)ng * E : nullptr;
        const int32_t *s = sel + (size_t)ng * k;
        const float *c = dgate + (size_t)ng * k, *gv = gate + (size_t)ng * k;
        float *dl = dlogits + (size_t)ng * E;
        double mx = 0, sum = 1;
        if (softmax) routing_softmax_stats_f(l, E, &mx, &sum);
        router_gates_grad_row(dl, l, s, c, gv, dr, softmax, renorm, g, E, k, mx, sum);
    }
}

void cuda_router_gates_backward(Backend *be, scalar_t *dlogits, const scalar_t *dgate, const scalar_t *gate,
                                const scalar_t *logits, const int32_t *sel, const uint8_t *drop, int N, int G, int E,
                                int k, RouterKind kind, int renorm) {
    cuda_weights_written(be, dlogits, (size_t)N * G * E * sizeof(float));
    (void)be;
    if (kind != ROUTER_SIGMOID && kind != ROUTER_SOFTMAX)
        die("router_gates_backward: unknown router kind %d", (int)kind);
    long rows = (long)N * G;
    if (rows <= 0) return;
    if (kind == ROUTER_SIGMOID && !renorm)
        LAUNCH(k_sigmoid_gates_bwd, grid_for((size_t)rows, 128), 128, 0, gates_bwd_cost(rows, E, k, false))(
            dlogits, dgate, sel, gate, drop, rows, G, E, k);
    else
        LAUNCH(k_router_gates_bwd, grid_for((size_t)rows, 128), 128, 0, gates_bwd_cost(rows, E, k, true))(
            dlogits, dgate, gate, logits, sel, drop, rows, G, E, k, kind == ROUTER_SOFTMAX, renorm != 0);
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

// Pass 2a: one block per ((b,g), chunk of the R*T (r,t) pairs, r-major): the chunk's sum of the softmax of every e
// over its valid positions. part[chunk, B*G, E].
__global__ void k_pbar_part(double *part, const float *logits, const double *lse, const uint8_t *valid, int R, int B,
                            int T, int G, int E) {
    int bg = blockIdx.x, b = bg / G, g = bg % G;
    long c = blockIdx.y, rt0 = c * BALANCE_CHUNK, rt1 = min((long)R * T, rt0 + BALANCE_CHUNK);
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        double acc = 0;
        for (long rt = rt0; rt < rt1; rt++) {
            int r = (int)(rt / T), t = (int)(rt % T);
            if (valid && !valid[(size_t)b * T + t]) continue;
            size_t row = (((size_t)r * B + b) * T + t) * G + g;
            acc += exp((double)logits[row * E + e] - lse[row]);
        }
        part[((size_t)c * B * G + bg) * E + e] = acc;
    }
}

// Pass 2b: one block per (b,g): pbar_e = (the chunks' sums, in chunk order) / cnt[b]; H and log pbar.
__global__ void k_pbar(double *logpbar, double *H, const double *part, long chunks, const double *cnt, int B, int G,
                       int E) {
    DYNAMIC_SHARED(double, sh);
    int bg = blockIdx.x, b = bg / G;
    double h_part = 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        double acc = 0;
        if (cnt[b] > 0)
            for (long c = 0; c < chunks; c++) acc += part[((size_t)c * B * G + bg) * E + e];
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
                               const double *d_factor) {
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
    const double factor = *d_factor;
    double r_lse = lse[row], part = 0;
    for (int e = lane; e < E; e += 32) part += exp((double)l[e] - r_lse) * lp[e];
    double avg = warp_sum_d(part);
    for (int e = lane; e < E; e += 32) {
        double p = exp((double)l[e] - r_lse);
        dl[e] = (float)(factor * p * (lp[e] - avg));
    }
}

// k_pbar_part: every logit and row lse in (R x B x T x G rows), a softmax term each; the partial sums out.
static inline KernelCost pbar_part_cost(int R, int B, int T, int G, int E, long chunks) {
    double rows = (double)R * B * T * G, cells = rows * E, parts = (double)chunks * B * G * E;
    return kernel_cost(3.0 * cells + parts, cells * sizeof(float) + rows * sizeof(double) + (double)B * T * G +
                                                parts * sizeof(double));
}

// k_pbar: the partial sums in, per (b, g) E log pbar and H out.
static inline KernelCost pbar_cost(int B, int G, int E, long chunks) {
    double bge = (double)B * G * E, parts = (double)chunks * bge;
    return kernel_cost(parts + 3.0 * bge, (parts + bge + (double)B * G + B) * sizeof(double));
}

// The value and the gradient's factor from H and the counts: the shared formula (kernels/entropy_reg_value.h), in
// the CPU backend's order, on one thread. *value = it (add: *value += it, in stream order: a sum over calls in call
// order); *factor = coef x its gradient factor (0 with no counted sequence, where every gradient row is 0 anyway).
__global__ void k_entropy_value(double *value, double *factor, const double *H, const double *cnt, int B, int G,
                                double coef, int add) {
    int n_seq = 0;
    for (int b = 0; b < B; b++) n_seq += cnt[b] > 0;
    double v = 0, grad_factor = 0;
    if (n_seq > 0) v = entropy_reg_value(cnt, H, B, G, n_seq, &grad_factor);
    *factor = coef * grad_factor;
    *value = add ? *value + v : v;
}

// entropy_reg with its value written to (add: added to) *value on the device; nothing is read back.
static void entropy_reg_queue(Backend *be, double *value, bool add, scalar_t *dlogits, const scalar_t *logits,
                              const uint8_t *valid, int R, int B, int T, int G, int E, scalar_t coef) {
    cuda_weights_written(be, dlogits, (size_t)R * B * T * G * E * sizeof(float));
    long rows = (long)R * B * T * G;
    size_t n_logits = (size_t)rows * E;
    const dim3 grid = balance_grid("entropy_reg", (long)B * G, (long)R * T); // checked before any work
    if (R == 0 || rows == 0) {
        if (dlogits && n_logits) CHECK_CUDA(cudaMemsetAsync(dlogits, 0, n_logits * sizeof(float), 0));
        if (!add) CHECK_CUDA(cudaMemsetAsync(value, 0, sizeof(double), 0));
        return;
    }
    // H [B, G], the counts per sequence [B] and the gradient's factor [1] side by side
    double *d_stats = (double *)cuda_scratch(be, SCRATCH_EREG_STATS, ((size_t)B * G + B + 1) * sizeof(double));
    double *d_H = d_stats, *d_cnt = d_stats + (size_t)B * G, *d_factor = d_cnt + B;
    double *d_lse = (double *)cuda_scratch(be, SCRATCH_BALANCE_LSE, (size_t)rows * sizeof(double));
    double *d_logpbar = (double *)cuda_scratch(be, SCRATCH_EREG_LOG_PBAR, (size_t)B * G * E * sizeof(double));
    balance_valid_counts(d_cnt, valid, B, T, (double)R);
    LAUNCH(k_row_lse, (unsigned)((rows + 7) / 8), 256, 0, row_pass_cost(rows, E, 4, false))(d_lse, logits, rows, E);
    CHECK_LAUNCH();
    const long chunks = balance_chunks((long)R * T);
    double *d_part = (double *)cuda_scratch(be, SCRATCH_EREG_PARTIAL, (size_t)chunks * B * G * E * sizeof(double));
    LAUNCH(k_pbar_part, grid, 128, 0, pbar_part_cost(R, B, T, G, E, chunks))(
        d_part, logits, d_lse, valid, R, B, T, G, E);
    CHECK_LAUNCH();
    LAUNCH(k_pbar, B * G, 128, 128 * sizeof(double), pbar_cost(B, G, E, chunks))(d_logpbar, d_H, d_part, chunks, d_cnt,
                                                                                 B, G, E);
    CHECK_LAUNCH();
    // H and the counts in, the value and the factor out: B^2 logarithms on one thread
    LAUNCH(k_entropy_value, 1, 1, 0,
           kernel_cost(2.0 * B * B + (double)B * G, ((double)B * G + B + 2 + add) * sizeof(double)))(
        value, d_factor, d_H, d_cnt, B, G, (double)coef, add);
    CHECK_LAUNCH();
    if (dlogits) {
        LAUNCH(k_entropy_grad, (unsigned)((rows + 7) / 8), 256, 0, row_pass_cost(rows, E, 7, true))(
            dlogits, logits, d_lse, d_logpbar, valid, d_cnt, B, T, G, E, rows, d_factor);
        CHECK_LAUNCH();
    }
}

double cuda_entropy_reg(Backend *be, scalar_t *dlogits, const scalar_t *logits, const uint8_t *valid, int R, int B,
                        int T, int G, int E, scalar_t coef) {
    entropy_reg_queue(be, &cuda_readback(be)->value, false, dlogits, logits, valid, R, B, T, G, E, coef);
    return cuda_readback_value(be, 0.0); // the one copy back, with the device's error record
}

void cuda_entropy_reg_add(Backend *be, double *sum, scalar_t *dlogits, const scalar_t *logits, const uint8_t *valid,
                          int R, int B, int T, int G, int E, scalar_t coef) {
    entropy_reg_queue(be, sum, true, dlogits, logits, valid, R, B, T, G, E, coef);
}

// ---------------------------------------------------------------- Switch load-balancing loss
// One block per (group g, chunk of BALANCE_CHUNK positions), one thread per expert e (strided): the chunk's load count
// and probability sum of e over its valid positions, in position order. lse[N*G] from k_row_lse. part[chunk, G, E].
__global__ void k_switch_stats_part(double *f_part, double *P_part, const float *logits, const double *lse,
                                    const int32_t *sel, const uint8_t *valid, long N, int G, int E, int k) {
    int g = blockIdx.x;
    long c = blockIdx.y, t0 = c * BALANCE_CHUNK, t1 = min(N, t0 + BALANCE_CHUNK);
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        double load = 0, prob = 0;
        for (long t = t0; t < t1; t++) {
            if (valid && !valid[t]) continue;
            size_t row = (size_t)t * G + g;
            const int32_t *s = sel + row * k;
            for (int j = 0; j < k; j++) load += s[j] == g * E + e;
            prob += exp((double)logits[row * E + e] - lse[row]);
        }
        size_t o = ((size_t)c * G + g) * E + e;
        f_part[o] = load;
        P_part[o] = prob;
    }
}

// One warp per row (t,g): dl = factor * p (f - sum_i f_i p_i) at valid positions, 0 elsewhere. f is normalised.
__global__ void k_switch_grad(float *dlogits, const float *logits, const double *lse, const double *f,
                              const uint8_t *valid, long rows, int G, int E, const double *d_factor) {
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    long t = row / G;
    int g = (int)(row % G);
    float *dl = dlogits + (size_t)row * E;
    if (valid && !valid[t]) {
        for (int e = lane; e < E; e += 32) dl[e] = 0.0f;
        return;
    }
    const float *l = logits + (size_t)row * E;
    const double *fg = f + (size_t)g * E;
    const double factor = *d_factor;
    double r_lse = lse[row], part = 0;
    for (int e = lane; e < E; e += 32) part += exp((double)l[e] - r_lse) * fg[e];
    double fp = warp_sum_d(part);
    for (int e = lane; e < E; e += 32) {
        double p = exp((double)l[e] - r_lse);
        dl[e] = (float)(factor * p * (fg[e] - fp));
    }
}

// The value, the load fraction f and the gradient's factor from the counts: the shared formula
// (kernels/switch_balance_value.h), in the CPU backend's order, on one thread (f normalised in place, for
// k_switch_grad).
// *value = it (add: *value += it, in stream order); *factor = coef x its gradient factor (0 with no valid position,
// where every gradient row is 0 anyway).
__global__ void k_switch_value(double *value, double *factor, double *f, double *P, const double *n_valid, int G,
                               int E, int k, double coef, int add) {
    const long n = (long)*n_valid;
    double v = 0, grad_factor = 0;
    if (n > 0) v = switch_balance_value(f, P, G, E, k, n, &grad_factor);
    *factor = coef * grad_factor;
    *value = add ? *value + v : v;
}

// switch_balance with its value written to (add: added to) *value on the device; nothing is read back.
static void switch_balance_queue(Backend *be, double *value, bool add, scalar_t *dlogits, const scalar_t *logits,
                                 const int32_t *sel, const uint8_t *valid, int B, int T, int G, int E, int k,
                                 scalar_t coef) {
    cuda_weights_written(be, dlogits, (size_t)B * T * G * E * sizeof(float));
    long N = (long)B * T, rows = N * G;
    size_t GE = (size_t)G * E;
    const dim3 grid = balance_grid("switch_balance", G, N); // checked before any work
    if (rows == 0) {
        if (!add) CHECK_CUDA(cudaMemsetAsync(value, 0, sizeof(double), 0));
        return;
    }
    // f [G, E], P [G, E], the valid positions n and the gradient's factor side by side
    double *d_stats = (double *)cuda_scratch(be, SCRATCH_SWB_STATS, (2 * GE + 2) * sizeof(double));
    double *d_f = d_stats, *d_P = d_stats + GE, *d_n = d_stats + 2 * GE, *d_factor = d_n + 1;
    double *d_lse = (double *)cuda_scratch(be, SCRATCH_BALANCE_LSE, (size_t)rows * sizeof(double));
    balance_valid_counts(d_n, valid, 1, N, 1.0);
    LAUNCH(k_row_lse, (unsigned)((rows + 7) / 8), 256, 0, row_pass_cost(rows, E, 4, false))(d_lse, logits, rows, E);
    CHECK_LAUNCH();
    // per (group, chunk): every logit and lse of its rows in and, per expert, a pass over the rows' k ids; partials out
    const long chunks = balance_chunks(N);
    double *d_f_part = (double *)cuda_scratch(be, SCRATCH_SWB_LOAD_PARTIAL, (size_t)chunks * GE * sizeof(double));
    double *d_P_part = (double *)cuda_scratch(be, SCRATCH_SWB_PROB_PARTIAL, (size_t)chunks * GE * sizeof(double));
    LAUNCH(k_switch_stats_part, grid, 128, 0,
           kernel_cost((double)rows * E * (k + 3), (double)rows * (E * sizeof(float) + k * sizeof(int32_t) +
                                                                  sizeof(double)) +
                                                       2.0 * chunks * GE * sizeof(double)))(
        d_f_part, d_P_part, logits, d_lse, sel, valid, N, G, E, k);
    CHECK_LAUNCH();
    balance_chunk_sums(d_f, d_P, d_f_part, d_P_part, chunks, GE);
    // f, P and n in, f and P normalised, the value and the factor out: 3 G E operations on one thread
    LAUNCH(k_switch_value, 1, 1, 0, kernel_cost(3.0 * GE, (4.0 * GE + 3 + add) * sizeof(double)))(
        value, d_factor, d_f, d_P, d_n, G, E, k, (double)coef, add);
    CHECK_LAUNCH();
    if (dlogits) {
        LAUNCH(k_switch_grad, (unsigned)((rows + 7) / 8), 256, 0, row_pass_cost(rows, E, 7, true))(
            dlogits, logits, d_lse, d_f, valid, rows, G, E, d_factor);
        CHECK_LAUNCH();
    }
}

double cuda_switch_balance(Backend *be, scalar_t *dlogits, const scalar_t *logits, const int32_t *sel,
                           const uint8_t *valid, int B, int T, int G, int E, int k, scalar_t coef) {
    switch_balance_queue(be, &cuda_readback(be)->value, false, dlogits, logits, sel, valid, B, T, G, E, k, coef);
    return cuda_readback_value(be, 0.0); // the one copy back, with the device's error record
}

void cuda_switch_balance_add(Backend *be, double *sum, scalar_t *dlogits, const scalar_t *logits, const int32_t *sel,
                             const uint8_t *valid, int B, int T, int G, int E, int k, scalar_t coef) {
    switch_balance_queue(be, sum, true, dlogits, logits, sel, valid, B, T, G, E, k, coef);
}
