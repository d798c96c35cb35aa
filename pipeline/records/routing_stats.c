/* Routing statistics: derivation from expert counts and the strict JSON form (see routing_stats.h). */
#include "pipeline/records/routing_stats.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/base/config.h"
#include "pipeline/base/log.h"

/* Experts and applications a record may hold: far above any config (the paper has 387 experts, 18 applications),
 * low enough that a corrupt record cannot ask for gigabytes. */
#define ROUTING_MAX_EXPERTS 65536
#define ROUTING_MAX_APPS 4096
#define ROUTING_DERIVED_TOL 1e-9

static RoutingApp derive(const int64_t *counts, int E) {
    RoutingApp a = {0};
    for (int e = 0; e < E; e++) a.selections += counts[e];
    if (a.selections == 0) {
        a.unused_fraction = 1.0;
        return a;
    }
    const double c = (double)a.selections;
    int64_t max_count = 0;
    int unused = 0;
    double h = 0.0;
    for (int e = 0; e < E; e++) {
        if (counts[e] > max_count) max_count = counts[e];
        if (counts[e] == 0) {
            unused++;
            continue;
        }
        const double p = (double)counts[e] / c;
        h -= p * log(p);
    }
    a.max_over_mean = (double)max_count / c * E;
    a.unused_fraction = (double)unused / E;
    a.entropy = E > 1 ? h / log((double)E) : 1.0; /* one expert: always "balanced" */
    return a;
}

void routing_stats_from_counts(RoutingStats *s, const int64_t *counts, int first_app, int n_apps, int n_experts,
                               int k, int64_t tokens) {
    routing_stats_from_counts_per_app(s, counts, first_app, n_apps, n_experts, NULL, k, tokens);
}

int routing_stats_app_experts(const RoutingStats *s, int a) { return s->app_experts ? s->app_experts[a] : s->n_experts; }

void routing_stats_from_counts_per_app(RoutingStats *s, const int64_t *counts, int first_app, int n_apps,
                                       int n_experts, const int *app_experts, int k, int64_t tokens) {
    memset(s, 0, sizeof *s);
    s->first_app = first_app;
    s->n_apps = n_apps;
    s->n_experts = n_experts;
    s->k = k;
    s->tokens = tokens;
    const size_t n = (size_t)n_apps * (size_t)n_experts;
    s->counts = xcalloc(n + 1, sizeof *s->counts);
    if (n) memcpy(s->counts, counts, n * sizeof *s->counts);
    s->apps = xcalloc((size_t)n_apps + 1, sizeof *s->apps);
    int differ = 0;
    for (int a = 0; app_experts && a < n_apps; a++) differ |= app_experts[a] != n_experts;
    if (differ) {
        s->app_experts = xcalloc((size_t)n_apps, sizeof *s->app_experts);
        memcpy(s->app_experts, app_experts, (size_t)n_apps * sizeof *s->app_experts);
    }
    for (int a = 0; a < n_apps; a++)
        s->apps[a] = derive(s->counts + (size_t)a * n_experts, routing_stats_app_experts(s, a));
}

void routing_stats_set_dropped(RoutingStats *s, const int64_t *dropped) {
    free(s->dropped);
    s->dropped = xcalloc((size_t)s->n_apps + 1, sizeof *s->dropped);
    if (s->n_apps) memcpy(s->dropped, dropped, (size_t)s->n_apps * sizeof *s->dropped);
}

double routing_stats_dropped_fraction(const RoutingStats *s, int a) {
    if (!s->dropped) return 0.0;
    const double all = (double)s->apps[a].selections + (double)s->dropped[a];
    return all > 0 ? (double)s->dropped[a] / all : 0.0;
}

double routing_stats_load(const RoutingStats *s, int a, int e) {
    const RoutingApp *app = &s->apps[a];
    return app->selections > 0 ? (double)s->counts[(size_t)a * s->n_experts + e] / (double)app->selections : 0.0;
}

void routing_stats_mean(const RoutingStats *s, double *max_over_mean, double *unused_fraction, double *entropy) {
    double m = 0, u = 0, h = 0;
    for (int a = 0; a < s->n_apps; a++) {
        m += s->apps[a].max_over_mean;
        u += s->apps[a].unused_fraction;
        h += s->apps[a].entropy;
    }
    const double n = s->n_apps > 0 ? (double)s->n_apps : 1.0;
    *max_over_mean = m / n;
    *unused_fraction = u / n;
    *entropy = h / n;
}

static cJSON *must(cJSON *x) {
    CHECK_ALLOC(x);
    return x;
}

cJSON *routing_stats_to_json(const RoutingStats *s) {
    cJSON *o = must(cJSON_CreateObject());
    must(cJSON_AddNumberToObject(o, "n_experts", s->n_experts));
    must(cJSON_AddNumberToObject(o, "k", s->k));
    must(cJSON_AddNumberToObject(o, "tokens", (double)s->tokens));
    must(cJSON_AddNumberToObject(o, "first_application", s->first_app));
    cJSON *apps = must(cJSON_AddArrayToObject(o, "applications"));
    for (int a = 0; a < s->n_apps; a++) {
        cJSON *ao = must(cJSON_CreateObject());
        if (s->app_experts) must(cJSON_AddNumberToObject(ao, "n_experts", s->app_experts[a]));
        cJSON *c = must(cJSON_AddArrayToObject(ao, "counts"));
        for (int e = 0; e < routing_stats_app_experts(s, a); e++)
            cJSON_AddItemToArray(c, must(cJSON_CreateNumber((double)s->counts[(size_t)a * s->n_experts + e])));
        must(cJSON_AddNumberToObject(ao, "max_over_mean", s->apps[a].max_over_mean));
        must(cJSON_AddNumberToObject(ao, "unused_fraction", s->apps[a].unused_fraction));
        must(cJSON_AddNumberToObject(ao, "entropy", s->apps[a].entropy));
        if (s->dropped) must(cJSON_AddNumberToObject(ao, "dropped", (double)s->dropped[a]));
        cJSON_AddItemToArray(apps, ao);
    }
    return o;
}

/* A JSON number that is an integer in [0, 2^53] (exact in a double). */
static int exact_count(const cJSON *x, int64_t *out) {
    if (!cJSON_IsNumber(x)) return -1;
    const double v = x->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != floor(v)) return -1;
    *out = (int64_t)v;
    return 0;
}

static int read_app(RoutingStats *s, int a, const cJSON *obj, const char *source, const char *path, char *err,
                    size_t errlen) {
    char apath[320];
    snprintf(apath, sizeof apath, "%s.applications[%d]", path, a);
    if (!cJSON_IsObject(obj)) {
        set_err(err, errlen, "%s: %s: expected an object", source, apath);
        return -1;
    }
    JsonReader r;
    json_reader_init(&r, obj, source, apath);
    long app_e = s->n_experts;
    const int has_e = json_get_int(&r, "n_experts", &app_e, false) == 1;
    const cJSON *counts = json_get_array(&r, "counts", true);
    double written[3] = {0, 0, 0};
    json_get_double(&r, "max_over_mean", &written[0], true);
    json_get_double(&r, "unused_fraction", &written[1], true);
    json_get_double(&r, "entropy", &written[2], true);
    const cJSON *dropped = cJSON_GetObjectItemCaseSensitive(obj, "dropped");
    if (dropped) json_get_double(&r, "dropped", &(double){0}, false); /* read as an exact count below */
    if (json_reader_finish(&r, err, errlen)) return -1;
    if ((dropped != NULL) != (s->dropped != NULL)) { /* the first application decides: all or none */
        set_err(err, errlen, "%s: %s.dropped: %s, unlike %s", source, apath, dropped ? "present" : "missing",
                a == 0 ? "the record" : "applications[0]");
        return -1;
    }
    if (dropped && exact_count(dropped, &s->dropped[a]) != 0) {
        set_err(err, errlen, "%s: %s.dropped: not a non-negative integer", source, apath);
        return -1;
    }
    if (has_e && (app_e < s->k || app_e > s->n_experts)) {
        set_err(err, errlen, "%s: %s.n_experts: %ld, expected k (%d) to the record's n_experts (%d)", source, apath,
                app_e, s->k, s->n_experts);
        return -1;
    }
    if (has_e) {
        if (!s->app_experts) {
            s->app_experts = xcalloc((size_t)s->n_apps, sizeof *s->app_experts);
            for (int i = 0; i < s->n_apps; i++) s->app_experts[i] = s->n_experts;
        }
        s->app_experts[a] = (int)app_e;
    }
    if (cJSON_GetArraySize(counts) != (int)app_e) {
        set_err(err, errlen, "%s: %s.counts: %d entries, expected n_experts = %ld", source, apath,
                cJSON_GetArraySize(counts), app_e);
        return -1;
    }
    int64_t *row = s->counts + (size_t)a * s->n_experts;
    int e = 0;
    for (const cJSON *x = counts->child; x; x = x->next, e++)
        if (exact_count(x, &row[e]) != 0) {
            set_err(err, errlen, "%s: %s.counts[%d]: not a non-negative integer", source, apath, e);
            return -1;
        }
    s->apps[a] = derive(row, (int)app_e);
    const int64_t n_dropped = s->dropped ? s->dropped[a] : 0;
    if ((double)s->apps[a].selections + (double)n_dropped > (double)s->k * (double)s->tokens) {
        char plus[48] = "";
        if (s->dropped) snprintf(plus, sizeof plus, " + %lld dropped", (long long)n_dropped);
        set_err(err, errlen, "%s: %s.counts: %lld selections%s, more than k * tokens = %d * %lld", source, apath,
                (long long)s->apps[a].selections, plus, s->k, (long long)s->tokens);
        return -1;
    }
    const double derived[3] = {s->apps[a].max_over_mean, s->apps[a].unused_fraction, s->apps[a].entropy};
    const char *names[3] = {"max_over_mean", "unused_fraction", "entropy"};
    for (int i = 0; i < 3; i++)
        if (!(fabs(derived[i] - written[i]) <= ROUTING_DERIVED_TOL)) {
            set_err(err, errlen, "%s: %s.%s: %.17g, but the counts give %.17g", source, apath, names[i], written[i],
                    derived[i]);
            return -1;
        }
    return 0;
}

int routing_stats_from_json(RoutingStats *s, const cJSON *obj, const char *source, const char *path, char *err,
                            size_t errlen) {
    memset(s, 0, sizeof *s);
    JsonReader r;
    json_reader_init(&r, obj, source, path);
    long n_experts = 0, k = 0, tokens = 0, first_app = 0;
    json_get_int(&r, "n_experts", &n_experts, true);
    json_get_int(&r, "k", &k, true);
    json_get_int(&r, "tokens", &tokens, true);
    json_get_int(&r, "first_application", &first_app, false);
    const cJSON *apps = json_get_array(&r, "applications", true);
    if (json_reader_finish(&r, err, errlen)) return -1;
    if (n_experts < 1 || n_experts > ROUTING_MAX_EXPERTS || k < 1 || k > n_experts || tokens < 0) {
        set_err(err, errlen, "%s: %s: need 1 <= k (%ld) <= n_experts (%ld) <= %d and tokens (%ld) >= 0", source, path,
                k, n_experts, ROUTING_MAX_EXPERTS, tokens);
        return -1;
    }
    if (first_app < 0 || first_app > ROUTING_MAX_APPS) {
        set_err(err, errlen, "%s: %s.first_application: %ld, expected 0 to %d", source, path, first_app,
                ROUTING_MAX_APPS);
        return -1;
    }
    const int n_apps = cJSON_GetArraySize(apps);
    if (n_apps < 1 || n_apps > ROUTING_MAX_APPS) {
        set_err(err, errlen, "%s: %s.applications: %d entries, expected 1 to %d", source, path, n_apps,
                ROUTING_MAX_APPS);
        return -1;
    }
    s->first_app = (int)first_app;
    s->n_apps = n_apps;
    s->n_experts = (int)n_experts;
    s->k = (int)k;
    s->tokens = tokens;
    s->counts = xcalloc((size_t)n_apps * (size_t)n_experts, sizeof *s->counts);
    s->apps = xcalloc((size_t)n_apps, sizeof *s->apps);
    const cJSON *app0 = apps->child; /* expert capacity: the first application says whether "dropped" is recorded */
    if (cJSON_IsObject(app0) && cJSON_GetObjectItemCaseSensitive(app0, "dropped"))
        s->dropped = xcalloc((size_t)n_apps, sizeof *s->dropped);
    int a = 0;
    for (const cJSON *x = apps->child; x; x = x->next, a++)
        if (read_app(s, a, x, source, path, err, errlen) != 0) {
            routing_stats_free(s);
            return -1;
        }
    return 0;
}

void routing_stats_free(RoutingStats *s) {
    if (!s) return;
    free(s->counts);
    free(s->apps);
    free(s->dropped);
    free(s->app_experts);
    s->counts = NULL;
    s->apps = NULL;
    s->dropped = NULL;
    s->app_experts = NULL;
}
