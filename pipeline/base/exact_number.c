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

cJSON *exact_number_json(double v) {
    char buf[EXACT_NUMBER_CAP];
    return exact_number_format(v, buf) ? cJSON_CreateRaw(buf) : cJSON_CreateNull();
}
