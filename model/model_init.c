/* Initialisation: random numbers are generated on the host (deterministic in the Rng, independent of the backend)
 * and uploaded. The wrapper's own tensors follow dm-math-training-code.md §C.1 / moeut-spec.md §1.1:
 * embedding N(0, 1/C), lm_head weight and bias U(+-1/sqrt(C)) (torch Linear default), out_norm weight 1 and bias 0.
 * Layer tensors are initialised by the LayerImpl through the helpers below.
 */
#include <math.h>
#include <stdlib.h>

#include "model/model_internal.h"
#include "pipeline/base/log.h"

/* Host staging chunk: bounds the host memory used while filling very large tensors. */
#define INIT_CHUNK ((size_t)1 << 20)

static void fill_chunks(Model *m, size_t off, size_t n, Rng *rng, int kind, double a) {
    size_t cap = n < INIT_CHUNK ? n : INIT_CHUNK;
    if (cap == 0) return;
    scalar_t *buf = xmalloc(cap * sizeof(scalar_t));
    for (size_t done = 0; done < n; done += cap) {
        size_t k = n - done < cap ? n - done : cap;
        for (size_t i = 0; i < k; i++) {
            switch (kind) {
            case 0: buf[i] = (scalar_t)(a * rng_normal(rng)); break;
            case 1: buf[i] = (scalar_t)(a * (2.0 * rng_uniform(rng) - 1.0)); break;
            default: buf[i] = (scalar_t)a; break;
            }
        }
        m->be->to_device(m->be, m->params + off + done, buf, k * sizeof(scalar_t));
    }
    free(buf);
}

void init_normal(Model *m, size_t off, size_t n, double std, Rng *rng) { fill_chunks(m, off, n, rng, 0, std); }
void init_uniform(Model *m, size_t off, size_t n, double bound, Rng *rng) { fill_chunks(m, off, n, rng, 1, bound); }
void init_constant(Model *m, size_t off, size_t n, double value) { fill_chunks(m, off, n, NULL, 2, value); }

/* Unbiased std of n values (torch.std default), accumulated in double. */
static double std_unbiased(const double *x, size_t n) {
    if (n < 2) return 0.0;
    double mean = 0.0;
    for (size_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    return sqrt(ss / (double)(n - 1));
}

static double *download_double(Model *m, size_t off, size_t n) {
    scalar_t *tmp = xmalloc(n * sizeof(scalar_t));
    m->be->to_host(m->be, tmp, m->params + off, n * sizeof(scalar_t));
    double *x = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) x[i] = (double)tmp[i];
    free(tmp);
    return x;
}

static void upload_double(Model *m, size_t off, const double *x, size_t n) {
    scalar_t *tmp = xmalloc(n * sizeof(scalar_t));
    for (size_t i = 0; i < n; i++) tmp[i] = (scalar_t)x[i];
    m->be->to_device(m->be, m->params + off, tmp, n * sizeof(scalar_t));
    free(tmp);
}

static void normalise_rows(double *x, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        double *row = x + (size_t)r * cols, ss = 0.0;
        for (int c = 0; c < cols; c++) ss += row[c] * row[c];
        double norm = sqrt(ss);
        if (norm > 0)
            for (int c = 0; c < cols; c++) row[c] /= norm;
    }
}

void init_renorm_keep_std_rows(Model *m, size_t off, int rows, int cols) {
    size_t n = (size_t)rows * cols;
    double *x = download_double(m, off, n);
    double s0 = std_unbiased(x, n);
    normalise_rows(x, rows, cols);
    double s1 = std_unbiased(x, n);
    double scale = s1 > 0 ? s0 / s1 : 1.0;
    for (size_t i = 0; i < n; i++) x[i] *= scale;
    upload_double(m, off, x, n);
    free(x);
}

void init_renorm_rows(Model *m, size_t off, int rows, int cols) {
    size_t n = (size_t)rows * cols;
    double *x = download_double(m, off, n);
    double *row_std = xmalloc((size_t)rows * sizeof(double));
    for (int r = 0; r < rows; r++) row_std[r] = std_unbiased(x + (size_t)r * cols, (size_t)cols);
    normalise_rows(x, rows, cols);
    double s = std_unbiased(x, n);
    for (int r = 0; r < rows; r++) {
        double scale = s > 0 ? row_std[r] / s : 1.0;
        for (int c = 0; c < cols; c++) x[(size_t)r * cols + c] *= scale;
    }
    upload_double(m, off, x, n);
    free(row_std);
    free(x);
}

void model_init_weights(Model *m, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    const ModelConfig *c = &m->cfg;
    const size_t V = (size_t)c->n_tokens, C = (size_t)c->d_model;
    const double inv_sqrt_c = 1.0 / sqrt((double)c->d_model);
    init_normal(m, m->off_embedding, V * C, inv_sqrt_c, &rng);
    for (int k = 0; k < N_LAYER_KINDS; k++) /* the registration order: dense (prefix) layers, then MoEUT layers */
        for (int l = 0; l < m->n_distinct[k]; l++) m->impls[k]->init_params(m, l, &rng);
    if (m->off_out_norm_w != SIZE_MAX) init_constant(m, m->off_out_norm_w, C, 1.0);
    if (m->off_out_norm_b != SIZE_MAX) init_constant(m, m->off_out_norm_b, C, 0.0);
    init_uniform(m, m->off_head_w, V * C, inv_sqrt_c, &rng);
    if (m->off_head_b != SIZE_MAX) init_uniform(m, m->off_head_b, V, inv_sqrt_c, &rng);
}
