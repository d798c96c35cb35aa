/* inspect: one training-mode forward/backward of a checkpoint on a given batch, with every intermediate a
 * comparison needs (logits, loss terms, all parameter gradients) written to a safetensors file. It is the bridge to
 * an independent implementation (e.g. the PyTorch twin): both read the same checkpoint and batch and their outputs
 * are compared tensor by tensor.
 *
 *   bin/inspect --weights W.safetensors --batch B.json --out O.safetensors [--backend cpu|cuda] [--precision fp32|bf16]
 *
 * B.json = {"inputs": [[tok, ...], ...], "targets": [[tok or -1, ...], ...], "loss_mask": [[0|1, ...], ...]}
 * (loss_mask optional, all rows the same length T). valid = target >= 0 drives the regularizer mask; the cross-entropy
 * counts positions with valid && loss_mask. Expert dropout is disabled. Output tensors (F32):
 *   logits [B,T,V], cross_entropy [] (mean over counted targets), reg_ffn [], reg_att [] (unscaled, summed over the
 *   distinct modules; 0 for dense), grad.<name> for every parameter: the gradient of
 *   cross_entropy + c_ffn * reg_ffn + att_entropy_reg * reg_att (c_ffn: entropy_reg, balance_alpha or 0 by
 *   model.balance; reg_ffn is that balancing term).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "pipeline/base/cli.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/base/safetensors.h"

typedef struct {
    int B, T;
    int32_t *inputs, *targets; /* [B,T] */
    uint8_t *loss_mask;        /* [B,T]; all ones when absent */
} Batch;

/* Reads a [B][T] integer matrix field; B/T fixed by the first matrix read (*B == 0 on the first call). Values must
 * lie in [lo, hi]; booleans are accepted only when allow_bool (loss_mask). */
static int32_t *read_matrix(const cJSON *root, const char *path, const char *field, int *B, int *T, long lo, long hi,
                            bool allow_bool) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, field);
    if (!a) die("%s: %s: missing", path, field);
    if (!cJSON_IsArray(a)) die("%s: %s: expected an array of rows", path, field);
    int rows = cJSON_GetArraySize(a);
    if (rows < 1) die("%s: %s: empty (need at least one row)", path, field);
    if (*B == 0) *B = rows;
    else if (rows != *B) die("%s: %s: %d rows, but inputs has %d", path, field, rows, *B);
    int32_t *out = NULL;
    int r = 0;
    for (const cJSON *row = a->child; row; row = row->next, r++) {
        if (!cJSON_IsArray(row)) die("%s: %s[%d]: expected an array", path, field, r);
        int cols = cJSON_GetArraySize(row);
        if (cols < 1) die("%s: %s[%d]: empty row", path, field, r);
        if (*T == 0) *T = cols;
        if (cols != *T) die("%s: %s[%d]: %d entries, expected %d (rows must have equal length)", path, field, r, cols, *T);
        if (!out) out = xmalloc((size_t)*B * (size_t)*T * sizeof(int32_t));
        int c = 0;
        for (const cJSON *v = row->child; v; v = v->next, c++) {
            double x;
            if (allow_bool && cJSON_IsBool(v)) x = cJSON_IsTrue(v);
            else if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble)) x = v->valuedouble;
            else die("%s: %s[%d][%d]: expected an integer", path, field, r, c);
            if (x < (double)lo || x > (double)hi)
                die("%s: %s[%d][%d]: %.17g is outside [%ld, %ld]", path, field, r, c, x, lo, hi);
            out[(size_t)r * *T + c] = (int32_t)x;
        }
    }
    return out;
}

static Batch read_batch(const char *path, int V) {
    char err[1024];
    cJSON *root = json_load_file(path, JSON_KIND_BATCH, err, sizeof err);
    if (!root) die("%s", err);
    if (!cJSON_IsObject(root)) die("%s: expected a JSON object {\"inputs\", \"targets\", \"loss_mask\"}", path);
    for (const cJSON *c = root->child; c; c = c->next)
        if (strcmp(c->string, "inputs") && strcmp(c->string, "targets") && strcmp(c->string, "loss_mask"))
            die("%s: %s: unknown key (expected inputs, targets, loss_mask)", path, c->string);
    Batch b = {0};
    b.inputs = read_matrix(root, path, "inputs", &b.B, &b.T, 0, V - 1, false);
    b.targets = read_matrix(root, path, "targets", &b.B, &b.T, -1, V - 1, false);
    size_t n = (size_t)b.B * b.T;
    b.loss_mask = xmalloc(n);
    if (cJSON_GetObjectItemCaseSensitive(root, "loss_mask")) {
        int32_t *mk = read_matrix(root, path, "loss_mask", &b.B, &b.T, 0, 1, true);
        for (size_t i = 0; i < n; i++) b.loss_mask[i] = (uint8_t)mk[i];
        free(mk);
    } else {
        memset(b.loss_mask, 1, n);
    }
    cJSON_Delete(root);
    return b;
}

static const char *SUMMARY =
    "Runs one training-mode forward/backward of the checkpoint --weights on the batch --batch (JSON {\"inputs\": "
    "[[...]], \"targets\": [[...]] with -1 = no target, optional \"loss_mask\": [[0/1...]]}) with expert dropout "
    "disabled, and writes logits [B,T,V], cross_entropy, reg_ffn, reg_att and grad.<name> for every parameter (the "
    "gradient of cross_entropy + c_ffn*reg_ffn + att_entropy_reg*reg_att, c_ffn = entropy_reg, balance_alpha or 0 by "
    "model.balance) as F32 tensors to --out.";

int main(int argc, char **argv) {
    log_set_program("inspect");
    const char *weights = NULL, *batch_path = NULL, *out = NULL, *backend = "cpu", *precision = "fp32";
    CliOption opts[] = {
        {"weights", OPT_STRING, &weights, "checkpoint (safetensors with __metadata__.config)", true},
        {"batch", OPT_STRING, &batch_path, "batch JSON {inputs, targets[, loss_mask]}", true},
        {"out", OPT_STRING, &out, "output safetensors file", true},
        {"backend", OPT_STRING, &backend, "cpu | cuda (default cpu)", false},
        {"precision", OPT_STRING, &precision, "fp32 | bf16 matmuls (default fp32; the cpu backend is always fp32)",
         false},
    };
    cli_parse(argc, argv, "inspect", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    Precision prec;
    if (strcmp(precision, "fp32") == 0) prec = PRECISION_FP32;
    else if (strcmp(precision, "bf16") == 0) prec = PRECISION_BF16;
    else die("--precision: expected fp32 or bf16, got \"%s\"", precision);

    char err[1024];
    ModelConfig cfg;
    /* The config, with the file's tensor list checked against it before the model it describes is built. */
    if (model_read_checkpoint_config(weights, &cfg, err, sizeof err) != 0) die("%s", err);
    cfg.ff_expert_dropout = 0; /* the comparison must be deterministic */
    cfg.att_expert_dropout = 0;
    Batch b = read_batch(batch_path, cfg.n_tokens);

    Backend *be = backend_create(backend, err, sizeof err);
    if (!be) die("--backend %s: %s", backend, err);
    be->precision = prec;
    Model *m = model_create(&cfg, be);
    if (model_load_safetensors(m, weights, err, sizeof err) != 0) die("%s", err);
    /* A NaN or an infinity would turn every logit and gradient into NaN: a comparison against it means nothing. */
    if (model_check_finite(m, weights, err, sizeof err) != 0) die("%s", err);

    const size_t N = (size_t)b.B * b.T, V = (size_t)cfg.n_tokens, np = model_n_params(m);
    int32_t *ce_targets = xmalloc(N * sizeof(int32_t));
    uint8_t *valid = xmalloc(N);
    long n_counted = 0;
    for (size_t i = 0; i < N; i++) {
        valid[i] = b.targets[i] >= 0;
        ce_targets[i] = valid[i] && b.loss_mask[i] ? b.targets[i] : -1;
        n_counted += ce_targets[i] >= 0;
    }
    if (n_counted == 0) die("%s: no position has a counted target (target >= 0 and loss_mask 1)", batch_path);

    float *logits = xmalloc(N * V * sizeof(float));
    be->zero(be, model_grads(m), np * sizeof(scalar_t));
    StepStats st;
    model_train_step(m, b.inputs, ce_targets, valid, b.B, b.T, 1.0, &st, logits);
    float ce = (float)(st.ce_sum / (double)st.n_counted), reg_ffn = (float)st.reg_ffn, reg_att = (float)st.reg_att;

    float *grads = xmalloc((np ? np : 1) * sizeof(float));
#ifdef SCALAR_F64
    double *tmp = xmalloc(np * sizeof(double));
    be->to_host(be, tmp, model_grads(m), np * sizeof(double));
    for (size_t i = 0; i < np; i++) grads[i] = (float)tmp[i];
    free(tmp);
#else
    be->to_host(be, grads, model_grads(m), np * sizeof(float));
#endif

    StWriter w;
    st_writer_init(&w);
    int64_t lshape[3] = {b.B, b.T, (int64_t)V};
    st_writer_add(&w, "logits", ST_F32, 3, lshape, logits);
    st_writer_add(&w, "cross_entropy", ST_F32, 0, NULL, &ce);
    st_writer_add(&w, "reg_ffn", ST_F32, 0, NULL, &reg_ffn);
    st_writer_add(&w, "reg_att", ST_F32, 0, NULL, &reg_att);
    char (*names)[128] = xmalloc(((size_t)model_n_param_tensors(m) + 1) * sizeof *names);
    for (int i = 0; i < model_n_param_tensors(m); i++) { /* parameters only: a buffer has no gradient */
        const ParamTensor *t = model_tensor(m, i);
        snprintf(names[i], sizeof names[i], "grad.%s", t->name);
        st_writer_add(&w, names[i], ST_F32, t->ndim, t->shape, grads + t->offset);
    }
    char counted[32];
    snprintf(counted, sizeof counted, "%ld", n_counted);
    st_writer_meta(&w, "format", "pt");
    st_writer_meta(&w, "n_counted", counted);
    st_writer_meta(&w, "backend", be->name);
    if (st_writer_save(&w, out, err, sizeof err) != 0) die("%s", err);
    log_info("%s: B=%d T=%d, %ld counted targets, cross_entropy %.6f, reg_ffn %.6f, reg_att %.6f", out, b.B, b.T,
             n_counted, (double)ce, (double)reg_ffn, (double)reg_att);

    st_writer_free(&w);
    free(names);
    free(grads);
    free(logits);
    free(ce_targets);
    free(valid);
    free(b.inputs);
    free(b.targets);
    free(b.loss_mask);
    model_free(m);
    backend_destroy(be);
    return 0;
}
