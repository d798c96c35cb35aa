// CUDA: the routing plan (backend_ops.h's routing_plan: perm, inv, per-expert offsets, non-empty experts) built on the
// device by a stable counting sort, into the caller's plan memory.
//
// The entries are cut into chunks of PLAN_CHUNK (one thread block each). Within a chunk, expert e is owned by thread
// e % PLAN_THREADS, which walks the chunk's ids in entry order and counts (or places) only its own experts, so every
// counter has one writer and every expert's entries of a chunk are handled in entry order: no atomics, and the sort
// is stable by construction. Steps (all integer arithmetic, so the result is exact and run-to-run identical):
//   1. k_plan_count    counts[e, c] = entries of chunk c with id e (expert-major [E, chunks]); first bad id per chunk
//   2. scan            base[e, c] = exclusive prefix sum of counts in expert-major order, i.e. the sorted position of
//                      the first entry of expert e in chunk c (every earlier expert, then e's earlier chunks)
//   3. k_plan_offsets  offset[e] = base[e, 0], offset[E] = M; the first bad entry over all chunks; the non-empty
//                      experts in order (the groups of the grouped GEMM)
//   4. k_plan_scatter  perm[base[e, c] + rank] = p and inv[p] = base[e, c] + rank, rank = earlier entries of e in c
// Where cvmm sizes its GEMMs on the host (cuBLAS: the grouped call or the per-expert loop), the host copies offsets +
// the bad-entry record (E + 3 ints) into the plan's host_offset, the one synchronisation of a routing decision (the
// cvmm calls that share the plan add none), and dies there on a bad id. Where cvmm reads the device offsets (the
// tensor-core path, cuda_cvmm_mma.cu) nothing is copied: the plan is marked host_pending, a bad id goes to the
// device's error record (cuda_device_status.cu, read at the host's next wait: the loss, the gradient norm) with
// the same message, and routing_plan_to_host copies the offsets for a caller that needs them after all. A plan with
// a bad id stays safe to read until then: its bad entries get sorted position 0 (inv) and the positions past the
// placed entries entry 0 (perm). cuda_routing_plan_on_device stops before any copy: the device-side sorts of
// cuda_key_sort.cu, whose buckets are in range by construction and whose offsets no host code needs. Cost on a GPU:
// each step is one pass over the M ids per owning thread group (tens of microseconds for M = 524,288, E = 387),
// against ~2 ms of host sorting before.
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_cvmm.cuh"

constexpr int PLAN_CHUNK = CUDA_CVMM_PLAN_CHUNK; // entries per chunk (one block)
constexpr int PLAN_THREADS = 128;                // threads per block; expert e belongs to thread e % PLAN_THREADS
constexpr int PLAN_WINDOW = 2048;                // experts per pass over a chunk (their counters live in shared memory)
static_assert((PLAN_THREADS & (PLAN_THREADS - 1)) == 0, "PLAN_THREADS must be a power of two (block min tree)");
static_assert(PLAN_WINDOW % PLAN_THREADS == 0, "each thread owns the same experts in every window");

constexpr int SCAN_THREADS = 256, SCAN_ITEMS = 4, SCAN_TILE = SCAN_THREADS * SCAN_ITEMS;

// ---------------------------------------------------------------- block helpers (integers: any order is exact)
// Exclusive prefix sum over the block of one value per thread (Hillis-Steele in sh[blockDim.x]); *total = block sum.
__device__ __forceinline__ int32_t block_exclusive_scan(int32_t v, int32_t *sh, int32_t *total) {
    unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (unsigned d = 1; d < blockDim.x; d <<= 1) {
        int32_t add = t >= d ? sh[t - d] : 0;
        __syncthreads();
        sh[t] += add;
        __syncthreads();
    }
    int32_t inclusive = sh[t];
    *total = sh[blockDim.x - 1];
    __syncthreads(); // sh is reused by the caller's next call
    return inclusive - v;
}

// Minimum over the block (blockDim.x a power of two), returned to every thread.
__device__ __forceinline__ int32_t block_min(int32_t v, int32_t *sh) {
    unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = min(sh[t], sh[t + s]);
        __syncthreads();
    }
    int32_t r = sh[0];
    __syncthreads();
    return r;
}

// Copies chunk c's ids into ids[PLAN_CHUNK] and returns its length; also (if first_bad) the chunk's first entry whose
// id is outside [0, E), or M if none.
__device__ __forceinline__ int load_chunk(int32_t *ids, const int32_t *sel, int M, int E, int c, int *first_bad) {
    int begin = c * PLAN_CHUNK, len = min(PLAN_CHUNK, M - begin);
    int bad = M;
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        int32_t id = sel[begin + i];
        ids[i] = id;
        if ((id < 0 || id >= E) && bad == M) bad = begin + i; // a thread's entries ascend: its first hit is its min
    }
    if (first_bad) *first_bad = bad;
    __syncthreads();
    return len;
}

// Window-relative index of id if its expert lies in [w0, w0 + wn) and belongs to this thread, else -1. Unsigned
// arithmetic: a negative id (or one >= E) falls outside every window instead of overflowing.
__device__ __forceinline__ int owned_slot(int32_t id, int w0, int wn) {
    unsigned j = (unsigned)id - (unsigned)w0;
    return (j < (unsigned)wn && j % PLAN_THREADS == threadIdx.x) ? (int)j : -1;
}

// ---------------------------------------------------------------- costs (cuda_common.cuh)
// Counting and placing are integer work: every thread of a chunk's block walks the whole chunk once per window of
// experts, so each of the M ids is looked at PLAN_THREADS times per window (each look counted as one operation).
static inline double plan_walks(int M, int E) {
    return (double)M * PLAN_THREADS * ((E + PLAN_WINDOW - 1) / PLAN_WINDOW);
}
// The scan: n int32 in, n out (and a tile sum per tile), one addition each.
static inline KernelCost scan_cost(long n) { return streaming_cost((double)n, 1, 2 * sizeof(int32_t)); }

// ---------------------------------------------------------------- 1. per-chunk counts
// counts[e * n_chunks + c] = #{p in chunk c : sel[p] = e}; chunk_bad[c] = chunk c's first bad entry, or M.
__global__ void k_plan_count(int32_t *counts, int32_t *chunk_bad, const int32_t *sel, int M, int E, int n_chunks) {
    __shared__ int32_t ids[PLAN_CHUNK];
    __shared__ int32_t cnt[PLAN_WINDOW];
    __shared__ int32_t red[PLAN_THREADS];
    int c = blockIdx.x, bad;
    int len = load_chunk(ids, sel, M, E, c, &bad);
    bad = block_min(bad, red);
    if (threadIdx.x == 0) chunk_bad[c] = bad;
    // Each counter cnt[j] is touched by its owner thread only (j % PLAN_THREADS == threadIdx.x in all three loops).
    for (int w0 = 0; w0 < E; w0 += PLAN_WINDOW) {
        int wn = min(PLAN_WINDOW, E - w0);
        for (int j = threadIdx.x; j < wn; j += PLAN_THREADS) cnt[j] = 0;
        for (int i = 0; i < len; i++) {
            int j = owned_slot(ids[i], w0, wn);
            if (j >= 0) cnt[j]++;
        }
        for (int j = threadIdx.x; j < wn; j += PLAN_THREADS) counts[(size_t)(w0 + j) * n_chunks + c] = cnt[j];
    }
}

// ---------------------------------------------------------------- 2. exclusive scan of int32 (multi-block)
// out[i] = sum of in[j] for j in i's tile, j < i; tile_sum[b] = sum of tile b. Thread t takes SCAN_ITEMS consecutive
// elements of the tile.
__global__ void k_scan_tiles(int32_t *out, int32_t *tile_sum, const int32_t *in, long n) {
    __shared__ int32_t sh[SCAN_THREADS];
    long first = (long)blockIdx.x * SCAN_TILE + (long)threadIdx.x * SCAN_ITEMS;
    int32_t v[SCAN_ITEMS], sum = 0;
    for (int k = 0; k < SCAN_ITEMS; k++) {
        v[k] = first + k < n ? in[first + k] : 0;
        sum += v[k];
    }
    int32_t total;
    int32_t run = block_exclusive_scan(sum, sh, &total);
    for (int k = 0; k < SCAN_ITEMS; k++) {
        if (first + k < n) out[first + k] = run;
        run += v[k];
    }
    if (threadIdx.x == 0) tile_sum[blockIdx.x] = total;
}

// out[i] += tile_off[i / SCAN_TILE] for i < n; out[n] = tile_off[n_tiles] (the grand total).
__global__ void k_scan_add(int32_t *out, const int32_t *tile_off, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i <= n; i += (long)gridDim.x * blockDim.x)
        out[i] = i < n ? out[i] + tile_off[i / SCAN_TILE] : tile_off[(n + SCAN_TILE - 1) / SCAN_TILE];
}

static long scan_tiles(long n) { return (n + SCAN_TILE - 1) / SCAN_TILE; }
// int32 temporaries device_exclusive_scan needs for n elements (tile sums and their scan, level after level).
static long scan_temp_count(long n) {
    long tiles = scan_tiles(n);
    return tiles <= 1 ? 0 : 2 * tiles + 1 + scan_temp_count(tiles);
}

// out[0..n] = exclusive prefix sums of in[0..n) with out[n] = the total; tmp holds scan_temp_count(n) int32.
static void device_exclusive_scan(int32_t *out, const int32_t *in, long n, int32_t *tmp) {
    long tiles = scan_tiles(n);
    if (tiles <= 1) { // one tile: its total is out[n]
        LAUNCH(k_scan_tiles, 1, SCAN_THREADS, 0, scan_cost(n))(out, out + n, in, n);
        CHECK_LAUNCH();
        return;
    }
    int32_t *sums = tmp, *sums_scan = tmp + tiles; // [tiles], [tiles + 1]
    LAUNCH(k_scan_tiles, (unsigned)tiles, SCAN_THREADS, 0, scan_cost(n))(out, sums, in, n);
    CHECK_LAUNCH();
    device_exclusive_scan(sums_scan, sums, tiles, sums_scan + tiles + 1);
    LAUNCH(k_scan_add, grid_for((size_t)n + 1, 256), 256, 0, scan_cost(n + 1))(out, sums_scan, n);
    CHECK_LAUNCH();
}

// ---------------------------------------------------------------- 3. offsets, first bad entry, group list
// offset[0..E] = the plan's offsets; info = [the same offsets | first bad entry or -1 | its id] (what the host copies);
// group_expert[0..G) = the experts with offset[e+1] > offset[e]. With a bad entry: the first goes to the error record
// (status, if given, with code bad_id), and perm[offset[E] .. M) = 0 (positions no entry is placed at, read as 0).
__global__ void k_plan_offsets(int32_t *offset, int32_t *info, int32_t *group_expert, int32_t *perm, int32_t *status,
                               int32_t bad_id, const int32_t *base, const int32_t *chunk_bad, const int32_t *sel, int M,
                               int E, int n_chunks) {
    __shared__ int32_t sh[PLAN_THREADS];
    for (int e = threadIdx.x; e <= E; e += blockDim.x) offset[e] = info[e] = base[(size_t)e * n_chunks];
    int32_t bad = M;
    for (int c = threadIdx.x; c < n_chunks; c += blockDim.x) bad = min(bad, chunk_bad[c]);
    bad = block_min(bad, sh);
    if (threadIdx.x == 0) {
        info[E + 1] = bad < M ? bad : -1;
        info[E + 2] = bad < M ? sel[bad] : 0;
        if (bad < M && status) device_status_set(status, bad_id, sel[bad], bad, E);
    }
    if (bad < M)
        for (long m = base[(size_t)E * n_chunks] + threadIdx.x; m < M; m += blockDim.x) perm[m] = 0;
    int32_t placed = 0; // groups written by earlier tiles of experts
    for (int e0 = 0; e0 < E; e0 += blockDim.x) {
        int e = e0 + (int)threadIdx.x;
        int32_t nonempty = e < E && base[(size_t)(e + 1) * n_chunks] > base[(size_t)e * n_chunks];
        int32_t total, before = block_exclusive_scan(nonempty, sh, &total);
        if (nonempty) group_expert[placed + before] = e;
        placed += total;
    }
}

// ---------------------------------------------------------------- 4. stable scatter
// For each entry p of chunk c with id e, in entry order: pos = base[e, c] + (earlier entries of e in c);
// perm[pos] = p, inv[p] = pos. Bad ids are not placed: inv[p] = 0 (the host dies on them at its next read).
__global__ void k_plan_scatter(int32_t *perm, int32_t *inv, const int32_t *base, const int32_t *sel, int M, int E,
                               int n_chunks) {
    __shared__ int32_t ids[PLAN_CHUNK];
    __shared__ int32_t cursor[PLAN_WINDOW];
    int c = blockIdx.x, begin = c * PLAN_CHUNK;
    int len = load_chunk(ids, sel, M, E, c, nullptr);
    for (int i = threadIdx.x; i < len; i += blockDim.x)
        if ((unsigned)ids[i] >= (unsigned)E) inv[begin + i] = 0;
    for (int w0 = 0; w0 < E; w0 += PLAN_WINDOW) { // as in k_plan_count, cursor[j] has one owner thread
        int wn = min(PLAN_WINDOW, E - w0);
        for (int j = threadIdx.x; j < wn; j += PLAN_THREADS) cursor[j] = base[(size_t)(w0 + j) * n_chunks + c];
        for (int i = 0; i < len; i++) {
            int j = owned_slot(ids[i], w0, wn);
            if (j < 0) continue;
            int32_t pos = cursor[j]++;
            perm[pos] = begin + i;
            inv[begin + i] = pos;
        }
    }
}

// ---------------------------------------------------------------- host side
#ifdef CUDA_EMULATION
// The emulator's dry run (the cost model, cuda_emu_launch_log.cpp) runs no kernel, so the copied-back offsets would be
// meaningless; the host then sizes the plan's GEMMs as if routing were perfectly balanced: expert e gets the
// entries [e M / E, (e + 1) M / E), and no entry is bad.
static void dry_run_balanced_offsets(int32_t *offset, int M, int E) {
    for (int e = 0; e <= E; e++) offset[e] = (int32_t)((int64_t)M * e / E);
}
static void dry_run_balanced_info(std::vector<int32_t> &info, int M, int E) {
    dry_run_balanced_offsets(info.data(), M, E);
    info[(size_t)E + 1] = -1;
    info[(size_t)E + 2] = 0;
}
#endif
// Steps 1-4 into the plan's device arrays; returns the info record [E + 3] the host may copy (NULL when M == 0).
// bad_id: the code a bad id is recorded with in the device's error record (DEVICE_STATUS_OK: not recorded).
static const int32_t *plan_build(Backend *be, RoutingPlan *pl, const int32_t *sel, int M, int n_experts, int bad_id) {
    routing_plan_check_args(pl, M, n_experts);
    const int E = n_experts;
    cuda_weights_written(be, pl->perm, (size_t)M * sizeof(int32_t));
    cuda_weights_written(be, pl->inv, (size_t)M * sizeof(int32_t));
    cuda_weights_written(be, pl->offset, ((size_t)E + 1) * sizeof(int32_t));
    cuda_weights_written(be, pl->group_expert, (size_t)E * sizeof(int32_t));
    pl->M = M;
    pl->n_experts = E;
    pl->n_groups = 0;
    pl->host_pending = 0;
    if (M == 0) { // no device work beyond clearing the offsets
        CHECK_CUDA(cudaMemsetAsync(pl->offset, 0, ((size_t)E + 1) * sizeof(int32_t), 0));
        return nullptr;
    }

    int n_chunks = (M + PLAN_CHUNK - 1) / PLAN_CHUNK;
    long cells = (long)E * n_chunks; // counts/base are expert-major [E, n_chunks]
    // info[E + 3] = offsets[E + 1] | first bad entry | its id;
    // temporaries: counts[cells] | base[cells + 1] | chunk_bad[n_chunks] | scan temporaries
    int32_t *info = (int32_t *)cuda_scratch(be, SCRATCH_PLAN_INFO, ((size_t)E + 3) * sizeof(int32_t));
    size_t n_tmp = (size_t)2 * cells + 1 + (size_t)n_chunks + (size_t)scan_temp_count(cells);
    int32_t *b = (int32_t *)cuda_scratch(be, SCRATCH_PLAN_TEMP, n_tmp * sizeof(int32_t));
    int32_t *counts = b, *base = b + cells, *chunk_bad = base + cells + 1, *scan_tmp = chunk_bad + n_chunks;

    // count: the ids in, a count per (expert, chunk) and a first bad entry per chunk out
    LAUNCH(k_plan_count, (unsigned)n_chunks, PLAN_THREADS, 0,
           kernel_cost(plan_walks(M, E), ((double)M + cells + n_chunks) * sizeof(int32_t)))(counts, chunk_bad, sel, M,
                                                                                           E, n_chunks);
    CHECK_LAUNCH();
    device_exclusive_scan(base, counts, cells, scan_tmp);
    // offsets: two bases per expert and the chunks' bad entries in; offsets, info and the group list out
    LAUNCH(k_plan_offsets, 1, PLAN_THREADS, 0,
           kernel_cost(2.0 * E + n_chunks, (5.0 * E + n_chunks) * sizeof(int32_t)))(
        pl->offset, info, pl->group_expert, pl->perm, bad_id == DEVICE_STATUS_OK ? nullptr : cuda_device_status(be),
        bad_id, base, chunk_bad, sel, M, E, n_chunks);
    CHECK_LAUNCH();
    // scatter: the ids and a base per (expert, chunk) in, perm and inv out
    LAUNCH(k_plan_scatter, (unsigned)n_chunks, PLAN_THREADS, 0,
           kernel_cost(plan_walks(M, E), (3.0 * M + cells) * sizeof(int32_t)))(pl->perm, pl->inv, base, sel, M, E,
                                                                               n_chunks);
    CHECK_LAUNCH();
    return info;
}

// The host half of a plan whose offsets it sizes GEMMs with: offsets, n_groups, and the bad-id check (one copy).
static void plan_build_to_host(Backend *be, RoutingPlan *pl, const int32_t *sel, int M, int n_experts) {
    const int E = n_experts;
    const int32_t *info = plan_build(be, pl, sel, M, n_experts, DEVICE_STATUS_OK);
    if (!info) { // M == 0: the host knows the offsets
        memset(pl->host_offset, 0, ((size_t)E + 1) * sizeof(int32_t));
        return;
    }
    std::vector<int32_t> host((size_t)E + 3);
    CHECK_CUDA(cudaMemcpy(host.data(), info, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost)); // the sync
#ifdef CUDA_EMULATION
    if (emu::dry_run()) dry_run_balanced_info(host, M, E);
#endif
    if (host[(size_t)E + 1] >= 0)
        die("routing_plan: expert id %d at entry %d is outside [0, %d)", host[(size_t)E + 2], host[(size_t)E + 1], E);
    if (host[(size_t)E] != M) die("routing_plan: %d of %d entries placed (internal error)", host[(size_t)E], M);
    memcpy(pl->host_offset, host.data(), ((size_t)E + 1) * sizeof(int32_t));
    for (int e = 0; e < E; e++) pl->n_groups += pl->host_offset[e + 1] > pl->host_offset[e];
}

// Only the cuBLAS paths of cvmm read host offsets: on the tensor-core path nothing is copied (the plan host_pending).
void cuda_routing_plan(Backend *be, RoutingPlan *pl, const int32_t *sel, int M, int n_experts) {
    if (!cvmm_uses_mma(be, use_bf16(be))) {
        plan_build_to_host(be, pl, sel, M, n_experts);
        return;
    }
    if (plan_build(be, pl, sel, M, n_experts, DEVICE_STATUS_PLAN_BAD_ID)) pl->host_pending = 1;
    else memset(pl->host_offset, 0, ((size_t)n_experts + 1) * sizeof(int32_t)); // M == 0: the host knows them
}

void cuda_routing_plan_to_host(Backend *be, RoutingPlan *pl) {
    if (!pl->host_pending) return;
    const int E = pl->n_experts, M = pl->M;
    int32_t *host = pl->host_offset;
    CHECK_CUDA(cudaMemcpy(host, pl->offset, ((size_t)E + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost));
#ifdef CUDA_EMULATION
    if (emu::dry_run()) dry_run_balanced_offsets(host, M, E);
#endif
    if (host[E] != M) { // entries left unplaced: a bad id, in the error record unless it was read already
        cuda_device_status_check(be);
        die("routing_plan: %d of %d entries placed (internal error)", host[E], M);
    }
    pl->n_groups = 0;
    for (int e = 0; e < E; e++) pl->n_groups += host[e + 1] > host[e];
    pl->host_pending = 0;
}

void cuda_routing_plan_on_device(Backend *be, RoutingPlan *pl, const int32_t *ids, int M, int n_buckets, int bad_id) {
    plan_build(be, pl, ids, M, n_buckets, bad_id);
}
