/* The tolerances file and the verdict on one metric (compare_tolerances.h). */
#include "pipeline/records/compare_tolerances.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const METRIC_VERDICT_NAMES[] = {"ok", "BETTER", "WORSE", "CHANGED", "not gated"};

/* A finite number >= 0 (> 0 when positive), else an error naming path.key. */
static int check_nonneg(double v, bool positive, const char *path, const char *key, char *err, size_t errlen) {
    if (isfinite(v) && (positive ? v > 0 : v >= 0)) return 0;
    snprintf(err, errlen, "%.700s: %.100s: must be a %s number (got %g)", path, key,
             positive ? "positive" : "non-negative", v);
    return -1;
}


/* Reads the tolerances file; returns -1 with a message in err on any problem (unknown keys included). On success
 * tol->doc holds the parsed file (tolerances_free). */
int tolerances_load(const char *path, Tolerances *tol, char *err, size_t errlen) {
    memset(tol, 0, sizeof *tol);
    cJSON *j = json_load_file(path, JSON_KIND_CONFIG, err, errlen);
    if (!j) return -1;
    JsonReader r;
    json_reader_init(&r, j, path, "");
    const char *comment = NULL;
    json_get_string(&r, "comment", &comment, true);
    const cJSON *t = json_get_object(&r, "tolerances", true);
    const cJSON *spread = json_get_object(&r, "seed_spread", false);
    int rc = json_reader_finish(&r, err, errlen);
    if (rc == 0 && spread) {
        JsonReader sr;
        json_reader_init(&sr, spread, path, "seed_spread");
        const char *why = NULL;
        json_get_double(&sr, "k", &tol->seed_k, true);
        json_get_string(&sr, "comment", &why, true);
        rc = json_reader_finish(&sr, err, errlen);
        if (rc == 0) rc = check_nonneg(tol->seed_k, true, path, "seed_spread.k", err, errlen);
    }
    if (rc == 0) {
        JsonReader tr;
        json_reader_init(&tr, t, path, "tolerances");
        const cJSON *cls[MC_N_CLASSES];
        for (int c = 0; c < MC_N_CLASSES; c++) cls[c] = json_get_object(&tr, METRIC_CLASS_NAMES[c], true);
        rc = json_reader_finish(&tr, err, errlen);
        for (int c = 0; c < MC_N_CLASSES && rc == 0; c++) {
            char p[64], k[96];
            snprintf(p, sizeof p, "tolerances.%s", METRIC_CLASS_NAMES[c]);
            Tolerance *tc = &tol->cls[c];
            /* "gated": false declares that the class cannot catch a realistic defect at this size: it then has no
             * tolerance at all (a number there would read as a check that is not made). Counts and greedy
             * disagreements are exact and always gated. */
            tc->gated = true;
            const cJSON *g = cJSON_GetObjectItemCaseSensitive(cls[c], "gated");
            if (g && !cJSON_IsBool(g)) {
                snprintf(err, errlen, "%.700s: %.100s.gated: must be true or false", path, p);
                rc = -1;
                break;
            }
            if (g && cJSON_IsFalse(g)) {
                if (c == MC_COUNT || c == MC_GREEDY) {
                    snprintf(err, errlen, "%.700s: %.100s.gated: %s is exact and cannot be not gated", path, p,
                             METRIC_CLASS_NAMES[c]);
                    rc = -1;
                    break;
                }
                tc->gated = false;
                const char *num = cJSON_GetObjectItemCaseSensitive(cls[c], "abs")   ? "abs"
                                  : cJSON_GetObjectItemCaseSensitive(cls[c], "rel") ? "rel"
                                  : cJSON_GetObjectItemCaseSensitive(cls[c], "within_baseline_ci95")
                                      ? "within_baseline_ci95"
                                      : NULL;
                if (num) {
                    snprintf(err, errlen, "%.700s: %.100s.%s: a class with \"gated\": false has no tolerance", path, p,
                             num);
                    rc = -1;
                    break;
                }
            }
            JsonReader cr;
            json_reader_init(&cr, cls[c], path, p);
            bool gated_field = true;
            json_get_bool(&cr, "gated", &gated_field, false);
            json_get_string(&cr, "comment", &tc->why, true);
            if (tc->gated) {
                json_get_double(&cr, "abs", &tc->abs, true);
                json_get_double(&cr, "rel", &tc->rel, false);
                if (c == MC_ACCURACY) json_get_bool(&cr, "within_baseline_ci95", &tc->within_ci, false);
            }
            rc = json_reader_finish(&cr, err, errlen);
            if (rc != 0) break;
            snprintf(k, sizeof k, "%s.abs", p);
            if (rc == 0) rc = check_nonneg(tc->abs, false, path, k, err, errlen);
            snprintf(k, sizeof k, "%s.rel", p);
            if (rc == 0) rc = check_nonneg(tc->rel, false, path, k, err, errlen);
            /* A relative slack on an exact class would silently turn "must match" into "roughly". */
            if (rc == 0 && tc->rel != 0 && (c == MC_COUNT || c == MC_GREEDY)) {
                snprintf(err, errlen, "%.700s: %.100s: not allowed for %s (it must match exactly or by abs)", path, k,
                         METRIC_CLASS_NAMES[c]);
                rc = -1;
            }
        }
    }
    if (rc != 0) {
        cJSON_Delete(j);
        memset(tol, 0, sizeof *tol);
        return rc;
    }
    tol->doc = j;
    return 0;
}

void tolerances_free(Tolerances *tol) {
    cJSON_Delete(tol->doc);
    tol->doc = NULL;
}

/* The distance from the baseline a metric may move: max(abs, rel * |baseline|), and for multi-seed baselines at least
 * k * sd (losses and accuracies only: counts and disagreements stay exact). */
double tolerance_allowed_delta(const Tolerances *tol, const RecordMetric *b) {
    const Tolerance *t = &tol->cls[b->klass];
    double a = fmax(t->abs, t->rel * fabs(b->value));
    if (b->klass != MC_COUNT && b->klass != MC_GREEDY) a = fmax(a, tol->seed_k * b->seed_sd);
    return a;
}

/* The verdict on one metric: b the baseline (or the seeds' mean), value the new number. */
MetricVerdict tolerance_judge_metric(const Tolerances *tol, const RecordMetric *b, double value) {
    if (!tol->cls[b->klass].gated) return MV_NOT_GATED;
    double delta = value - b->value;
    /* The 1e-12 relative slack only absorbs decimal round trips of equal numbers, never a real change. */
    bool ok = fabs(delta) <= tolerance_allowed_delta(tol, b) + 1e-12 * fmax(1.0, fabs(b->value));
    if (!ok && tol->cls[b->klass].within_ci && b->klass == MC_ACCURACY && (b->ci95[0] != 0 || b->ci95[1] != 0))
        ok = value >= b->ci95[0] && value <= b->ci95[1];
    if (ok) return MV_OK;
    if (b->klass == MC_COUNT) return MV_CHANGED;
    /* For losses and disagreement counts "worse" means larger; for accuracies, smaller. */
    bool worse = b->klass == MC_ACCURACY ? delta < 0 : delta > 0;
    return worse ? MV_WORSE : MV_BETTER;
}
