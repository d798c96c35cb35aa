// CUDA: stable sorts of routing entries on the device (KeySort, declared in cuda_common.cuh), for capacity_drop
// (cuda_capacity.cu), expert_choice_select (cuda_expert_choice.cu) and embedding_backward (cuda_dense.cu).
//
// A routing plan over small integer ids is a stable sort by them (cuda_cvmm_plan.cu's counting sort: per-chunk
// counts, a scan, a stable scatter), so a chain of plans is an LSD radix sort: one pass per byte of the key, least
// significant first, each pass stable, then a pass by the group (the expert) whose plan gives every group's segment.
// Each pass is O(M + buckets x chunks); the passes read nothing back to the host (cuda_routing_plan_on_device), so
// a whole sort queues without a synchronisation unless its last pass is asked to check the groups.
#include "kernels/cuda/cuda_common.cuh"

// cur[m] = m: the entries in entry order.
__global__ void k_sort_identity(int32_t *cur, long M) {
    for (long m = blockIdx.x * (long)blockDim.x + threadIdx.x; m < M; m += (long)gridDim.x * blockDim.x)
        cur[m] = (int32_t)m;
}

// ids[m] = the pass's bucket of the entry p = order[m]: byte `byte` of key[p], key[p] itself (byte < 0), or its group
// (by_group: group[p], or p / per_group without a group array).
__global__ void k_sort_ids(int32_t *ids, const int32_t *order, const uint64_t *key, const int32_t *group,
                           int per_group, long M, int byte, int by_group) {
    for (long m = blockIdx.x * (long)blockDim.x + threadIdx.x; m < M; m += (long)gridDim.x * blockDim.x) {
        const int32_t p = order[m];
        ids[m] = by_group ? (group ? group[p] : p / per_group)
                 : byte < 0 ? (int32_t)key[p]
                            : (int32_t)((key[p] >> (8 * byte)) & 0xffu);
    }
}

// next[m] = cur[perm[m]]: the order after a stable pass.
__global__ void k_sort_permute(int32_t *next, const int32_t *cur, const int32_t *perm, long M) {
    for (long m = blockIdx.x * (long)blockDim.x + threadIdx.x; m < M; m += (long)gridDim.x * blockDim.x)
        next[m] = cur[perm[m]];
}

void key_sort_begin(Backend *be, KeySort *ks, long M, int max_buckets) {
    if (M < 1 || M > INT32_MAX) die("key sort: %ld entries outside the routing plan's [1, INT32_MAX]", M);
    const int buckets = max_buckets > 256 ? max_buckets : 256;
    ks->M = M;
    ks->pl = RoutingPlan{};
    ks->pl.max_entries = (int)M;
    ks->pl.max_experts = buckets;
    int32_t *pi = (int32_t *)cuda_scratch(be, SCRATCH_SORT_PLAN_PERM_INV, (size_t)2 * M * sizeof(int32_t));
    ks->pl.perm = pi, ks->pl.inv = pi + M;
    int32_t *og = (int32_t *)cuda_scratch(be, SCRATCH_SORT_PLAN_OFFSETS, (2 * (size_t)buckets + 1) * sizeof(int32_t));
    ks->pl.offset = og, ks->pl.group_expert = og + buckets + 1;
    ks->host_offset.assign((size_t)buckets + 1, 0);
    ks->pl.host_offset = ks->host_offset.data();
    ks->cur = (int32_t *)cuda_scratch(be, SCRATCH_SORT_ORDER, (size_t)M * sizeof(int32_t));
    ks->next = (int32_t *)cuda_scratch(be, SCRATCH_SORT_ORDER_NEXT, (size_t)M * sizeof(int32_t));
    ks->key = (uint64_t *)cuda_scratch(be, SCRATCH_SORT_KEY, (size_t)M * sizeof(uint64_t));
    ks->ids = (int32_t *)cuda_scratch(be, SCRATCH_SORT_IDS, (size_t)M * sizeof(int32_t));
    // nothing in, the order out
    LAUNCH(k_sort_identity, grid_for((size_t)M, 256), 256, 0, kernel_cost(0, (double)M * sizeof(int32_t)))(ks->cur,
                                                                                                           M);
    CHECK_LAUNCH();
}

// The pass ids of the current order (byte / whole key / group as k_sort_ids), then a plan over them.
static void sort_plan(Backend *be, KeySort *ks, int byte, const int32_t *group, int per_group, int n_buckets,
                      bool checked) {
    const long M = ks->M;
    const int by_group = group || per_group > 0;
    // the order and its keys (or groups) in, the pass ids out
    LAUNCH(k_sort_ids, grid_for((size_t)M, 256), 256, 0,
           kernel_cost(0, (double)M * (2 * sizeof(int32_t) + (by_group ? (group ? sizeof(int32_t) : 0)
                                                                       : sizeof(uint64_t)))))(
        ks->ids, ks->cur, ks->key, group, per_group, M, byte, by_group);
    CHECK_LAUNCH();
    cuda_routing_plan_on_device(be, &ks->pl, ks->ids, (int)M, n_buckets,
                                checked ? DEVICE_STATUS_CAPACITY_BAD_ID : DEVICE_STATUS_OK);
}

// A key pass: sort_plan, then cur reordered into next (the two order buffers swap).
static void key_pass(Backend *be, KeySort *ks, int byte, int n_buckets) {
    sort_plan(be, ks, byte, nullptr, 0, n_buckets, false);
    const long M = ks->M;
    // the order and perm in, the next order out
    LAUNCH(k_sort_permute, grid_for((size_t)M, 256), 256, 0, kernel_cost(0, 3.0 * M * sizeof(int32_t)))(
        ks->next, ks->cur, ks->pl.perm, M);
    CHECK_LAUNCH();
    int32_t *t = ks->cur;
    ks->cur = ks->next;
    ks->next = t;
}

void key_sort_by_bytes(Backend *be, KeySort *ks, int n_bytes) {
    if (n_bytes < 1 || n_bytes > 8) die("key sort: %d key bytes outside [1, 8]", n_bytes);
    for (int byte = 0; byte < n_bytes; byte++) key_pass(be, ks, byte, 256);
}

void key_sort_by_key(Backend *be, KeySort *ks, int n_buckets) {
    if (n_buckets < 1 || n_buckets > ks->pl.max_experts)
        die("key sort: %d buckets outside [1, %d]", n_buckets, ks->pl.max_experts);
    key_pass(be, ks, -1, n_buckets);
}

void key_sort_by_group(Backend *be, KeySort *ks, const int32_t *group, int per_group, int n_groups, bool checked) {
    if (n_groups < 1 || n_groups > ks->pl.max_experts)
        die("key sort: %d groups outside [1, %d]", n_groups, ks->pl.max_experts);
    if (!group && per_group < 1) die("key sort: groups of %d entries", per_group);
    sort_plan(be, ks, -1, group, group ? 0 : per_group, n_groups, checked);
}
