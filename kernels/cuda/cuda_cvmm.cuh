// Private interface between the cvmm files: the device routing plan (cuda_cvmm_plan.cu), the per-expert GEMM sets
// (cuda_cvmm_gemm.cu: the per-expert loop or one grouped GEMM) and the ops that use them (cuda_cvmm.cu).
#ifndef KERNELS_CUDA_CUDA_CVMM_CUH
#define KERNELS_CUDA_CUDA_CVMM_CUH

#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_cvmm_hooks.h"

// Routing plan of one cvmm call: the M entries p sorted stably by expert id sel[p], i.e. by (sel[p], p), exactly the
// host counting sort it replaces (and the CPU backend's order).
struct CvmmPlan {
    int n_experts;
    int32_t *perm;                 // device [M]: sorted position -> entry p
    int32_t *inv;                  // device [M]: entry p -> sorted position
    const int32_t *offset_dev;     // device [n_experts + 1]: expert e's rows are sorted positions [offset[e], offset[e+1])
    const int32_t *group_expert;   // device [n_groups]: the non-empty experts in increasing order
    std::vector<int32_t> offset;   // host [n_experts + 1]: copy of offset_dev (sizes of the GEMMs)
    int n_groups;                  // number of non-empty experts
};

// Builds the plan on the device with integer-only kernels (scratch slots CS_A: perm | inv | offsets | group list, and
// CS_B: temporaries) and copies the offsets to the host, the only synchronisation of a cvmm call. An expert id outside
// [0, n_experts) dies with the CPU backend's message, naming the first such entry. M = 0 needs no device work.
CvmmPlan cvmm_build_plan(Backend *be, const char *op, const int32_t *sel, int M, int n_experts);

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

// Runs a set on the path cuda_impl(be)->cvmm_impl selects: the per-expert cuda_gemm loop, or one
// cublasGemmGroupedBatchedEx over the non-empty experts (a failing status is fatal there). op names the cvmm op.
void cvmm_expert_gemms(Backend *be, const char *op, const CvmmPlan &plan, const ExpertGemms &set, bool bf16);

#endif
