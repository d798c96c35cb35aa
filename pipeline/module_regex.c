/* Module-name patterns (see module_regex.h). */
#include "pipeline/module_regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/log.h"

int module_regex_compile(regex_t *re, const char *pattern, const char *what, char *err, size_t errlen) {
    size_t len = strlen(pattern);
    if (len > MODULE_REGEX_MAX_LENGTH) {
        set_err(err, errlen, "invalid %s: %zu characters, more than the %d accepted", what, len,
                MODULE_REGEX_MAX_LENGTH);
        return -1;
    }
    if (strchr(pattern, '{')) {
        set_err(err, errlen, "invalid %s '%s': counted repetition {m,n} is not accepted in module patterns (the "
                             "regular expression engine copies the expression m to n times; write the names out)",
                what, pattern);
        return -1;
    }
    int repeats = 0;
    for (const char *p = pattern; *p; p++) repeats += *p == '+';
    if (repeats > MODULE_REGEX_MAX_REPEATS) {
        set_err(err, errlen, "invalid %s '%s': %d '+' operators, more than the %d accepted (stacked ones make the "
                             "regular expression engine use exponential memory)",
                what, pattern, repeats, MODULE_REGEX_MAX_REPEATS);
        return -1;
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
