/* The resume policy of a training run: whether the checkpoint in the run directory continues this run (the same
 * config bytes and overrides, length and training data; for --auto-resume also the same backend), and the fresh
 * start otherwise (earlier outputs removed so stale files never pair with new weights). */
#ifndef MODEL_TRAINING_TRAIN_RESUME_H
#define MODEL_TRAINING_TRAIN_RESUME_H

#include "model/training/trainer_state.h"

/* Rank 0 starts or resumes the run directory (the only rank that touches it; metrics.jsonl is left open for
 * appending) and hands its weights, AdamW state and training state to the others. Dies with one line when --resume
 * meets a checkpoint of another run. */
void train_resume_or_start(Trainer *t);

#endif
