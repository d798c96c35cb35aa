/* Progress reporting: an in-place bar on a terminal, periodic plain lines otherwise (logs, CI). */
#include "pipeline/base/progress.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_start(Progress *p, const char *label, int64_t total, const char *unit) {
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "");
    p->total = total > 0 ? total : 0;
    p->start_s = now_seconds();
    p->last_draw_s = 0.0;
    p->plain_interval_s = 10.0;
    p->is_tty = isatty(STDERR_FILENO);
}

static const char *const byte_prefix[] = {"B", "KiB", "MiB", "GiB", "TiB"};

/* Human-readable count: bytes get binary prefixes, other units a plain integer. */
static void fmt_count(char *out, size_t n, int64_t v, const char *unit) {
    if (strcmp(unit, "B") == 0) {
        double x = (double)v;
        int k = 0;
        while (x >= 1024.0 && k < 4) x /= 1024.0, k++;
        if (k == 0) snprintf(out, n, "%lld B", (long long)v);
        else snprintf(out, n, "%.1f %s", x, byte_prefix[k]);
    } else {
        snprintf(out, n, "%lld%s%s", (long long)v, unit[0] ? " " : "", unit);
    }
}

void progress_format_rate(char *out, size_t n, double per_s, const char *unit) {
    if (!(per_s > 0) || !isfinite(per_s)) {
        snprintf(out, n, "-");
        return;
    }
    if (strcmp(unit, "B") == 0) {
        int k = 0;
        while (per_s >= 1024.0 && k < 4) per_s /= 1024.0, k++;
        snprintf(out, n, k == 0 ? "%.0f %s/s" : "%.1f %s/s", per_s, byte_prefix[k]);
        return;
    }
    const char *sep = unit[0] ? " " : "";
    if (per_s >= 1) {
        snprintf(out, n, per_s >= 100 ? "%.0f%s%s/s" : "%.1f%s%s/s", per_s, sep, unit);
        return;
    }
    /* Slower than one unit a second: the time one takes reads better than a rate like 0.031 steps/s. */
    char single[sizeof ((Progress *)0)->unit];
    snprintf(single, sizeof single, "%s", unit[0] ? unit : "unit");
    size_t len = strlen(single);
    if (len > 1 && single[len - 1] == 's') single[len - 1] = '\0';
    const double s = 1.0 / per_s;
    if (s < 10) snprintf(out, n, "%.1f s/%s", s, single);
    else if (s < 100) snprintf(out, n, "%.0f s/%s", s, single);
    else snprintf(out, n, "%.1f min/%s", s / 60.0, single);
}

void progress_format_duration(char *out, size_t n, double seconds) {
    const long s = seconds > 0 && isfinite(seconds) ? (long)(seconds + 0.5) : 0;
    if (s < 90) snprintf(out, n, "%ld s", s);
    else if (s < 5400) snprintf(out, n, "%ld min", (s + 30) / 60);
    else snprintf(out, n, "%ld h %ld min", s / 3600, (s % 3600 + 30) / 60);
}

static void draw(Progress *p, double now, int final) {
    /* Measured since the first update (see progress.h); before any update, since the start. */
    const double since_s = now - (p->has_base ? p->base_s : p->start_s);
    const int64_t since_done = p->done - (p->has_base ? p->base_done : 0);
    const double rate = since_s > 0 && since_done > 0 ? (double)since_done / since_s : 0.0;
    char done_s[48], total_s[48], rate_s[48];
    fmt_count(done_s, sizeof done_s, p->done, p->unit);
    fmt_count(total_s, sizeof total_s, p->total, p->unit);
    progress_format_rate(rate_s, sizeof rate_s, rate, p->unit);
    char eta[48] = "";
    if (p->total > 0 && rate > 0 && p->done < p->total) {
        char d[32];
        progress_format_duration(d, sizeof d, (double)(p->total - p->done) / rate);
        snprintf(eta, sizeof eta, ", %s left", d);
    }
    const char *sep = p->extra[0] ? " | " : "";
    if (p->is_tty) {
        char bar[31];
        int width = 30, fill = 0;
        if (p->total > 0) fill = (int)((double)width * (double)p->done / (double)p->total);
        if (fill > width) fill = width;
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : (p->total > 0 ? '.' : ' ');
        bar[width] = '\0';
        if (p->total > 0)
            fprintf(stderr, "\r\033[K%s [%s] %5.1f%% %s/%s %s%s%s%s", p->label, bar,
                    100.0 * (double)p->done / (double)p->total, done_s, total_s, rate_s, eta, sep, p->extra);
        else
            fprintf(stderr, "\r\033[K%s %s %s%s%s", p->label, done_s, rate_s, sep, p->extra);
        if (final) fputc('\n', stderr);
    } else {
        if (p->total > 0)
            fprintf(stderr, "%s: %s/%s (%.1f%%) %s%s%s%s\n", p->label, done_s, total_s,
                    100.0 * (double)p->done / (double)p->total, rate_s, eta, sep, p->extra);
        else
            fprintf(stderr, "%s: %s %s%s%s\n", p->label, done_s, rate_s, sep, p->extra);
    }
    fflush(stderr);
    p->last_draw_s = now;
}

void progress_update(Progress *p, int64_t done, const char *extra) {
    double now = now_seconds();
    if (!p->has_base) p->has_base = 1, p->base_done = done, p->base_s = now;
    p->done = done;
    if (extra) snprintf(p->extra, sizeof p->extra, "%s", extra);
    double interval = p->is_tty ? 0.1 : (p->plain_interval_s > 0 ? p->plain_interval_s : 10.0);
    /* Plain mode waits a full interval before its first line so short tasks print only the final one. */
    double since = now - (p->last_draw_s > 0 ? p->last_draw_s : (p->is_tty ? 0.0 : p->start_s));
    if (since >= interval) draw(p, now, 0);
}

void progress_finish(Progress *p) { draw(p, now_seconds(), 1); }
