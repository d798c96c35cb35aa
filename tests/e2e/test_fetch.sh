#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# End-to-end test of bin/fetch against a local HTTP server (tests/e2e/http_server.py on 127.0.0.1, random port):
# download, resume after a dropped connection (Range request seen by the server), in-run retry after a stall,
# a server that cannot resume, hostile servers (a resume at the wrong offset, a malformed Content-Range,
# Content-Length shorter or longer than the body), checksum pinning, the manifest size check, extraction + manifest content, a corrupted
# and a truncated archive refused (no tree left, the old output intact), a traversal entry refused, file:// and local
# path sources, "up to date" reruns, and the embedded sample with the default filter.
# Exit 0 pass, 77 skip (says why), anything else fail.
source "$(dirname "$0")/fetch_common.sh" test_fetch fetch tokenize
log_has() { grep -q -- "$1" "$T/log" || { echo "    expected '$1' in:"; sed 's/^/    | /' "$T/log"; return 1; }; }

# ---- test archives, built with tar from DM-math-format files ----
SRC=$T/src
D=$SRC/mathematics_dataset-v1.0
mkdir -p "$D"/{train-easy,train-medium,train-hard,interpolate,extrapolate}
gen() { # gen FILE PAIRS SEED: "What is A + B?" / answer lines
  awk -v n="$2" -v seed="$3" 'BEGIN { srand(seed); for (i = 0; i < n; i++) { a = int(rand() * 100000); b = int(rand() * 100000);
    printf "What is %d + %d?\n%d\n", a, b, a + b } }' >"$1"
}
gen "$D/train-easy/arithmetic__add_or_sub.txt" 4000 1
gen "$D/train-easy/arithmetic__mul.txt" 4000 2
gen "$D/train-easy/algebra__linear_1d.txt" 4000 3
gen "$D/train-medium/arithmetic__add_or_sub.txt" 3000 4
gen "$D/train-hard/arithmetic__mul.txt" 3000 5
gen "$D/interpolate/arithmetic__mul.txt" 500 6
gen "$D/interpolate/algebra__linear_1d.txt" 500 7
gen "$D/extrapolate/arithmetic__mul_big.txt" 500 8
WWW=$T/www
mkdir -p "$WWW"
tar -czf "$WWW/good.tar.gz" -C "$SRC" mathematics_dataset-v1.0
SIZE=$(stat -c %s "$WWW/good.tar.gz")
SHA=$(sha256sum "$WWW/good.tar.gz" | cut -d' ' -f1)
# Corrupted copy: 64 bytes overwritten in the middle of the compressed stream.
cp "$WWW/good.tar.gz" "$WWW/corrupt.tar.gz"
head -c 64 /dev/zero | dd of="$WWW/corrupt.tar.gz" bs=1 seek=$((SIZE / 2)) conv=notrunc status=none
head -c $((SIZE * 2 / 3)) "$WWW/good.tar.gz" >"$WWW/truncated.tar.gz"
# Traversal variant: one member renamed to climb out of the tree (-P keeps the '..' that tar would strip).
printf 'What is 1 + 1?\n2\n' >"$SRC/evil.txt"
tar -czf "$WWW/evil.tar.gz" -P -C "$SRC" \
  --transform 's|^evil.txt$|mathematics_dataset-v1.0/train-easy/../../evil.txt|' mathematics_dataset-v1.0 evil.txt

# ---- server ----
start_server "$WWW" || { echo "FAIL: the test HTTP server did not start"; exit 1; }
BASE=http://127.0.0.1:$(cat "$T/port")
DL=$T/downloads

# Compares OUT/manifest.json with the extracted files and the archive: sha256, bytes, pairs, sorting.
verify_manifest() { # OUT ARCHIVE_SHA SOURCE EXPECTED_FILES
  "$PY" - "$@" <<'PY'
import hashlib, json, os, sys
out, archive_sha, source, expected = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
m = json.load(open(os.path.join(out, "manifest.json")))
ok = True
def bad(msg):
    global ok
    ok = False
    print("    manifest: " + msg)
if m.get("schema") != "dm-math-raw" or m.get("schema_version") != 1: bad("schema")
if m.get("archive_sha256") != archive_sha: bad("archive_sha256 %s != %s" % (m.get("archive_sha256"), archive_sha))
if m.get("source") != source: bad("source %r != %r" % (m.get("source"), source))
if len(m["files"]) != expected: bad("%d files, expected %d" % (len(m["files"]), expected))
keys = [(f["split"], f["file"]) for f in m["files"]]
if keys != sorted(keys): bad("files not sorted")
for f in m["files"]:
    p = os.path.join(out, "mathematics_dataset-v1.0", f["split"], f["file"])
    data = open(p, "rb").read()
    if hashlib.sha256(data).hexdigest() != f["sha256"]: bad("sha256 of " + p)
    if len(data) != f["bytes"]: bad("bytes of " + p)
    if data.count(b"\n") != 2 * f["pairs"]: bad("pairs of " + p)
on_disk = sorted((s, n) for s in os.listdir(os.path.join(out, "mathematics_dataset-v1.0"))
                 for n in os.listdir(os.path.join(out, "mathematics_dataset-v1.0", s)))
if on_disk != keys: bad("files on disk differ from the manifest: %s" % on_disk)
for c in m["tokenizer_corpus"]:
    data = open(os.path.join(out, "tokenizer_corpus", c["file"]), "rb").read()
    if hashlib.sha256(data).hexdigest() != c["sha256"] or data.count(b"\n") != 2 * c["pairs"]: bad("corpus " + c["file"])
sys.exit(0 if ok else 1)
PY
}

# 1. Plain download + extraction (default filter: 6 arithmetic files; corpus: 3 train-easy files, 100 pairs each).
run_fetch --source "$BASE/good.tar.gz" --downloads "$DL" --out "$T/raw" --tokenizer-corpus-pairs 100
check "download + extract exits 0" test $? = 0
check "downloaded file is complete, no .part left" cmp -s "$DL/good.tar.gz" "$WWW/good.tar.gz"
check "no .part left" test ! -e "$DL/good.tar.gz.part"
check "manifest matches the extracted tree (6 arithmetic files)" verify_manifest "$T/raw" "$SHA" "$BASE/good.tar.gz" 6
check "filter default excludes algebra" test ! -e "$T/raw/mathematics_dataset-v1.0/train-easy/algebra__linear_1d.txt"
check "pairs counted (train-easy add_or_sub has 4000)" test "$(json_get "$T/raw/manifest.json" \
  '[f["pairs"] for f in m["files"] if f["split"]=="train-easy" and f["file"]=="arithmetic__add_or_sub.txt"][0]')" = 4000
check "tokenizer corpus: every train-easy file, 100 pairs" test "$(json_get "$T/raw/manifest.json" \
  '",".join("%s:%d" % (c["file"], c["pairs"]) for c in m["tokenizer_corpus"])')" = \
  "algebra__linear_1d.txt:100,arithmetic__add_or_sub.txt:100,arithmetic__mul.txt:100"
check "no temporary tree left" no_temp_trees "$T/raw"
run_fetch --source "$BASE/good.tar.gz" --downloads "$DL" --out "$T/raw" --tokenizer-corpus-pairs 100
check "rerun is 'up to date' and downloads nothing" log_has "up to date"
check "rerun made no new request" test "$(grep -c 'good.tar.gz' "$T/server.log")" = 1
# --out naming an existing file (a mistyped path): refused before downloading, the file kept (it used to be replaced
# by the extracted tree).
echo keep >"$T/afile"
run_fetch --source "$BASE/good.tar.gz" --downloads "$DL" --out "$T/afile"
check "--out an existing file: exit 1" test $? = 1
check "--out an existing file: named" log_has "--out $T/afile: exists and is not a directory"
check "--out an existing file: the file is kept" test "$(cat "$T/afile" 2>/dev/null)" = keep
mkdir -p "$T/real_raw"; ln -s "$T/real_raw" "$T/link_raw"
run_fetch --source "$BASE/good.tar.gz" --downloads "$DL" --out "$T/link_raw"
check "--out a symbolic link: refused, naming it" log_has "--out $T/link_raw: is a symbolic link"
check "--out a symbolic link: the link is kept" test -L "$T/link_raw"
# A tree of a killed extraction (fetch has no signal handler) goes on the next run, even an up-to-date one.
DEAD=$(sh -c 'echo $$')
mkdir -p "$T/raw.tmp.$DEAD/mathematics_dataset-v1.0"
run_fetch --source "$BASE/good.tar.gz" --downloads "$DL" --out "$T/raw" --tokenizer-corpus-pairs 100
check "up-to-date rerun removes the temporary tree of a dead fetch" test ! -e "$T/raw.tmp.$DEAD"
check "up-to-date rerun keeps the output" verify_manifest "$T/raw" "$SHA" "$BASE/good.tar.gz" 6

# 2. Resume: the first request drops mid-body; with no retries the run fails and keeps the .part; the rerun resumes.
DL2=$T/dl2
run_fetch --source "$BASE/drop/good.tar.gz" --downloads "$DL2" --out "$T/raw2" --retries 0
check "dropped connection fails the run (no retries)" test $? != 0
PART=$(stat -c %s "$DL2/good.tar.gz.part" 2>/dev/null || echo 0)
check "a partial download is kept (0 < $PART < $SIZE)" test "$PART" -gt 0 -a "$PART" -lt "$SIZE"
check "no output tree after the failed download" test ! -e "$T/raw2"
run_fetch --source "$BASE/drop/good.tar.gz" --downloads "$DL2" --out "$T/raw2"
check "rerun succeeds" test $? = 0
check "rerun sent a Range request from the .part size" grep -q "GET /drop/good.tar.gz range=bytes=$PART-" "$T/server.log"
check "resumed file is byte-identical" cmp -s "$DL2/good.tar.gz" "$WWW/good.tar.gz"
check "resumed extraction matches" verify_manifest "$T/raw2" "$SHA" "$BASE/drop/good.tar.gz" 6

# 3. In-run retry: the first request stalls; the low-speed timeout aborts it and the retry resumes with Range.
run_fetch --source "$BASE/stall/good.tar.gz" --downloads "$T/dl3" --out "$T/raw3" --low-speed-time 2 --retries 2
check "stall is retried within one run" test $? = 0
check "the retry resumed with a Range request" grep -q "GET /stall/good.tar.gz range=bytes=[1-9][0-9]*-" "$T/server.log"
check "stalled-then-resumed file is byte-identical" cmp -s "$T/dl3/good.tar.gz" "$WWW/good.tar.gz"

# 4. A server that cannot resume: the partial file is discarded and the download restarts from byte 0.
run_fetch --source "$BASE/dropnorange/good.tar.gz" --downloads "$T/dl4" --out "$T/raw4" --retries 3
check "non-resuming server: download restarts and succeeds" test $? = 0
check "non-resuming server: file is byte-identical" cmp -s "$T/dl4/good.tar.gz" "$WWW/good.tar.gz"

# 4b. Hostile servers. A resume answered at another offset, or with a malformed Content-Range: the partial file is
# discarded (never spliced), the download restarts, and the result is the exact archive.
for mode in badrange badcr; do
  run_fetch --source "$BASE/$mode/good.tar.gz" --downloads "$T/dl4$mode" --out "$T/raw4$mode" --retries 3
  check "$mode: the download restarts and succeeds" test $? = 0
  check "$mode: the resume answer was refused and the partial file discarded" log_has "discarding the partial file"
  check "$mode: file is byte-identical" cmp -s "$T/dl4$mode/good.tar.gz" "$WWW/good.tar.gz"
done
# Content-Length 100 bytes short of the file: the client stops early, so the archive is truncated; extraction
# refuses it and the download is moved aside (the next run must not trust it).
run_fetch --source "$BASE/longlen/good.tar.gz" --downloads "$T/dl4l" --out "$T/raw4l" --retries 1
check "Content-Length shorter than the body: refused" test $? != 0 -a ! -e "$T/raw4l"
check "Content-Length shorter than the body: one error line" test "$(grep -c 'error:' "$T/log")" = 1
check "Content-Length shorter than the body: the download is moved aside" \
  test ! -e "$T/dl4l/good.tar.gz" -a -n "$(ls "$T/dl4l/rejected" 2>/dev/null)"
# Content-Length 100 bytes past the file, then the connection closes: an incomplete transfer each time; after the
# retries one clear error, non-zero exit, no output tree.
run_fetch --source "$BASE/shortlen/good.tar.gz" --downloads "$T/dl4s" --out "$T/raw4s" --retries 1
check "Content-Length longer than the body: refused" test $? != 0 -a ! -e "$T/raw4s"
check "Content-Length longer than the body: one error line" test "$(grep -c 'error:' "$T/log")" = 1
check "Content-Length longer than the body: no archive taken as complete" test ! -e "$T/dl4s/good.tar.gz"

# 5. Errors that must not retry forever: 404.
run_fetch --source "$BASE/missing.tar.gz" --downloads "$T/dl5" --out "$T/raw5" --retries 3
check "404 is a clear error" log_has "HTTP 404"
check "404 is not retried" test "$(grep -c 'missing.tar.gz' "$T/server.log")" = 1

# 6. Checksum pinning.
run_fetch --source "$WWW/good.tar.gz" --out "$T/raw6" --sha256 "$(printf '0%.0s' $(seq 64))"
check "wrong --sha256 refused" log_has "SHA-256 mismatch"
check "no tree after a checksum mismatch" test ! -e "$T/raw6"
run_fetch --source "$WWW/good.tar.gz" --out "$T/raw6" --sha256 "$(echo "$SHA" | tr a-f A-F)"
check "matching --sha256 (any case) accepted" test $? = 0

# 7. 'official' through a test manifest: URL and size come from the manifest; a wrong size is refused.
mk_manifest() { # SIZE URL -> $T/manifest.json
  "$PY" - "$1" "$2" "$T/manifest.json" <<'PY'
import json, sys
m = json.load(open("datasets/dm_math_v1.0.json"))
m["size"], m["url"] = int(sys.argv[1]), sys.argv[2]
json.dump(m, open(sys.argv[3], "w"), indent=1)
PY
}
mk_manifest $((SIZE + 1)) "$BASE/good.tar.gz"
run_fetch --source official --manifest "$T/manifest.json" --downloads "$T/dl7" --out "$T/raw7" --retries 0
check "official: size mismatch against the manifest refused" log_has "size mismatch"
check "official: no tree after a size mismatch" test ! -e "$T/raw7"
mk_manifest "$SIZE" "$BASE/good.tar.gz"
run_fetch --source official --manifest "$T/manifest.json" --downloads "$T/dl7" --out "$T/raw7"
check "official: manifest URL and size accepted" test $? = 0
check "official: source recorded" verify_manifest "$T/raw7" "$SHA" official 6

# 8. Corrupted and truncated archives: one clear error, no tree, the previous output untouched.
BEFORE=$(sha256sum "$T/raw/manifest.json")
for bad in corrupt truncated; do
  run_fetch --source "$BASE/$bad.tar.gz" --downloads "$T/dl8" --out "$T/raw"
  rc=$?
  check "$bad archive: non-zero exit" test $rc != 0
  check "$bad archive: clear error" log_has "corrupt or truncated archive"
  check "$bad archive: one error line" test "$(grep -c 'error:' "$T/log")" = 1
  check "$bad archive: no temporary tree left" no_temp_trees "$T/raw"
  check "$bad archive: old output intact" test "$(sha256sum "$T/raw/manifest.json")" = "$BEFORE"
done
check "old output still consistent" verify_manifest "$T/raw" "$SHA" "$BASE/good.tar.gz" 6
run_fetch --source "$WWW/corrupt.tar.gz" --out "$T/raw8"
rc=$?
check "corrupt local archive: refused, no tree at all" test $rc != 0 -a ! -e "$T/raw8"
check "corrupt local archive: the user's file is left where it is" test -s "$WWW/corrupt.tar.gz"

# 8b. A bad download does not poison the cache: a corrupt archive served under a name is refused and moved aside to
# DOWNLOADS/rejected/ (named in the error); once the server has the good archive under that name, the rerun downloads
# it afresh (no "using the earlier download") and succeeds, without anyone deleting a file by hand.
cp "$WWW/corrupt.tar.gz" "$WWW/swap.tar.gz"
run_fetch --source "$BASE/swap.tar.gz" --downloads "$T/dl8b" --out "$T/raw8b"
rc=$?
check "corrupt download: refused" test $rc != 0 -a ! -e "$T/raw8b"
check "corrupt download: the error names where it was moved" log_has "moved aside to $T/dl8b/rejected/swap.tar.gz."
check "corrupt download: one error line" test "$(grep -c 'error:' "$T/log")" = 1
check "corrupt download: not left in the downloads directory" test ! -e "$T/dl8b/swap.tar.gz"
check "corrupt download: kept under rejected/" test "$(ls "$T/dl8b/rejected" | grep -c '^swap\.tar\.gz\.')" = 1
cp "$WWW/good.tar.gz" "$WWW/swap.tar.gz"
run_fetch --source "$BASE/swap.tar.gz" --downloads "$T/dl8b" --out "$T/raw8b"
check "after a rejected download: the rerun succeeds" test $? = 0
check "after a rejected download: the rerun downloaded afresh" sh -c "! grep -q 'using the earlier download' '$T/log'"
check "after a rejected download: the good archive extracted" verify_manifest "$T/raw8b" "$SHA" "$BASE/swap.tar.gz" 6
# A pinned checksum that does not match: the same (moved aside, named).
run_fetch --source "$BASE/good.tar.gz" --sha256 "$(printf '0%.0s' $(seq 64))" --downloads "$T/dl8c" --out "$T/raw8c"
check "checksum mismatch: download moved aside and named" log_has "moved aside to $T/dl8c/rejected/good.tar.gz."
check "checksum mismatch: not left in the downloads directory" test ! -e "$T/dl8c/good.tar.gz"

# 9. Traversal entry.
run_fetch --source "$BASE/evil.tar.gz" --downloads "$T/dl9" --out "$T/raw9/out"
check "traversal entry refused, naming it" log_has "refusing unsafe entry 'mathematics_dataset-v1.0/train-easy/../../evil.txt'"
check "traversal: nothing written outside or inside" test ! -e "$T/raw9/evil.txt" -a ! -e "$T/evil.txt" -a ! -e "$T/raw9/out"
check "traversal: no temporary tree left" no_temp_trees "$T/raw9/out"

# 10. file:// URL and local path sources give the same files as the download; the rerun is up to date.
run_fetch --source "file://$WWW/good.tar.gz" --out "$T/raw10"
check "file:// source" verify_manifest "$T/raw10" "$SHA" "file://$WWW/good.tar.gz" 6
run_fetch --source "$WWW/good.tar.gz" --out "$T/raw11" --filter '.*'
check "local path source with --filter '.*' (8 files)" verify_manifest "$T/raw11" "$SHA" "$WWW/good.tar.gz" 8
check "same files as the HTTP download" test "$(json_get "$T/raw10/manifest.json" 'm["files"]')" = \
  "$(json_get "$T/raw/manifest.json" 'm["files"]')"
run_fetch --source "$WWW/good.tar.gz" --out "$T/raw11" --filter '.*'
check "local rerun is up to date" log_has "up to date"
run_fetch --source "$WWW/good.tar.gz" --out "$T/raw11" --filter 'algebra__.*'
check "changed filter re-extracts and replaces the tree" verify_manifest "$T/raw11" "$SHA" "$WWW/good.tar.gz" 2
run_fetch --source "$WWW/good.tar.gz" --out "$T/raw12" --filter 'nothing__here'
check "filter matching nothing is an error" log_has "matched no module file"
run_fetch --source "$WWW/good.tar.gz" --out "$T/raw12" --filter '('
check "invalid filter is an error" log_has "invalid --filter"
run_fetch --source "ftp://127.0.0.1/x.tar.gz" --out "$T/raw12"
check "unsupported scheme is an error" log_has "unsupported URL scheme"

# 11. The embedded sample with the default filter, run from another directory (found next to the executable).
( cd "$T" && "$FETCH" --source embedded --out "$T/emb" >"$T/log" 2>&1 )
check "embedded sample fetch" test $? = 0
check "embedded: 9 arithmetic modules x 4 splits + 6 extrapolate = 42 files" "$PY" - "$T/emb/manifest.json" <<'PY'
import json, sys, collections
m = json.load(open(sys.argv[1]))
by = collections.Counter(f["split"] for f in m["files"])
want = {"train-easy": 9, "train-medium": 9, "train-hard": 9, "interpolate": 9, "extrapolate": 6}
ok = dict(by) == want and all(f["file"].startswith("arithmetic__") for f in m["files"])
ok = ok and len(m["tokenizer_corpus"]) == 56 and m["source"] == "embedded" and m["filter"] == "arithmetic__.*"
if not ok: print("    got", dict(by), len(m["tokenizer_corpus"]))
sys.exit(0 if ok else 1)
PY
check "embedded: manifest consistent" verify_manifest "$T/emb" \
  "$(sha256sum datasets/dm_math_sample.tar.gz | cut -d' ' -f1)" embedded 42

# 11b. Downloads that would fill a disk: refused with one line, nothing left behind, at the cap or before the body.
run_fetch --source "$BASE/endless/good.tar.gz" --out "$T/rawE" --downloads "$T/dlE" --retries 0 \
  --max-download-bytes 1048576
check "endless body: refused (exit 1)" test $? = 1
check "endless body: one line naming the cap" log_has "the body grows past the download cap of 1048576 bytes"
check "endless body: nothing kept (no .part, no archive)" test -z "$(ls -A "$T/dlE" 2>/dev/null)"
check "endless body: no output tree" test ! -e "$T/rawE"
run_fetch --source "$BASE/huge/good.tar.gz" --out "$T/rawH" --downloads "$T/dlH" --retries 0
check "1 TiB Content-Length: refused at the header (default cap 8 GiB)" log_has \
  "the server announces 1099511627776 bytes, more than the download cap of 8589934592 bytes"
check "1 TiB Content-Length: nothing written" test -z "$(ls -A "$T/dlH" 2>/dev/null)"
check "a download under the cap still works" run_fetch --source "$BASE/good.tar.gz" --out "$T/rawC" \
  --downloads "$T/dlC" --max-download-bytes "$SIZE"
# Free space: a tmpfs of 96 MiB has less than the announced body plus the 64 MiB margin; the .part is kept for a
# resume after space is freed. (Mounting needs root: a machine without it says so and skips these checks.)
if mkdir -p "$T/small_fs" && mount -t tmpfs -o size=96m tmpfs "$T/small_fs" 2>/dev/null; then
  run_fetch --source "$BASE/huge/good.tar.gz" --out "$T/rawS" --downloads "$T/small_fs/dl" --retries 0 \
    --max-download-bytes 2000000000000
  check "no room for the announced body: refused naming the file system" log_has \
    "$T/small_fs/dl: not enough free space for the download of $BASE/huge/good.tar.gz"
  # an archive member whose header claims more than the room left is refused before it is written (its 80 MiB of
  # 'x' compress a thousandfold: --max-extract-ratio lets it past the decompression-bomb cap to the space check)
  head -c $((80 << 20)) /dev/zero | tr '\0' 'x' >"$SRC/big.txt"
  mkdir -p "$T/bigsrc/mathematics_dataset-v1.0/train-easy"
  mv "$SRC/big.txt" "$T/bigsrc/mathematics_dataset-v1.0/train-easy/arithmetic__big.txt"
  tar -czf "$T/big.tar.gz" -C "$T/bigsrc" mathematics_dataset-v1.0
  rm -rf "$T/bigsrc"
  run_fetch --source "$T/big.tar.gz" --out "$T/small_fs/raw" --downloads "$T/dl_unused" --max-extract-ratio 100000
  check "no room for an archive member: refused before extraction" log_has \
    "not enough free space for extracting 'mathematics_dataset-v1.0/train-easy/arithmetic__big.txt'"
  check "no room for an archive member: no output tree" test ! -e "$T/small_fs/raw"
  umount "$T/small_fs"
else
  echo "skip - free-space checks: cannot mount a tmpfs here (needs root)"
fi
# Rejections in the same second never overwrite one another.
for i in 1 2 3; do run_fetch --source "$BASE/corrupt.tar.gz" --out "$T/rawR" --downloads "$T/dlR" --retries 0; done
check "three rejections in one second: three files under rejected/" \
  test "$(ls "$T/dlR/rejected" | grep -c '^corrupt\.tar\.gz\.')" = 3

# 12. --help and bad options.
"$FETCH" --help >/dev/null 2>&1
check "--help exits 0" test $? = 0
"$FETCH" --out "$T/x" --bogus >/dev/null 2>&1
check "unknown option exits 2" test $? = 2

# ---- then tokenize what was fetched over HTTP (the resumed download, raw2) ----------------------------------------
# The served corpus is tiny ("What is A + B?" only), so the vocabulary is small; the stage is the real one.
if [ -x "$ROOT/bin/tokenize" ]; then
  cat >"$T/data.json" <<'JSON'
{"fetch": {"source": "unused here"},
 "tokenize": {"vocab_size": 40, "max_piece_length": 16, "tokenizer_pairs_per_file": 1000, "eval_examples": 300,
              "eval_shuffle_seed": 123, "train_shuffle_seed": 1, "exclude_tokenizer_pattern": "probability__swr_.*"}}
JSON
  "$ROOT/bin/tokenize" --raw "$T/raw2" --config "$T/data.json" --out "$T/tok" --quiet >"$T/log" 2>&1
  check "tokenize of the resumed download exits 0" test $? = 0
  check "tokenize wrote the tokenizer, three shards and its manifest" test -s "$T/tok/tokenizer.json" -a \
    -s "$T/tok/train.shard" -a -s "$T/tok/interpolate.shard" -a -s "$T/tok/extrapolate.shard" -a \
    -s "$T/tok/tokenize_manifest.json"
  check "train shard holds every fetched train example (4000+4000+3000+3000)" test "$(json_get \
    "$T/tok/tokenize_manifest.json" 'm["splits"]["train"]["n_examples"]')" = 14000
  check "tokenize recorded the fetched manifest's archive hash" test "$(json_get \
    "$T/tok/tokenize_manifest.json" 'm["raw"]["archive_sha256"]')" = "$SHA"
else
  fail "bin/tokenize not built (run make first)"
fi

if [ "$FAILS" != 0 ]; then echo "$FAILS check(s) failed"; exit 1; fi
echo "all fetch e2e checks passed"
