/* Which entries of an experiment's runs directory (runs/EXP) are runs: the one rule bin/report, bin/export and
 * bin/compare share, so that none of them drops a run the others read (reports/README.md, "Runs that cannot be read").
 *
 *  - An entry whose name starts with '.' is not a run, nor is one that is not a directory (a log file beside the runs).
 *  - A directory, or a symbolic link to one, is a run directory (a link is followed like the others; its records must
 *    still name the link's own name, record_owner_check in run_identity.h, so an alias of another run is refused).
 *  - A run directory holding a result.json, whatever that entry is (a FIFO, a directory, a link that leads nowhere), is
 *    an evaluated run: the reader reads it, and a record it cannot read is an error naming the file.
 *  - A run directory without result.json is not evaluated yet (the report lists the expected ones as missing).
 *  - An entry that cannot be examined (a symbolic link that leads nowhere, a run directory that cannot be searched)
 *    is a run that cannot be read: an error naming it, never skipped. */
#ifndef PIPELINE_RUN_DIRS_H
#define PIPELINE_RUN_DIRS_H

#include <stdbool.h>
#include <stddef.h>

/* Whether something is at path, of any kind (a dangling symbolic link and a FIFO count): only "no such file" is
 * absent. Readers decide with it whether a run's file is there, and then fail on what they cannot read (an
 * existence test that follows links, or opens the file, would skip a dangling link or hang on a FIFO). */
bool run_file_present(const char *path);

/* The evaluated runs of runs_dir by the rule above, in name order, into *names (*n of them; the caller frees each and
 * the array). 0, or -1 with "<path>: ..." naming the first entry (in name order) that cannot be read, or the runs
 * directory itself when it cannot be opened; *names is then NULL. */
int run_dirs_list(const char *runs_dir, char ***names, int *n, char *err, size_t errlen);

#endif
