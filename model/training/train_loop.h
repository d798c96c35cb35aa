/* The step loop of a training run: the micro-batches of each step (with the data-parallel reduction), the NaN and
 * divergence checks, clipping and AdamW, the metrics line, accuracy during training, checkpoints and stops. */
#ifndef MODEL_TRAINING_TRAIN_LOOP_H
#define MODEL_TRAINING_TRAIN_LOOP_H

#include "model/training/trainer_state.h"

/* Trains from t->st.step to the end. Returns -1 when training finished, 0 after --stop-after, 128 + signal after a
 * stop signal (a checkpoint of the last step is saved in the last two cases). */
int train_loop(Trainer *t);

#endif
