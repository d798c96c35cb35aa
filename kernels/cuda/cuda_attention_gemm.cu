// CUDA: causal attention on tensor cores through cuBLAS (the path for long sequences; cuda_attention.cu keeps the
// fused one-warp-per-row kernels and chooses between the two).
//
// Same op contract as the fused kernels and the CPU reference (kernels/cpu/cpu_attention.c):
//   forward   q[B,Tq,H,D], k/v[B,Tk,H,D] -> out[B,Tq,H,D], lse[B,H,Tq]; query i sees keys j <= Tk-Tq+i
//   backward  Tq == Tk == T; OVERWRITES dq, dk, dv (=)
// Steps: q, k, v (and dout) are packed head-major into [B*H, T, ldD] scratch (bf16 in bf16 mode, fp32 in fp32 mode;
// ldD = D rounded up to 8 so that every row and every (b,h) matrix starts 16-byte aligned for the tensor cores). The
// (b,h) pairs are then processed in chunks whose scores [pairs, Tq, ldK] fit ATTN_GEMM_CHUNK_SCORES; per chunk, one
// cublasGemmStridedBatchedEx per product, fp32 accumulation (exact fp32 products in fp32 mode: no TF32), and row-wise
// kernels for the causal softmax. The full Tq x Tk score matrix is computed and the masked half set to zero (twice
// the flops of a masked kernel, but on tensor cores).
//   forward   S = Q K^T;  lse_i = logsumexp_{j<=lim(i)} scale S_ij;  P = exp(scale S - lse) (masked);  O = P V
//   backward  S = Q K^T, P as above;  dP = dO V^T;  dS = P (dP - D_i) scale;  dV = P^T dO;  dQ = dS K;  dK = dS^T Q
// with D_i = dout_i . out_i (cuda_attention_rowdot, the fused path's kernel). The per-chunk results are copied into
// dq/dk/dv by an elementwise kernel, every element once per call: deterministic, no atomics.
// bf16 mode rounds exactly what the fused kernels round: q, k, v, dout (packing), p and ds (the softmax kernels),
// with fp32 accumulation, fp32 scores, fp32 softmax and fp32 outputs.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"

// Score elements per chunk of (b,h) pairs (at least one pair per chunk). The backward holds S and dP in fp32 and, in
// bf16 mode, P and dS in bf16: 12 bytes per score, 384 MiB at this budget; T = 1024 gives 32 pairs per chunk,
// i.e. batched GEMMs of 32 x 1024 x 1024 x D, enough to fill an H100. Tests shrink chunks with
// DMMATH_CUDA_ATTENTION_CHUNK_PAIRS (cuda_backend.cu).
#define ATTN_GEMM_CHUNK_SCORES ((size_t)1 << 25)

static int round_up8(int n) { return (n + 7) / 8 * 8; }

static int pairs_per_chunk(Backend *be, int pairs, int Tq, int ldK) {
    size_t n = (size_t)cuda_impl(be)->attention_chunk_pairs;
    if (n == 0) n = ATTN_GEMM_CHUNK_SCORES / ((size_t)Tq * ldK);
    if (n < 1) n = 1;
    return n < (size_t)pairs ? (int)n : pairs;
}

// ---------------------------------------------------------------- kernels
__device__ __forceinline__ void store_elem(float *p, float x) { *p = x; }
__device__ __forceinline__ void store_elem(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }

// dst[B*H, T, ld] (first D columns) = src[B,T,H,D]; rounded to bf16 when Elem is bf16. Reads are coalesced.
template <class Elem>
__global__ void k_attn_pack(Elem *dst, const float *src, int B, int T, int H, int D, int ld) {
    size_t total = (size_t)B * T * H * D;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(idx % D);
        size_t row = idx / D; // (b, t, h)
        int h = (int)(row % H);
        size_t bt = row / H;
        int t = (int)(bt % T), b = (int)(bt / T);
        store_elem(dst + (((size_t)b * H + h) * T + t) * ld + d, src[idx]);
    }
}

// dst[B,T,H,D] = src[pairs, T, ld] for the chunk's pairs p0 .. p0+pairs-1 (pair = b*H + h).
__global__ void k_attn_unpack(float *dst, const float *src, int p0, int pairs, int T, int H, int D, int ld) {
    size_t total = (size_t)pairs * T * D;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(idx % D);
        size_t r = idx / D; // (local pair, t)
        int t = (int)(r % T), pair = p0 + (int)(r / T);
        int b = pair / H, h = pair % H;
        dst[(((size_t)b * T + t) * H + h) * D + d] = src[r * ld + d];
    }
}

// Forward softmax, one warp per score row (local pair, i) of S[pairs, Tq, ld] (fp32, unscaled Q K^T):
// lse = m + log(sum_j exp(scale s_j - m)) over the visible keys j <= Tk-Tq+i (fixed lane-strided order and
// butterflies: deterministic), then P_ij = exp(scale s_ij - lse), 0 for masked keys, written as Elem (in fp32 mode P
// aliases S: each element is read and then written by the same lane).
template <class Elem>
__global__ void k_attn_softmax_fwd(Elem *P, const float *S, float *lse, int pairs, int Tq, int Tk, int ld,
                                   float scale) {
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (long)pairs * Tq) return; // whole warps leave together
    int i = (int)(row % Tq), n_vis = Tk - Tq + i + 1;
    const float *s = S + (size_t)row * ld;
    float m = -INFINITY;
    for (int j = lane; j < n_vis; j += 32) m = fmaxf(m, s[j] * scale);
    m = warp_max(m);
    float l = 0.0f;
    for (int j = lane; j < n_vis; j += 32) l += expf(s[j] * scale - m);
    l = warp_sum(l);
    float lse_i = m + logf(l);
    Elem *p = P + (size_t)row * ld;
    for (int j = lane; j < Tk; j += 32) store_elem(p + j, j < n_vis ? expf(s[j] * scale - lse_i) : 0.0f);
    if (lane == 0) lse[row] = lse_i;
}

// Backward, elementwise over S/dP[pairs, T, ld] (fp32, unscaled Q K^T and dO V^T), with lse/Di of the chunk's rows:
// p = exp(scale s - lse_i), ds = p (dp - D_i) scale (the fused kernels' expressions), 0 for masked keys j > i;
// written as Elem (in fp32 mode P aliases S and dS aliases dP, element by element).
template <class Elem>
__global__ void k_attn_softmax_bwd(Elem *P, Elem *dS, const float *S, const float *dP, const float *lse,
                                   const float *Di, int pairs, int T, int ld, float scale) {
    size_t total = (size_t)pairs * T * T;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(idx % T);
        size_t row = idx / T; // (local pair, i)
        int i = (int)(row % T);
        size_t e = row * ld + j;
        float p = 0.0f, ds = 0.0f;
        if (j <= i) {
            p = expf(S[e] * scale - lse[row]);
            ds = p * (dP[e] - Di[row]) * scale;
        }
        store_elem(P + e, p);
        store_elem(dS + e, ds);
    }
}

// ---------------------------------------------------------------- costs (cuda_common.cuh)
// The softmax kernels read the fp32 scores (and dP) of the whole Tq x Tk block once and write P (and dS) in the GEMM
// operand type, masked half included; their arithmetic is per visible pair: forward max, exp, sum and the
// normalised exp again (about 8), backward p and ds (about 6).
static inline KernelCost softmax_fwd_cost(int pairs, int Tq, int Tk, size_t elem) {
    double scores = (double)pairs * Tq * Tk;
    return kernel_cost(8.0 * pairs * causal_pairs(Tq, Tk),
                       scores * (sizeof(float) + elem) + (double)pairs * Tq * sizeof(float));
}
static inline KernelCost softmax_bwd_cost(int pairs, int T, size_t elem) {
    double scores = (double)pairs * T * T;
    return kernel_cost(6.0 * pairs * causal_pairs(T, T),
                       scores * 2 * (sizeof(float) + elem) + 2.0 * pairs * T * sizeof(float));
}

// ---------------------------------------------------------------- host side
// Row-major batched C_b[M,N] = op(A_b) op(B_b) (alpha 1, beta 0) with element strides between the batch entries;
// bf16 or fp32 operands, fp32 C and accumulation. Row-major is column-major transposed: swap the operands, keep the
// flags (as cuda_gemm).
static void gemm_batched(Backend *be, bool bf16, int transA, int transB, int M, int N, int K, const void *A, int lda,
                         long long strideA, const void *B, int ldb, long long strideB, float *C, int ldc,
                         long long strideC, int batch) {
    const float one = 1.0f, zero = 0.0f;
    cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    CHECK_CUBLAS(cublasGemmStridedBatchedEx(cuda_impl(be)->cublas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, B, t, ldb, strideB, A,
                                            t, lda, strideA, &zero, C, CUDA_R_32F, ldc, strideC, batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Packed head-major operand [B*H, T, ld] in bf16 or fp32 (elem bytes).
struct HeadMajor {
    void *base;
    size_t elem;
    int T, ld;
    void *pair(int p) const { return (char *)base + (size_t)p * T * ld * elem; }
    long long stride() const { return (long long)T * ld; }
};

static HeadMajor pack_heads(Backend *be, int slot, const float *x, int B, int T, int H, int D) {
    bool bf16 = use_bf16(be);
    HeadMajor m = {nullptr, bf16 ? sizeof(__nv_bfloat16) : sizeof(float), T, round_up8(D)};
    size_t total = (size_t)B * T * H * D;
    m.base = cuda_scratch(be, slot, (size_t)B * H * T * m.ld * m.elem);
    if (!total) return m;
    if (bf16)
        LAUNCH(k_attn_pack<__nv_bfloat16>, grid_for(total, 256), 256, 0,
               streaming_cost(total, 1, sizeof(float) + sizeof(__nv_bfloat16)))((__nv_bfloat16 *)m.base, x, B, T, H,
                                                                                D, m.ld);
    else
        LAUNCH(k_attn_pack<float>, grid_for(total, 256), 256, 0, streaming_cost(total, 0, 2 * sizeof(float)))(
            (float *)m.base, x, B, T, H, D, m.ld);
    CHECK_LAUNCH();
    return m;
}

static void unpack_heads(float *dst, const float *src, int p0, int pairs, int T, int H, int D, int ld) {
    size_t total = (size_t)pairs * T * D;
    if (!total) return;
    LAUNCH(k_attn_unpack, grid_for(total, 256), 256, 0, streaming_cost(total, 0, 2 * sizeof(float)))(dst, src, p0, pairs,
                                                                                                     T, H, D, ld);
    CHECK_LAUNCH();
}

void cuda_attention_gemm_forward(Backend *be, scalar_t *out, scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                 const scalar_t *v, int B, int Tq, int Tk, int H, int D, scalar_t scale) {
    if (Tk < Tq) die("attention_forward: Tk=%d < Tq=%d", Tk, Tq);
    if (D <= 0) die("attention_forward: head dim %d must be positive", D);
    if (B <= 0 || H <= 0 || Tq <= 0) return;
    const bool bf16 = use_bf16(be);
    const int n_pairs = B * H, ldK = round_up8(Tk);
    HeadMajor Q = pack_heads(be, SCRATCH_ATTN_Q, q, B, Tq, H, D); // [B*H, Tq, ldD]
    HeadMajor K = pack_heads(be, SCRATCH_ATTN_K, k, B, Tk, H, D); // [B*H, Tk, ldD]
    HeadMajor V = pack_heads(be, SCRATCH_ATTN_V, v, B, Tk, H, D); // [B*H, Tk, ldD]
    const int ldD = Q.ld, chunk = pairs_per_chunk(be, n_pairs, Tq, ldK);
    const size_t n_scores = (size_t)chunk * Tq * ldK;
    float *S = (float *)cuda_scratch(be, SCRATCH_ATTN_SCORES, n_scores * sizeof(float));
    float *O = (float *)cuda_scratch(be, SCRATCH_ATTN_OUT, (size_t)chunk * Tq * ldD * sizeof(float));
    __nv_bfloat16 *P16 =
        bf16 ? (__nv_bfloat16 *)cuda_scratch(be, SCRATCH_ATTN_PROBS_BF16, n_scores * sizeof(__nv_bfloat16)) : nullptr;
    const long long sS = (long long)Tq * ldK;
    for (int p0 = 0; p0 < n_pairs; p0 += chunk) {
        int np = n_pairs - p0 < chunk ? n_pairs - p0 : chunk;
        gemm_batched(be, bf16, 0, 1, Tq, Tk, D, Q.pair(p0), ldD, Q.stride(), K.pair(p0), ldD, K.stride(), S, ldK, sS,
                     np); // S = Q K^T
        unsigned blocks = (unsigned)(((long)np * Tq + 7) / 8);
        if (bf16)
            LAUNCH(k_attn_softmax_fwd<__nv_bfloat16>, blocks, 256, 0,
                   softmax_fwd_cost(np, Tq, Tk, sizeof(__nv_bfloat16)))(P16, S, lse + (size_t)p0 * Tq, np, Tq, Tk, ldK,
                                                                        scale);
        else
            LAUNCH(k_attn_softmax_fwd<float>, blocks, 256, 0, softmax_fwd_cost(np, Tq, Tk, sizeof(float)))(
                S, S, lse + (size_t)p0 * Tq, np, Tq, Tk, ldK, scale);
        CHECK_LAUNCH();
        const void *P = bf16 ? (const void *)P16 : (const void *)S;
        gemm_batched(be, bf16, 0, 0, Tq, D, Tk, P, ldK, sS, V.pair(p0), ldD, V.stride(), O, ldD,
                     (long long)Tq * ldD, np); // O = P V
        unpack_heads(out, O, p0, np, Tq, H, D, ldD);
    }
}

void cuda_attention_gemm_backward(Backend *be, scalar_t *dq, scalar_t *dk, scalar_t *dv, const scalar_t *dout,
                                  const scalar_t *out, const scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                  const scalar_t *v, int B, int T, int H, int D, scalar_t scale) {
    if (D <= 0) die("attention_backward: head dim %d must be positive", D);
    if (B <= 0 || H <= 0 || T <= 0) return;
    const bool bf16 = use_bf16(be);
    const int n_pairs = B * H, ldK = round_up8(T);
    float *Di = (float *)cuda_scratch(be, SCRATCH_ATTN_ROWDOT, (size_t)n_pairs * T * sizeof(float)); // [B*H, T]
    cuda_attention_rowdot(be, Di, dout, out, B, T, H, D);
    HeadMajor Q = pack_heads(be, SCRATCH_ATTN_Q, q, B, T, H, D);        // [B*H, T, ldD]
    HeadMajor K = pack_heads(be, SCRATCH_ATTN_K, k, B, T, H, D);        // [B*H, T, ldD]
    HeadMajor V = pack_heads(be, SCRATCH_ATTN_V, v, B, T, H, D);        // [B*H, T, ldD]
    HeadMajor dO = pack_heads(be, SCRATCH_ATTN_DOUT, dout, B, T, H, D); // [B*H, T, ldD]
    const int ldD = Q.ld, chunk = pairs_per_chunk(be, n_pairs, T, ldK);
    const size_t n_scores = (size_t)chunk * T * ldK, n_head = (size_t)chunk * T * ldD;
    float *S = (float *)cuda_scratch(be, SCRATCH_ATTN_SCORES, n_scores * sizeof(float));  // [chunk, T, ldK]
    float *dP = (float *)cuda_scratch(be, SCRATCH_ATTN_DPROBS, n_scores * sizeof(float)); // [chunk, T, ldK]
    __nv_bfloat16 *P16 = nullptr, *dS16 = nullptr;
    if (bf16) {
        P16 = (__nv_bfloat16 *)cuda_scratch(be, SCRATCH_ATTN_PROBS_BF16, n_scores * sizeof(__nv_bfloat16));
        dS16 = (__nv_bfloat16 *)cuda_scratch(be, SCRATCH_ATTN_DSCORES_BF16, n_scores * sizeof(__nv_bfloat16));
    }
    // dQ, dK, dV of the chunk, head-major [3][chunk, T, ldD] (each part a multiple of 8 floats: aligned)
    float *G = (float *)cuda_scratch(be, SCRATCH_ATTN_GRADS, 3 * n_head * sizeof(float));
    float *gQ = G, *gK = G + n_head, *gV = G + 2 * n_head;
    const long long sS = (long long)T * ldK, sG = (long long)T * ldD;
    for (int p0 = 0; p0 < n_pairs; p0 += chunk) {
        int np = n_pairs - p0 < chunk ? n_pairs - p0 : chunk;
        gemm_batched(be, bf16, 0, 1, T, T, D, Q.pair(p0), ldD, Q.stride(), K.pair(p0), ldD, K.stride(), S, ldK, sS,
                     np); // S = Q K^T
        gemm_batched(be, bf16, 0, 1, T, T, D, dO.pair(p0), ldD, dO.stride(), V.pair(p0), ldD, V.stride(), dP, ldK,
                     sS, np); // dP = dO V^T
        size_t n_elem = (size_t)np * T * T;
        const float *lse_c = lse + (size_t)p0 * T, *Di_c = Di + (size_t)p0 * T;
        if (bf16)
            LAUNCH(k_attn_softmax_bwd<__nv_bfloat16>, grid_for(n_elem, 256), 256, 0,
                   softmax_bwd_cost(np, T, sizeof(__nv_bfloat16)))(P16, dS16, S, dP, lse_c, Di_c, np, T, ldK, scale);
        else
            LAUNCH(k_attn_softmax_bwd<float>, grid_for(n_elem, 256), 256, 0, softmax_bwd_cost(np, T, sizeof(float)))(
                S, dP, S, dP, lse_c, Di_c, np, T, ldK, scale);
        CHECK_LAUNCH();
        const void *P = bf16 ? (const void *)P16 : (const void *)S;
        const void *dS = bf16 ? (const void *)dS16 : (const void *)dP;
        gemm_batched(be, bf16, 1, 0, T, D, T, P, ldK, sS, dO.pair(p0), ldD, dO.stride(), gV, ldD, sG, np); // P^T dO
        gemm_batched(be, bf16, 0, 0, T, D, T, dS, ldK, sS, K.pair(p0), ldD, K.stride(), gQ, ldD, sG, np);  // dS K
        gemm_batched(be, bf16, 1, 0, T, D, T, dS, ldK, sS, Q.pair(p0), ldD, Q.stride(), gK, ldD, sG, np);  // dS^T Q
        unpack_heads(dq, gQ, p0, np, T, H, D, ldD);
        unpack_heads(dk, gK, p0, np, T, H, D, ldD);
        unpack_heads(dv, gV, p0, np, T, H, D, ldD);
    }
}
