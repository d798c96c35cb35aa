/* Save / restore of the whole training state with an ordered, verifiable commit (protocol in train_checkpoint.h). */
#include "model/training/train_checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "model/model_internal.h" /* the dropout RNG state lives in struct Model */
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/exact_number.h"
#include "pipeline/base/log.h"
#include "pipeline/base/safetensors.h"
#include "pipeline/base/sha256.h"

#define STATE_FORMAT "dm-math-train-state"
#define STATE_VERSION 1
#define OPTIM_FORMAT "dm-math-adamw"

static void join(char *out, size_t n, const char *dir, const char *file, const char *suffix) {
    snprintf(out, n, "%s/%s%s", dir, file, suffix);
}

/* ---- exact encodings for JSON (resuming must reproduce the exact values) ----
 * Doubles are JSON numbers printed round-trip exact (pipeline/base/exact_number.h: cJSON's own printer may round the last
 * bit), null when not finite (last_ce before the first logged interval), as train_summary.json writes its numbers.
 * State files written before that hold them as "%.17g" strings; those are still read.
 * The RNG states and the loader's counters are 64-bit bit patterns, not quantities: they are written as 16-digit hex
 * strings, since a JSON number (a double in most readers, cJSON's included) holds only 53 bits. */
static void put_u64(cJSON *o, const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%016" PRIx64, v);
    cJSON_AddStringToObject(o, key, buf);
}
static void put_exact_double(cJSON *o, const char *key, double v) {
    cJSON *n = exact_number_json(v);
    CHECK_ALLOC(n);
    cJSON_AddItemToObject(o, key, n);
}
static void put_rng(cJSON *o, const char *key, const Rng *r) {
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (int i = 0; i < 4; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%016" PRIx64, r->s[i]);
        cJSON_AddItemToArray(a, cJSON_CreateString(buf));
    }
}

static int parse_u64_hex(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsString(v) || !v->valuestring || strlen(v->valuestring) != 16) return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v->valuestring, &end, 16);
    if (errno || *end != '\0') return -1;
    *out = (uint64_t)x;
    return 0;
}
/* A number (cJSON parses it with strtod: exact), null (not finite: NaN, which the domain checks then judge), or an
 * older state's "%.17g" string. */
static int parse_exact_double(const cJSON *v, double *out) {
    if (cJSON_IsNumber(v)) {
        *out = v->valuedouble;
        return 0;
    }
    if (cJSON_IsNull(v)) {
        *out = NAN;
        return 0;
    }
    if (!cJSON_IsString(v) || !v->valuestring) return -1;
    char *end = NULL;
    *out = strtod(v->valuestring, &end);
    return (end == v->valuestring || *end != '\0') ? -1 : 0;
}

/* Marks a top-level double key as known to r (number, null or an older state's string) and checks it is present. */
static void get_exact_double_key(JsonReader *r, const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(v))
        json_get_double(r, key, &(double){0}, true);
    else
        json_get_string_or_null(r, key, &(const char *){NULL}, true);
}

/* ---- optimizer state file ---- */
static StDtype scalar_dtype(void) { return sizeof(scalar_t) == 4 ? ST_F32 : ST_F64; }

static int save_optim(const char *path, Model *m, const AdamW *opt, long step, char *err, size_t errlen) {
    Backend *be = opt->be;
    size_t n = opt->n;
    scalar_t *mh = malloc(n * sizeof *mh), *vh = malloc(n * sizeof *vh);
    CHECK_ALLOC(mh);
    CHECK_ALLOC(vh);
    be->to_host(be, mh, opt->m, n * sizeof *mh);
    be->to_host(be, vh, opt->v, n * sizeof *vh);

    StWriter w;
    st_writer_init(&w);
    /* the trainable parameters only: the buffers (expert_bias) have no AdamW state */
    char (*names)[2][160] = calloc((size_t)model_n_param_tensors(m) + 1, sizeof *names);
    CHECK_ALLOC(names);
    for (int i = 0; i < model_n_param_tensors(m); i++) {
        const ParamTensor *t = model_tensor(m, i);
        snprintf(names[i][0], sizeof names[i][0], "%s.exp_avg", t->name);
        snprintf(names[i][1], sizeof names[i][1], "%s.exp_avg_sq", t->name);
        st_writer_add(&w, names[i][0], scalar_dtype(), t->ndim, t->shape, mh + t->offset);
        st_writer_add(&w, names[i][1], scalar_dtype(), t->ndim, t->shape, vh + t->offset);
    }
    char buf[32];
    st_writer_meta(&w, "format", OPTIM_FORMAT);
    snprintf(buf, sizeof buf, "%ld", step);
    st_writer_meta(&w, "step", buf);
    snprintf(buf, sizeof buf, "%ld", opt->t);
    st_writer_meta(&w, "adam_t", buf);
    int rc = st_writer_save(&w, path, err, errlen);
    st_writer_free(&w);
    free(names);
    free(mh);
    free(vh);
    return rc;
}

static int meta_long(const StFile *f, const char *path, const char *key, long *out, char *err, size_t errlen) {
    const char *s = st_meta(f, key);
    char *end = NULL;
    if (!s) {
        set_err(err, errlen, "%s: __metadata__.%s: missing", path, key);
        return -1;
    }
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0') {
        set_err(err, errlen, "%s: __metadata__.%s: not an integer: '%s'", path, key, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int load_optim(const char *path, Model *m, AdamW *opt, long expect_step, char *err, size_t errlen) {
    StFile f;
    if (st_read(&f, path, err, errlen) != 0) return -1;
    int rc = -1;
    long step = 0, adam_t = 0;
    scalar_t *mh = NULL, *vh = NULL;
    double *tmp = NULL;
    const char *fmt = st_meta(&f, "format");
    if (!fmt || strcmp(fmt, OPTIM_FORMAT) != 0) {
        set_err(err, errlen, "%s: __metadata__.format: expected \"%s\"", path, OPTIM_FORMAT);
        goto done;
    }
    if (meta_long(&f, path, "step", &step, err, errlen) || meta_long(&f, path, "adam_t", &adam_t, err, errlen))
        goto done;
    if (step != expect_step) {
        set_err(err, errlen, "%s: step %ld does not match state.json step %ld (mismatched checkpoint set)", path, step,
                expect_step);
        goto done;
    }
    if (f.n_tensors != 2 * model_n_param_tensors(m)) {
        set_err(err, errlen, "%s: %d tensors, expected %d (exp_avg and exp_avg_sq per model parameter)", path,
                f.n_tensors, 2 * model_n_param_tensors(m));
        goto done;
    }
    mh = malloc(opt->n * sizeof *mh);
    vh = malloc(opt->n * sizeof *vh);
    CHECK_ALLOC(mh);
    CHECK_ALLOC(vh);
    for (int i = 0; i < model_n_param_tensors(m); i++) {
        const ParamTensor *t = model_tensor(m, i);
        for (int k = 0; k < 2; k++) {
            char name[160];
            snprintf(name, sizeof name, "%s.%s", t->name, k == 0 ? "exp_avg" : "exp_avg_sq");
            const StTensor *s = st_find(&f, name);
            if (!s) {
                set_err(err, errlen, "%s: %s: missing", path, name);
                goto done;
            }
            int same = s->ndim == t->ndim && s->numel == t->numel;
            for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
            if (!same) {
                set_err(err, errlen, "%s: %s: shape does not match the model", path, name);
                goto done;
            }
            if (s->dtype != ST_F32 && s->dtype != ST_F64 && s->dtype != ST_BF16) {
                set_err(err, errlen, "%s: %s: not a float tensor", path, name);
                goto done;
            }
            scalar_t *dst = (k == 0 ? mh : vh) + t->offset;
            if (sizeof(scalar_t) == sizeof(float)) {
                st_to_f32(s, (float *)dst);
            } else {
                tmp = realloc(tmp, t->numel * sizeof *tmp);
                CHECK_ALLOC(tmp);
                st_to_f64(s, tmp);
                for (size_t j = 0; j < t->numel; j++) dst[j] = (scalar_t)tmp[j];
            }
        }
    }
    opt->be->to_device(opt->be, opt->m, mh, opt->n * sizeof *mh);
    opt->be->to_device(opt->be, opt->v, vh, opt->n * sizeof *vh);
    opt->t = adam_t;
    rc = 0;
done:
    free(tmp);
    free(mh);
    free(vh);
    st_free(&f);
    return rc;
}

/* ---- state.json ---- */
static cJSON *state_to_json(const TrainState *st, const char *model_sha, const char *optim_sha) {
    cJSON *o = cJSON_CreateObject();
    CHECK_ALLOC(o);
    cJSON_AddStringToObject(o, "format", STATE_FORMAT);
    cJSON_AddNumberToObject(o, "version", STATE_VERSION);
    cJSON_AddNumberToObject(o, "step", (double)st->step);
    cJSON_AddNumberToObject(o, "total_steps", (double)st->total_steps);
    cJSON_AddStringToObject(o, "config_sha256", st->config_sha256);
    if (st->effective_config) {
        cJSON *config = cJSON_Duplicate(st->effective_config, 1);
        CHECK_ALLOC(config);
        cJSON_AddItemToObject(o, "config", config);
    }
    run_provenance_to_json(o, &st->prov);
    cJSON_AddStringToObject(o, "backend", st->backend);
    cJSON_AddStringToObject(o, "code_version", CODE_VERSION);
    cJSON_AddNumberToObject(o, "tokens", (double)st->tokens);
    cJSON_AddNumberToObject(o, "real_tokens", (double)st->real_tokens);
    put_exact_double(o, "wall_time_s", st->wall_time_s);
    put_exact_double(o, "last_ce", st->last_ce);
    cJSON *ld = cJSON_AddObjectToObject(o, "loader");
    put_rng(ld, "rng", &st->loader.rng);
    put_u64(ld, "windows", st->loader.windows);
    put_u64(ld, "examples", st->loader.examples);
    put_rng(o, "dropout_rng", &st->dropout_rng);
    cJSON *acc = cJSON_AddObjectToObject(o, "metrics_acc");
    put_exact_double(acc, "loss", st->acc.loss);
    put_exact_double(acc, "ce", st->acc.ce);
    put_exact_double(acc, "reg_ffn", st->acc.reg_ffn);
    put_exact_double(acc, "reg_att", st->acc.reg_att);
    put_exact_double(acc, "grad_norm", st->acc.grad_norm);
    put_exact_double(acc, "expert_entropy", st->acc.expert_entropy);
    /* model.seq_balance_alpha > 0 only: written when nonzero, read as 0 when absent (the same state either way) */
    if (st->acc.reg_seq != 0.0) put_exact_double(acc, "reg_seq", st->acc.reg_seq);
    cJSON_AddNumberToObject(acc, "n", (double)st->acc.n);
    cJSON *data = cJSON_AddObjectToObject(o, "data");
    cJSON_AddStringToObject(data, "tokenizer_sha256", st->data_tokenizer_sha256);
    cJSON_AddNumberToObject(data, "n_examples", (double)st->data_n_examples);
    if (st->data_train_sha256[0]) cJSON_AddStringToObject(data, "train_sha256", st->data_train_sha256);
    const long world_size = st->world_size > 0 ? st->world_size : 1;
    cJSON_AddNumberToObject(o, "world_size", (double)world_size);
    WorldSizeHistory history = st->world_size_history;
    if (history.n == 0) world_size_history_start(&history, world_size); /* a state made without one: one part */
    world_size_history_to_json(o, &history);
    cJSON *files = cJSON_AddObjectToObject(o, "files");
    cJSON_AddStringToObject(files, TRAIN_MODEL_FILE, model_sha);
    cJSON_AddStringToObject(files, TRAIN_OPTIM_FILE, optim_sha);
    return o;
}

/* Strict reader of state.json; model_sha/optim_sha receive the recorded file hashes. */
static int state_from_json(const cJSON *o, const char *path, TrainState *st, char model_sha[65], char optim_sha[65],
                           char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    JsonReader r;
    json_reader_init(&r, o, path, "");
    const char *format = NULL, *cfg = NULL, *backend = NULL, *code = NULL;
    long version = 0, step = 0, total = 0, tokens = 0, real_tokens = 0, world_size = 1;
    json_get_string(&r, "format", &format, true);
    json_get_int(&r, "version", &version, true);
    json_get_int(&r, "step", &step, true);
    json_get_int(&r, "total_steps", &total, true);
    json_get_string(&r, "config_sha256", &cfg, true);
    json_get_object(&r, "config", false); /* for pipeline/plan/run_variants.c; absent in older states */
    run_provenance_read(&r, &st->prov);
    json_get_string(&r, "backend", &backend, true);
    json_get_string(&r, "code_version", &code, true);
    json_get_int(&r, "tokens", &tokens, true);
    json_get_int(&r, "real_tokens", &real_tokens, true);
    json_get_int(&r, "world_size", &world_size, false); /* absent in checkpoints written before data-parallel training: one process */
    const cJSON *history = json_get_array(&r, "world_size_history", false); /* absent in older states */
    const cJSON *wall = cJSON_GetObjectItemCaseSensitive(o, "wall_time_s");
    const cJSON *last_ce = cJSON_GetObjectItemCaseSensitive(o, "last_ce");
    get_exact_double_key(&r, o, "wall_time_s");
    get_exact_double_key(&r, o, "last_ce");
    const cJSON *ld = json_get_object(&r, "loader", true);
    const cJSON *drop = json_get_array(&r, "dropout_rng", true);
    const cJSON *acc = json_get_object(&r, "metrics_acc", true);
    const cJSON *data = json_get_object(&r, "data", true);
    const cJSON *files = json_get_object(&r, "files", true);
    if (json_reader_finish(&r, err, errlen) != 0) return -1;
    if (strcmp(format, STATE_FORMAT) != 0 || version != STATE_VERSION) {
        set_err(err, errlen, "%s: not a %s version %d file", path, STATE_FORMAT, STATE_VERSION);
        return -1;
    }
    st->step = step;
    st->total_steps = total;
    st->tokens = (uint64_t)tokens;
    st->real_tokens = (uint64_t)real_tokens;
    if (world_size < 1) {
        set_err(err, errlen, "%s: world_size: must be >= 1, got %ld", path, world_size);
        return -1;
    }
    st->world_size = world_size;
    if (world_size_history_read(history, path, step, world_size, &st->world_size_history, err, errlen) != 0) return -1;
    snprintf(st->config_sha256, sizeof st->config_sha256, "%s", cfg);
    snprintf(st->backend, sizeof st->backend, "%s", backend);
    if (parse_exact_double(wall, &st->wall_time_s) || parse_exact_double(last_ce, &st->last_ce)) {
        set_err(err, errlen, "%s: wall_time_s/last_ce: not a number", path);
        return -1;
    }

    /* RNG arrays and counters */
    const cJSON *rngs[2] = {cJSON_GetObjectItemCaseSensitive(ld, "rng"), drop};
    Rng *dst[2] = {&st->loader.rng, &st->dropout_rng};
    for (int k = 0; k < 2; k++) {
        if (!cJSON_IsArray(rngs[k]) || cJSON_GetArraySize(rngs[k]) != 4) {
            set_err(err, errlen, "%s: %s: expected an array of 4 hex strings", path, k ? "dropout_rng" : "loader.rng");
            return -1;
        }
        for (int i = 0; i < 4; i++)
            if (parse_u64_hex(cJSON_GetArrayItem(rngs[k], i), &dst[k]->s[i])) {
                set_err(err, errlen, "%s: %s[%d]: not a 16-digit hex string", path, k ? "dropout_rng" : "loader.rng",
                        i);
                return -1;
            }
    }
    if (parse_u64_hex(cJSON_GetObjectItemCaseSensitive(ld, "windows"), &st->loader.windows) ||
        parse_u64_hex(cJSON_GetObjectItemCaseSensitive(ld, "examples"), &st->loader.examples)) {
        set_err(err, errlen, "%s: loader.windows/examples: not a 16-digit hex string", path);
        return -1;
    }
    const char *acc_keys[6] = {"loss", "ce", "reg_ffn", "reg_att", "grad_norm", "expert_entropy"};
    double *acc_dst[6] = {&st->acc.loss, &st->acc.ce, &st->acc.reg_ffn, &st->acc.reg_att, &st->acc.grad_norm,
                          &st->acc.expert_entropy};
    for (int i = 0; i < 6; i++)
        if (parse_exact_double(cJSON_GetObjectItemCaseSensitive(acc, acc_keys[i]), acc_dst[i])) {
            set_err(err, errlen, "%s: metrics_acc.%s: not a number", path, acc_keys[i]);
            return -1;
        }
    const cJSON *acc_seq = cJSON_GetObjectItemCaseSensitive(acc, "reg_seq"); /* optional: seq_balance_alpha > 0 */
    st->acc.reg_seq = 0.0;
    if (acc_seq && parse_exact_double(acc_seq, &st->acc.reg_seq)) {
        set_err(err, errlen, "%s: metrics_acc.reg_seq: not a number", path);
        return -1;
    }
    const cJSON *accn = cJSON_GetObjectItemCaseSensitive(acc, "n");
    const cJSON *tsha = cJSON_GetObjectItemCaseSensitive(data, "tokenizer_sha256");
    const cJSON *nex = cJSON_GetObjectItemCaseSensitive(data, "n_examples");
    const cJSON *msha = cJSON_GetObjectItemCaseSensitive(files, TRAIN_MODEL_FILE);
    const cJSON *osha = cJSON_GetObjectItemCaseSensitive(files, TRAIN_OPTIM_FILE);
    if (!cJSON_IsNumber(accn) || !cJSON_IsString(tsha) || !cJSON_IsNumber(nex) || !cJSON_IsString(msha) ||
        !cJSON_IsString(osha) || strlen(msha->valuestring) != 64 || strlen(osha->valuestring) != 64) {
        set_err(err, errlen, "%s: metrics_acc.n, data or files: missing or malformed", path);
        return -1;
    }
    /* Domains (a well-formed state with impossible numbers must not be resumed from): counts are whole numbers in
     * range, the step lies within the run, times and cross-entropies are finite and >= 0 (last_ce is NaN before the
     * first logged interval), the accumulated metrics are finite. */
    const double an = accn->valuedouble, ne = nex->valuedouble;
    if (total < 1 || step < 0 || step > total || tokens < 0 || real_tokens < 0 || real_tokens > tokens) {
        set_err(err, errlen, "%s: step %ld of total_steps %ld, tokens %ld, real_tokens %ld: out of range", path, step,
                total, tokens, real_tokens);
        return -1;
    }
    if (!(an >= 0 && an <= (double)total && an == floor(an)) || !(ne >= 0 && ne <= 9007199254740992.0 && ne == floor(ne))) {
        set_err(err, errlen, "%s: metrics_acc.n %.17g or data.n_examples %.17g: not a count in range", path, an, ne);
        return -1;
    }
    if (!(isfinite(st->wall_time_s) && st->wall_time_s >= 0) ||
        !(isnan(st->last_ce) || (isfinite(st->last_ce) && st->last_ce >= 0))) {
        set_err(err, errlen, "%s: wall_time_s %.17g / last_ce %.17g: expected finite numbers >= 0", path,
                st->wall_time_s, st->last_ce);
        return -1;
    }
    for (int i = 0; i < 6; i++)
        if (!isfinite(*acc_dst[i]) || ((i == 1 || i == 4) && *acc_dst[i] < 0)) {
            set_err(err, errlen, "%s: metrics_acc.%s: %.17g is not %s", path, acc_keys[i], *acc_dst[i],
                    i == 1 || i == 4 ? "a finite number >= 0" : "finite");
            return -1;
        }
    st->acc.n = (long)an;
    snprintf(st->data_tokenizer_sha256, sizeof st->data_tokenizer_sha256, "%s", tsha->valuestring);
    st->data_n_examples = (uint64_t)ne;
    const cJSON *trsha = cJSON_GetObjectItemCaseSensitive(data, "train_sha256"); /* optional: older states lack it */
    if (trsha && (!cJSON_IsString(trsha) || strlen(trsha->valuestring) != 64)) {
        set_err(err, errlen, "%s: data.train_sha256: expected a 64-digit hex string", path);
        return -1;
    }
    if (trsha) snprintf(st->data_train_sha256, sizeof st->data_train_sha256, "%s", trsha->valuestring);
    snprintf(model_sha, 65, "%s", msha->valuestring);
    snprintf(optim_sha, 65, "%s", osha->valuestring);
    return 0;
}

/* ---- commit protocol ---- */
static int rename_checked(const char *from, const char *to, char *err, size_t errlen) {
    if (rename(from, to) != 0) {
        set_err(err, errlen, "%s: cannot rename to %s: %s", from, to, strerror(errno));
        return -1;
    }
    return 0;
}

int train_checkpoint_recover(const char *dir, char *err, size_t errlen) {
    char state_p[4096], model_p[4096], optim_p[4096], state_f[4096], model_f[4096], optim_f[4096];
    join(state_p, sizeof state_p, dir, TRAIN_STATE_FILE, ".pending");
    join(model_p, sizeof model_p, dir, TRAIN_MODEL_FILE, ".pending");
    join(optim_p, sizeof optim_p, dir, TRAIN_OPTIM_FILE, ".pending");
    join(state_f, sizeof state_f, dir, TRAIN_STATE_FILE, "");
    join(model_f, sizeof model_f, dir, TRAIN_MODEL_FILE, "");
    join(optim_f, sizeof optim_f, dir, TRAIN_OPTIM_FILE, "");
    if (file_exists(state_p)) {
        /* Committed: finish the renames (a pending file already renamed is simply absent). */
        if (file_exists(model_p) && rename_checked(model_p, model_f, err, errlen)) return -1;
        if (file_exists(optim_p) && rename_checked(optim_p, optim_f, err, errlen)) return -1;
        if (rename_checked(state_p, state_f, err, errlen)) return -1;
        fsync_dir_of(state_f);
        return 0;
    }
    /* Not committed: the live set is the previous checkpoint; drop the partial new one. */
    if (file_exists(model_p) && unlink(model_p) != 0) {
        set_err(err, errlen, "%s: cannot remove: %s", model_p, strerror(errno));
        return -1;
    }
    if (file_exists(optim_p) && unlink(optim_p) != 0) {
        set_err(err, errlen, "%s: cannot remove: %s", optim_p, strerror(errno));
        return -1;
    }
    return 0;
}

int train_checkpoint_exists(const char *dir) {
    char p[4096];
    join(p, sizeof p, dir, TRAIN_STATE_FILE, "");
    return file_exists(p);
}

int train_checkpoint_save(const char *dir, Model *m, const AdamW *opt, TrainState *st, char *err, size_t errlen) {
    if (mkdir_p(dir, err, errlen) != 0) return -1;
    /* A leftover from an earlier interrupted save must not be mistaken for this one. */
    if (train_checkpoint_recover(dir, err, errlen) != 0) return -1;
    char state_p[4096], model_p[4096], optim_p[4096];
    join(state_p, sizeof state_p, dir, TRAIN_STATE_FILE, ".pending");
    join(model_p, sizeof model_p, dir, TRAIN_MODEL_FILE, ".pending");
    join(optim_p, sizeof optim_p, dir, TRAIN_OPTIM_FILE, ".pending");

    st->dropout_rng = m->dropout_rng;
    char model_sha[65], optim_sha[65];
    int rc = model_save_safetensors(m, model_p, err, errlen);
    if (rc == 0) rc = save_optim(optim_p, m, opt, st->step, err, errlen);
    if (rc == 0) rc = sha256_file_hex(model_p, model_sha, err, errlen);
    if (rc == 0) rc = sha256_file_hex(optim_p, optim_sha, err, errlen);
    if (rc == 0) {
        cJSON *j = state_to_json(st, model_sha, optim_sha);
        rc = json_save_file(state_p, j, err, errlen); /* the commit point */
        cJSON_Delete(j);
    }
    if (rc != 0) {
        /* Not committed: drop the partial set now (on a full disk it holds the space the next attempt needs); the
         * previous checkpoint stays the live one. err keeps the first cause. */
        char ignored[512];
        train_checkpoint_recover(dir, ignored, sizeof ignored);
        return -1;
    }
    return train_checkpoint_recover(dir, err, errlen); /* roll forward: model, optim, then state.json */
}

int train_state_read(const char *dir, TrainState *st, char *err, size_t errlen) {
    char path[4096];
    join(path, sizeof path, dir, TRAIN_STATE_FILE, "");
    cJSON *j = json_load_file(path, JSON_KIND_STATE, err, errlen);
    if (!j) return -1;
    char ms[65], os[65];
    int rc = state_from_json(j, path, st, ms, os, err, errlen);
    cJSON_Delete(j);
    return rc;
}

int train_checkpoint_load(const char *dir, Model *m, AdamW *opt, TrainState *st, char *err, size_t errlen) {
    if (train_checkpoint_recover(dir, err, errlen) != 0) return -1;
    char state_f[4096], model_f[4096], optim_f[4096];
    join(state_f, sizeof state_f, dir, TRAIN_STATE_FILE, "");
    join(model_f, sizeof model_f, dir, TRAIN_MODEL_FILE, "");
    join(optim_f, sizeof optim_f, dir, TRAIN_OPTIM_FILE, "");
    cJSON *j = json_load_file(state_f, JSON_KIND_STATE, err, errlen);
    if (!j) return -1;
    char want_model[65], want_optim[65];
    int rc = state_from_json(j, state_f, st, want_model, want_optim, err, errlen);
    cJSON_Delete(j);
    if (rc != 0) return -1;

    char have[65];
    if (sha256_file_hex(model_f, have, err, errlen) != 0) return -1;
    if (strcmp(have, want_model) != 0) {
        set_err(err, errlen, "%s: sha256 %s does not match the %s recorded in %s (mismatched checkpoint set)",
                model_f, have, want_model, state_f);
        return -1;
    }
    if (sha256_file_hex(optim_f, have, err, errlen) != 0) return -1;
    if (strcmp(have, want_optim) != 0) {
        set_err(err, errlen, "%s: sha256 %s does not match the %s recorded in %s (mismatched checkpoint set)",
                optim_f, have, want_optim, state_f);
        return -1;
    }
    if (model_load_safetensors(m, model_f, err, errlen) != 0) return -1;
    if (load_optim(optim_f, m, opt, st->step, err, errlen) != 0) return -1;
    m->dropout_rng = st->dropout_rng;
    return 0;
}
