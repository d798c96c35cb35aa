#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# End-to-end test of bin/fetch's extraction caps (datasets/archive_extract.h): a gzip bomb, a tar.gz of under
# 1 MB whose module file inflates to 400 MiB of question/answer lines, is refused in one line, exit 1, within
# seconds, with nothing left behind (no output tree, no OUT.tmp.*, an earlier output untouched): by the default
# ratio cap, by --max-extract-bytes, and by data.json's fetch.max_extract_bytes and fetch.max_extract_ratio, each
# named in the refusal (the command line winning over the file). Bad cap values are refused; an archive within the
# caps still extracts.
# The bomb is built from concatenated gzip members (the same compressed megabyte repeated), so making it is cheap.
# Exit 0 pass, 77 skip (says why), anything else fail.
source "$(dirname "$0")/fetch_common.sh" test_fetch_limits fetch
log_has() { grep -q -F -- "$1" "$T/log" || { echo "    expected '$1' in:"; sed 's/^/    | /' "$T/log"; return 1; }; }
one_error_line() { test "$(grep -c 'error:' "$T/log")" = 1; }
nothing_at() { test ! -e "$1" && no_temp_trees "$1"; }

# ---- archives ----
# good.tar.gz: two small module files. bomb.tar.gz: one good member, then BOMB_MIB MiB of "What's 1 + 1?\n2\n".
BOMB_MIB=400
"$PY" - "$T" "$BOMB_MIB" <<'PY'
import gzip, io, os, sys, tarfile
out, mib = sys.argv[1], int(sys.argv[2])
root = "mathematics_dataset-v1.0/train-easy/"
def member(name, data):
    info = tarfile.TarInfo(root + name)
    info.size = len(data)
    return info.tobuf(format=tarfile.USTAR_FORMAT) + data + b"\0" * (-len(data) % 512)
good = b"".join(b"What is %d + %d?\n%d\n" % (a, a + 1, 2 * a + 1) for a in range(200))
open(os.path.join(out, "good_bytes"), "w").write("%d\n" % len(good))
with open(os.path.join(out, "good.tar.gz"), "wb") as f:
    f.write(gzip.compress(member("arithmetic__add_or_sub.txt", good) + member("arithmetic__mul.txt", good)
                          + b"\0" * 1024))
lines = b"What's 1 + 1?\n2\n" * (1 << 16)  # 1 MiB
assert len(lines) == 1 << 20
info = tarfile.TarInfo(root + "arithmetic__mul.txt")
info.size = mib << 20
with open(os.path.join(out, "bomb.tar.gz"), "wb") as f:
    f.write(gzip.compress(member("arithmetic__add_or_sub.txt", good) + info.tobuf(format=tarfile.USTAR_FORMAT)))
    chunk = gzip.compress(lines, compresslevel=9)
    for _ in range(mib):
        f.write(chunk)
    f.write(gzip.compress(b"\0" * 1024))
PY
BOMB=$T/bomb.tar.gz
BOMB_BYTES=$(stat -c %s "$BOMB")
BOMB_ENTRY=mathematics_dataset-v1.0/train-easy/arithmetic__mul.txt
CLAIMED=$(( $(cat "$T/good_bytes") + (BOMB_MIB << 20) )) # what the two members' headers claim
check "the bomb is small ($BOMB_BYTES bytes) and inflates to $BOMB_MIB MiB of tar" \
  sh -c "test $BOMB_BYTES -lt 1048576 && test \$(gzip -dc '$BOMB' | wc -c) -gt $((BOMB_MIB << 20))"

# Runs fetch on the bomb into OUT with further options; records the exit status in RC and the seconds taken in SECS.
run_bomb() { # OUT OPTIONS...
  local out=$1; shift
  local t0 t1
  t0=$(date +%s%N)
  run_fetch --source "$BOMB" --out "$out" "$@"
  RC=$?
  t1=$(date +%s%N)
  SECS=$(( (t1 - t0) / 1000000000 ))
}

# 1. Within the caps: an ordinary archive extracts (the output the refusals below must leave untouched).
run_fetch --source "$T/good.tar.gz" --out "$T/raw" --tokenizer-corpus-pairs 10
check "good archive: extracts (exit 0)" test $? = 0
BEFORE=$(cd "$T/raw" && find . -type f -exec sha256sum {} + | sort)

# 2. The default caps: the ratio (20 times the archive's size; the archive is far below 64 MiB x 20) refuses it at
# the member's header, before a byte of it is written; the earlier output stays as it was.
run_bomb "$T/raw"
check "bomb, default caps: exit 1" test "$RC" = 1
check "bomb, default caps: refused by the ratio, naming the entry and the sizes" log_has \
  "$BOMB: refusing entry '$BOMB_ENTRY': the members so far expand to $CLAIMED bytes"
check "bomb, default caps: names the ratio and its option" log_has \
  "more than 20 times the archive's $BOMB_BYTES bytes (--max-extract-ratio"
check "bomb, default caps: one error line" one_error_line
check "bomb, default caps: within 10 s (took ${SECS}s)" test "$SECS" -lt 10
check "bomb, default caps: no temporary tree left" no_temp_trees "$T/raw"
check "bomb, default caps: the earlier output untouched" \
  test "$(cd "$T/raw" && find . -type f -exec sha256sum {} + | sort)" = "$BEFORE"
check "bomb, default caps: the archive (a local file) is left where it is" test -s "$BOMB"
run_bomb "$T/fresh"
check "bomb into a new OUT: exit 1" test "$RC" = 1
check "bomb into a new OUT: no OUT, no OUT.tmp.* (the good member extracted first is gone too)" nothing_at "$T/fresh"

# 3. --max-extract-bytes: with the ratio lifted, the byte cap refuses it, naming the option and the cap.
run_bomb "$T/fresh" --max-extract-bytes 1048576 --max-extract-ratio 1000000
check "--max-extract-bytes: exit 1" test "$RC" = 1
check "--max-extract-bytes: refused naming the cap and the option" log_has \
  "more than the extraction cap of 1048576 bytes (--max-extract-bytes)"
check "--max-extract-bytes: one error line" one_error_line
check "--max-extract-bytes: nothing left behind" nothing_at "$T/fresh"
check "--max-extract-bytes: within 10 s (took ${SECS}s)" test "$SECS" -lt 10

# 4. data.json's fetch.max_extract_bytes / max_extract_ratio; a command-line option wins over the file.
printf '{"fetch": {"source": "%s", "max_extract_bytes": 2097152, "max_extract_ratio": 1000000}}\n' "$BOMB" \
  >"$T/data.json"
run_fetch --config "$T/data.json" --out "$T/fresh"
check "fetch.max_extract_bytes: exit 1" test $? = 1
check "fetch.max_extract_bytes: refused naming the file and the key" log_has \
  "more than the extraction cap of 2097152 bytes ($T/data.json: fetch.max_extract_bytes)"
check "fetch.max_extract_bytes: nothing left behind" nothing_at "$T/fresh"
run_fetch --config "$T/data.json" --out "$T/fresh" --max-extract-bytes 3145728
check "--max-extract-bytes over fetch.max_extract_bytes: the option's cap is named" log_has \
  "more than the extraction cap of 3145728 bytes (--max-extract-bytes)"
printf '{"fetch": {"source": "%s", "max_extract_ratio": 30}}\n' "$BOMB" >"$T/ratio.json"
run_fetch --config "$T/ratio.json" --out "$T/fresh"
check "fetch.max_extract_ratio: refused naming the file and the key" log_has \
  "more than 30 times the archive's $BOMB_BYTES bytes ($T/ratio.json: fetch.max_extract_ratio"
run_fetch --config "$T/ratio.json" --out "$T/fresh" --max-extract-ratio 25
check "--max-extract-ratio over fetch.max_extract_ratio: the option's ratio is named" log_has \
  "more than 25 times the archive's $BOMB_BYTES bytes (--max-extract-ratio"
check "config runs: nothing left behind" nothing_at "$T/fresh"

# 5. Bad cap values: one line naming the option or key, exit 1, before anything is read.
run_fetch --source "$T/good.tar.gz" --out "$T/fresh" --max-extract-bytes 0
check "--max-extract-bytes 0: refused" sh -c "grep -q -- '--max-extract-bytes must be in \[1, 68719476736\], got 0' \
  '$T/log'"
run_fetch --source "$T/good.tar.gz" --out "$T/fresh" --max-extract-ratio 0
check "--max-extract-ratio 0: refused" log_has "--max-extract-ratio must be >= 1, got 0"
printf '{"fetch": {"source": "%s", "max_extract_ratio": 0}}\n' "$T/good.tar.gz" >"$T/bad.json"
run_fetch --config "$T/bad.json" --out "$T/fresh"
check "fetch.max_extract_ratio 0: refused naming the file and key" log_has \
  "$T/bad.json: fetch.max_extract_ratio: must be >= 1, got 0"
printf '{"fetch": {"source": "%s", "max_extract_bytes": "16G"}}\n' "$T/good.tar.gz" >"$T/bad.json"
run_fetch --config "$T/bad.json" --out "$T/fresh"
check "fetch.max_extract_bytes as a string: refused naming the key" log_has "fetch.max_extract_bytes"
check "bad values: nothing at OUT" nothing_at "$T/fresh"

# 6. A cap the good archive fits extracts it (the caps refuse only what passes them).
run_fetch --source "$T/good.tar.gz" --out "$T/fresh" --max-extract-bytes 65536 --max-extract-ratio 1000
check "within a small cap: extracts" test $? = 0 -a -s "$T/fresh/manifest.json"

if [ "$FAILS" != 0 ]; then echo "$FAILS check(s) failed"; exit 1; fi
echo "all fetch limit checks passed"
