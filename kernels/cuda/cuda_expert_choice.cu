// CUDA: expert-choice routing's selection and gate backward (formulas in kernels/backend_ops.h; the CPU version in
// kernels/cpu/cpu_expert_choice.c is the reference these mirror).
//
// The selection runs on the device, with nothing read back to the host. Every (expert e, position n) pair gets a
// 64-bit key at key[e N + n], ascending in DEScending score S[n, e] (the softmax of routing_key.h, in double, as the
// CPU's kernels/expert_choice_pick.c), masked positions after every score. Expert e's picks are its c smallest
// (key, n) pairs in that order, ties to the earlier position as on the CPU: a total order on exact integers, so
// the picks equal the CPU's wherever the device's exp gives the host's bits (on the emulator, always). Two paths:
//   N <= EC_BLOCK_SORT_MAX  one block per expert sorts its N (key, n) pairs in shared memory (a bitonic network
//                           over the total order): 2 launches per decision;
//   larger N                KeySort (cuda_key_sort.cu) sorts the N E pairs stably by the key's 8 bytes, then by
//                           expert (entry order is position order within an expert): 9 counting-sort passes of
//                           O(N E) work, each a few launches.
// Before, the logits went to the host, a qsort per expert ran there, and three copies came back.
// The gate backward is two kernels: the scatter of the entry gradients into q[N, E] (an (n, e) pair occurs at most
// once: no atomics) and the per-row softmax Jacobian.
#include <cfloat>
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/routing_key.h"

// Scores are >= +0 (exp / sum), so their bits ascend with them below 2^63: the key 2^63 - 1 - bits ascends in
// descending score and stays below EC_MASKED_KEY, the key of a masked position. A NaN score (a row with a NaN logit:
// its whole softmax is NaN, whatever the sign of the NaN) takes key 0, before every number, as torch.topk ranks NaN
// largest (and the CPU's picker); key 0 maps back to a NaN gate.
constexpr uint64_t EC_MASKED_KEY = 1ULL << 63;
__device__ __forceinline__ uint64_t ec_score_key(double s) {
    return s != s ? 0 : (EC_MASKED_KEY - 1) - (uint64_t)__double_as_longlong(s);
}
__device__ __forceinline__ double ec_key_score(uint64_t key) {
    return __longlong_as_double((long long)(EC_MASKED_KEY - 1 - key));
}
// Entry p of the selection: position n of expert e with its gate, or -1, -1, 0 where the key is a masked position's
// (c exceeds the valid positions). Both picking paths write their entries through it.
__device__ __forceinline__ void ec_write_entry(int32_t *pos, int32_t *expert, float *gate, size_t p, int32_t e,
                                               int32_t n, uint64_t key) {
    const bool masked = key == EC_MASKED_KEY;
    pos[p] = masked ? -1 : n;
    expert[p] = masked ? -1 : e;
    gate[p] = masked ? 0.0f : (float)ec_key_score(key);
}

// One thread per position n: its row's softmax stats, then the key of each entry (e, n) at key[e N + n].
__global__ void k_ec_keys(uint64_t *key, const float *logits, const uint8_t *valid, int N, int E) {
    for (long n = blockIdx.x * (long)blockDim.x + threadIdx.x; n < N; n += (long)gridDim.x * blockDim.x) {
        if (valid && !valid[n]) {
            for (int e = 0; e < E; e++) key[(size_t)e * N + n] = EC_MASKED_KEY;
            continue;
        }
        const float *l = logits + (size_t)n * E;
        double mx, sum;
        routing_softmax_stats_f(l, E, &mx, &sum);
        for (int e = 0; e < E; e++) key[(size_t)e * N + n] = ec_score_key(routing_softmax_prob((double)l[e], mx, sum));
    }
}

constexpr int EC_BLOCK_SORT_MAX = 2048;  // positions one block sorts: 24 KB of keys and positions in shared memory
constexpr int EC_BLOCK_THREADS = 1024; // its threads (each compares P / 2 / threads pairs per step)
static_assert((EC_BLOCK_SORT_MAX & (EC_BLOCK_SORT_MAX - 1)) == 0, "the bitonic network sorts a power of two");

// (key, n) after (key', n')
__device__ __forceinline__ bool ec_after(uint64_t k, int32_t n, uint64_t k2, int32_t n2) {
    return k > k2 || (k == k2 && n > n2);
}

// One block per expert e: its N pairs (key, n), padded to P (a power of two >= N) with pairs after every real one,
// sorted ascending in shared memory by the bitonic network; the first c are e's picks. A masked key among them means
// c exceeds the valid positions: as k_ec_pick below.
__global__ void k_ec_block_pick(int32_t *pos, int32_t *expert, float *gate, const uint64_t *key, int N, int P, int c) {
    __shared__ uint64_t sk[EC_BLOCK_SORT_MAX];
    __shared__ int32_t sn[EC_BLOCK_SORT_MAX];
    const int e = blockIdx.x;
    const uint64_t *ke = key + (size_t)e * N;
    for (int i = threadIdx.x; i < P; i += blockDim.x) {
        sk[i] = i < N ? ke[i] : ~0ULL; // padding: the largest key, and a position above every real one
        sn[i] = i;
    }
    __syncthreads();
    for (int size = 2; size <= P; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < P; i += blockDim.x) { // each pair (i, i ^ stride) by the thread of its lower i
                const int j = i ^ stride;
                if (j <= i) continue;
                const bool ascending = (i & size) == 0;
                if (ec_after(sk[i], sn[i], sk[j], sn[j]) == ascending) {
                    const uint64_t tk = sk[i];
                    const int32_t tn = sn[i];
                    sk[i] = sk[j], sn[i] = sn[j];
                    sk[j] = tk, sn[j] = tn;
                }
            }
            __syncthreads();
        }
    for (int j = threadIdx.x; j < c; j += blockDim.x)
        ec_write_entry(pos, expert, gate, (size_t)e * c + j, e, sn[j], sk[j]);
}

// One thread per entry p = e c + j: the j-th of expert e's sorted segment, which starts at e N. A masked position
// there means c exceeds the valid positions: the entry gets position and expert -1, which the routing_plan over
// expert[] that follows every selection rejects (the check needs no copy back here).
__global__ void k_ec_pick(int32_t *pos, int32_t *expert, float *gate, const int32_t *order, const int32_t *perm,
                          const uint64_t *key, int N, int c, long M) {
    for (long p = blockIdx.x * (long)blockDim.x + threadIdx.x; p < M; p += (long)gridDim.x * blockDim.x) {
        const long e = p / c, j = p % c;
        const int32_t i = order[perm[e * N + j]]; // = e N + n
        ec_write_entry(pos, expert, gate, (size_t)p, (int32_t)e, (int32_t)(i - e * N), key[i]);
    }
}

#ifdef CUDA_EMULATION
// The emulator's dry run (the cost model, cuda_emu_launch_log.cpp) computes nothing, so the picks would read as zeros
// (every expert taking position 0), and embedding_backward, which buckets the positions on the host, would cost one
// row of E c entries. It writes a typical pick into the (host-addressable) device memory instead, without a record:
// expert e takes positions (e c + j) mod N, so every position is taken about equally often.
static void dry_run_spread_picks(int32_t *pos, int32_t *expert, float *gate, int N, int E, int c) {
    for (long p = 0; p < (long)E * c; p++) {
        pos[p] = (int32_t)(p % N);
        expert[p] = (int32_t)(p / c);
        gate[p] = 1.0f / (float)E;
    }
}
#endif

void cuda_expert_choice_select(Backend *be, int32_t *pos, int32_t *expert, scalar_t *gate, const scalar_t *logits,
                               const uint8_t *valid, int N, int E, int c) {
    if (N < 1 || E < 1) die("expert_choice_select: N=%d E=%d must be >= 1", N, E);
    // c above the valid positions (but not above N) is found on the device, by the pick kernels
    if (c < 1 || c > N) die("expert_choice_select: capacity c=%d must be in [1, %d positions]", c, N);
    const long M = (long)E * c, entries = (long)N * E;
    if (entries > INT32_MAX) die("expert_choice_select: %ld (position, expert) pairs exceed int32 entries", entries);
    cuda_weights_written(be, pos, (size_t)M * sizeof(int32_t));
    cuda_weights_written(be, expert, (size_t)M * sizeof(int32_t));
    cuda_weights_written(be, gate, (size_t)M * sizeof(float));
    const bool in_block = N <= EC_BLOCK_SORT_MAX;
    KeySort ks;
    uint64_t *key;
    if (in_block) {
        key = (uint64_t *)cuda_scratch(be, SCRATCH_SORT_KEY, (size_t)entries * sizeof(uint64_t));
    } else {
        key_sort_begin(be, &ks, entries, E);
        key = ks.key;
    }
    // the logits and the mask in, a key per (expert, position) out; the softmax of a row once per position
    LAUNCH(k_ec_keys, grid_for((size_t)N, 128), 128, 0,
           kernel_cost(5.0 * entries, (double)entries * (sizeof(float) + sizeof(uint64_t)) + (valid ? N : 0)))(
        key, logits, valid, N, E);
    CHECK_LAUNCH();
    // per pick: its sorted position's (order, perm and) key in; pos, expert and gate out
    const double pick_bytes = (double)M * (sizeof(uint64_t) + 2 * sizeof(int32_t) + sizeof(float));
    if (in_block) {
        int P = 1;
        while (P < N) P <<= 1;
        const int threads = P < EC_BLOCK_THREADS ? P : EC_BLOCK_THREADS;
        double steps = 0; // compare-exchange steps of the network: log2(P) (log2(P) + 1) / 2
        for (int size = 2; size <= P; size <<= 1)
            for (int stride = size >> 1; stride > 0; stride >>= 1) steps++;
        // every key of the expert in; a compare-exchange per pair and step
        LAUNCH(k_ec_block_pick, (unsigned)E, (unsigned)threads, 0,
               kernel_cost((double)E * (P / 2) * steps, (double)entries * sizeof(uint64_t) + pick_bytes))(
            pos, expert, gate, key, N, P, c);
        CHECK_LAUNCH();
    } else {
        key_sort_by_bytes(be, &ks, 8);
        key_sort_by_group(be, &ks, nullptr, N, E, false); // entry i's expert is i / N
        LAUNCH(k_ec_pick, grid_for((size_t)M, 256), 256, 0, kernel_cost(0, pick_bytes + 2.0 * M * sizeof(int32_t)))(
            pos, expert, gate, ks.cur, ks.pl.perm, ks.key, N, c, M);
        CHECK_LAUNCH();
    }
#ifdef CUDA_EMULATION
    if (emu::dry_run()) dry_run_spread_picks(pos, expert, gate, N, E, c);
#endif
}

// One thread per entry p: q[pos[p], p / c] = dgate[p]. A position outside [0, N) cannot come from
// expert_choice_select; it is skipped here (the CPU reference dies on it).
__global__ void k_ec_scatter(float *q, const float *dgate, const int32_t *pos, long M, int N, int E, int c) {
    for (long p = blockIdx.x * (long)blockDim.x + threadIdx.x; p < M; p += (long)gridDim.x * blockDim.x) {
        const int32_t n = pos[p];
        if (n < 0 || n >= N) continue;
        q[(size_t)n * E + p / c] = dgate[p];
    }
}

// One thread per row n: dl[n, e] += S_e (q_e - sum_i q_i S_i), in double as the CPU.
__global__ void k_ec_softmax_bwd(float *dlogits, const float *q, const float *logits, int N, int E) {
    for (long n = blockIdx.x * (long)blockDim.x + threadIdx.x; n < N; n += (long)gridDim.x * blockDim.x) {
        const float *l = logits + (size_t)n * E, *qr = q + (size_t)n * E;
        double mx = -DBL_MAX, sum = 0, qs = 0;
        for (int e = 0; e < E; e++) mx = (double)l[e] > mx ? (double)l[e] : mx;
        for (int e = 0; e < E; e++) sum += exp((double)l[e] - mx);
        for (int e = 0; e < E; e++) qs += (double)qr[e] * (exp((double)l[e] - mx) / sum);
        for (int e = 0; e < E; e++) {
            const double s = exp((double)l[e] - mx) / sum;
            dlogits[(size_t)n * E + e] += (float)(s * ((double)qr[e] - qs));
        }
    }
}

void cuda_expert_choice_gates_backward(Backend *be, scalar_t *dlogits, scalar_t *dscore, const scalar_t *dgate,
                                       const int32_t *pos, const scalar_t *logits, int N, int E, int c) {
    if (N <= 0 || E <= 0) return;
    cuda_weights_written(be, dscore, (size_t)N * E * sizeof(float));
    cuda_weights_written(be, dlogits, (size_t)N * E * sizeof(float));
    CHECK_CUDA(cudaMemset(dscore, 0, (size_t)N * E * sizeof(float)));
    const long M = (long)E * c;
    if (M > 0) {
        LAUNCH(k_ec_scatter, grid_for((size_t)M, 128), 128, 0,
               streaming_cost(M, 0, 2 * sizeof(float) + sizeof(int32_t)))(dscore, dgate, pos, M, N, E, c);
        CHECK_LAUNCH();
    }
    // logits and q in, dlogits read and written; the softmax three times over (about 10 operations per element)
    LAUNCH(k_ec_softmax_bwd, grid_for((size_t)N, 128), 128, 0, streaming_cost((double)N * E, 10, 4 * sizeof(float)))(
        dlogits, dscore, logits, N, E);
    CHECK_LAUNCH();
}
