/* The CPU backend: host memory, the op table, and the scratch buffers the ops share.
 * Every op's readable definition lives in the other files of this folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "pipeline/base/log.h"

#define CPU_ALIGN 64

/* ---- memory: host allocations, 64-byte aligned and zero-filled ---- */
static void *cpu_alloc(Backend *be, size_t bytes) {
    size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (rounded == 0) rounded = CPU_ALIGN; /* a valid, freeable pointer even for 0 bytes */
    void *p = NULL;
    if (posix_memalign(&p, CPU_ALIGN, rounded) != 0 || p == NULL)
        backend_die_out_of_memory(be, bytes, NULL);
    memset(p, 0, rounded);
    return p;
}
static void cpu_free(Backend *be, void *p) { free(p); }
static void cpu_to_device(Backend *be, void *dst, const void *src_host, size_t bytes) {
    if (bytes) memcpy(dst, src_host, bytes);
}
static void cpu_to_host(Backend *be, void *dst_host, const void *src, size_t bytes) {
    if (bytes) memcpy(dst_host, src, bytes);
}
static void cpu_copy(Backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memmove(dst, src, bytes);
}
static void cpu_zero(Backend *be, void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}
static void cpu_read_values(Backend *be, double *dst_host, const double *src, size_t n) {
    (void)be;
    if (n > BACKEND_READ_VALUES_MAX) die("read_values: %zu values, at most %d", n, BACKEND_READ_VALUES_MAX);
    memcpy(dst_host, src, n * sizeof *src);
}
static void cpu_synchronize(Backend *be) {}

void *cpu_scratch(Backend *be, int slot, size_t bytes) {
    CpuImpl *impl = (CpuImpl *)be->impl;
    if (slot < 0 || slot >= CPU_SCRATCH_BUFFERS) die("cpu backend: bad scratch slot %d", slot);
    if (bytes == 0) bytes = CPU_ALIGN;
    if (impl->cap[slot] < bytes) {
        free(impl->buf[slot]);
        size_t grow = bytes + bytes / 4; /* headroom so slowly growing shapes do not reallocate every call */
        void *p = NULL;
        if (posix_memalign(&p, CPU_ALIGN, grow) != 0 || p == NULL)
            die("cpu backend: out of memory allocating %zu bytes of scratch", grow);
        impl->buf[slot] = p;
        impl->cap[slot] = grow;
    }
    return impl->buf[slot];
}

/* The CPU computes in scalar_t whatever the precision: no derived copy of the weights to keep. */
static void cpu_register_weights(Backend *be, const scalar_t *p, size_t n) { (void)be, (void)p, (void)n; }
static void cpu_routing_plan_to_host(Backend *be, RoutingPlan *plan) { (void)be, (void)plan; } /* filled */

static void cpu_destroy(Backend *be) {
    if (!be) return;
    CpuImpl *impl = (CpuImpl *)be->impl;
    if (impl) {
        for (int i = 0; i < CPU_SCRATCH_BUFFERS; i++) free(impl->buf[i]);
        free(impl);
    }
    free(be);
}

/* "<model name> (<n> cores)" from /proc/cpuinfo; falls back to "unknown CPU". */
static void describe_cpu(char *out, size_t outlen) {
    char model[96] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) != 0) continue;
            const char *colon = strchr(line, ':');
            if (!colon) continue;
            colon++;
            while (*colon == ' ' || *colon == '\t') colon++;
            snprintf(model, sizeof model, "%s", colon);
            model[strcspn(model, "\n")] = '\0';
            break;
        }
        fclose(f);
    }
    snprintf(out, outlen, "%s (%d cores)", model, omp_get_num_procs());
}

Backend *backend_cpu_create(void) {
    Backend *be = xcalloc(1, sizeof *be);
    be->impl = xcalloc(1, sizeof(CpuImpl));
    be->name = "cpu";
    be->precision = PRECISION_FP32;
    describe_cpu(be->device_name, sizeof be->device_name);

    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->to_device = cpu_to_device;
    be->to_host = cpu_to_host;
    be->read_values = cpu_read_values;
    be->copy = cpu_copy;
    be->zero = cpu_zero;
    be->synchronize = cpu_synchronize;
    be->destroy = cpu_destroy;
    be->register_weights = cpu_register_weights;
    be->routing_plan_to_host = cpu_routing_plan_to_host;

#define BACKEND_OP(ret, name, params) be->name = cpu_##name;
#include "kernels/backend_ops.h"
#undef BACKEND_OP
    return be;
}
