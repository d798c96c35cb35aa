/* The residual-erasure depth analysis over many evaluation prompts (bin/analyze with analyze.eval_prompts > 0): the
 * stratified, seeded sample of evaluated examples, and for each one its erasure map under every "uninformative"
 * vector (the paper's counterfactual mean, the evaluation prompts' mean residual, zero), reduced to the depth measures
 * and the mean map of pipeline/records/depth_prompts_record.h, plus whether the model answers it correctly (the
 * evaluation's own teacher-forced rule, model/training/evaluation.h). The erasure itself is depth_analysis.h's. */
#ifndef MODEL_TRAINING_DEPTH_PROMPTS_H
#define MODEL_TRAINING_DEPTH_PROMPTS_H

#include <stdint.h>

#include "datasets/shard.h"
#include "model/model.h"
#include "pipeline/records/depth_prompts_record.h"
#include "pipeline/records/result_record.h"

/* The fixed seed of the draw: the same prompts for every run and seed of an experiment. */
#define DEPTH_SAMPLE_SEED 20251105ull

typedef struct {
    int set;    /* EVAL_INTERPOLATE | EVAL_EXTRAPOLATE */
    long index; /* position in the set's shard */
} DepthPick;

/* The share rule of the draw (DEPTH_SAMPLE_DEFINITION): out[k] = how many of total go to stratum k of size cap[k],
 * as equal as the sizes allow, the first strata taking one more for a remainder. Returns the sum
 * (min(total, sum cap)). */
long depth_sample_shares(long total, const long *cap, int n, long *out);

/* Draws n prompts (DEPTH_SAMPLE_DEFINITION, seeded with seed) from the first pool[s] examples of shards[s] into out
 * (room for n); returns how many were drawn (n, or every pooled example when there are fewer). */
long depth_sample_draw(const Shard shards[EVAL_N_SETS], const long pool[EVAL_N_SETS], long n, uint64_t seed,
                       DepthPick *out);

/* Analyzes the picked prompts of shards (paths name them in errors) on m: for each vector the map of every prompt,
 * its measures and the mean maps, and every prompt's correctness, into d's n_layers, map_bins, mean_map and prompts
 * (d's other fields are the caller's). cf_mean: the counterfactual's mean residuals, backend memory [L, C]. */
void depth_prompts_analyze(Model *m, const scalar_t *cf_mean, const Shard shards[EVAL_N_SETS],
                           const char *const paths[EVAL_N_SETS], const DepthPick *picks, long n,
                           DepthPromptsRecord *d);

#endif
