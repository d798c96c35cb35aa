/* Module-name patterns (fetch's --filter, tokenize's exclude_tokenizer_pattern): a POSIX extended regular expression
 * that must match a whole module name, as the paper's re.fullmatch. One definition for both stages. */
#ifndef PIPELINE_MODULE_REGEX_H
#define PIPELINE_MODULE_REGEX_H

#include <regex.h>
#include <stddef.h>

/* Longest pattern accepted and most repetition operators ('*', '+', '?'); counted repetition ({m,n}), stacked
 * repetitions ("a**") and repetitions of a group that holds one ("(a*)+") are refused: glibc's regcomp copies the
 * sub-expression of every '+' and counted repetition and walks epsilon closures of nested ones, in time and memory
 * exponential in the nesting (fuzzing found a 70-character filter that took more than 2 GiB, and 36 stacked '*'
 * that took minutes). Module-name patterns need none of these. */
#define MODULE_REGEX_MAX_LENGTH 512
#define MODULE_REGEX_MAX_REPEATS 16

/* Compiles "^(pattern)$" into re. 0, or -1 with "invalid <what> '<pattern>': <why>" in err (nothing to free). */
int module_regex_compile(regex_t *re, const char *pattern, const char *what, char *err, size_t errlen);

#endif
