/* Module-name patterns (see module_regex.h). */
#include "pipeline/base/module_regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"

int module_regex_compile(regex_t *re, const char *pattern, const char *what, char *err, size_t errlen) {
    size_t len = strlen(pattern);
    if (len > MODULE_REGEX_MAX_LENGTH) {
        set_err(err, errlen, "invalid %s: %zu characters, more than the %d accepted", what, len,
                MODULE_REGEX_MAX_LENGTH);
        return -1;
    }
    /* Walk the pattern (bracket expressions and escapes are literal text): repetition operators may not be stacked
     * ("a**", "a+?") nor applied to a group that holds one ("(a*)+"): glibc's regcomp takes time and memory
     * exponential in such nesting (fuzzing: 36 stacked '*' took minutes; "((a*)+)*..." 8 deep took 6 minutes). */
    enum { MAX_DEPTH = 64 };
    int group_has_repeat[MAX_DEPTH + 1] = {0};
    int depth = 0, repeats = 0, prev_repeat = 0, prev_group_had_repeat = 0;
    for (const char *p = pattern; *p; p++) {
        int is_repeat = *p == '*' || *p == '+' || *p == '?';
        if (*p == '{') {
            set_err(err, errlen, "invalid %s '%s': counted repetition {m,n} is not accepted in module patterns (the "
                                 "regular expression engine copies the expression m to n times; write the names out)",
                    what, pattern);
            return -1;
        }
        if (is_repeat) {
            if (prev_repeat || prev_group_had_repeat) {
                set_err(err, errlen, "invalid %s '%s': a repetition ('*', '+', '?') applied to a repetition at "
                                     "character %ld (nested repetitions make the regular expression engine take "
                                     "exponential time)", what, pattern, (long)(p - pattern) + 1);
                return -1;
            }
            if (++repeats > MODULE_REGEX_MAX_REPEATS) {
                set_err(err, errlen, "invalid %s '%s': more than %d repetition operators ('*', '+', '?')", what,
                        pattern, MODULE_REGEX_MAX_REPEATS);
                return -1;
            }
            group_has_repeat[depth] = 1;
        }
        prev_group_had_repeat = 0;
        if (*p == '\\' && p[1]) {
            p++;
        } else if (*p == '[') {
            const char *q = p + 1;
            if (*q == '^') q++;
            if (*q == ']') q++; /* a leading ']' is literal */
            while (*q && *q != ']') q++;
            if (!*q) break;     /* unterminated: regcomp reports it */
            p = q;
        } else if (*p == '(') {
            if (depth == MAX_DEPTH) {
                set_err(err, errlen, "invalid %s '%s': groups nested more than %d deep", what, pattern, MAX_DEPTH);
                return -1;
            }
            group_has_repeat[++depth] = 0;
        } else if (*p == ')' && depth > 0) {
            prev_group_had_repeat = group_has_repeat[depth];
            depth--;
            if (prev_group_had_repeat) group_has_repeat[depth] = 1;
        }
        prev_repeat = is_repeat;
    }
    size_t n = len + 8;
    char *anchored = xmalloc(n);
    snprintf(anchored, n, "^(%s)$", pattern); /* full match, as the paper's re.fullmatch */
    int rc = regcomp(re, anchored, REG_EXTENDED | REG_NOSUB);
    free(anchored);
    if (rc != 0) {
        char msg[256];
        regerror(rc, re, msg, sizeof msg);
        set_err(err, errlen, "invalid %s '%s': %s", what, pattern, msg);
        return -1;
    }
    return 0;
}
