/* Doubles as text that reads back to the very same bits: the shortest of "%.15g", "%.16g" and "%.17g" that strtod
 * parses to the same double (%.17g always does, for every finite double; the shorter ones keep 0.1 as "0.1" rather
 * than "0.10000000000000001"). cJSON's own number printer is not enough where exactness matters: it accepts a
 * 15-digit text that reads back within a relative 2^-52, which can move the last bit. The text is a valid JSON
 * number and a '.'-decimal CSV number (no locale is set, so printf's decimal point is '.'). */
#ifndef PIPELINE_EXACT_NUMBER_H
#define PIPELINE_EXACT_NUMBER_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#define EXACT_NUMBER_CAP 32 /* "-2.2250738585072014e-308" and its NUL fit */

/* The text of a finite v into buf; returns false (buf "") for NaN and the infinities, which have no JSON number. */
bool exact_number_format(double v, char buf[EXACT_NUMBER_CAP]);

/* A JSON item of v: a number printed by exact_number_format, or null when v is not finite. NULL only when out of
 * memory. */
cJSON *exact_number_json(double v);

/* json printed (cJSON_Print when formatted, else cJSON_PrintUnformatted) with every number in exact_number_format's
 * text and non-finite numbers as null (as cJSON prints them): the writer of every JSON record and JSON-lines file,
 * so that what a stage computed is what the next one reads, bit for bit. Returns a string to release with
 * cJSON_free; NULL only when out of memory. json itself is not changed. */
char *json_print_exact(const cJSON *json, bool formatted);

#endif
