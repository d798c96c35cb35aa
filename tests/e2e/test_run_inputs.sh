#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# bin/evaluate and bin/analyze on bad inputs next to a good trained run (a 3-step tiny dense run): each is one error
# line naming the culprit, exit 1, and leaves the earlier result.json / analysis.json byte-identical:
#   - eval shards swapped (interpolate.shard holding the extrapolate split): the sets would silently trade places;
#   - a token id beyond the vocabulary inside an evaluated example (a corrupt shard);
#   - an empty --out (an unset shell variable): a usage error (exit 2), nothing written into "/";
#   - data re-tokenized since training (another tokenizer of the same size): the ids would decode as other pieces;
#   - --out naming an existing directory: refused before the work, nothing written beside it;
#   - an absurd --threads (100000 crashed libgomp with SIGSEGV).
source "$(dirname "$0")/train_common.sh"
for b in evaluate analyze; do [ -x "bin/$b" ] || fail "bin/$b missing (run make first)"; done

train_data "$tmp/data"
train_config "$tmp/run.json.tmp" dense qa 3
sed 's/"analyze": {"enabled": false}/"analyze": {"enabled": true}/' "$tmp/run.json.tmp" >"$tmp/run.json"
grep -q '"enabled": true' "$tmp/run.json" || fail "could not enable the analysis"
bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$tmp/run" --threads 1 >"$tmp/train.log" 2>&1 \
  || { cat "$tmp/train.log"; fail "bin/train failed"; }
bin/evaluate --run "$tmp/run" --config "$tmp/run.json" --data "$tmp/data" --out "$tmp/run/result.json" \
  >"$tmp/ev.log" 2>&1 || { cat "$tmp/ev.log"; fail "bin/evaluate failed on good input"; }
bin/analyze --run "$tmp/run" --config "$tmp/run.json" --data "$tmp/data" --out "$tmp/run/analysis.json" \
  >"$tmp/an.log" 2>&1 || { cat "$tmp/an.log"; fail "bin/analyze failed on good input"; }
good=$(cd "$tmp/run" && sha256sum result.json predictions.jsonl analysis.json)

# expect_refused LABEL WANT_RC PATTERN STAGE ARGS...: exit status, one error line matching PATTERN, run untouched.
expect_refused() {
  local label=$1 want=$2 pattern=$3 stage=$4 rc=0
  shift 4
  "bin/$stage" "$@" >/dev/null 2>"$tmp/bad.log" || rc=$?
  [ "$rc" = "$want" ] || { cat "$tmp/bad.log"; fail "$label: exit status $rc, expected $want"; }
  grep -q -- "$pattern" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "$label: message does not match '$pattern'"; }
  [ "$(grep -c 'error' "$tmp/bad.log")" = 1 ] || { cat "$tmp/bad.log"; fail "$label: expected one error line"; }
  [ "$(cd "$tmp/run" && sha256sum result.json predictions.jsonl analysis.json)" = "$good" ] \
    || fail "$label: the earlier outputs changed"
  [ -z "$(ls -A "$tmp/run" | grep '\.tmp\.')" ] || fail "$label: temporary files left in the run"
  echo "ok: $label"
}
eval_args=(--run "$tmp/run" --config "$tmp/run.json" --out "$tmp/run/result.json")

# ---- swapped eval shards ----
cp -r "$tmp/data" "$tmp/swapped"
mv "$tmp/swapped/interpolate.shard" "$tmp/swapped/x.shard"
mv "$tmp/swapped/extrapolate.shard" "$tmp/swapped/interpolate.shard"
mv "$tmp/swapped/x.shard" "$tmp/swapped/extrapolate.shard"
expect_refused "swapped eval shards" 1 'interpolate.shard: split is "extrapolate", expected "interpolate"' \
  evaluate "${eval_args[@]}" --data "$tmp/swapped"

# ---- a token id beyond the vocabulary in the first evaluated example ----
cp -r "$tmp/data" "$tmp/corrupt"
python3 - "$tmp/corrupt/interpolate.shard" <<'PYEOF' || fail "could not corrupt the shard"
import json, struct, sys
path = sys.argv[1]
b = bytearray(open(path, "rb").read())
(hlen,) = struct.unpack_from("<I", b, 12)
header = json.loads(bytes(b[16:16 + hlen]).rstrip(b"\0"))
start = 16 + hlen
start += -start % 8                                  # the example table starts 8-aligned
(q_start,) = struct.unpack_from("<Q", b, start)      # example 0
tokens = start + 24 * header["n_examples"]
struct.pack_into("<H", b, tokens + 2 * (q_start + 1), 60000)
open(path, "wb").write(b)
PYEOF
expect_refused "token id beyond the vocabulary" 1 "interpolate.shard: example 0: token id 60000 >= vocabulary size 512" \
  evaluate "${eval_args[@]}" --data "$tmp/corrupt"

# ---- empty path options ----
expect_refused "evaluate --out ''" 2 "--out: empty value" evaluate --run "$tmp/run" --config "$tmp/run.json" \
  --data "$tmp/data" --out ''
expect_refused "analyze --run ''" 2 "--run: empty value" analyze --run '' --config "$tmp/run.json" \
  --data "$tmp/data" --out "$tmp/run/analysis.json"

# ---- data re-tokenized since training (same vocabulary size, other pieces): refused by both stages ----
sed 's/"tokenizer_pairs_per_file": 10000/"tokenizer_pairs_per_file": 3000/' experiments/tiny/data.json >"$tmp/data3000.json"
grep -q '"tokenizer_pairs_per_file": 3000' "$tmp/data3000.json" || fail "could not change the tokenizer corpus size"
bin/tokenize --raw "$tmp/raw" --config "$tmp/data3000.json" --out "$tmp/retok" --quiet || fail "re-tokenize"
cmp -s "$tmp/data/tokenizer.json" "$tmp/retok/tokenizer.json" && fail "the re-tokenized data has the same tokenizer"
expect_refused "evaluate on re-tokenized data" 1 "retok/tokenizer.json (sha256 .*) is not the tokenizer .* was trained with" \
  evaluate "${eval_args[@]}" --data "$tmp/retok"
expect_refused "analyze on re-tokenized data" 1 "retok/tokenizer.json (sha256 .*) is not the tokenizer .* was trained with" \
  analyze --run "$tmp/run" --config "$tmp/run.json" --data "$tmp/retok" --out "$tmp/run/analysis.json"

# ---- --out naming an existing directory: refused before any work, nothing written beside it ----
# (evaluate used to commit predictions.jsonl beside it and then fail on result.json; analyze wrote its maps first)
mkdir -p "$tmp/outdir/isdir"
expect_refused "evaluate --out a directory" 1 "--out: .*isdir: is a directory" evaluate --run "$tmp/run" \
  --config "$tmp/run.json" --data "$tmp/data" --out "$tmp/outdir/isdir"
expect_refused "analyze --out a directory" 1 "--out: .*isdir: is a directory" analyze --run "$tmp/run" \
  --config "$tmp/run.json" --data "$tmp/data" --out "$tmp/outdir/isdir"
[ "$(ls -A "$tmp/outdir")" = isdir ] || fail "--out a directory: files written beside it: $(ls -A "$tmp/outdir")"

# ---- an absurd --threads: one line (libgomp failed to create the threads, or crashed with SIGSEGV at 100000) ----
expect_refused "evaluate --threads 100000" 1 "--threads: must be at most 4096 (got 100000)" evaluate \
  "${eval_args[@]}" --data "$tmp/data" --threads 100000
rc=0
bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$tmp/threads" --threads 100000 2>"$tmp/bad.log" || rc=$?
[ "$rc" = 1 ] && grep -q -- "--threads: must be at most 4096" "$tmp/bad.log" \
  || { cat "$tmp/bad.log"; fail "train --threads 100000: exit status $rc"; }
[ ! -e "$tmp/threads" ] || fail "train --threads 100000: output directory created"
echo "ok: train --threads 100000"
