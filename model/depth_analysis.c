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

void depth_residual_means(Model *m, const int32_t *const *seqs, const int *lens, int n, scalar_t *erased_dev) {
    Backend *be = model_backend(m);
    const int L = model_config(m)->n_layers, C = model_config(m)->d_model;
    double *sum = xcalloc((size_t)L * C, sizeof *sum); // [L,C]
    long positions = 0;
    for (int i = 0; i < n; i++) {
        const int Tin = lens[i] - 1;
        if (Tin < 1) die("analyze: a sequence of %d tokens has no input position to average", lens[i]);
        scalar_t *h = be->alloc(be, (size_t)Tin * C * sizeof(scalar_t));             // [1,Tin,C]
        scalar_t *cap = be->alloc(be, (size_t)(L + 1) * Tin * C * sizeof(scalar_t)); // [L+1,1,Tin,C]
        model_embed(m, h, seqs[i], 1, Tin);
        model_run_layers(m, h, seqs[i], 1, Tin, 0, cap);
        float *host = xmalloc((size_t)L * Tin * C * sizeof(float)); // h_0..h_{L-1}: [L,Tin,C]
        download_floats(be, host, cap, (size_t)L * Tin * C);
        for (int l = 0; l < L; l++)
            for (int t = 0; t < Tin; t++)
                for (int c = 0; c < C; c++) sum[(size_t)l * C + c] += host[((size_t)l * Tin + t) * C + c];
        positions += Tin;
        free(host);
        be->free(be, cap);
        be->free(be, h);
    }
    scalar_t *mean = xmalloc((size_t)L * C * sizeof(scalar_t));
    for (size_t i = 0; i < (size_t)L * C; i++) mean[i] = (scalar_t)(sum[i] / (double)positions);
    be->to_device(be, erased_dev, mean, (size_t)L * C * sizeof(scalar_t));
    free(mean);
    free(sum);
}

void depth_counterfactual_means(Model *m, const int32_t *cf, int Tc, scalar_t *erased_dev) {
    if (Tc < 2) die("analyze: the counterfactual needs at least 2 tokens");
    depth_residual_means(m, &cf, &Tc, 1, erased_dev);
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
    const size_t TC = (size_t)Tin * C, NA = (size_t)nb * n_answer;
    const int first = Tin - n_answer; /* first answer-predicting input position */
    scalar_t *h = be->alloc(be, TC * sizeof(scalar_t));                           // [1,Tin,C]
    scalar_t *cap = be->alloc(be, (size_t)(L + 1) * TC * sizeof(scalar_t));       // [L+1,1,Tin,C]
    scalar_t *hb = be->alloc(be, (size_t)nb * TC * sizeof(scalar_t));             // [nb,Tin,C]
    /* Only the answer-predicting rows go through the head (a per-position map): [nb*n_answer, C] and their logits */
    scalar_t *rows = be->alloc(be, NA * C * sizeof(scalar_t));
    scalar_t *logits = be->alloc(be, NA * V * sizeof(scalar_t));                  // [nb*n_answer,V]
    float *host = xmalloc(NA * V * sizeof(float));
    double *p_ref = xmalloc((size_t)n_answer * V * sizeof(double));               // [n_answer,V]
    double *p = xmalloc((size_t)V * sizeof(double));
    int32_t *copies_tokens = xmalloc((size_t)nb * Tin * sizeof(int32_t)); // [nb,Tin] the erased copies' input ids
    for (int b = 0; b < nb; b++) memcpy(copies_tokens + (size_t)b * Tin, tokens, (size_t)Tin * sizeof(int32_t));

    /* Reference run with the residual captures h_0..h_L. */
    model_embed(m, h, tokens, 1, Tin);
    model_run_layers(m, h, tokens, 1, Tin, 0, cap);
    be->copy(be, rows, cap + (size_t)L * TC + (size_t)first * C, (size_t)n_answer * C * sizeof(scalar_t));
    model_head(m, logits, rows, n_answer, 1);
    download_floats(be, host, logits, (size_t)n_answer * V);
    bool correct = true;
    for (int j = 0; j < n_answer; j++) {
        const float *row = host + (size_t)j * V;
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
        model_run_layers(m, hb, copies_tokens, nb, Tin, l, NULL);
        for (int b = 0; b < nb; b++) /* each copy's answer-predicting rows are contiguous */
            be->copy(be, rows + (size_t)b * n_answer * C, hb + (size_t)b * TC + (size_t)first * C,
                     (size_t)n_answer * C * sizeof(scalar_t));
        model_head(m, logits, rows, (int)NA, 1);
        download_floats(be, host, logits, NA * V);
        for (int t = 1; t <= nb; t++) {
            double best = 0;
            for (int j = 0; j < n_answer; j++) {
                depth_softmax_row(host + ((size_t)(t - 1) * n_answer + j) * V, V, p);
                const double *q = p_ref + (size_t)j * V;
                double d2 = 0;
                for (int v = 0; v < V; v++) d2 += (p[v] - q[v]) * (p[v] - q[v]);
                best = fmax(best, sqrt(d2));
            }
            scores[(size_t)l * Tin + t] = best;
        }
    }
    free(copies_tokens);
    free(p);
    free(p_ref);
    free(host);
    be->free(be, logits);
    be->free(be, rows);
    be->free(be, hb);
    be->free(be, cap);
    be->free(be, h);
    return correct;
}

/* r[l] = the largest score of row l over the question positions t = 1..q_len-2 (position 0 is never erased; the
 * answer-predicting positions are left out because erasing them changes their own prediction at every layer).
 * Returns M = max_l r[l]. */
static double question_profile(const double *scores, int L, int Tin, int q_len, double *r) {
    double M = 0;
    for (int l = 0; l < L; l++) {
        r[l] = 0;
        for (int t = 1; t <= q_len - 2 && t < Tin; t++) r[l] = fmax(r[l], scores[(size_t)l * Tin + t]);
        M = fmax(M, r[l]);
    }
    return M;
}

/* The per-prompt depth summary (see DEPTH_DEFINITION). q_len = T - n_answer question tokens. */
double depth_fraction(const double *scores, int L, int Tin, int q_len) {
    double *r = xcalloc((size_t)L, sizeof *r);
    const double M = question_profile(scores, L, Tin, q_len, r);
    int k = 0;
    for (int l = 0; l < L && M > 0; l++) k += r[l] >= DEPTH_THRESHOLD * M;
    free(r);
    return M > 0 ? (double)k / L : 0.0;
}

double depth_centre(const double *scores, int L, int Tin, int q_len) {
    double *r = xcalloc((size_t)L, sizeof *r), num = 0, den = 0;
    question_profile(scores, L, Tin, q_len, r);
    for (int l = 0; l < L; l++) {
        num += (l + 0.5) / L * r[l];
        den += r[l];
    }
    free(r);
    return den > 0 ? num / den : 0.0;
}

void depth_map_accumulate(const double *scores, int L, int Tin, int q_len, int K, double *sum, long *count) {
    const int nq = q_len - 2, first_answer = q_len - 1; /* question columns 1..nq; answer-predicting q_len-1..Tin-1 */
    double *cell = xcalloc((size_t)L * (K + 1), sizeof *cell); // [L,K+1] this prompt's sums per bin
    int *n = xcalloc((size_t)K + 1, sizeof *n);                // positions per bin
    for (int t = 1; t < Tin; t++) {
        int bin;
        if (t >= first_answer) bin = K;
        else if (nq >= 1) bin = (int)((long)(t - 1) * K / nq);
        else continue;
        n[bin]++;
        for (int l = 0; l < L; l++) cell[(size_t)l * (K + 1) + bin] += scores[(size_t)l * Tin + t];
    }
    for (int b = 0; b <= K; b++) {
        if (!n[b]) continue;
        count[b]++;
        for (int l = 0; l < L; l++) sum[(size_t)l * (K + 1) + b] += cell[(size_t)l * (K + 1) + b] / n[b];
    }
    free(n);
    free(cell);
}
