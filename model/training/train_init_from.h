/* Starting a run from converted weights (bin/train --init-from PATH): the initial checkpoint of an upcycled run
 * (bin/upcycle, model/upcycle.h) instead of the run's own initialisation. Only the weights are taken: the optimizer
 * state starts fresh, and resuming the run later continues its own checkpoints as any run does. */
#ifndef MODEL_TRAINING_TRAIN_INIT_FROM_H
#define MODEL_TRAINING_TRAIN_INIT_FROM_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "model/model.h"
#include "pipeline/records/run_provenance.h"

/* Checks that path is an initial checkpoint for the run config run (parsed into mc; source names it): its stored
 * model config equals mc, and its __metadata__.upcycle equals the run's "upcycle" section (from, method, seed, noise),
 * so a checkpoint converted for another config is refused. A run without an "upcycle" section refuses --init-from,
 * and one with it needs it. Fills prov's init_from fields (path, SHA-256 and the conversion). 0, or -1 with one
 * line in err. path NULL: only the "needs it" check. */
int train_init_from_check(const char *path, const cJSON *run, const ModelConfig *mc, const char *source,
                          RunProvenance *prov, char *err, size_t errlen);

#endif
