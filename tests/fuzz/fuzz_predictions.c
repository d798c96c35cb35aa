/* Per-example predictions (runs/EXP/RUN/predictions.jsonl, pipeline/predictions_read.c), read by bin/report for the
 * paired comparisons: a header line, then one JSON object per example. */
#include <math.h>

#include "pipeline/predictions_read.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], err[4096] = "";
    fuzz_write_file("predictions.jsonl", data, size, path, sizeof path);
    PredictionTable t;
    memset(&t, 0, sizeof t);
    int rc = prediction_table_load(&t, path, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) {
        /* the semantic oracle: an accepted table's per-example values lie in their domains */
        for (long i = 0; i < t.n; i++)
            if (!(t.correct[i] <= 1 && t.set[i] <= 1 && t.answer_loss[i] >= 0 && t.answer_loss[i] < INFINITY)) {
                fprintf(stderr, "fuzz oracle: accepted example %ld outside its domain\n", i);
                abort();
            }
        (void)prediction_table_module(&t, "arithmetic__add_or_sub");
        prediction_table_free(&t);
    }
    return 0;
}
