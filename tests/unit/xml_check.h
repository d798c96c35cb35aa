/* A small XML well-formedness checker for the SVG/HTML tests: balanced and properly nested tags, quoted attributes,
 * no raw '<' or '&' in text (only the five predefined entities and numeric references). Header-only. */
#ifndef TESTS_UNIT_XML_CHECK_H
#define TESTS_UNIT_XML_CHECK_H

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Returns 0 if well-formed, else -1 with a reason (and byte offset) in why. `void_html` accepts HTML void elements
 * (meta, br, ...) without a closing tag and skips a leading <!DOCTYPE ...>. */
static inline int xml_check(const char *s, int void_html, char *why, size_t whylen) {
    char stack[256][32];
    int depth = 0, roots = 0;
    const char *p = s;
    if (void_html && strncmp(p, "<!DOCTYPE", 9) == 0) p = strchr(p, '>') + 1;
    while (*p) {
        if (*p == '&') {
            const char *ents[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&#"};
            int ok = 0;
            for (int i = 0; i < 5 && !ok; i++) ok = strncmp(p, ents[i], strlen(ents[i])) == 0;
            if (!ok) return snprintf(why, whylen, "raw '&' at %ld", (long)(p - s)), -1;
            p++;
            continue;
        }
        if (*p != '<') { p++; continue; }
        int closing = p[1] == '/';
        const char *q = p + 1 + closing;
        char name[32];
        int n = 0;
        while (*q && (isalnum((unsigned char)*q) || *q == '-' || *q == ':') && n < 31) name[n++] = *q++;
        name[n] = '\0';
        if (n == 0) return snprintf(why, whylen, "bad tag at %ld", (long)(p - s)), -1;
        /* attributes: name="value" with no '<' inside values */
        int self_close = 0;
        while (*q && *q != '>') {
            if (*q == '"') {
                const char *e = strchr(q + 1, '"');
                if (!e) return snprintf(why, whylen, "unterminated attribute at %ld", (long)(q - s)), -1;
                for (const char *c = q + 1; c < e; c++)
                    if (*c == '<') return snprintf(why, whylen, "'<' in attribute at %ld", (long)(c - s)), -1;
                q = e + 1;
                continue;
            }
            if (*q == '/' && q[1] == '>') self_close = 1;
            q++;
        }
        if (!*q) return snprintf(why, whylen, "unterminated tag <%s", name), -1;
        static const char *voids[] = {"meta", "br", "hr", "img", "link", "input"};
        int is_void = 0;
        for (int i = 0; void_html && i < 6; i++) is_void |= strcmp(name, voids[i]) == 0;
        if (closing) {
            if (depth == 0 || strcmp(stack[depth - 1], name) != 0)
                return snprintf(why, whylen, "</%s> does not close <%s> at %ld", name, depth ? stack[depth - 1] : "",
                                (long)(p - s)), -1;
            depth--;
        } else if (!self_close && !is_void) {
            if (depth == 0) roots++;
            if (depth == 256) return snprintf(why, whylen, "too deep"), -1;
            snprintf(stack[depth++], 32, "%s", name);
        } else if (depth == 0) {
            roots++;
        }
        p = q + 1;
    }
    if (depth != 0) return snprintf(why, whylen, "<%s> never closed", stack[depth - 1]), -1;
    if (roots != 1) return snprintf(why, whylen, "%d root elements", roots), -1;
    return 0;
}

static inline int count_substr(const char *s, const char *sub) {
    int n = 0;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub)) n++;
    return n;
}

#endif
