/* Command-line parsing shared by every stage: long options only (--name value, --name=value, --flag),
 * --help prints the usage and exits 0, an unknown option, a missing or empty value is one error line and exit 2. */
#ifndef PIPELINE_CLI_H
#define PIPELINE_CLI_H

#include <stdbool.h>

/* OPT_STRING refuses an empty value (an unset shell variable: "--out $DIR" with DIR empty would otherwise mean "/"
 * once joined with a file name); OPT_STRING_OR_EMPTY is for options where '' means something. */
typedef enum { OPT_STRING, OPT_STRING_OR_EMPTY, OPT_INT, OPT_DOUBLE, OPT_FLAG, OPT_STRING_LIST } OptType;

/* Target of OPT_STRING_LIST: a repeatable option (--set a=1 --set b=2), values in the order given (they point into
 * argv). More than CLI_LIST_MAX occurrences are a usage error. */
#define CLI_LIST_MAX 64
typedef struct {
    const char *items[CLI_LIST_MAX];
    int n;
} CliStringList;

typedef struct {
    const char *name;     /* without the leading "--" */
    OptType type;
    void *target;         /* const char ** (both string types), long *, double *, bool *, CliStringList * */
    const char *help;     /* one line; include the default */
    bool required;
} CliOption;

/* Parses argv into the targets (which hold defaults on entry). summary: one paragraph printed by --help.
 * Positional arguments are not accepted. Exits on --help (0) and on errors (2). */
void cli_parse(int argc, char **argv, const char *program, const char *summary, const CliOption *opts, int n_opts);

/* A usage error found after parsing (e.g. a malformed --set): "<program>: error: <message> (see <program> --help)"
 * on stderr, exit 2, like the errors cli_parse reports itself. */
_Noreturn void cli_usage_die(const char *program, const char *message);

#endif
