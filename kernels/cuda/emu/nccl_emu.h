// The NCCL subset kernels/cuda/cuda_nccl.cu uses, emulated over MPI on the CUDA emulator's (host) device memory, so
// the cuda backend's data-parallel path runs in CI without a GPU.
//
// Mapping: NCCL rank r of n is MPI_COMM_WORLD rank r of n (the emulation refuses any other layout); the unique id
// must be the same on every rank (checked: real NCCL would hang instead); buffers must lie inside emulated device
// allocations (checked, as a host pointer would fault on a GPU). ncclAllReduce is MPI_Allreduce on a duplicate of
// MPI_COMM_WORLD, done before the call returns (the emulator's streams are synchronous). What it does not prove:
// anything about NCCL itself (its rings and trees, its summation order, its transport, its error reporting).
#ifndef KERNELS_CUDA_EMU_NCCL_EMU_H
#define KERNELS_CUDA_EMU_NCCL_EMU_H

#include <cstddef>

#include "kernels/cuda/emu/cuda_emu.h"

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
typedef struct ncclComm_emu *ncclComm_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclFloat32 = 7,
    ncclFloat64 = 8,
    ncclBfloat16 = 9,
} ncclDataType_t;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
inline ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, ncclComm_t comm, int stream) {
    return ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, (cudaStream_t)(intptr_t)stream);
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm); // the emulation's last message (real NCCL >= 2.13 has it too)

#endif
