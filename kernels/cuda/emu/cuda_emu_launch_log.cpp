// The CUDA emulator's launch log and dry run, the input of the cost model (make bench-model,
// tests/bench/bench_model.py).
//
// CUDA_EMU_LAUNCH_LOG=FILE: one tab-separated line per device operation, in issue order, each starting with its kind
// and the backend op it ran in ("-" outside any; cuda_backend.cu labels every table entry):
//   launch  OP  KERNEL  GX,GY,GZ  BX,BY,BZ  SHMEM  FLOPS  BYTES  tensor|cuda
//                                                                  a kernel and the cost its LAUNCH states (tensor:
//                                                                  its FLOPs run on the tensor cores)
//   gemm    OP  CALL  bf16|fp32  PROBLEMS  TILES  FLOPS  BYTES       a cuBLAS call (cuda_emu.h: log_gemm)
//   memset  OP  BYTES
//   copy    OP  h2d|d2h|d2d  sync|async  BYTES                       sync: cudaMemcpy, which the host waits for
//   sync    OP  device|free                                          cudaDeviceSynchronize, cudaFree
// The file is written as the run goes (a crash leaves the lines so far) and closed at exit.
//
// CUDA_EMU_DRY_RUN=1: the launches and calls above are checked and recorded as usual but not executed (the runtime
// and cuBLAS emulation consult dry_run()), so the log of a paper-size step costs seconds, not days. Device memory is
// then reserved address space that reads as zero; what the host reads back is meaningless, and the host decisions
// of a training step that depend on device results are made for the typical step there: the routing plan's expert
// offsets give every expert an equal share (cuda_cvmm_plan.cu), the device sums read back large enough for gradient
// clipping to scale (cuda_loss_optim.cu), and the device's error record reads clean (cuda_device_status.cu,
// cuda_loss_optim.cu).
#include "kernels/cuda/emu/cuda_emu.h"

#include <cstdio>
#include <cstdlib>

namespace emu {

namespace {
const char *current_op = nullptr;
FILE *log_file = nullptr;
bool log_opened = false;

void close_log(void) {
    if (log_file && fclose(log_file) != 0) fprintf(stderr, "cuda-emu: CUDA_EMU_LAUNCH_LOG: write error\n");
    log_file = nullptr;
}

// The log, opened at the first record; nullptr when CUDA_EMU_LAUNCH_LOG is unset.
FILE *log_out(void) {
    if (!log_opened) {
        log_opened = true;
        const char *path = getenv("CUDA_EMU_LAUNCH_LOG");
        if (path && *path) {
            log_file = fopen(path, "w");
            if (!log_file) fatal("CUDA_EMU_LAUNCH_LOG: cannot write %s", path);
            fprintf(log_file, "# cuda-emu launch log (%s): kind op fields (kernels/cuda/emu/cuda_emu_launch_log.cpp)\n",
                    dry_run() ? "dry run" : "executed");
            atexit(close_log);
        }
    }
    return log_file;
}

const char *op_name(void) { return current_op ? current_op : "-"; }
} // namespace

bool dry_run(void) {
    static int value = -1;
    if (value < 0) {
        const char *s = getenv("CUDA_EMU_DRY_RUN");
        value = s && strcmp(s, "1") == 0;
    }
    return value == 1;
}

OpLabel::OpLabel(const char *op) : saved(current_op) {
    if (!current_op) current_op = op;
}
OpLabel::~OpLabel() { current_op = saved; }

void log_launch(const char *kernel, dim3 grid, dim3 block, size_t shmem, LaunchCost cost) {
    if (FILE *f = log_out())
        fprintf(f, "launch\t%s\t%s\t%u,%u,%u\t%u,%u,%u\t%zu\t%.17g\t%.17g\t%s\n", op_name(), kernel, grid.x, grid.y,
                grid.z, block.x, block.y, block.z, shmem, cost.flops, cost.bytes,
                cost.tensor_cores ? "tensor" : "cuda");
}

void log_gemm(const char *call, bool bf16, long problems, double flops, double bytes, long tiles) {
    if (FILE *f = log_out())
        fprintf(f, "gemm\t%s\t%s\t%s\t%ld\t%ld\t%.17g\t%.17g\n", op_name(), call, bf16 ? "bf16" : "fp32", problems,
                tiles, flops, bytes);
}

void log_memset(size_t bytes) {
    if (FILE *f = log_out()) fprintf(f, "memset\t%s\t%zu\n", op_name(), bytes);
}

void log_copy(int kind, bool synchronous, size_t bytes) {
    static const char *const kinds[] = {"h2d", "d2h", "d2d"};
    if (FILE *f = log_out())
        fprintf(f, "copy\t%s\t%s\t%s\t%zu\n", op_name(), kinds[kind < 0 || kind > 2 ? 2 : kind],
                synchronous ? "sync" : "async", bytes);
}

void log_sync(const char *what) {
    if (FILE *f = log_out()) fprintf(f, "sync\t%s\t%s\n", op_name(), what);
}

} // namespace emu
