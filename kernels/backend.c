/* backend_create / backend_destroy: picks an implementation by name. */
#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "pipeline/log.h"

void backend_die_out_of_memory(const Backend *be, size_t bytes, const char *detail) {
    die("%s backend: out of %smemory allocating %.2f GiB (%zu bytes)%s%s%s%s", be->name,
        strcmp(be->name, "cuda") == 0 ? "device " : "", (double)bytes / (1024.0 * 1024.0 * 1024.0), bytes,
        be->alloc_purpose[0] ? " for " : "", be->alloc_purpose, detail && detail[0] ? ": " : "", detail ? detail : "");
}

Backend *backend_create(const char *name, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (!name) {
        set_err(err, errlen, "no backend name given (expected 'cpu' or 'cuda')");
        return NULL;
    }
    if (strcmp(name, "cpu") == 0) return backend_cpu_create();
    if (strcmp(name, "cuda") == 0) {
#ifdef HAVE_CUDA
        return backend_cuda_create(err, errlen); /* NULL with "no usable CUDA GPU: <reason>" when none works */
#else
        set_err(err, errlen, "backend '%s' is not available: this build has no CUDA support", name);
        return NULL;
#endif
    }
    set_err(err, errlen, "unknown backend '%s' (expected 'cpu' or 'cuda')", name);
    return NULL;
}

void backend_destroy(Backend *be) {
    if (be && be->destroy) be->destroy(be);
}
