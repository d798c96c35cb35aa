// CUDA: the bf16 copy of the registered weights (backend.h's register_weights), read by bf16-mode matmul and cvmm.
//
// Why: autocast-style bf16 GEMMs take bf16 operands. Converting the weight operand inside every call converted each
// matmul's weight, and the WHOLE expert tensor (e.g. 387 x 1024 x 128 for the paper's FFN keys) in every one of the
// 8 cvmm calls of a MoEUT layer application. The weights change only when something writes them (the optimizer
// step, a checkpoint load, initialisation, a broadcast), so one conversion per change suffices: the copy is marked
// stale by every write into the weights and converted again, whole, at its next use.
//
// Why a stale copy cannot go unnoticed: every op that writes device memory reports each output range first
// (cuda_weights_written, one comparison), and a range that overlaps the weights marks the copy stale. On the CUDA
// emulator every use additionally compares the slice it hands out with a fresh rounding of the fp32 weights, so a
// write path that did not report its output fails the emulated bf16 tests instead of silently reading old weights.
// bf16 rounding is deterministic, so results are bit-identical to converting in every call.
#include "kernels/cuda/cuda_common.cuh"

void cuda_register_weights(Backend *be, const scalar_t *p, size_t n) {
    CudaImpl *im = cuda_impl(be);
    if (im->weights16) CHECK_CUDA(cudaFree(im->weights16)); // the default stream orders it after earlier readers
    im->weights16 = nullptr;
    im->weights = (p && n) ? p : nullptr;
    im->weights_n = (p && n) ? n : 0;
    im->weights16_stale = true;
}

void cuda_weights_written(Backend *be, const void *dst, size_t bytes) {
    cuda_bf16_cache_forget(be, dst, bytes); // the other operands' copies (cuda_bf16_cache.cu)
    CudaImpl *im = cuda_impl(be);
    if (!im->weights || !dst || bytes == 0) return;
    if (ranges_overlap(dst, bytes, im->weights, im->weights_n * sizeof(float))) im->weights16_stale = true;
}

void cuda_weights_freed(Backend *be, const void *p) {
    if (p && p == (const void *)cuda_impl(be)->weights) cuda_register_weights(be, nullptr, 0);
}

#ifdef CUDA_EMULATION
// The emulator's own check (device memory is host memory there): the copy's slice for [p, p + n) must equal the
// rounding of the fp32 values now, i.e. no write into the weights went unreported.
static void emu_check_fresh(const CudaImpl *im, const float *p, size_t n) {
    const __nv_bfloat16 *c = im->weights16 + (p - im->weights);
    for (size_t i = 0; i < n; i++)
        if (c[i].bits != emu::bf16_round_bits(p[i]))
            die("cuda backend: the bf16 copy of the weights is stale at element %zu (copy %#06x, weight %.9g): an op "
                "wrote into the registered weights without cuda_weights_written",
                (size_t)(p - im->weights) + i, (unsigned)c[i].bits, (double)p[i]);
}
#endif

bool cuda_bf16_weights_slice(Backend *be, const float *p, size_t n, const __nv_bfloat16 **out) {
    CudaImpl *im = cuda_impl(be);
    if (!range_inside(p, n, im->weights, im->weights_n)) return false;
    if (!im->weights16) {
        CHECK_CUDA(cudaMalloc(&im->weights16, im->weights_n * sizeof(__nv_bfloat16)));
        im->weights16_stale = true;
    }
    if (im->weights16_stale) {
        cuda_to_bf16(im->weights16, im->weights, im->weights_n);
        im->weights16_stale = false;
    }
#ifdef CUDA_EMULATION
    if (!emu::dry_run()) emu_check_fresh(im, p, n); // a dry run converts nothing (cuda_emu_launch_log.cpp)
#endif
    *out = im->weights16 + (p - im->weights);
    return true;
}

__nv_bfloat16 *cuda_weights_bf16_produce(Backend *be, const float *p, size_t n) {
    CudaImpl *im = cuda_impl(be);
    if (!use_bf16(be) || !im->weights || p != im->weights || n != im->weights_n) return nullptr;
    if (!im->weights16) CHECK_CUDA(cudaMalloc(&im->weights16, im->weights_n * sizeof(__nv_bfloat16)));
    im->weights16_stale = false; // the caller's kernel, launched next, writes it
    return im->weights16;
}

const __nv_bfloat16 *cuda_bf16_operand(Backend *be, const float *p, size_t n, int slot) {
    const __nv_bfloat16 *w16;
    if (cuda_bf16_weights_slice(be, p, n, &w16)) return w16;
    __nv_bfloat16 *dst = (__nv_bfloat16 *)cuda_scratch(be, slot, n * sizeof(__nv_bfloat16));
    cuda_to_bf16(dst, p, n);
    return dst;
}
