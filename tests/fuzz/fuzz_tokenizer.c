/* The tokenizer file (data/EXP/tokenizer.json, datasets/tokenizer.c): load, then encode and decode a question and an
 * answer with whatever pieces it holds. */
#include <stdlib.h>

#include "datasets/tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], err[4096] = "";
    fuzz_write_file("tokenizer.json", data, size, path, sizeof path);
    Tokenizer *t = tokenizer_load(path, err, sizeof err);
    fuzz_check_error(t ? 0 : -1, err);
    if (!t) return 0;
    int32_t ids[256];
    int n = tokenizer_encode_question(t, "What is 12 + -3.5?", ids, 256);
    if (n > 0) free(tokenizer_decode(t, ids, n));
    n = tokenizer_encode_answer(t, "8.5", ids, 256);
    if (n > 0) free(tokenizer_decode(t, ids, n));
    n = tokenizer_encode(t, "Let x(q) = q**2. \xe2\x96\x81 ~", ids, 256);
    if (n > 0) free(tokenizer_decode(t, ids, n));
    tokenizer_free(t);
    return 0;
}
