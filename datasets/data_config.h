/* experiments/EXP/data.json as a whole: fetch and tokenize each read their own section strictly, and both check the
 * top level, so that a misspelt section ("tokeniser") or a section pasted twice (the first silently winning) is an
 * error rather than ignored. */
#ifndef DATASETS_DATA_CONFIG_H
#define DATASETS_DATA_CONFIG_H

#include <stddef.h>

#include "pipeline/base/config.h"

static inline int data_config_check_sections(const cJSON *root, const char *path, char *err, size_t errlen) {
    static const char *const sections[] = {"fetch", "tokenize"};
    return json_check_sections(root, path, sections, (int)(sizeof sections / sizeof sections[0]), err, errlen);
}

#endif
