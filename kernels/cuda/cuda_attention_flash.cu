// CUDA: causal attention on tensor cores in FlashAttention-2's blocking (DMMATH_CUDA_ATTENTION=flash; bf16 mode and
// head dims up to FL_D_MAX, cuda_attention.cu sends everything else to the fused or GEMM path as auto would).
//
// Same op contract as the other paths and the CPU reference (kernels/cpu/cpu_attention.c):
//   forward   q[B,Tq,H,D], k/v[B,Tk,H,D] -> out[B,Tq,H,D], lse[B,H,Tq]; query i sees keys j <= Tk-Tq+i
//   backward  Tq == Tk == T; OVERWRITES dq, dk, dv (=)
// One block per ((b,h) pair, tile of FL_B query rows) or key rows; q, k, v, dout are read where they lie, rounded to
// bf16 as they are staged in shared memory (D padded with zeros to a multiple of 16), multiplied with wmma (bf16
// inputs, fp32 accumulation). No T x T matrix exists anywhere: only one FL_B x FL_B tile of scores per block.
//   k_flash_fwd      per key tile up to the causal limit: S = Q K^T; online softmax in fp32 (running max m and sum l
//                    per row, as the fused kernels); O = O corr + bf16(P) V (O fp32 in shared memory, rescaled there);
//                    out = O / l, lse = m + log l.
//   k_flash_bwd_dq   per key tile j <= i: S = Q K^T, dP = dO V^T, P = exp(scale S - lse), dS = bf16(P (dP - D_i)
//                    scale) (masked to 0), dQ += dS K in the warps' accumulators; dq = dQ once at the end.
//   k_flash_bwd_dkdv per query tile i >= j: S^T = K Q^T, dP^T = V dO^T, dV += bf16(P)^T dO, dK += dS^T Q; dk, dv =
//                    once at the end.
// D_i = dout_i . out_i comes from cuda_attention_rowdot (the other paths' kernel). Deterministic: every output element
// belongs to one block, which sums its tiles in order; no atomics. bf16 rounding as the other paths: q, k, v, dout,
// p and ds; scores, softmax, accumulation and outputs in fp32.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"

#ifndef CUDA_EMULATION
#include <mma.h>
#endif

using namespace nvcuda;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FlAcc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> FlA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> FlB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> FlBt; // B^T of a row-major tile

// Tile: FL_B query rows by FL_B keys (FL_B = 32 = the warp size: in the softmax each lane owns one key); 4 warps, each
// one 16 x 16 fragment of a score tile. FL_D_MAX bounds the head dim so that the tiles fit the 48 KiB of static shared
// memory (checked below).
constexpr int FL_B = 32, FL_WARPS = 4, FL_THREADS = 32 * FL_WARPS, FL_FRAG = 16;
constexpr int FL_D_MAX = ATTN_FLASH_D_MAX;
// Shared leading dimensions, padded (8 bf16 / 4 floats) against bank conflicts; each a multiple of 16 bytes and each
// fragment's start a multiple of 32 bytes, as wmma requires. The D-wide ones are Dp + pad at run time (Dp = D rounded
// up to 16); the arrays are sized for FL_D_MAX.
constexpr int FL_LDS = FL_B + 4, FL_LDP = FL_B + 8, FL_LDH_MAX = FL_D_MAX + 8, FL_LDO_MAX = FL_D_MAX + 4;
constexpr int FL_TILE_H = FL_B * FL_LDH_MAX; // bf16 elements of one staged [FL_B, Dp] tile
// Result fragments of a [FL_B, Dp] product per warp (the backward keeps dQ, or dK and dV, in registers).
constexpr int FL_ACC = (FL_B / FL_FRAG) * (FL_D_MAX / FL_FRAG) / FL_WARPS;
static_assert(FL_B == 32, "the softmax maps one key per lane");
static_assert(4 * FL_TILE_H * sizeof(__nv_bfloat16) + 2 * FL_B * FL_LDS * sizeof(float) +
                      FL_B * FL_LDP * sizeof(__nv_bfloat16) + 2 * FL_B * sizeof(float) <=
                  48 * 1024,
              "the backward's tiles must fit 48 KiB of static shared memory");
static_assert(2 * FL_TILE_H * sizeof(__nv_bfloat16) >= FL_B * FL_LDO_MAX * sizeof(float),
              "two staged bf16 tiles must hold one fp32 result tile");

__host__ __device__ static inline int round_up16(int n) { return (n + 15) / 16 * 16; }

bool cuda_attention_flash_supported(Backend *be, int D) { return use_bf16(be) && D >= 1 && D <= FL_D_MAX; }

// ---------------------------------------------------------------- block helpers (all FL_THREADS threads call them)
// s[r, d] = bf16(x[(r0 + r) * ld + d]) for r < FL_B, d < Dp; zeros past T rows and D columns. x: one head's rows.
__device__ __forceinline__ void stage_rows(__nv_bfloat16 *s, int lds, const float *x, size_t ld, int T, int r0, int D,
                                           int Dp) {
    for (int idx = threadIdx.x; idx < FL_B * Dp; idx += FL_THREADS) {
        int r = idx / Dp, d = idx % Dp, t = r0 + r;
        s[r * lds + d] = __float2bfloat16_rn(t < T && d < D ? x[(size_t)t * ld + d] : 0.0f);
    }
}

// slse[r], sdi[r] = lse and D_i of query row r0 + r of (b,h) pair bh (0 past T): the backward's per-row statistics.
__device__ __forceinline__ void stage_row_stats(float *slse, float *sdi, const float *lse, const float *Di, int bh,
                                                int T, int r0) {
    if (threadIdx.x < FL_B) {
        int i = r0 + threadIdx.x;
        slse[threadIdx.x] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
        sdi[threadIdx.x] = i < T ? Di[(size_t)bh * T + i] : 0.0f;
    }
}

// x[(r0 + r) * ld + d] = res[r * ldo + d] for r < FL_B with r0 + r < T, d < D: a result tile stored into one head's
// rows of a gradient, each element once.
__device__ __forceinline__ void store_tile_rows(float *x, size_t ld, int T, int r0, int D, const float *res, int ldo) {
    for (int idx = threadIdx.x; idx < FL_B * D; idx += FL_THREADS) {
        int r = idx / D, d = idx % D, t = r0 + r;
        if (t < T) x[(size_t)t * ld + d] = res[r * ldo + d];
    }
}

// dst[FL_B, FL_B] (fp32, FL_LDS) = a[FL_B, Dp] b[FL_B, Dp]^T (bf16 row-major tiles, leading dimension ld); one
// fragment per warp.
__device__ __forceinline__ void scores_tile(float *dst, const __nv_bfloat16 *a, const __nv_bfloat16 *b, int ld,
                                            int Dp) {
    const int warp = threadIdx.x / 32, tm = warp / 2, tn = warp % 2;
    FlAcc acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < Dp; k += FL_FRAG) {
        FlA fa;
        FlBt fb;
        wmma::load_matrix_sync(fa, a + (size_t)tm * FL_FRAG * ld + k, ld);
        wmma::load_matrix_sync(fb, b + (size_t)tn * FL_FRAG * ld + k, ld);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(dst + tm * FL_FRAG * FL_LDS + tn * FL_FRAG, acc, FL_LDS, wmma::mem_row_major);
}

// acc += a[FL_B, FL_B] (bf16, FL_LDP) @ b[FL_B, Dp] (bf16, ld) for the warp's fragments f = warp + FL_WARPS u of the
// [FL_B, Dp] result (rows 16 (f % 2), columns 16 (f / 2)).
__device__ __forceinline__ void accumulate_tile(FlAcc *acc, const __nv_bfloat16 *a, const __nv_bfloat16 *b, int ld,
                                                int Dp) {
    const int warp = threadIdx.x / 32, n_frag = (FL_B / FL_FRAG) * (Dp / FL_FRAG);
    for (int u = 0; u < FL_ACC; u++) {
        int f = warp + FL_WARPS * u;
        if (f >= n_frag) break; // the same in every lane of the warp
        int tm = f % 2, tn = f / 2;
        for (int k = 0; k < FL_B; k += FL_FRAG) {
            FlA fa;
            FlB fb;
            wmma::load_matrix_sync(fa, a + tm * FL_FRAG * FL_LDP + k, FL_LDP);
            wmma::load_matrix_sync(fb, b + (size_t)k * ld + tn * FL_FRAG, ld);
            wmma::mma_sync(acc[u], fa, fb, acc[u]);
        }
    }
}

// The warp's fragments (as accumulate_tile numbers them) into dst[FL_B, Dp] (fp32, ldo); then a block barrier.
__device__ __forceinline__ void store_tile(float *dst, int ldo, const FlAcc *acc, int Dp) {
    const int warp = threadIdx.x / 32, n_frag = (FL_B / FL_FRAG) * (Dp / FL_FRAG);
    for (int u = 0; u < FL_ACC; u++) {
        int f = warp + FL_WARPS * u;
        if (f >= n_frag) break;
        wmma::store_matrix_sync(dst + (f % 2) * FL_FRAG * ldo + (f / 2) * FL_FRAG, acc[u], ldo, wmma::mem_row_major);
    }
    __syncthreads();
}

// ---------------------------------------------------------------- forward
// grid (B*H, query tiles); O lives in shared memory (fp32) because the online softmax rescales its rows.
__global__ void __launch_bounds__(FL_THREADS)
k_flash_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int Tq, int Tk, int H, int D,
            float scale) {
    __shared__ __align__(32) __nv_bfloat16 sq[FL_TILE_H];  // [FL_B, ldh]: the block's queries
    __shared__ __align__(32) __nv_bfloat16 skv[FL_TILE_H]; // [FL_B, ldh]: the key tile, then the value tile
    __shared__ __align__(32) float ss[FL_B * FL_LDS];      // [FL_B, FL_LDS]: scores Q K^T
    __shared__ __align__(32) __nv_bfloat16 sp[FL_B * FL_LDP]; // [FL_B, FL_LDP]: bf16(p)
    __shared__ __align__(32) float so[FL_B * FL_LDO_MAX];  // [FL_B, ldo]: O, unnormalised
    __shared__ float sm[FL_B], sl[FL_B];                   // running max and sum per row
    const int Dp = round_up16(D), ldh = Dp + 8, ldo = Dp + 4;
    const int bh = blockIdx.x, b = bh / H, h = bh % H, i0 = blockIdx.y * FL_B;
    const size_t ld = (size_t)H * D;
    const float *qb = q + (size_t)b * Tq * ld + (size_t)h * D;
    const float *kb = k + (size_t)b * Tk * ld + (size_t)h * D, *vb = v + (size_t)b * Tk * ld + (size_t)h * D;
    stage_rows(sq, ldh, qb, ld, Tq, i0, D, Dp);
    for (int idx = threadIdx.x; idx < FL_B * Dp; idx += FL_THREADS) so[idx / Dp * ldo + idx % Dp] = 0.0f;
    if (threadIdx.x < FL_B) {
        sm[threadIdx.x] = -INFINITY;
        sl[threadIdx.x] = 0.0f;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int j_end = Tk - Tq + min(i0 + FL_B, Tq); // keys [0, j_end) are visible to some row of the block
    for (int j0 = 0; j0 < j_end; j0 += FL_B) {
        __syncthreads(); // the previous tile's P V has read skv and sp
        stage_rows(skv, ldh, kb, ld, Tk, j0, D, Dp);
        __syncthreads();
        scores_tile(ss, sq, skv, ldh, Dp);
        __syncthreads(); // scores stored, keys read
        stage_rows(skv, ldh, vb, ld, Tk, j0, D, Dp);
        // online softmax: warp w takes rows w * 8 .. w * 8 + 7, lane = key; p = exp(s - m_new) for visible keys
        for (int rr = 0; rr < FL_B / FL_WARPS; rr++) {
            int r = warp * (FL_B / FL_WARPS) + rr, i = i0 + r, j = j0 + lane;
            bool vis = i < Tq && j <= Tk - Tq + i; // (then j < Tk)
            float s = vis ? ss[r * FL_LDS + lane] * scale : -INFINITY;
            float m_old = sm[r], m_new = fmaxf(m_old, warp_max(s));
            // m_new = -inf only for a padding row past Tq (every real row sees key 0 in the first tile)
            float corr = m_new == -INFINITY ? 1.0f : expf(m_old - m_new); // 0 on a row's first tile (m_old = -inf)
            float p = vis ? expf(s - m_new) : 0.0f;
            float psum = warp_sum(p);
            sp[r * FL_LDP + lane] = __float2bfloat16_rn(p);
            for (int d = lane; d < Dp; d += 32) so[r * ldo + d] *= corr;
            __syncwarp(); // every lane has read sm[r] (a shuffle orders no memory access) before lane 0 writes it
            if (lane == 0) {
                sm[r] = m_new;
                sl[r] = sl[r] * corr + psum;
            }
        }
        __syncthreads();
        // O += P V, each warp its fragments of O loaded from and stored back to shared memory
        const int n_frag = (FL_B / FL_FRAG) * (Dp / FL_FRAG);
        for (int f = warp; f < n_frag; f += FL_WARPS) {
            float *o = so + (f % 2) * FL_FRAG * ldo + (f / 2) * FL_FRAG;
            FlAcc acc;
            wmma::load_matrix_sync(acc, o, ldo, wmma::mem_row_major);
            for (int kk = 0; kk < FL_B; kk += FL_FRAG) {
                FlA fa;
                FlB fb;
                wmma::load_matrix_sync(fa, sp + (f % 2) * FL_FRAG * FL_LDP + kk, FL_LDP);
                wmma::load_matrix_sync(fb, skv + (size_t)kk * ldh + (f / 2) * FL_FRAG, ldh);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(o, acc, ldo, wmma::mem_row_major);
        }
    }
    __syncthreads();
    float *ob = out + (size_t)b * Tq * ld + (size_t)h * D;
    for (int idx = threadIdx.x; idx < FL_B * D; idx += FL_THREADS) {
        int r = idx / D, d = idx % D, i = i0 + r;
        if (i < Tq) ob[(size_t)i * ld + d] = so[r * ldo + d] * (1.0f / sl[r]);
    }
    if (threadIdx.x < FL_B && i0 + (int)threadIdx.x < Tq)
        lse[(size_t)bh * Tq + i0 + threadIdx.x] = sm[threadIdx.x] + logf(sl[threadIdx.x]);
}

// ---------------------------------------------------------------- backward
// p and ds of one score element (fp32 s = q.k, dp = dout.v), the other paths' expressions; 0 where masked.
__device__ __forceinline__ void prob_grad(float s, float dp, float lse_i, float D_i, float scale, bool vis, float *p,
                                          float *ds) {
    *p = vis ? expf(s * scale - lse_i) : 0.0f;
    *ds = vis ? *p * (dp - D_i) * scale : 0.0f;
}

// grid (B*H, query tiles): dq_i = sum over key tiles j0 <= i of dS K.
__global__ void __launch_bounds__(FL_THREADS)
k_flash_bwd_dq(float *dq, const float *dout, const float *lse, const float *Di, const float *q, const float *k,
               const float *v, int T, int H, int D, float scale) {
    // [4][FL_B, ldh] bf16: q, dout, k, v tiles; k and v (adjacent) then hold the fp32 dQ tile [FL_B, ldo]
    __shared__ __align__(32) __nv_bfloat16 st[4 * FL_TILE_H];
    __shared__ __align__(32) float ss[FL_B * FL_LDS], sdp[FL_B * FL_LDS]; // S, dP
    __shared__ __align__(32) __nv_bfloat16 sds[FL_B * FL_LDP];           // bf16(dS)
    __shared__ float slse[FL_B], sdi[FL_B];
    __nv_bfloat16 *sq = st, *sdo = st + FL_TILE_H, *sk = st + 2 * FL_TILE_H, *sv = st + 3 * FL_TILE_H;
    const int Dp = round_up16(D), ldh = Dp + 8, ldo = Dp + 4;
    const int bh = blockIdx.x, b = bh / H, h = bh % H, i0 = blockIdx.y * FL_B;
    const size_t ld = (size_t)H * D, base = (size_t)b * T * ld + (size_t)h * D;
    stage_rows(sq, ldh, q + base, ld, T, i0, D, Dp);
    stage_rows(sdo, ldh, dout + base, ld, T, i0, D, Dp);
    stage_row_stats(slse, sdi, lse, Di, bh, T, i0);
    FlAcc acc[FL_ACC];
    for (int u = 0; u < FL_ACC; u++) wmma::fill_fragment(acc[u], 0.0f);
    const int i_end = min(i0 + FL_B, T);
    for (int j0 = 0; j0 < i_end; j0 += FL_B) {
        __syncthreads(); // the previous tile's dS K has read sk and sds
        stage_rows(sk, ldh, k + base, ld, T, j0, D, Dp);
        stage_rows(sv, ldh, v + base, ld, T, j0, D, Dp);
        __syncthreads();
        scores_tile(ss, sq, sk, ldh, Dp);   // S = Q K^T
        scores_tile(sdp, sdo, sv, ldh, Dp); // dP = dO V^T
        __syncthreads();
        for (int idx = threadIdx.x; idx < FL_B * FL_B; idx += FL_THREADS) {
            int r = idx / FL_B, c = idx % FL_B, i = i0 + r, j = j0 + c;
            float p, ds;
            prob_grad(ss[r * FL_LDS + c], sdp[r * FL_LDS + c], slse[r], sdi[r], scale, i < T && j <= i, &p, &ds);
            sds[r * FL_LDP + c] = __float2bfloat16_rn(ds);
        }
        __syncthreads();
        accumulate_tile(acc, sds, sk, ldh, Dp); // dQ += dS K
    }
    __syncthreads(); // sk, sv free
    float *sres = (float *)(void *)sk;
    store_tile(sres, ldo, acc, Dp);
    store_tile_rows(dq + base, ld, T, i0, D, sres, ldo);
}

// grid (B*H, key tiles): dk_j = sum over query tiles i >= j of dS^T Q, dv_j = bf16(P)^T dO.
__global__ void __launch_bounds__(FL_THREADS)
k_flash_bwd_dkdv(float *dk, float *dv, const float *dout, const float *lse, const float *Di, const float *q,
                 const float *k, const float *v, int T, int H, int D, float scale) {
    // [4][FL_B, ldh] bf16: k, v, q, dout tiles; q and dout (adjacent) then hold the fp32 result tiles [FL_B, ldo]
    __shared__ __align__(32) __nv_bfloat16 st[4 * FL_TILE_H];
    __shared__ __align__(32) float sst[FL_B * FL_LDS], sdpt[FL_B * FL_LDS]; // S^T, then dP^T and dS^T (fp32)
    __shared__ __align__(32) __nv_bfloat16 spt[FL_B * FL_LDP];            // bf16(P^T), then bf16(dS^T)
    __shared__ float slse[FL_B], sdi[FL_B];
    __nv_bfloat16 *sk = st, *sv = st + FL_TILE_H, *sq = st + 2 * FL_TILE_H, *sdo = st + 3 * FL_TILE_H;
    const int Dp = round_up16(D), ldh = Dp + 8, ldo = Dp + 4;
    const int bh = blockIdx.x, b = bh / H, h = bh % H, j0 = blockIdx.y * FL_B;
    const size_t ld = (size_t)H * D, base = (size_t)b * T * ld + (size_t)h * D;
    stage_rows(sk, ldh, k + base, ld, T, j0, D, Dp);
    stage_rows(sv, ldh, v + base, ld, T, j0, D, Dp);
    FlAcc ak[FL_ACC], av[FL_ACC];
    for (int u = 0; u < FL_ACC; u++) {
        wmma::fill_fragment(ak[u], 0.0f);
        wmma::fill_fragment(av[u], 0.0f);
    }
    for (int i0 = j0; i0 < T; i0 += FL_B) { // the query tiles with a query i >= j0 (tiles are aligned)
        __syncthreads(); // the previous tile's products have read sq, sdo and spt
        stage_rows(sq, ldh, q + base, ld, T, i0, D, Dp);
        stage_rows(sdo, ldh, dout + base, ld, T, i0, D, Dp);
        stage_row_stats(slse, sdi, lse, Di, bh, T, i0);
        __syncthreads();
        scores_tile(sst, sk, sq, ldh, Dp);   // S^T = K Q^T: [key, query]
        scores_tile(sdpt, sv, sdo, ldh, Dp); // dP^T = V dO^T
        __syncthreads();
        for (int idx = threadIdx.x; idx < FL_B * FL_B; idx += FL_THREADS) {
            int r = idx / FL_B, c = idx % FL_B, j = j0 + r, i = i0 + c;
            float p, ds;
            prob_grad(sst[r * FL_LDS + c], sdpt[r * FL_LDS + c], slse[c], sdi[c], scale, i < T && j <= i, &p, &ds);
            spt[r * FL_LDP + c] = __float2bfloat16_rn(p);
            sdpt[r * FL_LDS + c] = ds; // this thread's own element
        }
        __syncthreads();
        accumulate_tile(av, spt, sdo, ldh, Dp); // dV += P^T dO
        __syncthreads();
        for (int idx = threadIdx.x; idx < FL_B * FL_B; idx += FL_THREADS) {
            int r = idx / FL_B, c = idx % FL_B;
            spt[r * FL_LDP + c] = __float2bfloat16_rn(sdpt[r * FL_LDS + c]);
        }
        __syncthreads();
        accumulate_tile(ak, spt, sq, ldh, Dp); // dK += dS^T Q
    }
    __syncthreads(); // sq, sdo free
    float *sres = (float *)(void *)sq;
    store_tile(sres, ldo, av, Dp);
    store_tile_rows(dv + base, ld, T, j0, D, sres, ldo);
    __syncthreads();
    store_tile(sres, ldo, ak, Dp);
    store_tile_rows(dk + base, ld, T, j0, D, sres, ldo);
}

// ---------------------------------------------------------------- costs (cuda_common.cuh)
// FLOPs: the tensor-core products the kernels execute, per visited (query tile, key tile) pair 2 FL_B^2 Dp each
// (forward S and P V; dq S, dP and dS K; dkdv S^T, dP^T, P^T dO and dS^T Q), the diagonal tiles' masked half and D's
// padding to Dp included. The softmax's exp on CUDA cores is not priced (it overlaps the tensor cores at best), so
// the prediction is a lower bound. Bytes: every input read once, outputs written once: K and V tiles read again by
// each query tile come from L2 at these sizes.
static double tile_pairs_fwd(int Tq, int Tk) { // visited (query tile, key tile) pairs of one (b,h)
    double n = 0;
    for (int i0 = 0; i0 < Tq; i0 += FL_B) n += (Tk - Tq + (i0 + FL_B < Tq ? i0 + FL_B : Tq) + FL_B - 1) / FL_B;
    return n;
}
static double tile_pairs_bwd(int T) {
    double n = (T + FL_B - 1) / FL_B;
    return n * (n + 1) / 2;
}

static unsigned tile_count(const char *op, int T) {
    long n = ((long)T + FL_B - 1) / FL_B;
    if (n > 65535) die("%s: %d rows need %ld tiles of %d, more than the grid's 65,535", op, T, n, FL_B);
    return (unsigned)n;
}

void cuda_attention_flash_forward(Backend *be, scalar_t *out, scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                  const scalar_t *v, int B, int Tq, int Tk, int H, int D, scalar_t scale) {
    if (!cuda_attention_flash_supported(be, D))
        die("attention_forward: the flash path takes bf16 and D <= %d", FL_D_MAX);
    if (B <= 0 || H <= 0 || Tq <= 0) return;
    const int Dp = round_up16(D);
    const double pairs = (double)B * H * tile_pairs_fwd(Tq, Tk), rows = (double)B * H * Tq;
    const KernelCost cost = tensor_core_cost(pairs * 2 * 2.0 * FL_B * FL_B * Dp,
                                             (2.0 * rows * D + 2.0 * B * H * Tk * D + rows) * sizeof(float));
    dim3 grid((unsigned)(B * H), tile_count("attention_forward", Tq));
    LAUNCH(k_flash_fwd, grid, FL_THREADS, 0, cost)(out, lse, q, k, v, Tq, Tk, H, D, scale);
    CHECK_LAUNCH();
}

void cuda_attention_flash_backward(Backend *be, scalar_t *dq, scalar_t *dk, scalar_t *dv, const scalar_t *dout,
                                   const scalar_t *out, const scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                   const scalar_t *v, int B, int T, int H, int D, scalar_t scale) {
    if (!cuda_attention_flash_supported(be, D))
        die("attention_backward: the flash path takes bf16 and D <= %d", FL_D_MAX);
    if (B <= 0 || H <= 0 || T <= 0) return;
    const long rows = (long)B * H * T;
    float *Di = (float *)cuda_scratch(be, SCRATCH_ATTN_ROWDOT, (size_t)rows * sizeof(float)); // [B*H, T]
    cuda_attention_rowdot(be, Di, dout, out, B, T, H, D);
    const int Dp = round_up16(D);
    const double pairs = (double)B * H * tile_pairs_bwd(T), prod = 2.0 * FL_B * FL_B * Dp;
    dim3 grid((unsigned)(B * H), tile_count("attention_backward", T));
    LAUNCH(k_flash_bwd_dq, grid, FL_THREADS, 0,
           tensor_core_cost(3 * pairs * prod, (5.0 * rows * D + 2.0 * rows) * sizeof(float)))(dq, dout, lse, Di, q, k,
                                                                                             v, T, H, D, scale);
    CHECK_LAUNCH();
    LAUNCH(k_flash_bwd_dkdv, grid, FL_THREADS, 0,
           tensor_core_cost(4 * pairs * prod, (6.0 * rows * D + 2.0 * rows) * sizeof(float)))(dk, dv, dout, lse, Di, q,
                                                                                              k, v, T, H, D, scale);
    CHECK_LAUNCH();
}
