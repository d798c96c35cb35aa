/* The paper's residual-erasure depth analysis of a trained model (dm-math-training-code.md §D), on token ids: the
 * prompts, the counterfactual's mean residuals, the erasure map of one prompt and its depth summary. bin/analyze
 * tokenizes the prompts, runs these and writes the record and maps.
 *
 * For each prompt (question and answer tokenized separately, inputs = q+a minus the last token, T-1 input positions):
 * the residuals h_0..h_{L-1} (embedding output, then the input of every layer application) are captured; for each
 * row l and each input position t = 1..T-2, h_l[t] is replaced by the counterfactual's mean residual of the same row,
 * applications l..L-1 are re-run (one batch of T-2 modified copies per row), and the score is the max over the last
 * len(answer) input positions of the L2 distance between the full-vocabulary softmax of the reference and of the
 * erased run. Position 0 is never erased (score 0). Everything runs in fp32 eval mode. */
#ifndef MODEL_DEPTH_ANALYSIS_H
#define MODEL_DEPTH_ANALYSIS_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

/* dm-math-protocol.md §5 / dm-math-training-code.md §D: prompts (question string, answer string) and the
 * counterfactual (question and answer in one string). */
#define DEPTH_N_PROMPTS 4
extern const char *const DEPTH_PROMPT_Q[DEPTH_N_PROMPTS];
extern const char *const DEPTH_PROMPT_A[DEPTH_N_PROMPTS];
extern const char *const DEPTH_COUNTERFACTUAL;

#define DEPTH_NAME "depth_fraction"
#define DEPTH_THRESHOLD 0.1
extern const char *const DEPTH_DEFINITION; /* the summary's definition, as the record states it */

/* Softmax of a float row in double. p[V]. */
void depth_softmax_row(const float *row, int V, double *p);

/* The "uninformative" vectors: erased[l] = mean over the counterfactual's input positions 0..Tc-2 of h_l,
 * l = 0..L-1. erased_dev: backend memory [L, C]. cf: the counterfactual's Tc tokens. */
void depth_counterfactual_means(Model *m, const int32_t *cf, int Tc, scalar_t *erased_dev);
/* The same over several sequences: erased[l] = mean of h_l over the input positions 0..T_i-2 of every sequence i
 * (each position weighs the same). seqs[i] holds lens[i] >= 2 tokens. */
void depth_residual_means(Model *m, const int32_t *const *seqs, const int *lens, int n, scalar_t *erased_dev);

/* Erasure map of one prompt. tokens[T] = question + answer ids, n_answer = len(answer) (< T-1).
 * scores[L * (T-1)]: row l, column t = input position. Returns whether the reference argmax reproduces the answer. */
bool depth_erasure_scores(Model *m, const scalar_t *erased_dev, const int32_t *tokens, int T, int n_answer,
                          double *scores);

/* The per-prompt depth summary (see DEPTH_DEFINITION). q_len = T - n_answer question tokens; scores [L, Tin]. */
double depth_fraction(const double *scores, int L, int Tin, int q_len);
/* The layer-weighted centre of the question's erasure effect (DEPTH_PROMPTS_DEFINITIONS, depth_prompts_record.h),
 * from the same per-row maxima as depth_fraction. scores [L, Tin]. */
double depth_centre(const double *scores, int L, int Tin, int q_len);
/* Adds one prompt's map to the binned sums of the mean map (DEPTH_MAP_DEFINITION): sum[L, K+1] += the prompt's mean
 * score per bin, count[K+1] += 1 for each bin the prompt has a position in. scores [L, Tin]. */
void depth_map_accumulate(const double *scores, int L, int Tin, int q_len, int K, double *sum, long *count);

#endif
