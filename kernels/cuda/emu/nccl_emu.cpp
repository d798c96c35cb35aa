// NCCL over MPI on the CUDA emulator (see nccl_emu.h).
#include "kernels/cuda/emu/nccl_emu.h"

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <unistd.h>

// The C interface only (OpenMPI would otherwise pull in its deprecated C++ bindings and libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

struct ncclComm_emu {
    MPI_Comm comm;
    int rank, nranks;
    ncclResult_t async_error;
};

static char g_last_error[512];

static ncclResult_t fail(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ncclResult_t fail(ncclResult_t r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
    va_end(ap);
    fprintf(stderr, "nccl-emu: %s\n", g_last_error); // as NCCL_DEBUG=WARN would
    return r;
}

static bool mpi_ready(void) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    return up && !down;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return fail(ncclInvalidArgument, "ncclGetUniqueId: id is NULL");
    memset(id, 0, sizeof *id);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(id->internal, sizeof id->internal, "nccl-emu pid %ld t %lld.%09ld", (long)getpid(), (long long)ts.tv_sec,
             ts.tv_nsec);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    if (!comm) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
    *comm = nullptr;
    if (!mpi_ready())
        return fail(ncclInvalidUsage, "ncclCommInitRank: the NCCL emulator runs over MPI: start the ranks with mpirun");
    int world = 0, me = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (nranks != world || rank != me)
        return fail(ncclInvalidUsage, "ncclCommInitRank: rank %d of %d, but this is MPI rank %d of %d (the emulation maps "
                    "NCCL ranks onto MPI_COMM_WORLD)", rank, nranks, me, world);
    if (rank < 0 || rank >= nranks) return fail(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
    MPI_Comm dup;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &dup) != MPI_SUCCESS) return fail(ncclSystemError, "ncclCommInitRank: MPI_Comm_dup");
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    // Every rank must have been given rank 0's id (the caller's broadcast): compare them all.
    char *ids = new char[(size_t)nranks * NCCL_UNIQUE_ID_BYTES];
    int rc = MPI_Allgather(id.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, ids, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, dup);
    int bad = -1;
    for (int r = 0; rc == MPI_SUCCESS && r < nranks && bad < 0; r++)
        if (memcmp(ids + (size_t)r * NCCL_UNIQUE_ID_BYTES, ids, NCCL_UNIQUE_ID_BYTES) != 0) bad = r;
    delete[] ids;
    if (rc != MPI_SUCCESS || bad >= 0) {
        MPI_Comm_free(&dup);
        if (rc != MPI_SUCCESS) return fail(ncclRemoteError, "ncclCommInitRank: exchanging the ids failed");
        return fail(ncclInvalidUsage, "ncclCommInitRank: rank %d was given another unique id than rank 0", bad);
    }
    *comm = new ncclComm_emu{dup, rank, nranks, ncclSuccess};
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    (void)stream; // the emulator's streams are synchronous
    if (!comm) return fail(ncclInvalidArgument, "ncclAllReduce: comm is NULL");
    MPI_Datatype type;
    size_t elem;
    switch (datatype) {
    case ncclFloat32: type = MPI_FLOAT, elem = 4; break;
    case ncclFloat64: type = MPI_DOUBLE, elem = 8; break;
    case ncclInt32: type = MPI_INT32_T, elem = 4; break;
    case ncclInt64: type = MPI_INT64_T, elem = 8; break;
    default: return fail(ncclInvalidArgument, "ncclAllReduce: datatype %d is not emulated", (int)datatype);
    }
    MPI_Op mop;
    switch (op) {
    case ncclSum: mop = MPI_SUM; break;
    case ncclMax: mop = MPI_MAX; break;
    case ncclMin: mop = MPI_MIN; break;
    default: return fail(ncclInvalidArgument, "ncclAllReduce: op %d is not emulated", (int)op);
    }
    size_t bytes = count * elem;
    if (count > 0 && (!emu::is_device_range(sendbuff, bytes) || !emu::is_device_range(recvbuff, bytes)))
        return fail(ncclInvalidArgument, "ncclAllReduce: [%p, +%zu) or [%p, +%zu) is not inside a device allocation",
                    sendbuff, bytes, recvbuff, bytes);
    const size_t chunk = (size_t)1 << 30;
    for (size_t o = 0; o < count; o += chunk) {
        size_t len = count - o < chunk ? count - o : chunk;
        const void *src = sendbuff == recvbuff ? MPI_IN_PLACE : (const void *)((const char *)sendbuff + o * elem);
        if (MPI_Allreduce(src, (char *)recvbuff + o * elem, (int)len, type, mop, comm->comm) != MPI_SUCCESS) {
            comm->async_error = ncclRemoteError;
            return fail(ncclRemoteError, "ncclAllReduce: a peer did not take part (MPI_Allreduce failed)");
        }
    }
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error) {
    if (!comm || !async_error) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
    *async_error = comm->async_error;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (mpi_ready()) MPI_Comm_free(&comm->comm);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    delete comm; // peers may be gone: no collective (MPI_Comm_free would be one), the process is about to end
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return g_last_error;
}
