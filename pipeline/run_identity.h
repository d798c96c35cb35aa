/* Which run config and which training seed a run directory holds (INTERFACES.md §2): the config's own seed lives in
 * runs/EXP/RUN, every other seed S in runs/EXP/RUN.seed<S>. Records written after the seeds work carry "run_config",
 * "seed" and "overrides" themselves; older records do not, so the report derives them from the directory name and
 * the recorded run config, and checks the two agree when both exist. */
#ifndef PIPELINE_RUN_IDENTITY_H
#define PIPELINE_RUN_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* "moeut_answer.seed2" -> config "moeut_answer", seed 2, has_seed_suffix true; "moeut_answer" -> "moeut_answer",
 * has_seed_suffix false (seed untouched). Only a trailing ".seed<digits>" counts ("x.seed", "x.seed2b" are names).
 * Returns 0, or -1 when the config name does not fit in cap. */
int run_name_split(const char *run, char *config, size_t cap, long *seed, bool *has_seed_suffix);

/* The optional identity fields of a record (result.json or analysis.json), read from its raw JSON. */
typedef struct {
    bool has_seed, has_run_config, has_overrides;
    long seed;
    char run_config[128];
    char overrides[1024]; /* the canonical list joined with ", " ("" when none) */
} RecordIdentity;

/* Reads "seed" (integer), "run_config" (string), "overrides" (array of strings) when present; a present field of
 * the wrong type is an error "<path>: <field>: ...". Returns 0 or -1 with err. */
int record_identity_read(const cJSON *record, const char *path, RecordIdentity *id, char *err, size_t errlen);

/* The run's identity from every source: the record's fields win; else the directory-name suffix; else the
 * recorded config's train.seed (the config's own seed). A record field that disagrees with the directory name is an
 * error naming the file (a run copied into another seed's directory). *seed = -1 when nothing says. */
int run_identity_resolve(const char *run, const RecordIdentity *rec, const cJSON *config, const char *path,
                         char *run_config, size_t cap, long *seed, char *err, size_t errlen);

#endif
