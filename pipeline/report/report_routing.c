/* Report sections on the MoE routing: the expert load of every run that recorded routing statistics (result.json,
 * pipeline/records/routing_stats.h), and the ablation table that puts run configs of one family side by side. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/records/config_diff.h"
#include "pipeline/base/log.h"
#include "pipeline/report/report_sections.h"
#include "pipeline/report/report_stats.h"

/* The routing statistics of a run's set, or NULL. */
const RoutingStats *run_routing(const RunData *r, int set) {
    return r->has_result ? r->res.evaluation.sets[set].routing : NULL;
}

void fmt_routing_means(const RoutingStats *s, char *m, char *u, char *h, size_t cap) {
    if (!s) {
        snprintf(m, cap, "n/a");
        snprintf(u, cap, "n/a");
        snprintf(h, cap, "n/a");
        return;
    }
    double mm, uu, hh;
    routing_stats_mean(s, &mm, &uu, &hh);
    snprintf(m, cap, "%.2f", mm);
    snprintf(u, cap, "%.1f%%", 100 * uu);
    snprintf(h, cap, "%.3f", hh);
}

/* ---------------------------------------------------------------- expert load ------------------------------ */

static void expert_load_map(Doc *d, const RunGroup *g) {
    const RunData *r = g->runs[0];
    const RoutingStats *s = run_routing(r, EVAL_INTERPOLATE);
    if (!s) return;
    const int A = s->n_apps, E = s->n_experts;
    double *rel = xcalloc((size_t)A * E, sizeof *rel); /* [A, E] load relative to balanced (1 = 1/E) */
    for (int a = 0; a < A; a++)
        for (int e = 0; e < routing_stats_app_experts(s, a); e++) /* a pyramid's shorter rows stay 0 beyond E_a */
            rel[(size_t)a * E + e] = routing_stats_load(s, a, e) * routing_stats_app_experts(s, a);
    char title[256], file[256], caption[768];
    snprintf(title, sizeof title, "%s: expert load per layer application", r->name);
    snprintf(file, sizeof file, "expert_load_%s.svg", r->name);
    HeatmapStyle st = {title, "expert", "layer application", "load x E", -1, 0};
    StrBuf svg;
    sb_init(&svg);
    svg_heatmap(&svg, rel, A, E, NULL, &st);
    snprintf(caption, sizeof caption,
             "%s (run config %s, its lowest seed), interpolate set: the share of the FFN selections each expert "
             "got, times E = %d (1 = balanced, 0 = unused), per routed layer application (application %d at the "
             "bottom%s)%s; colour scale 0 to the map's maximum.",
             r->name, g->run_config, E, s->first_app,
             s->first_app > 0 ? ": the applications before it are dense layers, which route nothing" : "",
             s->app_experts ? "; the layers have different expert counts (model.ff_n_experts_per_layer): each row "
                              "times its own E_a, E the largest, the columns beyond a row's E_a left at 0"
                            : "");
    doc_figure(d, file, &svg, caption);
    sb_free(&svg);
    free(rel);
}

/* Expert-choice routing reads later positions of the batch in training, so evaluation routes otherwise: the report
 * says which runs that is and what their accuracies measure (the causal rule's; the leak is not measured). */
static void expert_choice_note(Doc *d, const ReportInput *in) {
    char names[1024] = "";
    int n = 0;
    for (int i = 0; i < in->n; i++) {
        const RunData *r = &in->runs[i];
        if (!r->has_result || !r->res.config) continue;
        const cJSON *model = cJSON_GetObjectItemCaseSensitive(r->res.config, "model");
        const cJSON *routing = cJSON_GetObjectItemCaseSensitive(model, "routing");
        if (!cJSON_IsString(routing) || strcmp(routing->valuestring, "expert_choice") != 0) continue;
        const size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s%s", n ? ", " : "", r->name);
        n++;
    }
    if (!n) return;
    char text[1600];
    snprintf(text, sizeof text,
             "Expert-choice routing (model.routing \"expert_choice\": %s): in training each expert takes its "
             "top-c positions of the micro-batch, a choice that reads later positions. Evaluation and greedy "
             "decoding route causally instead: each position alone to its top-ff_k experts of the same softmax "
             "(ff_k = round(ff_capacity_factor)), so the accuracies here are the causal rule's and the expert loads "
             "above are its loads (k = ff_k); what batch routing would leak at evaluation is not measured.",
             names);
    doc_para(d, "%s", text);
}

void section_expert_load(Doc *d, const ReportInput *in) {
    int any = 0;
    for (int i = 0; i < in->n; i++)
        for (int s = 0; s < EVAL_N_SETS; s++) any += run_routing(&in->runs[i], s) != NULL;
    if (!any) return;
    doc_heading(d, 2, "Expert load");
    doc_para(d, "How the FFN router spreads its selections over the E experts, per layer application, on the "
                "teacher-forced forwards of each evaluation set (result.json \"routing\"). Load = the share of the "
                "selections an expert got; max/mean = E times the largest load (1 = balanced, E = one expert takes "
                "all); unused = the share of experts that got no token; entropy = the entropy of the load divided "
                "by ln E (1 = balanced, 0 = one expert). The columns are means over the layer applications, and the "
                "worst application's max/mean.");
    const char *h[] = {"run", "set", "applications", "E", "k", "tokens", "max/mean", "unused", "entropy",
                       "worst max/mean"};
    doc_table_begin(d, 10, h);
    for (int i = 0; i < in->n; i++) {
        const RunData *r = &in->runs[i];
        for (int set = 0; set < EVAL_N_SETS; set++) {
            const RoutingStats *s = run_routing(r, set);
            if (!s) continue;
            char apps[16], E[32], k[16], tok[32], m[32], u[32], ent[32], worst[32];
            snprintf(apps, sizeof apps, "%d", s->n_apps);
            int e_min = s->n_experts; /* a pyramid: its smallest and largest E_a */
            for (int a = 0; a < s->n_apps; a++)
                if (routing_stats_app_experts(s, a) < e_min) e_min = routing_stats_app_experts(s, a);
            if (e_min < s->n_experts) snprintf(E, sizeof E, "%d-%d", e_min, s->n_experts);
            else snprintf(E, sizeof E, "%d", s->n_experts);
            snprintf(k, sizeof k, "%d", s->k);
            fmt_big(tok, sizeof tok, (double)s->tokens);
            fmt_routing_means(s, m, u, ent, sizeof m);
            double w = 0;
            for (int a = 0; a < s->n_apps; a++) w = fmax(w, s->apps[a].max_over_mean);
            snprintf(worst, sizeof worst, "%.2f", w);
            const char *row[] = {r->name, EVAL_SET_NAMES[set], apps, E, k, tok, m, u, ent, worst};
            doc_table_row(d, 10, row, false);
        }
    }
    doc_table_end(d);
    int capacity = 0;
    for (int i = 0; i < in->n; i++) capacity += in->runs[i].cap_steps > 0;
    if (capacity) { /* expert capacity drops assignments in training only: its share comes from metrics.jsonl */
        doc_para(d, "Expert capacity (model.ff_capacity_factor): in training each expert keeps at most its capacity "
                    "of a layer application's token-expert assignments and the others are dropped (the token passes "
                    "on through the residual for that slot); evaluation drops nothing, so the loads above are the "
                    "router's own. Dropped = the dropped share of the assignments of the logged training steps "
                    "(metrics.jsonl \"routing\", summed over the steps and layer applications).");
        const char *hc[] = {"run", "logged steps", "assignments kept", "dropped", "dropped share"};
        doc_table_begin(d, 5, hc);
        for (int i = 0; i < in->n; i++) {
            const RunData *r = &in->runs[i];
            if (r->cap_steps == 0) continue;
            char steps[16], kept[32], dropped[32], share[32];
            snprintf(steps, sizeof steps, "%d", r->cap_steps);
            fmt_big(kept, sizeof kept, (double)r->cap_kept);
            fmt_big(dropped, sizeof dropped, (double)r->cap_dropped);
            const double all = (double)r->cap_kept + (double)r->cap_dropped;
            snprintf(share, sizeof share, "%.2f%%", all > 0 ? 100.0 * (double)r->cap_dropped / all : 0.0);
            const char *row[] = {r->name, steps, kept, dropped, share};
            doc_table_row(d, 5, row, false);
        }
        doc_table_end(d);
    }
    expert_choice_note(d, in);
    for (int g = 0; g < in->n_groups; g++) expert_load_map(d, &in->groups[g]);
}

/* ---------------------------------------------------------------- ablations -------------------------------- */

/* "key=value, ..." of the keys where config i differs from config 0 ("baseline" for i = 0). */
static void differs_cell(const ConfigDiff *diff, int i, char *out, size_t cap) {
    if (i == 0) {
        snprintf(out, cap, "baseline");
        return;
    }
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < diff->n_rows; r++) {
        const char *v0 = diff->rows[r].values[0], *vi = diff->rows[r].values[i];
        if ((v0 && vi && strcmp(v0, vi) == 0) || (!v0 && !vi)) continue;
        int n = snprintf(out + len, cap - len, "%s%s=%s", len ? ", " : "", diff->rows[r].key, vi ? vi : "(absent)");
        if (n < 0 || (size_t)n >= cap - len) break;
        len += (size_t)n;
    }
    if (!out[0]) snprintf(out, cap, "(same config)");
}

void fmt_seed_metric(const RunGroup *g, Metric m, const char *fmt_unit, char *out, size_t cap) {
    SeedSummary s;
    report_seed_summary(g, m, &s);
    if (s.n == 0) snprintf(out, cap, "n/a");
    else if (strcmp(fmt_unit, "%") == 0) snprintf(out, cap, "%.1f%%", 100 * s.mean);
    else snprintf(out, cap, "%.3f", s.mean);
}

/* The paired difference of mean accuracy (both sets' examples) against the family's baseline, with its interval. */
void fmt_vs_baseline(const RunGroup *base, const RunGroup *g, char *out, size_t cap) {
    if (g == base) {
        snprintf(out, cap, "-");
        return;
    }
    const RunGroup *pair[2] = {g, base};
    const double w[2] = {1, -1};
    Contrast c;
    report_contrast(pair, w, 2, SCOPE_ALL, QUANTITY_CORRECT, &c);
    if (!c.ok) snprintf(out, cap, "n/a");
    else if (c.n_seeds == 1) /* no spread across seeds to join: the example bootstrap alone, and said so */
        snprintf(out, cap, "%+.1f [%+.1f, %+.1f] (1 seed: examples only)", 100 * c.boot.estimate, 100 * c.boot.lo,
                 100 * c.boot.hi);
    else
        snprintf(out, cap, "%+.1f [%+.1f, %+.1f] (%d seeds)", 100 * c.boot.estimate, 100 * c.verdict_lo,
                 100 * c.verdict_hi, c.n_seeds);
}

static void ablation_family(Doc *d, const ReportInput *in, int first) {
    const RunGroup *fam[64];
    int n = 0;
    const RunGroup *f0 = &in->groups[first];
    for (int g = first; g < in->n_groups && n < 64; g++)
        if (in->groups[g].primary && strcmp(in->groups[g].arch, f0->arch) == 0 && strcmp(in->groups[g].loss_mode, f0->loss_mode) == 0)
            fam[n++] = &in->groups[g];
    const cJSON **cfg = xcalloc((size_t)n, sizeof *cfg);
    for (int i = 0; i < n; i++) cfg[i] = fam[i]->runs[0]->res.config;
    const char *skip[] = {"description", "train.seed", NULL};
    ConfigDiff diff;
    config_diff((const cJSON *const *)cfg, n, skip, &diff);
    char heading[96];
    snprintf(heading, sizeof heading, "%s, %s", arch_label(f0->arch), mode_label(f0->loss_mode));
    doc_heading(d, 3, heading);
    doc_para(d, "%s, %s: %d run configs. Accuracy = the mean of the two sets' accuracies (mean over seeds); "
                "\"vs baseline\" = the paired difference in percentage points on the same examples of both sets, "
                "with its 95%% interval (bootstrap over seeds and examples, joined with the t-interval across "
                "seeds when there are several, as the verdicts use it; with one seed the interval covers the "
                "examples only, not the seed-to-seed spread); depth = the analysis' depth summary; expert load "
                "= the interpolate set's means over layer applications (section \"Expert load\").",
             arch_label(f0->arch), mode_label(f0->loss_mode), n);
    const char *h[] = {"run config", "differs from the baseline", "seeds", "accuracy", "vs baseline (points)",
                       "headline", "depth", "max/mean", "unused", "entropy"};
    doc_table_begin(d, 10, h);
    for (int i = 0; i < n; i++) {
        char differs[512], seeds[16], acc[32], vs[96], head[32], depth[32], m[32], u[32], ent[32];
        differs_cell(&diff, i, differs, sizeof differs);
        snprintf(seeds, sizeof seeds, "%d", fam[i]->n);
        fmt_seed_metric(fam[i], METRIC_MEAN, "%", acc, sizeof acc);
        fmt_vs_baseline(fam[0], fam[i], vs, sizeof vs);
        fmt_seed_metric(fam[i], METRIC_HEADLINE, "%", head, sizeof head);
        fmt_seed_metric(fam[i], METRIC_DEPTH, "", depth, sizeof depth);
        fmt_routing_means(run_routing(fam[i]->runs[0], EVAL_INTERPOLATE), m, u, ent, sizeof m);
        const char *row[] = {fam[i]->run_config, differs, seeds, acc, vs, head, depth, m, u, ent};
        doc_table_row(d, 10, row, false);
    }
    doc_table_end(d);
    config_diff_free(&diff);
    free(cfg);
}

/* Index of the first group of g's family (same arch and loss mode). */
static int family_first(const ReportInput *in, int g) {
    for (int i = 0; i < g; i++)
        if (in->groups[i].primary && strcmp(in->groups[i].arch, in->groups[g].arch) == 0 &&
            strcmp(in->groups[i].loss_mode, in->groups[g].loss_mode) == 0)
            return i;
    return g;
}

void section_ablations(Doc *d, const ReportInput *in) {
    int shared = 0; /* run configs that belong to an earlier config's family */
    for (int g = 0; g < in->n_groups; g++) shared += in->groups[g].primary && family_first(in, g) != g;
    if (!shared) return;
    doc_heading(d, 2, "Ablations: one switch at a time");
    doc_para(d, "Run configs of the same architecture and loss mode side by side (their current variants; other "
                "variants are in \"Variants and sweeps\"), each against its family's first run config (the baseline); "
                "\"differs\" lists every config key whose value is not the baseline's (the "
                "seed and the free-text description left out), so a confounded ablation shows.");
    for (int g = 0; g < in->n_groups; g++) {
        if (!in->groups[g].primary || family_first(in, g) != g) continue;
        int members = 0;
        for (int i = g; i < in->n_groups; i++) members += in->groups[i].primary && family_first(in, i) == g;
        if (members >= 2) ablation_family(d, in, g);
    }
}
