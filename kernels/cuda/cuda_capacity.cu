// CUDA: expert capacity (capacity_drop) and mask_zero (contracts in kernels/backend_ops.h; the CPU reference in
// kernels/cpu/cpu_capacity.c walks the assignments in order instead).
//
// capacity_drop ranks each expert's assignments in the admission order by stable sorts, so the whole decision is
// O(M) passes for M = N k assignments (before, every assignment compared itself with all others: O(M^2), seconds per
// step at the paper's size). The sorts are KeySort's radix passes over the routing plan's stable counting sort
// (cuda_key_sort.cu). Starting from the assignments in entry order p = n k + j:
//   CAPACITY_POSITION  one pass by the slot j: then (j, n) ascending, the admission order;
//   CAPACITY_SCORE     four passes by the bytes of the gate's descending key, least significant first: then gate
//                      descending, ties in entry order (the lower position: an expert holds a token in one slot);
// then one pass by the expert: expert e's assignments sit at sorted positions [offset[e], offset[e+1]) in admission
// order, so an assignment's rank is its sorted position minus offset[e], and it is kept iff that is below cap. All
// integer work: the decision equals the CPU reference's exactly, and repeats bit for bit. No pass reads anything back
// (no host synchronisation; before: one per pass, then one per decision): an expert id outside [0, E), which the CPU
// reference dies on, goes from the pass by expert to the device's error record (cuda_device_status.cu) and stops the
// run with the CPU's message at the host's next wait; until then the decision is garbage but every read in bounds.
#include "kernels/cuda/cuda_common.cuh" // the ops, routing_plan among them (cuda_routing_plan)

// The gate's key, ascending in gate DEScending order (the float's bits made order-preserving, then inverted);
// -0 is taken as +0, so that equal gates compare equal as they do on the CPU.
__device__ __forceinline__ uint32_t capacity_gate_key(float g) {
    uint32_t u = __float_as_uint(g == 0.0f ? 0.0f : g);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); // ascending in g
    return ~u;
}

// Each assignment's key for the first passes: the slot j (position order) or the gate's key (score order).
__global__ void k_capacity_keys(uint64_t *key, const float *gate, long M, int k, int score) {
    for (long p = blockIdx.x * (long)blockDim.x + threadIdx.x; p < M; p += (long)gridDim.x * blockDim.x)
        key[p] = score ? capacity_gate_key(gate[p]) : (uint64_t)(p % k);
}

// The last pass (by expert) done: sorted position m holds assignment order[perm[m]] of expert e; its rank is
// m - offset[e]. One thread per sorted position: it finds e by the expert id and marks the drop. Positions past
// offset[E] hold no assignment (only with an expert id outside [0, E), whose assignments are not placed).
__global__ void k_capacity_mark(uint8_t *dropped, const int32_t *order, const int32_t *perm, const int32_t *offset,
                                const int32_t *sel, long M, int E, int cap) {
    for (long m = blockIdx.x * (long)blockDim.x + threadIdx.x; m < M; m += (long)gridDim.x * blockDim.x) {
        if (m >= offset[E]) continue;
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
    KeySort ks;
    key_sort_begin(be, &ks, M, E);
    // the gates in (score order), a key per assignment out
    LAUNCH(k_capacity_keys, grid_for((size_t)M, 256), 256, 0,
           kernel_cost(0, (double)M * ((score ? sizeof(float) : 0) + sizeof(uint64_t))))(ks.key, gate, M, k, score);
    CHECK_LAUNCH();
    // the key passes (position: the slot, one pass; score: the key's four bytes), then the checked pass by expert,
    // whose plan gives the ranks (a bad expert id recorded on the device)
    if (score)
        key_sort_by_bytes(be, &ks, 4);
    else
        key_sort_by_key(be, &ks, k);
    key_sort_by_group(be, &ks, sel, 0, E, true);
    // the final order, perm, offsets and experts in, a byte per assignment out
    LAUNCH(k_capacity_mark, grid_for((size_t)M, 256), 256, 0, kernel_cost(0, (double)M * (4 * sizeof(int32_t) + 1)))(
        dropped, ks.cur, ks.pl.perm, ks.pl.offset, sel, M, E, cap);
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
