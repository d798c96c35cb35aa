/* What the f64 kernel gradient checks (tests/unit/f64_kernels_*.c) share besides kernel_test_util.h: they are only
 * meaningful with scalar_t = double, and they all run ktu_fd_check with one step and one tolerance. */
#ifndef TESTS_UNIT_KERNEL_FD_TEST_H
#define TESTS_UNIT_KERNEL_FD_TEST_H

#include "tests/unit/kernel_test_util.h"

#ifndef SCALAR_F64
#error "f64 gradient checks must be built with -DSCALAR_F64"
#endif

#define FD_EPS 1e-6 /* central-difference step */
#define FD_TOL 1e-6 /* largest relative error ktu_fd_check accepts */

#endif
