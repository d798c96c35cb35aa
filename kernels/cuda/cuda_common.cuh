// Private header of the CUDA backend (kernels/cuda/*.cu): checking macros, backend state, shared device helpers.
//
// Conventions: every op runs on the legacy default stream, in order; ops that return a host value synchronise.
// Determinism: no floating-point atomics. Every reduction has a fixed thread-to-data assignment and a fixed
// combination order (warp butterflies, shared-memory trees, per-chunk partials summed in chunk order), so repeated
// runs on the same GPU give bit-identical results.
// Precision: PRECISION_BF16 emulates autocast for the matmul-like ops (matmul, cvmm, attention): operands rounded to
// bf16, fp32 accumulation, fp32 outputs. Everything else is fp32 (reductions in double where the CPU uses double).
#ifndef KERNELS_CUDA_CUDA_COMMON_CUH
#define KERNELS_CUDA_CUDA_COMMON_CUH

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

#ifdef CUDA_EMULATION // the CPU emulator used where no GPU exists (kernels/cuda/emu/cuda_emu.h says what it checks)
#include "kernels/cuda/emu/cuda_emu.h"
#else
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

extern "C" {
#include "kernels/backend.h"
// pipeline/base/log.h uses C11 _Noreturn; declare the two helpers used here with C linkage instead.
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void *xcalloc(size_t count, size_t size);
}

static_assert(sizeof(scalar_t) == sizeof(float), "the CUDA backend is built for scalar_t = float only");

#define CHECK_CUDA(call)                                                                                           \
    do {                                                                                                           \
        cudaError_t err_ = (call);                                                                                 \
        if (err_ != cudaSuccess)                                                                                   \
            die("CUDA error at %s:%d in %s: %s (%s)", __FILE__, __LINE__, #call, cudaGetErrorString(err_),         \
                cudaGetErrorName(err_));                                                                           \
    } while (0)

#define CHECK_CUBLAS(call)                                                                                         \
    do {                                                                                                           \
        cublasStatus_t st_ = (call);                                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                                          \
            die("cuBLAS error at %s:%d in %s: %s (%s)", __FILE__, __LINE__, #call, cublasGetStatusName(st_),        \
                cublasGetStatusString(st_));                                                                       \
    } while (0)

// What one kernel launch asks of the GPU, for the cost model (make bench-model, tests/bench/bench_model.py): flops,
// the floating-point operations of its arithmetic (a multiply-add 2, an exp/log/sqrt/division 1, integer index
// arithmetic and comparisons not counted unless they are the work, as in the routing plan's and top-k's kernels, where
// each integer step counts 1), and bytes, what it must move between device memory and the SMs at least: every element
// it reads once, every element it writes once (the roofline's traffic, not what caches do). Each launch states its
// own; the emulator records it with the launch (CUDA_EMU_LAUNCH_LOG); a GPU build compiles the expression (so nvcc
// checks it and its helpers count as used) inside sizeof, never evaluated. tensor_cores: the kernel's FLOPs are
// bf16 tensor-core matrix operations (wmma), costed at the bf16 tensor-core peak; every other kernel's at the fp32
// CUDA-core peak.
#ifdef CUDA_EMULATION
typedef emu::LaunchCost KernelCost;
#else
struct KernelCost {
    double flops, bytes;
    bool tensor_cores;
};
#endif
static inline KernelCost kernel_cost(double flops, double bytes) { return KernelCost{flops, bytes, false}; }
static inline KernelCost tensor_core_cost(double flops, double bytes) { return KernelCost{flops, bytes, true}; }
// The cost of a kernel that streams n elements: flops_per and bytes_per each.
static inline KernelCost streaming_cost(double n, double flops_per, double bytes_per) {
    return KernelCost{n * flops_per, n * bytes_per, false};
}
// Query-key pairs a causal attention over Tq queries and Tk keys visits (query i sees keys j <= Tk - Tq + i).
static inline double causal_pairs(int Tq, int Tk) { return (double)Tq * (Tk - Tq) + (double)Tq * (Tq + 1) / 2; }

// Kernel launches go through LAUNCH(kernel, grid, block, dynamic_shared_bytes, cost)(args...) so that the emulator
// can run (and record) them on the CPU; on a GPU it is kernel<<<grid, block, shmem>>>(args...) (the cost unevaluated).
#ifdef CUDA_EMULATION
#define LAUNCH(kernel, grid, block, shmem, cost) emu::launch(#kernel, (grid), (block), (shmem), kernel, (cost))
#define DYNAMIC_SHARED(type, name) type *name = (type *)emu::dynamic_shared()
#else
#define LAUNCH(kernel, grid, block, shmem, cost) kernel<<<(grid), (block), ((void)sizeof(cost), (shmem))>>>
#define DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

// After every kernel launch: reports launch-configuration errors at the launch site.
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

// Scratch: CUDA_SCRATCH_BUFFERS device buffers and CUDA_HOST_SCRATCH_BUFFERS pinned host buffers, grown on demand and
// shared by every op (ops are issued from one thread on one stream, so a later op's kernels run after an earlier
// op's, and nothing in a buffer outlives the op call that filled it). Each op names the buffers it uses after what
// they hold, below: the names one op uses are different buffers (alive at the same time), names of different ops may
// be the same buffer. A helper that runs inside other ops has a buffer those ops do not use.
enum { CUDA_SCRATCH_BUFFERS = 10, CUDA_HOST_SCRATCH_BUFFERS = 1 };

// Device buffers. Helpers inside other ops:
enum {
    SCRATCH_GROUPED_GEMM_PTRS = 8, // void *[3, groups]: the grouped GEMM's A, B, C pointers (inside cvmm)
    SCRATCH_CVMM_MMA_TILES = 8,    // int32_t[E + 1]: each expert's first row tile (cvmm's tensor-core path)
};
// routing_plan (cuda_cvmm_plan.cu)
enum {
    SCRATCH_PLAN_INFO = 0, // int32_t[E + 3]: offsets[E + 1] | first bad entry | its id, read back to the host
    SCRATCH_PLAN_TEMP = 1, // int32_t[...]: counts | base | chunk_bad | scan temporaries, per (expert, chunk)
};
// cvmm_forward, cvmm_backward (cuda_cvmm.cu); M routed rows, in plan (expert-sorted) order
enum {
    SCRATCH_CVMM_X_SORTED = 2,  // float[M, Kin]: the inputs X gathered in plan order
    SCRATCH_CVMM_Y_SORTED = 3,  // float[M, Nout]: forward outputs, or backward output gradients, in plan order
                                // (bf16[M, Nout] on the tensor-core path: the unreduced outputs of a weighted forward)
    SCRATCH_CVMM_DX_SORTED = 4, // float[M, Kin]: backward Q = dY_p @ W[e]^T in plan order (bf16[M, Kin] on the
                                // tensor-core path when dX is asked: k_reduce_dw reads it)
    SCRATCH_CVMM_X_BF16 = 5,    // bf16[M, Kin]: the inputs gathered in plan order in bf16 (bf16 mode; copies of a
                                // whole X, in plan order or in place, come from the conversion cache)
    SCRATCH_CVMM_DY_BF16 = 6,   // bf16[M, Nout]: the output gradients gathered in plan order in bf16 (bf16 mode,
                                // backward; a whole dY's copy likewise from the conversion cache)
    SCRATCH_CVMM_W_BF16 = 7,    // bf16[E, Kin, Nout]: W converted, when it is not part of the registered weights
};
// The device-side stable sorts (cuda_key_sort.cu) inside capacity_drop and expert_choice_select (they run
// routing_plan inside, so not buffers 0 and 1); M entries
enum {
    SCRATCH_SORT_PLAN_PERM_INV = 2, // int32_t[2M]: the pass plan's perm | inv
    SCRATCH_SORT_PLAN_OFFSETS = 3,  // int32_t[2 max(buckets, 256) + 1]: the pass plan's offset | group list
    SCRATCH_SORT_ORDER = 4,         // int32_t[M]: the entries in the current order
    SCRATCH_SORT_ORDER_NEXT = 5,    // int32_t[M]: the order after the next pass
    SCRATCH_SORT_KEY = 6,           // uint64_t[M]: each entry's key
    SCRATCH_SORT_IDS = 7,           // int32_t[M]: each position's bucket in the current pass
};
// matmul (cuda_dense.cu): a split-K product's partial outputs (bf16 operands come from the weights' copy or the
// conversion cache, not scratch)
enum { SCRATCH_MATMUL_SPLIT_PARTIAL = 8 /* float[S, M, N] */ };
// linear_backward (cuda_linear_backward.cu; its GEMMs use matmul's split-K partials, buffer 8)
enum {
    SCRATCH_LINEAR_DY_BF16 = 0, // bf16[N, K]: the terms' dY_i side by side (K = sum m_i)
    SCRATCH_LINEAR_W_BF16 = 1,  // bf16[K, C]: the terms' alpha_i W_i stacked
    SCRATCH_LINEAR_ROTATED = 0, // float[sum m_i N]: fp32 mode, the rotated terms' dY_i rotated back
};
// bias_backward, layernorm_backward (cuda_dense.cu)
enum {
    SCRATCH_COLSUM_PARTIAL_A = 0, // double[chunks (+ groups), C]: each row chunk's (then group's) column sums of
                                  // dy * xhat (LayerNorm) or dy (bias)
    SCRATCH_COLSUM_PARTIAL_B = 1, // double[chunks + groups, C]: the same of dy (LayerNorm only)
};
// cross_entropy, sum_squares, all_finite (cuda_loss_optim.cu)
enum {
    SCRATCH_XENT_ROW_LOSS = 0, // double[N]: each row's loss, summed in row order afterwards
    SCRATCH_SUMSQ_PARTIAL = 0, // double[chunks]: each fixed-size chunk's sum of squares
    SCRATCH_FINITE_FOUND = 1,  // int[1]: set when a value is not finite
};
// attention_forward, attention_backward (cuda_attention*.cu; the flash path uses the rowdot only); the GEMM path packs
// the (batch, head) pairs head-major [B*H, T, ldD] and works on `chunk` pairs at a time
enum {
    SCRATCH_ATTN_ROWDOT = 0,       // float[B*H, T]: Di = <dO_i, O_i> (backward)
    SCRATCH_ATTN_Q = 1,            // [B*H, Tq, ldD] float or bf16: packed queries
    SCRATCH_ATTN_K = 2,            // [B*H, Tk, ldD]: packed keys
    SCRATCH_ATTN_V = 3,            // [B*H, Tk, ldD]: packed values
    SCRATCH_ATTN_OUT = 4,          // float[chunk, Tq, ldD]: the chunk's outputs (forward)
    SCRATCH_ATTN_DOUT = 4,         // [B*H, T, ldD]: packed output gradients (backward)
    SCRATCH_ATTN_SCORES = 5,       // float[chunk, Tq, ldK]: scores S, then probabilities P
    SCRATCH_ATTN_DPROBS = 6,       // float[chunk, T, ldK]: dP (backward)
    SCRATCH_ATTN_PROBS_BF16 = 7,   // bf16[chunk, Tq, ldK]: P for the P @ V GEMM (bf16 mode)
    SCRATCH_ATTN_DSCORES_BF16 = 8, // bf16[chunk, T, ldK]: dS (bf16 mode, backward)
    SCRATCH_ATTN_GRADS = 9,        // float[3][chunk, T, ldD]: the chunk's dQ, dK, dV (backward)
};
// entropy_reg, switch_balance (cuda_routing.cu)
enum {
    SCRATCH_EREG_STATS = 0,    // double[B, G] | double[B] | double[1]: entropy of the mean softmax | R * valid
                               // positions of each sequence | the gradient's factor (k_entropy_value; on the device)
    SCRATCH_BALANCE_LSE = 1,   // double[rows]: log-sum-exp of each routing logit row (both ops)
    SCRATCH_EREG_LOG_PBAR = 2, // double[B, G, E]: log of the mean routing softmax per sequence and group
    SCRATCH_SWB_STATS = 2,     // double[G, E] | double[G, E] | double[2]: load counts f (then the load fraction) |
                               // probability sums P | valid positions n | the gradient's factor (on the device)
    SCRATCH_EREG_PARTIAL = 4,  // double[chunks, B, G, E]: each chunk's softmax sums (k_pbar_part)
    SCRATCH_SWB_LOAD_PARTIAL = 4, // double[chunks, G, E]: each chunk's load counts (k_switch_stats_part)
    SCRATCH_SWB_PROB_PARTIAL = 5, // double[chunks, G, E]: each chunk's probability sums
};
// The balance statistics (entropy_reg, switch_balance, seq_balance) are sums over many positions (N = B*T, R*T per
// sequence, or T) for few outputs (an expert's per group or sequence): one thread per output looping over every position
// left most of the GPU idle. They are split into chunks of BALANCE_CHUNK positions: one block per (output group, chunk)
// writes each chunk's partial sums (positions in order), and a second pass adds the chunks in chunk order, so the
// result is deterministic (the same bits on every run).
// The chunks are the grid's y dimension, at most 65,535 (BALANCE_CHUNK x 65,535 = 16,776,960 positions per output
// group): balance_grid checks both dimensions and dies naming the op and the sizes (cuda_balance_chunks.cu).
#define BALANCE_CHUNK 256
static inline long balance_chunks(long n) { return n > 0 ? (n + BALANCE_CHUNK - 1) / BALANCE_CHUNK : 1; }
// The first pass's grid: dim3(groups, balance_chunks(positions)); op names the caller in the message.
dim3 balance_grid(const char *op, long groups, long positions);
// The second pass: f[i] = sum of f_part[c, i] and P[i] = sum of P_part[c, i] over the chunks c in order (i < n).
void balance_chunk_sums(double *f, double *P, const double *f_part, const double *P_part, long chunks, size_t n);
// cnt[b] = R x the positions t < T with valid[b * T + t] != 0 (all T with valid NULL), b < B, as doubles (exact): the
// counts the host formulas take, made on the device and read back with the statistics they normalise.
void balance_valid_counts(double *cnt, const uint8_t *valid, int B, long T, double R);

// Pinned host buffers.
enum {
    HOST_SCRATCH_ROPE_INV_FREQ = 0, // float[n_rot / 2]: RoPE inverse frequencies staged for the upload
};

// Implementation choices with more than one kernel path (environment variables read once at backend creation, so
// tests and benchmarks can force each path; "auto" is the default and what results are recorded with):
//   DMMATH_CUDA_ATTENTION = auto | fused | gemm | flash (cuda_attention*.cu)
//   DMMATH_CUDA_CVMM      = auto | loop | grouped | mma (cuda_cvmm*.cu)
// and, for tests only, DMMATH_CUDA_ATTENTION_CHUNK_PAIRS = a positive number of (batch, head) pairs per chunk of the
// GEMM attention path (unset: as many as its score budget allows), so that small shapes run in several chunks.
enum AttentionImpl { ATTENTION_AUTO = 0, ATTENTION_FUSED, ATTENTION_GEMM, ATTENTION_FLASH };
enum CvmmImpl { CVMM_AUTO = 0, CVMM_LOOP, CVMM_GROUPED, CVMM_MMA };
// DMMATH_CUDA_MATMUL: auto (split-K where its rule says, operands from the bf16 conversion cache) or plain (one GEMM
// per product, each operand outside the weights converted at every call: the path before them, a comparator for
// make bench-gpu)
enum MatmulImpl { MATMUL_AUTO = 0, MATMUL_PLAIN };

// Entries of the bf16 conversion cache (cuda_bf16_cache.cu). make bench-model, the paper's configs: MoEUT converts
// the same with 8, 16 or 32 entries, dense 507, 495, 473 times per step (287.8 -> 288.6 ms predicted with 8 instead
// of 16); with cvmm's copies and LayerNorm's in the cache, 16 entries save 0.3 ms (MoEUT) and 0.7 ms (dense) of 388
// and 513. Every entry grows to the largest operand so far (at the paper's size: dense [32768, 4096], 256 MiB in
// bf16, 2 GiB for 8; MoEUT [32768, 1024], 512 MiB for 8, 1 GiB on cvmm's cuBLAS paths, whose FFN rows in plan order
// are [524288, 128]), so 8.
constexpr int BF16_CACHE_ENTRIES = 8;
// Keys of past misses kept for cuda_bf16_cache_produce_input (host memory only; the paper's MoEUT step has 47)
constexpr size_t BF16_DEMAND_KEYS = 4096;
// Live narrow tensors at most (layernorm_forward_narrow): the registry is a host-side ordered map, sized at need up to
// this bound (no device memory of its own). MoEUT keeps each training application's LN1 and LN2 outputs for its
// backward, 2 per application (the paper's: 36), plus the inference scratch's 2 and the dense layers'; past the
// bound a narrow LayerNorm writes the exact fp32 y and its cached copy instead (the same operands for matmul).
// DMMATH_CUDA_NARROW_ENTRIES=K (tests) lowers it to K, 0 included, so that the tests take that path.
constexpr int BF16_NARROW_ENTRIES = 1024;

struct CudaImpl {
    cublasHandle_t cublas;
    int attention_impl; // AttentionImpl
    int cvmm_impl;      // CvmmImpl
    int matmul_impl;    // MatmulImpl
    int attention_chunk_pairs; // 0: from the GEMM attention path's score budget
    bool attention_flash_fallback_said; // ATTENTION_FLASH: the line saying a call took another path is printed
    // Under CVMM_AUTO, per operand type (0 fp32, 1 bf16): 0 not probed yet, 1 grouped GEMM, -1 per-expert loop
    // (decided once by cuda_cvmm_gemm.cu's probe).
    int cvmm_auto_grouped[2];
    // Under CVMM_AUTO, for bf16 operands where the grouped GEMM is not taken: 0 not probed yet, 1 the tensor-core
    // kernels (cuda_cvmm_mma.cu), -1 the per-expert loop (decided once by cuda_cvmm_mma_probe.cu's probe).
    int cvmm_auto_mma;
    void *dev[CUDA_SCRATCH_BUFFERS];
    size_t dev_cap[CUDA_SCRATCH_BUFFERS];
    void *host[CUDA_HOST_SCRATCH_BUFFERS];
    size_t host_cap[CUDA_HOST_SCRATCH_BUFFERS];
    // RoPE frequencies of the last (n_rot, base) on the device: uploaded once, not per call (a cudaMemcpy from the
    // host waits for all queued GPU work, so a per-call upload drained the GPU's queue 4 times per layer).
    float *rope_inv_freq;
    int rope_half;
    float rope_base;
    // The pinned upload stage (cu_to_device, cuda_backend.cu): allocated on first use; upload_used: its bytes holding
    // uploads queued since the host last waited for the device.
    void *upload_stage;
    size_t upload_used;
    // The block the host reads values and the device's error record from (cuda_device_status.cu): allocated on first
    // use; status_unread: a kernel launched since the last read may have written the record.
    struct DeviceReadback *readback;
    bool status_unread;
    // The registered weights (register_weights; cuda_weights_bf16.cu) and their bf16 copy for bf16-mode matmul and
    // cvmm operands: allocated on first use, converted again on the first use after any write into the weights.
    const float *weights;
    size_t weights_n;
    __nv_bfloat16 *weights16;
    bool weights16_stale;
    // The bf16 conversion cache of other operands (cuda_bf16_cache.cu): BF16_CACHE_ENTRIES device buffers, least
    // recently used replaced; an entry is valid while src != NULL.
    struct Bf16CacheEntry {
        const float *src;    // the fp32 source converted, n floats; NULL: the entry holds nothing
        size_t n;
        __nv_bfloat16 *buf;  // bf16[cap]: src's copy in buf[0, n)
        size_t cap;
        unsigned long long used; // the cache clock at the last hand-out (larger = more recent)
    } bf16_cache[BF16_CACHE_ENTRIES];
    unsigned long long bf16_cache_clock;
    // The narrow tensors (cuda_bf16_cache.cu): fp32 buffers [src, src + n) whose memory holds their own bf16 rounding
    // (layernorm_forward_narrow), handed out by cuda_bf16_cached like an entry until a write drops them: a
    // std::map<uintptr_t, size_t> (src -> n, disjoint ranges), created on first use; at most bf16_narrow_cap of them
    // (BF16_NARROW_ENTRIES, or DMMATH_CUDA_NARROW_ENTRIES).
    void *bf16_narrow;
    int bf16_narrow_cap;
    // The sizes of the live allocations of the backend's alloc (cuda_backend.cu), so that free drops the cache
    // entries inside the freed buffer: a std::unordered_map<const void *, size_t>, created with the backend.
    void *alloc_sizes;
    // The operands converted on a miss (cuda_bf16_cache.cu): a std::unordered_map<const float *, size_t>.
    void *bf16_demand;
    // The kept copies (keep_operand; cuda_bf16_cache.cu): a std::unordered_map<const float *, Bf16Kept> (source ->
    // its own bf16 buffer, valid until the source is written), created on first use.
    void *bf16_kept;
};

static inline CudaImpl *cuda_impl(Backend *be) { return (CudaImpl *)be->impl; }
static inline bool use_bf16(const Backend *be) { return be->precision == PRECISION_BF16; }

// The pinned upload stage's size: a micro-batch's token ids, targets and masks many times over.
enum : size_t { CUDA_UPLOAD_STAGE_BYTES = (size_t)4 << 20 };
// Called where the host has waited for all work queued so far (a synchronous copy, cudaDeviceSynchronize): the
// uploads staged before are done, so the upload stage is free again.
static inline void cuda_host_waited(Backend *be) { cuda_impl(be)->upload_used = 0; }

// Scratch buffer `slot` (one of the names above) holding at least `bytes`, grown on demand (contents undefined).
void *cuda_scratch(Backend *be, int slot, size_t bytes);
void *cuda_host_scratch(Backend *be, int slot, size_t bytes);

// Row-major C[M,N] = alpha op(A) op(B) + beta C with explicit leading dimensions. In bf16 mode A and B must already
// be bf16 (a_bf16/b_bf16 pointers); in fp32 mode the float pointers are used. Exactly one of each pair is non-NULL.
void cuda_gemm(Backend *be, int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda,
               const void *B, int ldb, float beta, float *C, int ldc, bool bf16_operands);
// RoPE's frequencies 1 / base^(2i / n_rot), i < n_rot / 2, on the device (kept for the last (n_rot, base); a change
// frees the old ones, which synchronises): rope's and linear_backward's rotations (cuda_attention.cu).
const float *cuda_rope_inv_freq(Backend *be, int n_rot, scalar_t base);
// dst = rope(src) into other memory (dst reported by the caller): rope's arithmetic, the unrotated dims copied.
void cuda_rope_to(Backend *be, float *dst, const float *src, int B, int T, int H, int D, int n_rot, int pos_offset,
                  scalar_t base, int inverse);
// cuda_gemm with ldc = N, split in K where cuda_matmul_split_k (cuda_dense.cu) says so (never under
// DMMATH_CUDA_MATMUL=plain): matmul's product, for ops that prepare their own operands (linear_backward).
void cuda_gemm_rows(Backend *be, int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda,
                    const void *B, int ldb, float beta, float *C, bool bf16_operands);
// dst[n] = bf16(src[n]) (round to nearest even).
void cuda_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n);

// ---- the registered weights' bf16 copy (cuda_weights_bf16.cu) ----
// Byte ranges [a, a + a_bytes) and [b, b + b_bytes) overlap: unsigned differences, so no end pointer can overflow
// (a write's report against the weights and against the conversion cache's sources).
static inline bool ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x >= y ? x - y < b_bytes : y - x < a_bytes;
}
// [p, p + n) lies inside [base, base + base_n) (values; base may be NULL: nothing lies inside)
static inline bool range_inside(const float *p, size_t n, const float *base, size_t base_n) {
    return base && p >= base && n <= base_n && (size_t)(p - base) <= base_n - n;
}
void cuda_register_weights(Backend *be, const scalar_t *p, size_t n);
// For an op that writes all of the registered weights (AdamW's step), in bf16 mode: their bf16 copy, which the op's
// kernel, launched next, writes beside them, so that no conversion reads the new weights again (call it after the
// op's cuda_weights_written, which marked the copy stale; it marks it fresh). NULL otherwise (not all of them, fp32).
__nv_bfloat16 *cuda_weights_bf16_produce(Backend *be, const float *p, size_t n);
// Backend.routing_plan_to_host (cuda_cvmm_plan.cu).
void cuda_routing_plan_to_host(Backend *be, RoutingPlan *pl);
// Every op that writes device memory calls this for each of its outputs BEFORE writing (dst, bytes: the range it may
// write): a write into the registered weights marks their bf16 copy stale, and the conversion cache drops the entries
// whose source it overlaps (cuda_bf16_cache_forget). Cheap (range comparisons); a write path that skipped it would
// leave a stale copy, which the emulator's checks report (cuda_weights_bf16.cu, cuda_bf16_cache.cu).
void cuda_weights_written(Backend *be, const void *dst, size_t bytes);
// cu_free of the registered buffer forgets the registration (and frees the copy).
void cuda_weights_freed(Backend *be, const void *p);
// The bf16 form of the fp32 operand p[n] for a bf16 GEMM: the weights' copy at p's offset when [p, p + n) lies inside
// the registered weights (converting all of them first if stale), else p converted into scratch buffer `slot`.
const __nv_bfloat16 *cuda_bf16_operand(Backend *be, const float *p, size_t n, int slot);
// The weights' copy slice (true) when [p, p + n) lies inside the registered weights, converting them first if stale.
bool cuda_bf16_weights_slice(Backend *be, const float *p, size_t n, const __nv_bfloat16 **out);

// ---- the bf16 conversion cache (cuda_bf16_cache.cu) ----
// The bf16 form of the fp32 operand p[n] for a bf16 GEMM, converted at most once while p's values stay the same: the
// weights' copy when p lies inside the registered weights, else a cache entry holding [p, p + n) (a hit: nothing
// converted), else p converted into the least recently used entry. The copy stays valid until BF16_CACHE_ENTRIES - 1
// other misses later, so one op may take up to that many operands from it. Results are the bits a conversion in
// the call would give.
const __nv_bfloat16 *cuda_bf16_cached(Backend *be, const float *p, size_t n);
// A producer's bf16 copy (LayerNorm forward, cuda_dense.cu): the entry for [p, p + n) taken now, as a miss takes it,
// and handed out to the caller, whose kernel, launched next, writes bf16(p[i]) into it beside each p[i] it writes
// (called after the write's report). So the GEMMs that read p find it without a conversion, which would read p's
// fp32 values again. On the emulator the entry is checked after the op as every other.
__nv_bfloat16 *cuda_bf16_cache_produce(Backend *be, const float *p, size_t n);
// The same for an op's INPUT p[n] that it reads whole (LayerNorm forward's x), where a copy is wanted: when [p, p + n)
// was converted on a miss before (as a GEMM operand: MoEUT's layer input and x1, which its LayerNorms read and cvmm
// converts; the keys of past misses are kept) and no entry holds it now; else NULL. p must not be written by the op.
__nv_bfloat16 *cuda_bf16_cache_produce_input(Backend *be, const float *p, size_t n);
// Registers p[n] as a narrow tensor (called after the write's report): its memory will hold bf16(p[i]) at element i
// of (__nv_bfloat16 *)p, which the caller's kernel, launched next, writes; cuda_bf16_cached then hands that out for
// p's values, and a write into it drops it as it drops an entry. NULL (nothing registered) when every slot is live.
__nv_bfloat16 *cuda_bf16_narrow_register(Backend *be, float *p, size_t n);
// Drops the entries whose source overlaps [p, p + bytes) (cuda_weights_written calls it for every reported write),
// and the narrow tensors it overlaps.
void cuda_bf16_cache_forget(Backend *be, const void *p, size_t bytes);
// The backend's alloc and free: the allocation's size is kept, and a free drops the entries inside the buffer (its
// memory may come back from another cudaMalloc, written without a report).
void cuda_bf16_cache_allocated(Backend *be, const void *p, size_t bytes);
void cuda_bf16_cache_freed(Backend *be, const void *p);
void cuda_bf16_cache_destroy(Backend *be); // frees the entries' buffers and the size map
#ifdef CUDA_EMULATION
// The emulator's check before and after every op of the table (cuda_backend.cu): each valid entry still equals a
// fresh rounding of its source; dies otherwise, naming the op that wrote without reporting (after) or saying that the
// write came from outside the backend's ops (before).
void cuda_bf16_cache_check(Backend *be, const char *op, bool after);
#endif

// Bytes a data-movement step reads plus writes (row data, not indices), for the emulator's work counters
// (CUDA_EMU_STATS, make bench-emu-counts): the cost the issue-16 routing plan removes shows as a number there. Nothing
// on a GPU.
static inline void count_traffic(const char *kind, size_t bytes) {
#ifdef CUDA_EMULATION
    emu::stat_traffic(kind, bytes);
#else
    (void)kind, (void)bytes;
#endif
}

// ---- stable sorts on the device (cuda_key_sort.cu), for capacity_drop, expert_choice_select, embedding_backward ----
// The routing plan's stable counting sort used as radix passes: entries 0..M-1, in the order cur (cur[m] = the entry
// at position m), re-sorted stably by one bucket per entry per pass, with nothing read back to the host between
// passes. Integer work only: exact and run-to-run identical.
struct KeySort {
    long M;
    int32_t *cur, *next; // [M]: the entries in the current order; the order after the next pass
    int32_t *ids;        // [M]: each position's bucket in the current pass
    uint64_t *key;       // [M]: each entry's key, written by the caller after key_sort_begin
    RoutingPlan pl;      // the last pass's plan (perm, offset on the device)
    std::vector<int32_t> host_offset; // the checked last pass's offsets (key_sort_by_group)
};
// Scratch (SCRATCH_SORT_*) for M entries (1 <= M <= INT32_MAX) and passes of up to max(max_buckets, 256) buckets;
// cur = the entry order 0..M-1 (one launch).
void key_sort_begin(Backend *be, KeySort *ks, long M, int max_buckets);
// LSD passes by bytes 0..n_bytes-1 of key, least significant first: then ascending key, ties in the earlier order.
void key_sort_by_bytes(Backend *be, KeySort *ks, int n_bytes);
// One pass by the whole key (every key < n_buckets).
void key_sort_by_key(Backend *be, KeySort *ks, int n_buckets);
// The last pass, by a group of each entry: group[p] or, with group NULL, p / per_group. It leaves cur as it was:
// sorted position m holds entry cur[pl.perm[m]], and group g occupies [pl.offset[g], pl.offset[g + 1]). checked:
// a group outside [0, n_groups) (ids that come from outside) goes to the device's error record as capacity_drop's
// (its one caller); else groups must be in range. Nothing is read back either way.
void key_sort_by_group(Backend *be, KeySort *ks, const int32_t *group, int per_group, int n_groups, bool checked);
// cuda_routing_plan up to the device arrays (perm, inv, offset, group_expert), without the host copy (host_offset
// and n_groups are left alone). An id outside [0, n_buckets) goes to the device's error record with code bad_id
// (DEVICE_STATUS_OK: not reported, the caller's ids are in range); the plan stays safe to read (cuda_cvmm_plan.cu).
void cuda_routing_plan_on_device(Backend *be, RoutingPlan *pl, const int32_t *ids, int M, int n_buckets, int bad_id);

// ---- the device's error record (cuda_device_status.cu) ----
// A kernel that finds a bad input (an expert id outside [0, E), a target outside [-1, V)) writes it here, the first
// record winning, instead of the host reading a flag back after each call (one synchronisation each). The host reads
// the record with the next value it reads anyway (read_values: a training step's sums; cuda_readback_value: a value
// an op returns, the gradient norm), at to_host and synchronize, and where it copies a plan's offsets, and dies there
// with the message of the op that found it.
enum {
    DEVICE_STATUS_OK = 0,
    DEVICE_STATUS_PLAN_BAD_ID = 1,     // routing_plan: a = the id, b = its entry, c = E
    DEVICE_STATUS_XENT_BAD_TARGET = 2, // cross_entropy: a = V
    DEVICE_STATUS_CAPACITY_BAD_ID = 3, // capacity_drop: a = the id, b = its entry in the last sort pass, c = E
    DEVICE_STATUS_EMBED_BAD_TOKEN = 4, // embedding_backward: a = a negative token id, b = a position holding it
};
struct DeviceReadback { // device memory, copied back in one piece
    double value;       // the value an op returns (cuda_sum_doubles, entropy_reg, ...)
    double values[BACKEND_READ_VALUES_MAX]; // read_values' values
    int32_t status[4];  // code, a, b, c
};
// Writers store only if nothing is recorded yet; concurrent writers of one kernel store the same values.
__device__ __forceinline__ void device_status_set(int32_t *st, int32_t code, int32_t a, int32_t b, int32_t c) {
    if (st[0] != DEVICE_STATUS_OK) return;
    st[1] = a, st[2] = b, st[3] = c;
    st[0] = code;
}
// The readback block on the device (allocated and cleared on first use).
DeviceReadback *cuda_readback(Backend *be);
// The record for a kernel that may write it (marks it unread).
int32_t *cuda_device_status(Backend *be);
// Reads the record if a kernel may have written it since the last read (one synchronisation; none otherwise) and dies
// with its message if set.
void cuda_device_status_check(Backend *be);
// Dies with the message of a record read back (status as copied to the host); returns when it is DEVICE_STATUS_OK.
void cuda_device_status_die(Backend *be, const int32_t status[4]);

// ---- launch helpers ----
static inline unsigned grid_for(size_t n, unsigned block) {
    size_t g = (n + block - 1) / block;
    if (g > 65535u * 16u) g = 65535u * 16u; // kernels use grid-stride loops beyond this
    return (unsigned)(g ? g : 1);
}

// ---- device helpers ----
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
template <bool BF16> __device__ __forceinline__ float opnd(float x) { return BF16 ? round_bf16(x) : x; }
// ReLU's selects, one definition for relu_forward / relu_backward (cuda_dense.cu) and cvmm's fused forms (CVMM_RELU_Y,
// CVMM_DX_THROUGH_RELU), so a fused result has the bits of the unfused sequence: relu_value(v) = v > 0 ? v : +0, and
// relu_grad(pre, g) = pre > 0 ? g : +0 (the gradient through ReLU of a pre-activation, or of its output: A > 0 iff
// U > 0).
__device__ __forceinline__ float relu_value(float v) { return v > 0.0f ? v : 0.0f; }
__device__ __forceinline__ float relu_grad(float pre, float g) { return pre > 0.0f ? g : 0.0f; }

// RoPE's rotation of the pair (x0, x1) of dims (i, i + n_rot/2) at position pos (inverse: the transpose), one
// arithmetic for rope (k_rope, k_rope_to, cuda_attention.cu) and linear_backward's rotation on read.
__device__ __forceinline__ void rope_rotate(float x0, float x1, int pos, float inv_freq, bool inverse, float *y0,
                                            float *y1) {
    const float angle = (float)pos * inv_freq, c = cosf(angle), s = inverse ? -sinf(angle) : sinf(angle);
    *y0 = x0 * c - x1 * s;
    *y1 = x1 * c + x0 * s;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v; // identical in every lane (butterfly)
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block of one double per thread, fixed tree order; result valid in thread 0.
// blockDim.x must be a power of two <= 1024; sh must hold blockDim.x doubles.
__device__ __forceinline__ double block_sum_d(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// The op implementations, cuda_<op> for every op of kernels/backend_ops.h (C++ linkage; cuda_backend.cu's table
// points at them). The ops by file: cuda_dense.cu (matmul, elementwise, embedding, LayerNorm), cuda_attention.cu
// (RoPE, attention), cuda_routing.cu (selection, gates, balancing losses, expert counts), cuda_cvmm_plan.cu (the
// routing plan), cuda_cvmm.cu (cvmm; expert GEMMs: cuda_cvmm_gemm.cu on cuBLAS, cuda_cvmm_mma.cu on tensor cores
// with its probe cuda_cvmm_mma_probe.cu; shared: cuda_cvmm.cuh), cuda_loss_optim.cu (cross-entropy, argmax,
// optimizer, norms).
#define BACKEND_OP(ret, name, params) ret cuda_##name params;
#include "kernels/backend_ops.h"
#undef BACKEND_OP

// One line on stderr for a path choice the user should know of (pipeline/base/log.h, a C11 header).
extern "C" void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Helpers of the ops shared between their files.
// cuda_attention.cu: Di[B,H,T] = dout . out per row (dout rounded to bf16 in bf16 mode); the backward's D_i for both
// attention paths.
void cuda_attention_rowdot(Backend *be, float *Di, const float *dout, const float *out, int B, int T, int H, int D);
// cuda_attention_gemm.cu: attention_forward/backward on cuBLAS batched GEMMs (cuda_attention_forward/backward
// dispatch here according to DMMATH_CUDA_ATTENTION).
void cuda_attention_gemm_forward(Backend *be, scalar_t *out, scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                 const scalar_t *v, int B, int Tq, int Tk, int H, int D, scalar_t scale);
void cuda_attention_gemm_backward(Backend *be, scalar_t *dq, scalar_t *dk, scalar_t *dv, const scalar_t *dout,
                                  const scalar_t *out, const scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                  const scalar_t *v, int B, int T, int H, int D, scalar_t scale);
// cuda_attention_flash.cu: attention_forward/backward on tensor cores in FlashAttention-2's tiles, for bf16 mode
// and head dims up to ATTN_FLASH_D_MAX (cuda_attention_flash_supported; cuda_attention.cu dispatches). The bound
// keeps its tiles within 48 KiB of static shared memory; the paper's heads are 64 and 128 wide.
constexpr int ATTN_FLASH_D_MAX = 128;
bool cuda_attention_flash_supported(Backend *be, int D);
void cuda_attention_flash_forward(Backend *be, scalar_t *out, scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                  const scalar_t *v, int B, int Tq, int Tk, int H, int D, scalar_t scale);
void cuda_attention_flash_backward(Backend *be, scalar_t *dq, scalar_t *dk, scalar_t *dv, const scalar_t *dout,
                                   const scalar_t *out, const scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                   const scalar_t *v, int B, int T, int H, int D, scalar_t scale);
// cuda_loss_optim.cu: sums n doubles on the device in a fixed order and returns the result on the host
// (synchronises; the device's error record comes back in the same copy and is checked).
double cuda_sum_doubles(Backend *be, const double *x, size_t n);
// *out (device memory) = the fixed-order sum of x[n], or += it with add: queued, nothing read back.
void cuda_sum_doubles_to(Backend *be, double *out, const double *x, size_t n, bool add);
// Reads the readback block in one copy (the host waits), dies if the device's error record is set, and returns its
// value (dry_value on the emulator's dry run, where nothing ran).
double cuda_readback_value(Backend *be, double dry_value);
// Backend.read_values (kernels/backend.h).
void cuda_read_values(Backend *be, double *dst_host, const double *src, size_t n);

#endif
