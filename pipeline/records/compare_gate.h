/* The baseline gate (bin/compare --baselines DIR --runs DIR): every run asked for is compared with its baseline
 * record (compare_run.h, with the tolerances of compare_tolerances.h, pooled over seeds by compare_baseline.h), the
 * run directories not asked for are listed as notes, and the last line says what was compared and the verdict.
 *
 * Baselines are files <NAME>.result.json (a copy of a result.json); each is compared with <runs>/<NAME>/result.json.
 * NAME is a run directory name: RUN for the config's own seed, RUN.seed<S> for another seed (stages/README.md,
 * "Seeds").
 * Without --only every baseline record is asked for; --only RUN asks for RUN and its seeds RUN.seed<S>. Seeds the
 * baselines do not hold, of a run config they hold 2 or more seeds of (a replication: runs/EXP/RUN.seed4), are asked
 * for too and compared with the recorded seeds' mean within the seed spread; the recorded seeds of that run config
 * that were not run here (no run directory at all) are one note line, not compared and no failure
 * (compare_seeds.h).
 *
 * Verdict per metric: ok (within tolerance); WORSE (a loss or disagreement count higher, an accuracy lower, beyond
 * the tolerance); BETTER (the other direction beyond the tolerance: a failure too, since a tolerance is a measured
 * spread and the results moved as far; reported but passed with --allow-better); CHANGED (a count that is not
 * equal: always a failure); not gated (a class the tolerances file declares "gated": false: printed, never judged).
 *
 * What was compared is counted, never assumed. The last line is
 *   compare: N compared, M not compared (NAME: why; ...): verdict
 * where "not compared" lists every run asked for whose metrics were not judged, with the reason, and counts the
 * run directories that were not asked for (no baseline, left out by --only, another variant CONFIG@VARIANT of a
 * run: each one "note:" line above). The verdict "all metrics within tolerances" ("... (or better)" with
 * --allow-better) is printed only when every run asked for was compared and passed. Rules:
 *  - Nothing compared (N = 0) is a failure, exit 2, whatever the reasons: a gate that checked nothing must not pass.
 *  - A run asked for (by --only, or by having a baseline) that has no result record, or whose dataset or tokenizer
 *    differs, or whose record cannot be read: an error line, listed as not compared, exit 2 (the others are still
 *    compared and printed).
 *  - A run asked for whose config changed since its baseline (config_sha256 differs): with --config-change=error
 *    (the default, `make compare`) an error as above, naming the changed keys and values ("train.lr 0.002 -> 0.008");
 *    when every changed key changes neither training nor evaluation (the description, comments, analyze keys:
 *    config_key_is_analysis_only) the run is compared, after a note naming them; with --config-change=note (make
 *    reproduce, where an edited config is the user's intent) one "note:" line naming the changed keys, and a
 *    counted note: listed as not
 *    compared ("... (a note: --config-change=note)"), not a failure while some other run was compared, and the verdict
 *    then reads "the N compared are within tolerances; K asked for was/were only noted, not checked".
 *  - A run directory that was not asked for is never a failure (a new run is not a regression).
 * Exit status: 0 something was compared and nothing failed; 1 some metric WORSE, BETTER (unless --allow-better) or
 * CHANGED;
 * 2 nothing compared, or some run asked for could not be compared (above), or a bad tolerances file or selection
 * (--only naming a run without a baseline); 3 nothing compared because every run asked for was a counted note
 * (--config-change=note, every config changed: e.g. make reproduce SET=...), so a caller can say so without
 * mistaking it for a broken comparison. Never 0 when nothing was compared. */
#ifndef PIPELINE_COMPARE_GATE_H
#define PIPELINE_COMPARE_GATE_H

#include <stdbool.h>

#include "pipeline/records/compare_run.h"

typedef struct {
    const char *baselines;  /* directory of <RUN>.result.json baseline records */
    const char *runs;       /* directory of run directories <RUN>/result.json */
    const char *tolerances; /* the tolerances file; NULL: <baselines>/tolerances.json */
    const char *only;       /* comma-separated runs to compare (RUN also selects RUN.seed<S>); NULL: every baseline */
    CompareOptions options;
} CompareRequest;

/* Runs the gate, printing to stdout (errors to stderr, one line each). Returns the exit status above (0, 1, 2 or 3);
 * --only, --allow-better, --only-failures and --config-change=note are the fields of req. */
int compare_gate(const CompareRequest *req);

/* The value of --config-change: "error" (*note = false) or "note" (*note = true); -1 for anything else. */
int compare_config_change_parse(const char *text, bool *note);

#endif
