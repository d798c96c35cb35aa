/* Checkpoints as safetensors: every parameter under its state_dict name and shape (F32), and the model config as
 * JSON text in __metadata__.config (plus "format": "pt", so PyTorch/safetensors loaders accept the file as is).
 * Loading is strict: every model tensor must be present with its exact shape, nothing else may be in the file; reading
 * a checkpoint's config checks that against the header's tensor list before the model is built (check_tensor_list).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/model_internal.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/base/safetensors.h"

int model_save_safetensors(Model *m, const char *path, char *err, size_t errlen) {
    Backend *be = m->be;
    const size_t n = model_n_state(m); /* parameters and buffers */
    float *host = xmalloc((n ? n : 1) * sizeof(float));
#ifdef SCALAR_F64
    double *tmp = xmalloc((n ? n : 1) * sizeof(double));
    be->to_host(be, tmp, m->params, n * sizeof(double));
    for (size_t i = 0; i < n; i++) host[i] = (float)tmp[i];
    free(tmp);
#else
    be->to_host(be, host, m->params, n * sizeof(float));
#endif
    cJSON *cfg = model_config_to_json(&m->cfg);
    char *cfg_text = cfg ? cJSON_PrintUnformatted(cfg) : NULL;
    cJSON_Delete(cfg);
    if (!cfg_text) {
        free(host);
        set_err(err, errlen, "%s: cannot serialise the model config (out of memory)", path);
        return -1;
    }
    StWriter w;
    st_writer_init(&w);
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        st_writer_add(&w, t->name, ST_F32, t->ndim, t->shape, host + t->offset);
    }
    st_writer_meta(&w, "config", cfg_text);
    st_writer_meta(&w, "format", "pt");
    int rc = st_writer_save(&w, path, err, errlen);
    st_writer_free(&w);
    cJSON_free(cfg_text);
    free(host);
    return rc;
}

static void shape_str(char *out, size_t outlen, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(out, outlen, "[");
    for (int i = 0; i < ndim && k < outlen; i++) k += (size_t)snprintf(out + k, outlen - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < outlen) snprintf(out + k, outlen - k, "]");
}

/* A file tensor s standing for the model tensor t: a float dtype and t's shape; 0, or -1 with err set. */
static int tensor_matches(const char *path, const StTensor *s, const ParamTensor *t, char *err, size_t errlen) {
    if (s->dtype != ST_F32 && s->dtype != ST_F64 && s->dtype != ST_BF16) {
        set_err(err, errlen, "%s: %s: unsupported dtype (expected F32, F64 or BF16)", path, t->name);
        return -1;
    }
    int same = s->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
    if (!same) {
        char want[96], got[160];
        shape_str(want, sizeof want, t->ndim, t->shape);
        shape_str(got, sizeof got, s->ndim, s->shape);
        set_err(err, errlen, "%s: %s: shape %s, expected %s", path, t->name, got, want);
        return -1;
    }
    return 0;
}

int model_load_safetensors(Model *m, const char *path, char *err, size_t errlen) {
    StFile f;
    if (st_read(&f, path, err, errlen) != 0) return -1;
    int rc = -1;
    scalar_t *host = NULL;
    // Every tensor of the file must be a model tensor (no extras).
    for (int i = 0; i < f.n_tensors; i++)
        if (!model_find_tensor(m, f.tensors[i].name)) {
            set_err(err, errlen, "%s: %s: unexpected tensor (not a parameter of this %s model)", path,
                    f.tensors[i].name, model_arch_name(m->cfg.arch));
            goto done;
        }
    const size_t n_state = model_n_state(m);
    host = xmalloc((n_state ? n_state : 1) * sizeof(scalar_t));
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        const StTensor *s = st_find(&f, t->name);
        if (!s) {
            set_err(err, errlen, "%s: %s: missing tensor", path, t->name);
            goto done;
        }
        if (tensor_matches(path, s, t, err, errlen) != 0) goto done;
#ifdef SCALAR_F64
        st_to_f64(s, host + t->offset);
#else
        st_to_f32(s, host + t->offset);
#endif
    }
    m->be->to_device(m->be, m->params, host, n_state * sizeof(scalar_t));
    rc = 0;
done:
    free(host);
    st_free(&f);
    return rc;
}

/* ---- the tensor list of a checkpoint against the model its config describes ----
 * A header can claim any model: 100,000 layers in a file of a few MB. Before anything sized by the config is
 * allocated, every tensor the model registers (model_visit_tensors: the model's own list, nothing kept) must be in
 * the file with its shape, stopping at the first that is not, and the file may hold nothing else. The visit itself
 * sets up per-layer bookkeeping (tens of bytes a layer), so a config with more layers than the file has tensors
 * whose parameters (model/param_count.c: a few arithmetic operations) the file's values cannot hold either is
 * refused on those counts alone, before the visit. */

typedef struct {
    const char *path;
    const StFile *f;
    int *by_name;              /* indices into f->tensors, sorted by name */
    unsigned char *claimed;    /* [n_tensors]: registered by the model */
    char *err;
    size_t errlen;
} TensorCheck;

static const StFile *g_sort_file; /* for qsort's comparator */
static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(g_sort_file->tensors[*(const int *)a].name, g_sort_file->tensors[*(const int *)b].name);
}

static int find_by_name(const TensorCheck *c, const char *name) {
    int lo = 0, hi = c->f->n_tensors - 1;
    while (lo <= hi) {
        const int mid = lo + (hi - lo) / 2, i = c->by_name[mid];
        const int d = strcmp(c->f->tensors[i].name, name);
        if (d == 0) return i;
        if (d < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* One tensor the model registers: present, of a float dtype, with its shape. Non-zero (err set) stops the visit. */
static int check_registered(void *ctx, const ParamTensor *t) {
    TensorCheck *c = ctx;
    const int i = find_by_name(c, t->name);
    if (i < 0) {
        set_err(c->err, c->errlen, "%s: %s: missing tensor", c->path, t->name);
        return 1;
    }
    const StTensor *s = &c->f->tensors[i];
    c->claimed[i] = 1;
    return tensor_matches(c->path, s, t, c->err, c->errlen) != 0;
}

/* A one-line account of the config's size for the refusal. */
static void config_size_str(const ModelConfig *cfg, char *out, size_t n) {
    if (cfg->arch == ARCH_MOEUT)
        snprintf(out, n, "model.n_tokens=%d, d_model=%d, group_size=%d, ff_n_experts=%d, ff_expert_size=%d",
                 cfg->n_tokens, cfg->d_model, cfg->group_size, cfg->ff_n_experts, cfg->ff_expert_size);
    else
        snprintf(out, n, "model.n_tokens=%d, d_model=%d, n_layers=%d, d_ff=%d", cfg->n_tokens, cfg->d_model,
                 cfg->n_layers, cfg->d_ff);
}

static int check_tensor_list(const char *path, const StFile *f, const ModelConfig *cfg, char *err, size_t errlen) {
    size_t held = 0; /* values in the file's tensors: each tensor's bytes lie within the file, so no overflow */
    for (int i = 0; i < f->n_tensors; i++) held += f->tensors[i].numel;
    const size_t params = model_count_params(cfg);
    /* (A model whose every tensor the file holds has at least as many tensors as layers: dense and "moe" layers have
     * a dozen each; a MoEUT's applications share group_size layers, and its parameter count does not grow with
     * them, so a complete MoEUT file always passes.) */
    if (params > held && (size_t)cfg->n_layers > (size_t)f->n_tensors) {
        char size[256];
        config_size_str(cfg, size, sizeof size);
        set_err(err, errlen, "%s: __metadata__.config describes a %s model of %zu parameters (%s), but the file's %d "
                "tensors hold %zu values: refused before building it", path, model_arch_name(cfg->arch), params, size,
                f->n_tensors, held);
        return -1;
    }
    TensorCheck c = {path, f, xmalloc(((size_t)f->n_tensors + 1) * sizeof(int)),
                     xcalloc((size_t)f->n_tensors + 1, 1), err, errlen};
    for (int i = 0; i < f->n_tensors; i++) c.by_name[i] = i;
    g_sort_file = f;
    qsort(c.by_name, (size_t)f->n_tensors, sizeof(int), cmp_tensor_name);
    int rc = model_visit_tensors(cfg, check_registered, &c, err, errlen) == 0 ? 0 : -1;
    for (int i = 0; rc == 0 && i < f->n_tensors; i++)
        if (!c.claimed[i]) {
            set_err(err, errlen, "%s: %s: unexpected tensor (not a parameter of this %s model)", path,
                    f->tensors[i].name, model_arch_name(cfg->arch));
            rc = -1;
        }
    free(c.by_name);
    free(c.claimed);
    return rc;
}

/* Reads the header only (not the tensor data), so the config of a large checkpoint is cheap to get; the tensor list
 * is checked against it (check_tensor_list) before the caller builds the model it describes. */
int model_read_checkpoint_config(const char *path, ModelConfig *cfg, char *err, size_t errlen) {
    StFile f;
    if (st_read_header(&f, path, err, errlen) != 0) return -1;
    int rc = -1;
    cJSON *c = NULL;
    const char *text = st_meta(&f, "config");
    char src[4200];
    snprintf(src, sizeof src, "%s: __metadata__.config", path);
    if (!text) {
        set_err(err, errlen, "%s: missing (not a checkpoint written by this project?)", src);
        goto done;
    }
    c = json_parse_text(text, strlen(text), JSON_KIND_CONFIG, src, err, errlen);
    if (!c) goto done;
    if (model_config_from_json(cfg, c, src, err, errlen) != 0) goto done;
    rc = check_tensor_list(path, &f, cfg, err, errlen);
done:
    cJSON_Delete(c);
    st_free(&f);
    return rc;
}

int model_check_finite(Model *m, const char *source, char *err, size_t errlen) {
    Backend *be = model_backend(m);
    /* One tensor at a time through a host buffer (the weights may live on a GPU). */
    size_t cap = 0;
    scalar_t *host = NULL;
    int rc = 0;
    for (int t = 0; t < model_n_tensors(m) && rc == 0; t++) {
        const ParamTensor *pt = model_tensor(m, t);
        if (pt->numel > cap) {
            cap = pt->numel;
            host = xrealloc(host, cap * sizeof *host);
        }
        be->to_host(be, host, model_params(m) + pt->offset, pt->numel * sizeof *host);
        for (size_t i = 0; i < pt->numel; i++)
            if (!isfinite(host[i])) {
                set_err(err, errlen, "%s: tensor %s: element %zu is %s", source, pt->name, i,
                        isnan(host[i]) ? "NaN" : "infinite");
                rc = -1;
                break;
            }
    }
    free(host);
    return rc;
}
