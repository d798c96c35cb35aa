/* Long-option command-line parsing shared by the stages (see cli.h for the accepted forms). */
#include "pipeline/base/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *type_meta(OptType t) {
    switch (t) {
    case OPT_STRING:
    case OPT_STRING_OR_EMPTY:
    case OPT_STRING_LIST: return "VALUE";
    case OPT_INT: return "N";
    case OPT_DOUBLE: return "X";
    case OPT_FLAG: return "";
    }
    return "";
}

static void print_usage(FILE *out, const char *program, const char *summary, const CliOption *opts, int n_opts) {
    fprintf(out, "Usage: %s [options]\n\n", program);
    if (summary && summary[0]) fprintf(out, "%s\n\n", summary);
    fprintf(out, "Options:\n");
    for (int i = 0; i < n_opts; i++) {
        char left[96];
        const char *meta = type_meta(opts[i].type);
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, meta[0] ? " " : "", meta);
        fprintf(out, "  %-28s %s%s\n", left, opts[i].help ? opts[i].help : "", opts[i].required ? " (required)" : "");
    }
    fprintf(out, "  %-28s %s\n", "--help", "print this help and exit");
}

static _Noreturn void usage_error(const char *program, const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "%s: error: ", program);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see %s --help)\n", program);
    exit(2);
}

/* Stores a textual value into the option's target, exiting 2 on a malformed number. */
static void assign(const char *program, const CliOption *o, const char *value) {
    char *end = NULL;
    switch (o->type) {
    case OPT_STRING:
        if (!value[0]) usage_error(program, "--%s: empty value%s", o->name, "");
        *(const char **)o->target = value;
        break;
    case OPT_STRING_OR_EMPTY:
        *(const char **)o->target = value;
        break;
    case OPT_INT: {
        errno = 0;
        long v = strtol(value, &end, 10);
        if (errno != 0 || end == value || *end != '\0') usage_error(program, "--%s: not an integer: '%s'", o->name, value);
        *(long *)o->target = v;
        break;
    }
    case OPT_DOUBLE: {
        errno = 0;
        double v = strtod(value, &end);
        if (errno != 0 || end == value || *end != '\0') usage_error(program, "--%s: not a number: '%s'", o->name, value);
        *(double *)o->target = v;
        break;
    }
    case OPT_FLAG:
        *(bool *)o->target = true;
        break;
    case OPT_STRING_LIST: {
        CliStringList *list = o->target;
        if (!value[0]) usage_error(program, "--%s: empty value%s", o->name, "");
        if (list->n >= CLI_LIST_MAX) usage_error(program, "--%s: given more than 64 times%s", o->name, "");
        list->items[list->n++] = value;
        break;
    }
    }
}

_Noreturn void cli_usage_die(const char *program, const char *message) {
    usage_error(program, "%s%s", message, "");
}

void cli_parse(int argc, char **argv, const char *program, const char *summary, const CliOption *opts, int n_opts) {
    bool seen_opt[256] = {false};
    if (n_opts > 256) {
        fprintf(stderr, "%s: error: too many options (internal limit 256)\n", program);
        exit(2);
    }
    /* --help wins wherever it appears, even next to otherwise invalid arguments. */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_usage(stdout, program, summary, opts, n_opts);
            exit(0);
        }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') usage_error(program, "unexpected argument '%s'%s", arg, "");
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
        int found = -1;
        for (int k = 0; k < n_opts; k++)
            if (strlen(opts[k].name) == name_len && strncmp(opts[k].name, name, name_len) == 0) {
                found = k;
                break;
            }
        if (found < 0) {
            char buf[256];
            snprintf(buf, sizeof buf, "%.*s", (int)name_len, name);
            usage_error(program, "unknown option '--%s'%s", buf, "");
        }
        const CliOption *o = &opts[found];
        seen_opt[found] = true;
        if (o->type == OPT_FLAG) {
            if (eq) usage_error(program, "--%s takes no value%s", o->name, "");
            assign(program, o, NULL);
            continue;
        }
        const char *value;
        if (eq) {
            value = eq + 1;
        } else {
            if (i + 1 >= argc) usage_error(program, "--%s needs a value%s", o->name, "");
            value = argv[++i];
        }
        assign(program, o, value);
    }
    for (int k = 0; k < n_opts; k++)
        if (opts[k].required && !seen_opt[k]) usage_error(program, "missing required option --%s%s", opts[k].name, "");
}
