/* The JSON records passed between stages and researchers (pipeline/result_record.c): result.json (evaluate),
 * analysis.json (analyze) and train_summary.json (train), each read strictly from the same input. */
#include "pipeline/result_record.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], err[4096] = "";
    fuzz_write_file("record.json", data, size, path, sizeof path);
    ResultRecord r;
    memset(&r, 0, sizeof r);
    int rc = result_record_load(&r, path, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) result_record_free(&r);
    AnalysisRecord a;
    memset(&a, 0, sizeof a);
    err[0] = '\0';
    rc = analysis_record_load(&a, path, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) analysis_record_free(&a);
    TrainSummary s;
    memset(&s, 0, sizeof s);
    err[0] = '\0';
    rc = train_summary_load(&s, path, err, sizeof err);
    fuzz_check_error(rc, err);
    return 0;
}
