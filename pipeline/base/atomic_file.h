/* Atomic outputs: write to "<path>.tmp.<pid>.<16 random hex digits>", created exclusively (never an existing file,
 * never through a symbolic link), fsync, rename over <path>, fsync the directory.
 * An interrupted writer leaves at most a stray temporary file, never a half-written <path>. */
#ifndef PIPELINE_ATOMIC_FILE_H
#define PIPELINE_ATOMIC_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *fp;
    char path[4096];
    char tmp_path[4096];
} AtomicFile;

int atomic_open(AtomicFile *af, const char *path, char *err, size_t errlen);   /* creates parent dirs */
/* "<base>.tmp.<pid>.<16 hex digits from getrandom>" into out[n]: the name of a temporary that nobody can guess, so
 * nobody can plant a link there beforehand. 0, or -1 with err. */
int temp_name(char *out, size_t n, const char *base, char *err, size_t errlen);
/* Creates path as a new regular file for writing (O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode 0666 less the
 * umask): an existing file or a symbolic link at path is an error ("<path>: cannot create: File exists"), never
 * followed or truncated. NULL with err on failure. */
FILE *fopen_new_write(const char *path, char *err, size_t errlen);
/* Creates a new directory temp_name(base) (its parent first, as mkdir_p) and writes its path into out[n]: a staging
 * tree for an output renamed into place at the end. 0, or -1 with err. */
int mkdir_temp(const char *base, char *out, size_t n, char *err, size_t errlen);
/* The check atomic_open makes on path, for a stage to run before its work: 0, or -1 with "PATH: is a directory". */
int atomic_check_target(const char *path, char *err, size_t errlen);
int atomic_commit(AtomicFile *af, char *err, size_t errlen);                   /* flush, fsync, close, rename */
void atomic_abort(AtomicFile *af);                                              /* close and unlink the temp */
/* Commits several files as one output set: first flushes and fsyncs every temporary (where a full disk or an I/O
 * error shows), then renames them in order. Any failure before the first rename aborts them all, so every old file
 * survives; after that only a rename can fail (the earlier files are then new, the rest aborted; err says which). */
int atomic_commit_all(AtomicFile *const *afs, int n, char *err, size_t errlen);
int write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen);
/* Every reader of an input opens it through this: without blocking (a FIFO in place of a record would hang the
 * reader), and only a regular file (symbolic links to one are followed); anything else is refused in err as
 * "PATH: not a regular file (a FIFO): refused". Returns NULL with err set on failure. */
FILE *fopen_regular_read(const char *path, char *err, size_t errlen);
/* "a FIFO", "a directory", ... for a st_mode (the refusal's wording). */
const char *file_kind_name(unsigned mode);
int read_file_all(const char *path, char **data, size_t *n, char *err, size_t errlen); /* NUL-terminated, regular only */
/* read_file_all of a file that may hold at most max_bytes (pipeline/base/limits.h): a larger one is refused before
 * anything is allocated, with "<path>: <N> bytes, more than the <M> MiB a <kind> may hold". */
int read_file_limited(const char *path, uint64_t max_bytes, const char *kind, char **data, size_t *n, char *err,
                      size_t errlen);
int mkdir_p(const char *dir, char *err, size_t errlen);
int fsync_dir_of(const char *path);
int rename_dir_atomic(const char *tmp_dir, const char *final_dir, char *err, size_t errlen); /* replaces final_dir */
int remove_tree(const char *dir); /* rm -rf */
/* Removes every entry of dir named <prefix><pid> or <prefix><pid>.<hex> (a temporary file or tree, temp_name's form)
 * whose process no longer exists: what a writer killed before its rename (SIGKILL, or a signal it does not handle)
 * leaves behind. Entries of live processes, and names not of that form, are kept. Returns how many were removed. */
int remove_stale_temps(const char *dir, const char *prefix);
int file_exists(const char *path);
/* Whether path is a directory. FOLLOW_LINKS (stat): a symbolic link to a directory counts, as for inputs read through
 * it. NO_FOLLOW_LINKS (lstat): a link is not a directory, as for a tree about to be renamed or removed, where the
 * link itself, not its target, would be acted on. */
typedef enum { FOLLOW_LINKS, NO_FOLLOW_LINKS } LinkPolicy;
int is_dir(const char *path, LinkPolicy links);
/* "dir/file" into out[n]: 0, or -1 with "dir/file: path too long" in err when it does not fit. */
int path_join_checked(char *out, size_t n, const char *dir, const char *file, char *err, size_t errlen);

#endif
