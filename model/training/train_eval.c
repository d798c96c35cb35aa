/* Accuracy during training (see train_eval.h). */
#include "model/training/train_eval.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "model/training/evaluation.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/exact_number.h"
#include "pipeline/base/limits.h"
#include "pipeline/base/log.h"

/* Temporary directory of a checkpoint being kept: "<checkpoints>/.keep.tmp.<pid>" (stale ones are removed). */
#define KEEP_TMP_PREFIX ".keep.tmp."

int train_eval_open(TrainEval *te, const TrainConfig *tc, const char *run_dir, const char *data_dir,
                    const char *tokenizer_sha256, char *err, size_t errlen) {
    memset(te, 0, sizeof *te);
    te->every = tc->evaluate_every;
    te->examples = tc->evaluate_examples;
    te->keep_checkpoints = tc->keep_checkpoints;
    if (snprintf(te->run_dir, sizeof te->run_dir, "%s", run_dir) >= (int)sizeof te->run_dir) {
        set_err(err, errlen, "%s: path too long", run_dir);
        return -1;
    }
    if (path_join_checked(te->curve_path, sizeof te->curve_path, run_dir, TRAIN_EVAL_CURVE_FILE, err, errlen) ||
        path_join_checked(te->checkpoints_dir, sizeof te->checkpoints_dir, run_dir, TRAIN_EVAL_CHECKPOINTS_DIR, err, errlen))
        return -1;
    if (te->every == 0) return 0;
    return eval_shards_open(data_dir, tokenizer_sha256, te->shards, te->shard_paths, err, errlen);
}

void train_eval_close(TrainEval *te) {
    for (int s = 0; s < EVAL_N_SETS; s++) shard_free(&te->shards[s]);
    memset(te, 0, sizeof *te);
}

int train_eval_max_tokens(const TrainEval *te) {
    if (te->every == 0) return 0;
    int n = 0;
    for (int s = 0; s < EVAL_N_SETS; s++) {
        int len = eval_max_length(&te->shards[s], te->examples) - 1; /* the input is q+a minus the last token */
        if (len > n) n = len;
    }
    return n;
}

bool train_eval_due(const TrainEval *te, long step) { return te->every > 0 && step > 0 && step % te->every == 0; }

char *train_eval_curve_line(long step, uint64_t tokens, const SetEval sets[EVAL_N_SETS]) {
    cJSON *j = cJSON_CreateObject(), *js = cJSON_CreateObject();
    CHECK_ALLOC(j);
    CHECK_ALLOC(js);
    cJSON_AddNumberToObject(j, "step", (double)step);
    cJSON_AddNumberToObject(j, "tokens", (double)tokens);
    for (int s = 0; s < EVAL_N_SETS; s++) {
        cJSON *o = cJSON_CreateObject();
        CHECK_ALLOC(o);
        cJSON_AddNumberToObject(o, "n", (double)sets[s].n);
        cJSON_AddNumberToObject(o, "correct", (double)sets[s].correct);
        cJSON_AddNumberToObject(o, "accuracy", sets[s].accuracy);
        cJSON_AddNumberToObject(o, "mean_answer_loss", sets[s].mean_answer_loss);
        cJSON_AddItemToObject(js, EVAL_SET_NAMES[s], o);
    }
    cJSON_AddItemToObject(j, "sets", js);
    char *line = json_print_exact(j, false);
    CHECK_ALLOC(line);
    cJSON_Delete(j);
    return line;
}

/* Appends line + "\n" to path by rewriting the whole file atomically (a reader never sees a torn line). */
static int append_line_atomic(const char *path, const char *line, char *err, size_t errlen) {
    char *old = NULL;
    size_t n = 0;
    if (file_exists(path) &&
        read_file_limited(path, LIMIT_JSONL_FILE_BYTES, "JSON-lines file", &old, &n, err, errlen) != 0)
        return -1;
    size_t len = strlen(line);
    char *text = xmalloc(n + len + 2);
    if (n) memcpy(text, old, n);
    if (n && text[n - 1] != '\n') text[n++] = '\n'; /* never glue a line to an unterminated one */
    memcpy(text + n, line, len);
    text[n + len] = '\n';
    int rc = write_file_atomic(path, text, n + len + 1, err, errlen);
    free(text);
    free(old);
    return rc;
}

int train_eval_run(TrainEval *te, Model *m, long step, uint64_t tokens, char *err, size_t errlen) {
    Backend *be = model_backend(m);
    const Precision training_precision = be->precision;
    be->precision = PRECISION_FP32; /* as bin/evaluate (§C.7); a bf16 run trains on in bf16 afterwards */
    const EvalConfig ec = {te->examples, 0, true};
    SetEval sets[EVAL_N_SETS];
    for (int s = 0; s < EVAL_N_SETS; s++) evaluate_set(m, &te->shards[s], te->shard_paths[s], &ec, 1, &sets[s], NULL);
    be->precision = training_precision;
    log_info("eval at step %ld: interpolate %ld/%ld (%.2f%%), extrapolate %ld/%ld (%.2f%%)", step,
             sets[EVAL_INTERPOLATE].correct, sets[EVAL_INTERPOLATE].n, 100 * sets[EVAL_INTERPOLATE].accuracy,
             sets[EVAL_EXTRAPOLATE].correct, sets[EVAL_EXTRAPOLATE].n, 100 * sets[EVAL_EXTRAPOLATE].accuracy);
    char *line = train_eval_curve_line(step, tokens, sets);
    int rc = append_line_atomic(te->curve_path, line, err, errlen);
    cJSON_free(line);
    for (int s = 0; s < EVAL_N_SETS; s++) set_eval_free(&sets[s]);
    return rc;
}

bool train_eval_checkpoint_name_ok(const char *name) {
    if (strncmp(name, "step", 4) != 0 || !name[4]) return false;
    for (const char *p = name + 4; *p; p++)
        if (*p < '0' || *p > '9') return false;
    return true;
}

int train_eval_keep_checkpoint(const TrainEval *te, Model *m, long step, const cJSON *summary, char *err,
                               size_t errlen) {
    char tmp[4608], final_dir[4608], name[64], path[4700];
    snprintf(name, sizeof name, "step%ld", step);
    if (path_join_checked(final_dir, sizeof final_dir, te->checkpoints_dir, name, err, errlen)) return -1;
    snprintf(name, sizeof name, KEEP_TMP_PREFIX "%ld", (long)getpid());
    if (path_join_checked(tmp, sizeof tmp, te->checkpoints_dir, name, err, errlen)) return -1;
    remove_stale_temps(te->checkpoints_dir, KEEP_TMP_PREFIX);
    if (remove_tree(tmp) != 0) { /* a leftover of this very pid (absent is fine) */
        set_err(err, errlen, "%s: cannot remove: %s", tmp, strerror(errno));
        return -1;
    }
    if (mkdir_p(tmp, err, errlen) != 0) return -1;
    /* the summary last, as in the run directory: its presence means the weights beside it are complete */
    int rc = path_join_checked(path, sizeof path, tmp, "model.safetensors", err, errlen);
    if (rc == 0) rc = model_save_safetensors(m, path, err, errlen);
    if (rc == 0) rc = path_join_checked(path, sizeof path, tmp, "train_summary.json", err, errlen);
    if (rc == 0) rc = json_save_file(path, summary, err, errlen);
    if (rc == 0) rc = rename_dir_atomic(tmp, final_dir, err, errlen);
    if (rc != 0) remove_tree(tmp);
    return rc;
}

int train_eval_start_over(const char *run_dir, char *err, size_t errlen) {
    char path[4352];
    if (path_join_checked(path, sizeof path, run_dir, TRAIN_EVAL_CURVE_FILE, err, errlen)) return -1;
    if (unlink(path) != 0 && errno != ENOENT) {
        set_err(err, errlen, "%s: cannot remove: %s", path, strerror(errno));
        return -1;
    }
    if (path_join_checked(path, sizeof path, run_dir, TRAIN_EVAL_CHECKPOINTS_DIR, err, errlen)) return -1;
    if (remove_tree(path) != 0) { /* absent is fine */
        set_err(err, errlen, "%s: cannot remove: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int train_eval_resume(const char *run_dir, long step, char *err, size_t errlen) {
    char path[4352];
    if (path_join_checked(path, sizeof path, run_dir, TRAIN_EVAL_CURVE_FILE, err, errlen)) return -1;
    if (jsonl_keep_steps_upto(path, step, err, errlen) != 0) return -1;
    if (path_join_checked(path, sizeof path, run_dir, TRAIN_EVAL_CHECKPOINTS_DIR, err, errlen)) return -1;
    DIR *d = opendir(path);
    if (!d) return 0; /* none kept */
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (!train_eval_checkpoint_name_ok(e->d_name) || strtol(e->d_name + 4, NULL, 10) <= step) continue;
        char sub[4700];
        rc = path_join_checked(sub, sizeof sub, path, e->d_name, err, errlen);
        if (rc == 0 && remove_tree(sub) != 0) {
            set_err(err, errlen, "%s: cannot remove: %s", sub, strerror(errno));
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

int jsonl_keep_steps_upto(const char *path, long step, char *err, size_t errlen) {
    if (!file_exists(path)) return 0;
    char *text = NULL;
    size_t n = 0;
    if (read_file_limited(path, LIMIT_JSONL_FILE_BYTES, "JSON-lines file", &text, &n, err, errlen) != 0) return -1;
    if (json_check_strings(text, n, path, err, errlen) != 0) {
        free(text);
        return -1;
    }
    char *out = xmalloc(n + 1);
    size_t o = 0;
    for (char *line = text; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char saved = line[len];
        line[len] = '\0';
        cJSON *j = cJSON_Parse(line);
        const cJSON *s = j ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
        if (cJSON_IsNumber(s) && s->valuedouble <= (double)step) {
            memcpy(out + o, line, len);
            o += len;
            out[o++] = '\n';
        }
        cJSON_Delete(j);
        line[len] = saved;
        line += len + (nl ? 1 : 0);
    }
    int rc = write_file_atomic(path, out, o, err, errlen);
    free(out);
    free(text);
    return rc;
}
