/* Which run config, which variant and which training seed a run directory holds (stages/README.md, "Seeds"). A run
 * directory is named CONFIG[@VARIANT][.seed<S>]: the config's own seed lives in runs/EXP/CONFIG, every other seed S in
 * runs/EXP/CONFIG.seed<S>; "@VARIANT" (8 hex digits, run_variant_key) marks a run whose effective config is not the
 * current one of CONFIG: a sweep point, or an earlier variant kept when the config changed (bin/runs). Records written after the seeds work carry "run_config",
 * "seed" and "overrides" themselves; older records do not, so the report derives them from the directory name and
 * the recorded run config, and checks the two agree when both exist. */
#ifndef PIPELINE_RUN_IDENTITY_H
#define PIPELINE_RUN_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* "moeut_answer.seed2" -> config "moeut_answer", seed 2, has_seed_suffix true; "moeut_answer" -> "moeut_answer",
 * has_seed_suffix false (seed untouched); "moeut_answer@1a2b3c4d.seed2" -> "moeut_answer", seed 2 (the variant is
 * dropped). Only a trailing ".seed<digits>" counts ("x.seed", "x.seed2b" are names), and only "@" + 8 lowercase hex
 * digits right before it (or at the end) is a variant. Returns 0, or -1 when the config name does not fit in cap. */
int run_name_split(const char *run, char *config, size_t cap, long *seed, bool *has_seed_suffix);

#define RUN_VARIANT_LEN 8 /* hex digits of a variant key */

/* The variant part of a run directory name ("1a2b3c4d" of "x@1a2b3c4d.seed2"), or "" when it has none. */
void run_name_variant(const char *run, char variant[RUN_VARIANT_LEN + 1]);

/* The run name without its variant ("x@1a2b3c4d.seed2" -> "x.seed2"): the name its records carry when it was kept
 * aside from the current name. Returns 0, or -1 when it does not fit in cap. */
int run_name_stable(const char *run, char *out, size_t cap);

/* The variant key of an effective run config: the first RUN_VARIANT_LEN hex digits of the SHA-256 of its canonical
 * JSON (object keys sorted, numbers as cJSON prints them) without train.seed and without the top-level "description"
 * and any "comment" (they do not change what is trained). Seeds of one configuration share it; any other difference
 * (a --set, an edited file) changes it. Returns 0, or -1 when config is not an object. */
int run_variant_key(const cJSON *config, char key[RUN_VARIANT_LEN + 1]);

/* The canonical JSON text run_variant_key hashes (caller frees), or NULL when config is not an object. */
char *run_variant_canonical(const cJSON *config);

/* The name a directory gives what it holds: its last path component ("runs/ci/" -> "ci"; "." and ".." resolved to the
 * directory's own name). evaluate names a record's experiment after the directory its run directory sits in, and
 * baselines of EXP sit in reports/baselines/EXP. 0, or -1 with err when the path cannot be resolved. */
int dir_own_name(const char *dir, char *out, size_t cap, char *err, size_t errlen);

/* A run directory's path (or a baseline record's prefix DIR/NAME) as the directory holding it and its own name:
 * "runs/ci/dense_qa/" -> "runs/ci", "dense_qa"; "dense_qa" -> ".", "dense_qa"; a last component "." or ".." is
 * resolved first. 0, or -1 with err. */
int path_parent_and_name(const char *path, char *parent, size_t pcap, char *name, size_t ncap, char *err,
                         size_t errlen);

/* Whether a record belongs where it was read (report, export, compare and its --diff all ask this): its "run" is the
 * name it was read under (run: a run directory's name, where that name without its variant counts too, as a
 * directory moved aside keeps the records of its first name; or a baseline record's NAME), and its "experiment" the
 * one it was read for (NULL: not checked). run_from and experiment_from say where those come from, for the message. A
 * record copied in from another run or experiment would otherwise be reported, compared or exported under the wrong
 * name. 0, or -1 with "<path>: run is "X", but <run_from> is "Y" (a record of another run?)" or the like for the
 * experiment. */
int record_owner_check(const char *path, const char *rec_run, const char *rec_experiment, const char *run,
                       const char *run_from, const char *experiment, const char *experiment_from, char *err,
                       size_t errlen);

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
