/* The sections of bin/report, each written to both formats of the document (report_doc.h) from the loaded runs
 * (report_runs.h). report_sections.c: caveats, runs, headline, pooled and per-module accuracy, curves, depth maps;
 * report_seed_sections.c: across seeds, paired comparisons, verdicts; report_provenance.c: config differences,
 * provenance; report_document.c: the order of the sections. */
#ifndef PIPELINE_REPORT_SECTIONS_H
#define PIPELINE_REPORT_SECTIONS_H

#include "pipeline/report_doc.h"
#include "pipeline/report_runs.h"

/* The paper's four headline numbers (dm-math-protocol.md §4): extrapolate accuracy on the headline module, in %. */
typedef struct {
    const char *arch, *loss_mode, *label;
    double paper_percent;
} PaperNumber;
extern const PaperNumber PAPER_HEADLINE[4]; /* dense qa, dense answer_only, moeut qa, moeut answer_only */

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
void section_provenance(Doc *d, const ReportInput *in);
/* report_routing.c: the expert load of the runs with routing statistics (nothing without any), and the ablation
 * tables of run configs that share an arch and loss mode (nothing when every config is alone in its family). */
void section_expert_load(Doc *d, const ReportInput *in);
void section_ablations(Doc *d, const ReportInput *in);

void section_verdicts(Doc *d, const ReportInput *in);
void section_seeds(Doc *d, const ReportInput *in);
void section_comparisons(Doc *d, const ReportInput *in);
void section_config_diff(Doc *d, const ReportInput *in);

/* Largest number of seeds of any run config (0 without results). */
int report_max_seeds(const ReportInput *in);

#endif
