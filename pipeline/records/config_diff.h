/* What differs between runs' configs: each config JSON flattened to dotted keys (model.d_model, train.lr, ...;
 * arrays and scalars compared by their unformatted JSON text), and the keys whose value is not the same in every
 * config (absent counts as a value), so that a confounded comparison (two runs differing in more than the factor
 * under study) is visible. */
#ifndef PIPELINE_CONFIG_DIFF_H
#define PIPELINE_CONFIG_DIFF_H

#include <stdbool.h>

#include <cjson/cJSON.h>

typedef struct {
    char *key;      /* dotted path */
    char **values;  /* [n_configs] unformatted JSON, NULL where the key is absent (or the config is NULL) */
} ConfigDiffRow;

typedef struct {
    int n_configs, n_rows;
    ConfigDiffRow *rows; /* sorted by key */
} ConfigDiff;

/* configs[n] (a NULL entry is a run without a config: every key is absent there). Keys listed in skip (NULL-ended,
 * may be NULL) are left out. */
void config_diff(const cJSON *const *configs, int n, const char *const *skip, ConfigDiff *out);
void config_diff_free(ConfigDiff *d);

/* Whether a dotted key can change neither what a run learns nor how it is evaluated: the description, a comment,
 * or a key of the analyze section (the depth analysis reads the trained weights after evaluation). Two runs that
 * differ only in such keys are a comparable pair. */
bool config_key_is_analysis_only(const char *key);

#endif
