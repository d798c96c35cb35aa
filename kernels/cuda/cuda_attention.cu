// CUDA: RoPE, fused causal attention for short sequences, and the choice between it, the cuBLAS path for long ones
// (cuda_attention_gemm.cu) and the tensor-core FlashAttention-2 kernels (cuda_attention_flash.cu).
// The fused attention uses one warp per query row (forward, dq) or per key row (dk, dv): lanes own the head dimensions
// d = lane + 32u, every score is a warp butterfly sum (same value in all lanes, fixed order), keys are visited in
// order with an online softmax. No atomics: dq and (dk, dv) come from separate kernels, so the results are
// deterministic. bf16 mode rounds q, k, v, dout and the probabilities to bf16 (autocast SDPA emulation).
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"

#define ATT_MAX_U 8 // head dim up to 32 * 8 = 256

// DMMATH_CUDA_ATTENTION=auto takes the cuBLAS path from this many query rows on (and for head dims the fused kernels
// cannot hold), the fused kernels below it. Query rows, not keys: KV-cache decode (1 to a few queries against a long
// cache) stays fused, since packing the whole cache head-major for a one-row GEMM per head would only add traffic.
// Measured on an H100 (make bench-gpu, the paper's dense config: T = 1024, 64 windows per step, bf16): 10 training
// steps took 10.2 s with the cuBLAS path and 77.3 s with the fused kernels (7.6x). Where between 1 and 1024 query
// rows the two cross is not measured: 64 is still a guess (DMMATH_CUDA_ATTENTION=fused|gemm forces either).
#define ATTN_GEMM_MIN_T 64
// Where the size rule says cuBLAS, auto takes the flash kernels instead when they can run (bf16 mode, head dims up to
// ATTN_FLASH_D_MAX): no T x T scores in HBM. Adopted on the cost model's word, as matmul's split-K was (make
// bench-model, H100: the paper MoEUT step 367 -> 304 ms, dense 513 -> 276 ms); never measured on a GPU, where the
// GPU checklist's bench step runs DMMATH_CUDA_ATTENTION=gemm (the choice before) beside auto.

enum AttentionPath { PATH_FUSED, PATH_GEMM, PATH_FLASH };

// The path of one call. DMMATH_CUDA_ATTENTION=flash where cuda_attention_flash.cu cannot run (fp32 mode: wmma has no
// fp32 inputs, and an fp32 variant on CUDA cores would be the fused kernels again; head dims above ATTN_FLASH_D_MAX)
// takes auto's path and says so once per backend.
static AttentionPath attention_path(Backend *be, int Tq, int D) {
    CudaImpl *im = cuda_impl(be);
    const AttentionPath by_size = Tq >= ATTN_GEMM_MIN_T || D > 32 * ATT_MAX_U ? PATH_GEMM : PATH_FUSED;
    switch (im->attention_impl) {
    case ATTENTION_FUSED: return PATH_FUSED;
    case ATTENTION_GEMM: return PATH_GEMM;
    case ATTENTION_FLASH:
        if (cuda_attention_flash_supported(be, D)) return PATH_FLASH;
        if (!im->attention_flash_fallback_said) {
            log_info("cuda backend: attention: DMMATH_CUDA_ATTENTION=flash runs bf16 with head dims up to %d; other "
                     "calls take auto's path (said once; the first: %s, head dim %d, %s)",
                     ATTN_FLASH_D_MAX, use_bf16(be) ? "bf16" : "fp32", D, by_size == PATH_GEMM ? "gemm" : "fused");
            im->attention_flash_fallback_said = true;
        }
        return by_size;
    default: return by_size == PATH_GEMM && cuda_attention_flash_supported(be, D) ? PATH_FLASH : by_size;
    }
}

// ---------------------------------------------------------------- RoPE
// inv_freq[i] comes from the host (the same powf expression as the CPU backend), so both backends rotate by
// bitwise-identical fp32 angles; only cosf/sinf differ by an ulp or two.
__global__ void k_rope(float *x, const float *inv_freq, int B, int T, int H, int D, int n_rot, int pos_offset,
                       int inverse) {
    int half = n_rot / 2;
    size_t total = (size_t)B * T * H * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx % half);
        size_t row = idx / half; // (b, t, h)
        int t = (int)((row / H) % T);
        float *r = x + row * D;
        rope_rotate(r[i], r[i + half], pos_offset + t, inv_freq[i], inverse, &r[i], &r[i + half]);
    }
}

const float *cuda_rope_inv_freq(Backend *be, int n_rot, scalar_t base) {
    const int half = n_rot / 2;
    CudaImpl *im = cuda_impl(be);
    if (!im->rope_inv_freq || im->rope_half != half || im->rope_base != (float)base) {
        float *h_inv = (float *)cuda_host_scratch(be, HOST_SCRATCH_ROPE_INV_FREQ, (size_t)half * sizeof(float));
        for (int i = 0; i < half; i++) h_inv[i] = 1.0f / powf((float)base, (float)(2 * i) / (float)n_rot); // fp32
        if (im->rope_inv_freq) CHECK_CUDA(cudaFree(im->rope_inv_freq)); // synchronises: queued kernels may read it
        im->rope_inv_freq = nullptr;
        CHECK_CUDA(cudaMalloc((void **)&im->rope_inv_freq, (size_t)half * sizeof(float)));
        CHECK_CUDA(cudaMemcpy(im->rope_inv_freq, h_inv, (size_t)half * sizeof(float), cudaMemcpyHostToDevice));
        im->rope_half = half;
        im->rope_base = (float)base;
    }
    return im->rope_inv_freq;
}

// dst = rope(src) (dst != src, [B, T, H, D]): the rotated pairs as k_rope computes them, the other dims copied; one
// thread per pair or unrotated dim.
__global__ void k_rope_to(float *dst, const float *src, const float *inv_freq, int B, int T, int H, int D, int n_rot,
                          int pos_offset, int inverse) {
    const int half = n_rot / 2, per_row = half + (D - n_rot);
    size_t total = (size_t)B * T * H * per_row;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(idx % per_row);
        size_t row = idx / per_row; // (b, t, h)
        const float *s = src + row * D;
        float *r = dst + row * D;
        if (j >= half) { // an unrotated dim
            r[n_rot + (j - half)] = s[n_rot + (j - half)];
            continue;
        }
        int t = (int)((row / H) % T);
        rope_rotate(s[j], s[j + half], pos_offset + t, inv_freq[j], inverse, &r[j], &r[j + half]);
    }
}

void cuda_rope_to(Backend *be, float *dst, const float *src, int B, int T, int H, int D, int n_rot, int pos_offset,
                  scalar_t base, int inverse) {
    const size_t total = (size_t)B * T * H * (n_rot / 2 + (D - n_rot));
    if (!total) return;
    const float *inv_freq = n_rot > 0 ? cuda_rope_inv_freq(be, n_rot, base) : nullptr;
    // per pair: two values read and written, the rotation; per unrotated dim one value read and written
    LAUNCH(k_rope_to, grid_for(total, 256), 256, 0,
           kernel_cost(9.0 * B * T * H * (n_rot / 2), 2.0 * B * T * H * D * sizeof(float)))(
        dst, src, inv_freq, B, T, H, D, n_rot, pos_offset, inverse);
    CHECK_LAUNCH();
}

void cuda_rope(Backend *be, scalar_t *x, int B, int T, int H, int D, int n_rot, int pos_offset, scalar_t base,
               int inverse) {
    cuda_weights_written(be, x, (size_t)B * T * H * D * sizeof(float));
    if (n_rot < 0 || n_rot % 2 != 0 || n_rot > D) die("rope: n_rot=%d must be even and in [0, D=%d]", n_rot, D);
    size_t total = (size_t)B * T * H * (n_rot / 2);
    if (!total) return;
    const float *inv_freq = cuda_rope_inv_freq(be, n_rot, base);
    // per rotated pair: two values read and written, the angle, its cosine and sine, and the rotation
    LAUNCH(k_rope, grid_for(total, 256), 256, 0, streaming_cost(total, 9, 4 * sizeof(float)))(
        x, inv_freq, B, T, H, D, n_rot, pos_offset, inverse);
    CHECK_LAUNCH();
}

// ---------------------------------------------------------------- costs of the fused kernels (cuda_common.cuh)
// Per visited query-key pair: the q.k dot product (2D) and, forward, the online softmax (about 6) and p v (2D);
// dq: q.k, dout.v and ds k (6D + 8); dk/dv: q.k, dout.v, ds q and p dout (8D + 8). Bytes: q, k, v (and dout) read
// once, the outputs written once, the per-row lse and D_i.
static inline KernelCost fused_attention_fwd_cost(int B, int Tq, int Tk, int H, int D) {
    double pairs = (double)B * H * causal_pairs(Tq, Tk), rows = (double)B * H * Tq;
    return kernel_cost(pairs * (4.0 * D + 6), (2.0 * rows * D + 2.0 * B * H * Tk * D + rows) * sizeof(float));
}
static inline KernelCost attention_rowdot_cost(long rows, int D) {
    return kernel_cost(2.0 * rows * D, (2.0 * rows * D + rows) * sizeof(float));
}
static inline KernelCost fused_attention_dq_cost(int B, int T, int H, int D) {
    double pairs = (double)B * H * causal_pairs(T, T), rows = (double)B * H * T;
    return kernel_cost(pairs * (6.0 * D + 8), (5.0 * rows * D + 2.0 * rows) * sizeof(float));
}
static inline KernelCost fused_attention_dkdv_cost(int B, int T, int H, int D) {
    double pairs = (double)B * H * causal_pairs(T, T), rows = (double)B * H * T;
    return kernel_cost(pairs * (8.0 * D + 8), (6.0 * rows * D + 2.0 * rows) * sizeof(float));
}

// ---------------------------------------------------------------- forward
template <bool BF16>
__global__ void k_attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int B, int Tq,
                           int Tk, int H, int D, float scale) {
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; // (b, h, i)
    int lane = threadIdx.x % 32;
    if (row >= (long)B * H * Tq) return;
    int i = (int)(row % Tq), bh = (int)(row / Tq), b = bh / H, h = bh % H;
    size_t ld = (size_t)H * D;
    const float *qi = q + ((size_t)b * Tq + i) * ld + (size_t)h * D;
    const float *kb = k + (size_t)b * Tk * ld + (size_t)h * D;
    const float *vb = v + (size_t)b * Tk * ld + (size_t)h * D;
    float qv[ATT_MAX_U], acc[ATT_MAX_U];
    int nu = (D + 31) / 32;
#pragma unroll
    for (int u = 0; u < ATT_MAX_U; u++) {
        int d = lane + 32 * u;
        qv[u] = (u < nu && d < D) ? opnd<BF16>(qi[d]) : 0.0f;
        acc[u] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    int jmax = Tk - Tq + i;
    for (int j = 0; j <= jmax; j++) {
        const float *kj = kb + (size_t)j * ld, *vj = vb + (size_t)j * ld;
        float part = 0.0f;
#pragma unroll
        for (int u = 0; u < ATT_MAX_U; u++) {
            int d = lane + 32 * u;
            if (u < nu && d < D) part += qv[u] * opnd<BF16>(kj[d]);
        }
        float s = warp_sum(part) * scale;
        float m_new = fmaxf(m, s);
        float corr = expf(m - m_new); // 0 on the first key (m = -inf)
        float p = expf(s - m_new);
        l = l * corr + p;
        float pv = opnd<BF16>(p);
#pragma unroll
        for (int u = 0; u < ATT_MAX_U; u++) {
            int d = lane + 32 * u;
            if (u < nu && d < D) acc[u] = acc[u] * corr + pv * opnd<BF16>(vj[d]);
        }
        m = m_new;
    }
    float *oi = out + ((size_t)b * Tq + i) * ld + (size_t)h * D;
    float inv_l = 1.0f / l;
#pragma unroll
    for (int u = 0; u < ATT_MAX_U; u++) {
        int d = lane + 32 * u;
        if (u < nu && d < D) oi[d] = acc[u] * inv_l;
    }
    if (lane == 0) lse[(size_t)bh * Tq + i] = m + logf(l);
}

void cuda_attention_forward(Backend *be, scalar_t *out, scalar_t *lse, const scalar_t *q, const scalar_t *k,
                            const scalar_t *v, int B, int Tq, int Tk, int H, int D, scalar_t scale) {
    cuda_weights_written(be, out, (size_t)B * Tq * H * D * sizeof(float));
    cuda_weights_written(be, lse, (size_t)B * H * Tq * sizeof(float));
    if (Tk < Tq) die("attention_forward: Tk=%d < Tq=%d", Tk, Tq);
    const AttentionPath path = attention_path(be, Tq, D);
    if (path == PATH_GEMM) {
        cuda_attention_gemm_forward(be, out, lse, q, k, v, B, Tq, Tk, H, D, scale);
        return;
    }
    if (path == PATH_FLASH) {
        cuda_attention_flash_forward(be, out, lse, q, k, v, B, Tq, Tk, H, D, scale);
        return;
    }
    if (D > 32 * ATT_MAX_U) die("attention_forward: head dim %d > %d is not supported by the CUDA kernel", D, 32 * ATT_MAX_U);
    long rows = (long)B * H * Tq;
    if (rows <= 0) return;
    unsigned blocks = (unsigned)((rows + 7) / 8);
    if (use_bf16(be))
        LAUNCH(k_attn_fwd<true>, blocks, 256, 0, fused_attention_fwd_cost(B, Tq, Tk, H, D))(out, lse, q, k, v, B, Tq,
                                                                                             Tk, H, D, scale);
    else
        LAUNCH(k_attn_fwd<false>, blocks, 256, 0, fused_attention_fwd_cost(B, Tq, Tk, H, D))(out, lse, q, k, v, B, Tq,
                                                                                              Tk, H, D, scale);
    CHECK_LAUNCH();
}

// ---------------------------------------------------------------- backward
// Di[b,h,i] = dout_i . out_i. In bf16 mode dout is rounded as the dq/dkdv kernels (and the GEMM path's packing)
// round it, so that sum_j p_ij (dout_i . v_j) - Di stays consistent (with one key, ds is then exactly 0 as on the
// CPU).
template <bool BF16>
__global__ void k_attn_rowdot(float *Di, const float *dout, const float *out, int B, int T, int H, int D) {
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (long)B * H * T) return;
    int i = (int)(row % T), bh = (int)(row / T), b = bh / H, h = bh % H;
    size_t off = ((size_t)b * T + i) * H * D + (size_t)h * D;
    float part = 0.0f;
    for (int d = lane; d < D; d += 32) part += opnd<BF16>(dout[off + d]) * out[off + d];
    float s = warp_sum(part);
    if (lane == 0) Di[row] = s;
}

// dq_i += scale * sum_{j <= i} ds_ij k_j, ds_ij = p_ij (dout_i . v_j - D_i); one warp per query row.
template <bool BF16>
__global__ void k_attn_bwd_dq(float *dq, const float *dout, const float *lse, const float *Di, const float *q,
                              const float *k, const float *v, int B, int T, int H, int D, float scale) {
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (long)B * H * T) return;
    int i = (int)(row % T), bh = (int)(row / T), b = bh / H, h = bh % H;
    size_t ld = (size_t)H * D, base = (size_t)b * T * ld + (size_t)h * D;
    int nu = (D + 31) / 32;
    float qv[ATT_MAX_U], gv[ATT_MAX_U], acc[ATT_MAX_U];
#pragma unroll
    for (int u = 0; u < ATT_MAX_U; u++) {
        int d = lane + 32 * u;
        bool ok = u < nu && d < D;
        qv[u] = ok ? opnd<BF16>(q[base + (size_t)i * ld + d]) : 0.0f;
        gv[u] = ok ? opnd<BF16>(dout[base + (size_t)i * ld + d]) : 0.0f;
        acc[u] = 0.0f;
    }
    float lse_i = lse[row], D_i = Di[row];
    for (int j = 0; j <= i; j++) {
        const float *kj = k + base + (size_t)j * ld, *vj = v + base + (size_t)j * ld;
        float ps = 0.0f, pd = 0.0f;
#pragma unroll
        for (int u = 0; u < ATT_MAX_U; u++) {
            int d = lane + 32 * u;
            if (u < nu && d < D) {
                ps += qv[u] * opnd<BF16>(kj[d]);
                pd += gv[u] * opnd<BF16>(vj[d]);
            }
        }
        float p = expf(warp_sum(ps) * scale - lse_i);
        float ds = opnd<BF16>(p * (warp_sum(pd) - D_i) * scale);
#pragma unroll
        for (int u = 0; u < ATT_MAX_U; u++) {
            int d = lane + 32 * u;
            if (u < nu && d < D) acc[u] += ds * opnd<BF16>(kj[d]);
        }
    }
#pragma unroll
    for (int u = 0; u < ATT_MAX_U; u++) {
        int d = lane + 32 * u;
        if (u < nu && d < D) dq[base + (size_t)i * ld + d] = acc[u];
    }
}

// dk_j += scale * sum_{i >= j} ds_ij q_i, dv_j += sum_{i >= j} p_ij dout_i; one warp per key row.
template <bool BF16>
__global__ void k_attn_bwd_dkdv(float *dk, float *dv, const float *dout, const float *lse, const float *Di,
                                const float *q, const float *k, const float *v, int B, int T, int H, int D,
                                float scale) {
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (long)B * H * T) return;
    int j = (int)(row % T), bh = (int)(row / T), b = bh / H, h = bh % H;
    size_t ld = (size_t)H * D, base = (size_t)b * T * ld + (size_t)h * D;
    int nu = (D + 31) / 32;
    float kv[ATT_MAX_U], vv[ATT_MAX_U], ak[ATT_MAX_U], av[ATT_MAX_U];
#pragma unroll
    for (int u = 0; u < ATT_MAX_U; u++) {
        int d = lane + 32 * u;
        bool ok = u < nu && d < D;
        kv[u] = ok ? opnd<BF16>(k[base + (size_t)j * ld + d]) : 0.0f;
        vv[u] = ok ? opnd<BF16>(v[base + (size_t)j * ld + d]) : 0.0f;
        ak[u] = av[u] = 0.0f;
    }
    const float *lse_b = lse + (size_t)bh * T, *D_b = Di + (size_t)bh * T;
    for (int i = j; i < T; i++) {
        const float *qi = q + base + (size_t)i * ld, *gi = dout + base + (size_t)i * ld;
        float ps = 0.0f, pd = 0.0f;
#pragma unroll
        for (int u = 0; u < ATT_MAX_U; u++) {
            int d = lane + 32 * u;
            if (u < nu && d < D) {
                ps += opnd<BF16>(qi[d]) * kv[u];
                pd += opnd<BF16>(gi[d]) * vv[u];
            }
        }
        float p = expf(warp_sum(ps) * scale - lse_b[i]);
        float ds = opnd<BF16>(p * (warp_sum(pd) - D_b[i]) * scale);
        float pb = opnd<BF16>(p);
#pragma unroll
        for (int u = 0; u < ATT_MAX_U; u++) {
            int d = lane + 32 * u;
            if (u < nu && d < D) {
                ak[u] += ds * opnd<BF16>(qi[d]);
                av[u] += pb * opnd<BF16>(gi[d]);
            }
        }
    }
#pragma unroll
    for (int u = 0; u < ATT_MAX_U; u++) {
        int d = lane + 32 * u;
        if (u < nu && d < D) {
            dk[base + (size_t)j * ld + d] = ak[u];
            dv[base + (size_t)j * ld + d] = av[u];
        }
    }
}

void cuda_attention_rowdot(Backend *be, float *Di, const float *dout, const float *out, int B, int T, int H, int D) {
    long rows = (long)B * H * T;
    if (rows <= 0) return;
    unsigned blocks = (unsigned)((rows + 7) / 8);
    if (use_bf16(be))
        LAUNCH(k_attn_rowdot<true>, blocks, 256, 0, attention_rowdot_cost(rows, D))(Di, dout, out, B, T, H, D);
    else
        LAUNCH(k_attn_rowdot<false>, blocks, 256, 0, attention_rowdot_cost(rows, D))(Di, dout, out, B, T, H, D);
    CHECK_LAUNCH();
}

void cuda_attention_backward(Backend *be, scalar_t *dq, scalar_t *dk, scalar_t *dv, const scalar_t *dout,
                             const scalar_t *out, const scalar_t *lse, const scalar_t *q, const scalar_t *k,
                             const scalar_t *v, int B, int T, int H, int D, scalar_t scale) {
    for (float *g : {dq, dk, dv}) cuda_weights_written(be, g, (size_t)B * T * H * D * sizeof(float));
    const AttentionPath path = attention_path(be, T, D);
    if (path == PATH_GEMM) {
        cuda_attention_gemm_backward(be, dq, dk, dv, dout, out, lse, q, k, v, B, T, H, D, scale);
        return;
    }
    if (path == PATH_FLASH) {
        cuda_attention_flash_backward(be, dq, dk, dv, dout, out, lse, q, k, v, B, T, H, D, scale);
        return;
    }
    if (D > 32 * ATT_MAX_U) die("attention_backward: head dim %d > %d is not supported by the CUDA kernel", D, 32 * ATT_MAX_U);
    long rows = (long)B * H * T;
    if (rows <= 0) return;
    unsigned blocks = (unsigned)((rows + 7) / 8);
    float *Di = (float *)cuda_scratch(be, SCRATCH_ATTN_ROWDOT, (size_t)rows * sizeof(float));
    cuda_attention_rowdot(be, Di, dout, out, B, T, H, D);
    if (use_bf16(be)) {
        LAUNCH(k_attn_bwd_dq<true>, blocks, 256, 0, fused_attention_dq_cost(B, T, H, D))(dq, dout, lse, Di, q, k, v, B,
                                                                                          T, H, D, scale);
        CHECK_LAUNCH();
        LAUNCH(k_attn_bwd_dkdv<true>, blocks, 256, 0, fused_attention_dkdv_cost(B, T, H, D))(dk, dv, dout, lse, Di, q,
                                                                                              k, v, B, T, H, D, scale);
    } else {
        LAUNCH(k_attn_bwd_dq<false>, blocks, 256, 0, fused_attention_dq_cost(B, T, H, D))(dq, dout, lse, Di, q, k, v,
                                                                                           B, T, H, D, scale);
        CHECK_LAUNCH();
        LAUNCH(k_attn_bwd_dkdv<false>, blocks, 256, 0, fused_attention_dkdv_cost(B, T, H, D))(dk, dv, dout, lse, Di, q,
                                                                                               k, v, B, T, H, D, scale);
    }
    CHECK_LAUNCH();
}
