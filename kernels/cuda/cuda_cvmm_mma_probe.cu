// CUDA: auto's probe of cvmm's tensor-core kernels (cuda_cvmm_mma.cu), run once per backend before auto lets bf16
// expert matmuls use them: the three products on one small hand-made plan, compared bit for bit with the exact
// results computed on the host. The data are small integers, so every bf16 operand and fp32 sum is exact and any
// correct kernel must match whatever order it sums in. The plan has what cvmm's plans have: uneven experts, an empty
// one, rows read through the permutation, a scattered output, weights, sizes off the 16-wide fragments; and it spans
// the kernels' tiles in every direction (an expert of more than 64 rows, so several row tiles and dW row steps; Kin
// and Nout over one 32-deep stage and one 64-wide column tile), so that auto never adopts kernels whose tile
// boundaries were not exercised.
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_cvmm.cuh"

namespace {
constexpr int P_E = 3, P_M = 80, P_KIN = 40, P_NOUT = 70;
// entry p's expert: expert 0 gets every tenth entry from 3 (8 rows), expert 1 none, expert 2 the other 72
int probe_expert(int p) { return p % 10 == 3 ? 0 : 2; }

int small_int(uint32_t *state) { // [-3, 3]
    *state = *state * 1664525u + 1013904223u;
    return (int)(*state >> 24) % 7 - 3;
}
} // namespace

bool cvmm_mma_probe(Backend *be, char *why, size_t whylen) {
    CHECK_CUDA(cudaDeviceSynchronize()); // a clean start: earlier work's errors are not blamed on the probe
    // the plan on the host: the stable counting sort by expert
    std::vector<int32_t> perm, offset(P_E + 1, 0);
    for (int e = 0; e < P_E; e++) {
        offset[(size_t)e] = (int32_t)perm.size();
        for (int p = 0; p < P_M; p++)
            if (probe_expert(p) == e) perm.push_back(p);
    }
    offset[P_E] = P_M;
    uint32_t state = 2024u;
    // fp32 data: X [M, Kin] | W [E, Kin, Nout] | G [M, Nout] | w [M] | dW [E, Kin, Nout] (starts from integers)
    const size_t nx = (size_t)P_M * P_KIN, nw = (size_t)P_E * P_KIN * P_NOUT, ng = (size_t)P_M * P_NOUT;
    std::vector<float> host(nx + nw + ng + P_M + nw);
    for (float &v : host) v = (float)small_int(&state);
    const float *X = host.data(), *W = X + nx, *G = W + nw, *w = G + ng, *dW0 = w + P_M;
    // exact results: Y [M, Nout] in entry order, Q [M, Kin] in plan order, dW [E, Kin, Nout]
    std::vector<float> want(ng + nx + nw);
    float *Y = want.data(), *Q = Y + ng, *dW = Q + nx;
    for (int p = 0; p < P_M; p++)
        for (int n = 0; n < P_NOUT; n++) {
            float s = 0;
            for (int k = 0; k < P_KIN; k++) s += X[p * P_KIN + k] * W[(probe_expert(p) * P_KIN + k) * P_NOUT + n];
            Y[p * P_NOUT + n] = s;
        }
    for (int m = 0; m < P_M; m++)
        for (int k = 0; k < P_KIN; k++) {
            int p = perm[(size_t)m];
            float s = 0;
            for (int n = 0; n < P_NOUT; n++) s += G[p * P_NOUT + n] * W[(probe_expert(p) * P_KIN + k) * P_NOUT + n];
            Q[m * P_KIN + k] = s;
        }
    std::memcpy(dW, dW0, nw * sizeof(float));
    for (int p = 0; p < P_M; p++)
        for (int k = 0; k < P_KIN; k++)
            for (int n = 0; n < P_NOUT; n++)
                dW[(probe_expert(p) * P_KIN + k) * P_NOUT + n] += X[p * P_KIN + k] * (w[p] * G[p * P_NOUT + n]);

    float *dev = nullptr;
    int32_t *idx = nullptr;
    __nv_bfloat16 *W16 = nullptr;
    CHECK_CUDA(cudaMalloc(&dev, (host.size() + ng + nx) * sizeof(float))); // inputs | dW | Y | Q
    CHECK_CUDA(cudaMalloc(&idx, (perm.size() + offset.size()) * sizeof(int32_t)));
    CHECK_CUDA(cudaMalloc(&W16, nw * sizeof(__nv_bfloat16)));
    CHECK_CUDA(cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(idx, perm.data(), perm.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(idx + P_M, offset.data(), offset.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    const float *dX = dev, *dWt = dX + nx, *dG = dWt + nw, *dw = dG + ng;
    float *d_dW = (float *)dw + P_M, *dY = d_dW + nw, *dQ = dY + ng;
    cuda_to_bf16(W16, dWt, nw);
    RoutingPlan pl = {};
    pl.perm = idx, pl.offset = idx + P_M, pl.M = P_M, pl.n_experts = P_E; // what the kernels read
    const RoutedRows x = {dX, idx, 0, 1, P_KIN, nullptr}, g = {dG, idx, 0, 1, P_NOUT, nullptr};
    const RoutedRows gw = {dG, idx, 0, 1, P_NOUT, dw};
    cvmm_mma_rows(be, pl, dY, P_NOUT, idx, x, W16, (size_t)P_KIN * P_NOUT, P_NOUT, 1, P_NOUT, P_KIN, false);
    cvmm_mma_rows(be, pl, dQ, P_KIN, nullptr, g, W16, (size_t)P_KIN * P_NOUT, 1, P_NOUT, P_KIN, P_NOUT, false);
    cvmm_mma_dw(pl, d_dW, x, gw, P_KIN, P_NOUT);
    std::vector<float> got(want.size()); // dW | Y | Q on the device; want is Y | Q | dW
    CHECK_CUDA(cudaMemcpy(got.data(), d_dW, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    struct Part {
        const char *name;
        const float *got, *want;
        size_t n;
    } parts[] = {{"forward (Y = X W)", got.data() + nw, Y, ng},
                 {"backward Q = G W^T", got.data() + nw + ng, Q, nx},
                 {"backward dW += X^T (w G)", got.data(), dW, nw}};
    bool ok = true;
    for (const Part &pt : parts)
        for (size_t i = 0; i < pt.n && ok; i++)
            if (std::memcmp(&pt.got[i], &pt.want[i], sizeof(float)) != 0) {
                snprintf(why, whylen, "its %s product differs from the exact result (element %zu: %g, want %g)",
                         pt.name, i, (double)pt.got[i], (double)pt.want[i]);
                ok = false;
            }
    CHECK_CUDA(cudaFree(W16));
    CHECK_CUDA(cudaFree(idx));
    CHECK_CUDA(cudaFree(dev));
    return ok;
}
