/* The number of data-parallel ranks a run was trained with, step by step: a checkpoint written by W ranks may be
 * continued by W' (any W' that divides train.n_microbatch: the loader stream is global and micro-batch k runs on
 * rank k mod W, so the windows do not depend on W), and the records keep each change with the step it began at:
 *
 *   "world_size_history": [{"from_step": 0, "world_size": 4}, {"from_step": 20, "world_size": 2}]
 *
 * (state.json and train_summary.json). Entry i covers steps from_step_i + 1 .. from_step_(i+1) (from_step counts
 * completed steps, as "step" in state.json does). Fixed size, no allocation: it lives in TrainState, which is
 * broadcast to every rank as plain bytes. */
#ifndef MODEL_TRAINING_WORLD_SIZE_HISTORY_H
#define MODEL_TRAINING_WORLD_SIZE_HISTORY_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define WORLD_SIZE_HISTORY_MAX 64 /* changes of the number of ranks one run records */

typedef struct {
    long from_step;  /* completed steps when this number of ranks took over */
    long world_size; /* ranks */
} WorldSizeEra;

typedef struct {
    int n;
    WorldSizeEra era[WORLD_SIZE_HISTORY_MAX];
} WorldSizeHistory;

/* A run that starts at step 0 with world_size ranks. */
void world_size_history_start(WorldSizeHistory *h, long world_size);

/* The run continues at completed step `step` with world_size ranks: a new entry when the number changes (an entry
 * that trained no step, begun at this same step, is replaced, and dropped when the number returns to its
 * predecessor's). 0, or -1 with err when the history is full. */
int world_size_history_continue(WorldSizeHistory *h, long step, long world_size, char *err, size_t errlen);

/* Adds "world_size_history" (the array above) to obj. */
void world_size_history_to_json(cJSON *obj, const WorldSizeHistory *h);

/* Reads the array v (NULL: absent, as in records written before the history was kept; then the run is taken to
 * have had world_size ranks from step 0). Checked: at most WORLD_SIZE_HISTORY_MAX entries, each an object of the two
 * integer keys only, from_step starting at 0, increasing and <= step, world_size >= 1 and differing from the entry
 * before, the last equal to world_size. 0, or -1 with "<path>: world_size_history[i].KEY: ..." in err. */
int world_size_history_read(const cJSON *v, const char *path, long step, long world_size, WorldSizeHistory *h,
                            char *err, size_t errlen);

/* "4 ranks from step 0, 2 from step 20" (for messages). */
void world_size_history_describe(const WorldSizeHistory *h, char *out, size_t outlen);

#endif
