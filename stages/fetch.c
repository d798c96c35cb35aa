/* fetch: obtain the DeepMind Mathematics archive (official URL, any http(s)/file URL, a local path, or the embedded
 * sample), verify it, and extract the selected module files plus the tokenizer corpus into --out, atomically. The
 * work is datasets/fetch_run.h's; this main reads and range-checks the options. */
#include <limits.h>
#include <stdint.h>

#include "datasets/fetch_run.h"
#include "pipeline/base/cli.h"
#include "pipeline/base/limits.h"
#include "pipeline/base/log.h"

static const char *SUMMARY =
    "Fetches the DeepMind Mathematics v1.0 archive and extracts the module files whose name (without .txt) fully\n"
    "matches --filter into OUT/mathematics_dataset-v1.0/<split>/, plus the first --tokenizer-corpus-pairs pairs of\n"
    "EVERY train-easy file into OUT/tokenizer_corpus/, and writes OUT/manifest.json. The tree is built in\n"
    "OUT.tmp.<pid>.<random> and renamed into place only on success. With --tokenizer-corpus-source SRC2 the\n"
    "tokenizer corpus comes from SRC2's train-easy files instead (e.g. the all-modules sample for an arithmetic-only\n"
    "archive).\n"
    "SRC: 'official' (URL and size from the manifest), 'embedded' (datasets/dm_math_sample.tar.gz), an http(s)://\n"
    "or file:// URL, or a local archive path. Downloads go to DOWNLOADS/<name>.part and resume on a rerun.\n"
    "An archive whose members expand to more than --max-extract-bytes, or (beyond 64 MiB) to more than\n"
    "--max-extract-ratio times its own size, is refused before a byte of the excess is written (a decompression\n"
    "bomb). --config EXP/data.json reads the \"fetch\" section strictly ({\"source\", \"filter\",\n"
    "\"tokenizer_corpus_pairs\", \"tokenizer_corpus_source\", \"max_extract_bytes\", \"max_extract_ratio\"}); an option\n"
    "given on the command line overrides the same setting there.";

int main(int argc, char **argv) {
    log_set_program("fetch");
    /* NULL / FETCH_NOT_GIVEN: not given on the command line, so the --config value or the built-in default applies. */
    FetchRequest r = {.corpus_pairs = FETCH_NOT_GIVEN, .max_extract_bytes = FETCH_NOT_GIVEN,
                      .max_extract_ratio = FETCH_NOT_GIVEN, .net = {"data/downloads", 5, 30, 60, 8L << 30}};
    FetchNetOptions *net = &r.net;
    const CliOption opts[] = {
        {"config", OPT_STRING, &r.config, "experiment data.json: settings from its \"fetch\" section (options given here win)", false},
        {"source", OPT_STRING, &r.source, "official | embedded | http(s):// or file:// URL | archive path (default official)", false},
        {"out", OPT_STRING, &r.out, "output directory, e.g. data/tiny/raw", true},
        {"filter", OPT_STRING, &r.filter, "POSIX ERE, full match on the module file name (default arithmetic__.*)", false},
        {"sha256", OPT_STRING, &r.pin, "expected SHA-256 of the --source archive (default: the manifest's, if any)", false},
        {"manifest", OPT_STRING, &r.manifest, "dataset manifest (default " FETCH_DEFAULT_MANIFEST ")", false},
        {"downloads", OPT_STRING, &net->downloads, "download directory (default data/downloads)", false},
        {"tokenizer-corpus-pairs", OPT_INT, &r.corpus_pairs, "pairs per train-easy file for the tokenizer corpus (default 10000)", false},
        {"tokenizer-corpus-source", OPT_STRING_OR_EMPTY, &r.corpus_source, "take the tokenizer corpus from this archive (same kinds "
                                                                "as --source; '' = the --source archive, the default)", false},
        {"retries", OPT_INT, &net->retries, "download retries after the first attempt (default 5)", false},
        {"connect-timeout", OPT_INT, &net->connect_timeout, "connect timeout in seconds (default 30)", false},
        {"low-speed-time", OPT_INT, &net->low_speed_time, "abort an attempt below 1 KiB/s for this many seconds (default 60)", false},
        {"max-download-bytes", OPT_INT, &net->max_download_bytes, "refuse a download larger than this many bytes: a "
                                                                 "Content-Length above it before the body, a body "
                                                                 "growing past it at the cap (default 8 GiB)", false},
        {"max-extract-bytes", OPT_INT, &r.max_extract_bytes, "refuse an archive whose members expand to more than this many "
                                                       "bytes (default 16 GiB, twice the official archive's; at most "
                                                       "64 GiB)", false},
        {"max-extract-ratio", OPT_INT, &r.max_extract_ratio, "refuse an archive that expands to more than this many times its "
                                                       "own size, beyond 64 MiB (default 20; DM-math text: 3.5)", false},
    };
    cli_parse(argc, argv, "fetch", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    if (r.corpus_pairs != FETCH_NOT_GIVEN && r.corpus_pairs < 0) die("--tokenizer-corpus-pairs must be >= 0, got %ld", r.corpus_pairs);
    if (net->retries < 0 || net->retries > 100) die("--retries must be in [0, 100], got %ld", net->retries);
    if (net->connect_timeout <= 0 || net->low_speed_time <= 0) die("--connect-timeout and --low-speed-time must be positive");
    if (net->max_download_bytes < 1) die("--max-download-bytes must be >= 1, got %ld", net->max_download_bytes);
    if (r.max_extract_bytes != FETCH_NOT_GIVEN && (r.max_extract_bytes < 1 || (uint64_t)r.max_extract_bytes > LIMIT_ARCHIVE_TOTAL_BYTES))
        die("--max-extract-bytes must be in [1, %llu], got %ld", (unsigned long long)LIMIT_ARCHIVE_TOTAL_BYTES,
            r.max_extract_bytes);
    if (r.max_extract_ratio != FETCH_NOT_GIVEN && r.max_extract_ratio < 1)
        die("--max-extract-ratio must be >= 1, got %ld", r.max_extract_ratio);
    char err[16384];
    if (fetch_run(&r, err, sizeof err) != 0) die("%s", err);
    return 0;
}
