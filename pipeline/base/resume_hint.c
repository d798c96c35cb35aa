/* The continue command of an interrupted training run (see resume_hint.h). */
#include "pipeline/base/resume_hint.h"

#include <stdio.h>
#include <string.h>

static bool append(char *out, size_t n, const char *s) {
    size_t len = strlen(out), add = strlen(s);
    if (len + add + 1 > n) return false;
    memcpy(out + len, s, add + 1);
    return true;
}

bool shell_quote_append(char *out, size_t n, const char *s) {
    /* Characters that mean nothing to a shell in a plain word (= only matters before the command word, ~ and :
     * only at a word's start or in assignments; none of these change the argument bin/train receives). */
    const char *safe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+=,./:@%";
    if (s[0] && strspn(s, safe) == strlen(s)) return append(out, n, s);
    if (!append(out, n, "'")) return false;
    for (const char *c = s; *c; c++) {
        char one[2] = {*c, '\0'};
        if (!append(out, n, *c == '\'' ? "'\\''" : one)) return false;
    }
    return append(out, n, "'");
}

/* Is word (of length len) a RESUME=... assignment? */
static bool is_resume_word(const char *word, size_t len) { return len >= 7 && strncmp(word, "RESUME=", 7) == 0; }

/* The make command with its RESUME= words (outside quotes) dropped and RESUME=auto appended. */
static void make_command_resuming(char *out, size_t n, const char *cmd) {
    out[0] = '\0';
    size_t len = strlen(cmd), i = 0;
    char quote = 0;
    while (i < len) {
        /* one word: up to unquoted whitespace, quotes kept as written */
        size_t start = i;
        while (i < len && (quote || (cmd[i] != ' ' && cmd[i] != '\t'))) {
            if (quote && cmd[i] == quote) quote = 0;
            else if (!quote && (cmd[i] == '\'' || cmd[i] == '"')) quote = cmd[i];
            else if (quote == '"' && cmd[i] == '\\' && i + 1 < len) i++;
            i++;
        }
        if (i > start && !is_resume_word(cmd + start, i - start)) {
            size_t have = strlen(out), w = i - start;
            if (have + (have ? 1 : 0) + w + 1 > n) return;
            if (have) out[have++] = ' ';
            memcpy(out + have, cmd + start, w);
            out[have + w] = '\0';
        }
        while (i < len && (cmd[i] == ' ' || cmd[i] == '\t')) i++;
    }
    append(out, n, out[0] ? " RESUME=auto" : "RESUME=auto");
}

void resume_hint(char *out, size_t n, const ResumeHintInput *in) {
    if (n == 0) return;
    out[0] = '\0';
    char cmd[4096] = "";
    if (in->repro_command && in->repro_command[0]) {
        if (in->resumes) snprintf(cmd, sizeof cmd, "%s", in->repro_command);
        else make_command_resuming(cmd, sizeof cmd, in->repro_command);
        snprintf(out, n, "rerun `%s` to continue from the checkpoint%s", cmd,
                 in->resumes ? "" : " (RESUME=0 starts over)");
        return;
    }
    bool ok = true;
    if (in->world > 1) {
        char ranks[64];
        snprintf(ranks, sizeof ranks, "mpirun -np %d ", in->world);
        ok = append(cmd, sizeof cmd, ranks);
    }
    for (int i = 0; ok && i < in->argc; i++)
        ok = (i == 0 || append(cmd, sizeof cmd, " ")) && shell_quote_append(cmd, sizeof cmd, in->argv[i]);
    if (ok && !in->resumes) ok = append(cmd, sizeof cmd, " --auto-resume");
    if (!ok) snprintf(cmd, sizeof cmd, "%s ... --auto-resume", in->argc > 0 ? in->argv[0] : "bin/train");
    snprintf(out, n, "continue with `%s`%s", cmd,
             !in->under_make ? ""
             : in->resumes   ? " (or rerun the make command that started it)"
                             : " (or rerun the make command that started it with RESUME=auto; RESUME=0 starts over)");
}
