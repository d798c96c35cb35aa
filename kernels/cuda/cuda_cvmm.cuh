// Private interface between the cvmm files: the device routing plan (cuda_cvmm_plan.cu), the per-expert GEMM sets
// (cuda_cvmm_gemm.cu: the per-expert loop or one grouped GEMM), the tensor-core kernels (cuda_cvmm_mma.cu, probed by
// cuda_cvmm_mma_probe.cu) and the ops that use them (cuda_cvmm.cu).
#ifndef KERNELS_CUDA_CUDA_CVMM_CUH
#define KERNELS_CUDA_CUDA_CVMM_CUH

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_cvmm_hooks.h"

// The routing plan (backend.h's RoutingPlan) is built on the device by cuda_routing_plan (cuda_cvmm_plan.cu): a
// stable counting sort of the entries by expert id sel[p], i.e. by (sel[p], p), exactly the CPU backend's order. Its
// device arrays feed the kernels; on the cuBLAS paths host_offset sizes the GEMMs without a synchronisation (copied
// when the plan is built); the tensor-core path needs no host offsets, and none are copied for it.

// One operand of an expert GEMM set, in bytes: expert e's matrix starts at base + e * expert_stride +
// offset[e] * row_stride (a weight tensor [n_experts, ...] uses expert_stride; a block of sorted rows, row_stride).
struct ExpertOperand {
    const void *base;
    size_t expert_stride, row_stride;
};
__host__ __device__ __forceinline__ void *expert_operand_at(const ExpertOperand &x, int e, size_t offset) {
    return (void *)((const char *)x.base + (size_t)e * x.expert_stride + offset * x.row_stride);
}

// A set of expert matmuls, one per non-empty expert e with r_e rows, in cuda_gemm's row-major convention (alpha = 1):
//   C_e[M, N] = op(A_e)[M, K] op(B_e)[K, N] + beta C_e,  where the dimension given as CVMM_ROWS is r_e.
// A and B are bf16 in bf16 mode, else fp32; C is fp32.
constexpr int CVMM_ROWS = -1;
struct ExpertGemms {
    int transA, transB;
    int M, N, K;
    ExpertOperand A, B, C;
    int lda, ldb, ldc;
    float beta;
};

// Whether cvmm's expert GEMMs run on the tensor-core kernels (cuda_cvmm_mma.cu): bf16 operands under
// DMMATH_CUDA_CVMM=mma (fp32 operands stay on cuBLAS there: the loop or the grouped call, as auto picks), or under
// auto where the grouped GEMM is not taken for bf16 and the kernels pass their probe.
bool cvmm_uses_mma(Backend *be, bool bf16);
// The probe (cuda_cvmm_mma_probe.cu): the kernels' three products on a small plan equal the exact results; false with
// the first difference in why.
bool cvmm_mma_probe(Backend *be, char *why, size_t whylen);

// Runs a set on the path cuda_impl(be)->cvmm_impl selects: the per-expert cuda_gemm loop, or one
// cublasGemmGroupedBatchedEx over the non-empty experts (a failing status is fatal there). op names the cvmm op.
void cvmm_expert_gemms(Backend *be, const char *op, const RoutingPlan &plan, const ExpertGemms &set, bool bf16);

// ---- the tensor-core path (cuda_cvmm_mma.cu): no rows gathered, no host offsets
// M routed rows of `width` fp32 values as the kernels read them: plan row m is base[row * width] with row = m when
// in_plan_order, else perm[m] / div (the caller's entry order); multiplied by w[perm[m]] when w is given; rounded
// to bf16 as it is read. base16, when set, holds the rows in bf16 instead (same layout; base unused): base's bf16
// copy (w NULL: cvmm_mma_bf16_rows), whose 2 bytes per value the kernels read instead of base's 4, the same bf16
// values; or a narrow tensor (CVMM_IN_NARROW, CVMM_OUT_NARROW: cvmm_narrow_rows), weighted or not.
struct RoutedRows {
    const float *base;
    const int32_t *perm; // the plan's perm[M]
    int in_plan_order, div, width;
    const float *w;
    const __nv_bfloat16 *base16 = nullptr;
};
// r with base16 set to a bf16 copy of its rows [rows, width] (from the conversion cache, cuda_bf16_cached: converted
// once while X is unwritten, whichever op of matmul and cvmm reads it first) where that moves fewer bytes:
// unweighted rows read through the permutation at least CVMM_MMA_COPY_MIN_DIV times each (an FFN input row once per
// chosen expert). Reading a value costs 4 bytes in fp32, 2 in bf16; the copy costs 6 (read fp32, write bf16) once.
// Otherwise r unchanged. Bit-identical either way: the kernels round each value to bf16 as the copy does.
constexpr int CVMM_MMA_COPY_MIN_DIV = 4;
RoutedRows cvmm_mma_bf16_rows(Backend *be, RoutedRows r, int rows);
// The plan-order rows [M, width] of a narrow tensor (cvmm's narrow form on the tensor-core path: bf16 values packed
// at the start of the fp32 tensor's memory), unweighted.
RoutedRows cvmm_narrow_rows(const float *t, const int32_t *perm, int width);
// C[dst(m), n] = sum_{k < K} A[m, k] B_e[k, n] for every plan row m (expert e), n < N: dst(m) = c_perm[m] when
// c_perm is given, else m; B_e[k, n] = B[e * b_expert + k * b_sk + n * b_sn] in bf16 (b_sk or b_sn is 1); A.width = K.
// C is fp32, or bf16 (a plan-order copy that only a reduction reads: autocast's cvmm stores its result in bf16).
// relu: C gets the ReLU of each result (relu_value, in the epilogue: CVMM_RELU_Y).
template <class Out>
void cvmm_mma_rows(Backend *be, const RoutingPlan &pl, Out *C, int ldc, const int32_t *c_perm, const RoutedRows &a,
                   const __nv_bfloat16 *B, size_t b_expert, int b_sk, int b_sn, int N, int K, bool relu);
// The FFN down projection's backward through the ReLU with narrow X (A) and dX (dU), in plan order, in one kernel
// (k_mma_rows_relu_grad): Q = G W_e^T kept on chip, dX = relu_grad(X, w Q) and dw = <Q, X> (dw may be NULL), the
// bits of cvmm_mma_rows into bf16 Q then k_reduce_dw_narrow. W is [E, Kin, Nout] in bf16; Kin <= MMA_RELU_GRAD_N.
constexpr int MMA_RELU_GRAD_N = 128;
void cvmm_mma_relu_grad(Backend *be, const RoutingPlan &pl, __nv_bfloat16 *dX, float *dw, const __nv_bfloat16 *X,
                        const float *w, const RoutedRows &g, const __nv_bfloat16 *W, int Kin, int Nout);
// dW[e][Kin, Nout] += X_e^T G_e over each expert's plan rows (x.width = Kin, g.width = Nout).
void cvmm_mma_dw(const RoutingPlan &pl, float *dW, const RoutedRows &x, const RoutedRows &g, int Kin, int Nout);

#endif
