/* The cuda backend's gradient all-reduce over NCCL: one rank per GPU, the NCCL id broadcast by the caller
 * (over MPI, pipeline/base/dist.h). C interface to kernels/cuda/cuda_nccl.cu; on the CUDA emulator the NCCL calls are
 * emulated over MPI on host memory (kernels/cuda/emu/nccl_emu.h). All functions return 0, or -1 with a message. */
#ifndef KERNELS_CUDA_CUDA_NCCL_H
#define KERNELS_CUDA_CUDA_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

/* On rank 0: a new NCCL id, to be broadcast to every rank before cuda_nccl_init. */
int cuda_nccl_unique_id(unsigned char id[CUDA_NCCL_ID_BYTES], char *err, size_t errlen);
/* Every rank, on its own device (the backend already set it): joins the communicator of `world` ranks. Blocks until
 * all ranks joined. */
int cuda_nccl_init(const unsigned char id[CUDA_NCCL_ID_BYTES], int rank, int world, char *err, size_t errlen);
/* In place: buf[n] (device memory of be, float, or double when f64) = the sum over the ranks; returns when done. */
int cuda_nccl_allreduce_sum(Backend *be, void *buf, size_t n, bool f64, char *err, size_t errlen);
/* Destroys the communicator (no-op when none). */
void cuda_nccl_finalize(void);

#ifdef __cplusplus
}
#endif

#endif
