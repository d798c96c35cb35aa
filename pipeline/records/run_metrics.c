/* The named numbers of one run (run_metrics.h). */
#include "pipeline/records/run_metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"
#include "pipeline/records/compare_metrics.h"

static void add(RunMetricList *l, double value, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(RunMetricList *l, double value, const char *fmt, ...) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->m = xrealloc(l->m, (size_t)l->cap * sizeof *l->m);
    }
    RunMetric *m = &l->m[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->name, sizeof m->name, fmt, ap);
    va_end(ap);
    m->value = value;
}

void run_metrics_described(const ResultRecord *r, const AnalysisRecord *analysis, const DepthPromptsRecord *depth,
                           RunMetricList *l) {
    add(l, r->training.wall_time_s, "training.wall_time_s");
    add(l, r->training.tokens_per_s, "training.tokens_per_s");
    add(l, r->evaluation.wall_time_s, "evaluation.wall_time_s");
    if (analysis && analysis->enabled) add(l, analysis->summary_value, "analysis.%s", analysis->summary_name);
    if (depth && depth->n_prompts > 0) {
        add(l, depth->n_prompts, "depth_prompts.n");
        for (int v = 0; v < DEPTH_N_VECTORS; v++)
            for (int k = 0; k < DEPTH_N_MEASURES; k++) {
                double sum = 0;
                for (int p = 0; p < depth->n_prompts; p++) sum += depth->prompts[p].value[v][k];
                add(l, sum / depth->n_prompts, "depth_prompts.%s.%s", DEPTH_VECTOR_NAMES[v], DEPTH_MEASURE_NAMES[k]);
            }
    }
}

void run_metrics_all(const ResultRecord *r, const AnalysisRecord *analysis, const DepthPromptsRecord *depth,
                     RunMetricList *l) {
    RecordMetricList gated = {0};
    record_metrics_collect(r, &gated);
    for (int i = 0; i < gated.n; i++) add(l, gated.m[i].value, "%s", gated.m[i].name);
    record_metrics_free(&gated);
    run_metrics_described(r, analysis, depth, l);
}

const RunMetric *run_metrics_find(const RunMetricList *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->m[i].name, name) == 0) return &l->m[i];
    return NULL;
}

void run_metrics_free(RunMetricList *l) {
    free(l->m);
    memset(l, 0, sizeof *l);
}
