/* The command that continues an interrupted training run, as bin/train prints it when SIGINT/SIGTERM stopped it:
 * the make command the user typed (REPRO_COMMAND, exported by make) or else this program's own command line with
 * --auto-resume, quoted so that it can be pasted into a shell. */
#ifndef PIPELINE_RESUME_HINT_H
#define PIPELINE_RESUME_HINT_H

#include <stdbool.h>
#include <stddef.h>

/* Appends s to out (of size n, NUL-terminated) quoted for a POSIX shell: as is when it holds only characters no shell
 * treats specially, else in single quotes ('' for the empty string). Returns false when out is too small. */
bool shell_quote_append(char *out, size_t n, const char *s);

typedef struct {
    int argc;
    char *const *argv;          /* the program's command line as started (before MPI took any arguments) */
    const char *repro_command;  /* the make command line (REPRO_COMMAND), or NULL/"" when not under make reproduce */
    bool resumes;               /* --resume or --auto-resume given: the same command continues the checkpoint */
    bool under_make;            /* MAKELEVEL set: a make command started this one */
    int world;                  /* ranks under mpirun (1: a single process) */
} ResumeHintInput;

/* Writes "rerun `CMD` to continue from the checkpoint" (or the bin/train form) into out. With repro_command: that
 * command, and when it does not resume (RESUME=0), its RESUME= words replaced by RESUME=auto. Without: argv (under
 * "mpirun -np W" for W ranks) with --auto-resume added unless it resumes already. */
void resume_hint(char *out, size_t n, const ResumeHintInput *in);

#endif
