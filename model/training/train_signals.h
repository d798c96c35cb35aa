/* SIGINT/SIGTERM during training: the handler only records the signal; the step loop asks at each step boundary,
 * saves a checkpoint and exits 128 + signal. */
#ifndef MODEL_TRAINING_TRAIN_SIGNALS_H
#define MODEL_TRAINING_TRAIN_SIGNALS_H

/* Installs the handlers (one-shot: a second signal kills at once; the checkpoint commit protocol keeps the
 * checkpoint sound). Dies if sigaction fails. */
void train_signals_install(void);

/* The signal every rank acts on at this step boundary: SIGINT if any rank got one, else SIGTERM if any did, else 0
 * (in a single process: the one this process got). A collective under MPI: every rank calls it at every step. */
int train_signals_agree(long step_number);

#endif
