/* Round-trip-exact double formatting (see exact_number.h). */
#include "pipeline/base/exact_number.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool exact_number_format(double v, char buf[EXACT_NUMBER_CAP]) {
    buf[0] = '\0';
    if (!isfinite(v)) return false;
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, EXACT_NUMBER_CAP, "%.*g", digits, v);
        double back = strtod(buf, NULL);
        if (memcmp(&back, &v, sizeof v) == 0) break; /* the same bits (so -0 stays -0) */
    }
    return true;
}

/* Turns every number item under item into its exact raw text (or null). */
static bool numbers_to_exact(cJSON *item) {
    for (; item; item = item->next) {
        if (cJSON_IsNumber(item)) {
            char buf[EXACT_NUMBER_CAP];
            if (exact_number_format(item->valuedouble, buf)) {
                char *text = malloc(strlen(buf) + 1); /* released by cJSON_Delete (the default hooks' free) */
                if (!text) return false;
                strcpy(text, buf);
                item->type = cJSON_Raw | (item->type & cJSON_StringIsConst);
                item->valuestring = text;
            } else {
                item->type = cJSON_NULL | (item->type & cJSON_StringIsConst);
            }
        } else if (item->child && !numbers_to_exact(item->child)) {
            return false;
        }
    }
    return true;
}

char *json_print_exact(const cJSON *json, bool formatted) {
    cJSON *copy = cJSON_Duplicate(json, true);
    if (!copy) return NULL;
    char *text = NULL; /* the copy has no siblings (cJSON_Duplicate), so only json's own tree is converted */
    if (numbers_to_exact(copy)) text = formatted ? cJSON_Print(copy) : cJSON_PrintUnformatted(copy);
    cJSON_Delete(copy);
    return text;
}

cJSON *exact_number_json(double v) {
    char buf[EXACT_NUMBER_CAP];
    return exact_number_format(v, buf) ? cJSON_CreateRaw(buf) : cJSON_CreateNull();
}
