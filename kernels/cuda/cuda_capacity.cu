// CUDA: expert capacity (capacity_drop) and mask_zero (contracts in kernels/backend_ops.h; the CPU reference in
// kernels/cpu/cpu_capacity.c walks the assignments in order instead).
//
// capacity_drop ranks each expert's assignments in the admission order by stable sorts, so the whole decision is
// O(M) passes for M = N k assignments (before, every assignment compared itself with all others: O(M^2), seconds per
// step at the paper's size). The sorts are the routing plan's stable counting sort (cuda_cvmm_plan.cu) used as a
// radix pass: a plan over small integer keys is a stable sort by them. Starting from the assignments in entry order
// p = n k + j:
//   CAPACITY_POSITION  one pass by the slot j: then (j, n) ascending, the admission order;
//   CAPACITY_SCORE     four passes by the bytes of the gate's descending key, least significant first: then gate
//                      descending, ties in entry order (the lower position: an expert holds a token in one slot);
// then one pass by the expert: expert e's assignments sit at sorted positions [offset[e], offset[e+1]) in admission
// order, so an assignment's rank is its sorted position minus offset[e], and it is kept iff that is below cap. All
// integer work: the decision equals the CPU reference's exactly, and repeats bit for bit. Each pass reads its
// offsets back to the host (the plan's one sync): 2 syncs per decision by position, 5 by score.
#include <vector>

#include "kernels/cuda/cuda_common.cuh" // the ops, routing_plan among them (cuda_routing_plan)

// The gate's key, ascending in gate DEScending order (the float's bits made order-preserving, then inverted);
// -0 is taken as +0, so that equal gates compare equal as they do on the CPU.
__device__ __forceinline__ uint32_t capacity_gate_key(float g) {
    uint32_t u = __float_as_uint(g == 0.0f ? 0.0f : g);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); // ascending in g
    return ~u;
}

// The assignments in entry order, and their pass-1 keys: the slot j (position order) or the gate's key (score order).
__global__ void k_capacity_start(int32_t *order, uint32_t *key, const float *gate, long M, int k, int score) {
    for (long p = blockIdx.x * (long)blockDim.x + threadIdx.x; p < M; p += (long)gridDim.x * blockDim.x) {
        order[p] = (int32_t)p;
        key[p] = score ? capacity_gate_key(gate[p]) : (uint32_t)(p % k);
    }
}

// ids[m] = the pass's bucket of the assignment at position m of the current order: byte `byte` of its key, its key
// (byte < 0), or its expert (by_expert).
__global__ void k_capacity_ids(int32_t *ids, const int32_t *order, const uint32_t *key, const int32_t *sel, long M,
                               int byte, int by_expert) {
    for (long m = blockIdx.x * (long)blockDim.x + threadIdx.x; m < M; m += (long)gridDim.x * blockDim.x) {
        const int32_t p = order[m];
        ids[m] = by_expert ? sel[p] : byte < 0 ? (int32_t)key[p] : (int32_t)((key[p] >> (8 * byte)) & 0xffu);
    }
}

// next[m] = cur[perm[m]]: the order after a stable pass.
__global__ void k_capacity_permute(int32_t *next, const int32_t *cur, const int32_t *perm, long M) {
    for (long m = blockIdx.x * (long)blockDim.x + threadIdx.x; m < M; m += (long)gridDim.x * blockDim.x)
        next[m] = cur[perm[m]];
}

// The last pass (by expert) done: sorted position m holds assignment order[perm[m]] of expert e; its rank is
// m - offset[e]. One thread per sorted position: it finds e by the expert id and marks the drop.
__global__ void k_capacity_mark(uint8_t *dropped, const int32_t *order, const int32_t *perm, const int32_t *offset,
                                const int32_t *sel, long M, int cap) {
    for (long m = blockIdx.x * (long)blockDim.x + threadIdx.x; m < M; m += (long)gridDim.x * blockDim.x) {
        const int32_t p = order[perm[m]];
        dropped[p] = m - offset[sel[p]] >= cap;
    }
}

// Apply the decision: dropped gates to 0; count the kept (per expert) and the dropped assignments of valid positions.
__global__ void k_capacity_apply(float *gate, unsigned long long *counts, unsigned long long *n_dropped,
                                 const uint8_t *dropped, const int32_t *sel, const uint8_t *valid, long M, int E,
                                 int k) {
    for (long p = blockIdx.x * (long)blockDim.x + threadIdx.x; p < M; p += (long)gridDim.x * blockDim.x) {
        if (dropped[p]) gate[p] = 0.0f;
        if (valid && !valid[p / k]) continue;
        if (dropped[p]) {
            if (n_dropped) atomicAdd(n_dropped, 1ULL);
        } else if (counts && sel[p] >= 0 && sel[p] < E) { // ids outside [0, E) cannot come from topk_select
            atomicAdd(&counts[sel[p]], 1ULL);
        }
    }
}

// One stable pass by a bucket of each assignment in the current order cur (k_capacity_ids' byte / by_expert, values
// < n_buckets): its ids, then a routing plan over them in the plan memory of `pl`.
static void capacity_plan(Backend *be, RoutingPlan *pl, int32_t *ids, const int32_t *cur, const uint32_t *key,
                          const int32_t *sel, long M, int byte, int by_expert, int n_buckets) {
    // the order and its keys (or experts) in, the pass ids out
    LAUNCH(k_capacity_ids, grid_for((size_t)M, 256), 256, 0, kernel_cost(0, 3.0 * M * sizeof(int32_t)))(
        ids, cur, key, sel, M, byte, by_expert);
    CHECK_LAUNCH();
    cuda_routing_plan(be, pl, ids, (int)M, n_buckets);
}

// A key pass: capacity_plan, then cur reordered into next (the two order buffers swap).
static void capacity_key_pass(Backend *be, RoutingPlan *pl, int32_t *ids, int32_t **cur, int32_t **next,
                              const uint32_t *key, const int32_t *sel, long M, int byte, int n_buckets) {
    capacity_plan(be, pl, ids, *cur, key, sel, M, byte, 0, n_buckets);
    // the order and perm in, the next order out
    LAUNCH(k_capacity_permute, grid_for((size_t)M, 256), 256, 0, kernel_cost(0, 3.0 * M * sizeof(int32_t)))(
        *next, *cur, pl->perm, M);
    CHECK_LAUNCH();
    int32_t *t = *cur;
    *cur = *next;
    *next = t;
}

void cuda_capacity_drop(Backend *be, uint8_t *dropped, scalar_t *gate, int64_t *counts, int64_t *n_dropped,
                        const int32_t *sel, const uint8_t *valid, int N, int E, int k, int cap, CapacityOrder order) {
    if (N < 0 || E < 1 || k < 1 || k > E) die("capacity_drop: bad shape N=%d E=%d k=%d", N, E, k);
    if (cap < 1) die("capacity_drop: capacity %d must be >= 1", cap);
    if (order != CAPACITY_POSITION && order != CAPACITY_SCORE) die("capacity_drop: unknown order %d", (int)order);
    const long M = (long)N * k;
    if (M == 0) return;
    if (M > INT32_MAX) die("capacity_drop: %ld assignments exceed the routing plan's int32 entries", M);
    cuda_weights_written(be, gate, (size_t)M * sizeof(float));
    cuda_weights_written(be, dropped, (size_t)M);
    if (counts) cuda_weights_written(be, counts, (size_t)E * sizeof(int64_t));
    if (n_dropped) cuda_weights_written(be, n_dropped, sizeof(int64_t));
    const int score = order == CAPACITY_SCORE;
    const int max_buckets = E > 256 ? E : 256;
    // Scratch (cuda_common.cuh, SCRATCH_CAP_*): the pass plan's perm | inv, its offset | group list, two order
    // buffers, the keys and the pass ids.
    RoutingPlan pl = {};
    pl.max_entries = (int)M;
    pl.max_experts = max_buckets;
    int32_t *pi = (int32_t *)cuda_scratch(be, SCRATCH_CAP_PLAN_PERM_INV, (size_t)2 * M * sizeof(int32_t));
    pl.perm = pi, pl.inv = pi + M;
    int32_t *og = (int32_t *)cuda_scratch(be, SCRATCH_CAP_PLAN_OFFSETS, (2 * (size_t)max_buckets + 1) * sizeof(int32_t));
    pl.offset = og, pl.group_expert = og + max_buckets + 1;
    std::vector<int32_t> host_offset((size_t)max_buckets + 1);
    pl.host_offset = host_offset.data();
    int32_t *cur = (int32_t *)cuda_scratch(be, SCRATCH_CAP_ORDER, (size_t)M * sizeof(int32_t));
    int32_t *next = (int32_t *)cuda_scratch(be, SCRATCH_CAP_ORDER_NEXT, (size_t)M * sizeof(int32_t));
    uint32_t *key = (uint32_t *)cuda_scratch(be, SCRATCH_CAP_KEY, (size_t)M * sizeof(uint32_t));
    int32_t *ids = (int32_t *)cuda_scratch(be, SCRATCH_CAP_IDS, (size_t)M * sizeof(int32_t));

    // the gates in (score order), the entry order and the keys out
    LAUNCH(k_capacity_start, grid_for((size_t)M, 256), 256, 0,
           kernel_cost(0, (double)M * ((score ? sizeof(float) : 0) + 2 * sizeof(int32_t))))(cur, key, gate, M, k,
                                                                                             score);
    CHECK_LAUNCH();
    // the key passes (position: the whole key, the slot; score: its four bytes, least significant first), then the
    // pass by expert, whose plan gives the ranks
    if (score)
        for (int byte = 0; byte < 4; byte++) capacity_key_pass(be, &pl, ids, &cur, &next, key, sel, M, byte, 256);
    else
        capacity_key_pass(be, &pl, ids, &cur, &next, key, sel, M, -1, k);
    capacity_plan(be, &pl, ids, cur, key, sel, M, -1, 1, E);
    // the final order, perm, offsets and experts in, a byte per assignment out
    LAUNCH(k_capacity_mark, grid_for((size_t)M, 256), 256, 0, kernel_cost(0, (double)M * (4 * sizeof(int32_t) + 1)))(
        dropped, cur, pl.perm, pl.offset, sel, M, cap);
    CHECK_LAUNCH();
    static_assert(sizeof(unsigned long long) == sizeof(int64_t), "int64 counts as CUDA's 64-bit atomics");
    // the decision, the ids and the gates in, the gates out, an 8-byte counter updated per assignment
    LAUNCH(k_capacity_apply, grid_for((size_t)M, 128), 128, 0,
           kernel_cost((double)M, (double)M * (1 + sizeof(int32_t) + 2 * sizeof(float) + 2 * sizeof(int64_t))))(
        gate, (unsigned long long *)counts, (unsigned long long *)n_dropped, dropped, sel, valid, M, E, k);
    CHECK_LAUNCH();
}

__global__ void k_mask_zero(float *x, const uint8_t *mask, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (mask[i]) x[i] = 0.0f;
}

void cuda_mask_zero(Backend *be, scalar_t *x, const uint8_t *mask, size_t n) {
    cuda_weights_written(be, x, n * sizeof(float));
    if (!n) return;
    LAUNCH(k_mask_zero, grid_for(n, 256), 256, 0, streaming_cost(n, 0, 1 + sizeof(float)))(x, mask, n);
    CHECK_LAUNCH();
}
