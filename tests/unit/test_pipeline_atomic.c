/* Atomic writes: no temporary left behind, an aborted write keeps the old file, directories swap whole, a set of
 * files committed together keeps every old file when it fails before the renames, and a symbolic link planted where
 * a temporary might go is never followed. */
#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "tests/unit/suite_runner.h"

static char g_dir[256];

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_pipeline_atomic.%ld", (long)getpid());
    remove_tree(g_dir);
    char err[256];
    ck_assert_int_eq(mkdir_p(g_dir, err, sizeof err), 0);
}
static void teardown(void) { remove_tree(g_dir); }

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void read_str(const char *path, char *out, size_t outlen) {
    char *data, err[256];
    size_t n;
    ck_assert_msg(read_file_all(path, &data, &n, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_lt(n, outlen);
    memcpy(out, data, n + 1);
    free(data);
}

/* A pid that no longer runs: a child that has exited and been reaped. */
static long dead_pid(void) {
    pid_t c = fork();
    ck_assert_int_ge(c, 0);
    if (c == 0) _exit(0);
    ck_assert_int_eq(waitpid(c, NULL, 0), c);
    return (long)c;
}

static void touch(const char *dir, const char *name) {
    char p[900], err[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    ck_assert_int_eq(write_file_atomic(p, "x", 1, err, sizeof err), 0);
}

/* Writers killed before their rename (kill -9, or tokenize/fetch on SIGINT) left their temporaries forever; now the
 * next writer of the same output removes those of dead processes and keeps the rest. */
START_TEST(stale_temps_of_dead_writers_are_removed) {
    char name[700], sub[700], err[256];
    long dead = dead_pid();
    snprintf(name, sizeof name, "out.json.tmp.%ld", dead);
    touch(g_dir, name);
    snprintf(name, sizeof name, "out.json.tmp.%ld", (long)getppid()); /* alive: kept */
    touch(g_dir, name);
    touch(g_dir, "out.json.tmp.notapid");
    touch(g_dir, "other.json.tmp.1x");
    snprintf(sub, sizeof sub, "%s/.stage.tmp.%ld", g_dir, dead); /* a whole tree */
    ck_assert_int_eq(mkdir_p(sub, err, sizeof err), 0);
    touch(sub, "big.shard");
    ck_assert_int_eq(count_entries(g_dir), 5);

    char path[700];
    snprintf(path, sizeof path, "%s/out.json", g_dir);
    ck_assert_int_eq(write_file_atomic(path, "new", 3, err, sizeof err), 0);
    ck_assert_int_eq(count_entries(g_dir), 5); /* out.json in, the dead writer's temporary out */
    snprintf(name, sizeof name, "%s/out.json.tmp.%ld", g_dir, dead);
    ck_assert(!file_exists(name));
    snprintf(name, sizeof name, "%s/out.json.tmp.%ld", g_dir, (long)getppid());
    ck_assert(file_exists(name));

    ck_assert_int_eq(remove_stale_temps(g_dir, ".stage.tmp."), 1);
    ck_assert(!file_exists(sub));
    ck_assert_int_eq(remove_stale_temps(g_dir, "out.json.tmp."), 0);
    ck_assert_int_eq(count_entries(g_dir), 4);
}
END_TEST

/* Whether name is "<prefix><pid>.<16 lowercase hex digits>". */
static int is_new_temp_name(const char *name, const char *prefix, long pid) {
    char head[600];
    snprintf(head, sizeof head, "%s%ld.", prefix, pid);
    if (strncmp(name, head, strlen(head)) != 0) return 0;
    const char *hex = name + strlen(head);
    if (strlen(hex) != 16) return 0;
    for (const char *p = hex; *p; p++)
        if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p)) return 0;
    return 1;
}

/* A symbolic link planted at the temporary's old, predictable name (<path>.tmp.<pid>) and at guesses of the new one
 * (<path>.tmp.<pid>.<hex>) is not followed: the write goes to a fresh, unguessable temporary and succeeds, and the
 * links' target keeps its content. */
START_TEST(planted_links_are_not_followed) {
    char victim[600], path[600], link_path[800], err[512] = "", got[64];
    snprintf(victim, sizeof victim, "%s/victim.txt", g_dir);
    ck_assert_int_eq(write_file_atomic(victim, "precious", 8, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/out.json", g_dir);
    const char *guesses[] = {"", ".0000000000000000", ".ffffffffffffffff", ".0123456789abcdef"};
    for (size_t i = 0; i < sizeof guesses / sizeof guesses[0]; i++) {
        snprintf(link_path, sizeof link_path, "%s.tmp.%ld%s", path, (long)getpid(), guesses[i]);
        ck_assert_int_eq(symlink(victim, link_path), 0);
    }
    AtomicFile af;
    ck_assert_msg(atomic_open(&af, path, err, sizeof err) == 0, "%s", err);
    const char *base = strrchr(af.tmp_path, '/') + 1;
    ck_assert_msg(is_new_temp_name(base, "out.json.tmp.", (long)getpid()), "temporary %s", af.tmp_path);
    struct stat st;
    ck_assert_int_eq(lstat(af.tmp_path, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    ck_assert_uint_eq(st.st_nlink, 1);
    fputs("new", af.fp);
    ck_assert_msg(atomic_commit(&af, err, sizeof err) == 0, "%s", err);
    read_str(path, got, sizeof got);
    ck_assert_str_eq(got, "new");
    read_str(victim, got, sizeof got);
    ck_assert_str_eq(got, "precious");
    for (size_t i = 0; i < sizeof guesses / sizeof guesses[0]; i++) { /* this (live) process's names: kept */
        snprintf(link_path, sizeof link_path, "%s.tmp.%ld%s", path, (long)getpid(), guesses[i]);
        ck_assert_int_eq(lstat(link_path, &st), 0);
        ck_assert(S_ISLNK(st.st_mode));
    }
    /* Two temporaries of one path in one process get different names. */
    char a[700], b[700];
    ck_assert_int_eq(temp_name(a, sizeof a, path, err, sizeof err), 0);
    ck_assert_int_eq(temp_name(b, sizeof b, path, err, sizeof err), 0);
    ck_assert_str_ne(a, b);
}
END_TEST

/* fopen_new_write refuses whatever is already at its path, a link (dangling or not) above all, and changes nothing;
 * mkdir_temp makes a new directory of the new form, never reusing an existing entry. */
START_TEST(exclusive_creation_refuses_existing_entries) {
    char victim[600], link_path[600], dangling[600], err[512] = "", got[64];
    snprintf(victim, sizeof victim, "%s/victim.txt", g_dir);
    ck_assert_int_eq(write_file_atomic(victim, "precious", 8, err, sizeof err), 0);
    snprintf(link_path, sizeof link_path, "%s/link", g_dir);
    ck_assert_int_eq(symlink(victim, link_path), 0);
    ck_assert_ptr_null(fopen_new_write(link_path, err, sizeof err));
    ck_assert_msg(strstr(err, "link: cannot create: File exists"), "%s", err);
    snprintf(dangling, sizeof dangling, "%s/dangling", g_dir);
    char nowhere[700];
    snprintf(nowhere, sizeof nowhere, "%s/created-through-the-link", g_dir);
    ck_assert_int_eq(symlink(nowhere, dangling), 0);
    ck_assert_ptr_null(fopen_new_write(dangling, err, sizeof err));
    ck_assert(!file_exists(nowhere));
    ck_assert_ptr_null(fopen_new_write(victim, err, sizeof err));
    read_str(victim, got, sizeof got);
    ck_assert_str_eq(got, "precious");

    char base[600], tree[700];
    snprintf(base, sizeof base, "%s/sub/out", g_dir);
    ck_assert_msg(mkdir_temp(base, tree, sizeof tree, err, sizeof err) == 0, "%s", err);
    ck_assert(is_dir(tree, NO_FOLLOW_LINKS));
    ck_assert_msg(is_new_temp_name(strrchr(tree, '/') + 1, "out.tmp.", (long)getpid()), "%s", tree);
    ck_assert_int_eq(remove_tree(tree), 0);
}
END_TEST

/* Temporaries in the new form (<prefix><pid>.<hex>) of a dead writer are removed like the old form's; a live
 * writer's are kept; names that merely resemble the form are kept. */
START_TEST(stale_temps_in_the_new_form_are_removed) {
    char name[700], sub[700], err[256];
    long dead = dead_pid();
    snprintf(name, sizeof name, "out.json.tmp.%ld.0123456789abcdef", dead);
    touch(g_dir, name);
    snprintf(sub, sizeof sub, "%s/out.tmp.%ld.fedcba9876543210", g_dir, dead); /* a tree (fetch's, tokenize's) */
    ck_assert_int_eq(mkdir_p(sub, err, sizeof err), 0);
    touch(sub, "part.txt");
    snprintf(name, sizeof name, "out.json.tmp.%ld.00000000000000aa", (long)getppid()); /* alive: kept */
    touch(g_dir, name);
    snprintf(name, sizeof name, "out.json.tmp.%ld.xyz", dead); /* not hex: kept */
    touch(g_dir, name);
    snprintf(name, sizeof name, "out.json.tmp.%ld.", dead); /* nothing after the dot: kept */
    touch(g_dir, name);
    ck_assert_int_eq(count_entries(g_dir), 5);
    ck_assert_int_eq(remove_stale_temps(g_dir, "out.json.tmp."), 1);
    ck_assert_int_eq(remove_stale_temps(g_dir, "out.tmp."), 1);
    ck_assert(!file_exists(sub));
    ck_assert_int_eq(count_entries(g_dir), 3);
    /* atomic_open removes them too, as it did the old form */
    snprintf(name, sizeof name, "out.json.tmp.%ld.0123456789abcdef", dead);
    touch(g_dir, name);
    char path[700];
    snprintf(path, sizeof path, "%s/out.json", g_dir);
    ck_assert_int_eq(write_file_atomic(path, "new", 3, err, sizeof err), 0);
    snprintf(name, sizeof name, "%s/out.json.tmp.%ld.0123456789abcdef", g_dir, dead);
    ck_assert(!file_exists(name));
    ck_assert_int_eq(count_entries(g_dir), 4); /* out.json and the three kept */
}
END_TEST

/* Wrong kinds at the target: a directory where a file goes is refused at open (before any rename of a set); a file
 * where a directory tree goes is refused and kept (it used to be swapped out and deleted: fetch --out FILE). */
START_TEST(wrong_kind_at_the_target_is_refused) {
    char dir[700], file[700], tree[700], err[512] = "";
    snprintf(dir, sizeof dir, "%s/adir", g_dir);
    ck_assert_int_eq(mkdir_p(dir, err, sizeof err), 0);
    AtomicFile af;
    ck_assert_int_eq(atomic_open(&af, dir, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "adir: is a directory"), "%s", err);
    ck_assert_int_eq(atomic_check_target(dir, err, sizeof err), -1);

    snprintf(file, sizeof file, "%s/data.json", g_dir);
    ck_assert_int_eq(write_file_atomic(file, "keep", 4, err, sizeof err), 0);
    ck_assert_int_eq(atomic_check_target(file, err, sizeof err), 0);
    snprintf(tree, sizeof tree, "%s/tree.tmp", g_dir);
    ck_assert_int_eq(mkdir_p(tree, err, sizeof err), 0);
    ck_assert_int_eq(rename_dir_atomic(tree, file, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "data.json: exists and is not a directory"), "%s", err);
    char got[16];
    read_str(file, got, sizeof got);
    ck_assert_str_eq(got, "keep");
}
END_TEST

START_TEST(write_creates_parents_and_leaves_no_temp) {
    char path[700], sub[512], err[256], got[64];
    snprintf(sub, sizeof sub, "%s/a/b", g_dir);
    snprintf(path, sizeof path, "%s/file.txt", sub);
    ck_assert_int_eq(write_file_atomic(path, "hello", 5, err, sizeof err), 0);
    read_str(path, got, sizeof got);
    ck_assert_str_eq(got, "hello");
    ck_assert_int_eq(count_entries(sub), 1);
    ck_assert_int_eq(write_file_atomic(path, "bye", 3, err, sizeof err), 0);
    read_str(path, got, sizeof got);
    ck_assert_str_eq(got, "bye");
    ck_assert_int_eq(count_entries(sub), 1);
}
END_TEST

START_TEST(abort_keeps_old_file) {
    char path[512], err[256], got[64];
    snprintf(path, sizeof path, "%s/keep.txt", g_dir);
    ck_assert_int_eq(write_file_atomic(path, "old", 3, err, sizeof err), 0);
    AtomicFile af;
    ck_assert_int_eq(atomic_open(&af, path, err, sizeof err), 0);
    fputs("new but unfinished", af.fp);
    fflush(af.fp);
    ck_assert(file_exists(af.tmp_path));
    /* Before commit the target is untouched. */
    read_str(path, got, sizeof got);
    ck_assert_str_eq(got, "old");
    atomic_abort(&af);
    read_str(path, got, sizeof got);
    ck_assert_str_eq(got, "old");
    ck_assert_int_eq(count_entries(g_dir), 1);
}
END_TEST

START_TEST(commit_into_missing_dir_fails_cleanly) {
    char path[512], err[256] = "";
    /* A parent that is a regular file cannot become a directory: a clear error naming the path. */
    snprintf(path, sizeof path, "%s/plain", g_dir);
    ck_assert_int_eq(write_file_atomic(path, "x", 1, err, sizeof err), 0);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/child.txt", path);
    ck_assert_int_eq(write_file_atomic(bad, "y", 1, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "plain") != NULL, "message: %s", err);
}
END_TEST

START_TEST(rename_dir_replaces_old_tree) {
    char final_dir[512], tmp[512], f[600], err[256], got[64];
    snprintf(final_dir, sizeof final_dir, "%s/out", g_dir);
    snprintf(tmp, sizeof tmp, "%s/out.tmp.1", g_dir);
    snprintf(f, sizeof f, "%s/x.txt", tmp);
    ck_assert_int_eq(write_file_atomic(f, "first", 5, err, sizeof err), 0);
    ck_assert_int_eq(rename_dir_atomic(tmp, final_dir, err, sizeof err), 0);
    snprintf(f, sizeof f, "%s/x.txt", final_dir);
    read_str(f, got, sizeof got);
    ck_assert_str_eq(got, "first");
    /* Second generation replaces the first entirely (stale files vanish). */
    snprintf(f, sizeof f, "%s/y.txt", tmp);
    ck_assert_int_eq(write_file_atomic(f, "second", 6, err, sizeof err), 0);
    ck_assert_int_eq(rename_dir_atomic(tmp, final_dir, err, sizeof err), 0);
    snprintf(f, sizeof f, "%s/y.txt", final_dir);
    read_str(f, got, sizeof got);
    ck_assert_str_eq(got, "second");
    snprintf(f, sizeof f, "%s/x.txt", final_dir);
    ck_assert(!file_exists(f));
    ck_assert(!file_exists(tmp));
    ck_assert_int_eq(count_entries(g_dir), 1);
}
END_TEST

START_TEST(remove_tree_does_not_follow_links) {
    char outside[512], tree[512], f[600], link[600], err[256];
    snprintf(outside, sizeof outside, "%s/outside.txt", g_dir);
    ck_assert_int_eq(write_file_atomic(outside, "keep", 4, err, sizeof err), 0);
    snprintf(tree, sizeof tree, "%s/tree/deep", g_dir);
    snprintf(f, sizeof f, "%s/f", tree);
    ck_assert_int_eq(write_file_atomic(f, "z", 1, err, sizeof err), 0);
    snprintf(link, sizeof link, "%s/link", tree);
    ck_assert_int_eq(symlink(outside, link), 0);
    snprintf(tree, sizeof tree, "%s/tree", g_dir);
    ck_assert_int_eq(remove_tree(tree), 0);
    ck_assert(!file_exists(tree));
    ck_assert(file_exists(outside));
    ck_assert_int_eq(remove_tree(tree), 0); /* absent is fine */
}
END_TEST

/* Two outputs a (plain text) and b (JSON via json_prepare_file) with old contents, opened for new ones. */
static void open_pair(AtomicFile *a, AtomicFile *b, char *pa, char *pb, size_t n) {
    char err[256];
    snprintf(pa, n, "%s/a.jsonl", g_dir);
    snprintf(pb, n, "%s/b.json", g_dir);
    ck_assert_int_eq(write_file_atomic(pa, "old a", 5, err, sizeof err), 0);
    ck_assert_int_eq(write_file_atomic(pb, "old b", 5, err, sizeof err), 0);
    ck_assert_int_eq(atomic_open(a, pa, err, sizeof err), 0);
    fputs("new a", a->fp);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "x", 1);
    ck_assert_msg(json_prepare_file(b, pb, j, err, sizeof err) == 0, "%s", err);
    cJSON_Delete(j);
}

START_TEST(commit_all_replaces_every_file) {
    AtomicFile a, b;
    char pa[512], pb[512], err[256], got[64];
    open_pair(&a, &b, pa, pb, sizeof pa);
    read_str(pb, got, sizeof got); /* nothing renamed before the commit */
    ck_assert_str_eq(got, "old b");
    AtomicFile *const set[] = {&a, &b};
    ck_assert_msg(atomic_commit_all(set, 2, err, sizeof err) == 0, "%s", err);
    read_str(pa, got, sizeof got);
    ck_assert_str_eq(got, "new a");
    read_str(pb, got, sizeof got);
    ck_assert_str_eq(got, "{\n\t\"x\":\t1\n}\n"); /* json_save_file's text: pretty-printed, trailing newline */
    ck_assert_int_eq(count_entries(g_dir), 2);
}
END_TEST

START_TEST(commit_all_failure_keeps_every_old_file) {
    AtomicFile a, b;
    char pa[512], pb[512], err[256] = "", got[64];
    open_pair(&a, &b, pa, pb, sizeof pa);
    atomic_abort(&b); /* b can no longer be written: the set fails before any rename */
    AtomicFile *const set[] = {&a, &b};
    ck_assert_int_eq(atomic_commit_all(set, 2, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "b.json") != NULL, "message: %s", err);
    read_str(pa, got, sizeof got);
    ck_assert_str_eq(got, "old a");
    read_str(pb, got, sizeof got);
    ck_assert_str_eq(got, "old b");
    ck_assert_int_eq(count_entries(g_dir), 2); /* no temporary left */
}
END_TEST

START_TEST(commit_all_rename_failure_names_the_replaced_files) {
    AtomicFile a, b;
    char pa[512], pb[512], err[256] = "", got[64], sub[600];
    snprintf(pb, sizeof pb, "%s/b.json", g_dir);
    open_pair(&a, &b, pa, pb, sizeof pa);
    /* b's target becomes a non-empty directory: only b's rename can fail, after a was renamed */
    ck_assert_int_eq(unlink(pb), 0);
    snprintf(sub, sizeof sub, "%s/inside", pb);
    ck_assert_int_eq(write_file_atomic(sub, "z", 1, err, sizeof err), 0);
    AtomicFile *const set[] = {&a, &b};
    ck_assert_int_eq(atomic_commit_all(set, 2, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "b.json") != NULL && strstr(err, "already replaced") && strstr(err, "a.jsonl"),
                  "message: %s", err);
    read_str(pa, got, sizeof got);
    ck_assert_str_eq(got, "new a");
    ck_assert_int_eq(count_entries(g_dir), 2); /* a.jsonl and the directory b.json: no temporary */
}
END_TEST

int main(void) {
    Suite *s = suite_create("pipeline_atomic");
    TCase *tc = tcase_create("atomic");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, write_creates_parents_and_leaves_no_temp);
    tcase_add_test(tc, abort_keeps_old_file);
    tcase_add_test(tc, commit_into_missing_dir_fails_cleanly);
    tcase_add_test(tc, rename_dir_replaces_old_tree);
    tcase_add_test(tc, remove_tree_does_not_follow_links);
    tcase_add_test(tc, commit_all_replaces_every_file);
    tcase_add_test(tc, commit_all_failure_keeps_every_old_file);
    tcase_add_test(tc, commit_all_rename_failure_names_the_replaced_files);
    tcase_add_test(tc, stale_temps_of_dead_writers_are_removed);
    tcase_add_test(tc, wrong_kind_at_the_target_is_refused);
    tcase_add_test(tc, planted_links_are_not_followed);
    tcase_add_test(tc, exclusive_creation_refuses_existing_entries);
    tcase_add_test(tc, stale_temps_in_the_new_form_are_removed);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
