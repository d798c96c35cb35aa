#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# End-to-end test of bin/fetch --config (the "fetch" section of an experiment's data.json, read strictly) and
# --tokenizer-corpus-source (the tokenizer corpus taken from a second archive's train-easy files): the happy path,
# an unknown key and a wrong type refused with one line naming file and key and no output, command-line options
# overriding the config, a second archive given as a local path and as an http:// URL (local test server), the
# manifest recording it, the "up to date" check covering it, and tokenize accepting the result.
# Exit 0 pass, 77 skip (says why), anything else fail.
source "$(dirname "$0")/fetch_common.sh" test_fetch_config fetch tokenize
log_has() { grep -q -F -- "$1" "$T/log" || { echo "    expected '$1' in:"; sed 's/^/    | /' "$T/log"; return 1; }; }
one_error_line() { test "$(grep -c 'error:' "$T/log")" = 1; }
nothing_at() { test ! -e "$1" && no_temp_trees "$1"; }

# ---- two small archives in the DM-math layout ----
# main.tar.gz: arithmetic (3 files) + algebra modules, questions about sums; corpus.tar.gz: other train-easy modules
# whose text has characters the main archive lacks ("Let x = ..."), so where the corpus came from is visible.
gen() { # gen FILE PAIRS SEED FORMAT: FORMAT gets two numbers, the answer is their sum
  awk -v n="$2" -v seed="$3" -v fmt="$4" 'BEGIN { srand(seed); for (i = 0; i < n; i++) { a = int(rand() * 1000);
    b = int(rand() * 1000); printf fmt "\n%d\n", a, b, a + b } }' >"$1"
}
M=$T/main/mathematics_dataset-v1.0
mkdir -p "$M"/{train-easy,interpolate,extrapolate}
gen "$M/train-easy/arithmetic__add_or_sub.txt" 300 1 "What is %d + %d?"
gen "$M/train-easy/arithmetic__mul.txt" 300 2 "What is %d + %d?"
gen "$M/train-easy/algebra__linear_1d.txt" 300 3 "What is %d + %d?"
gen "$M/interpolate/arithmetic__mul.txt" 100 4 "What is %d + %d?"
gen "$M/extrapolate/arithmetic__mul_big.txt" 100 5 "What is %d + %d?"
C=$T/corpus/mathematics_dataset-v1.0
mkdir -p "$C"/{train-easy,interpolate}
gen "$C/train-easy/numbers__gcd.txt" 200 6 "Let x = %d. Calculate x + %d."
gen "$C/train-easy/polynomials__expand.txt" 200 7 "Let T(v) = %d*v. Determine T(%d)."
gen "$C/interpolate/numbers__gcd.txt" 50 8 "Let x = %d. Calculate x + %d." # not a corpus file: never extracted
WWW=$T/www
mkdir -p "$WWW"
tar -czf "$WWW/main.tar.gz" -C "$T/main" mathematics_dataset-v1.0
tar -czf "$WWW/corpus.tar.gz" -C "$T/corpus" mathematics_dataset-v1.0
MAIN_SHA=$(sha256sum "$WWW/main.tar.gz" | cut -d' ' -f1)
CORPUS_SHA=$(sha256sum "$WWW/corpus.tar.gz" | cut -d' ' -f1)
CORPUS_BYTES=$(stat -c %s "$WWW/corpus.tar.gz")

# data.json as an experiment has it: a "fetch" section plus a "tokenize" section that fetch ignores.
TOKENIZE_SECTION='"tokenize": {"vocab_size": 64, "max_piece_length": 16, "tokenizer_pairs_per_file": 100,
  "eval_examples": 50, "eval_shuffle_seed": 123, "train_shuffle_seed": 1, "exclude_tokenizer_pattern": "probability__swr_.*"}'
write_config() { # FILE FETCH_SECTION_BODY
  printf '{\n  "fetch": {%s},\n  %s\n}\n' "$2" "$TOKENIZE_SECTION" >"$1"
}

# 1. --config happy path: source, filter and tokenizer_corpus_pairs come from the file.
write_config "$T/data.json" "\"source\": \"$WWW/main.tar.gz\", \"filter\": \"arithmetic__.*\", \"tokenizer_corpus_pairs\": 20"
run_fetch --config "$T/data.json" --out "$T/raw1"
check "--config: exits 0" test $? = 0
check "--config: source from the file" test "$(json_get "$T/raw1/manifest.json" 'm["source"]')" = "$WWW/main.tar.gz"
check "--config: filter from the file (4 arithmetic files)" test "$(json_get "$T/raw1/manifest.json" \
  '",".join(f["split"] + "/" + f["file"] for f in m["files"])')" = \
  "extrapolate/arithmetic__mul_big.txt,interpolate/arithmetic__mul.txt,train-easy/arithmetic__add_or_sub.txt,train-easy/arithmetic__mul.txt"
check "--config: tokenizer_corpus_pairs from the file (20 pairs x 3 train-easy files)" test "$(json_get \
  "$T/raw1/manifest.json" '",".join("%s:%d" % (c["file"], c["pairs"]) for c in m["tokenizer_corpus"])')" = \
  "algebra__linear_1d.txt:20,arithmetic__add_or_sub.txt:20,arithmetic__mul.txt:20"
check "--config: no tokenizer_corpus_archive without a second archive" test "$(json_get "$T/raw1/manifest.json" \
  '"tokenizer_corpus_archive" in m')" = False
run_fetch --config "$T/data.json" --out "$T/raw1"
check "--config: rerun is up to date" log_has "up to date"
# The same settings as options give the same tree (the config is only another way of passing them).
run_fetch --source "$WWW/main.tar.gz" --filter 'arithmetic__.*' --tokenizer-corpus-pairs 20 --out "$T/raw1b"
check "--config and the equivalent options list the same files" test "$(json_get "$T/raw1/manifest.json" \
  '[m["files"], m["tokenizer_corpus"]]')" = "$(json_get "$T/raw1b/manifest.json" '[m["files"], m["tokenizer_corpus"]]')"

# 2. Strictness: an unknown key, a wrong type, a missing source, a missing section; one line, exit 1, no output.
bad_config() { # NAME FETCH_SECTION_BODY EXPECTED_MESSAGE
  write_config "$T/$1.json" "$2"
  run_fetch --config "$T/$1.json" --out "$T/bad_$1"
  local rc=$?
  check "$1: exit 1" test $rc = 1
  check "$1: message names file and key" log_has "$3"
  check "$1: one error line" one_error_line
  check "$1: no output" nothing_at "$T/bad_$1"
}
bad_config unknown "\"source\": \"$WWW/main.tar.gz\", \"fitler\": \"arithmetic__.*\"" "$T/unknown.json: fetch.fitler: unknown key"
bad_config wrongtype "\"source\": \"$WWW/main.tar.gz\", \"tokenizer_corpus_pairs\": \"20\"" \
  "$T/wrongtype.json: fetch.tokenizer_corpus_pairs: expected an integer, got a string"
bad_config filtertype "\"source\": \"$WWW/main.tar.gz\", \"filter\": [\"arithmetic__.*\"]" \
  "$T/filtertype.json: fetch.filter: expected a string, got an array"
bad_config negative "\"source\": \"$WWW/main.tar.gz\", \"tokenizer_corpus_pairs\": -1" \
  "$T/negative.json: fetch.tokenizer_corpus_pairs: must be >= 0"
bad_config nosource "\"filter\": \"arithmetic__.*\"" "$T/nosource.json: missing required key fetch.source"
bad_config corpustype "\"source\": \"$WWW/main.tar.gz\", \"tokenizer_corpus_source\": 1" \
  "$T/corpustype.json: fetch.tokenizer_corpus_source: expected a string, got a number"
printf '{"tokenize": {}}\n' >"$T/nosection.json"
run_fetch --config "$T/nosection.json" --out "$T/bad_nosection"
check "no fetch section: refused, naming it" log_has "$T/nosection.json: missing required key fetch"
check "no fetch section: no output" nothing_at "$T/bad_nosection"
# the top level of data.json: a section given twice (cJSON keeps both and the first used to win silently)
printf '{"fetch": {"source": "embedded"}, "fetch": {"source": "%s"}}\n' "$WWW/main.tar.gz" >"$T/twice.json"
run_fetch --config "$T/twice.json" --out "$T/bad_twice"
check "fetch section twice: refused, naming it" log_has "$T/twice.json: fetch: duplicate key"
check "fetch section twice: one error line" one_error_line
check "fetch section twice: no output" nothing_at "$T/bad_twice"
printf '{"fetch": {"source": "x",}}\n' >"$T/syntax.json"
run_fetch --config "$T/syntax.json" --out "$T/bad_syntax"
check "invalid JSON: refused with file:line:column" log_has "$T/syntax.json:1:"
# A refused config leaves an existing output alone.
BEFORE=$(sha256sum "$T/raw1/manifest.json")
run_fetch --config "$T/unknown.json" --out "$T/raw1"
check "a refused config leaves the existing output intact" test "$(sha256sum "$T/raw1/manifest.json")" = "$BEFORE"

# 3. Command-line options override the config: --filter, --tokenizer-corpus-pairs, --source.
run_fetch --config "$T/data.json" --filter 'algebra__.*' --out "$T/raw3"
check "--filter overrides fetch.filter" test "$(json_get "$T/raw3/manifest.json" \
  '[m["filter"], [f["file"] for f in m["files"]]]')" = "['algebra__.*', ['algebra__linear_1d.txt']]"
check "--filter override keeps the config's tokenizer_corpus_pairs" test \
  "$(json_get "$T/raw3/manifest.json" 'm["tokenizer_corpus_pairs"]')" = 20
run_fetch --config "$T/data.json" --tokenizer-corpus-pairs 7 --out "$T/raw3b"
check "--tokenizer-corpus-pairs overrides the config" test "$(json_get "$T/raw3b/manifest.json" \
  'sorted(set(c["pairs"] for c in m["tokenizer_corpus"]))')" = "[7]"
cp "$WWW/main.tar.gz" "$T/main-copy.tar.gz"
run_fetch --config "$T/data.json" --source "$T/main-copy.tar.gz" --out "$T/raw3c"
check "--source overrides fetch.source" test "$(json_get "$T/raw3c/manifest.json" 'm["source"]')" = "$T/main-copy.tar.gz"
check "--source given: the config's filter still applies" test "$(json_get "$T/raw3c/manifest.json" 'm["filter"]')" = \
  "arithmetic__.*"

# 4. --tokenizer-corpus-source as a local path: module files from the main archive, corpus from the second.
verify_corpus_from_second() { # OUT SOURCE_STRING
  "$PY" - "$1" "$2" "$C" "$MAIN_SHA" "$CORPUS_SHA" "$CORPUS_BYTES" <<'PY'
import hashlib, json, os, sys
out, source, corpus_src, main_sha, corpus_sha, corpus_bytes = sys.argv[1:7]
m = json.load(open(os.path.join(out, "manifest.json")))
ok = True
def bad(msg):
    global ok
    ok = False
    print("    " + msg)
if m["archive_sha256"] != main_sha: bad("archive_sha256 is not the main archive's")
if [f["file"] for f in m["files"] if f["split"] == "train-easy"] != ["arithmetic__add_or_sub.txt", "arithmetic__mul.txt"]:
    bad("module files are not the main archive's arithmetic files: %s" % m["files"])
want = {"source": source, "sha256": corpus_sha, "bytes": int(corpus_bytes)}
if m.get("tokenizer_corpus_archive") != want: bad("tokenizer_corpus_archive %s != %s" % (m.get("tokenizer_corpus_archive"), want))
names = sorted(os.listdir(os.path.join(out, "tokenizer_corpus")))
if names != ["numbers__gcd.txt", "polynomials__expand.txt"]: bad("corpus files on disk: %s" % names)
if [c["file"] for c in m["tokenizer_corpus"]] != names: bad("corpus files in the manifest: %s" % m["tokenizer_corpus"])
for c in m["tokenizer_corpus"]:
    data = open(os.path.join(out, "tokenizer_corpus", c["file"]), "rb").read()
    # The first 20 pairs (40 lines) of the SECOND archive's train-easy file, byte for byte.
    src = b"".join(open(os.path.join(corpus_src, "train-easy", c["file"]), "rb").readlines()[:40])
    if data != src: bad(c["file"] + " is not the first 20 pairs of the second archive's file")
    if hashlib.sha256(data).hexdigest() != c["sha256"] or c["pairs"] != 20 or c["bytes"] != len(data):
        bad(c["file"] + ": manifest sha256/pairs/bytes")
sys.exit(0 if ok else 1)
PY
}
run_fetch --config "$T/data.json" --tokenizer-corpus-source "$WWW/corpus.tar.gz" --out "$T/raw4"
check "--tokenizer-corpus-source (path): exits 0" test $? = 0
check "--tokenizer-corpus-source (path): corpus from the second archive, recorded in the manifest" \
  verify_corpus_from_second "$T/raw4" "$WWW/corpus.tar.gz"
check "--tokenizer-corpus-source: the second archive's other splits are not extracted" \
  test ! -e "$T/raw4/mathematics_dataset-v1.0/interpolate/numbers__gcd.txt"
check "--tokenizer-corpus-source: no temporary tree left" no_temp_trees "$T/raw4"
run_fetch --config "$T/data.json" --tokenizer-corpus-source "$WWW/corpus.tar.gz" --out "$T/raw4"
check "--tokenizer-corpus-source: rerun is up to date" log_has "up to date"
# Up to date covers the second archive: dropping it, or changing its bytes, extracts again.
run_fetch --config "$T/data.json" --out "$T/raw4"
check "without the second archive: not up to date, re-extracted" test "$(json_get "$T/raw4/manifest.json" \
  '["tokenizer_corpus_archive" in m, [c["file"] for c in m["tokenizer_corpus"]]]')" = \
  "[False, ['algebra__linear_1d.txt', 'arithmetic__add_or_sub.txt', 'arithmetic__mul.txt']]"
cp "$WWW/corpus.tar.gz" "$T/corpus-copy.tar.gz"
run_fetch --config "$T/data.json" --tokenizer-corpus-source "$T/corpus-copy.tar.gz" --out "$T/raw4"
check "second archive added back: re-extracted" verify_corpus_from_second "$T/raw4" "$T/corpus-copy.tar.gz"
gen "$C/train-easy/numbers__gcd.txt" 200 99 "Let x = %d. Calculate x + %d."
tar -czf "$T/corpus-copy.tar.gz" -C "$T/corpus" mathematics_dataset-v1.0
run_fetch --config "$T/data.json" --tokenizer-corpus-source "$T/corpus-copy.tar.gz" --out "$T/raw4"
check "second archive's bytes changed: not up to date" test "$(json_get "$T/raw4/manifest.json" \
  'm["tokenizer_corpus_archive"]["sha256"]')" = "$(sha256sum "$T/corpus-copy.tar.gz" | cut -d' ' -f1)"
gen "$C/train-easy/numbers__gcd.txt" 200 6 "Let x = %d. Calculate x + %d." # restore for the checks below

# 5. tokenizer_corpus_source from the config, the second archive served over HTTP (local test server).
if start_server "$WWW"; then
  URL=http://127.0.0.1:$(cat "$T/port")/corpus.tar.gz
  write_config "$T/data5.json" "\"source\": \"$WWW/main.tar.gz\", \"tokenizer_corpus_pairs\": 20, \"tokenizer_corpus_source\": \"$URL\""
  run_fetch --config "$T/data5.json" --downloads "$T/dl" --out "$T/raw5"
  check "tokenizer_corpus_source (http, from the config): exits 0" test $? = 0
  check "tokenizer_corpus_source (http): the download is byte-identical" cmp -s "$T/dl/corpus.tar.gz" "$WWW/corpus.tar.gz"
  check "tokenizer_corpus_source (http): corpus from the second archive, recorded" \
    verify_corpus_from_second "$T/raw5" "$URL"
  run_fetch --config "$T/data5.json" --downloads "$T/dl" --out "$T/raw5"
  check "tokenizer_corpus_source (http): rerun is up to date" log_has "up to date"
  check "tokenizer_corpus_source (http): downloaded once (the rerun reuses it)" \
    test "$(grep -c 'GET /corpus.tar.gz' "$T/server.log")" = 1
  # tokenize accepts the combined raw directory and trains its tokenizer on the second archive's corpus.
  "$ROOT/bin/tokenize" --raw "$T/raw5" --config "$T/data5.json" --out "$T/tok5" --quiet >"$T/log" 2>&1
  check "tokenize accepts a raw/ whose corpus came from a second archive" test $? = 0
  # "Let" and "x" occur only in the second archive, "What" only in the main one: the vocabulary shows which was used.
  check "tokenize: tokenizer trained on the second archive's corpus" test "$(json_get "$T/tok5/tokenizer.json" \
    '[any("L" in p["piece"] for p in m["pieces"]), any("x" in p["piece"] for p in m["pieces"]),
      any("W" in p["piece"] for p in m["pieces"])]')" = "[True, True, False]"
  check "tokenize: its manifest lists the corpus files it used" test "$(json_get "$T/tok5/tokenize_manifest.json" \
    '[i["file"] for i in m["inputs"] if i["file"].startswith("tokenizer_corpus/")]')" = \
    "['tokenizer_corpus/numbers__gcd.txt', 'tokenizer_corpus/polynomials__expand.txt']"
  check "tokenize: the main archive's 'What is' has characters (W, h, s) the corpus lacks: <unk> in train" test \
    "$(json_get "$T/tok5/tokenize_manifest.json" 'm["splits"]["train"]["n_unk_tokens"]')" -gt 0
  # The command line overrides the config's tokenizer_corpus_source ('' = the main archive).
  run_fetch --config "$T/data5.json" --tokenizer-corpus-source '' --downloads "$T/dl" --out "$T/raw5b"
  check "--tokenizer-corpus-source '' overrides the config (corpus from the main archive)" test "$(json_get \
    "$T/raw5b/manifest.json" '["tokenizer_corpus_archive" in m, len(m["tokenizer_corpus"])]')" = "[False, 3]"
else
  fail "the test HTTP server did not start"
fi

# 6. Errors about the second archive: missing file, nothing for the corpus, zero pairs.
run_fetch --config "$T/data.json" --tokenizer-corpus-source "$T/nope.tar.gz" --out "$T/raw6"
check "missing second archive: refused, naming it" log_has "$T/nope.tar.gz: archive not found"
check "missing second archive: no output" nothing_at "$T/raw6"
mkdir -p "$T/nocorpus/mathematics_dataset-v1.0/interpolate"
cp "$C/interpolate/numbers__gcd.txt" "$T/nocorpus/mathematics_dataset-v1.0/interpolate/"
tar -czf "$T/nocorpus.tar.gz" -C "$T/nocorpus" mathematics_dataset-v1.0
run_fetch --config "$T/data.json" --tokenizer-corpus-source "$T/nocorpus.tar.gz" --out "$T/raw6"
check "second archive without train-easy files: refused" log_has "no train-easy module file in $T/nocorpus.tar.gz"
check "second archive without train-easy files: no output, no temporary tree" nothing_at "$T/raw6"
run_fetch --config "$T/data.json" --tokenizer-corpus-source "$WWW/corpus.tar.gz" --tokenizer-corpus-pairs 0 --out "$T/raw6"
check "--tokenizer-corpus-source with 0 corpus pairs: refused" log_has "needs tokenizer corpus pairs > 0"

if [ "$FAILS" != 0 ]; then echo "$FAILS check(s) failed"; exit 1; fi
echo "all fetch --config / --tokenizer-corpus-source e2e checks passed"
