#!/usr/bin/env bash
# No command discards training (pipeline/plan/run_variants.h, stages/README.md "Variants"): a run trained with SET but
# not evaluated is kept aside when a later command asks for the default config, byte for byte, and the same SET again
# brings it back and evaluates it without training it again; a run stopped at a checkpoint is kept the same way.
# make reproduce-plan and a refused command (an unknown run) change nothing under data/, runs/, reports/, and print no
# earlier command's lines; make prune leaves no report naming the runs it deleted. The keep is a recipe (of an included
# makefile), not a move made while make reads its makefiles.
# RESUME=0 trains a run again, keeping the trained one aside (never deleted).
# Runs: a scratch copy of experiment ci, 6 steps.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
for b in runs train evaluate; do [ -x "bin/$b" ] || fail "bin/$b missing (run make first)"; done
exp=_keep_trained_$$
trap 'rm -rf "experiments/$exp" "data/$exp" "runs/$exp" "reports/$exp" build/plan/$exp-* build/reproduce/$exp' EXIT
mkdir -p "experiments/$exp"
cp experiments/ci/data.json experiments/ci/dense_qa.json "experiments/$exp/"
small="train.steps=6 train.checkpoint_every=3 train.evaluate_every=0 evaluate.max_examples_per_set=20 analyze.enabled=false"
m() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory "$@" EXPERIMENT=$exp 2>&1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
tree_state() { { find "data/$exp" "runs/$exp" "reports/$exp" -printf '%p %s %T@\n' 2>/dev/null || true; } | LC_ALL=C sort; }

# 1. Trained with SET, not evaluated; then a plain evaluate (the default config) keeps it aside, byte-identical.
out=$(m train RUN=dense_qa SET="$small train.lr=3e-3") || { echo "$out"; fail "make train SET=... train.lr=3e-3"; }
[ -f "runs/$exp/dense_qa/model.safetensors" ] && [ ! -e "runs/$exp/dense_qa/result.json" ] ||
  fail "after make train: expected a trained, not evaluated run"
weights=$(sha "runs/$exp/dense_qa/model.safetensors")

before=$(tree_state)
out=$(m reproduce-plan RUNS=dense_qa SET="$small") || { echo "$out"; fail "make reproduce-plan"; }
[ "$before" = "$(tree_state)" ] || { diff <(echo "$before") <(tree_state) | head; fail "make reproduce-plan changed files"; }
echo "ok: make reproduce-plan after a config change moved, wrote and deleted nothing"

# (--trace: make names each target it updates and why; the keep must be the recipe of the included keep makefile,
# printed after make read its makefiles, never a move made while it read them)
out=$(m --trace evaluate RUN=dense_qa SET="$small") || { echo "$out"; fail "make evaluate without train.lr"; }
[[ "$(grep -m1 -E "update target 'build/plan/$exp-keep.mk'|^runs: " <<<"$out")" == *"update target"* ]] ||
  { echo "$out" | head -20; fail "the run was moved before make ran the keep makefile's recipe (while reading makefiles?)"; }
kept=$(echo "$out" | sed -nE "s|^runs: runs/$exp/dense_qa holds another config \(train.lr 0.003 -> 0.002\): kept as runs/$exp/(dense_qa@[0-9a-f]{8})\$|\1|p")
[ -n "$kept" ] || { echo "$out"; fail "no 'kept as' line for the trained, not evaluated lr=3e-3 run"; }
[ "$(sha "runs/$exp/$kept/model.safetensors")" = "$weights" ] || fail "the kept weights differ from the trained ones"
[ -f "runs/$exp/dense_qa/result.json" ] || fail "the default run was not trained and evaluated"
[ "$(sha "runs/$exp/dense_qa/model.safetensors")" != "$weights" ] || fail "the default run has the lr=3e-3 weights"
echo "ok: make train SET=train.lr=3e-3, then make evaluate without it: the lr=3e-3 weights are kept byte-identical as runs/$exp/$kept"

# 2. The same SET again brings it back and evaluates it without training; the default run is kept in turn.
out=$(m evaluate RUN=dense_qa SET="$small train.lr=3e-3") || { echo "$out"; fail "make evaluate SET=... train.lr=3e-3"; }
grep -q "^runs: runs/$exp/$kept holds the wanted config: back as runs/$exp/dense_qa\$" <<<"$out" ||
  { echo "$out"; fail "the kept lr=3e-3 run was not brought back"; }
! grep -q '^bin/train ' <<<"$out" || { echo "$out"; fail "the lr=3e-3 run was trained again"; }
[ "$(sha "runs/$exp/dense_qa/model.safetensors")" = "$weights" ] || fail "the brought-back weights differ"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["config"]["train"]["lr"] == 0.003' \
  "runs/$exp/dense_qa/result.json" || fail "the evaluated run is not the lr=3e-3 one"
compgen -G "runs/$exp/dense_qa@*" >/dev/null || fail "the default run was not kept aside in turn"
echo "ok: the same SET again brings it back and evaluates it without training; the default run is kept in turn"

# 3. A run stopped at a checkpoint (state.json, no train_summary.json) is kept too.
rm -rf "runs/$exp"
out=$(m train RUN=dense_qa SET="$small train.lr=4e-3") || { echo "$out"; fail "make train lr=4e-3"; }
rm -f "runs/$exp/dense_qa/train_summary.json" # as an interrupted run leaves it: only the checkpoint
weights=$(sha "runs/$exp/dense_qa/model.safetensors")
out=$(m train RUN=dense_qa SET="$small") || { echo "$out"; fail "make train (default lr) after an interrupted run"; }
kept=$(echo "$out" | sed -nE "s|^runs: runs/$exp/dense_qa holds another config \(train.lr 0.004 -> 0.002\): kept as runs/$exp/(dense_qa@[0-9a-f]{8})\$|\1|p")
[ -n "$kept" ] && [ "$(sha "runs/$exp/$kept/model.safetensors")" = "$weights" ] ||
  { echo "$out"; fail "the run stopped at a checkpoint was not kept byte-identical"; }
echo "ok: a run stopped at its checkpoint is kept as runs/$exp/$kept when the config asked for changes"

# 4. A refused command (an unknown run) moves, writes and deletes nothing, and prints no earlier command's lines.
out=$(m report RUNS=dense_qa SET="$small") || { echo "$out"; fail "make report"; }
[ -f "reports/$exp/report.md" ] || fail "make report wrote no report.md"
before=$(tree_state)
rc=0; out=$(m evaluate RUN=dense_qq SET="$small") || rc=$?
[ $rc != 0 ] || { echo "$out"; fail "make evaluate RUN=dense_qq exited 0"; }
[ "$before" = "$(tree_state)" ] || { diff <(echo "$before") <(tree_state) | head; fail "a refused command changed files"; }
! grep -q '^runs: ' <<<"$out" || { echo "$out"; fail "a refused command printed a move (a stale keep log)"; }
grep -q 'dense_qq.json: not found' <<<"$out" || { echo "$out"; fail "no refusal line naming dense_qq"; }
echo "ok: a refused command (RUN=dense_qq) changed nothing under data/ runs/ reports/ and printed only its refusal"

# 5. make prune leaves no report naming the runs it deleted.
out=$(m prune) || { echo "$out"; fail "make prune"; }
! grep -rqs "dense_qa@" "reports/$exp" || fail "after make prune, reports/$exp still names a deleted run"
echo "ok: make prune removes the report that named the deleted runs"

# 6. RESUME=0 trains the asked run again from scratch; the trained one is kept aside first, byte-identical, and not
#    brought back by the next make. A second RESUME=0 would have to replace that copy: refused, nothing changed.
weights=$(sha "runs/$exp/dense_qa/model.safetensors")
out=$(m evaluate RUN=dense_qa SET="$small" RESUME=0) || { echo "$out"; fail "make evaluate RESUME=0"; }
kept=$(echo "$out" | sed -nE "s|^runs: runs/$exp/dense_qa holds a trained run \(RESUME=0 starts it over\): kept as runs/$exp/(dense_qa@[0-9a-f]{8})\$|\1|p")
[ -n "$kept" ] && [ "$(sha "runs/$exp/$kept/model.safetensors")" = "$weights" ] ||
  { echo "$out"; fail "RESUME=0: the trained run was not kept aside byte-identical"; }
grep -q "^bin/train .*--out runs/$exp/dense_qa " <<<"$out" && [ -f "runs/$exp/dense_qa/result.json" ] ||
  { echo "$out"; fail "RESUME=0: the run was not trained and evaluated again"; }
out=$(m evaluate RUN=dense_qa SET="$small") || { echo "$out"; fail "make evaluate after RESUME=0"; }
! grep -qE '^runs: |^bin/train ' <<<"$out" || { echo "$out"; fail "after RESUME=0 a plain make moved or trained a run"; }
before=$(tree_state)
rc=0; out=$(m evaluate RUN=dense_qa SET="$small" RESUME=0) || rc=$?
[ $rc != 0 ] && grep -q "already holds a run of the same config and seed" <<<"$out" ||
  { echo "$out"; fail "a second RESUME=0 was not refused (it would replace the kept copy)"; }
[ "$before" = "$(tree_state)" ] || { diff <(echo "$before") <(tree_state) | head; fail "the refused RESUME=0 changed files"; }
echo "ok: RESUME=0 kept the trained run as runs/$exp/$kept (byte-identical) and trained it again; a second one is refused, changing nothing"
