// The CUDA emulator's runtime (see cuda_emu.h for what it is and what it checks): the fiber scheduler that runs a
// launch, device-memory bookkeeping, the runtime API calls and cublasGemmEx.
#include "kernels/cuda/emu/cuda_emu.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sys/mman.h>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h> // portable fallback; x86-64 uses the syscall-free switch below
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace emu {

// Every emulator message: "cuda-emu: [call: ]text" on one line of stderr.
static void vreport(const char *call, const char *fmt, va_list ap) {
    fprintf(stderr, "cuda-emu: ");
    if (call) fprintf(stderr, "%s: ", call);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
}

[[noreturn]] void fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(nullptr, fmt, ap);
    va_end(ap);
    fflush(stderr);
    abort();
}

// ---------------------------------------------------------------- device memory bookkeeping
static std::map<uintptr_t, size_t> device_allocs; // base -> bytes
static std::map<uintptr_t, size_t> pinned_allocs;

static const std::pair<const uintptr_t, size_t> *find_alloc(const std::map<uintptr_t, size_t> &m, const void *p) {
    uintptr_t a = (uintptr_t)p;
    auto it = m.upper_bound(a);
    if (it == m.begin()) return nullptr;
    --it;
    return a <= it->first + it->second ? &*it : nullptr; // one past the end counts (empty ranges)
}

bool is_device_range(const void *p, size_t bytes) {
    const auto *al = find_alloc(device_allocs, p);
    return al && (uintptr_t)p + bytes <= al->first + al->second;
}
static bool is_pinned(const void *p) { return find_alloc(pinned_allocs, p) != nullptr; }

// ---------------------------------------------------------------- fibers
struct ThreadState {
#if defined(__x86_64__)
    void *sp = nullptr; // saved stack pointer while switched out
#else
    ucontext_t ctx;
#endif
    char *stack = nullptr;
    uint3 idx{};
    int linear = 0, warp = 0, lane = 0;
    enum State { RUNNABLE, AT_WARP, AT_BLOCK, DONE } state = RUNNABLE;
    unsigned mask = 0;
#ifdef EMU_ASAN
    void *fake_stack = nullptr;
#endif
};

ThreadState *current = nullptr;
uint3 block_idx{};
dim3 block_dim, grid_dim;
const uint3 &thread_idx(const ThreadState *t) {
    if (!t) fatal("threadIdx used outside a kernel");
    return t->idx;
}

unsigned lane_id(void) {
    const uint3 &i = thread_idx(current);
    return (i.x + block_dim.x * (i.y + block_dim.y * i.z)) % 32;
}

bool wmma_fault(void) {
    const char *v = getenv("CUDA_EMU_WMMA");
    return v && strcmp(v, "wrong") == 0;
}

static const size_t STACK_BYTES = 256 * 1024;
// ---- context switching
// x86-64: a 20-instruction switch that saves the callee-saved registers and the FPU/SSE control words on the old
// stack and pops them from the new one (swapcontext would also make a sigprocmask system call every switch: several
// times slower, and the emulator switches at every warp shuffle).
#if defined(__x86_64__)
extern "C" void emu_switch_stack(void **save_sp, void *new_sp);
asm(".text\n"
    ".globl emu_switch_stack\n"
    ".type emu_switch_stack,@function\n"
    "emu_switch_stack:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_switch_stack, .-emu_switch_stack\n");
static void *scheduler_sp = nullptr;
#else
static ucontext_t scheduler_ctx;
#endif
// One block's threads; their stacks are reused by every launch and freed at exit (so LeakSanitizer sees no leak).
struct ThreadPool {
    std::vector<ThreadState> v;
    ~ThreadPool() {
        for (ThreadState &t : v) free(t.stack);
    }
};
static ThreadPool pool;
static std::vector<ThreadState> &threads = pool.v;
static std::vector<uint64_t> warp_slots;   // [n_warps][2][32]: double-buffered shuffle values
static std::vector<unsigned> warp_phase;   // [n_warps]: completed warp collectives (selects the buffer)
static std::vector<unsigned char> dyn_shared;
static const std::function<void()> *launch_body = nullptr;
static const char *launch_name = "";
static bool reverse_order = false;
static cudaError_t last_error = cudaSuccess;

void *dynamic_shared(void) { return dyn_shared.empty() ? nullptr : dyn_shared.data(); }

#ifdef EMU_ASAN
// ASan must be told about every stack switch; the scheduler's stack bounds are learnt when a fiber first starts.
static const void *scheduler_stack_bottom = nullptr;
static size_t scheduler_stack_size = 0;
#endif

static void switch_to_scheduler(ThreadState *t) {
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&t->fake_stack, scheduler_stack_bottom, scheduler_stack_size);
#endif
#if defined(__x86_64__)
    emu_switch_stack(&t->sp, scheduler_sp);
#else
    swapcontext(&t->ctx, &scheduler_ctx);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(t->fake_stack, &scheduler_stack_bottom, &scheduler_stack_size);
#endif
}

// A fiber lives for the whole process: it runs the current launch's body once per block it is given, then parks
// (DONE) until the scheduler hands it the next block. Its frames unwind normally between blocks, so nothing has to
// be reset (ASan's stack redzones included) when the same stack serves the next block or launch.
static void fiber_entry(void) {
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack_bottom, &scheduler_stack_size);
#endif
    for (;;) {
        ThreadState *t = current;
        (*launch_body)();
        t->state = ThreadState::DONE;
        switch_to_scheduler(t);
    }
}

static void resume(ThreadState *t) {
    current = t;
#ifdef EMU_ASAN
    void *sched_fake = nullptr;
    __sanitizer_start_switch_fiber(&sched_fake, t->stack, STACK_BYTES);
#endif
#if defined(__x86_64__)
    emu_switch_stack(&scheduler_sp, t->sp);
#else
    swapcontext(&scheduler_ctx, &t->ctx);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(sched_fake, nullptr, nullptr);
#endif
    current = nullptr;
}

uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane_xor) {
    ThreadState *t = current;
    if (!t) fatal("__shfl_xor_sync outside a kernel");
    if (mask != 0xffffffffu) fatal("kernel %s: shuffle mask %#x: only full-warp masks are emulated", launch_name, mask);
    if (src_lane_xor < 0 || src_lane_xor > 31) fatal("kernel %s: shuffle lane mask %d", launch_name, src_lane_xor);
    unsigned buf = warp_phase[(size_t)t->warp] & 1u;
    uint64_t *slots = &warp_slots[((size_t)t->warp * 2 + buf) * 32];
    slots[t->lane] = value;
    t->state = ThreadState::AT_WARP;
    t->mask = mask;
    switch_to_scheduler(t);
    return slots[t->lane ^ src_lane_xor];
}

void warp_barrier(unsigned mask) {
    ThreadState *t = current;
    if (!t) fatal("__syncwarp outside a kernel");
    if (mask != 0xffffffffu)
        fatal("kernel %s: __syncwarp mask %#x: only full-warp masks are emulated", launch_name, mask);
    t->state = ThreadState::AT_WARP;
    t->mask = mask;
    switch_to_scheduler(t);
}

void block_barrier(void) {
    ThreadState *t = current;
    if (!t) fatal("__syncthreads outside a kernel");
    t->state = ThreadState::AT_BLOCK;
    switch_to_scheduler(t);
}

// Releases every collective that all its participants have reached; false when none could be released.
static bool release_collectives(size_t n_threads) {
    bool released = false;
    size_t n_warps = (n_threads + 31) / 32;
    size_t live = 0, at_block = 0;
    for (size_t w = 0; w < n_warps; w++) {
        size_t lo = w * 32, hi = lo + 32 < n_threads ? lo + 32 : n_threads;
        size_t waiting = 0, done = 0, lanes = hi - lo;
        for (size_t i = lo; i < hi; i++) {
            if (threads[i].state == ThreadState::AT_WARP) waiting++;
            if (threads[i].state == ThreadState::DONE) done++;
        }
        if (waiting == 0) continue;
        if (lanes != 32) fatal("kernel %s: warp collective in a partial warp (%zu lanes)", launch_name, lanes);
        if (done) fatal("kernel %s: block (%u,%u,%u) warp %zu: a full-mask warp collective after %zu lanes exited",
                        launch_name, block_idx.x, block_idx.y, block_idx.z, w, done);
        if (waiting == lanes) {
            for (size_t i = lo; i < hi; i++) threads[i].state = ThreadState::RUNNABLE;
            warp_phase[w]++;
            released = true;
        }
    }
    if (released) return true;
    for (size_t i = 0; i < n_threads; i++) {
        if (threads[i].state != ThreadState::DONE) live++;
        if (threads[i].state == ThreadState::AT_BLOCK) at_block++;
    }
    // CUDA requires every thread of the block to reach __syncthreads (recent GPUs happen to tolerate exited ones)
    if (at_block && live < n_threads)
        fatal("kernel %s: block (%u,%u,%u): __syncthreads after %zu threads of the block exited", launch_name,
              block_idx.x, block_idx.y, block_idx.z, n_threads - live);
    if (live && at_block == live) {
        for (size_t i = 0; i < n_threads; i++)
            if (threads[i].state == ThreadState::AT_BLOCK) threads[i].state = ThreadState::RUNNABLE;
        return true;
    }
    return false;
}

// Creates the fiber of thread slot i (its stack and first frame). Kept out of line: getcontext (the fallback)
// returns twice, and locals of the caller's loop must not live across it.
__attribute__((noinline)) static void create_fiber(size_t i) {
    ThreadState &t = threads[i];
    t.stack = (char *)malloc(STACK_BYTES);
    if (!t.stack) fatal("out of memory for fiber stacks");
#if defined(__x86_64__)
    // The frame emu_switch_stack pops: control words, r15..rbp (zero), then fiber_entry as the return address,
    // above it a zero fake return address so fiber_entry starts with the ABI's alignment (rsp = 8 mod 16).
    uintptr_t top = ((uintptr_t)t.stack + STACK_BYTES) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)top;
    *--sp = 0;                               // fiber_entry's return address (it never returns)
    *--sp = (uint64_t)(uintptr_t)fiber_entry; // popped by ret
    for (int r = 0; r < 6; r++) *--sp = 0;   // rbp, rbx, r12, r13, r14, r15
    --sp;
    uint32_t mxcsr = 0x1F80u, fpucw = 0x037Fu; // the ABI's initial control words
    memcpy((char *)sp, &mxcsr, 4);
    memcpy((char *)sp + 4, &fpucw, 2);
    t.sp = sp;
#else
    if (getcontext(&t.ctx) != 0) fatal("getcontext failed");
    t.ctx.uc_stack.ss_sp = t.stack;
    t.ctx.uc_stack.ss_size = STACK_BYTES;
    t.ctx.uc_link = nullptr;
    makecontext(&t.ctx, fiber_entry, 0);
#endif
}

// Gives thread slot i its place in the current block.
static void assign_thread(size_t i) {
    ThreadState &t = threads[i];
    if (!t.stack) create_fiber(i);
    t.linear = (int)i;
    t.warp = (int)(i / 32);
    t.lane = (int)(i % 32);
    t.idx.x = (unsigned)(i % block_dim.x);
    t.idx.y = (unsigned)((i / block_dim.x) % block_dim.y);
    t.idx.z = (unsigned)(i / ((size_t)block_dim.x * block_dim.y));
    t.state = ThreadState::RUNNABLE;
}

static void run_block(size_t n_threads) {
    for (size_t i = 0; i < n_threads; i++) assign_thread(i);
    std::fill(warp_phase.begin(), warp_phase.end(), 0u);
    for (;;) {
        bool ran = false;
        for (size_t k = 0; k < n_threads; k++) {
            size_t i = reverse_order ? n_threads - 1 - k : k;
            if (threads[i].state != ThreadState::RUNNABLE) continue;
            resume(&threads[i]);
            ran = true;
        }
        if (ran) continue;
        bool all_done = true;
        for (size_t i = 0; i < n_threads; i++) all_done &= threads[i].state == ThreadState::DONE;
        if (all_done) return;
        if (!release_collectives(n_threads))
            fatal("kernel %s: block (%u,%u,%u): threads wait at different collectives (deadlock on a GPU)",
                  launch_name, block_idx.x, block_idx.y, block_idx.z);
    }
}

bool begin_launch(const char *kernel, dim3 grid, dim3 block, size_t shmem, LaunchCost cost) {
    launch_name = kernel;
    stat_launch(kernel);
    log_launch(kernel, grid, block, shmem, cost);
    size_t n = (size_t)block.x * block.y * block.z;
    bool ok = block.x >= 1 && block.y >= 1 && block.z >= 1 && block.x <= 1024 && block.y <= 1024 && block.z <= 64 &&
              n <= 1024 && grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && grid.x <= 2147483647u && grid.y <= 65535 &&
              grid.z <= 65535 && shmem <= 48 * 1024;
    if (!ok) {
        last_error = cudaErrorInvalidConfiguration;
        if (getenv("CUDA_EMU_VERBOSE"))
            fprintf(stderr, "cuda-emu: kernel %s: invalid configuration grid (%u,%u,%u) block (%u,%u,%u) shmem %zu\n",
                    kernel, grid.x, grid.y, grid.z, block.x, block.y, block.z, shmem);
        return false;
    }
    grid_dim = grid;
    block_dim = block;
    dyn_shared.assign(shmem, 0xFF); // uninitialised shared memory reads as NaN
    return true;
}

void run_launch(const std::function<void()> &body) {
    long bf16_before = bf16_roundings; // the roundings of this launch are attributed to its kernel
    const char *order = getenv("CUDA_EMU_ORDER");
    reverse_order = order && strcmp(order, "reverse") == 0;
    size_t n = (size_t)block_dim.x * block_dim.y * block_dim.z;
    if (threads.capacity() < 1024) threads.reserve(1024); // never reallocated: fibers keep pointers into it
    if (threads.size() < n) threads.resize(n);
    size_t n_warps = (n + 31) / 32;
    warp_slots.assign(n_warps * 2 * 32, 0);
    warp_phase.assign(n_warps, 0);
    launch_body = &body;
    for (unsigned z = 0; z < grid_dim.z; z++)
        for (unsigned y = 0; y < grid_dim.y; y++)
            for (unsigned x = 0; x < grid_dim.x; x++) {
                block_idx = uint3{x, y, z};
                run_block(n);
            }
    launch_body = nullptr;
    stat_bf16(launch_name, bf16_roundings - bf16_before);
}

long bf16_roundings = 0;

} // namespace emu

// ---------------------------------------------------------------- bfloat16
uint16_t emu::bf16_round_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); // NaN: keep it a (quiet) NaN
    u += 0x7fffu + ((u >> 16) & 1u); // round to nearest, ties to even
    return (uint16_t)(u >> 16);
}
__nv_bfloat16 __float2bfloat16_rn(float f) {
    emu::bf16_roundings++; // a plain counter: the per-kernel attribution happens once per launch (run_launch)
    __nv_bfloat16 h;
    h.bits = emu::bf16_round_bits(f);
    return h;
}
float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// ---------------------------------------------------------------- runtime API
using emu::fatal;

static cudaError_t fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cudaError_t fail(cudaError_t e, const char *fmt, ...) {
    if (getenv("CUDA_EMU_VERBOSE")) {
        va_list ap;
        va_start(ap, fmt);
        emu::vreport(nullptr, fmt, ap);
        va_end(ap);
    }
    return e;
}

// The error codes the emulator returns, with the runtime's names and messages.
static const struct {
    cudaError_t code;
    const char *name, *text;
} error_table[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
};
const char *cudaGetErrorString(cudaError_t e) {
    for (const auto &row : error_table)
        if (row.code == e) return row.text;
    return "unknown error";
}
const char *cudaGetErrorName(cudaError_t e) {
    for (const auto &row : error_table)
        if (row.code == e) return row.name;
    return "cudaErrorUnknown";
}
cudaError_t cudaGetLastError(void) {
    cudaError_t e = emu::last_error;
    emu::last_error = cudaSuccess;
    return e;
}

// CUDA_EMU_DEVICES=0 emulates a machine without a GPU (the skip path of the tests).
static int n_devices(void) {
    const char *s = getenv("CUDA_EMU_DEVICES");
    return s ? atoi(s) : 1;
}
static const int EMU_RUNTIME_VERSION = 13000;
cudaError_t cudaRuntimeGetVersion(int *version) {
    *version = EMU_RUNTIME_VERSION;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *version) {
    const char *s = getenv("CUDA_EMU_DRIVER_VERSION");
    *version = s && *s ? atoi(s) : EMU_RUNTIME_VERSION;
    return cudaSuccess;
}
static bool driver_too_old(void) {
    int driver;
    cudaDriverGetVersion(&driver);
    return driver / 1000 < EMU_RUNTIME_VERSION / 1000;
}

cudaError_t cudaGetDeviceCount(int *n) {
    *n = 0;
    if (driver_too_old()) return cudaErrorInsufficientDriver;
    if (n_devices() <= 0) return cudaErrorNoDevice;
    *n = n_devices();
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return dev >= 0 && dev < n_devices() ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int dev) {
    if (dev < 0 || dev >= n_devices()) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "CUDA emulator on the CPU (kernels/cuda/emu), not a GPU");
    prop->totalGlobalMem = (size_t)16 << 30;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 1;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    emu::stat_device_sync();
    emu::log_sync("device");
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = nullptr;
    size_t n = bytes ? bytes : 1;
    void *q;
    if (emu::dry_run()) { // address space only: nothing is written, so a paper-size model costs no memory
        q = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (q == MAP_FAILED) return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu): out of address space", bytes);
    } else {
        q = aligned_alloc(256, (n + 255) & ~(size_t)255);
        if (!q) return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu): out of memory", bytes);
        memset(q, 0xFF, n); // never-written device memory reads as NaN / -1
    }
    emu::device_allocs[(uintptr_t)q] = n;
    emu::stat_device_alloc(n, false);
    *p = q;
    return cudaSuccess;
}
// Forgets and frees a tracked allocation; p must be the base of one in allocs.
static cudaError_t free_tracked(std::map<uintptr_t, size_t> &allocs, void *p, cudaError_t not_found,
                                const char *what) {
    if (!p) return cudaSuccess;
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end()) return fail(not_found, "%s(%p): not an allocation of that kind", what, p);
    bool device = &allocs == &emu::device_allocs;
    size_t bytes = it->second;
    allocs.erase(it);
    if (device) {
        emu::stat_device_alloc(bytes, true);
        emu::log_sync("free");
    }
    if (device && emu::dry_run()) munmap(p, bytes);
    else free(p);
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) { return free_tracked(emu::device_allocs, p, cudaErrorInvalidDevicePointer, "cudaFree"); }
cudaError_t cudaMallocHost(void **p, size_t bytes) {
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    emu::pinned_allocs[(uintptr_t)*p] = bytes ? bytes : 1;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) { return free_tracked(emu::pinned_allocs, p, cudaErrorInvalidValue, "cudaFreeHost"); }

// A host range must not be device memory, and a device range must lie inside one device allocation.
static cudaError_t check_side(const void *p, size_t bytes, bool device, const char *what) {
    if (device && !emu::is_device_range(p, bytes))
        return fail(cudaErrorInvalidValue, "%s: [%p, +%zu) is not inside a device allocation", what, p, bytes);
    if (!device && emu::is_device_range(p, 0) && !emu::is_pinned(p))
        return fail(cudaErrorInvalidValue, "%s: %p is device memory where host memory was expected", what, p);
    return cudaSuccess;
}
// cudaMemcpy (synchronous: the host waits for the copy and the work queued before it) and cudaMemcpyAsync.
static cudaError_t copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, bool synchronous) {
    if (bytes == 0) return cudaSuccess;
    bool dst_dev, src_dev;
    switch (kind) {
    case cudaMemcpyHostToDevice: dst_dev = true, src_dev = false; break;
    case cudaMemcpyDeviceToHost: dst_dev = false, src_dev = true; break;
    case cudaMemcpyDeviceToDevice: dst_dev = true, src_dev = true; break;
    default: return fail(cudaErrorInvalidValue, "cudaMemcpy: kind %d is not emulated", (int)kind);
    }
    cudaError_t e = check_side(dst, bytes, dst_dev, "cudaMemcpy dst");
    if (e == cudaSuccess) e = check_side(src, bytes, src_dev, "cudaMemcpy src");
    if (e != cudaSuccess) return e;
    int k = kind == cudaMemcpyHostToDevice ? 0 : kind == cudaMemcpyDeviceToHost ? 1 : 2;
    emu::stat_copy(k, bytes);
    emu::log_copy(k, synchronous, bytes);
    // A dry run moves what crosses to or from the host (token ids, masks: the host's decisions may read them back)
    // and nothing the device keeps to itself.
    if (!(emu::dry_run() && k == 2)) memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    return copy(dst, src, bytes, kind, true);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
    return copy(dst, src, bytes, kind, false); // one in-order stream: async work completes immediately
}
cudaError_t cudaMemset(void *p, int value, size_t bytes) {
    if (bytes == 0) return cudaSuccess;
    cudaError_t e = check_side(p, bytes, true, "cudaMemset");
    if (e != cudaSuccess) return e;
    emu::stat_memset(bytes);
    emu::log_memset(bytes);
    if (!emu::dry_run()) memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }

// ---------------------------------------------------------------- cuBLAS
struct cublasContext_emu {
    int magic;
};
static const int CUBLAS_MAGIC = 0x6375626c;

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = (cublasHandle_t)calloc(1, sizeof(cublasContext_emu));
    if (!*h) return CUBLAS_STATUS_ALLOC_FAILED;
    (*h)->magic = CUBLAS_MAGIC;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h || h->magic != CUBLAS_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t) {
    return h && h->magic == CUBLAS_MAGIC ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t) {
    return h && h->magic == CUBLAS_MAGIC ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
// cuBLAS's two names of a status: the enumerator's (cublasGetStatusName) and a sentence (cublasGetStatusString; an
// H100's CUDA 13.0 cuBLAS said "the requested functionality is not supported" for NOT_SUPPORTED, and messages that
// print both must read the same here).
const char *cublasGetStatusName(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}
const char *cublasGetStatusString(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the requested functionality is not supported";
    }
    return "unknown error";
}

// Every GEMM entry point reports through gemm_fail with its own name (the message names the call that failed).
static cublasStatus_t gemm_fail(const char *call, cublasStatus_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cublasStatus_t gemm_fail(const char *call, cublasStatus_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emu::vreport(call, fmt, ap);
    va_end(ap);
    return st;
}

static double load(const void *base, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_16BF) return (double)__bfloat162float(((const __nv_bfloat16 *)base)[i]);
    return (double)((const float *)base)[i];
}

static bool handle_ok(cublasHandle_t h) { return h && h->magic == CUBLAS_MAGIC; }

// The type combinations the emulator computes (the ones the backend uses): A = B in {fp32, bf16}, C fp32, fp32
// compute. Whether a real cuBLAS supports a combination for a given entry point is the backend's probe's business.
static cublasStatus_t check_types(const char *call, cudaDataType_t Atype, cudaDataType_t Btype, cudaDataType_t Ctype,
                                  cublasComputeType_t compute) {
    if (Atype != Btype || (Atype != CUDA_R_32F && Atype != CUDA_R_16BF) || Ctype != CUDA_R_32F ||
        compute != CUBLAS_COMPUTE_32F)
        return gemm_fail(call, CUBLAS_STATUS_NOT_SUPPORTED, "type combination A %d B %d C %d compute %d", (int)Atype,
                         (int)Btype, (int)Ctype, (int)compute);
    return CUBLAS_STATUS_SUCCESS;
}

// Argument checks a real cuBLAS makes before touching memory (INVALID_VALUE): sizes and leading dimensions.
static cublasStatus_t check_shape(const char *call, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                                  int k, int lda, int ldb, int ldc) {
    if (m < 0 || n < 0 || k < 0) return gemm_fail(call, CUBLAS_STATUS_INVALID_VALUE, "m=%d n=%d k=%d", m, n, k);
    if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) || (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T))
        return gemm_fail(call, CUBLAS_STATUS_INVALID_VALUE, "transa %d transb %d", (int)transa, (int)transb);
    int a_rows = transa == CUBLAS_OP_N ? m : k, b_rows = transb == CUBLAS_OP_N ? k : n;
    if (lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1))
        return gemm_fail(call, CUBLAS_STATUS_INVALID_VALUE,
                         "leading dimension too small: lda %d (rows %d) ldb %d (rows %d) ldc %d (m %d)", lda, a_rows,
                         ldb, b_rows, ldc, m);
    return CUBLAS_STATUS_SUCCESS;
}

// What one cuBLAS call asks of the GPU, summed over its problems, for the launch log (log_gemm).
struct GemmTally {
    long problems = 0, tiles = 0;
    double flops = 0, bytes = 0;
    void add(int m, int n, int k, cudaDataType_t t, float beta, long count = 1) {
        double esz = t == CUDA_R_16BF ? 2 : 4, mn = (double)m * n;
        problems += count;
        tiles += count * (long)((m + 127) / 128) * (long)((n + 127) / 128);
        flops += count * 2.0 * mn * k;
        bytes += count * (((double)m * k + (double)k * n) * esz + mn * 4 * (beta != 0.0f ? 2 : 1));
    }
    void log(const char *call, cudaDataType_t t) const {
        emu::log_gemm(call, t == CUDA_R_16BF, problems, flops, bytes, tiles);
    }
};

// One column-major product C[m,n] = alpha op(A) op(B) + beta C after the checks above; operands that do not lie in
// device memory are fatal (a GPU would fault). Sums in double; beta = 0 never reads C. A dry run checks, computes
// nothing.
static void gemm_compute(const char *call, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                         float alpha, const void *A, cudaDataType_t Atype, int lda, const void *B, int ldb, float beta,
                         void *C, int ldc) {
    if (m == 0 || n == 0) return;
    int a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
    int b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
    size_t esz = Atype == CUDA_R_16BF ? 2 : 4;
    auto extent = [](int ld, int rows, int cols) { return cols ? ((size_t)(cols - 1) * ld + rows) : 0; };
    if (k > 0 && (!emu::is_device_range(A, extent(lda, a_rows, a_cols) * esz) ||
                  !emu::is_device_range(B, extent(ldb, b_rows, b_cols) * esz)))
        fatal("%s: operand A %p or B %p does not lie inside a device allocation (m=%d n=%d k=%d)", call, A, B, m, n,
              k);
    if (!emu::is_device_range(C, extent(ldc, m, n) * 4))
        fatal("%s: C %p does not lie inside a device allocation (m=%d n=%d ldc=%d)", call, C, m, n, ldc);
    if (emu::dry_run()) return;
    // op(A) row by row and op(B) column by column, widened to double once: the dot products below then read both
    // contiguously. Each C element is still the double sum over l = 0..k-1 in that order of exact products (two
    // floats' product fits a double), so the result does not depend on this layout.
    std::vector<double> op_a((size_t)m * k), op_b((size_t)n * k); // op(A) [m, k] by rows, op(B) [n, k] by columns
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++)
            op_a[(size_t)i * k + l] =
                load(A, Atype, transa == CUBLAS_OP_N ? (size_t)l * lda + i : (size_t)i * lda + l);
    for (int j = 0; j < n; j++)
        for (int l = 0; l < k; l++)
            op_b[(size_t)j * k + l] =
                load(B, Atype, transb == CUBLAS_OP_N ? (size_t)j * ldb + l : (size_t)l * ldb + j);
    float *c = (float *)C;
    for (int j = 0; j < n; j++) {
        const double *b = op_b.data() + (size_t)j * k;
        for (int i = 0; i < m; i++) {
            const double *a = op_a.data() + (size_t)i * k;
            double acc = 0;
            for (int l = 0; l < k; l++) acc += a[l] * b[l];
            float *cij = c + (size_t)j * ldc + i;
            *cij = beta == 0.0f ? alpha * (float)acc : alpha * (float)acc + beta * *cij;
        }
    }
}

// The checks every single-shape entry point (plain, strided, pointer-array batched) makes, in cuBLAS's order.
static cublasStatus_t check_call(const char *call, cublasHandle_t h, int batch, cublasOperation_t transa,
                                 cublasOperation_t transb, int m, int n, int k, int lda, int ldb, int ldc,
                                 cudaDataType_t Atype, cudaDataType_t Btype, cudaDataType_t Ctype,
                                 cublasComputeType_t compute) {
    if (!handle_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (batch < 0) return gemm_fail(call, CUBLAS_STATUS_INVALID_VALUE, "batchCount %d", batch);
    cublasStatus_t st = check_shape(call, transa, transb, m, n, k, lda, ldb, ldc);
    return st == CUBLAS_STATUS_SUCCESS ? check_types(call, Atype, Btype, Ctype, compute) : st;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                            const void *alpha_p, const void *A, cudaDataType_t Atype, int lda, const void *B,
                            cudaDataType_t Btype, int ldb, const void *beta_p, void *C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
    const char *call = "cublasGemmEx";
    cublasStatus_t st = check_call(call, h, 1, transa, transb, m, n, k, lda, ldb, ldc, Atype, Btype, Ctype, compute);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    emu::stat_cublas(call, 1);
    GemmTally tally;
    tally.add(m, n, k, Atype, *(const float *)beta_p);
    tally.log(call, Atype);
    gemm_compute(call, transa, transb, m, n, k, *(const float *)alpha_p, A, Atype, lda, B, ldb,
                 *(const float *)beta_p, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                                          int n, int k, const void *alpha_p, const void *A, cudaDataType_t Atype,
                                          int lda, long long strideA, const void *B, cudaDataType_t Btype, int ldb,
                                          long long strideB, const void *beta_p, void *C, cudaDataType_t Ctype,
                                          int ldc, long long strideC, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t) {
    const char *call = "cublasGemmStridedBatchedEx";
    cublasStatus_t st =
        check_call(call, h, batch, transa, transb, m, n, k, lda, ldb, ldc, Atype, Btype, Ctype, compute);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    emu::stat_cublas(call, batch);
    GemmTally tally;
    tally.add(m, n, k, Atype, *(const float *)beta_p, batch);
    tally.log(call, Atype);
    size_t esz = Atype == CUDA_R_16BF ? 2 : 4;
    for (int b = 0; b < batch; b++)
        gemm_compute(call, transa, transb, m, n, k, *(const float *)alpha_p, (const char *)A + b * strideA * esz,
                     Atype, lda, (const char *)B + b * strideB * esz, ldb, *(const float *)beta_p,
                     (char *)C + b * strideC * 4, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

// The pointer arrays of the batched and grouped calls are read by the GPU: they must be device memory.
static void check_pointer_array(const char *call, const char *name, const void *arr, long count) {
    if (count > 0 && !emu::is_device_range(arr, (size_t)count * sizeof(void *)))
        fatal("%s: %s %p (%ld pointers) is not device memory (a GPU would fault)", call, name, arr, count);
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                                   int k, const void *alpha_p, const void *const Aarray[], cudaDataType_t Atype,
                                   int lda, const void *const Barray[], cudaDataType_t Btype, int ldb,
                                   const void *beta_p, void *const Carray[], cudaDataType_t Ctype, int ldc, int batch,
                                   cublasComputeType_t compute, cublasGemmAlgo_t) {
    const char *call = "cublasGemmBatchedEx";
    cublasStatus_t st =
        check_call(call, h, batch, transa, transb, m, n, k, lda, ldb, ldc, Atype, Btype, Ctype, compute);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    check_pointer_array(call, "Aarray", Aarray, batch);
    check_pointer_array(call, "Barray", Barray, batch);
    check_pointer_array(call, "Carray", Carray, batch);
    emu::stat_cublas(call, batch);
    GemmTally tally;
    tally.add(m, n, k, Atype, *(const float *)beta_p, batch);
    tally.log(call, Atype);
    if (emu::dry_run()) return CUBLAS_STATUS_SUCCESS; // the pointer arrays are device data a dry run never wrote
    for (int b = 0; b < batch; b++)
        gemm_compute(call, transa, transb, m, n, k, *(const float *)alpha_p, Aarray[b], Atype, lda, Barray[b], ldb,
                     *(const float *)beta_p, Carray[b], ldc);
    return CUBLAS_STATUS_SUCCESS;
}

// Per-group parameters live in host memory (the handle's default host pointer mode); the matrix pointer arrays in
// device memory, group after group.
cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t h, const cublasOperation_t transa_array[],
                                          const cublasOperation_t transb_array[], const int m_array[],
                                          const int n_array[], const int k_array[], const void *alpha_array,
                                          const void *const Aarray[], cudaDataType_t Atype, const int lda_array[],
                                          const void *const Barray[], cudaDataType_t Btype, const int ldb_array[],
                                          const void *beta_array, void *const Carray[], cudaDataType_t Ctype,
                                          const int ldc_array[], int group_count, const int group_size[],
                                          cublasComputeType_t compute) {
    const char *call = "cublasGemmGroupedBatchedEx";
    if (!handle_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (group_count < 0) return gemm_fail(call, CUBLAS_STATUS_INVALID_VALUE, "group_count %d", group_count);
    cublasStatus_t st = check_types(call, Atype, Btype, Ctype, compute);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const void *host_arrays[] = {transa_array, transb_array, m_array, n_array, k_array, alpha_array,
                                 lda_array,    ldb_array,    beta_array, ldc_array, group_size};
    for (const void *a : host_arrays)
        if (group_count > 0 && (!a || (emu::is_device_range(a, 0) && !emu::is_pinned(a))))
            fatal("%s: a per-group parameter array (%p) is NULL or device memory; with the host pointer mode it must "
                  "be host memory", call, a);
    long total = 0;
    for (int g = 0; g < group_count; g++) {
        if (group_size[g] < 0)
            return gemm_fail(call, CUBLAS_STATUS_INVALID_VALUE, "group_size[%d] = %d", g, group_size[g]);
        st = check_shape(call, transa_array[g], transb_array[g], m_array[g], n_array[g], k_array[g], lda_array[g],
                         ldb_array[g], ldc_array[g]);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
        total += group_size[g];
    }
    check_pointer_array(call, "Aarray", Aarray, total);
    check_pointer_array(call, "Barray", Barray, total);
    check_pointer_array(call, "Carray", Carray, total);
    // Fault injection for the backend's probe of this call (real cuBLAS versions differ in what they support):
    // CUDA_EMU_GROUPED_GEMM=unsupported-bf16 refuses bf16 operands, =unsupported refuses everything, =wrong computes
    // every problem and then adds 1 to its C[0,0] (a silently wrong library).
    const char *fault = getenv("CUDA_EMU_GROUPED_GEMM");
    fault = fault ? fault : "";
    if (strcmp(fault, "unsupported") == 0 || (strcmp(fault, "unsupported-bf16") == 0 && Atype == CUDA_R_16BF))
        return gemm_fail(call, CUBLAS_STATUS_NOT_SUPPORTED, "refused (CUDA_EMU_GROUPED_GEMM=%s)", fault);
    emu::stat_cublas(call, total);
    const float *alpha = (const float *)alpha_array, *beta = (const float *)beta_array;
    GemmTally tally;
    for (int g = 0; g < group_count; g++) tally.add(m_array[g], n_array[g], k_array[g], Atype, beta[g], group_size[g]);
    tally.log(call, Atype);
    if (emu::dry_run()) return CUBLAS_STATUS_SUCCESS; // the pointer arrays are device data a dry run never wrote
    long p = 0;
    for (int g = 0; g < group_count; g++)
        for (int i = 0; i < group_size[g]; i++, p++) {
            gemm_compute(call, transa_array[g], transb_array[g], m_array[g], n_array[g], k_array[g], alpha[g],
                         Aarray[p], Atype, lda_array[g], Barray[p], ldb_array[g], beta[g], Carray[p], ldc_array[g]);
            if (strcmp(fault, "wrong") == 0 && m_array[g] > 0 && n_array[g] > 0) *(float *)Carray[p] += 1.0f;
        }
    return CUBLAS_STATUS_SUCCESS;
}
