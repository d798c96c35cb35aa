/* Sparse upcycling (see upcycle.h for the formulas and their sources). */
#include "model/upcycle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/model_internal.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/base/rng.h"
#include "pipeline/base/sha256.h"

const char *upcycle_method_name(UpcycleMethod m) { return m == UPCYCLE_SPLIT ? "split" : "copy"; }

int upcycle_options_from_json(UpcycleOptions *o, const cJSON *obj, const char *source, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    JsonReader r;
    json_reader_init(&r, obj, source, "upcycle");
    const char *from = NULL, *method = NULL;
    json_get_string(&r, "from", &from, true);
    json_get_string(&r, "method", &method, true);
    json_get_int(&r, "seed", &o->seed, true);
    json_get_double(&r, "noise", &o->noise, false);
    if (json_reader_finish(&r, err, errlen) != 0) return -1;
    if (!from[0] || strlen(from) >= sizeof o->from || strchr(from, '/')) {
        set_err(err, errlen, "%s: upcycle.from: expected the name of a run of this experiment (got \"%s\")", source,
                from);
        return -1;
    }
    snprintf(o->from, sizeof o->from, "%s", from);
    if (strcmp(method, "copy") == 0) o->method = UPCYCLE_COPY;
    else if (strcmp(method, "split") == 0) o->method = UPCYCLE_SPLIT;
    else {
        set_err(err, errlen, "%s: upcycle.method: expected \"copy\" or \"split\", got \"%s\"", source, method);
        return -1;
    }
    if (o->seed < 0) {
        set_err(err, errlen, "%s: upcycle.seed: must be >= 0 (got %ld)", source, o->seed);
        return -1;
    }
    if (!(o->noise >= 0.0) || !isfinite(o->noise)) {
        set_err(err, errlen, "%s: upcycle.noise: must be a finite number >= 0 (got %g)", source, o->noise);
        return -1;
    }
    return 0;
}

int upcycle_check_target_arch(const ModelConfig *t, const char *src, char *err, size_t errlen) {
    if (t->arch == ARCH_MOEUT) {
        set_err(err, errlen, "%s: upcycle: model.arch \"moeut\" cannot be upcycled from a dense model: its layers are "
                "shared across applications and its attention is SwitchHead, so no dense layer maps onto one of its "
                "layers one to one (use arch \"moe\")", src);
        return -1;
    }
    if (t->arch == ARCH_DENSE) {
        set_err(err, errlen, "%s: upcycle: model.arch \"dense\" is not a routed MoE: upcycling needs a target of arch "
                "\"moe\"", src);
        return -1;
    }
    return 0;
}

int upcycle_check(const ModelConfig *d, const ModelConfig *t, const UpcycleOptions *o, const char *src, char *err,
                  size_t errlen) {
    if (upcycle_check_target_arch(t, src, err, errlen) != 0) return -1;
    if (d->arch != ARCH_DENSE) {
        set_err(err, errlen, "%s: the source is not a dense checkpoint (its arch is not \"dense\")", src);
        return -1;
    }
#define SAME(key, a, b)                                                                                             \
    do {                                                                                                            \
        if ((a) != (b)) {                                                                                           \
            set_err(err, errlen, "%s: model.%s: %d, the dense checkpoint has %d (every tensor but the FFN is copied " \
                    "one to one)", src, key, (int)(a), (int)(b));                                                   \
            return -1;                                                                                              \
        }                                                                                                           \
    } while (0)
    SAME("n_tokens", t->n_tokens, d->n_tokens);
    SAME("d_model", t->d_model, d->d_model);
    SAME("n_layers", t->n_layers, d->n_layers);
    SAME("n_heads", t->n_heads, d->n_heads);
    SAME("d_head", t->d_head, d->d_head);
    SAME("lm_head_bias", t->lm_head_bias, d->lm_head_bias);
    SAME("out_norm_affine", t->out_norm_affine, d->out_norm_affine);
    if (t->n_dense_first > 0) SAME("d_ff", t->d_ff, d->d_ff);
#undef SAME
    const int F = d->d_ff, S = t->ff_expert_size, E = t->ff_n_experts;
    if (o->method == UPCYCLE_COPY && S != F) {
        set_err(err, errlen, "%s: model.ff_expert_size: %d, but upcycle.method \"copy\" makes every expert a copy of "
                "the dense FFN of d_ff %d (ff_expert_size must be %d)", src, S, F, F);
        return -1;
    }
    if (o->method == UPCYCLE_SPLIT) {
        if (S < 1 || F % S != 0) {
            set_err(err, errlen, "%s: model.ff_expert_size: %d does not divide the dense d_ff %d (upcycle.method "
                    "\"split\" cuts the FFN into d_ff / ff_expert_size pieces)", src, S, F);
            return -1;
        }
        const int G = F / S;
        if (E % G != 0) {
            set_err(err, errlen, "%s: model.ff_n_experts: %d is not a multiple of the %d pieces of the dense FFN "
                    "(upcycle.method \"split\": d_ff %d / ff_expert_size %d; each replica gives %d experts)", src, E, G,
                    F, S, G);
            return -1;
        }
    }
    return 0;
}

/* ---- conversion ---- */

typedef struct {
    Model *m;
    const StFile *src;
    const char *src_name;
    char *err;
    size_t errlen;
    unsigned char *used; /* [src->n_tensors] 1 once converted */
} Conv;

/* The source tensor `name` as doubles (caller frees), checked against the expected shape. */
static double *src_tensor(Conv *c, const char *name, int ndim, int64_t s0, int64_t s1) {
    const StTensor *t = st_find(c->src, name);
    if (!t) {
        set_err(c->err, c->errlen, "%s: %s: missing tensor (not a dense checkpoint of the stated config)", c->src_name,
                name);
        return NULL;
    }
    if (t->dtype != ST_F32 && t->dtype != ST_F64 && t->dtype != ST_BF16) {
        set_err(c->err, c->errlen, "%s: %s: unsupported dtype (expected F32, F64 or BF16)", c->src_name, name);
        return NULL;
    }
    if (t->ndim != ndim || t->shape[0] != s0 || (ndim == 2 && t->shape[1] != s1)) {
        set_err(c->err, c->errlen, "%s: %s: shape differs from the dense config's", c->src_name, name);
        return NULL;
    }
    c->used[t - c->src->tensors] = 1;
    double *x = xmalloc((t->numel ? t->numel : 1) * sizeof *x);
    st_to_f64(t, x);
    return x;
}

/* Writes x[numel] into the target tensor `name` (which must exist with that many elements). */
static int put(Conv *c, const char *name, const double *x, size_t numel) {
    const ParamTensor *p = model_find_tensor(c->m, name);
    if (!p || p->numel != numel) {
        set_err(c->err, c->errlen, "%s: the target model has %s tensor %s (its architecture does not take a dense "
                "layer one to one)", c->src_name, p ? "a differently sized" : "no", name);
        return -1;
    }
    scalar_t *tmp = xmalloc((numel ? numel : 1) * sizeof *tmp);
    for (size_t i = 0; i < numel; i++) tmp[i] = (scalar_t)x[i];
    c->m->be->to_device(c->m->be, c->m->params + p->offset, tmp, numel * sizeof *tmp);
    free(tmp);
    return 0;
}

/* Copies one tensor under a new name. */
static int copy_tensor(Conv *c, const char *from, const char *to, int ndim, int64_t s0, int64_t s1) {
    double *x = src_tensor(c, from, ndim, s0, s1);
    if (!x) return -1;
    int rc = put(c, to, x, (size_t)s0 * (size_t)(ndim == 2 ? s1 : 1));
    free(x);
    return rc;
}

static double std_unbiased(const double *x, size_t n) {
    if (n < 2) return 0.0;
    double mean = 0.0, ss = 0.0;
    for (size_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    return sqrt(ss / (double)(n - 1));
}

/* The FFN of dense layer a into the experts of target MoE layer l (prefix pre). */
static int convert_ffn(Conv *c, int a, const char *pre, int l, int64_t Fd, const UpcycleOptions *o, Rng *rng) {
    const ModelConfig *t = &c->m->cfg;
    const int64_t C = t->d_model, E = t->ff_n_experts, S = t->ff_expert_size;
    char name[160];
    const int64_t G = Fd / S;
    double *w1 = NULL, *b1 = NULL, *w2 = NULL, *b2 = NULL;
    int rc = -1;
    snprintf(name, sizeof name, "transformer.layers.%d.ffn.linear1.weight", a);
    if (!(w1 = src_tensor(c, name, 2, Fd, C))) goto done;
    snprintf(name, sizeof name, "transformer.layers.%d.ffn.linear1.bias", a);
    if (!(b1 = src_tensor(c, name, 1, Fd, 0))) goto done;
    snprintf(name, sizeof name, "transformer.layers.%d.ffn.linear2.weight", a);
    if (!(w2 = src_tensor(c, name, 2, C, Fd))) goto done;
    snprintf(name, sizeof name, "transformer.layers.%d.ffn.linear2.bias", a);
    if (!(b2 = src_tensor(c, name, 1, C, 0))) goto done;
    const double sd1 = o->noise * std_unbiased(w1, (size_t)(Fd * C));
    const double sd2 = o->noise * std_unbiased(w2, (size_t)(C * Fd));

    double *keys = xmalloc((size_t)(E * C * S) * sizeof *keys);   /* [E, C, S] */
    double *kb = xmalloc((size_t)(E * S) * sizeof *kb);           /* [E, S] */
    double *values = xmalloc((size_t)(E * S * C) * sizeof *values); /* [E, S, C] */
    double *vb = xmalloc((size_t)(E * C) * sizeof *vb);           /* [E, C] */
    int64_t *perm = xmalloc((size_t)Fd * sizeof *perm);           /* [F] hidden unit of each position */
    for (int64_t e = 0; e < E; e++) {
        const int64_t g = e % G;
        if (g == 0) { /* a new replica: a fresh permutation (split), the identity (copy) */
            for (int64_t f = 0; f < Fd; f++) perm[f] = f;
            if (o->method == UPCYCLE_SPLIT)
                for (int64_t f = Fd - 1; f > 0; f--) { /* Fisher-Yates */
                    int64_t j = (int64_t)rng_below(rng, (uint64_t)f + 1), tmp = perm[f];
                    perm[f] = perm[j];
                    perm[j] = tmp;
                }
        }
        for (int64_t s = 0; s < S; s++) {
            const int64_t f = perm[g * S + s];
            kb[e * S + s] = b1[f];
            for (int64_t ch = 0; ch < C; ch++) {
                keys[(e * C + ch) * S + s] = w1[f * C + ch];
                values[(e * S + s) * C + ch] = w2[ch * Fd + f];
            }
        }
        for (int64_t ch = 0; ch < C; ch++) vb[e * C + ch] = b2[ch] / (double)G;
        if (o->noise > 0) {
            for (int64_t i = 0; i < C * S; i++) keys[e * C * S + i] += sd1 * rng_normal(rng);
            for (int64_t i = 0; i < S * C; i++) values[e * S * C + i] += sd2 * rng_normal(rng);
        }
    }
    rc = 0;
    const struct { const char *suffix; const double *x; size_t n; } outs[] = {
        {"ffn.keys", keys, (size_t)(E * C * S)},
        {"ffn.keys_bias", kb, (size_t)(E * S)},
        {"ffn.values", values, (size_t)(E * S * C)},
        {"ffn.values_bias", vb, (size_t)(E * C)},
    };
    for (size_t i = 0; i < sizeof outs / sizeof outs[0] && rc == 0; i++) {
        snprintf(name, sizeof name, "%s.%d.%s", pre, l, outs[i].suffix);
        rc = put(c, name, outs[i].x, outs[i].n);
    }
    free(keys);
    free(kb);
    free(values);
    free(vb);
    free(perm);
done:
    free(w1);
    free(b1);
    free(w2);
    free(b2);
    return rc;
}

int upcycle_convert(Model *m, const StFile *src, const ModelConfig *d, const UpcycleOptions *o, const char *src_name,
                    char *err, size_t errlen) {
    const ModelConfig *t = &m->cfg;
    Conv c = {m, src, src_name, err, errlen, xcalloc((size_t)src->n_tensors + 1, 1)};
    int rc = -1;
    model_init_weights(m, (uint64_t)o->seed); /* the router and anything not converted: the target's own init */
    Rng rng;
    rng_seed(&rng, (uint64_t)o->seed + 1);
    const int64_t C = t->d_model, V = t->n_tokens, HD = (int64_t)t->n_heads * t->d_head, F = d->d_ff;
    char from[160], to[160];
    /* the wrapper's tensors, under the same names */
    if (copy_tensor(&c, "embedding.weight", "embedding.weight", 2, V, C)) goto done;
    if (copy_tensor(&c, "lm_head.weight", "lm_head.weight", 2, V, C)) goto done;
    if (t->lm_head_bias && copy_tensor(&c, "lm_head.bias", "lm_head.bias", 1, V, 0)) goto done;
    if (t->out_norm_affine && (copy_tensor(&c, "out_norm.weight", "out_norm.weight", 1, C, 0) ||
                               copy_tensor(&c, "out_norm.bias", "out_norm.bias", 1, C, 0)))
        goto done;
    const struct { const char *suffix; int ndim; int64_t s0, s1; bool ffn; } layer[] = {
        {"attention.q.weight", 2, HD, C, false}, {"attention.k.weight", 2, HD, C, false},
        {"attention.v.weight", 2, HD, C, false}, {"attention.o.weight", 2, C, HD, false},
        {"ln1.weight", 1, C, 0, false},          {"ln1.bias", 1, C, 0, false},
        {"ln2.weight", 1, C, 0, false},          {"ln2.bias", 1, C, 0, false},
        {"ffn.linear1.weight", 2, F, C, true},   {"ffn.linear1.bias", 1, F, 0, true},
        {"ffn.linear2.weight", 2, C, F, true},   {"ffn.linear2.bias", 1, C, 0, true},
    };
    for (int a = 0; a < t->n_layers; a++) {
        const LayerApp *app = &m->apps[a];
        if (app->rep != 0) { /* a shared layer: two dense layers would have to become one */
            set_err(err, errlen, "%s: application %d reuses layer %d: shared layers cannot take a dense layer one to "
                    "one", src_name, a, app->layer);
            goto done;
        }
        const char *pre = m->layer_prefix[app->kind];
        const bool dense = app->kind == LAYER_DENSE;
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++) {
            if (layer[i].ffn && !dense) continue;
            snprintf(from, sizeof from, "transformer.layers.%d.%s", a, layer[i].suffix);
            snprintf(to, sizeof to, "%s.%d.%s", pre, app->layer, layer[i].suffix);
            if (copy_tensor(&c, from, to, layer[i].ndim, layer[i].s0, layer[i].s1)) goto done;
        }
        if (!dense && convert_ffn(&c, a, pre, app->layer, F, o, &rng)) goto done;
    }
    for (int i = 0; i < src->n_tensors; i++)
        if (!c.used[i]) {
            set_err(err, errlen, "%s: %s: unexpected tensor (not a dense checkpoint of the stated config)", src_name,
                    src->tensors[i].name);
            goto done;
        }
    rc = 0;
done:
    free(c.used);
    return rc;
}

/* ---- the stage ---- */

static int save(Model *m, const char *path, const char *upcycle_json, char *err, size_t errlen) {
    const size_t n = model_n_state(m);
    scalar_t *tmp = xmalloc((n ? n : 1) * sizeof *tmp);
    float *host = xmalloc((n ? n : 1) * sizeof *host);
    m->be->to_host(m->be, tmp, m->params, n * sizeof *tmp);
    for (size_t i = 0; i < n; i++) host[i] = (float)tmp[i];
    free(tmp);
    cJSON *cfg = model_config_to_json(&m->cfg);
    CHECK_ALLOC(cfg);
    char *cfg_text = cJSON_PrintUnformatted(cfg);
    CHECK_ALLOC(cfg_text);
    cJSON_Delete(cfg);
    StWriter w;
    st_writer_init(&w);
    for (int i = 0; i < model_n_tensors(m); i++) {
        const ParamTensor *t = model_tensor(m, i);
        st_writer_add(&w, t->name, ST_F32, t->ndim, t->shape, host + t->offset);
    }
    st_writer_meta(&w, "config", cfg_text);
    st_writer_meta(&w, "format", "pt");
    st_writer_meta(&w, "upcycle", upcycle_json);
    int rc = st_writer_save(&w, path, err, errlen);
    st_writer_free(&w);
    cJSON_free(cfg_text);
    free(host);
    return rc;
}

int upcycle_run(const char *dense_path, const ModelConfig *target_cfg, const UpcycleOptions *o,
                const char *target_source, const char *out_path, char *err, size_t errlen) {
    ModelConfig dense;
    if (model_read_checkpoint_config(dense_path, &dense, err, errlen) != 0) return -1;
    if (dense.arch != ARCH_DENSE) {
        set_err(err, errlen, "%s: not a dense checkpoint (its config has arch \"%s\"): upcycling converts a dense "
                "model", dense_path, model_arch_name(dense.arch));
        return -1;
    }
    if (upcycle_check(&dense, target_cfg, o, target_source, err, errlen) != 0) return -1;
    char sha[65];
    if (sha256_file_hex(dense_path, sha, err, errlen) != 0) return -1;
    StFile f;
    if (st_read(&f, dense_path, err, errlen) != 0) return -1;
    Backend *be = backend_create("cpu", err, errlen);
    if (!be) {
        st_free(&f);
        return -1;
    }
    Model *m = model_create(target_cfg, be);
    CHECK_ALLOC(m);
    int rc = upcycle_convert(m, &f, &dense, o, dense_path, err, errlen);
    st_free(&f);
    if (rc == 0) {
        cJSON *u = cJSON_CreateObject();
        CHECK_ALLOC(u);
        CHECK_ALLOC(cJSON_AddStringToObject(u, "from", o->from));
        CHECK_ALLOC(cJSON_AddStringToObject(u, "method", upcycle_method_name(o->method)));
        CHECK_ALLOC(cJSON_AddNumberToObject(u, "seed", (double)o->seed));
        CHECK_ALLOC(cJSON_AddNumberToObject(u, "noise", o->noise));
        CHECK_ALLOC(cJSON_AddStringToObject(u, "source", dense_path));
        CHECK_ALLOC(cJSON_AddStringToObject(u, "source_sha256", sha));
        char *text = cJSON_PrintUnformatted(u);
        CHECK_ALLOC(text);
        cJSON_Delete(u);
        rc = save(m, out_path, text, err, errlen);
        cJSON_free(text);
    }
    model_free(m);
    backend_destroy(be);
    return rc;
}
