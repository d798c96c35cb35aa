/* The report's short answer (see report_sections.h): a few lines at the top that say what the verdicts below say
 * about the paper's question, built from the verdicts themselves so that the two cannot disagree. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/report/report_sections.h"
#include "pipeline/report/report_stats.h"

static const char *short_label(Verdict v) { return verdict_label(v); }

void section_answer(Doc *d, const ReportInput *in, const VerdictTally *t) {
    doc_heading(d, 2, "Short answer");
    int have = 0;
    double max_params = 0, max_tokens = 0;
    for (int i = 0; i < in->n; i++) {
        if (!in->runs[i].has_result) continue;
        have++;
        max_params = fmax(max_params, (double)in->runs[i].res.n_params);
        max_tokens = fmax(max_tokens, (double)in->runs[i].res.training.tokens);
    }
    if (!have) {
        doc_para(d, "No run has a result record yet: nothing to say about the paper's claims.");
        return;
    }
    int total = 0;
    for (int v = 0; v < VERDICT_N; v++) total += t->count[v];
    /* A claim whose runs differ in more than its factor has no verdict, and is counted apart, never as resolved. */
    char not_comparable[256] = "";
    if (t->count[VERDICT_NOT_COMPARABLE])
        snprintf(not_comparable, sizeof not_comparable,
                 "; %d not comparable (no verdict: their runs differ in more than the factor under study)",
                 t->count[VERDICT_NOT_COMPARABLE]);
    doc_list_begin(d);
    doc_list_item(d, "Of the %d claim lines below: %d consistent with the paper, %d contradicted, %d not resolved at "
                     "this size, %d smaller than the paper's effect%s.",
                  total, t->count[VERDICT_CONSISTENT], t->count[VERDICT_CONTRADICTED], t->count[VERDICT_NOT_RESOLVED],
                  t->count[VERDICT_SMALLER_THAN_PAPER], not_comparable);
    char p[32], k[32];
    fmt_big(p, sizeof p, max_params);
    fmt_big(k, sizeof k, max_tokens);
    if (!t->at_paper_scale)
        doc_list_item(d, "Scale: at most %s parameters and %s training token slots (paper: about 228M and 6.55B), so "
                         "the paper's four absolute accuracies (41/48/36/63%%) cannot be checked here.",
                      p, k);
    else {
        int agree = 0;
        for (int i = 0; i < 4; i++) agree += t->headline[i] == VERDICT_CONSISTENT;
        doc_list_item(d, "Scale: %s parameters, %s token slots (the paper's scale); %d of the paper's four headline "
                         "accuracies lie within our intervals.",
                      p, k, agree);
    }
    doc_list_item(d, "Does answer-only loss (instead of Q+A) help, on accuracy over all examples? Transformer: %s; "
                     "MoEUT: %s; MoEUT more than the Transformer: %s (on the headline module: %s). On the answer "
                     "loss, the same three: %s; %s; %s.",
                  short_label(t->effect_acc[0]), short_label(t->effect_acc[1]), short_label(t->effect_acc[2]),
                  short_label(t->interaction_headline), short_label(t->effect_loss[0]),
                  short_label(t->effect_loss[1]), short_label(t->effect_loss[2]));
    doc_list_item(d, "Do the models use more depth as the paper says (residual erasure on the paper's four prompts)? "
                     "Transformer answer-only > Q+A: %s; MoEUT > Transformer with Q+A: %s, with answer-only: %s; "
                     "MoEUT answer-only > MoEUT Q+A: %s.",
                  short_label(t->depth[0]), short_label(t->depth[1]), short_label(t->depth[2]),
                  short_label(t->depth[3]));
    if (t->has_depth_prompts)
        doc_list_item(d, "The same four over the sampled evaluation prompts (depth_fraction, the paper's counterfactual "
                         "vector): %s; %s, %s; %s.",
                      short_label(t->depth_prompts[0]), short_label(t->depth_prompts[1]),
                      short_label(t->depth_prompts[2]), short_label(t->depth_prompts[3]));
    /* The run configs the verdicts read: the primary group of each of the paper's four configurations. */
    char seeds[1024] = "", notes[4096] = "";
    size_t len = 0, nlen = 0;
    for (int k = 0; k < 4 && len < sizeof seeds && nlen < sizeof notes; k++) {
        const RunGroup *g = report_find_group(in->groups, in->n_groups, PAPER_HEADLINE[k].arch,
                                              PAPER_HEADLINE[k].loss_mode);
        if (!g) {
            len += (size_t)snprintf(seeds + len, sizeof seeds - len, "%s%s missing", len ? ", " : "",
                                    PAPER_HEADLINE[k].label);
            continue;
        }
        len += (size_t)snprintf(seeds + len, sizeof seeds - len, "%s%s %d", len ? ", " : "", g->run_config, g->n);
        char note[2048], vnote[2048];
        if (report_split_note(in, g->run_config, note, sizeof note, vnote, sizeof vnote))
            nlen += (size_t)snprintf(notes + nlen, sizeof notes - nlen, "; %s", note);
    }
    doc_list_item(d, "Seeds behind the verdicts: %s%s.", seeds, notes);
    doc_list_end(d);
}
