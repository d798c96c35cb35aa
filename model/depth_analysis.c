/* The paper's residual-erasure depth analysis (see depth_analysis.h). */
#include "model/depth_analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"

/* dm-math-protocol.md §5 / dm-math-training-code.md §D: prompts (question string, answer string) and the
 * counterfactual (question and answer in one string). */
const char *const DEPTH_PROMPT_Q[DEPTH_N_PROMPTS] = {
    "Q: What is ((-14)/(-6))/(1162/(-4980))? A: ",
    "Q: What is the value of -24 + -10 + 22 + 1 + 1 + 25? A: ",
    "Q: What is 1 - 3 - (63 + 7 - 60)? A: ",
    "Q: (10/3)/((-8)/16)*(-90)/(-75) A: ",
};
const char *const DEPTH_PROMPT_A[DEPTH_N_PROMPTS] = {"-10", "-15", "-12", "-8"};
const char *const DEPTH_COUNTERFACTUAL =
    "Q: Simplify 5 + -2*(sqrt(180)*1*2 - sqrt(180)) + 4 + (sqrt(180)*2 + -4 - sqrt(180)) + 4. A: -6*sqrt(5) + 9";

const char *const DEPTH_DEFINITION =
    "Fraction of layers at which the answer still depends on the question, averaged over the prompts. Per prompt: "
    "r_l = max over the question positions t = 1..len(q)-2 (position 0 is never erased; the answer-predicting "
    "positions len(q)-1..T-2 are left out because erasing them changes their own prediction at every layer) of the "
    "erasure score of row l; M = max_l r_l; value = |{l : r_l >= 0.1 M}| / L (0 when M = 0). 1 means erasing a "
    "question token still changes the answer at every depth; 0.5 means the last half of the layers no longer reads "
    "the question.";


/* Softmax of a float row in double. */
void depth_softmax_row(const float *row, int V, double *p) {
    double mx = row[0], s = 0;
    for (int v = 1; v < V; v++) mx = fmax(mx, row[v]);
    for (int v = 0; v < V; v++) s += (p[v] = exp((double)row[v] - mx));
    for (int v = 0; v < V; v++) p[v] /= s;
}

/* Host copy of backend scalars as floats. */
static void download_floats(Backend *be, float *dst, const scalar_t *src, size_t n) {
#ifdef SCALAR_F64
    scalar_t *tmp = xmalloc(n * sizeof *tmp);
    be->to_host(be, tmp, src, n * sizeof *tmp);
    for (size_t i = 0; i < n; i++) dst[i] = (float)tmp[i];
    free(tmp);
#else
    be->to_host(be, dst, src, n * sizeof *dst);
#endif
}

/* The "uninformative" vectors: erased[l] = mean over the counterfactual's input positions 0..Tc-2 of h_l,
 * l = 0..L-1. erased_dev: backend memory [L, C]. cf: the counterfactual's Tc tokens. */
void depth_counterfactual_means(Model *m, const int32_t *cf, int Tc, scalar_t *erased_dev) {
    Backend *be = model_backend(m);
    const int L = model_config(m)->n_layers, C = model_config(m)->d_model, Tin = Tc - 1;
    if (Tin < 1) die("analyze: the counterfactual needs at least 2 tokens");
    scalar_t *h = be->alloc(be, (size_t)Tin * C * sizeof(scalar_t));                 // [1,Tin,C]
    scalar_t *cap = be->alloc(be, (size_t)(L + 1) * Tin * C * sizeof(scalar_t));     // [L+1,1,Tin,C]
    model_embed(m, h, cf, 1, Tin);
    model_run_layers(m, h, 1, Tin, 0, cap);
    float *host = xmalloc((size_t)L * Tin * C * sizeof(float));
    download_floats(be, host, cap, (size_t)L * Tin * C);
    scalar_t *mean = xmalloc((size_t)L * C * sizeof(scalar_t));
    for (int l = 0; l < L; l++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int t = 0; t < Tin; t++) s += host[((size_t)l * Tin + t) * C + c];
            mean[(size_t)l * C + c] = (scalar_t)(s / Tin);
        }
    be->to_device(be, erased_dev, mean, (size_t)L * C * sizeof(scalar_t));
    free(mean);
    free(host);
    be->free(be, cap);
    be->free(be, h);
}

/* Erasure map of one prompt. tokens[T] = question + answer ids, n_answer = len(answer) (< T-1).
 * scores[L * (T-1)]: row l, column t = input position. Returns whether the reference argmax reproduces the answer. */
bool depth_erasure_scores(Model *m, const scalar_t *erased_dev, const int32_t *tokens, int T, int n_answer,
                           double *scores) {
    Backend *be = model_backend(m);
    const int L = model_config(m)->n_layers, C = model_config(m)->d_model, V = model_config(m)->n_tokens;
    const int Tin = T - 1, nb = T - 2;      /* input positions; erased copies (t = 1..T-2) */
    if (nb < 1 || n_answer < 1 || n_answer > Tin - 1)
        die("analyze: prompt of %d tokens with %d answer tokens is too short", T, n_answer);
    const size_t TC = (size_t)Tin * C;
    scalar_t *h = be->alloc(be, TC * sizeof(scalar_t));                           // [1,Tin,C]
    scalar_t *cap = be->alloc(be, (size_t)(L + 1) * TC * sizeof(scalar_t));       // [L+1,1,Tin,C]
    scalar_t *hb = be->alloc(be, (size_t)nb * TC * sizeof(scalar_t));             // [nb,Tin,C]
    scalar_t *logits = be->alloc(be, (size_t)nb * Tin * V * sizeof(scalar_t));    // [nb*Tin,V]
    float *host = xmalloc((size_t)nb * Tin * V * sizeof(float));
    double *p_ref = xmalloc((size_t)n_answer * V * sizeof(double));               // [n_answer,V]
    double *p = xmalloc((size_t)V * sizeof(double));
    const int first = Tin - n_answer; /* first answer-predicting input position */

    /* Reference run with the residual captures h_0..h_L. */
    model_embed(m, h, tokens, 1, Tin);
    model_run_layers(m, h, 1, Tin, 0, cap);
    model_head(m, logits, cap + (size_t)L * TC, 1, Tin);
    download_floats(be, host, logits, (size_t)Tin * V);
    bool correct = true;
    for (int j = 0; j < n_answer; j++) {
        const float *row = host + (size_t)(first + j) * V;
        depth_softmax_row(row, V, p_ref + (size_t)j * V);
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        correct = correct && best == tokens[first + j + 1];
    }

    for (int l = 0; l < L; l++) {
        scores[(size_t)l * Tin] = 0.0; /* position 0 is never erased */
        /* copy t-1 = h_l with position t replaced by erased[l] */
        for (int t = 1; t <= nb; t++) {
            scalar_t *dst = hb + (size_t)(t - 1) * TC;
            be->copy(be, dst, cap + (size_t)l * TC, TC * sizeof(scalar_t));
            be->copy(be, dst + (size_t)t * C, erased_dev + (size_t)l * C, (size_t)C * sizeof(scalar_t));
        }
        model_run_layers(m, hb, nb, Tin, l, NULL);
        model_head(m, logits, hb, nb, Tin);
        download_floats(be, host, logits, (size_t)nb * Tin * V);
        for (int t = 1; t <= nb; t++) {
            double best = 0;
            for (int j = 0; j < n_answer; j++) {
                depth_softmax_row(host + ((size_t)(t - 1) * Tin + first + j) * V, V, p);
                const double *q = p_ref + (size_t)j * V;
                double d2 = 0;
                for (int v = 0; v < V; v++) d2 += (p[v] - q[v]) * (p[v] - q[v]);
                best = fmax(best, sqrt(d2));
            }
            scores[(size_t)l * Tin + t] = best;
        }
    }
    free(p);
    free(p_ref);
    free(host);
    be->free(be, logits);
    be->free(be, hb);
    be->free(be, cap);
    be->free(be, h);
    return correct;
}

/* The per-prompt depth summary (see DEPTH_DEFINITION). q_len = T - n_answer question tokens. */
double depth_fraction(const double *scores, int L, int Tin, int q_len) {
    double *r = xcalloc((size_t)L, sizeof *r), M = 0;
    for (int l = 0; l < L; l++) {
        for (int t = 1; t <= q_len - 2 && t < Tin; t++) r[l] = fmax(r[l], scores[(size_t)l * Tin + t]);
        M = fmax(M, r[l]);
    }
    int k = 0;
    for (int l = 0; l < L && M > 0; l++) k += r[l] >= DEPTH_THRESHOLD * M;
    free(r);
    return M > 0 ? (double)k / L : 0.0;
}
