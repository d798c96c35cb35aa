#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# A well-formed record with an impossible number (accuracy 2.0 or 1e999, a negative loss) never reaches compare's
# verdict or the report: bin/compare fails with one line naming the file, the field and the value, and says nothing
# is BETTER. Uses the recorded ci baselines as the honest records.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/test_record_domains.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x bin/compare ] || fail "bin/compare missing (make all)"

forge() { # run field-edit(python expression on d) -> runs dir with that run's forged result.json
    local run=$1 expr=$2 dir=$tmp/ci # named like runs/ci: a record names the experiment of the directory holding it
    rm -rf "$dir"
    mkdir -p "$dir/$run"
    python3 - "$run" "$expr" "$dir/$run/result.json" <<'PY'
import json, sys
run, expr, out = sys.argv[1], sys.argv[2], sys.argv[3]
with open(f"reports/baselines/ci/{run}.result.json") as f:
    d = json.load(f)
exec(expr)
text = json.dumps(d).replace("Infinity", "1e999")  # JSON has no inf: the literal a forger would write
with open(out, "w") as f:
    f.write(text)
PY
}

check() { # name run expr expected-substring
    local name=$1 run=$2 expr=$3 want=$4 rc=0
    forge "$run" "$expr"
    bin/compare --baselines reports/baselines/ci --runs "$tmp/ci" --only "$run" >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" -ne 0 ] || fail "$name: compare exited 0 on a forged record: $(cat "$tmp/out")"
    grep -q "BETTER" "$tmp/out" && fail "$name: compare called a forged value BETTER"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$name: expected one error line, got: $(cat "$tmp/err")"
    grep -qF -- "$want" "$tmp/err" || fail "$name: error does not name '$want': $(cat "$tmp/err")"
    grep -qF "$tmp/ci/$run/result.json" "$tmp/err" || fail "$name: error does not name the file: $(cat "$tmp/err")"
    echo "ok: $name: $(cat "$tmp/err")"
}

# the honest record passes
forge dense_qa "pass"
bin/compare --baselines reports/baselines/ci --runs "$tmp/ci" --only dense_qa >"$tmp/out" 2>&1 ||
    fail "the unedited record does not pass: $(tail -3 "$tmp/out")"

check "accuracy 2.0" dense_qa "d['evaluation']['sets']['interpolate']['accuracy'] = 2.0" \
    "evaluation.sets.interpolate.accuracy: 2 is not a fraction in [0, 1]"
check "accuracy inf" moeut_qa "d['evaluation']['sets']['extrapolate']['accuracy'] = float('inf')" \
    "evaluation.sets.extrapolate.accuracy: inf is not a fraction in [0, 1]"
check "mean accuracy 2.0" dense_answer "d['evaluation']['mean_accuracy'] = 2.0" \
    "evaluation.mean_accuracy: 2 is not a fraction in [0, 1]"
check "negative loss" moeut_answer "d['evaluation']['sets']['interpolate']['mean_answer_loss'] = -5" \
    "evaluation.sets.interpolate.mean_answer_loss: -5 is not a finite number >= 0"
check "loss -inf" dense_qa "d['evaluation']['sets']['extrapolate']['mean_answer_loss'] = float('-inf')" \
    "evaluation.sets.extrapolate.mean_answer_loss: -inf is not a finite number >= 0"
check "accuracy against counts" dense_qa \
    "m = d['evaluation']['sets']['interpolate']['modules']; k = sorted(m)[0]; m[k]['accuracy'] = 1.0" \
    "accuracy: 1 disagrees with correct / n"
check "train loss inf" moeut_qa "d['training']['final_train_loss'] = float('inf')" \
    "training.final_train_loss: inf is not a finite number >= 0"
echo "test_record_domains: all passed"
