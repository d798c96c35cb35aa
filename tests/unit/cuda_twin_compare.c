/* The C models on the CUDA backend (fp32 mode) against the PyTorch twin's float64 reference fixtures
 * (tests/fixtures/twin/): for every fixture one training step (logits, n_counted, CE, both regularizers, every
 * gradient), the eval-path logits and the accumulation of a second step, exactly as test_twin_compare.c does on the
 * CPU (what is compared and how: twin_compare_common.h).
 *
 * Tolerance: the header's f32 figure, 1e-4 of each tensor's largest entry. Justification: the CUDA backend's fp32
 * mode computes every op in fp32 (cuBLAS with CUBLAS_DEFAULT_MATH and CUBLAS_COMPUTE_32F: no TF32) and its reductions
 * in fp32 or double like the CPU backend; only the summation ORDER differs. The CPU f32 build meets the same
 * fixtures with at most 2.9e-6 (worst error/tolerance 0.029, printed by test_twin_compare), i.e. fp32 rounding through
 * a few layers of K <= 64 sums; a different order gives errors of the same size, so 1e-4 leaves a factor ~30 for
 * them while any indexing or formula error (>= 1e-2 of the tensor's scale) still fails. Top-k routing cannot flip
 * between the backends here: gen_fixtures.py keeps only draws whose routing margins exceed 1e-3 in logits (O(1)
 * logits), about four orders of magnitude above fp32 rounding of those logits; ReLU sign changes are continuous.
 *
 * Without a usable GPU: prints "SKIP: no usable CUDA GPU (<reason>)" and exits 77. The probe creates a CUDA context
 * in this process, so the suite runs without fork (CK_FORK=no): a CUDA context does not survive fork(). */
#define TWIN_BACKEND "cuda"

#include "kernels/backend.h"
#include "model/model.h"
#include "twin_compare_common.h"
#include "tests/unit/cuda_test_main.h"

int main(void) {
    cuda_test_require_gpu();
    if (setenv("CK_FORK", "no", 1) != 0) {
        perror("setenv CK_FORK");
        return 1;
    }
    return twin_main("cuda_twin_compare");
}
