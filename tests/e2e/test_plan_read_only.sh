#!/usr/bin/env bash
# Planning is read-only (mk/reproduce.mk): `make -n ...`, `make -q ...`, `make reproduce-plan ...` and every refused command change
# nothing under data/, runs/ and reports/ (no file added, removed, renamed, rewritten or touched), in the situations
# of test_make_console.sh: a fresh experiment, finished runs, after a run config was edited (a real make would keep
# the old run aside), after the edit was reverted (a real make would bring it back), and for
# `reproduce-plan EXPERIMENT=cpu_arith` with no data. `make compare` (it reads the runs) is as read-only. A refused
# command prints its own error only, never an earlier command's; `make prune` leaves no report naming the runs it
# deleted.
# A scratch copy of experiment ci (two runs of 4 steps, 20 examples per set).
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
for b in runs fetch tokenize train evaluate report; do [ -x "bin/$b" ] || fail "bin/$b missing (run make first)"; done
exp=_read_only_$$
trap 'rm -rf "experiments/$exp" "data/$exp" "runs/$exp" "reports/$exp" build/plan/$exp-* build/reproduce/$exp' EXIT
mkdir -p "experiments/$exp"
cp experiments/ci/data.json experiments/ci/dense_qa.json experiments/ci/moeut_qa.json "experiments/$exp/"
small="train.steps=4 train.evaluate_every=0 evaluate.max_examples_per_set=20 analyze.enabled=false"
# make as a user types it (not the flags of a make that runs this test)
m() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory "$@" 2>&1; }
# Every path under the trees a command must leave alone, with its type, size, modification time and content hash.
tree_state() {
  local e=$1 d
  for d in "data/$e" "runs/$e" "reports/$e"; do
    [ -e "$d" ] || { echo "$d absent"; continue; }
    find "$d" -printf '%p %y %s %T@\n'
    find "$d" -type f -exec sha256sum {} + | awk '{ print $2, "sha256", $1 }'
  done | LC_ALL=C sort
}
# The refusals seen so far (a distinctive part of each message): a later command must print none of them.
seen_errors=()
checked=0
# read_only WHAT EXPECT MAKE-ARGS...: EXPECT ok or refused; the command changes nothing and prints no earlier refusal.
read_only() {
  local what=$1 expect=$2 rc=0 out before e
  shift 2
  before=$(tree_state "$exp")
  out=$(m "$@" EXPERIMENT="$exp") || rc=$?
  [ "$before" = "$(tree_state "$exp")" ] ||
    { echo "$out" | tail -20; diff <(echo "$before") <(tree_state "$exp") | head -20; fail "$what: make $* changed files"; }
  case $expect in
    ok) [ $rc = 0 ] || { echo "$out" | tail -20; fail "$what: make $* failed ($rc)"; } ;;
    question) [ $rc = 0 ] || [ $rc = 1 ] || { echo "$out" | tail -20; fail "$what: make $* exited $rc (make -q: 0 or 1)"; } ;;
    *) [ $rc != 0 ] || { echo "$out" | tail -20; fail "$what: make $* was not refused"; }
       grep -q -- "$expect" <<<"$out" || { echo "$out"; fail "$what: make $*: no refusal naming '$expect'"; } ;;
  esac
  for e in "${seen_errors[@]+"${seen_errors[@]}"}"; do
    [ "$e" = "$expect" ] && continue
    ! grep -q -- "$e" <<<"$out" || { echo "$out"; fail "$what: make $* printed an earlier command's error ('$e')"; }
  done
  ! grep -q '^runs: ' <<<"$out" || { echo "$out"; fail "$what: make $* moved a run (a 'runs:' line)"; }
  [ "$expect" = ok ] || [ "$expect" = question ] || seen_errors+=("$expect")
  checked=$((checked + 1))
  last_out=$out
}
# Everything planning may be asked in one situation.
probe() {
  local s=$1
  read_only "$s" ok -n reproduce SET="$small"
  read_only "$s" ok -n reproduce SET="$small" RESUME=0
  read_only "$s" ok -n train RUN=dense_qa SET="$small"
  read_only "$s" ok -n evaluate SET="$small"
  read_only "$s" ok -n report SET="$small"
  read_only "$s" ok -n prune
  read_only "$s" question -q reproduce SET="$small"
  read_only "$s" question -q evaluate RUN=dense_qa SET="$small"
  read_only "$s" ok reproduce-plan SET="$small"
  read_only "$s" ok reproduce-plan SET="$small" RUNS=dense_qa
  read_only "$s" ok -j2 reproduce-plan SET="$small" THREADS=1
  read_only "$s" ok reproduce-plan SET="$small" RESUME=0
  read_only "$s" ok reproduce-plan SET="$small" NPROC=2
  read_only "$s" ok compare SET="$small" COMPARE_CONFIG_CHANGE=note
  read_only "$s" "dense_qq.json: not found" evaluate RUN=dense_qq SET="$small"
  read_only "$s" "train.lr: expected a number" sweep RUNS=dense_qa SET="$small" SWEEP="train.lr=1e-3,fast"
  read_only "$s" "train.lrx: unknown key" reproduce SET="$small train.lrx=1"
  read_only "$s" "BACKEND='gpu': refused" reproduce SET="$small" BACKEND=gpu
  read_only "$s" "BACKEND='gpu': refused" reproduce-plan SET="$small" BACKEND=gpu
  read_only "$s" "NPROC=3" train SET="$small" NPROC=3
  read_only "$s" "RESUME='maybe': refused" train SET="$small" RESUME=maybe
  read_only "$s" "dense_qq.json: not found" reproduce-plan RUNS=dense_qq SET="$small"
  # the refusals again, in another order: each prints its own message only
  read_only "$s" "train.lrx: unknown key" evaluate RUN=dense_qa SET="$small train.lrx=1"
  read_only "$s" "dense_qq.json: not found" train RUN=dense_qq SET="$small"
  read_only "$s" ok reproduce-plan SET="$small"
}

# 1. A fresh experiment: nothing fetched, tokenized or trained.
probe fresh
grep -q "^reproduce: EXPERIMENT=$exp on cpu: .* stages to run (fetch, tokenize, 2 train, 2 evaluate, 2 analyze, report)" \
  <<<"$last_out" || { echo "$last_out"; fail "fresh: the plan"; }
# make's -jN and THREADS reach the estimate (read from MAKEFLAGS in the recipe): two runs train at once on 2 cores
if [ "$(nproc)" -ge 2 ]; then
  out=$(m -j2 reproduce-plan EXPERIMENT="$exp" SET="$small" THREADS=1) || { echo "$out"; fail "reproduce-plan -j2"; }
  grep -q "2 runs at once" <<<"$out" || { echo "$out"; fail "make -j2 THREADS=1: the estimate does not count 2 runs at once"; }
  out=$(m -j2 reproduce-plan EXPERIMENT="$exp" SET="$small") || { echo "$out"; fail "reproduce-plan -j2"; }
  ! grep -q "runs at once" <<<"$out" || { echo "$out"; fail "make -j2 (every core per run): the estimate counts runs at once"; }
fi
# a backend bin/runs does not know is refused while planning (make refuses it earlier still: user_values.mk)
rc=0; out=$(bin/runs --experiment "experiments/$exp" --runs dense_qa --stages "build/reproduce/$exp" \
  --stage-list "build/reproduce/$exp/stage-list" --backend gpu 2>&1) || rc=$?
[ $rc != 0 ] && grep -q "BACKEND=gpu (--backend): expected cpu or cuda" <<<"$out" || { echo "$out"; fail "bin/runs --backend gpu"; }
echo "ok: a fresh experiment: make -n, reproduce-plan and the refused commands wrote nothing"

# 2. Finished runs and their report.
out=$(m reproduce EXPERIMENT="$exp" SET="$small") || { echo "$out" | tail -20; fail "make reproduce"; }
probe finished
grep -q "^reproduce: everything is up to date for EXPERIMENT=$exp" <<<"$last_out" || { echo "$last_out"; fail "finished: the plan"; }
echo "ok: finished runs: make -n, reproduce-plan and the refused commands wrote nothing"

# 3. The run config edited: a real make would keep the finished dense_qa aside; planning moves nothing.
cp "experiments/$exp/dense_qa.json" "$exp.orig.json"
trap 'rm -rf "experiments/$exp" "data/$exp" "runs/$exp" "reports/$exp" build/plan/$exp-* build/reproduce/$exp "$exp.orig.json"' EXIT
sed -i 's/"lr": 0.002/"lr": 0.004/' "experiments/$exp/dense_qa.json"
grep -q '"lr": 0.004' "experiments/$exp/dense_qa.json" || fail "could not edit the config's lr"
probe edited
grep -q "^reproduce: EXPERIMENT=$exp on cpu: 4 stages to run (train, evaluate, analyze, report)" <<<"$last_out" ||
  { echo "$last_out"; fail "edited: the plan"; }
out=$(m evaluate EXPERIMENT="$exp" RUN=dense_qa SET="$small") || { echo "$out" | tail -20; fail "make evaluate after the edit"; }
kept=$(echo "$out" | sed -nE "s|^runs: runs/$exp/dense_qa holds another config \(train.lr 0.002 -> 0.004\): kept as runs/$exp/(dense_qa@[0-9a-f]{8})\$|\1|p")
[ -n "$kept" ] || { echo "$out"; fail "the real make after the edit did not keep the old run aside"; }
out=$(m report EXPERIMENT="$exp" SET="$small") || { echo "$out" | tail -20; fail "make report after the edit"; }
grep -q "$kept" "reports/$exp/report.md" || fail "the report does not name the kept run $kept"
echo "ok: after a config edit: planning wrote nothing; the real make kept the old run as $kept"

# 4. The edit reverted: a real make would bring the kept run back; planning moves nothing, and the plan foresees it.
cp "$exp.orig.json" "experiments/$exp/dense_qa.json"
probe reverted
# (the plan sees the run that will come back: its train finds it trained, a no-op of seconds)
grep -q "^reproduce: EXPERIMENT=$exp on cpu: 4 stages to run (train, evaluate, analyze, report), about [0-9]* s in all (an estimate; 1 train finds its run already trained and leaves it as is)" \
  <<<"$last_out" || { echo "$last_out"; fail "reverted: the plan does not foresee the kept run brought back"; }
out=$(m reproduce EXPERIMENT="$exp" SET="$small") || { echo "$out" | tail -20; fail "make reproduce after the revert"; }
grep -q "^runs: runs/$exp/$kept holds the wanted config: back as runs/$exp/dense_qa\$" <<<"$out" ||
  { echo "$out"; fail "the real make after the revert did not bring the kept run back"; }
grep -q "^train: runs/$exp/dense_qa already finished" <<<"$out" && ! grep -q "starting" <<<"$out" ||
  { echo "$out"; fail "the brought-back run was trained again"; }
echo "ok: after the revert: planning wrote nothing and foresaw the no-op; the real make brought the kept run back without training"

# 5. make prune: no report left naming the runs it deleted.
ls -d "runs/$exp/"*@* >/dev/null 2>&1 || fail "no kept run to prune"
deleted=$(cd "runs/$exp" && ls -d *@*)
out=$(m prune EXPERIMENT="$exp") || { echo "$out"; fail "make prune"; }
for d in $deleted; do
  [ ! -e "runs/$exp/$d" ] || fail "make prune left runs/$exp/$d"
  ! grep -rqs -- "$d" "reports/$exp" || fail "after make prune, $(grep -rls -- "$d" "reports/$exp") names the deleted $d"
  ! grep -q -- "$d" <<<"$(ls "reports/$exp" 2>/dev/null)" || fail "after make prune, reports/$exp holds a file named after $d"
done
[ -f "runs/$exp/dense_qa/result.json" ] || fail "make prune deleted the current run"
echo "ok: make prune deleted $(echo $deleted) and left no report naming them"

# 6. reproduce-plan of the real cpu_arith experiment, whatever data this checkout has: nothing written.
before=$(tree_state cpu_arith)
out=$(m reproduce-plan EXPERIMENT=cpu_arith) || { echo "$out"; fail "make reproduce-plan EXPERIMENT=cpu_arith"; }
[ "$before" = "$(tree_state cpu_arith)" ] || { diff <(echo "$before") <(tree_state cpu_arith) | head; fail "reproduce-plan EXPERIMENT=cpu_arith wrote files"; }
out=$(m -n reproduce EXPERIMENT=cpu_arith) || { echo "$out" | tail; fail "make -n reproduce EXPERIMENT=cpu_arith"; }
[ "$before" = "$(tree_state cpu_arith)" ] || { diff <(echo "$before") <(tree_state cpu_arith) | head; fail "make -n reproduce EXPERIMENT=cpu_arith wrote files"; }
echo "ok: reproduce-plan and make -n reproduce of EXPERIMENT=cpu_arith wrote nothing"
echo "PASS: $checked planning and refused commands in 4 situations changed nothing under data/ runs/ reports/"
