/* f32 build: the C models (CPU backend) against the PyTorch twin's float64 reference fixtures, tolerance 1e-4
 * relative to each tensor's largest entry. What is compared and how: twin_compare_common.h. */
#include "kernels/backend.h"
#include "model/model.h"
#include "twin_compare_common.h"

int main(void) { return twin_main("twin_compare_f32"); }
