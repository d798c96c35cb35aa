/* MPI process group with a watchdog (see dist.h). */
#include "pipeline/base/dist.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "pipeline/base/log.h"

#define DIST_DEFAULT_TIMEOUT_S 600.0
#define DIST_HOST_LEN 128
#define DIST_POLL_MS 50
#define DIST_MAX_BEAT_S 10.0 /* longest gap between rank 0's signs of life during a rank-0-only phase */
#define TAG_ALIVE 1          /* rank 0 -> the others on g.beat_comm: still working on the phase */
#define TAG_DONE 2           /* rank 0 -> the others on g.beat_comm: the phase is over (sent after the last TAG_ALIVE) */

typedef struct {
    int pid;
    char host[DIST_HOST_LEN];
} PeerId;

static struct {
    bool active;
    int rank, world, local_rank, local_size;
    void (*at_finalize[8])(void);
    int n_at_finalize;
    double timeout_s;
    PeerId *peers; /* [world] */
    char program[96];
    /* watchdog */
    pthread_t thread;
    bool thread_started;
    atomic_int watching;       /* 1 while a collective is in flight */
    _Atomic double since;      /* monotonic start of the collective in flight */
    atomic_int awaiting_root;  /* 1 while the collective in flight is the wait for a rank-0-only phase */
    char what[256];            /* written by the main thread before watching = 1 */
    /* rank-0-only phases */
    MPI_Comm beat_comm;        /* a duplicate of the world: signs of life never match a collective's messages */
    atomic_int phase_over;     /* rank 0: tells the beating thread to stop */
    bool in_root_phase;        /* rank 0: inside fn of a dist_root_phase, beater running */
    pthread_t beater;          /* rank 0: the thread sending signs of life during the phase */
    const char *phase_what;
} g = {.rank = 0, .world = 1, .local_size = 1};

static double mono_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool launched_by_mpi(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return false;
}

bool dist_active(void) { return g.active; }
int dist_rank(void) { return g.rank; }
int dist_world(void) { return g.world; }
int dist_local_rank(void) { return g.local_rank; }

long dist_default_threads(void) {
    if (!g.active) return 0;
    /* The host's cores shared among its ranks, and never more than this rank may run on: mpirun binds each rank to
     * one core (2 ranks or fewer) or one socket, which omp_get_num_procs reports. */
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    long share = (online > 0 ? online : 1) / (g.local_size > 0 ? g.local_size : 1);
    long mine = omp_get_num_procs();
    long n = share < mine ? share : mine;
    return n >= 1 ? n : 1;
}

/* ---- watchdog ---- */

/* The state letter of a process on this host (R, S, T, Z, ...) from /proc/PID/stat; 0 when it cannot be read. */
static char local_process_state(int pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces and parentheses */
    return rp && rp[1] == ' ' ? rp[2] : 0;
}

/* A peer on this host is gone when its pid no longer exists or is a zombie (killed, not yet reaped). */
static bool local_peer_gone(const PeerId *p) {
    if (kill(p->pid, 0) != 0) return errno == ESRCH;
    return local_process_state(p->pid) == 'Z';
}

/* Prints the one failure line and ends this rank at once (MPI cannot be trusted to return). */
static _Noreturn void watchdog_fail(const char *why) {
    char what[256];
    memcpy(what, g.what, sizeof what);
    what[sizeof what - 1] = '\0';
    log_error("%s during the %s; stopping this rank (the last committed checkpoint is intact: continue with "
              "--resume)", why, what);
    _exit(1);
}

/* A peer on this host that is stopped (SIGSTOP, Ctrl-Z, a debugger): state T or t in /proc/PID/stat. */
static bool local_peer_stopped(const PeerId *p) {
    char state = local_process_state(p->pid);
    return state == 'T' || state == 't';
}

/* Appends ", " (when not first) and the formatted text to buf[*used ...]. */
static void append(char *buf, size_t size, size_t *used, const char *text) {
    int k = snprintf(buf + *used, size - *used, "%s%s", *used ? ", " : "", text);
    if (k > 0 && (size_t)k < size - *used) *used += (size_t)k;
}

/* The cause of a collective that lasted longer than --dist-timeout, as precisely as this rank can tell: a stopped
 * peer on this host is named with its pid; while waiting for rank 0's phase, rank 0 (its signs of life stopped);
 * else the ranks on the other hosts, one of which died or hangs, or the network to them is down. */
static void describe_silence(char *why, size_t size, double waited, const char *myhost) {
    char list[512] = "", item[256];
    size_t used = 0;
    for (int r = 0; r < g.world; r++) {
        if (r == g.rank || strcmp(g.peers[r].host, myhost) != 0 || !local_peer_stopped(&g.peers[r])) continue;
        snprintf(item, sizeof item, "rank %d (pid %d on host %s)", r, g.peers[r].pid, g.peers[r].host);
        append(list, sizeof list, &used, item);
    }
    if (used > 0) {
        snprintf(why, size, "%s stopped (SIGSTOP or a debugger): no answer for %.0f s (the limit is --dist-timeout)",
                 list, waited);
        return;
    }
    if (atomic_load(&g.awaiting_root)) {
        snprintf(why, size, "rank 0 (host %s) sent no sign of life for %.0f s (it hangs, or the network to its host "
                 "is down; the limit is --dist-timeout)", g.peers[0].host, waited);
        return;
    }
    for (int r = 0; r < g.world; r++) {
        if (r == g.rank || strcmp(g.peers[r].host, myhost) == 0) continue;
        snprintf(item, sizeof item, "rank %d on host %s", r, g.peers[r].host);
        append(list, sizeof list, &used, item);
    }
    if (used > 0)
        snprintf(why, size, "no answer for %.0f s from the other hosts (%s): a rank there died or hangs, or the network "
                 "to it is down (the limit is --dist-timeout)", waited, list);
    else
        snprintf(why, size, "no answer from the other ranks for %.0f s (one of them hangs; the limit is "
                 "--dist-timeout)", waited);
}

static void *watchdog_main(void *arg) {
    (void)arg;
    char myhost[DIST_HOST_LEN];
    memcpy(myhost, g.peers[g.rank].host, sizeof myhost);
    for (;;) {
        struct timespec nap = {0, DIST_POLL_MS * 1000000L};
        nanosleep(&nap, NULL);
        if (!atomic_load(&g.watching)) continue;
        char gone[512] = "";
        size_t used = 0;
        int n_gone = 0;
        for (int r = 0; r < g.world; r++) {
            if (r == g.rank || strcmp(g.peers[r].host, myhost) != 0 || !local_peer_gone(&g.peers[r])) continue;
            int k = snprintf(gone + used, sizeof gone - used, "%srank %d (pid %d)", n_gone ? ", " : "", r,
                             g.peers[r].pid);
            if (k > 0 && (size_t)k < sizeof gone - used) used += (size_t)k;
            n_gone++;
        }
        if (n_gone > 0) {
            char why[640];
            snprintf(why, sizeof why, "%s died", gone);
            watchdog_fail(why);
        }
        double waited = mono_seconds() - atomic_load(&g.since);
        if (atomic_load(&g.watching) && waited > g.timeout_s) {
            char why[768];
            describe_silence(why, sizeof why, waited, myhost);
            watchdog_fail(why);
        }
    }
    return NULL;
}

void dist_watch_begin(const char *what) {
    if (!g.active) return;
    snprintf(g.what, sizeof g.what, "%s", what);
    atomic_store(&g.since, mono_seconds());
    atomic_store(&g.watching, 1);
}

void dist_watch_end(void) {
    if (!g.active) return;
    atomic_store(&g.watching, 0);
    atomic_store(&g.awaiting_root, 0);
}

/* ---- setup ---- */

static _Noreturn void mpi_fail(int rc, const char *call, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    die("%s failed during the %s: %s (another rank probably died; the last committed checkpoint is intact)", call,
        what, msg);
}

#define MPI_CHECK(call, what)                                                                                        \
    do {                                                                                                             \
        int rc_ = (call);                                                                                            \
        if (rc_ != MPI_SUCCESS) mpi_fail(rc_, #call, (what));                                                        \
    } while (0)

void dist_init(const char *program, int *argc, char ***argv, double timeout_s) {
    snprintf(g.program, sizeof g.program, "%s", program);
    log_set_program(g.program);
    if (!launched_by_mpi()) return;
    int provided = 0;
    /* SERIALIZED: one thread at a time calls MPI: the main thread, except during a rank-0-only phase, when the main
     * thread of rank 0 calls none and its beating thread sends the signs of life (the watchdog never calls MPI;
     * OpenMP threads never do). */
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) die("MPI_Init_thread failed (error %d): is this process started by mpirun/srun?", rc);
    if (provided < MPI_THREAD_SERIALIZED)
        die("this MPI library offers thread level %d, below MPI_THREAD_SERIALIZED (%d), which the watchdog of rank 0's "
            "evaluation and checkpoint phases needs", provided, MPI_THREAD_SERIALIZED);
    g.active = true;
    g.timeout_s = timeout_s > 0 ? timeout_s : DIST_DEFAULT_TIMEOUT_S;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g.world);
    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g.rank, MPI_INFO_NULL, &local), "setup");
    MPI_Comm_size(local, &g.local_size);
    MPI_Comm_rank(local, &g.local_rank);
    MPI_Comm_free(&local);
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g.beat_comm), "setup"); /* inherits MPI_ERRORS_RETURN */
    if (g.world > 1) {
        snprintf(g.program, sizeof g.program, "%s[rank %d]", program, g.rank);
        if (g.rank != 0) log_set_verbosity(0);
    }

    PeerId me;
    memset(&me, 0, sizeof me);
    me.pid = (int)getpid();
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "unknown");
    g.peers = xcalloc((size_t)g.world, sizeof *g.peers);
    MPI_CHECK(MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, g.peers, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD),
              "setup");
    int err = pthread_create(&g.thread, NULL, watchdog_main, NULL);
    if (err != 0) die("cannot start the MPI watchdog thread: %s", strerror(err));
    g.thread_started = true;
}

void dist_at_finalize(void (*fn)(void)) {
    if (g.n_at_finalize == (int)(sizeof g.at_finalize / sizeof g.at_finalize[0])) die("dist_at_finalize: too many");
    g.at_finalize[g.n_at_finalize++] = fn;
}

void dist_finalize(void) {
    while (g.n_at_finalize > 0) g.at_finalize[--g.n_at_finalize]();
    if (!g.active) return;
    /* The watchdog sleeps between polls and touches no MPI state: it ends with the process. */
    MPI_Comm_free(&g.beat_comm);
    MPI_Finalize();
    g.active = false;
}

/* ---- collectives (large buffers in chunks: MPI counts are int) ---- */

static void allreduce(void *x, size_t n, MPI_Datatype type, size_t elem, MPI_Op op, const char *what) {
    if (!g.active || g.world == 1) return;
    dist_watch_begin(what);
    const size_t chunk = (size_t)1 << 30;
    for (size_t o = 0; o < n; o += chunk) {
        size_t len = n - o < chunk ? n - o : chunk;
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, (char *)x + o * elem, (int)len, type, op, MPI_COMM_WORLD), what);
    }
    dist_watch_end();
}

void dist_allreduce_sum_f64(double *x, size_t n, const char *what) {
    allreduce(x, n, MPI_DOUBLE, sizeof *x, MPI_SUM, what);
}
void dist_allreduce_sum_f32(float *x, size_t n, const char *what) {
    allreduce(x, n, MPI_FLOAT, sizeof *x, MPI_SUM, what);
}
void dist_allreduce_max_int(int *x, size_t n, const char *what) { allreduce(x, n, MPI_INT, sizeof *x, MPI_MAX, what); }

void dist_bcast(void *buf, size_t bytes, int root, const char *what) {
    if (!g.active || g.world == 1) return;
    dist_watch_begin(what);
    const size_t chunk = (size_t)1 << 30;
    for (size_t o = 0; o < bytes; o += chunk) {
        size_t len = bytes - o < chunk ? bytes - o : chunk;
        MPI_CHECK(MPI_Bcast((char *)buf + o, (int)len, MPI_BYTE, root, MPI_COMM_WORLD), what);
    }
    dist_watch_end();
}

void dist_barrier(const char *what) {
    if (!g.active || g.world == 1) return;
    dist_watch_begin(what);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD), what);
    dist_watch_end();
}

void dist_allgather_str(const char *mine, char *out, const char *what) {
    char buf[128];
    memset(buf, 0, sizeof buf);
    snprintf(buf, sizeof buf, "%s", mine);
    if (!g.active || g.world == 1) {
        memcpy(out, buf, sizeof buf);
        return;
    }
    dist_watch_begin(what);
    MPI_CHECK(MPI_Allgather(buf, (int)sizeof buf, MPI_CHAR, out, (int)sizeof buf, MPI_CHAR, MPI_COMM_WORLD), what);
    dist_watch_end();
}

/* ---- rank-0-only phases ---- */

static void *beat_main(void *arg) {
    (void)arg;
    const double period = fmin(g.timeout_s / 4, DIST_MAX_BEAT_S);
    double next = mono_seconds() + period;
    while (!atomic_load(&g.phase_over)) {
        struct timespec nap = {0, 10 * 1000000L};
        nanosleep(&nap, NULL);
        if (mono_seconds() < next || atomic_load(&g.phase_over)) continue;
        int beat = 0;
        for (int r = 1; r < g.world; r++) /* a failed send: the main thread's TAG_DONE will fail and say why */
            if (MPI_Send(&beat, 1, MPI_INT, r, TAG_ALIVE, g.beat_comm) != MPI_SUCCESS) return NULL;
        next = mono_seconds() + period;
    }
    return NULL;
}

void dist_root_phase_abandon(void) {
    if (!g.in_root_phase) return;
    g.in_root_phase = false;
    int msg = 0;
    atomic_store(&g.phase_over, 1);
    dist_watch_begin(g.phase_what); /* a send blocked on a peer that went away must not hang rank 0 */
    pthread_join(g.beater, NULL);
    for (int r = 1; r < g.world; r++)
        MPI_CHECK(MPI_Send(&msg, 1, MPI_INT, r, TAG_DONE, g.beat_comm), g.phase_what);
    dist_watch_end();
}

void dist_root_phase(const char *what, void (*fn)(void *ctx), void *ctx) {
    if (!g.active || g.world == 1) {
        fn(ctx);
        return;
    }
    int msg = 0;
    if (g.rank == 0) {
        atomic_store(&g.phase_over, 0);
        int err = pthread_create(&g.beater, NULL, beat_main, NULL);
        if (err != 0) die("cannot start the thread that signals rank 0's %s: %s", what, strerror(err));
        g.in_root_phase = true;
        g.phase_what = what;
        fn(ctx);
        dist_root_phase_abandon(); /* the normal end: the same steps */
        return;
    }
    /* The others: every sign of life restarts the clock; TAG_DONE comes after the last one (messages between two
     * ranks on one communicator arrive in order), so none is left behind for the next phase. */
    atomic_store(&g.awaiting_root, 1); /* before watching: a timeout always names rank 0 */
    dist_watch_begin(what);
    for (;;) {
        MPI_Status st;
        MPI_CHECK(MPI_Recv(&msg, 1, MPI_INT, 0, MPI_ANY_TAG, g.beat_comm, &st), what);
        if (st.MPI_TAG == TAG_DONE) break;
        atomic_store(&g.since, mono_seconds());
    }
    dist_watch_end();
}
