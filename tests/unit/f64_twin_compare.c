/* f64 build (-DSCALAR_F64): the C models against the PyTorch twin's float64 reference fixtures, tolerance 1e-9
 * relative to each tensor's largest entry (both sides compute in double from the same F32-valued weights).
 * What is compared and how: twin_compare_common.h. */
#include "kernels/backend.h"
#include "model/model.h"
#include "twin_compare_common.h"

int main(void) { return twin_main("twin_compare_f64"); }
