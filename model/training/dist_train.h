/* The data-parallel parts of a training step that touch the model (the process group is pipeline/base/dist.h).
 *
 * Micro-batch k of a step runs on rank k mod W; every rank draws every micro-batch's windows from the one loader
 * so the sample stream is the one a single process sees. After its micro-batches each rank holds the partial sum of
 * the gradients of its micro-batches; one all-reduce over the contiguous gradient buffer gives every rank the sum
 * over all of them, after which clipping and AdamW are the same computation on identical inputs on every rank. */
#ifndef MODEL_TRAINING_DIST_TRAIN_H
#define MODEL_TRAINING_DIST_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "model/optimizer.h"
#include "model/training/train_checkpoint.h"

/* Whether this rank runs micro-batch k (always true in a single process). */
bool dist_owns_microbatch(int k);

/* The expert-dropout seed of micro-batch k of step `step` (0-based): a function of the run's dropout seed and the
 * global micro-batch index only, so the masks do not depend on which rank draws them or on W. */
uint64_t dist_microbatch_dropout_seed(uint64_t run_seed, long step, int n_microbatch, int k);

/* Refusals in a job of several ranks: one error line, not one per rank. Setup (config, data, model on every rank,
 * then rank 0's decision on the run directory) ends in two collective verdicts; from dist_setup_begin to
 * dist_setup_end a die() on any rank joins the pending verdict instead. Every rank meets the same bad config, data or
 * options, so rank 0 alone prints and the others exit 1 without a line; a rank that fails where rank 0 did not (its
 * host lacks the data) prints its own reason, and the others then stop silently at dist_setup_check, before rank 0
 * touches the run directory. A refusal by rank 0 there ends the others at dist_setup_end. No-ops for one process. */
void dist_setup_begin(void);
void dist_setup_check(void); /* every rank has its config, data and model */
void dist_setup_end(void);   /* rank 0 has started or resumed the run directory */

/* Under a launcher with several ranks: the GPU of this rank for the cuda backend, one per rank on a host
 * (DMMATH_CUDA_DEVICE = dist_device_index, unless already set). Call before creating the backend. */
void dist_assign_device(void);
/* The CUDA device index of the rank with this index on its host: the local rank among the host's visible devices,
 * or 0 where CUDA_VISIBLE_DEVICES lists a single device (the launcher bound this rank to it). */
int dist_device_index(int local_rank, const char *cuda_visible_devices);

/* Sums the gradient buffer over the ranks (in place; NCCL on the cuda backend, MPI on the cpu backend). */
void dist_allreduce_grads(Backend *be, scalar_t *grads, size_t n, long step_number);

/* balance "bias": after the optimizer step, the step's expert selection counts of every rank are summed and every
 * rank applies the same bias update (model_apply_bias_update), so the replicas stay identical. No-op otherwise. */
void dist_update_expert_bias(Model *m, double *counts_scratch, long step_number);

/* Gives every rank rank 0's weights, AdamW state and training state (after rank 0 started or resumed the run:
 * only rank 0 reads the run directory). */
void dist_broadcast_train_state(Model *m, AdamW *opt, TrainState *st);

/* Checks that the weights and AdamW moments are bit-identical on every rank (sha256 compared); an error naming the
 * ranks that differ from rank 0 otherwise. */
void dist_check_replicas(Model *m, const AdamW *opt, long step);

#endif
