/* Stop signals during training (see train_signals.h). */
#include "model/training/train_signals.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/base/dist.h"
#include "pipeline/base/log.h"

static volatile sig_atomic_t g_signal = 0;
static void on_signal(int sig) { g_signal = sig; }

void train_signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second signal kills at once (the commit protocol keeps the checkpoint sound) */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
        die("sigaction failed: %s", strerror(errno));
}

int train_signals_agree(long step_number) {
    int got[2] = {g_signal == SIGINT, g_signal == SIGTERM};
    char what[96];
    snprintf(what, sizeof what, "stop-signal agreement of step %ld", step_number);
    dist_allreduce_max_int(got, 2, what);
    return got[0] ? SIGINT : got[1] ? SIGTERM : 0;
}
