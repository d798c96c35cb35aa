// CUDA: cross-entropy, argmax, AdamW and the deterministic reductions behind gradient clipping.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/cuda/cuda_common.cuh"

#define SUMSQ_CHUNK 65536 // same chunking as the CPU backend

// ---------------------------------------------------------------- fixed-order sum of doubles
// *out = the sum (add: *out += the sum): in stream order after the kernels before, so an accumulation over calls is
// in call order, deterministic without atomics.
__global__ void k_sum_doubles(double *out, const double *x, size_t n, int add) {
    __shared__ double sh[256];
    double acc = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    double s = block_sum_d(acc, sh);
    if (threadIdx.x == 0) *out = add ? *out + s : s;
}

void cuda_sum_doubles_to(Backend *be, double *out, const double *x, size_t n, bool add) {
    (void)be;
    LAUNCH(k_sum_doubles, 1, 256, 0, kernel_cost((double)n, ((double)n + 1 + add) * sizeof(double)))(out, x, n, add);
    CHECK_LAUNCH();
}

double cuda_readback_value(Backend *be, double dry_value) {
    DeviceReadback rb;
    CHECK_CUDA(cudaMemcpy(&rb, cuda_readback(be), sizeof rb, cudaMemcpyDeviceToHost));
    cuda_host_waited(be);
#ifdef CUDA_EMULATION
    if (emu::dry_run()) rb.value = dry_value, rb.status[0] = DEVICE_STATUS_OK; // nothing ran (cuda_emu_launch_log.cpp)
#else
    (void)dry_value;
#endif
    cuda_device_status_die(be, rb.status);
    return rb.value;
}

// The sum comes back in one copy with the device's error record (cuda_device_status.cu), which is checked: the one
// wait serves both.
double cuda_sum_doubles(Backend *be, const double *x, size_t n) {
    if (n == 0) return 0.0;
    cuda_sum_doubles_to(be, &cuda_readback(be)->value, x, n, false);
    // The emulator's dry run (cuda_emu_launch_log.cpp) sums nothing: every term reads back as 1, so the loss is 1 per
    // row and the gradient norm exceeds any clip (clipping active, as in most steps at the paper's clip of 0.25).
    return cuda_readback_value(be, (double)n);
}

// read_values (kernels/backend.h): the values into the readback block beside the error record, then one copy.
__global__ void k_copy_doubles(double *dst, const double *src, int n) {
    if ((int)threadIdx.x < n) dst[threadIdx.x] = src[threadIdx.x];
}
void cuda_read_values(Backend *be, double *dst_host, const double *src, size_t n) {
    if (n > BACKEND_READ_VALUES_MAX) die("read_values: %zu values, at most %d", n, BACKEND_READ_VALUES_MAX);
    DeviceReadback *d_rb = cuda_readback(be);
    if (n) {
        LAUNCH(k_copy_doubles, 1, 32, 0, kernel_cost(0, 2.0 * n * sizeof(double)))(d_rb->values, src, (int)n);
        CHECK_LAUNCH();
    }
    DeviceReadback rb;
    CHECK_CUDA(cudaMemcpy(&rb, d_rb, sizeof rb, cudaMemcpyDeviceToHost));
    cuda_host_waited(be);
#ifdef CUDA_EMULATION
    if (emu::dry_run()) rb.status[0] = DEVICE_STATUS_OK; // nothing ran: the values read as 0 (cuda_emu_launch_log.cpp)
#endif
    cuda_device_status_die(be, rb.status);
    memcpy(dst_host, rb.values, n * sizeof(double));
}

// ---------------------------------------------------------------- cross-entropy
// One warp per row. A target outside [-1, V) goes to the device's error record (read with the loss: right after it in
// cross_entropy, at the step's read_values after cross_entropy_add).
__global__ void k_ce(float *dlogits, float *losses, double *row_loss, int32_t *status, const float *logits,
                     const int32_t *targets, int N, int V, float grad_scale) {
    long n = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (n >= N) return;
    const float *l = logits + (size_t)n * V;
    int t = targets[n];
    if (t < -1 || t >= V) {
        if (lane == 0) device_status_set(status, DEVICE_STATUS_XENT_BAD_TARGET, V, 0, 0);
        t = -1;
    }
    float mx = -FLT_MAX;
    for (int v = lane; v < V; v += 32) mx = fmaxf(mx, l[v]);
    mx = warp_max(mx);
    double s = 0;
    for (int v = lane; v < V; v += 32) s += expf(l[v] - mx);
    s = warp_sum_d(s);
    float lt = t >= 0 ? l[t] : 0.0f;
    __syncwarp(); // every lane has read the logits it needs before dlogits (which may alias them) is written
    double loss = t >= 0 ? (double)mx + log(s) - (double)lt : 0.0;
    if (lane == 0) {
        row_loss[n] = loss;
        if (losses) losses[n] = (float)loss;
    }
    if (dlogits) {
        float *dl = dlogits + (size_t)n * V;
        float coef = (float)((double)grad_scale / s);
        for (int v = lane; v < V; v += 32) {
            float val = t >= 0 ? coef * expf(l[v] - mx) : 0.0f;
            if (v == t) val -= grad_scale;
            dl[v] = val;
        }
    }
}

// The logits in (max, exp-sum; the gradient's exp again), dlogits out; per row the target in, the losses out.
static inline KernelCost ce_cost(int N, int V, bool grad, bool losses) {
    double cells = (double)N * V;
    return kernel_cost(cells * (grad ? 7 : 4), cells * (grad ? 2 : 1) * sizeof(float) +
                                                   (double)N * (sizeof(int32_t) + sizeof(double) +
                                                                (losses ? sizeof(float) : 0)));
}

// The rows' losses (k_ce) in scratch, summed by the caller; nullptr when there are no rows.
static const double *ce_rows(Backend *be, scalar_t *dlogits, scalar_t *losses, const scalar_t *logits,
                             const int32_t *targets, int N, int V, scalar_t grad_scale) {
    cuda_weights_written(be, dlogits, (size_t)N * V * sizeof(float));
    cuda_weights_written(be, losses, (size_t)N * sizeof(float));
    if (N <= 0) return nullptr;
    double *row_loss = (double *)cuda_scratch(be, SCRATCH_XENT_ROW_LOSS, (size_t)N * sizeof(double));
    LAUNCH(k_ce, (unsigned)((N + 7) / 8), 256, 0, ce_cost(N, V, dlogits != nullptr, losses != nullptr))(
        dlogits, losses, row_loss, cuda_device_status(be), logits, targets, N, V, grad_scale);
    CHECK_LAUNCH();
    return row_loss;
}

double cuda_cross_entropy(Backend *be, scalar_t *dlogits, scalar_t *losses, const scalar_t *logits,
                          const int32_t *targets, int N, int V, scalar_t grad_scale) {
    const double *row_loss = ce_rows(be, dlogits, losses, logits, targets, N, V, grad_scale);
    if (!row_loss) return 0.0;
    return cuda_sum_doubles(be, row_loss, (size_t)N); // dies on a bad target (the error record comes with the sum)
}

void cuda_cross_entropy_add(Backend *be, double *sum, scalar_t *dlogits, scalar_t *losses, const scalar_t *logits,
                            const int32_t *targets, int N, int V, scalar_t grad_scale) {
    const double *row_loss = ce_rows(be, dlogits, losses, logits, targets, N, V, grad_scale);
    if (row_loss) cuda_sum_doubles_to(be, sum, row_loss, (size_t)N, true); // a bad target waits in the error record
}

// ---------------------------------------------------------------- argmax (ties: lowest index)
__global__ void k_argmax(int32_t *out, const float *x, int N, int V) {
    long n = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (n >= N) return;
    const float *r = x + (size_t)n * V;
    float best = -INFINITY;
    int idx = V; // sentinel larger than every index
    for (int v = lane; v < V; v += 32)
        if (r[v] > best || idx == V) best = r[v], idx = v;
    for (int o = 16; o > 0; o >>= 1) {
        float ob = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oi < V && (idx == V || ob > best || (ob == best && oi < idx))) best = ob, idx = oi;
    }
    if (lane == 0) out[n] = idx < V ? idx : 0;
}

void cuda_argmax_rows(Backend *be, int32_t *argmax, const scalar_t *x, int N, int V) {
    cuda_weights_written(be, argmax, (size_t)N * sizeof(int32_t));
    if (N <= 0) return;
    LAUNCH(k_argmax, (unsigned)((N + 7) / 8), 256, 0,
           kernel_cost((double)N * V, (double)N * V * sizeof(float) + (double)N * sizeof(int32_t)))(argmax, x, N, V);
    CHECK_LAUNCH();
}

// ---------------------------------------------------------------- AdamW (same formula and operation order as the CPU)
__global__ void k_adamw(float *p, __nv_bfloat16 *p16, const float *g, float *m, float *v, size_t n, float grad_scale,
                        float decay, float b1, float b2, float one_m_b1, float one_m_b2, float step_size,
                        float bc2_sqrt, float eps) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] * grad_scale;
        float pi = p[i] * decay;
        float mi = b1 * m[i] + one_m_b1 * gi;
        float vi = b2 * v[i] + one_m_b2 * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        const float pn = pi - step_size * (mi / denom);
        p[i] = pn;
        if (p16) p16[i] = __float2bfloat16_rn(pn); // the weights' bf16 copy (cuda_weights_bf16_produce)
        m[i] = mi;
        v[i] = vi;
    }
}

void cuda_adamw_step(Backend *be, scalar_t *p, const scalar_t *g, scalar_t *m, scalar_t *v, size_t n, double lr,
                     double beta1, double beta2, double eps, double wd, long t, scalar_t grad_scale) {
    for (float *x : {p, m, v}) cuda_weights_written(be, x, n * sizeof(float));
    if (t < 1) die("adamw_step: step t=%ld must be >= 1", t);
    if (!n) return;
    __nv_bfloat16 *p16 = cuda_weights_bf16_produce(be, p, n);
    // p, g, m, v in; p, m, v out (and p's bf16 copy); about 12 operations each (a square root and a division)
    LAUNCH(k_adamw, grid_for(n, 256), 256, 0,
           streaming_cost(n, p16 ? 13 : 12, 7 * sizeof(float) + (p16 ? sizeof(__nv_bfloat16) : 0)))(
        p, p16, g, m, v, n, grad_scale, (float)(1.0 - lr * wd), (float)beta1, (float)beta2, (float)(1.0 - beta1),
        (float)(1.0 - beta2), (float)(lr / (1.0 - pow(beta1, (double)t))), (float)sqrt(1.0 - pow(beta2, (double)t)),
        (float)eps);
    CHECK_LAUNCH();
}

// ---------------------------------------------------------------- sum of squares, all_finite
__global__ void k_sumsq_chunks(double *partial, const float *x, size_t n) {
    __shared__ double sh[256];
    size_t i0 = (size_t)blockIdx.x * SUMSQ_CHUNK, i1 = i0 + SUMSQ_CHUNK < n ? i0 + SUMSQ_CHUNK : n;
    double acc = 0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) acc += (double)x[i] * (double)x[i];
    double s = block_sum_d(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

double cuda_sum_squares(Backend *be, const scalar_t *x, size_t n) {
    if (n == 0) return 0.0;
    size_t chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double *partial = (double *)cuda_scratch(be, SCRATCH_SUMSQ_PARTIAL, chunks * sizeof(double));
    LAUNCH(k_sumsq_chunks, (unsigned)chunks, 256, 0,
           kernel_cost(2.0 * n, (double)n * sizeof(float) + (double)chunks * sizeof(double)))(partial, x, n);
    CHECK_LAUNCH();
    return cuda_sum_doubles(be, partial, chunks);
}

__global__ void k_nonfinite(int *found, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (!isfinite(x[i])) *found = 1; // every writer stores the same value: order does not matter
}

int cuda_all_finite(Backend *be, const scalar_t *x, size_t n) {
    if (n == 0) return 1;
    int *found = (int *)cuda_scratch(be, SCRATCH_FINITE_FOUND, sizeof(int));
    CHECK_CUDA(cudaMemsetAsync(found, 0, sizeof(int), 0));
    LAUNCH(k_nonfinite, grid_for(n, 256), 256, 0, streaming_cost(n, 1, sizeof(float)))(found, x, n);
    CHECK_LAUNCH();
    int h = 0;
    CHECK_CUDA(cudaMemcpy(&h, found, sizeof h, cudaMemcpyDeviceToHost));
    cuda_host_waited(be);
    return h ? 0 : 1;
}
