/* One tidy CSV of every run of an experiment (bin/export): one row per run directory of runs/EXP that holds a
 * result.json, one column per quantity, for pandas, R or a spreadsheet.
 *
 * Rows: every evaluated run of the runs directory by the rule report and compare share (pipeline/records/run_dirs.h:
 * a directory, or a symbolic link to one, holding a result.json; a run that cannot be read is an error, never a row
 * left out), named CONFIG[@VARIANT][.seed<S>] (pipeline/records/run_identity.h), in natural order of the names
 * ("x.seed2" before "x.seed10").
 * Columns, in this order:
 *   run            the directory name
 *   run_config     the run config it was trained from (the record's, else the directory name's)
 *   variant        run_variant_key of the record's effective config: rows with equal run_config and variant are
 *                  seeds of one configuration
 *   seed           the training seed (the record's, else the directory name's, else the config's train.seed)
 *   overrides      the --set overrides, joined with ";" ("" when none)
 *   arch, loss_mode, backend (evaluation), code_version, n_params
 *   <config keys>  every key of the record's effective config, flattened with "." ("model.d_model"), the union over
 *                  the runs in the order they appear; arrays as their JSON text, empty where a run lacks the key
 *   <metrics>      the run's named numbers (run_metrics.h: the names make diff prints, e.g. interpolate.accuracy,
 *                  extrapolate.MODULE.mean_answer_loss, training.final_train_loss, evaluation.wall_time_s), the
 *                  union over the runs in the order they appear, n_params left out (an identity column above); with
 *                  the depth scores of analysis.json (analysis.depth_fraction) and depth_prompts.json
 *                  (depth_prompts.n, depth_prompts.VECTOR.MEASURE), empty for a run without them
 * Cells: RFC 4180 (a field holding a comma, a double quote, CR or LF is quoted, its quotes doubled; records end with
 * CRLF), numbers with '.' as the decimal point in the shortest form that reads back to the same double
 * (pipeline/base/exact_number.h), booleans true/false, an empty cell for a missing or non-finite value. */
#ifndef PIPELINE_RUNS_CSV_H
#define PIPELINE_RUNS_CSV_H

#include <stddef.h>

#include "pipeline/base/svg.h" /* StrBuf */

typedef struct {
    int n_cols, n_rows;
    char **cols;   /* [n_cols] column names */
    char ***cells; /* [n_rows][n_cols] cell text, "" when missing */
} RunsTable;

/* Reads every run of runs_dir into t (rows and columns as above). A run that cannot be read (run_dirs.h), a
 * result.json, analysis.json or depth_prompts.json that does not load, a record of another run (record_owner_check,
 * run_identity.h), records of different experiments, or a config key that would name a fixed column is an error naming
 * the file: -1 with err, t empty.
 * A runs directory without any run is an error too (there is nothing to export). */
int runs_table_load(RunsTable *t, const char *runs_dir, char *err, size_t errlen);
void runs_table_free(RunsTable *t);

/* The table as CSV text (header row first) appended to out. */
void runs_table_csv(const RunsTable *t, StrBuf *out);

/* One CSV field, quoted when RFC 4180 requires it, appended to out. */
void csv_put_field(StrBuf *out, const char *s);

/* runs_table_load, then the CSV written atomically to out_path (its directory created). Returns 0 with the table's
 * size in *n_rows and *n_cols, or -1 with err. */
int runs_csv_export(const char *runs_dir, const char *out_path, int *n_rows, int *n_cols, char *err, size_t errlen);

#endif
