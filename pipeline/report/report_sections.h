/* The sections of bin/report, each written to both formats of the document (report_doc.h) from the loaded runs
 * (report_runs.h). report_sections.c: caveats, runs, headline, pooled and per-module accuracy, curves, depth maps;
 * report_seed_sections.c: across seeds, paired comparisons, verdicts; report_provenance.c: config differences,
 * provenance; report_variants.c: variants and sweeps; report_depth.c: the depth over the sampled evaluation prompts;
 * report_answer.c: the short answer; report_document.c: the order of the sections. */
#ifndef PIPELINE_REPORT_SECTIONS_H
#define PIPELINE_REPORT_SECTIONS_H

#include "pipeline/report/report_doc.h"
#include "pipeline/report/report_runs.h"
#include "pipeline/report/report_stats.h"
#include "pipeline/report/verdict.h"

/* The paper's four headline numbers (dm-math-protocol.md §4): extrapolate accuracy on the headline module, in %. */
typedef struct {
    const char *arch, *loss_mode, *label;
    double paper_percent;
} PaperNumber;
extern const PaperNumber PAPER_HEADLINE[4]; /* dense qa, dense answer_only, moeut qa, moeut answer_only */

/* The paper's four depth claims (dm-math-protocol.md §5), each "depth(a) > depth(b)", in the order of the verdicts. */
typedef struct {
    const char *claim;
    const char *arch_a, *mode_a, *arch_b, *mode_b;
} DepthClaim;
extern const DepthClaim DEPTH_CLAIMS[4];

typedef struct {
    const RunData *runs;
    int n;
    const RunGroup *groups;
    int n_groups;
} ReportInput;

/* The whole document: title, every section in order, the HTML tail. */
void report_write_document(Doc *d, const ReportInput *in, const char *experiment, const char *runs_dir);

void section_caveats(Doc *d, const ReportInput *in);
void section_overview(Doc *d, const ReportInput *in);
void section_headline(Doc *d, const ReportInput *in);
void section_pooled(Doc *d, const ReportInput *in);
void section_modules(Doc *d, const ReportInput *in, int set);
void section_curves(Doc *d, const ReportInput *in);
void section_depth(Doc *d, const ReportInput *in);
/* report_depth.c: the depth analysis over the sampled evaluation prompts (depth_prompts.json): levels, mean maps,
 * the claims on both measures for all prompts and those answered correctly and wrongly, and the sensitivity of the
 * verdicts to the uninformative vector. */
void section_depth_prompts(Doc *d, const ReportInput *in);
/* Whether any run has depth_prompts.json. */
bool report_has_depth_prompts(const ReportInput *in);
/* The verdict line of depth claim k over the evaluation prompts (depth_fraction, all prompts, the paper's
 * counterfactual vector), written as a list item; returns its verdict, and why in *why. */
Verdict depth_prompts_verdict_line(Doc *d, const ReportInput *in, int k, VerdictWhy *why);
void section_provenance(Doc *d, const ReportInput *in);
/* report_settings.c: the loss-mode effect at every training setting the runs hold (budget, learning rate): pairs that
 * differ in the loss mode alone get the paired effect, others are "not comparable", naming the keys; nothing when the
 * runs hold only the paper's pair per architecture. */
void section_loss_mode_settings(Doc *d, const ReportInput *in);
/* Which of the two loss-mode effects carries the interaction (both - its decomposition into MoEUT's effect minus the
 * Transformer's), as a phrase, judged on each contrast's verdict interval by the direction rule: "the interaction
 * itself is not resolved", "both effects are resolved, ...", "it is carried by the Transformer's effect alone: ...". */
const char *report_interaction_carrier(const Contrast *dense, const Contrast *moeut, const Contrast *both);
/* report_routing.c: the expert load of the runs with routing statistics (nothing without any), and the ablation
 * tables of run configs that share an arch and loss mode (nothing when every config is alone in its family). */
void section_expert_load(Doc *d, const ReportInput *in);
void section_ablations(Doc *d, const ReportInput *in);
/* Cells of those tables, shared with report_upcycle.c: a set's routing statistics (NULL without), their means over
 * the layer applications (max/mean load, unused share, entropy; "n/a" without), a metric's mean over seeds ("%": as
 * a percentage), and g's paired accuracy difference to base in points with its interval ("-" for g == base). */
const RoutingStats *run_routing(const RunData *r, int set);
void fmt_routing_means(const RoutingStats *s, char *m, char *u, char *h, size_t cap);
void fmt_seed_metric(const RunGroup *g, Metric m, const char *fmt_unit, char *out, size_t cap);
void fmt_vs_baseline(const RunGroup *base, const RunGroup *g, char *out, size_t cap);
/* report_upcycle.c: per loss mode, the dense run, the MoE from scratch and the MoE upcycled from that dense run side by
 * side (nothing without an upcycled run, i.e. a run whose records have init_from). */
void section_upcycle(Doc *d, const ReportInput *in);

/* What the verdict lines said, for the short answer at the top. */
typedef struct {
    int count[VERDICT_N];         /* lines per Verdict (not comparable: a line without a verdict) */
    Verdict headline[4];          /* PAPER_HEADLINE order */
    bool at_paper_scale;          /* any headline run at the paper's scale */
    Verdict effect_acc[3], effect_loss[3]; /* Transformer, MoEUT, interaction */
    Verdict interaction_headline;
    Verdict depth[4];             /* the depth claims in their order, on the paper's four prompts */
    bool has_depth_prompts;       /* some run has depth_prompts.json: the claims were also judged over its prompts */
    Verdict depth_prompts[4];     /* ... with these verdicts (depth_fraction, the paper's counterfactual vector) */
    /* why each of those verdicts is what it is (verdict.h), in the same places */
    VerdictWhy why_headline[4], why_effect_acc[3], why_effect_loss[3], why_interaction_headline, why_depth[4],
        why_depth_prompts[4];
} VerdictTally;

/* The verdict lines (and which seeds were left out of them when a config's seeds were not pooled). */
void section_verdicts(Doc *d, const ReportInput *in, VerdictTally *t);
/* The rules behind them, collapsed (the appendix). */
void section_verdict_rules(Doc *d);
/* The first screen (report_answer.c): what ran and what differs between the runs, the verdicts with why the
 * unresolved ones are unresolved, loss and accuracy per configuration, the best point of any sweep. */
void section_answer(Doc *d, const ReportInput *in, const VerdictTally *t, const char *experiment);
/* report_variants.c: the table and sweep plots of run configs with more than one variant among the runs (nothing
 * without any). */
void section_variants(Doc *d, const ReportInput *in);
/* When the current runs of run_config (names without "@") fall into more than one variant: note = "CONFIG: seeds 1
 * and 2 not pooled: train.lr differs (0.001 / 0.002)", verdict_note = which seeds the verdicts use and which were
 * left out, and why; returns true. false (nothing written) otherwise. */
bool report_split_note(const ReportInput *in, const char *run_config, char *note, size_t cap, char *verdict_note,
                       size_t vcap);
void section_seeds(Doc *d, const ReportInput *in);
void section_comparisons(Doc *d, const ReportInput *in);
void section_config_diff(Doc *d, const ReportInput *in);

/* Largest number of seeds of any run config (0 without results). */
int report_max_seeds(const ReportInput *in);

/* The size of the runs with a result: parameters and training token slots, least and most, and as text ("922.1k"
 * or "922.1k to 928.8k"). */
typedef struct {
    int n_runs;
    double min_params, max_params, min_tokens, max_tokens;
    char params[80], tokens[80];
} ReportScale;
void report_scale(const ReportInput *in, ReportScale *s);
/* The first and last training cross-entropy of metrics.jsonl and their steps; false without two logged points. */
bool report_run_loss_span(const RunData *r, double *first, double *first_step, double *last, double *last_step);
/* report_variants.c: the best point of each sweep (a run config trained in more than one configuration): the
 * configuration with the lowest mean answer loss, named by the values of the config keys that differ among them, e.g.
 * "moeut_answer at train.lr=0.004: mean answer loss 1.234 nats, accuracy 5.1% (2 seeds; the lowest of its 3
 * configurations)", joined with "; " over the run configs. false (out "") when no run config has several. */
bool report_best_sweep_points(const ReportInput *in, char *out, size_t cap);
/* report_provenance.c: the config keys that differ between the runs with a result, as one line: "model.arch (dense /
 * moeut), train.lr (0.002 / 0.008); set in some runs only: model.d_ff, model.ff_k" (the description, comments and
 * train.seed left out: the seeds are said apart); "" when the runs' configs agree. The table of the section "What
 * differs between the runs" shows every value. Returns the number of keys. */
int report_config_diff_line(const ReportInput *in, char *out, size_t cap);

#endif
