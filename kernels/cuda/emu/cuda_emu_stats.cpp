// Work counters of the CUDA emulator: what the backend asked the GPU to do, counted while the emulator runs it.
// With CUDA_EMU_STATS=FILE the counters are written as one JSON object to FILE at exit (CUDA_EMU_STATS=- prints them
// to stderr). They measure the host-side cost structure that does not depend on the emulator's speed: kernel
// launches, cuBLAS calls and the GEMM problems inside them, host<->device copies (a device-to-host copy makes the
// host wait for the GPU), device memory, fp32 -> bf16 roundings (per kernel) and the bytes of data movement: device-to-
// device copies, memsets and what the backend reports for its row-moving kernels (count_traffic, per kind).
// tests/bench/emu_call_counts.sh turns them into per-training-step figures.
#include "kernels/cuda/emu/cuda_emu.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <unistd.h>

namespace emu {

namespace {
struct Counters {
    long launches = 0, cublas_calls = 0, gemm_problems = 0;
    long copies_d2h = 0, copies_h2d = 0, copies_d2d = 0, memsets = 0, device_syncs = 0;
    size_t bytes_d2h = 0, bytes_h2d = 0, bytes_d2d = 0, bytes_memset = 0, device_bytes_live = 0,
           device_bytes_peak = 0;
    std::map<std::string, long> per_kernel, per_cublas, bf16_per_kernel;
    std::map<std::string, size_t> traffic; // bytes read + written, per kind (count_traffic)
};
Counters *counters = nullptr; // created on first use, written and freed at exit

void write_counters(FILE *f, bool json) {
    const Counters &c = *counters;
    if (!json) {
        fprintf(f, "cuda-emu stats: %ld kernel launches, %ld cuBLAS calls (%ld GEMM problems), device-to-host copies "
                   "%ld (%zu bytes), host-to-device %ld (%zu bytes), device-to-device %ld (%zu bytes), memsets %ld "
                   "(%zu bytes), device syncs %ld, peak device memory %zu bytes, bf16 roundings %ld\n",
                c.launches, c.cublas_calls, c.gemm_problems, c.copies_d2h, c.bytes_d2h, c.copies_h2d, c.bytes_h2d,
                c.copies_d2d, c.bytes_d2d, c.memsets, c.bytes_memset, c.device_syncs, c.device_bytes_peak,
                bf16_roundings);
        return;
    }
    size_t traffic = 0;
    for (const auto &kv : c.traffic) traffic += kv.second;
    fprintf(f,
            "{\"kernel_launches\": %ld, \"cublas_calls\": %ld, \"gemm_problems\": %ld, \"copies_d2h\": %ld, "
            "\"bytes_d2h\": %zu, \"copies_h2d\": %ld, \"bytes_h2d\": %zu, \"copies_d2d\": %ld, \"bytes_d2d\": %zu, "
            "\"memsets\": %ld, \"bytes_memset\": %zu, \"device_syncs\": %ld, \"device_bytes_peak\": %zu, "
            "\"bf16_roundings\": %ld, \"bytes_traffic\": %zu,\n \"per_kernel\": {",
            c.launches, c.cublas_calls, c.gemm_problems, c.copies_d2h, c.bytes_d2h, c.copies_h2d, c.bytes_h2d,
            c.copies_d2d, c.bytes_d2d, c.memsets, c.bytes_memset, c.device_syncs, c.device_bytes_peak, bf16_roundings,
            traffic);
    const char *sep = "";
    for (const auto &kv : c.per_kernel) fprintf(f, "%s\"%s\": %ld", sep, kv.first.c_str(), kv.second), sep = ", ";
    fprintf(f, "},\n \"per_cublas\": {");
    sep = "";
    for (const auto &kv : c.per_cublas) fprintf(f, "%s\"%s\": %ld", sep, kv.first.c_str(), kv.second), sep = ", ";
    fprintf(f, "},\n \"bf16_per_kernel\": {");
    sep = "";
    for (const auto &kv : c.bf16_per_kernel) fprintf(f, "%s\"%s\": %ld", sep, kv.first.c_str(), kv.second), sep = ", ";
    fprintf(f, "},\n \"traffic\": {");
    sep = "";
    for (const auto &kv : c.traffic) fprintf(f, "%s\"%s\": %zu", sep, kv.first.c_str(), kv.second), sep = ", ";
    fprintf(f, "}}\n");
}

void report_at_exit(void) {
    const char *dest = getenv("CUDA_EMU_STATS");
    if (!counters || !dest || !*dest) return;
    if (strcmp(dest, "-") == 0) {
        write_counters(stderr, false);
    } else { // temporary file + rename: a reader never sees half a record
        std::string tmp = std::string(dest) + ".tmp." + std::to_string((long)getpid());
        FILE *f = fopen(tmp.c_str(), "w");
        if (!f) {
            fprintf(stderr, "cuda-emu: CUDA_EMU_STATS: cannot write %s\n", tmp.c_str());
        } else {
            write_counters(f, true);
            if (fclose(f) != 0 || rename(tmp.c_str(), dest) != 0) {
                fprintf(stderr, "cuda-emu: CUDA_EMU_STATS: cannot write %s\n", dest);
                remove(tmp.c_str());
            }
        }
    }
    delete counters;
    counters = nullptr;
}

Counters &get(void) {
    if (!counters) {
        counters = new Counters();
        atexit(report_at_exit);
    }
    return *counters;
}
} // namespace

void stat_launch(const char *kernel) {
    Counters &c = get();
    c.launches++;
    c.per_kernel[kernel]++;
}
void stat_cublas(const char *call, long problems) {
    Counters &c = get();
    c.cublas_calls++;
    c.gemm_problems += problems;
    c.per_cublas[call]++;
}
void stat_copy(int kind, size_t bytes) { // kind: 0 host-to-device, 1 device-to-host, 2 device-to-device
    Counters &c = get();
    if (kind == 0) c.copies_h2d++, c.bytes_h2d += bytes;
    else if (kind == 1) c.copies_d2h++, c.bytes_d2h += bytes;
    else c.copies_d2d++, c.bytes_d2d += bytes;
}
void stat_memset(size_t bytes) {
    Counters &c = get();
    c.memsets++;
    c.bytes_memset += bytes;
}
void stat_bf16(const char *kernel, long roundings) {
    if (roundings > 0) get().bf16_per_kernel[kernel] += roundings;
}
void stat_traffic(const char *kind, size_t bytes) { get().traffic[kind] += bytes; }
void stat_device_sync(void) { get().device_syncs++; }
void stat_device_alloc(size_t bytes, bool freed) {
    Counters &c = get();
    if (freed) {
        c.device_bytes_live -= bytes;
    } else {
        c.device_bytes_live += bytes;
        if (c.device_bytes_live > c.device_bytes_peak) c.device_bytes_peak = c.device_bytes_live;
    }
}

} // namespace emu
