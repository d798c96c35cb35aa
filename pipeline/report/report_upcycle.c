/* Report section on sparse upcycling (model/upcycle.h): per loss mode, the dense run an upcycled MoE was converted
 * from, the MoE of the same arch trained from scratch, and the upcycled MoE, in one table. Which run is which comes
 * from the records: an upcycled run's result.json carries init_from (its conversion and source run config). */
#include <stdio.h>
#include <string.h>

#include "pipeline/report/report_sections.h"
#include "pipeline/report/report_stats.h"

static bool upcycled(const RunGroup *g) { return g->runs[0]->has_result && g->runs[0]->res.prov.init_path[0]; }

static const RunGroup *primary_config(const ReportInput *in, const char *run_config) {
    for (int i = 0; i < in->n_groups; i++)
        if (in->groups[i].primary && strcmp(in->groups[i].run_config, run_config) == 0) return &in->groups[i];
    return NULL;
}

/* The first primary group of arch and loss mode that did not start from converted weights. */
static const RunGroup *from_scratch(const ReportInput *in, const char *arch, const char *mode) {
    for (int i = 0; i < in->n_groups; i++) {
        const RunGroup *g = &in->groups[i];
        if (g->primary && !upcycled(g) && strcmp(g->arch, arch) == 0 && strcmp(g->loss_mode, mode) == 0) return g;
    }
    return NULL;
}

static void upcycle_row(Doc *d, const RunGroup *g, const char *role, const RunGroup *dense, const RunGroup *scratch) {
    char seeds[16], acc[32], vs_dense[96], vs_scratch[96], head[32], loss[32], depth[32], m[32], u[32], ent[32];
    snprintf(seeds, sizeof seeds, "%d", g->n);
    fmt_seed_metric(g, METRIC_MEAN, "%", acc, sizeof acc);
    if (dense) fmt_vs_baseline(dense, g, vs_dense, sizeof vs_dense);
    else snprintf(vs_dense, sizeof vs_dense, "n/a");
    if (scratch && g != dense) fmt_vs_baseline(scratch, g, vs_scratch, sizeof vs_scratch);
    else snprintf(vs_scratch, sizeof vs_scratch, "-");
    fmt_seed_metric(g, METRIC_HEADLINE, "%", head, sizeof head);
    fmt_seed_metric(g, METRIC_ANSWER_LOSS, "", loss, sizeof loss);
    fmt_seed_metric(g, METRIC_DEPTH, "", depth, sizeof depth);
    fmt_routing_means(run_routing(g->runs[0], EVAL_INTERPOLATE), m, u, ent, sizeof m);
    const char *row[] = {g->run_config, role, seeds, acc, vs_dense, vs_scratch, head, loss, depth, m, u, ent};
    doc_table_row(d, 12, row, false);
}

void section_upcycle(Doc *d, const ReportInput *in) {
    bool any = false;
    for (int i = 0; i < in->n_groups && !any; i++) any = in->groups[i].primary && upcycled(&in->groups[i]);
    if (!any) return;
    doc_heading(d, 2, "Sparse upcycling: dense, MoE from scratch, MoE upcycled");
    doc_para(d, "Per loss mode: the dense run, the MoE of the same architecture trained from its own initialisation, "
                "and the MoE whose initial weights were converted from that dense run's final checkpoint "
                "(result.json's init_from: method, seed, noise, source). Accuracy = the mean of the two sets' "
                "accuracies (mean over seeds); \"vs\" columns = the paired difference in percentage points on the "
                "same examples, with its 95%% interval (as in the ablation tables); answer loss in nats; expert load "
                "= the interpolate set's means over layer applications. The upcycled MoE also used its dense run's "
                "training: compare at equal steps after conversion, not at equal total compute.");
    const char *h[] = {"run config", "role", "seeds", "accuracy", "vs dense (points)", "vs MoE from scratch (points)",
                       "headline", "answer loss", "depth", "max/mean", "unused", "entropy"};
    for (int i = 0; i < in->n_groups; i++) {
        const RunGroup *up = &in->groups[i];
        if (!up->primary || !upcycled(up)) continue;
        const RunProvenance *p = &up->runs[0]->res.prov;
        const RunGroup *dense = primary_config(in, p->upcycle_from);
        const RunGroup *scratch = from_scratch(in, up->arch, up->loss_mode);
        char heading[256], role[160];
        snprintf(heading, sizeof heading, "%s, %s", up->run_config, mode_label(up->loss_mode));
        doc_heading(d, 3, heading);
        doc_para(d, "%s: converted from %s by %s (seed %ld, noise %g).", up->run_config, p->upcycle_from,
                 p->upcycle_method, p->upcycle_seed, p->upcycle_noise);
        doc_table_begin(d, 12, h);
        if (dense) upcycle_row(d, dense, "dense (the source)", dense, scratch);
        if (scratch) upcycle_row(d, scratch, "MoE from scratch", dense, NULL);
        snprintf(role, sizeof role, "MoE upcycled (%s)", p->upcycle_method);
        upcycle_row(d, up, role, dense, scratch);
        doc_table_end(d);
    }
}
