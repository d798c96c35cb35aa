/* The metrics of a result record (compare_metrics.h). */
#include "pipeline/records/compare_metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"

const char *const METRIC_CLASS_NAMES[MC_N_CLASSES] = {"accuracy",         "mean_answer_loss", "module_mean_answer_loss",
                                                      "final_train_loss", "count",            "greedy_disagreements"};

static RecordMetric *add_metric(RecordMetricList *l, MetricClass klass, double value, const double *ci, const char *fmt,
                                ...) __attribute__((format(printf, 5, 6)));
static RecordMetric *add_metric(RecordMetricList *l, MetricClass klass, double value, const double *ci, const char *fmt,
                                ...) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->m = xrealloc(l->m, (size_t)l->cap * sizeof *l->m);
    }
    RecordMetric *m = &l->m[l->n++];
    memset(m, 0, sizeof *m);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->name, sizeof m->name, fmt, ap);
    va_end(ap);
    m->klass = klass;
    m->value = value;
    if (ci) m->ci95[0] = ci[0], m->ci95[1] = ci[1];
    m->scope = EXAMPLES_NONE;
    return m;
}

static void set_scope(RecordMetric *m, ExampleScope scope, int set, const char *module) {
    m->scope = scope;
    m->set = set;
    m->module = module;
}

void record_metrics_collect(const ResultRecord *r, RecordMetricList *l) {
    add_metric(l, MC_COUNT, (double)r->n_params, NULL, "n_params");
    add_metric(l, MC_COUNT, (double)r->training.steps, NULL, "training.steps");
    add_metric(l, MC_COUNT, (double)r->training.tokens, NULL, "training.tokens");
    add_metric(l, MC_TRAIN_LOSS, r->training.final_train_loss, NULL, "training.final_train_loss");
    /* mean_accuracy has no interval of its own: for the CI rule use the mean of the two sets' interval ends. */
    double mean_ci[2] = {0.5 * (r->evaluation.sets[0].ci95[0] + r->evaluation.sets[1].ci95[0]),
                         0.5 * (r->evaluation.sets[0].ci95[1] + r->evaluation.sets[1].ci95[1])};
    set_scope(add_metric(l, MC_ACCURACY, r->evaluation.mean_accuracy, mean_ci, "evaluation.mean_accuracy"),
              EXAMPLES_BOTH_SETS, 0, NULL);
    for (int s = 0; s < EVAL_N_SETS; s++) {
        const SetEval *se = &r->evaluation.sets[s];
        const char *sn = EVAL_SET_NAMES[s];
        add_metric(l, MC_COUNT, (double)se->n, NULL, "%s.n", sn);
        set_scope(add_metric(l, MC_ACCURACY, se->accuracy, se->ci95, "%s.accuracy", sn), EXAMPLES_SET, s, NULL);
        set_scope(add_metric(l, MC_LOSS, se->mean_answer_loss, NULL, "%s.mean_answer_loss", sn), EXAMPLES_SET, s, NULL);
        add_metric(l, MC_COUNT, (double)se->greedy_n, NULL, "%s.greedy_n", sn);
        add_metric(l, MC_GREEDY, (double)(se->greedy_n - se->greedy_agree), NULL, "%s.greedy_disagreements", sn);
        for (int i = 0; i < se->n_modules; i++) {
            const ModuleEval *me = &se->modules[i];
            add_metric(l, MC_COUNT, (double)me->n, NULL, "%s.%s.n", sn, me->name);
            set_scope(add_metric(l, MC_ACCURACY, me->accuracy, me->ci95, "%s.%s.accuracy", sn, me->name),
                      EXAMPLES_MODULE, s, me->name);
            set_scope(add_metric(l, MC_MODULE_LOSS, me->mean_answer_loss, NULL, "%s.%s.mean_answer_loss", sn, me->name),
                      EXAMPLES_MODULE, s, me->name);
        }
    }
}

const RecordMetric *record_metrics_find(const RecordMetricList *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->m[i].name, name) == 0) return &l->m[i];
    return NULL;
}

void record_metrics_free(RecordMetricList *l) {
    free(l->m);
    memset(l, 0, sizeof *l);
}
