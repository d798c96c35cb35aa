/* The resume policy of a training run: whether the checkpoint in the run directory continues this run (the same
 * config bytes and overrides, length and training data; for --auto-resume also the same backend), and the fresh
 * start otherwise (earlier outputs removed so stale files never pair with new weights). */
#ifndef MODEL_TRAINING_TRAIN_RESUME_H
#define MODEL_TRAINING_TRAIN_RESUME_H

#include <stdbool.h>
#include <stddef.h>

#include "model/training/trainer_state.h"

/* Whether the checkpoint described by peek (its state.json) continues the run t is set up for: the same config bytes
 * and --set overrides, length and training data (checkpoints written before the shard's sha256 was recorded are
 * checked on tokenizer and example count only), and for --auto-resume also the same backend (a continuation on
 * another backend is not bit-identical, so a run that resumes on its own is always the one an uninterrupted run would
 * have produced). If not, why says why in one sentence naming what changed. */
bool train_resume_compatible(const Trainer *t, const TrainState *peek, char *why, size_t whylen);

/* Rank 0 starts or resumes the run directory (the only rank that touches it; metrics.jsonl is left open for
 * appending) and hands its weights, AdamW state and training state to the others. Dies with one line when --resume
 * meets a checkpoint of another run. */
void train_resume_or_start(Trainer *t);

#endif
