#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# bin/evaluate and bin/analyze on the CUDA backend against the CPU backend, end to end on trained checkpoints.
# One tiny dense run (Q+A loss) and one tiny MoEUT run (answer-only loss) are trained on the CPU backend with bin/train;
# each is then evaluated and analyzed twice: --backend cpu with bin/ (the reference) and --backend cuda with the
# device-under-test's stages ($CUDA_TEST_BIN, default bin/). Both stages are fp32 by design. The records are compared:
#   result.json   the same key structure; identical provenance (run, config and its SHA-256, code version, dataset,
#                 tokenizer, n_params, training section); backend "cpu" for the reference and "cuda" for the DUT
#                 (hardware may differ and is printed); the same n per set and per module; the same correct counts,
#                 accuracies and Wilson intervals per set and per module and the same mean_accuracy; the same greedy
#                 KV-cache check counts, with every checked example agreeing; mean_answer_loss per set and per module
#                 within 1e-4 relative.
#   predictions.jsonl (evaluate's per-example verdicts, beside each result.json) each valid against its own record
#                 (tests/e2e/predictions_check.py: header, keys, order, counts, mean losses, predicted == answer iff
#                 correct, greedy verdicts), then example by example: the same examples in the same order, identical
#                 correct flags, predicted strings and greedy_correct, every answer_loss within 1e-4 relative.
#   analysis.json the same key structure and prompt metadata (tokens, answer lengths, map shapes, SVG names), the
#                 same model_correct per prompt, every erasure score within 2e-4 absolute, and the same depth
#                 fractions (a prompt whose reference row maxima sit within the score tolerance of the 10% threshold
#                 may legitimately flip and is reported, not failed).
# Tolerances (both backends compute in fp32 and differ only in summation order; cuBLAS without TF32):
#   mean_answer_loss, 1e-4 relative: a token's cross-entropy moves by at most 2 max|dlogit| (logsumexp and the target
#     logit each move by at most max|dlogit|). On these trained checkpoints the logits reach |z| ~ 11 and bin/inspect
#     on the emulated CUDA backend differs from the CPU by <= 5.3e-6 (5e-7 of the scale; four interpolate examples);
#     allowing a GPU's other GEMM blocking 10x that, 5e-5, a summed answer loss (4-5 nats per answer token here: the
#     models are barely trained) moves by <= 2 * 5e-5 / 4 = 2.5e-5 relative.
#     The same 1e-4 as test_cuda_inspect.sh; a wrong op moves losses by whole percent.
#     It holds for each example's answer_loss too, whatever its size: a token's cross-entropy -log p_t moves by
#     |sum_v p_v (dz_v - dz_t)| <= 2 (1 - p_t) max|dz| <= 2 min(1, -log p_t) max|dz| (1 - p <= -log p), so by at most
#     2 max|dz| = 1e-4 of itself at the 5e-5 bound, and a sum of such terms by at most 1e-4 of the sum.
#   predicted strings and correct flags, exact: an argmax flips only where two logits lie within 1e-4 of each other.
#   erasure scores, 2e-4 absolute: a score is the L2 distance between two softmax vectors (reference and erased run,
#     maxed over answer positions). The softmax Jacobian J = diag(p) - p p^T satisfies ||J dz||_2 <= 2 max|dz|, so a
#     score moves by at most 4 max|dz| = 2e-4 at the 5e-5 logit bound above. Maps peak at 0.4-1 here; erasing the wrong
#     position or layer, or a wrong residual, moves scores by > 1e-2.
#   counts, accuracies, Wilson intervals, depth fractions: exact (integers, and doubles computed from those integers by
#     the same code; compared to 1e-12 relative only because the two builds may use other compiler flags).
# Negative controls (the comparison must be able to fail): the CPU record of the dense run compared with the CPU
# record of the MoEUT run must report different losses (and analysis scores, and per-example losses); a copy of a DUT
# record with one module's loss moved by 3x the tolerance, one correct count raised by 1, the backend renamed, or one
# erasure score moved by 3x its tolerance must each be reported; so must a copy of a DUT predictions file with one
# answer_loss moved by 3x the tolerance, one verdict flipped, or one predicted string changed.
# Exit 77 (SKIP) when this build or machine has no usable CUDA GPU.
# CUDA_E2E_DATA=DIR uses an already tokenized data directory (train_common.sh's train_data, e.g. the GPU bundle's)
# instead of running bin/fetch and bin/tokenize here.
# Validation without a GPU: CUDA_TEST_BACKEND=cpu runs the same script with the cpu backend as the device under test
# (every comparison must then pass trivially; it exercises the plumbing, not the CUDA code).
# CUDA_TEST_BIN=DIR takes the device-under-test's stages from DIR (build/emu/bin: the CUDA backend on the CPU
# emulator, ASan/UBSan; there evaluate takes ~20 s and analyze ~35 s per run, so the two runs' DUT stages run
# concurrently). CUDA_EVAL_STEPS (default 300) and CUDA_EVAL_EXAMPLES (default 50 per eval set) resize the test.
source "$(dirname "$0")/train_common.sh" # set -euo pipefail, cd to the root, $tmp, fail, train_data, train_config
t_start=$SECONDS

be=${CUDA_TEST_BACKEND:-cuda}
dut_bin=${CUDA_TEST_BIN:-bin}
[ "$be" = cuda ] || echo "NOTE: validation mode: the backend under test is $be, not cuda"
for b in bin/evaluate bin/analyze "$dut_bin/inspect" "$dut_bin/evaluate" "$dut_bin/analyze"; do
  [ -x "$b" ] || fail "$b not built (run make first)"
done
PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "SKIP: no python3 (the comparison uses only its standard library)"; exit 77; }

# Probe the backend before training anything (the same backend_create path that evaluate and analyze take).
require_backend "$be" "$dut_bin"
e2e_data interpolate.shard

# 300 steps (~10 s each on one CPU core) rather than 30: at 30 steps every eval example is wrong, which would leave the
# correct-count comparison nothing to compare; at 300 each run gets an example right (still ~2%: the per-module
# counts are a weak check at this size, the losses and erasure scores are the quantitative ones).
steps=${CUDA_EVAL_STEPS:-300}
examples=${CUDA_EVAL_EXAMPLES:-50}
runs="dense moeut"
for arch in $runs; do
  mode=qa
  [ "$arch" = moeut ] && mode=answer
  train_config "$tmp/$arch.json.tmp" "$arch" "$mode" "$steps"
  # train_config disables the analysis and evaluates 50 examples per set: enable the one, resize the other.
  sed -e 's/"analyze": {"enabled": false}/"analyze": {"enabled": true}/' \
      -e "s/\"max_examples_per_set\": 50/\"max_examples_per_set\": $examples/" "$tmp/$arch.json.tmp" >"$tmp/$arch.json"
  grep -q '"analyze": {"enabled": true}' "$tmp/$arch.json" || fail "$arch: could not enable the analysis"
  grep -q "\"max_examples_per_set\": $examples" "$tmp/$arch.json" || fail "$arch: could not set max_examples_per_set"
done

# wait_runs LOG_SUFFIX LABEL: waits for the background job of every run (${pid[ARCH]}), all of them before failing
# (no job left writing into $tmp while the exit trap removes it), then fails with the log of each that failed.
wait_runs() {
  local arch bad=""
  for arch in $runs; do wait "${pid[$arch]}" || bad="$bad $arch"; done
  [ -z "$bad" ] && return 0
  for arch in $bad; do cat "$tmp/$arch-$1.log"; done
  fail "$2 failed for:$bad"
}

# Training on the CPU backend from bin/, both runs at once, one thread each: the steps are tiny, and on a busy 2-core
# machine OpenMP with 2 threads per process ran 10-20x slower than with 1.
declare -A pid
for arch in $runs; do
  bin/train --backend cpu --threads 1 --config "$tmp/$arch.json" --data "$data" --out "$tmp/$arch-run" \
    >"$tmp/$arch-train.log" 2>&1 &
  pid[$arch]=$!
done
wait_runs train "bin/train --backend cpu"
for arch in $runs; do
  echo "trained $arch ($(grep -o 'final train loss [0-9.]*' "$tmp/$arch-train.log"), $steps steps, cpu backend)"
done

# evaluate_and_analyze ROLE BIN BACKEND ARCH: result.json and analysis.json (+ SVGs) under $tmp/ARCH-ROLE/.
evaluate_and_analyze() {
  local role=$1 exe=$2 backend=$3 arch=$4 out="$tmp/$4-$1"
  mkdir -p "$out"
  "$exe"/evaluate --backend "$backend" --run "$tmp/$arch-run" --config "$tmp/$arch.json" --data "$data" \
    --out "$out/result.json" >"$out/evaluate.log" 2>&1 || { cat "$out/evaluate.log"; return 1; }
  [ -s "$out/predictions.jsonl" ] || { echo "$out/predictions.jsonl missing"; return 1; }
  "$exe"/analyze --backend "$backend" --run "$tmp/$arch-run" --config "$tmp/$arch.json" --data "$data" \
    --out "$out/analysis.json" >"$out/analyze.log" 2>&1 || { cat "$out/analyze.log"; return 1; }
  local k
  for k in 1 2 3 4; do [ -s "$out/depth_$k.svg" ] || { echo "$out/depth_$k.svg missing"; return 1; }; done
}

for arch in $runs; do
  evaluate_and_analyze ref bin cpu "$arch" || fail "$arch: the cpu reference (bin/evaluate, bin/analyze)"
done
# The DUT's stages for both runs concurrently (independent processes; on the emulator they dominate the runtime).
t_dut=$SECONDS
for arch in $runs; do
  evaluate_and_analyze dut "$dut_bin" "$be" "$arch" >"$tmp/$arch-dut.log" 2>&1 &
  pid[$arch]=$!
done
wait_runs dut "$dut_bin/evaluate or $dut_bin/analyze --backend $be"
echo "evaluated and analyzed both runs on $be ($dut_bin) in $((SECONDS - t_dut)) s"

rc=0
"$PY" - "$tmp" "$be" $runs <<'EOF' || rc=$?
import copy, json, math, os, sys
sys.path.insert(0, "tests/e2e")
import predictions_check

tmp, want_backend, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
TOL_LOSS = 1e-4    # relative, mean_answer_loss (see the header)
TOL_SCORE = 2e-4   # absolute, erasure scores (see the header)
TOL_EXACT = 1e-12  # relative, doubles computed from identical integers by the same code
DEPTH_THRESHOLD = 0.1  # stages/analyze.c DEPTH_THRESHOLD

def load(path):
    with open(path) as f:
        return json.load(f)

def shape(x, path=""):
    """Every key path (and list length) of a JSON value: the record's schema as written."""
    out = set()
    if isinstance(x, dict):
        for k, v in x.items():
            out.add(path + "/" + k)
            out |= shape(v, path + "/" + k)
    elif isinstance(x, list):
        out.add("%s[len %d]" % (path, len(x)))
        for i, v in enumerate(x):
            out |= shape(v, "%s[%d]" % (path, i))
    return out

def close(a, b, rel):
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))

# ------------------------------------------------------------------------------ result.json
def compare_result(ref, dut, want):
    """Returns {check name: [differences]} for a cpu reference record and a DUT record (want: the DUT's backend)."""
    d = {k: [] for k in ("schema", "provenance", "backend", "examples", "verdicts", "greedy", "losses")}
    sr, sd = shape(ref), shape(dut)
    for p in sorted(sr ^ sd)[:10]:
        d["schema"].append("%s only in the %s record" % (p, "reference" if p in sr else "dut"))
    for k in ("schema", "schema_version", "experiment", "run", "arch", "loss_mode", "config", "config_sha256",
              "code_version", "dataset", "tokenizer_sha256", "precision", "n_params", "training"):
        if ref.get(k) != dut.get(k):
            d["provenance"].append("%s: %s vs %s" % (k, json.dumps(ref.get(k))[:80], json.dumps(dut.get(k))[:80]))
    if ref.get("precision") != "fp32":
        d["provenance"].append("reference precision %s, expected fp32" % ref.get("precision"))
    if ref.get("backend") != "cpu":
        d["backend"].append("reference backend %r, expected 'cpu'" % ref.get("backend"))
    if dut.get("backend") != want:
        d["backend"].append("dut backend %r, expected %r" % (dut.get("backend"), want))
    er, ed = ref.get("evaluation", {}), dut.get("evaluation", {})
    if not close(er.get("mean_accuracy", -1), ed.get("mean_accuracy", -2), TOL_EXACT):
        d["verdicts"].append("mean_accuracy %r vs %r" % (er.get("mean_accuracy"), ed.get("mean_accuracy")))
    for s in sorted(set(er.get("sets", {})) | set(ed.get("sets", {}))):
        a, b = er.get("sets", {}).get(s), ed.get("sets", {}).get(s)
        if a is None or b is None:
            d["examples"].append("set %s missing from one record" % s)
            continue
        items = [(s, a, b)]
        if set(a["modules"]) != set(b["modules"]):
            d["examples"].append("%s: module sets differ" % s)
        items += [(s + "/" + m, a["modules"][m], b["modules"][m]) for m in sorted(set(a["modules"]) & set(b["modules"]))]
        for where, x, y in items:
            if x["n"] != y["n"]:
                d["examples"].append("%s: n %d vs %d" % (where, x["n"], y["n"]))
            if x["correct"] != y["correct"]:
                d["verdicts"].append("%s: correct %d vs %d (of %d)" % (where, x["correct"], y["correct"], x["n"]))
            for k in ("accuracy", "ci95"):
                xs, ys = (x[k], y[k]) if k == "ci95" else ([x[k]], [y[k]])
                if len(xs) != len(ys) or not all(close(u, v, TOL_EXACT) for u, v in zip(xs, ys)):
                    d["verdicts"].append("%s: %s %r vs %r" % (where, k, x[k], y[k]))
            if not close(x["mean_answer_loss"], y["mean_answer_loss"], TOL_LOSS):
                rel = abs(x["mean_answer_loss"] - y["mean_answer_loss"]) / abs(x["mean_answer_loss"])
                d["losses"].append("%s: mean_answer_loss %.9g vs %.9g (rel %.2e > %.0e)"
                                   % (where, x["mean_answer_loss"], y["mean_answer_loss"], rel, TOL_LOSS))
        if (a["greedy_n"], a["greedy_agree"]) != (b["greedy_n"], b["greedy_agree"]):
            d["greedy"].append("%s: greedy %d/%d vs %d/%d" % (s, a["greedy_agree"], a["greedy_n"], b["greedy_agree"],
                                                              b["greedy_n"]))
        for who, x in (("reference", a), ("dut", b)):
            if x["greedy_agree"] != x["greedy_n"]:
                d["greedy"].append("%s %s: KV-cache greedy decoding disagreed with teacher forcing on %d of %d"
                                   % (who, s, x["greedy_n"] - x["greedy_agree"], x["greedy_n"]))
    return d

def worst_loss_error(ref, dut):
    w = 0.0
    for s, a in ref["evaluation"]["sets"].items():
        b = dut["evaluation"]["sets"][s]
        pairs = [(a, b)] + [(a["modules"][m], b["modules"][m]) for m in a["modules"]]
        for x, y in pairs:
            if x["mean_answer_loss"]:
                w = max(w, abs(x["mean_answer_loss"] - y["mean_answer_loss"]) / abs(x["mean_answer_loss"]))
    return w

# ------------------------------------------------------------------------------ analysis.json
def row_maxima(p):
    """r_l of stages/analyze.c depth_fraction: per row, the max score over question positions t = 1..q_len-2."""
    tin = len(p["pieces"])
    q_len = tin + 1 - p["n_answer"]
    r = [max([row[t] for t in range(1, q_len - 1) if t < tin] or [0.0]) for row in p["scores"]]
    return r, max(r)

def depth_of(p):
    r, m = row_maxima(p)
    return sum(x >= DEPTH_THRESHOLD * m for x in r) / len(r) if m > 0 else 0.0

def compare_analysis(ref, dut, notes):
    d = {k: [] for k in ("schema", "identity", "model_correct", "scores", "depth")}
    sr, sd = shape(ref), shape(dut)
    for p in sorted(sr ^ sd)[:10]:
        d["schema"].append("%s only in the %s record" % (p, "reference" if p in sr else "dut"))
    for k in ("schema", "schema_version", "experiment", "run", "arch", "loss_mode", "enabled", "n_layers",
              "counterfactual"):
        if ref.get(k) != dut.get(k):
            d["identity"].append("%s: %r vs %r" % (k, ref.get(k), dut.get(k)))
    if ref.get("enabled") is not True:
        d["identity"].append("the reference analysis is not enabled: nothing to compare")
    for k in ("name", "definition"):
        if ref.get("depth_summary", {}).get(k) != dut.get("depth_summary", {}).get(k):
            d["identity"].append("depth_summary.%s differs" % k)
    pr, pd = ref.get("prompts", []), dut.get("prompts", [])
    if len(pr) != len(pd) or not pr:
        d["identity"].append("%d vs %d prompts" % (len(pr), len(pd)))
    borderline = False
    for i, (a, b) in enumerate(zip(pr, pd)):
        for k in ("question", "answer", "pieces", "n_answer", "svg"):
            if a.get(k) != b.get(k):
                d["identity"].append("prompt %d: %s differs" % (i + 1, k))
        if a.get("model_correct") != b.get("model_correct"):
            d["model_correct"].append("prompt %d: %r vs %r" % (i + 1, a.get("model_correct"), b.get("model_correct")))
        ra = [x for row in a["scores"] for x in row]
        rb = [x for row in b["scores"] for x in row]
        if len(ra) != len(rb) or [len(r) for r in a["scores"]] != [len(r) for r in b["scores"]]:
            d["scores"].append("prompt %d: map shapes differ" % (i + 1))
            continue
        err = max(abs(x - y) for x, y in zip(ra, rb))
        if not err <= TOL_SCORE:
            d["scores"].append("prompt %d: max |score difference| %.3e > %.0e (scores up to %.3f)"
                               % (i + 1, err, TOL_SCORE, max(ra)))
        for who, p in (("reference", a), ("dut", b)):
            if not close(depth_of(p), p["depth_value"], TOL_EXACT):
                d["depth"].append("%s prompt %d: depth_value %r is not what its scores give (%r)"
                                  % (who, i + 1, p["depth_value"], depth_of(p)))
        # A row maximum within the score tolerance (x 2: it and the map maximum both move) of the threshold may
        # legitimately fall on the other side of it on the other backend.
        r, m = row_maxima(a)
        margin = min(abs(x - DEPTH_THRESHOLD * m) for x in r)
        if a["depth_value"] != b["depth_value"]:
            if margin <= 2 * TOL_SCORE:
                borderline = True
                notes.append("prompt %d: depth_value %r vs %r with a row maximum %.2e from the threshold "
                             "(within the score tolerance: not a failure)" % (i + 1, a["depth_value"], b["depth_value"], margin))
            else:
                d["depth"].append("prompt %d: depth_value %r vs %r (row maxima %.2e from the threshold)"
                                  % (i + 1, a["depth_value"], b["depth_value"], margin))
    va, vb = ref.get("depth_summary", {}).get("value"), dut.get("depth_summary", {}).get("value")
    if not borderline and not (isinstance(va, (int, float)) and isinstance(vb, (int, float)) and close(va, vb, TOL_EXACT)):
        d["depth"].append("depth_summary.value %r vs %r" % (va, vb))
    return d

def worst_score_error(ref, dut):
    return max(abs(x - y) for a, b in zip(ref["prompts"], dut["prompts"])
               for ra, rb in zip(a["scores"], b["scores"]) for x, y in zip(ra, rb))

# ------------------------------------------------------------------------------ the checks
fails, oks = [], 0
def report(label, diffs, detail=""):
    global oks
    for check, ds in diffs.items():
        if ds:
            for x in ds:
                fails.append("%s: %s: %s" % (label, check, x))
                print("FAIL: %s: %s: %s" % (label, check, x))
        else:
            oks += 1
            print("ok: %s: %s%s" % (label, check, detail.get(check, "") if isinstance(detail, dict) else ""))

def expect_failure(label, diffs, check):
    """Negative control: the named check must report a difference."""
    global oks
    if diffs[check]:
        oks += 1
        print("ok: negative control: %s: the %s check reports it (%s)" % (label, check, diffs[check][0]))
    else:
        fails.append("negative control: %s: the %s check did not report it" % (label, check))
        print("FAIL: negative control: %s: the %s check did not report it" % (label, check))

rec = {}
for arch in runs:
    for role in ("ref", "dut"):
        rec[arch, role, "result"] = load(os.path.join(tmp, "%s-%s" % (arch, role), "result.json"))
        rec[arch, role, "analysis"] = load(os.path.join(tmp, "%s-%s" % (arch, role), "analysis.json"))
        path = os.path.join(tmp, "%s-%s" % (arch, role), "predictions.jsonl")
        header, lines, problems = predictions_check.load(path)
        d = predictions_check.validate(header, lines, rec[arch, role, "result"]) if header else {}
        d["parse"] = problems
        report("%s %s predictions.jsonl against its result.json" % (arch, role), d,
               {"counts": " %d example lines, %d correct" % (len(lines), sum(x.get("correct") is True for x in lines))})
        rec[arch, role, "predictions"] = lines

for arch in runs:
    ref, dut = rec[arch, "ref", "result"], rec[arch, "dut", "result"]
    ev = ref["evaluation"]["sets"]
    detail = {
        "backend": " reference cpu (%s), dut %s (%s)" % (ref["hardware"], dut["backend"], dut["hardware"]),
        "examples": " " + ", ".join("%s n %d in %d modules" % (s, v["n"], len(v["modules"])) for s, v in ev.items()),
        "verdicts": " " + ", ".join("%s %d/%d correct" % (s, v["correct"], v["n"]) for s, v in ev.items())
                    + ", per module identical",
        "greedy": " " + ", ".join("%s %d/%d agree" % (s, v["greedy_agree"], v["greedy_n"]) for s, v in ev.items()),
        "losses": " worst relative error %.2e (tol %.0e), pooled %s"
                  % (worst_loss_error(ref, dut), TOL_LOSS,
                     ", ".join("%s %.4f" % (s, v["mean_answer_loss"]) for s, v in ev.items())),
    }
    report("%s evaluate (%s vs cpu)" % (arch, want_backend), compare_result(ref, dut, want_backend), detail)
    pr, pd = rec[arch, "ref", "predictions"], rec[arch, "dut", "predictions"]
    report("%s predictions.jsonl (%s vs cpu, per example)" % (arch, want_backend),
           predictions_check.compare(pr, pd, TOL_LOSS),
           {"examples": " %d examples" % len(pr),
            "verdicts": " %d correct, identical" % sum(x["correct"] for x in pr),
            "predicted": " identical strings",
            "losses": " worst relative error %.2e (tol %.0e)" % (predictions_check.worst_loss_error(pr, pd), TOL_LOSS)})
    if all(v["correct"] == 0 for v in ev.values()):
        print("NOTE: %s: no example is correct on either backend; the count check compares zeros" % arch)

    ref, dut = rec[arch, "ref", "analysis"], rec[arch, "dut", "analysis"]
    notes = []
    diffs = compare_analysis(ref, dut, notes)
    detail = {
        "scores": " worst |difference| %.2e (tol %.0e; scores up to %.3f)"
                  % (worst_score_error(ref, dut), TOL_SCORE,
                     max(x for p in ref["prompts"] for row in p["scores"] for x in row)),
        "depth": " depth_fraction %.3f, per prompt %s" % (ref["depth_summary"]["value"],
                                                          [p["depth_value"] for p in ref["prompts"]]),
        "model_correct": " %s" % [p["model_correct"] for p in ref["prompts"]],
    }
    report("%s analyze (%s vs cpu)" % (arch, want_backend), diffs, detail)
    for n in notes:
        print("NOTE: %s analyze: %s" % (arch, n))

# Negative controls. 1) Another run's record in place of the DUT's: the numbers must be reported, not only the names.
if len(runs) >= 2:
    a, b = runs[0], runs[1]
    other = copy.deepcopy(rec[b, "ref", "result"])
    expect_failure("the cpu record of %s compared with the cpu record of %s" % (a, b),
                   compare_result(rec[a, "ref", "result"], other, "cpu"), "losses")
    expect_failure("the cpu analysis of %s compared with the cpu analysis of %s" % (a, b),
                   compare_analysis(rec[a, "ref", "analysis"], rec[b, "ref", "analysis"], []), "scores")
    expect_failure("the cpu predictions of %s compared with the cpu predictions of %s" % (a, b),
                   predictions_check.compare(rec[a, "ref", "predictions"], rec[b, "ref", "predictions"], TOL_LOSS),
                   "losses")
# 2) A DUT record changed just past each tolerance.
arch = runs[-1]
ref, dut = rec[arch, "ref", "result"], rec[arch, "dut", "result"]
m = copy.deepcopy(dut)
mod = next(iter(m["evaluation"]["sets"]["extrapolate"]["modules"].values()))
mod["mean_answer_loss"] *= 1 + 3 * TOL_LOSS
expect_failure("%s: one module's mean_answer_loss moved by 3x the tolerance" % arch, compare_result(ref, m, want_backend),
               "losses")
m = copy.deepcopy(dut)
mod = next(iter(m["evaluation"]["sets"]["interpolate"]["modules"].values()))
mod["correct"] += 1
expect_failure("%s: one module's correct count raised by 1" % arch, compare_result(ref, m, want_backend), "verdicts")
m = copy.deepcopy(dut)
m["backend"] = "cpu" if want_backend != "cpu" else "cuda"
expect_failure("%s: the dut record naming backend %s" % (arch, m["backend"]), compare_result(ref, m, want_backend),
               "backend")
aref, adut = rec[arch, "ref", "analysis"], copy.deepcopy(rec[arch, "dut", "analysis"])
adut["prompts"][0]["scores"][-1][-1] += 3 * TOL_SCORE
expect_failure("%s: one erasure score moved by 3x the tolerance" % arch, compare_analysis(aref, adut, []), "scores")
pref = rec[arch, "ref", "predictions"]
for label, check, alter in (
        ("one answer_loss moved by 3x the tolerance", "losses",
         lambda ls: ls[-1].update(answer_loss=ls[-1]["answer_loss"] * (1 + 3 * TOL_LOSS))),
        ("one verdict flipped", "verdicts", lambda ls: ls[0].update(correct=not ls[0]["correct"])),
        ("one predicted string changed", "predicted", lambda ls: ls[1].update(predicted=ls[1]["predicted"] + "1"))):
    pdut = copy.deepcopy(rec[arch, "dut", "predictions"])
    alter(pdut)
    expect_failure("%s: a dut predictions.jsonl with %s" % (arch, label),
                   predictions_check.compare(pref, pdut, TOL_LOSS), check)

print("%d checks ok, %d failed" % (oks, len(fails)))
sys.exit(1 if fails else 0)
EOF
[ "$rc" = 0 ] || fail "the $be evaluate/analyze records differ from the cpu backend's (above)"
echo "cuda evaluate: all checks passed on the $be backend ($dut_bin) against cpu (bin/), $((SECONDS - t_start)) s"
