/* Checkpoints as safetensors: every parameter under its state_dict name and shape (F32), and the model config as
 * JSON text in __metadata__.config (plus "format": "pt", so PyTorch/safetensors loaders accept the file as is).
 * Loading is strict: every model tensor must be present with its exact shape, nothing else may be in the file.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/model_internal.h"
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
        if (s->dtype != ST_F32 && s->dtype != ST_F64 && s->dtype != ST_BF16) {
            set_err(err, errlen, "%s: %s: unsupported dtype (expected F32, F64 or BF16)", path, t->name);
            goto done;
        }
        int same = s->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
        if (!same) {
            char want[96], got[160];
            shape_str(want, sizeof want, t->ndim, t->shape);
            shape_str(got, sizeof got, s->ndim, s->shape);
            set_err(err, errlen, "%s: %s: shape %s, expected %s", path, t->name, got, want);
            goto done;
        }
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

/* Reads the JSON header only (not the tensor data), so the config of a large checkpoint is cheap to get. */
#define MAX_HEADER_BYTES ((uint64_t)100 << 20)

int model_read_checkpoint_config(const char *path, ModelConfig *cfg, char *err, size_t errlen) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    int rc = -1;
    char *hdr = NULL;
    cJSON *h = NULL, *c = NULL;
    uint8_t len8[8];
    if (fread(len8, 1, 8, fp) != 8) {
        set_err(err, errlen, "%s: too short for a safetensors file", path);
        goto done;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
    if (hlen == 0 || hlen > MAX_HEADER_BYTES) {
        set_err(err, errlen, "%s: implausible safetensors header length %llu", path, (unsigned long long)hlen);
        goto done;
    }
    hdr = xmalloc((size_t)hlen + 1);
    if (fread(hdr, 1, (size_t)hlen, fp) != (size_t)hlen) {
        set_err(err, errlen, "%s: header length %llu exceeds the file", path, (unsigned long long)hlen);
        goto done;
    }
    hdr[hlen] = '\0';
    h = cJSON_ParseWithLength(hdr, (size_t)hlen);
    if (!h || !cJSON_IsObject(h)) {
        set_err(err, errlen, "%s: header is not a JSON object", path);
        goto done;
    }
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(h, "__metadata__");
    const cJSON *text = meta ? cJSON_GetObjectItemCaseSensitive(meta, "config") : NULL;
    if (!text) {
        set_err(err, errlen, "%s: __metadata__.config: missing (not a checkpoint written by this project?)", path);
        goto done;
    }
    if (!cJSON_IsString(text) || !text->valuestring) {
        set_err(err, errlen, "%s: __metadata__.config: expected a JSON string", path);
        goto done;
    }
    c = cJSON_Parse(text->valuestring);
    if (!c) {
        set_err(err, errlen, "%s: __metadata__.config: not valid JSON", path);
        goto done;
    }
    char src[4200];
    snprintf(src, sizeof src, "%s: __metadata__.config", path);
    rc = model_config_from_json(cfg, c, src, err, errlen);
done:
    cJSON_Delete(c);
    cJSON_Delete(h);
    free(hdr);
    fclose(fp);
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
