/* BPE tokenizer: normalisation, piece rules, training on tiny corpora whose vocabularies are worked out by hand
 * below, determinism, and encode/decode on the embedded DM-math sample. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datasets/bpe_text.h"
#include "datasets/bpe_train.h"
#include "datasets/dm_math_text.h"
#include "datasets/tokenizer.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "tests/unit/suite_runner.h"

#define SAMPLE "datasets/dm_math_sample.tar.gz"
#define WS "\xe2\x96\x81" /* ▁ */

static char g_dir[256];

static void make_dir(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_bpe.%ld", (long)getpid());
    char err[256];
    ck_assert_msg(mkdir_p(g_dir, err, sizeof err) == 0, "%s", err);
}
static void remove_dir(void) { remove_tree(g_dir); }

/* Trains on the sentences, writes the tokenizer file to <g_dir>/<name> and returns its path (static buffer), or
 * NULL with err when training fails. */
static const char *train_to_file(const char *const *sentences, int n, int vocab, double coverage, const char *name,
                                 char *err, size_t errlen) {
    BpeTrainConfig cfg = {vocab, 16, coverage, true};
    BpeTrainer *t = bpe_trainer_new(&cfg);
    for (int i = 0; i < n; i++) bpe_trainer_add(t, sentences[i]);
    BpeVocab v;
    int rc = bpe_trainer_train(t, &v, err, errlen);
    bpe_trainer_free(t);
    if (rc != 0) return NULL;
    cJSON *json = bpe_vocab_to_json(&v, NULL);
    bpe_vocab_free(&v);
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    ck_assert_int_eq(json_save_file(path, json, err, errlen), 0);
    cJSON_Delete(json);
    return path;
}

static Tokenizer *load_ok(const char *path) {
    char err[512];
    Tokenizer *t = tokenizer_load(path, err, sizeof err);
    ck_assert_msg(t != NULL, "%s", err);
    return t;
}

/* Encodes text and returns the pieces joined by '|' (static buffer). */
static const char *pieces_of(const Tokenizer *t, const int32_t *ids, int n) {
    static char buf[4096];
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (i) strcat(buf, "|");
        strcat(buf, tokenizer_piece(t, ids[i]));
    }
    return buf;
}
static const char *encode_pieces(const Tokenizer *t, const char *text) {
    int32_t ids[512];
    int n = tokenizer_encode(t, text, ids, 512);
    ck_assert_int_le(n, 512);
    return pieces_of(t, ids, n);
}

/* ---- normalisation and piece rules ---- */

START_TEST(normalize_collapses_and_prefixes) {
    char out[64];
    const char *in = "  What  is\t2?  ";
    size_t n = bpe_normalize(in, strlen(in), out);
    ck_assert_str_eq(out, " What is 2?"); /* ' ' is the internal ▁ */
    ck_assert_uint_eq(n, strlen(" What is 2?"));
    ck_assert_uint_eq(bpe_normalize("   ", 3, out), 0);
    ck_assert_str_eq(out, "");
    in = "a" WS WS "b"; /* U+2581 in the input is whitespace too */
    bpe_normalize(in, strlen(in), out);
    ck_assert_str_eq(out, " a b");
}
END_TEST

START_TEST(piece_rules) {
    ck_assert(bpe_piece_valid(" ab", 3, 16, true));
    ck_assert(bpe_piece_valid(" -", 2, 16, true));
    ck_assert(bpe_piece_valid("1", 1, 16, true));
    ck_assert(!bpe_piece_valid("a b", 3, 16, true)); /* ▁ only first */
    ck_assert(!bpe_piece_valid("ab ", 3, 16, true));
    ck_assert(!bpe_piece_valid(" 1", 2, 16, true));  /* digits alone */
    ck_assert(!bpe_piece_valid("12", 2, 16, true));
    ck_assert(bpe_piece_valid("12", 2, 16, false));
    ck_assert(!bpe_piece_valid("Q:", 2, 16, true));  /* Latin + Common */
    ck_assert(!bpe_piece_valid(" a.", 3, 16, true));
    ck_assert(bpe_piece_valid("**", 2, 16, true));
    ck_assert(bpe_piece_valid(" abcdefghijklmno", 16, 16, true));
    ck_assert(!bpe_piece_valid(" abcdefghijklmnop", 17, 16, true)); /* 17 characters */
    ck_assert(!bpe_piece_valid("", 0, 16, true));
}
END_TEST

START_TEST(space_separated_corpus_form) {
    char *s = dm_space_separate("Let f(x) = -3*x**2.  What is 12?");
    ck_assert_str_eq(s, "Let f ( x ) = - 3 * x * * 2 . What is 12 ?");
    free(s);
    s = dm_corpus_sentence("What is -5 + 2?", "-3");
    ck_assert_str_eq(s, "Q: What is - 5 + 2 ? A: - 3 ");
    free(s);
}
END_TEST

/* ---- training on tiny corpora (vocabularies worked out by hand) ----
 *
 * Corpus {"ab ab ab", "abc", "b c"}: normalised "▁ab▁ab▁ab", "▁abc", "▁b▁c".
 * Characters: ▁ 6, b 5, a 4, c 2 (all kept at coverage 1), so the alphabet order is ▁ b a c.
 * Words: ▁ab x3, ▁abc x1, ▁b x1, ▁c x1.
 * Round 1: (▁,a)=4, (a,b)=4, (b,c)=1, (▁,b)=1, (▁,c)=1. Tie at 4 between "▁a" and "ab", both 2 characters: "ab"
 *          wins in code-point order ('a' = U+0061 < '▁' = U+2581).
 * Round 2: (▁,ab)=4 -> "▁ab".  Round 3: (▁ab,c)=1, (▁,b)=1, (▁,c)=1: fewest characters, then order -> "▁b".
 * Round 4: "▁c" (2 characters) beats "▁abc" (4).  Round 5: "▁abc".  Round 6: no pair occurs any more.
 * So vocab_size 12 = 3 + 4 characters + 5 merges uses every occurring pair. Beyond that the trainer fills (like
 * SentencePiece) from pairs seen in earlier rounds whose string is not a piece yet: (▁,a) from round 1, (b,c) from
 * round 1, (ab,c) from round 2, i.e. "▁a", "bc", "abc", ordered by characters then code point: "bc", "▁a", "abc".
 * vocab_size 15 is then the maximum. */
static const char *ABC[] = {"ab ab ab", "abc", "b c"};

START_TEST(train_tiny_corpus_exact_vocabulary) {
    char err[512];
    const char *path = train_to_file(ABC, 3, 12, 1.0, "abc.json", err, sizeof err);
    ck_assert_msg(path != NULL, "%s", err);
    Tokenizer *t = load_ok(path);
    const char *expect[] = {"<unk>", "<s>", "</s>", "ab", WS "ab", WS "b", WS "c", WS "abc", WS, "b", "a", "c"};
    ck_assert_int_eq(tokenizer_vocab_size(t), 12);
    for (int i = 0; i < 12; i++) ck_assert_str_eq(tokenizer_piece(t, i), expect[i]);
    /* Encoding merges by score (earliest merge first): "abc" -> ▁abc; "cab" -> ▁c + ab; "ba" -> ▁b + a. */
    ck_assert_str_eq(encode_pieces(t, "abc cab ba"), WS "abc|" WS "c|ab|" WS "b|a");
    tokenizer_free(t);
}
END_TEST

START_TEST(train_vocab_limit_is_hard) {
    char err[512];
    ck_assert(train_to_file(ABC, 3, 16, 1.0, "x.json", err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "cannot be reached") != NULL, "%s", err);
    const char *path15 = train_to_file(ABC, 3, 15, 1.0, "abc15.json", err, sizeof err);
    ck_assert_msg(path15 != NULL, "%s", err);
    Tokenizer *t15 = load_ok(path15);
    const char *expect15[] = {"<unk>", "<s>", "</s>", "ab", WS "ab", WS "b", WS "c", WS "abc",
                              "bc", WS "a", "abc", WS, "b", "a", "c"};
    for (int i = 0; i < 15; i++) ck_assert_str_eq(tokenizer_piece(t15, i), expect15[i]);
    /* The zero-count pieces rank below every real merge: in "▁bc" the merge ▁b (score -2) beats bc (-5); in "▁cbc"
     * ▁c comes first, then the leftover b,c merge into bc. */
    ck_assert_str_eq(encode_pieces(t15, "abc bc cbc"), WS "abc|" WS "b|c|" WS "c|bc");
    tokenizer_free(t15);
    ck_assert(train_to_file(ABC, 3, 6, 1.0, "x.json", err, sizeof err) == NULL); /* < 3 + 4 characters */
    ck_assert_msg(strstr(err, "smaller than") != NULL, "%s", err);
    /* vocab 9 keeps the first two merges only. */
    const char *path = train_to_file(ABC, 3, 9, 1.0, "abc9.json", err, sizeof err);
    ck_assert_msg(path != NULL, "%s", err);
    Tokenizer *t = load_ok(path);
    const char *expect[] = {"<unk>", "<s>", "</s>", "ab", WS "ab", WS, "b", "a", "c"};
    for (int i = 0; i < 9; i++) ck_assert_str_eq(tokenizer_piece(t, i), expect[i]);
    tokenizer_free(t);
}
END_TEST

/* Coverage 0.85 on the same corpus: ▁ b a cover 15/17 = 0.882 >= 0.85 before c is added, so c is dropped and encodes
 * as <unk>; merges: "ab", "▁ab", "▁b" (then nothing: every other pair involves c). */
START_TEST(train_character_coverage_drops_rare_chars) {
    char err[512];
    const char *path = train_to_file(ABC, 3, 9, 0.85, "cov.json", err, sizeof err);
    ck_assert_msg(path != NULL, "%s", err);
    Tokenizer *t = load_ok(path);
    const char *expect[] = {"<unk>", "<s>", "</s>", "ab", WS "ab", WS "b", WS, "b", "a"};
    for (int i = 0; i < 9; i++) ck_assert_str_eq(tokenizer_piece(t, i), expect[i]);
    int32_t ids[16];
    int n = tokenizer_encode(t, "abc c", ids, 16);
    ck_assert_str_eq(pieces_of(t, ids, n), WS "ab|<unk>|" WS "|<unk>");
    char *d = tokenizer_decode(t, ids, n);
    ck_assert_str_eq(d, "ab \xe2\x81\x87   \xe2\x81\x87 "); /* <unk> decodes as " ⁇ " like SentencePiece */
    free(d);
    tokenizer_free(t);
}
END_TEST

/* Digits never merge: "11" x4 and "ab" give only the merges "ab" then "▁ab", plus the stale "▁a" from round 1
 * (3 + 4 characters + 3 = 10 at most). */
START_TEST(train_digits_never_merge) {
    const char *corpus[] = {"11 11 11 11 ab"};
    char err[512];
    ck_assert(train_to_file(corpus, 1, 11, 1.0, "d.json", err, sizeof err) == NULL);
    const char *path = train_to_file(corpus, 1, 10, 1.0, "d.json", err, sizeof err);
    ck_assert_msg(path != NULL, "%s", err);
    Tokenizer *t = load_ok(path);
    ck_assert_str_eq(tokenizer_piece(t, 3), "ab");
    ck_assert_str_eq(tokenizer_piece(t, 4), WS "ab");
    ck_assert_str_eq(tokenizer_piece(t, 5), WS "a");
    ck_assert_str_eq(tokenizer_piece(t, 6), "1"); /* the most frequent character */
    ck_assert_str_eq(encode_pieces(t, "111 ab"), WS "|1|1|1|" WS "ab");
    tokenizer_free(t);
}
END_TEST

/* "Q:" never becomes one piece (letter + punctuation): only "▁Q" can be merged (3 + 3 characters + 1 = 7). */
START_TEST(train_scripts_never_mix) {
    const char *corpus[] = {"Q: Q: Q:"};
    char err[512];
    ck_assert(train_to_file(corpus, 1, 8, 1.0, "q.json", err, sizeof err) == NULL);
    const char *path = train_to_file(corpus, 1, 7, 1.0, "q.json", err, sizeof err);
    ck_assert_msg(path != NULL, "%s", err);
    Tokenizer *t = load_ok(path);
    ck_assert_str_eq(tokenizer_piece(t, 3), WS "Q");
    ck_assert_str_eq(encode_pieces(t, " Q: "), WS "Q|:");
    tokenizer_free(t);
}
END_TEST

START_TEST(training_is_deterministic) {
    char err[512];
    const char *p1 = train_to_file(ABC, 3, 12, 1.0, "det1.json", err, sizeof err);
    ck_assert_msg(p1 != NULL, "%s", err);
    char path1[512];
    snprintf(path1, sizeof path1, "%s", p1);
    const char *p2 = train_to_file(ABC, 3, 12, 1.0, "det2.json", err, sizeof err);
    ck_assert_msg(p2 != NULL, "%s", err);
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    ck_assert_int_eq(read_file_all(path1, &a, &na, err, sizeof err), 0);
    ck_assert_int_eq(read_file_all(p2, &b, &nb, err, sizeof err), 0);
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(a, b, na) == 0);
    free(a);
    free(b);
}
END_TEST

/* ---- loader checks ---- */

static int load_fails_with(const char *json_text, const char *needle) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/bad.json", g_dir);
    ck_assert_int_eq(write_file_atomic(path, json_text, strlen(json_text), err, sizeof err), 0);
    Tokenizer *t = tokenizer_load(path, err, sizeof err);
    if (t) {
        tokenizer_free(t);
        return 0;
    }
    return strstr(err, needle) != NULL && strstr(err, path) != NULL;
}

#define HEAD "{\"type\":\"bpe-sentencepiece-style\",\"version\":1,\"vocab_size\":5,\"max_piece_length\":16," \
             "\"split_digits\":true,\"pieces\":[{\"piece\":\"<unk>\",\"score\":0,\"type\":\"unknown\"},"    \
             "{\"piece\":\"<s>\",\"score\":0,\"type\":\"control\"},{\"piece\":\"</s>\",\"score\":0,\"type\":\"control\"},"
#define NORMAL(p) "{\"piece\":\"" p "\",\"score\":-1,\"type\":\"normal\"}"

START_TEST(loader_rejects_bad_files) {
    ck_assert(load_fails_with(HEAD NORMAL("a") "," NORMAL("a") "]}", "appears twice"));
    ck_assert(load_fails_with(HEAD NORMAL("a") "," NORMAL("a" WS) "]}", "not a valid piece"));
    ck_assert(load_fails_with(HEAD NORMAL("a") "," NORMAL(WS "1") "]}", "not a valid piece"));
    ck_assert(load_fails_with(HEAD NORMAL("a") "]}", "vocab_size"));
    ck_assert(load_fails_with(HEAD NORMAL("a") "," NORMAL("a b") "]}", "not a valid piece"));
    ck_assert(load_fails_with("{\"type\":\"wordpiece\"}", "type"));
    ck_assert(load_fails_with("{", "not valid JSON"));
    /* a piece "a\u0000b" would read as "a" (a duplicate of the real one): the NUL is refused before parsing */
    ck_assert(load_fails_with(HEAD NORMAL("a") "," NORMAL("a\\u0000b") "]}", "a string holds \\u0000"));
    /* Every character of a piece must be a piece itself (encoding starts from characters). */
    ck_assert(load_fails_with(HEAD NORMAL("a") "," NORMAL(WS "a") "]}", "not a piece itself"));
    /* And the same file with two distinct valid pieces loads. */
    ck_assert(!load_fails_with(HEAD NORMAL("a") "," NORMAL(WS) "]}", ""));
}
END_TEST

/* ---- the embedded sample ---- */

static char g_sample[512];       /* extracted sample root (…/mathematics_dataset-v1.0) */
static char g_sample_tok[512];   /* tokenizer trained on its train-easy files, as the stage does */

/* Trains like the tokenize stage: first 10000 pairs of every train-easy file except probability__swr_*. */
static void train_sample_tokenizer(const char *out_path) {
    char dir[1024], err[512];
    snprintf(dir, sizeof dir, "%s/train-easy", g_sample);
    char **names = NULL;
    int n = dm_list_txt(dir, &names, err, sizeof err);
    ck_assert_msg(n == 56, "%d train-easy files: %s", n, err);
    BpeTrainConfig cfg = {512, 16, 0.9995, true};
    BpeTrainer *t = bpe_trainer_new(&cfg);
    for (int i = 0; i < n; i++) {
        if (strncmp(names[i], "probability__swr_", 17) == 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        DmFile f;
        ck_assert_msg(dm_file_read(&f, path, err, sizeof err) == 0, "%s", err);
        for (int64_t p = 0; p < f.n_pairs && p < 10000; p++) {
            char *s = dm_corpus_sentence(f.lines[2 * p], f.lines[2 * p + 1]);
            bpe_trainer_add(t, s);
            free(s);
        }
        dm_file_free(&f);
    }
    dm_free_names(names, n);
    BpeVocab v;
    ck_assert_msg(bpe_trainer_train(t, &v, err, sizeof err) == 0, "%s", err);
    bpe_trainer_free(t);
    cJSON *json = bpe_vocab_to_json(&v, NULL);
    bpe_vocab_free(&v);
    ck_assert_int_eq(json_save_file(out_path, json, err, sizeof err), 0);
    cJSON_Delete(json);
}

static void sample_setup(void) {
    make_dir();
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "tar xzf %s -C %s", SAMPLE, g_dir);
    ck_assert_msg(system(cmd) == 0, "cannot extract %s", SAMPLE);
    snprintf(g_sample, sizeof g_sample, "%s/mathematics_dataset-v1.0", g_dir);
    snprintf(g_sample_tok, sizeof g_sample_tok, "%s/sample_tokenizer.json", g_dir);
    train_sample_tokenizer(g_sample_tok);
}

START_TEST(sample_vocabulary_properties) {
    Tokenizer *t = load_ok(g_sample_tok);
    ck_assert_int_eq(tokenizer_vocab_size(t), 512);
    ck_assert_str_eq(tokenizer_piece(t, 0), "<unk>");
    ck_assert_str_eq(tokenizer_piece(t, 1), "<s>");
    ck_assert_str_eq(tokenizer_piece(t, 2), "</s>");
    int have_ws_minus = 0, have_ws = 0;
    for (int i = 3; i < 512; i++) {
        const char *p = tokenizer_piece(t, i);
        char *in = bpe_from_display(p);
        ck_assert_ptr_nonnull(in);
        size_t n = strlen(in);
        ck_assert_msg(bpe_count_chars(in, n) <= 16, "piece %d '%s' longer than 16", i, p);
        ck_assert_msg(strchr(in + 1, ' ') == NULL, "piece %d '%s' has ▁ after its start", i, p);
        for (size_t k = 0; k < n; k++)
            if (in[k] >= '0' && in[k] <= '9') ck_assert_msg(n == 1, "digit merged in piece %d '%s'", i, p);
        have_ws_minus |= strcmp(p, WS "-") == 0;
        have_ws |= strcmp(p, WS) == 0;
        free(in);
    }
    ck_assert(have_ws_minus && have_ws);
    /* Regression anchors. These ids were cross-checked once against Debian's SentencePiece 0.1.97 trained the
     * reference way on this same corpus (vocab_size=512, split_digits=True, model_type=bpe): all 512 pieces matched
     * at the same ids, and all 196,400 lines of the sample encoded to the same ids. */
    ck_assert_str_eq(tokenizer_piece(t, 3), WS "*");
    ck_assert_str_eq(tokenizer_piece(t, 4), WS "-");
    ck_assert_str_eq(tokenizer_piece(t, 9), WS "A");
    ck_assert_str_eq(tokenizer_piece(t, 10), WS "Q");
    ck_assert_str_eq(tokenizer_piece(t, 449), WS); /* the first character: 3 + 446 merges */
    tokenizer_free(t);
}
END_TEST

START_TEST(sample_answers_and_questions) {
    Tokenizer *t = load_ok(g_sample_tok);
    int32_t ids[256];
    int n = tokenizer_encode_answer(t, "-10", ids, 256);
    ck_assert_str_eq(pieces_of(t, ids, n), WS "-|1|0");
    n = tokenizer_encode_answer(t, "4", ids, 256);
    ck_assert_str_eq(pieces_of(t, ids, n), WS "|4");
    n = tokenizer_encode_answer(t, " 4", ids, 256); /* " " + " 4": whitespace collapses */
    ck_assert_str_eq(pieces_of(t, ids, n), WS "|4");
    n = tokenizer_encode_question(t, "What is 12 + 3?", ids, 256);
    ck_assert_str_eq(pieces_of(t, ids, n), WS "Q|:|" WS "What|" WS "is|" WS "|1|2|" WS "+|" WS "|3|?|" WS "A|:");
    /* The dummy prefix makes these three spellings identical (dm-math-training-code.md §C.4). */
    int32_t a[256], b[256], c[256];
    int na = tokenizer_encode(t, " Q: What is 2? A:", a, 256);
    int nb = tokenizer_encode(t, "Q: What is 2? A:", b, 256);
    int nc = tokenizer_encode(t, "Q: What is 2? A: ", c, 256);
    ck_assert(na == nb && nb == nc && memcmp(a, b, (size_t)na * 4) == 0 && memcmp(b, c, (size_t)na * 4) == 0);
    /* max smaller than the count: the count is still returned, only max ids written. */
    ids[2] = -7;
    ck_assert_int_eq(tokenizer_encode_answer(t, "-10", ids, 2), 3);
    ck_assert_int_eq(ids[2], -7);
    tokenizer_free(t);
}
END_TEST

/* Round trip and invariants on every line of every arithmetic file of the sample (all splits). */
START_TEST(sample_arithmetic_round_trip) {
    Tokenizer *t = load_ok(g_sample_tok);
    const char *splits[] = {"train-easy", "train-medium", "train-hard", "interpolate", "extrapolate"};
    long lines = 0, tokens = 0;
    char err[512];
    for (int s = 0; s < 5; s++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", g_sample, splits[s]);
        char **names = NULL;
        int n = dm_list_txt(dir, &names, err, sizeof err);
        ck_assert_int_gt(n, 0);
        for (int i = 0; i < n; i++) {
            if (strncmp(names[i], "arithmetic__", 12) != 0) continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            DmFile f;
            ck_assert_msg(dm_file_read(&f, path, err, sizeof err) == 0, "%s", err);
            for (int64_t k = 0; k < 2 * f.n_pairs; k++) {
                const char *line = f.lines[k];
                int32_t ids[1100];
                int m = (k % 2 == 0) ? tokenizer_encode(t, line, ids, 1100) : tokenizer_encode_answer(t, line, ids, 1100);
                ck_assert_int_le(m, 1100);
                for (int j = 0; j < m; j++) {
                    ck_assert_msg(ids[j] >= 3 && ids[j] < 512, "%s:%ld: id %d", path, (long)k + 1, ids[j]);
                    const char *p = tokenizer_piece(t, ids[j]);
                    if (strpbrk(p, "0123456789")) ck_assert_msg(strlen(p) == 1, "%s: digit piece '%s'", path, p);
                }
                if (k % 2 == 1) ck_assert_msg(strncmp(tokenizer_piece(t, ids[0]), WS, 3) == 0, "%s:%ld", path,
                                              (long)k + 1);
                char *d = tokenizer_decode(t, ids, m);
                ck_assert_msg(strcmp(d, line) == 0, "%s:%ld: '%s' decodes as '%s'", path, (long)k + 1, line, d);
                free(d);
                lines++;
                tokens += m;
            }
            dm_file_free(&f);
        }
        dm_free_names(names, n);
    }
    ck_assert_int_eq(lines, 2 * (27 * 500 + 9 * 200 + 6 * 200));
    ck_assert_int_gt(tokens, lines); /* sanity: more than one token per line on average */
    tokenizer_free(t);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("bpe");
    TCase *basic = tcase_create("basic");
    tcase_add_checked_fixture(basic, make_dir, remove_dir);
    tcase_add_test(basic, normalize_collapses_and_prefixes);
    tcase_add_test(basic, piece_rules);
    tcase_add_test(basic, space_separated_corpus_form);
    tcase_add_test(basic, train_tiny_corpus_exact_vocabulary);
    tcase_add_test(basic, train_vocab_limit_is_hard);
    tcase_add_test(basic, train_character_coverage_drops_rare_chars);
    tcase_add_test(basic, train_digits_never_merge);
    tcase_add_test(basic, train_scripts_never_mix);
    tcase_add_test(basic, training_is_deterministic);
    tcase_add_test(basic, loader_rejects_bad_files);
    suite_add_tcase(s, basic);
    TCase *sample = tcase_create("sample");
    tcase_set_timeout(sample, 120);
    tcase_add_unchecked_fixture(sample, sample_setup, remove_dir);
    tcase_add_test(sample, sample_vocabulary_properties);
    tcase_add_test(sample, sample_answers_and_questions);
    tcase_add_test(sample, sample_arithmetic_round_trip);
    suite_add_tcase(s, sample);
    return s;
}

int main(void) { return run_test_suite(suite()); }
