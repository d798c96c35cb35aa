/* Which pairs of run configurations a claim may be read on. A claim is about one factor: the architecture (MoEUT
 * against the Transformer) or the loss mode (answer-only against Q+A). Its configurations must differ in that factor
 * alone, or the difference it measures is not the factor's effect (dense_qa trained at another learning rate than
 * dense_answer says nothing about the loss mode). The keys each factor owns:
 *  - the architecture (the two runs' arch differ): the whole model section (each architecture has keys of its own,
 *    and a parameter-matched pair sizes them apart: experiments/small and paper give MoEUT other heads than the
 *    Transformer) and train.n_microbatch (the paper's DM-math recipe trains MoEUT in 2 micro-batches, the Transformer
 *    in 1; experiments/tiny and cpu_arith follow it);
 *  - the loss mode (the two runs' loss modes differ): train.loss_on_target_only.
 * Besides those, the description, the seed (train.seed: paired seeds differ in it by design) and the keys that change
 * neither training nor evaluation (config_key_is_analysis_only) may differ. Any other key makes the pair not
 * comparable. Each run configuration is a group of seeds with one recorded config (report_runs.h), so its first
 * run's config stands for all of them. */
#ifndef PIPELINE_REPORT_COMPARABLE_H
#define PIPELINE_REPORT_COMPARABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "pipeline/report/report_runs.h"

/* What a claim's line says after "not comparable: <keys>" instead of a verdict. */
#define REPORT_NO_VERDICT_REASON                                                                                       \
    "No verdict: these runs differ in more than the factor under study, so their difference is not its effect"

/* The config key of the loss mode. */
#define REPORT_LOSS_MODE_KEY "train.loss_on_target_only"

/* Whether key may differ between a and b: a key of a factor in which they differ, the description, the seed, or an
 * analysis-only key. */
bool report_key_may_differ(const RunGroup *a, const RunGroup *b, const char *key);

/* The keys in which a and b differ beyond their factors, as "train.lr differs (dense_answer 0.002 / dense_qa 0.008);
 * train.steps differs (...)" into out ("" when none; cut at cap); their number (0: a comparable pair). */
int report_pair_confounds(const RunGroup *a, const RunGroup *b, char *out, size_t cap);

/* Whether the configurations of one claim (groups[0..n), e.g. the interaction's moeut_answer, moeut_qa,
 * dense_answer, dense_qa) are pairwise comparable. Missing groups (NULL) are skipped: the claim then says the run is
 * missing. false with why = the confounds of the first pair that has any (the pairs of neighbours first: for four
 * groups 0-1 and 2-3, the loss-mode pairs, then 0-2 and 1-3, the architecture pairs). */
bool report_claim_comparable(const RunGroup *const *groups, int n, char *why, size_t cap);

#endif
