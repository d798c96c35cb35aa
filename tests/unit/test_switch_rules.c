/* The switch rules' table (model/switch_rules.c) and its documentation: every key is named where experiments/README.md
 * documents it (the MoE-variant switches in the table of its "MoE-variant switches" section, with every accepted
 * value, the other keys in its list of model keys), so a key added to the table without a README row fails here,
 * naming the key. And the table itself is well formed: one row per name and per ModelConfig field. */
#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/switch_rules.h"
#include "suite_runner.h"

#define README "experiments/README.md"

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s (run from the repository root)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* The README's switch table: the first run of lines starting with '|' in the section (a new string). */
static char *switch_table(const char *readme) {
    const char *p = strstr(readme, "\n## MoE-variant switches\n");
    ck_assert_msg(p != NULL, README ": no \"## MoE-variant switches\" section");
    p = strchr(p + 1, '\n') + 1;
    const char *start = NULL;
    for (const char *next; *p; p = next) {
        const char *eol = strchr(p, '\n');
        next = eol ? eol + 1 : p + strlen(p);
        if (*p == '|') {
            if (!start) start = p;
        } else if (start || strncmp(p, "## ", 3) == 0) {
            break;
        }
    }
    ck_assert_msg(start != NULL, README ": the \"MoE-variant switches\" section has no table");
    return strndup(start, (size_t)(p - start));
}

/* The README's list of model keys: from "Model keys" to "Train keys". */
static char *model_keys_list(const char *readme) {
    const char *start = strstr(readme, "Model keys");
    ck_assert_msg(start != NULL, README ": no list of model keys (\"Model keys ...\")");
    const char *end = strstr(start, "Train keys");
    ck_assert_msg(end != NULL, README ": the list of model keys does not end at \"Train keys\"");
    return strndup(start, (size_t)(end - start));
}

/* Whether text holds word as a whole word, not as a part of a longer name. */
static int has_word(const char *text, const char *word) {
    const size_t n = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
        const int before = p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
        const int after = isalnum((unsigned char)p[n]) || p[n] == '_';
        if (!before && !after) return 1;
    }
    return 0;
}

START_TEST(readme_names_every_key) {
    char *readme = read_text(README);
    char *table = switch_table(readme), *keys = model_keys_list(readme);
    char missing[2048] = "";
    int n_missing = 0, n_table = 0;
    for (int i = 0; i < switch_key_count(); i++) {
        const SwitchKey *k = switch_key(i);
        char quoted[96], problem[160] = "";
        if (k->doc == DOC_SWITCH_TABLE) {
            n_table++;
            snprintf(quoted, sizeof quoted, "`%s`", k->name);
            if (!strstr(table, quoted))
                snprintf(problem, sizeof problem, "the switch table (## MoE-variant switches) does not name %s", quoted);
            for (int v = 0; k->names && k->names[v] && !problem[0]; v++) {
                snprintf(quoted, sizeof quoted, "`\"%s\"`", k->names[v]);
                if (!strstr(table, quoted))
                    snprintf(problem, sizeof problem, "the switch table does not name %s's value %s", k->name, quoted);
            }
        } else if (!has_word(keys, k->name)) {
            snprintf(problem, sizeof problem, "the list of model keys (Model keys ... Train keys) does not name %s",
                     k->name);
        }
        if (problem[0]) {
            const size_t used = strlen(missing);
            snprintf(missing + used, sizeof missing - used, "\n  " README ": %s (model.%s)", problem, k->name);
            n_missing++;
        }
    }
    ck_assert_msg(n_missing == 0, "%d key(s) of model/switch_rules.c not documented:%s", n_missing, missing);
    ck_assert_msg(n_table >= 15, "only %d keys marked for the switch table (is the table read?)", n_table);
    free(table);
    free(keys);
    free(readme);
}
END_TEST

START_TEST(table_is_well_formed) {
    ck_assert_int_le(switch_key_count(), SWITCH_KEYS_MAX);
    ck_assert_str_eq(switch_key(0)->name, "arch"); /* read first, written first */
    for (int i = 0; i < switch_key_count(); i++) {
        const SwitchKey *k = switch_key(i);
        ck_assert_msg(k->name && k->archs != 0 && (k->required & ~k->archs) == 0, "row %d", i);
        ck_assert_msg((k->type == SWITCH_ENUM) == (k->names != NULL), "%s: names iff an enum", k->name);
        ck_assert_msg((k->type == SWITCH_ENUM) == (k->domain == DOMAIN_NAMES), "%s: an enum's domain is its names",
                      k->name);
        ck_assert_ptr_eq(switch_key_find(k->name), k);
        for (int j = 0; j < i; j++) ck_assert_msg(switch_key(j)->offset != k->offset, "%s: field used twice", k->name);
    }
    ck_assert_ptr_null(switch_key_find("ff_n_expert"));
    ck_assert_ptr_null(switch_key(switch_key_count()));
}
END_TEST

/* The refusal line and the texts it is built from. */
START_TEST(refusal_line) {
    char err[128], buf[96];
    ck_assert_int_eq(switch_refusal(err, sizeof err, "exp.json", "ff_k", "got %d", 3), -1);
    ck_assert_str_eq(err, "exp.json: model.ff_k: got 3");
    switch_refusal(err, sizeof err, NULL, "ff_k", "x");
    ck_assert_str_eq(err, "model.ff_k: x");
    switch_refusal(err, sizeof err, NULL, NULL, "too large");
    ck_assert_str_eq(err, "model: too large");
    ck_assert_str_eq(switch_archs_text(ARCHS_MOEUT, buf, sizeof buf), "\"moeut\"");
    ck_assert_str_eq(switch_archs_text(ARCHS_MOEUT | ARCHS_MOE, buf, sizeof buf), "\"moeut\" and \"moe\"");
    ck_assert_str_eq(switch_names_text(switch_key_find("arch")->names, buf, sizeof buf),
                     "\"dense\", \"moeut\" or \"moe\"");
    ck_assert_str_eq(model_arch_name(ARCH_MOE), "moe");
}
END_TEST

int main(void) {
    Suite *s = suite_create("switch_rules");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, readme_names_every_key);
    tcase_add_test(tc, table_is_well_formed);
    tcase_add_test(tc, refusal_line);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
