// CUDA: the bf16 conversion cache of GEMM operands that are not weights (activations, gradients), for bf16 mode.
//
// Why: a bf16 GEMM takes bf16 operands, and matmul converted its fp32 activation operand in every call. The same
// tensor is read by several matmuls: a LayerNorm output by the 4-5 projections and routers of the layer it feeds, in
// the forward and again for their weight gradients in the backward; an output gradient by dX = dY W^T and
// dW = X^T dY. At the paper's MoEUT size that was 364 conversions of [32768 x 1024] per step. A tensor's bf16 copy
// stays good until something writes the tensor, so it is kept in one of BF16_CACHE_ENTRIES device buffers owned by
// the backend, keyed by (pointer, element count), the least recently used one taken for a new conversion. cvmm takes
// its bf16 copies of whole operands from here too (cvmm_mma_bf16_rows, and the cuBLAS paths' operands in plan
// order), so a tensor one of the two ops converted is not converted again by the other; and a producer whose
// output is a GEMM operand (LayerNorm forward, cuda_dense.cu) writes the bf16 copy into an entry beside its fp32
// output (cuda_bf16_cache_produce), so no conversion reads it again. A producer whose output is read by matmul alone
// (layernorm_forward_narrow) writes only the bf16 rounding, into the output's own memory, which is then registered
// as a narrow tensor: its own copy, handed out like an entry, dropped by the same reports, never evicted (a full
// registry makes the producer write fp32 and a cached copy instead). On the emulator the fp32 half it leaves is NaN,
// so that an fp32 reader shows. The narrow tensors are many (MoEUT keeps 2 per training application for its
// backward) and looked up at every operand and every write report, so they are an ordered map of disjoint ranges:
// a lookup or a report costs a logarithmic search, not a scan.
//
// Why a stale copy cannot be handed out: the same reports that keep the weights' copy fresh (cuda_weights_bf16.cu)
// drop the entries they overlap: every op reports each output range before writing it (cuda_weights_written), and so
// do the backend's to_device, copy, zero and the NCCL all-reduce; alloc reports the zero-filled buffer; free drops the
// entries inside the freed buffer (its size kept from alloc), since a later cudaMalloc may hand its memory out again
// (scratch is written without reports). matmul reports its output again after the GEMM (C may alias an operand it
// converted); cvmm's outputs may not alias its inputs (kernels/backend_ops.h). On the CUDA emulator every hit is
// compared bit for bit with a fresh rounding of the fp32 source, and so is every entry before and after each op of the
// backend's table (naming the op that wrote without a report, or whose produced copy is wrong), so a write path that
// forgot to report fails the emulated tests. bf16 rounding is deterministic: the bits are those a conversion in every
// call gives.
#include <cmath>
#include <iterator>
#include <map>
#include <unordered_map>

#include "kernels/cuda/cuda_common.cuh"

typedef std::unordered_map<const void *, size_t> AllocSizes;
static AllocSizes &alloc_sizes(CudaImpl *im) {
    if (!im->alloc_sizes) im->alloc_sizes = new AllocSizes();
    return *(AllocSizes *)im->alloc_sizes;
}
// The operands converted on a miss (source -> element count of the last one), for cuda_bf16_cache_produce_input: a
// buffer that was a GEMM operand is one again in the next step (the model's buffers are the same every step).
// Keys inside a freed buffer are dropped; at most BF16_DEMAND_KEYS are kept (all forgotten past that).
typedef std::unordered_map<const float *, size_t> Demand;
static Demand &demand(CudaImpl *im) {
    if (!im->bf16_demand) im->bf16_demand = new Demand();
    return *(Demand *)im->bf16_demand;
}

// The kept copies (keep_operand): a source named by the model keeps its bf16 copy in a buffer of its own, outside the
// entries' rotation, from its next conversion (or its producer's copy) until something writes it; the buffer stays for
// the next copy while the source's allocation lives. MoEUT's layer input x and its x1 are read by cvmm in the forward
// and again by the weight gradients of the backward, when their entries are long evicted: without these, the
// backward converted both again in every application (70 conversions of [32768 x 1024] per paper step, 4.0 ms).
struct Bf16Kept {
    size_t n;           // the source's element count
    __nv_bfloat16 *buf; // [n], allocated at the first keep_operand
    bool valid;         // buf holds the source's rounding now
};
typedef std::unordered_map<const float *, Bf16Kept> KeptSet;
static KeptSet &kept_set(CudaImpl *im) {
    if (!im->bf16_kept) im->bf16_kept = new KeptSet();
    return *(KeptSet *)im->bf16_kept;
}
// The kept copy of p[n] (a valid one, or one to fill), or NULL when p is not kept with n values.
static Bf16Kept *kept_of(CudaImpl *im, const float *p, size_t n) {
    if (!im->bf16_kept) return nullptr;
    KeptSet &s = *(KeptSet *)im->bf16_kept;
    auto it = s.find(p);
    return it != s.end() && it->second.n == n ? &it->second : nullptr;
}

void cuda_keep_operand(Backend *be, const scalar_t *x, size_t n) {
    CudaImpl *im = cuda_impl(be);
    // only where operands are converted: plain mode converts in every call (the comparator), fp32 never
    if (!x || n == 0 || !use_bf16(be) || im->matmul_impl == MATMUL_PLAIN) return;
    Bf16Kept &k = kept_set(im)[x];
    if (k.buf && k.n == n) return;
    if (k.buf) { // a new size for the same source: a new buffer (cudaFree synchronises; not in a steady step)
        CHECK_CUDA(cudaFree(k.buf));
        k.buf = nullptr;
    }
    cudaError_t err = cudaMalloc(&k.buf, n * sizeof(__nv_bfloat16));
    if (err != cudaSuccess)
        die("cuda backend: out of device memory for %zu bytes of a kept bf16 operand copy (keep_operand): %s",
            n * sizeof(__nv_bfloat16), cudaGetErrorString(err));
    k.n = n, k.valid = false;
}

// The narrow tensors: start address -> element count; the ranges are disjoint (a registration drops every one it
// overlaps), so they are ordered by their ends too.
typedef std::map<uintptr_t, size_t> NarrowSet;
static NarrowSet &narrow_set(CudaImpl *im) {
    if (!im->bf16_narrow) im->bf16_narrow = new NarrowSet();
    return *(NarrowSet *)im->bf16_narrow;
}
// The first narrow tensor that ends after address a (the only one that can hold a, or overlap a range starting there).
static NarrowSet::iterator narrow_from(NarrowSet &s, uintptr_t a) {
    auto it = s.upper_bound(a); // the first starting after a
    if (it != s.begin()) {
        auto prev = std::prev(it); // the last starting at or before a
        if (prev->second * sizeof(float) > a - prev->first) return prev;
    }
    return it;
}
// Drops the narrow tensors overlapping [p, p + bytes).
static void narrow_forget(CudaImpl *im, const void *p, size_t bytes) {
    if (!im->bf16_narrow) return;
    NarrowSet &s = *(NarrowSet *)im->bf16_narrow;
    const uintptr_t a = (uintptr_t)p;
    // the one holding a (starting at or before it), then those starting inside the range
    for (auto it = narrow_from(s, a); it != s.end() && (it->first <= a || it->first - a < bytes);) it = s.erase(it);
}

void cuda_bf16_cache_forget(Backend *be, const void *p, size_t bytes) {
    if (!p || bytes == 0) return;
    for (CudaImpl::Bf16CacheEntry &e : cuda_impl(be)->bf16_cache)
        if (e.src && ranges_overlap(e.src, e.n * sizeof(float), p, bytes)) e.src = nullptr;
    narrow_forget(cuda_impl(be), p, bytes);
    if (cuda_impl(be)->bf16_kept)
        for (auto &k : *(KeptSet *)cuda_impl(be)->bf16_kept)
            if (k.second.valid && (ranges_overlap(k.first, k.second.n * sizeof(float), p, bytes) ||
                                   ranges_overlap(k.second.buf, k.second.n * sizeof(__nv_bfloat16), p, bytes)))
                k.second.valid = false;
}

__nv_bfloat16 *cuda_bf16_narrow_register(Backend *be, float *p, size_t n) {
    if (!p || n == 0) return nullptr;
    CudaImpl *im = cuda_impl(be);
    narrow_forget(im, p, n * sizeof(float)); // (the caller reported the write: nothing overlaps any more)
    NarrowSet &s = narrow_set(im);
    if (s.size() >= (size_t)im->bf16_narrow_cap) return nullptr;
    s.emplace((uintptr_t)p, n);
    return (__nv_bfloat16 *)p;
}

// The narrow tensor holding all of [p, p + n) as its bf16 copy, or NULL.
static const __nv_bfloat16 *narrow_holding(CudaImpl *im, const float *p, size_t n) {
    if (!im->bf16_narrow) return nullptr;
    NarrowSet &s = *(NarrowSet *)im->bf16_narrow;
    auto it = narrow_from(s, (uintptr_t)p);
    if (it == s.end()) return nullptr;
    const float *src = (const float *)it->first;
    return range_inside(p, n, src, it->second) ? (const __nv_bfloat16 *)src + (p - src) : nullptr;
}

void cuda_bf16_cache_allocated(Backend *be, const void *p, size_t bytes) {
    cuda_bf16_cache_forget(be, p, bytes);
    alloc_sizes(cuda_impl(be))[p] = bytes;
}

void cuda_bf16_cache_freed(Backend *be, const void *p) {
    if (!p) return;
    AllocSizes &sizes = alloc_sizes(cuda_impl(be));
    auto it = sizes.find(p);
    if (it == sizes.end()) die("cuda backend: free of %p, which the backend's alloc did not return", p);
    const size_t bytes = it->second ? it->second : 1;
    cuda_bf16_cache_forget(be, p, bytes);
    Demand &d = demand(cuda_impl(be));
    for (auto k = d.begin(); k != d.end();)
        k = ranges_overlap(k->first, k->second * sizeof(float), p, bytes) ? d.erase(k) : std::next(k);
    if (cuda_impl(be)->bf16_kept) { // the kept copies of sources inside the freed buffer go with it
        KeptSet &ks = *(KeptSet *)cuda_impl(be)->bf16_kept;
        for (auto k = ks.begin(); k != ks.end();) {
            if (!ranges_overlap(k->first, k->second.n * sizeof(float), p, bytes)) {
                ++k;
                continue;
            }
            CHECK_CUDA(cudaFree(k->second.buf)); // synchronises: queued kernels may still read it
            k = ks.erase(k);
        }
    }
    sizes.erase(it);
}

void cuda_bf16_cache_destroy(Backend *be) {
    CudaImpl *im = cuda_impl(be);
    for (CudaImpl::Bf16CacheEntry &e : im->bf16_cache)
        if (e.buf) cudaFree(e.buf); // teardown: unchecked, as cu_destroy's
    delete (AllocSizes *)im->alloc_sizes;
    im->alloc_sizes = nullptr;
    delete (NarrowSet *)im->bf16_narrow;
    im->bf16_narrow = nullptr;
    delete (Demand *)im->bf16_demand;
    im->bf16_demand = nullptr;
    if (im->bf16_kept)
        for (auto &k : *(KeptSet *)im->bf16_kept) cudaFree(k.second.buf); // teardown: unchecked
    delete (KeptSet *)im->bf16_kept;
    im->bf16_kept = nullptr;
}

#ifdef CUDA_EMULATION
// The entry's copy of [p, p + n) against a fresh rounding of the fp32 values now (device memory is host memory here).
static void emu_check_entry(const CudaImpl::Bf16CacheEntry &e, const float *p, size_t n, const char *when) {
    const __nv_bfloat16 *c = e.buf + (p - e.src);
    for (size_t i = 0; i < n; i++)
        if (c[i].bits != emu::bf16_round_bits(p[i]))
            die("cuda backend: the cached bf16 copy of %zu floats at %p is stale at element %zu (copy %#06x, fp32 "
                "%.9g now) %s: an op wrote device memory without reporting it through cuda_weights_written (or a "
                "producer wrote a copy that is not its output's rounding, cuda_bf16_cache_produce)",
                e.n, (const void *)e.src, (size_t)(p - e.src) + i, (unsigned)c[i].bits, (double)p[i], when);
}

void cuda_bf16_cache_check(Backend *be, const char *op, bool after) {
    if (emu::dry_run()) return; // a dry run converts nothing (cuda_emu_launch_log.cpp)
    char when[160];
    if (after) snprintf(when, sizeof when, "after the op '%s', which wrote it", op);
    else snprintf(when, sizeof when, "before the op '%s': written outside the backend's ops", op);
    CudaImpl *im = cuda_impl(be);
    for (const CudaImpl::Bf16CacheEntry &e : im->bf16_cache)
        if (e.src) emu_check_entry(e, e.src, e.n, when);
    if (im->bf16_kept)
        for (const auto &k : *(const KeptSet *)im->bf16_kept)
            if (k.second.valid)
                emu_check_entry({k.first, k.second.n, k.second.buf, k.second.n, 0}, k.first, k.second.n, when);
    // A live narrow tensor keeps the NaN its LayerNorm left in its fp32 half (cuda_dense.cu) until a report drops it:
    // a value there is a write without a report (matmul would still hand out the bf16 half as the tensor's copy).
    if (im->bf16_narrow)
        for (const auto &t : *(const NarrowSet *)im->bf16_narrow) {
            const float *y = (const float *)t.first;
            for (size_t i = (t.second + 1) / 2; i < t.second; i++)
                if (!std::isnan(y[i]))
                    die("cuda backend: the narrow tensor of %zu floats at %p holds %.9g at element %zu of its fp32 "
                        "half %s: an op wrote device memory without reporting it through cuda_weights_written",
                        t.second, (const void *)y, (double)y[i], i, when);
        }
}
#endif

// Makes victim hold at least n values. Every buffer is made as large as the largest operand so far; a buffer too small
// for a new operand means a larger one came, and then the victim and every empty buffer smaller than it are made again
// at its size, in one go: cudaFree waits for the device, so the step pays that wait about once per new largest size
// (in the first step), not once per buffer whenever one of them first holds the largest operand. Buffers that hold a
// copy keep it (and their address): an op may still be about to read it.
static void alloc_entry(CudaImpl::Bf16CacheEntry *e, size_t n) {
    cudaError_t err = cudaMalloc(&e->buf, n * sizeof(__nv_bfloat16));
    if (err != cudaSuccess)
        die("cuda backend: out of device memory for %zu bytes of the bf16 conversion cache: %s",
            n * sizeof(__nv_bfloat16), cudaGetErrorString(err));
    e->cap = n;
}
static void grow(CudaImpl *im, CudaImpl::Bf16CacheEntry *victim, size_t n) {
    for (CudaImpl::Bf16CacheEntry &e : im->bf16_cache) n = e.cap > n ? e.cap : n;
    if (!victim->buf) return alloc_entry(victim, n); // a first allocation waits for nothing
    victim->src = nullptr;
    CHECK_CUDA(cudaDeviceSynchronize()); // kernels queued earlier may still read the old buffers
    for (CudaImpl::Bf16CacheEntry &e : im->bf16_cache) {
        if (!e.buf || e.src || e.cap >= n) continue;
        CHECK_CUDA(cudaFree(e.buf));
        e.buf = nullptr, e.cap = 0;
        alloc_entry(&e, n);
    }
}

// e holds a copy of [p, p + n)
static bool holds(const CudaImpl::Bf16CacheEntry &e, const float *p, size_t n) {
    return range_inside(p, n, e.src, e.n);
}

// The entry that will hold [p, p + n), taken now: an empty one, else the least recently used (each hand-out advances
// the clock, so the entries handed out by the last BF16_CACHE_ENTRIES - 1 calls are never the one taken).
static CudaImpl::Bf16CacheEntry *take_entry(CudaImpl *im, const float *p, size_t n) {
    CudaImpl::Bf16CacheEntry *victim = &im->bf16_cache[0];
    for (CudaImpl::Bf16CacheEntry &e : im->bf16_cache)
        if ((victim->src && !e.src) || (!victim->src == !e.src && e.used < victim->used)) victim = &e;
    if (victim->cap < n) grow(im, victim, n);
    victim->src = p;
    victim->n = n;
    victim->used = ++im->bf16_cache_clock;
    return victim;
}

const __nv_bfloat16 *cuda_bf16_cached(Backend *be, const float *p, size_t n) {
    const __nv_bfloat16 *w16;
    if (cuda_bf16_weights_slice(be, p, n, &w16)) return w16;
    CudaImpl *im = cuda_impl(be);
    if (const __nv_bfloat16 *t = narrow_holding(im, p, n)) return t; // a narrow tensor is its own copy
    if (Bf16Kept *k = kept_of(im, p, n)) { // a kept copy: valid, or made now into its own buffer
        if (!k->valid) cuda_to_bf16(k->buf, p, n);
#ifdef CUDA_EMULATION
        else if (!emu::dry_run())
            emu_check_entry({p, n, k->buf, n, 0}, p, n, "when read as a GEMM operand (a kept copy)");
#endif
        k->valid = true;
        return k->buf;
    }
    for (CudaImpl::Bf16CacheEntry &e : im->bf16_cache) {
        if (holds(e, p, n)) { // [p, p + n) inside the entry
            e.used = ++im->bf16_cache_clock;
#ifdef CUDA_EMULATION
            if (!emu::dry_run()) emu_check_entry(e, p, n, "when read as a GEMM operand");
#endif
            return e.buf + (p - e.src);
        }
    }
    Demand &d = demand(im);
    if (d.size() >= BF16_DEMAND_KEYS) d.clear();
    d[p] = n;
    CudaImpl::Bf16CacheEntry *e = take_entry(im, p, n);
    cuda_to_bf16(e->buf, p, n);
    return e->buf;
}

__nv_bfloat16 *cuda_bf16_cache_produce_input(Backend *be, const float *p, size_t n) {
    if (!p || n == 0) return nullptr;
    CudaImpl *im = cuda_impl(be);
    if (Bf16Kept *kept = kept_of(im, p, n)) { // a kept source: its own buffer, unless it holds the copy already
        if (kept->valid) return nullptr;
        kept->valid = true; // the caller's kernel, launched next, writes it
        return kept->buf;
    }
    auto k = demand(im).find(p);
    if (k == demand(im).end() || k->second != n) return nullptr; // not converted as a GEMM operand before
    for (const CudaImpl::Bf16CacheEntry &e : im->bf16_cache)
        if (holds(e, p, n)) return nullptr; // already held
    return take_entry(im, p, n)->buf;
}

__nv_bfloat16 *cuda_bf16_cache_produce(Backend *be, const float *p, size_t n) {
    if (!p || n == 0) return nullptr;
    CudaImpl *im = cuda_impl(be);
    cuda_bf16_cache_forget(be, p, n * sizeof(float)); // (the caller reported the write: nothing overlaps any more)
    if (Bf16Kept *kept = kept_of(im, p, n)) { // a kept source: into its own buffer
        kept->valid = true;                   // the caller's kernel, launched next, writes it
        return kept->buf;
    }
    return take_entry(im, p, n)->buf;
}
