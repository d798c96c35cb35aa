/* Atomic file and directory outputs: write a temporary sibling, fsync it, rename it over the target, fsync the
 * directory. A crash at any point leaves either the old file or the new one, plus at most a stray temporary. */
#include "pipeline/base/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include "pipeline/base/log.h"

const char *file_kind_name(unsigned mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISLNK(mode)) return "a symbolic link";
    return S_ISREG(mode) ? "a regular file" : "not a regular file";
}

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int is_dir(const char *path, LinkPolicy links) {
    struct stat st;
    int rc = links == FOLLOW_LINKS ? stat(path, &st) : lstat(path, &st);
    return rc == 0 && S_ISDIR(st.st_mode);
}

int mkdir_p(const char *dir, char *err, size_t errlen) {
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0) return 0;
    if (n >= sizeof buf) {
        set_err(err, errlen, "%s: path too long", dir);
        return -1;
    }
    memcpy(buf, dir, n + 1);
    /* Create each prefix in turn; EEXIST is fine as long as it is a directory. */
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            set_err(err, errlen, "%s: cannot create directory: %s", buf, strerror(errno));
            return -1;
        }
        buf[i] = saved;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "%s: exists and is not a directory", dir);
        return -1;
    }
    return 0;
}

/* Writes the directory part of path into out ("." when there is none). */
static void dir_of(const char *path, char *out, size_t outlen) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    snprintf(out, outlen, "%s", dirname(tmp));
}

int fsync_dir_of(const char *path) {
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int atomic_check_target(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "%s: is a directory (expected a file name)", path);
        return -1;
    }
    return 0;
}

int temp_name(char *out, size_t n, const char *base, char *err, size_t errlen) {
    /* 8 random bytes: a name another user cannot guess in advance, so nothing can be planted there (the pid in front
     * lets remove_stale_temps tell a dead writer's leftovers from a live one's). */
    unsigned char rnd[8];
    size_t got = 0;
    while (got < sizeof rnd) {
        ssize_t r = getrandom(rnd + got, sizeof rnd - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            set_err(err, errlen, "%s: cannot draw a random name for a temporary: %s", base, strerror(errno));
            return -1;
        }
        got += (size_t)r;
    }
    char hex[2 * sizeof rnd + 1];
    for (size_t i = 0; i < sizeof rnd; i++) snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
    int len = snprintf(out, n, "%s.tmp.%ld.%s", base, (long)getpid(), hex);
    if (len < 0 || (size_t)len >= n) {
        set_err(err, errlen, "%s: path too long", base);
        return -1;
    }
    return 0;
}

FILE *fopen_new_write(const char *path, char *err, size_t errlen) {
    /* O_EXCL with O_CREAT never opens an existing file and, with O_NOFOLLOW, never follows a symbolic link at path
     * (whatever another user planted there stays untouched). 0666: the umask decides, as for fopen("w"). */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return NULL;
    }
    FILE *fp = fdopen(fd, "wb");
    if (!fp) {
        set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        close(fd);
        unlink(path);
    }
    return fp;
}

int mkdir_temp(const char *base, char *out, size_t n, char *err, size_t errlen) {
    char parent[4096];
    dir_of(base, parent, sizeof parent);
    if (mkdir_p(parent, err, errlen) != 0) return -1;
    /* mkdir creates the directory or fails: an existing entry (a planted link or tree) is never reused. A clash of
     * two random names is all but impossible; a few retries cover it anyway. */
    for (int attempt = 0; attempt < 8; attempt++) {
        if (temp_name(out, n, base, err, errlen) != 0) return -1;
        if (mkdir(out, 0777) == 0) return 0;
        if (errno != EEXIST) break;
    }
    set_err(err, errlen, "%s: cannot create directory: %s", out, strerror(errno));
    return -1;
}

int atomic_open(AtomicFile *af, const char *path, char *err, size_t errlen) {
    memset(af, 0, sizeof *af);
    if (strlen(path) + 48 >= sizeof af->tmp_path) {
        set_err(err, errlen, "%s: path too long", path);
        return -1;
    }
    snprintf(af->path, sizeof af->path, "%s", path);
    /* A directory at path would survive until the final rename, after every other file of a set was committed. */
    if (atomic_check_target(path, err, errlen) != 0) return -1;
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    if (mkdir_p(dir, err, errlen) != 0) return -1;
    /* Temporaries of this path left by killed writers (possibly large: a shard, predictions) go now. */
    char prefix[4096], base_buf[4096];
    snprintf(base_buf, sizeof base_buf, "%s", path);
    snprintf(prefix, sizeof prefix, "%s.tmp.", basename(base_buf));
    remove_stale_temps(dir, prefix);
    if (temp_name(af->tmp_path, sizeof af->tmp_path, path, err, errlen) != 0) return -1;
    af->fp = fopen_new_write(af->tmp_path, err, errlen);
    if (!af->fp) {
        af->tmp_path[0] = '\0'; /* not ours: atomic_abort must not unlink whatever is there */
        return -1;
    }
    return 0;
}

int atomic_commit(AtomicFile *af, char *err, size_t errlen) {
    if (!af->fp) {
        set_err(err, errlen, "%s: atomic file is not open", af->path);
        return -1;
    }
    int failed = 0;
    int saved_errno = 0;
    if (fflush(af->fp) != 0 || ferror(af->fp)) failed = 1, saved_errno = errno;
    if (!failed && fsync(fileno(af->fp)) != 0) failed = 1, saved_errno = errno;
    if (fclose(af->fp) != 0 && !failed) failed = 1, saved_errno = errno;
    af->fp = NULL;
    if (failed) {
        set_err(err, errlen, "%s: write failed: %s", af->tmp_path, strerror(saved_errno ? saved_errno : EIO));
        unlink(af->tmp_path);
        return -1;
    }
    if (rename(af->tmp_path, af->path) != 0) {
        set_err(err, errlen, "%s: cannot rename into place: %s", af->path, strerror(errno));
        unlink(af->tmp_path);
        return -1;
    }
    fsync_dir_of(af->path); /* best effort: some filesystems refuse fsync on directories */
    return 0;
}

void atomic_abort(AtomicFile *af) {
    if (af->fp) {
        fclose(af->fp);
        af->fp = NULL;
    }
    if (af->tmp_path[0]) unlink(af->tmp_path);
}

/* Flushes and fsyncs the temporary without closing it (atomic_commit's own flush and fsync then find nothing left). */
static int atomic_sync(AtomicFile *af, char *err, size_t errlen) {
    if (!af->fp) {
        set_err(err, errlen, "%s: atomic file is not open", af->path);
        return -1;
    }
    errno = 0; /* ferror() of an earlier write leaves errno as it was: report EIO rather than a stale cause */
    if (fflush(af->fp) != 0 || ferror(af->fp) || fsync(fileno(af->fp)) != 0) {
        set_err(err, errlen, "%s: write failed: %s", af->tmp_path, strerror(errno ? errno : EIO));
        return -1;
    }
    return 0;
}

int atomic_commit_all(AtomicFile *const *afs, int n, char *err, size_t errlen) {
    for (int i = 0; i < n; i++)
        if (atomic_sync(afs[i], err, errlen) != 0) {
            for (int k = 0; k < n; k++) atomic_abort(afs[k]);
            return -1;
        }
    for (int i = 0; i < n; i++)
        if (atomic_commit(afs[i], err, errlen) != 0) {
            for (int k = i + 1; k < n; k++) atomic_abort(afs[k]);
            if (i > 0) { /* the set is now mixed: say so, keeping the cause */
                char cause[1024];
                snprintf(cause, sizeof cause, "%s", err ? err : "");
                set_err(err, errlen, "%s (already replaced: %s%s)", cause, afs[i - 1]->path,
                        i > 1 ? " and the files before it" : "");
            }
            return -1;
        }
    return 0;
}

int write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen) {
    AtomicFile af;
    if (atomic_open(&af, path, err, errlen) != 0) return -1;
    if (n > 0 && fwrite(data, 1, n, af.fp) != n) {
        set_err(err, errlen, "%s: write failed: %s", af.tmp_path, strerror(errno));
        atomic_abort(&af);
        return -1;
    }
    return atomic_commit(&af, err, errlen);
}

int read_file_limited(const char *path, uint64_t max_bytes, const char *kind, char **data, size_t *n, char *err,
                      size_t errlen) {
    *data = NULL;
    if (n) *n = 0;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > max_bytes) {
        set_err(err, errlen, "%s: %lld bytes, more than the %llu MiB a %s may hold", path, (long long)st.st_size,
                (unsigned long long)(max_bytes >> 20), kind);
        return -1;
    }
    /* (A file growing meanwhile is still read whole: the bound is against claims, not a sandbox. Anything but a
     * regular file is refused by read_file_all.) */
    return read_file_all(path, data, n, err, errlen);
}

FILE *fopen_regular_read(const char *path, char *err, size_t errlen) {
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer for ever. It is dropped again once
     * fstat has shown a regular file (where it has no effect anyway). */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        set_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: not a regular file (%s): refused", path, file_kind_name(st.st_mode));
        close(fd);
        return NULL;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        set_err(err, errlen, "%s: fcntl: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    return fp;
}

int read_file_all(const char *path, char **data, size_t *n, char *err, size_t errlen) {
    *data = NULL;
    if (n) *n = 0;
    FILE *fp = fopen_regular_read(path, err, errlen);
    if (!fp) return -1;
    /* Size the buffer from fstat for regular files (checkpoints are large); grow for pipes and the like. */
    size_t cap = 1 << 16, len = 0;
    struct stat st;
    if (fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) cap = (size_t)st.st_size + 1;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(fp);
        set_err(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (;;) {
        if (len + 1 >= cap) {
            /* Full: only grow if there really is more (avoids doubling a buffer sized exactly from fstat). */
            int c = fgetc(fp);
            if (c == EOF) break;
            ungetc(c, fp);
            size_t ncap = cap * 2;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(fp);
                set_err(err, errlen, "%s: out of memory", path);
                return -1;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - 1 - len, fp);
        len += got;
        if (got == 0) break;
    }
    if (ferror(fp)) {
        set_err(err, errlen, "%s: read failed: %s", path, strerror(errno));
        free(buf);
        fclose(fp);
        return -1;
    }
    fclose(fp);
    buf[len] = '\0';
    *data = buf;
    if (n) *n = len;
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

int remove_tree(const char *dir) {
    struct stat st;
    if (lstat(dir, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(dir);
    /* Depth first, without following symbolic links (a link inside is removed, never its target). */
    return nftw(dir, remove_entry, 32, FTW_DEPTH | FTW_PHYS);
}

/* The pid of a temporary named <prefix><pid> or <prefix><pid>.<hex> (temp_name's form and the older one), or -1. */
static long temp_owner_pid(const char *suffix) {
    if (*suffix < '0' || *suffix > '9') return -1;
    char *end = NULL;
    errno = 0;
    long pid = strtol(suffix, &end, 10);
    if (errno != 0 || pid <= 0) return -1;
    if (*end == '\0') return pid;
    if (*end != '.' || end[1] == '\0') return -1;
    for (const char *p = end + 1; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return -1;
    return pid;
}

int remove_stale_temps(const char *dir, const char *prefix) {
    DIR *dp = opendir(dir);
    if (!dp) return 0;
    const size_t plen = strlen(prefix);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (strncmp(e->d_name, prefix, plen) != 0) continue;
        long pid = temp_owner_pid(e->d_name + plen);
        if (pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to judge): keep */
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (remove_tree(path) == 0) removed++;
    }
    closedir(dp);
    return removed;
}

int rename_dir_atomic(const char *tmp_dir, const char *final_dir, char *err, size_t errlen) {
    struct stat st;
    if (lstat(final_dir, &st) != 0) {
        if (errno != ENOENT) {
            set_err(err, errlen, "%s: %s", final_dir, strerror(errno));
            return -1;
        }
        char parent[4096];
        dir_of(final_dir, parent, sizeof parent);
        if (mkdir_p(parent, err, errlen) != 0) return -1;
        if (rename(tmp_dir, final_dir) != 0) {
            set_err(err, errlen, "%s: cannot rename %s into place: %s", final_dir, tmp_dir, strerror(errno));
            return -1;
        }
        fsync_dir_of(final_dir);
        return 0;
    }
    /* Only a directory is replaced: a file there (a mistyped path) would be swapped out and deleted. */
    if (!S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "%s: exists and is not a directory", final_dir);
        return -1;
    }
    /* The target exists: swap the two in one step where the kernel supports it, so a reader never sees no
     * directory; otherwise move the old one aside first. Either way the old tree is removed afterwards. */
#ifdef RENAME_EXCHANGE
    if (renameat2(AT_FDCWD, tmp_dir, AT_FDCWD, final_dir, RENAME_EXCHANGE) == 0) {
        fsync_dir_of(final_dir);
        if (remove_tree(tmp_dir) != 0) {
            set_err(err, errlen, "%s: new tree in place but the old one could not be removed from %s", final_dir,
                    tmp_dir);
            return -1;
        }
        return 0;
    }
#endif
    char old[4200];
    snprintf(old, sizeof old, "%s.old.%ld", final_dir, (long)getpid());
    if (rename(final_dir, old) != 0) {
        set_err(err, errlen, "%s: cannot move the old directory aside: %s", final_dir, strerror(errno));
        return -1;
    }
    if (rename(tmp_dir, final_dir) != 0) {
        int e = errno;
        rename(old, final_dir); /* put the old tree back */
        set_err(err, errlen, "%s: cannot rename %s into place: %s", final_dir, tmp_dir, strerror(e));
        return -1;
    }
    fsync_dir_of(final_dir);
    if (remove_tree(old) != 0) {
        set_err(err, errlen, "%s: new tree in place but the old one could not be removed from %s", final_dir, old);
        return -1;
    }
    return 0;
}

int path_join_checked(char *out, size_t n, const char *dir, const char *file, char *err, size_t errlen) {
    int len = snprintf(out, n, "%s/%s", dir, file);
    if (len < 0 || (size_t)len >= n) {
        set_err(err, errlen, "%s/%s: path too long", dir, file);
        return -1;
    }
    return 0;
}
