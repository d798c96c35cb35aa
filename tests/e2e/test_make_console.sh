#!/usr/bin/env bash
# make's console and what it knows about a run, mostly with dry runs (seconds, no training):
#  - make help names every variable; an unknown EXPERIMENT lists the experiments and stops before doing anything;
#  - on a scratch experiment whose outputs are faked (files touched in pipeline order, so make sees them up to date):
#    a second make reproduce says everything is up to date; BACKEND, SET and NPROC changes redo train, evaluate and
#    analyze of every run (make -n lists them, and writes nothing); the same SET in another order changes nothing;
#  - the plan of make reproduce (make reproduce-plan: make's dry run of the stages, estimated by bin/runs --stages)
#    lists exactly the stages make must run, and make -n exactly their commands, in a dozen situations; make -n
#    writes no plan; the estimates come from the configs and measured throughputs; the stage counter
#    (mk/reproduce_stage.sh) is right also when the stages start at once as under make -j;
#  - CODE_VERSION ignores edits under experiments/ and reports/baselines/ but not elsewhere (in a scratch clone);
#  - the build is quiet (a "CC file" line) and V=1 shows the compiler command;
#  - an interrupted bin/train prints the exact command that continues it: the make command the user typed
#    (REPRO_COMMAND) or its own command line with --auto-resume (which, pasted, continues the run).
source "$(dirname "$0")/train_common.sh" # set -euo pipefail, cd to the root, $tmp, fail, train_data, train_config
# make as a user types it: not the flags or variables of a make that runs this test (make test V=1 would pass V=1).
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory "$@"; }

# ---- make help, unknown experiment ----
help=$(mk help) || fail "make help failed"
for v in EXPERIMENT BACKEND RUNS RUN SEEDS NPROC SET RESUME THREADS SOURCE EVAL_FLAGS ANALYZE_FLAGS V; do
  grep -q "^  $v=" <<<"$help" || fail "make help does not list $v"
done
rc=0; out=$(mk reproduce EXPERIMENT=no_such_experiment 2>&1) || rc=$?
[ $rc != 0 ] || fail "make reproduce EXPERIMENT=no_such_experiment exited 0"
for d in experiments/*/data.json; do
  e=${d#experiments/}; e=${e%/data.json}
  grep -q "experiments are:.* $e\b" <<<"$out" || { echo "$out"; fail "the unknown experiment's error does not list $e"; }
done
[ ! -e data/no_such_experiment ] && [ ! -e runs/no_such_experiment ] || fail "an unknown experiment created files"
echo "ok: make help lists every variable; an unknown EXPERIMENT lists the experiments (exit $rc)"

# ---- a scratch experiment with faked, up-to-date outputs ----
exp=zz_make_console_$$
runs="dense_qa moeut_qa"
cleanup_exp() { rm -rf "experiments/$exp" "data/$exp" "runs/$exp" "reports/$exp" "build/reproduce/$exp"; }
trap 'cleanup_exp; rm -rf "$tmp"' EXIT
mkdir -p "experiments/$exp"
cp experiments/ci/data.json experiments/ci/dense_qa.json experiments/ci/moeut_qa.json "experiments/$exp/"
# touch_later FILE...: touches FILEs in a later clock tick than the files touched just before. The kernel stamps
# file times from a coarse clock (a few ms per tick), so two touches in a row often get the same time, and make
# takes a prerequisite of the same time as its target as not newer.
touch_later() { sleep 0.02; touch "$@"; }
fake_outputs() { # every output of the chain, touched in the order make would write them
  mkdir -p "data/$exp/raw" "reports/$exp"
  echo "--config experiments/$exp/data.json" >"data/$exp/fetch.args"
  touch "data/$exp/raw/fetch.stamp" "data/$exp/raw/manifest.json" "data/$exp/tokenize_manifest.json"
  for r in $runs; do
    mkdir -p "runs/$exp/$r"
    echo "backend=cpu nproc=1 set=" >"runs/$exp/$r/train.inputs"
    touch "runs/$exp/$r/train_summary.json" "runs/$exp/$r/result.json" "runs/$exp/$r/predictions.jsonl" \
      "runs/$exp/$r/analysis.json"
  done
  touch "reports/$exp/report.html" "reports/$exp/runs.csv"
}
mk all >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "make all"; } # bin/ current: older than the fakes
fake_outputs
# stages_of LOG: "stage target" per stage command make printed (train: its --config; others: their --run or first arg)
stages_of() { sed -E 's|^mpirun [^/]* bin/|bin/|' "$1" | grep -E '^bin/(fetch|tokenize|train|evaluate|analyze|report) ' |
  awk '{print $1, $3}' || true; }
dry() { # dry NAME [VAR=VALUE...]: make -n reproduce into $tmp/NAME.log
  local name=$1; shift
  mk -n reproduce EXPERIMENT="$exp" RUNS="$runs" "$@" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "make -n $*"; }
}
stamps() { cat "runs/$exp/dense_qa/train.inputs" "runs/$exp/moeut_qa/train.inputs"; }

dry same
[ -z "$(stages_of "$tmp/same.log")" ] || { stages_of "$tmp/same.log"; fail "up-to-date outputs: make -n would run stages"; }
mk reproduce EXPERIMENT="$exp" RUNS="$runs" >"$tmp/again.log" 2>&1 || { cat "$tmp/again.log"; fail "make reproduce"; }
grep -q "^reproduce: everything is up to date for EXPERIMENT=$exp" "$tmp/again.log" ||
  { cat "$tmp/again.log"; fail "an up-to-date make reproduce does not say so"; }
grep -q "compare skipped" "$tmp/again.log" || { cat "$tmp/again.log"; fail "an up-to-date make reproduce did not compare"; }
[ -z "$(stages_of "$tmp/again.log")" ] || fail "an up-to-date make reproduce ran a stage"
echo "ok: with nothing to do, make reproduce says everything is up to date and still compares"

# every_run_redone LOG WHAT: train, evaluate and analyze of both runs and the report, no fetch or tokenize
every_run_redone() {
  local plan
  plan=$(stages_of "$1")
  for r in $runs; do
    grep -q "^bin/train experiments/$exp/$r.json" <<<"$plan" || { echo "$plan"; fail "$2: $r not retrained"; }
    grep -q "^bin/evaluate runs/$exp/$r\$" <<<"$plan" || { echo "$plan"; fail "$2: $r not re-evaluated"; }
    grep -q "^bin/analyze runs/$exp/$r\$" <<<"$plan" || { echo "$plan"; fail "$2: $r not re-analyzed"; }
  done
  grep -q '^bin/report' <<<"$plan" || fail "$2: report not regenerated"
  if grep -q -E <<<"$plan" '^bin/(fetch|tokenize)'; then fail "$2: data would be rebuilt"; fi
}
before=$(stamps)
dry cuda BACKEND=cuda
every_run_redone "$tmp/cuda.log" "BACKEND=cuda"
grep -q -- '^bin/evaluate .*--backend cuda' "$tmp/cuda.log" || fail "BACKEND=cuda: evaluate not given --backend cuda"
grep -q -- '^bin/analyze .*--backend cuda' "$tmp/cuda.log" || fail "BACKEND=cuda: analyze not given --backend cuda"
dry set SET="train.lr=0.001 train.precision=bf16"
every_run_redone "$tmp/set.log" "SET"
for b in train evaluate analyze; do
  grep -q -- "^bin/$b .*--set 'train.lr=0.001' --set 'train.precision=bf16'" "$tmp/set.log" ||
    { grep "^bin/$b" "$tmp/set.log"; fail "SET: bin/$b not given the --set flags"; }
done
dry nproc NPROC=2
every_run_redone "$tmp/nproc.log" "NPROC=2"
grep -q '^mpirun -np 2 .*bin/train ' "$tmp/nproc.log" || fail "NPROC=2: train not started by mpirun -np 2"
[ "$(stamps)" = "$before" ] || fail "make -n rewrote a stamp"
echo "ok: BACKEND, SET and NPROC changes redo train, evaluate and analyze of every run (make -n lists them, writes nothing)"

# A real stamp rewrite: only the runs whose stamp changed are redone, and a reordered SET is the same stamp.
mk EXPERIMENT="$exp" RUNS="$runs" "runs/$exp/dense_qa/train.inputs" SET="train.lr=0.001 train.warmup=2" >/dev/null
grep -qx 'backend=cpu nproc=1 set=train.lr=0.001,train.warmup=2' "runs/$exp/dense_qa/train.inputs" ||
  fail "stamp: $(cat "runs/$exp/dense_qa/train.inputs")"
touch "runs/$exp/dense_qa/"{train_summary.json,result.json,predictions.jsonl,analysis.json} "reports/$exp/report.html" "reports/$exp/runs.csv"
dry reordered SET="train.warmup=2 train.lr=0.001" RUNS=dense_qa
[ -z "$(stages_of "$tmp/reordered.log")" ] || { stages_of "$tmp/reordered.log"; fail "a reordered SET redid a stage"; }
dry dropped RUNS="$runs"
plan=$(stages_of "$tmp/dropped.log")
[ "$(grep -c '^bin/train' <<<"$plan")" = 1 ] && grep -q "^bin/train experiments/$exp/dense_qa.json" <<<"$plan" ||
  { echo "$plan"; fail "dropping SET should retrain dense_qa only"; }
echo "ok: a reordered SET is the same stamp; dropping it retrains only the run it was given to"

# A long SET is the same stamp too. GNU make 4.3's $(file <F), expanded inside a function's argument, kept the
# file's trailing newline for some lengths (stamps of about 200-500 bytes), so such a stamp never matched its own text
# and every make call retrained the run (mk/gpu/run.sh small passes ten keys).
# (Real keys with long spellings of valid values: make refuses a SET that the run config does not accept.)
valid_keys=(train.lr=0.00100000000000 train.warmup=00000000002 train.weight_decay=0.010000000000 \
  train.min_lr_multiplier=0.100000000 train.grad_clip=0.25000000000 train.adam_beta1=0.90000000000 \
  train.adam_beta2=0.99900000000 train.adam_eps=1.0000000e-08 train.log_every=000000000005 \
  train.evaluate_every=00000000010 train.evaluate_examples=00000050 train.checkpoint_every=00000000 \
  evaluate.max_examples_per_set=200 evaluate.greedy_check_examples=10 analyze.enabled=true train.steps=0000040)
for n in 4 6 8 10 12 16; do
  long="${valid_keys[*]:0:$n}"
  mk EXPERIMENT="$exp" RUNS=dense_qa "runs/$exp/dense_qa/train.inputs" SET="$long" >/dev/null
  touch "runs/$exp/dense_qa/"{train_summary.json,result.json,predictions.jsonl,analysis.json} "reports/$exp/report.html" "reports/$exp/runs.csv"
  dry long SET="$long" RUNS=dense_qa
  [ -z "$(stages_of "$tmp/long.log")" ] ||
    { stages_of "$tmp/long.log"; fail "a SET of $n keys ($(wc -c <"runs/$exp/dense_qa/train.inputs")-byte stamp) redid a stage"; }
done
mk EXPERIMENT="$exp" RUNS=dense_qa "runs/$exp/dense_qa/train.inputs" SET="train.lr=0.001 train.warmup=2" >/dev/null
touch "runs/$exp/dense_qa/"{train_summary.json,result.json,predictions.jsonl,analysis.json} "reports/$exp/report.html" "reports/$exp/runs.csv"
echo "ok: a SET of 4 to 16 keys (stamps of 100-450 bytes) matches its own stamp"

# ---- the plan and the stage counter ----
# The plan's stage list is make's own dry run of the stages (mk/reproduce.mk: the lines "mk/reproduce_stage.sh STAGE
# [RUN]" that `make -n reproduce-stages` prints). Each situation below states the stages make must run: make
# reproduce-plan's plan file must list exactly those, and `make -n reproduce` exactly their commands (one bin/ command
# per stage, so a stage line that named another stage or run than its recipe's command fails too). With
# predictions.jsonl alone missing, make -n once listed evaluate without the report that a real make then ran (make
# takes evaluate's other output as remade only when the recipe really runs): report.html depends on the predictions
# too now, and test_reproduce_ci.sh runs that case for real.
plan_dir=build/reproduce/$exp
plan() { # plan NAME [VAR=VALUE...]: make reproduce-plan's line into $tmp/NAME.out (its plan in $plan_dir/plan)
  local name=$1; shift
  mk reproduce-plan EXPERIMENT="$exp" RUNS="$runs" "$@" >"$tmp/$name.out" 2>&1 || { cat "$tmp/$name.out"; fail "make reproduce-plan $*"; }
}
planned() { awk '{ print $1, $2 }' "$plan_dir/plan" | sort; }
commands_of() { # commands_of LOG: "STAGE RUN" of each stage command in a make -n log (RUN "-" for a stage of no run)
  sed -E 's|^mpirun [^/]* bin/|bin/|' "$1" | awk -v runs="runs/$exp/" '
    function run_of(flag,   i, d) {
      for (i = 2; i < NF; i++) if ($i == flag) { d = $(i + 1); sub("^" runs, "", d); sub("/init.safetensors$", "", d); return d }
      return "?"
    }
    $1 ~ /^bin\/(fetch|tokenize|report)$/ { print substr($1, 5), "-" }
    $1 ~ /^bin\/(train|upcycle)$/ { print substr($1, 5), run_of("--out") }
    $1 ~ /^bin\/(evaluate|analyze)$/ { print substr($1, 5), run_of("--run") }' | sort
}
state_of() { find "$@" -printf '%p %s %T@\n' 2>/dev/null | sort; } # names, sizes, times
every_run="$(for r in $runs; do printf '%s\n' "train $r" "evaluate $r" "analyze $r"; done)
report -"
checked=
agrees() { # agrees WHAT EXPECTED [VAR=VALUE...]: the plan lists EXPECTED ("STAGE RUN" lines), make -n their commands
  local what=$1 want p d
  want=$(printf '%s\n' "$2" | grep . | sort || true); shift 2
  plan agree "$@"
  p=$(planned)
  [ "$p" = "$want" ] || { echo "plan:"; echo "$p"; echo "expected:"; echo "$want"; fail "$what: the plan"; }
  dry agree_dry "$@"
  d=$(commands_of "$tmp/agree_dry.log")
  [ "$d" = "$want" ] || { echo "make -n reproduce:"; echo "$d"; echo "expected:"; echo "$want"; fail "$what: make -n"; }
  checked+="${checked:+, }$what: $(grep -c . "$plan_dir/plan" || true)"
}
older() { touch -d "@$(( $(stat -c %Y bin/analyze) - 3600 ))" "$@"; } # an hour before bin/analyze was built
fake_outputs
agrees "up to date" ""
grep -q "^reproduce: everything is up to date for EXPERIMENT=$exp (cpu)" "$tmp/agree.out" || { cat "$tmp/agree.out"; fail "up to date"; }
agrees "BACKEND=cuda" "$every_run" BACKEND=cuda
agrees SET "$every_run" SET=train.lr=0.001
agrees NPROC=2 "$every_run" NPROC=2
agrees RESUME=0 "$every_run" RESUME=0
# make -n reproduce prints the plan's command and writes no plan (nor anything else under build/reproduce)
before=$(state_of "$plan_dir")
dry plan_dry SET=train.lr=0.001
[ "$before" = "$(state_of "$plan_dir")" ] || fail "make -n reproduce wrote into $plan_dir"
grep -q -- "--stages '$plan_dir' --stage-list '$plan_dir'/stage-list" "$tmp/plan_dry.log" ||
  { cat "$tmp/plan_dry.log"; fail "make -n reproduce does not print the plan's command"; }
touch_later "experiments/$exp/dense_qa.json"
agrees "a config edited" "train dense_qa
evaluate dense_qa
analyze dense_qa
report -"
fake_outputs; rm "runs/$exp/moeut_qa/predictions.jsonl"
agrees "predictions deleted" "evaluate moeut_qa
report -"
fake_outputs; rm "runs/$exp/moeut_qa/result.json"
agrees "a result deleted" "evaluate moeut_qa
report -"
fake_outputs; touch_later "runs/$exp/dense_qa/result.json"
agrees "a newer result" "report -"
fake_outputs; rm "runs/$exp/dense_qa/train_summary.json"
agrees "a summary deleted" "train dense_qa
evaluate dense_qa
analyze dense_qa
report -"
fake_outputs; older "runs/$exp/dense_qa/analysis.json" "runs/$exp/moeut_qa/analysis.json" "reports/$exp/report.html"
agrees "bin/analyze newer" "analyze dense_qa
analyze moeut_qa
report -"
fake_outputs; touch_later "data/$exp/raw/manifest.json"
agrees "new raw data" "tokenize -
$every_run"
fake_outputs; rm "data/$exp/raw/fetch.stamp"
agrees "fetch stamp deleted" "fetch -"
fake_outputs; touch_later "experiments/$exp/data.json"
agrees "data.json edited" "fetch -
tokenize -
$every_run"
fake_outputs; echo "backend=cpu nproc=1 set=train.lr=2" >"runs/$exp/moeut_qa/train.inputs"
agrees "a stamp of other inputs" "train moeut_qa
evaluate moeut_qa
analyze moeut_qa
report -"
echo "ok: the plan and make -n list exactly the stages make must run ($checked stages)"

fake_outputs
plan plan BACKEND=cuda
grep -q "^reproduce: EXPERIMENT=$exp on cuda: 7 stages to run (2 train, 2 evaluate, 2 analyze, report), about .* in all (an estimate; training at [0-9]* tokens/s (default))" \
  "$tmp/plan.out" || { cat "$tmp/plan.out"; fail "plan summary"; }
line=$(REPRO_PLAN=$plan_dir REPRO_EXPERIMENT=$exp REPRO_BACKEND=cuda mk/reproduce_stage.sh train moeut_qa)
grep -q "^\[1/7\] train moeut_qa ($exp, cuda): about .* left in all (estimate)$" <<<"$line" || fail "stage line: $line"
for i in 2 3 4 5 6 7; do # the other six at once, as make -j starts them
  REPRO_PLAN=$plan_dir REPRO_EXPERIMENT=$exp mk/reproduce_stage.sh evaluate dense_qa >"$tmp/stage$i.out" &
done
wait
counts=$(sed -E 's/^\[([0-9]+)\/7\].*/\1/' "$tmp"/stage[2-7].out | sort -n | paste -sd' ')
[ "$counts" = "2 3 4 5 6 7" ] || fail "concurrent stages were counted $counts, expected 2 3 4 5 6 7"
# Measured throughput beats the default: a finished run on this backend gives its tokens/s.
printf '{"steps": 40, "tokens": 81920, "tokens_per_s": 1234.5, "backend": "cuda"}\n' >"runs/$exp/dense_qa/train_summary.json"
plan plan2 BACKEND=cuda
grep -q "training at 1234 tokens/s (dense_qa's last run); 1234 tokens/s (runs/$exp on cuda)" "$tmp/plan2.out" ||
  { cat "$tmp/plan2.out"; fail "the estimate does not use the measured throughput"; }
# An interrupted run (a checkpoint, no summary): its own throughput so far, and only the tokens still to train
# (40 x 8 x 256 = 81920 in all, 40960 done at 1024 tokens/s: 40 s left).
rm "runs/$exp/moeut_qa/train_summary.json"
printf '{"step": 20, "tokens": 40960, "wall_time_s": "40.0", "backend": "cuda"}\n' >"runs/$exp/moeut_qa/state.json"
plan plan3 BACKEND=cuda
grep -qx "train moeut_qa 40 1024 tokens/s (moeut_qa's interrupted run)" "$plan_dir/plan" ||
  { cat "$plan_dir/plan"; fail "the estimate of an interrupted run"; }
# RESUME=0 starts it over: all 81920 tokens at its 1024 tokens/s.
plan plan3b BACKEND=cuda RESUME=0
grep -qx "train moeut_qa 80 1024 tokens/s (moeut_qa's interrupted run)" "$plan_dir/plan" ||
  { cat "$plan_dir/plan"; fail "the estimate of an interrupted run started over (RESUME=0)"; }
# After only a few seconds the start-up dominates: the experiment's measured mean is used instead (20480 tokens left).
printf '{"step": 2, "tokens": 61440, "wall_time_s": "5.0", "backend": "cuda"}\n' >"runs/$exp/moeut_qa/state.json"
plan plan4 BACKEND=cuda
grep -qx "train moeut_qa 17 1234 tokens/s (runs/$exp on cuda)" "$plan_dir/plan" ||
  { cat "$plan_dir/plan"; fail "the estimate of a briefly interrupted run"; }
# A SET of the run's size changes the estimate (train.steps=80: 163840 tokens at dense_qa's 1234.5 tokens/s).
plan plan5 BACKEND=cuda SET=train.steps=80
grep -qx "train dense_qa 133 1234 tokens/s (dense_qa's last run)" "$plan_dir/plan" ||
  { cat "$plan_dir/plan"; fail "the estimate of a run with SET=train.steps=80"; }
# A record that is not JSON leaves its estimate to the next source (a warning-free plan, not a failure).
echo "not json" >"runs/$exp/moeut_qa/state.json"
plan plan6 BACKEND=cuda
grep -qx "train moeut_qa 66 1234 tokens/s (runs/$exp on cuda)" "$plan_dir/plan" ||
  { cat "$plan_dir/plan"; fail "the estimate of a run with an unreadable state.json"; }
echo "ok: the plan estimates from the configs and the measured throughput; the counter is right under concurrency"
cleanup_exp

# ---- the time left, corrected by the measured rate ----
# A plan whose estimates are 3x too short (64 s estimated, 192 s true): each stage starts when the ones before it
# would have finished (a fixed clock instead of waiting). Until the stages started before carry
# 20% of the estimate the line says "estimate"; from then on the time left is the true one, "measured".
eta=$tmp/eta
mkdir -p "$eta"
printf '%s\n' "fetch - 2 default" "train a 20 x" "train b 20 x" "train c 20 x" "report - 2 default" >"$eta/plan"
echo 1000 >"$eta/plan_start"
stage_at() { # stage_at SECONDS STAGE [RUN]: the stage line SECONDS after the plan started (REPRO_NOW: its clock)
  local at=$1; shift
  REPRO_NOW=$(awk -v at="$at" 'BEGIN { printf "%.3f", 1000 + at }') REPRO_PLAN=$eta REPRO_EXPERIMENT=ci REPRO_BACKEND=cpu mk/reproduce_stage.sh "$@"
}
expect_line() { [ "$1" = "$2" ] || fail "time left: got '$1', expected '$2'"; }
: >"$eta/started"
expect_line "$(stage_at 0 fetch)" "[1/5] fetch (ci, cpu): about 64 s left in all (estimate)"
expect_line "$(stage_at 6 train a)" "[2/5] train a (ci, cpu): about 62 s left in all (estimate)" # 2 s of 64 seen
expect_line "$(stage_at 66 train b)" "[3/5] train b (ci, cpu): about 2 min left in all (measured, 3.0x the estimate)"
expect_line "$(stage_at 126 train c)" "[4/5] train c (ci, cpu): about 66 s left in all (measured, 3.0x the estimate)"
expect_line "$(stage_at 186 report)" "[5/5] report (ci, cpu): about 6 s left in all (measured, 3.0x the estimate)"
# The order does not matter (make -j): c started before b gives the same time left.
: >"$eta/started"
stage_at 0 fetch >/dev/null; stage_at 6 train a >/dev/null
expect_line "$(stage_at 66 train c)" "[3/5] train c (ci, cpu): about 2 min left in all (measured, 3.0x the estimate)"
expect_line "$(stage_at 126 train b)" "[4/5] train b (ci, cpu): about 66 s left in all (measured, 3.0x the estimate)"
# Faster than estimated (a third of the time): the time left shrinks the same way, once 10 s have gone by.
: >"$eta/started"
stage_at 0 fetch >/dev/null; stage_at 0.67 train a >/dev/null
expect_line "$(stage_at 7.33 train b)" "[3/5] train b (ci, cpu): about 42 s left in all (estimate)" # only 7 s seen
expect_line "$(stage_at 14 train c)" "[4/5] train c (ci, cpu): about 7 s left in all (measured, 0.3x the estimate)"
echo "ok: the time left follows the measured rate once enough has run (3x too slow and 3x too fast estimates)"

# ---- CODE_VERSION ignores experiments/ and reports/baselines/ (in a scratch clone at this commit) ----
clone=$tmp/clone
git clone -q --no-checkout "$(git rev-parse --show-toplevel)" "$clone"
git -C "$clone" checkout -q "$(git rev-parse HEAD)"
# This checkout's make files (possibly uncommitted) become the clone's commit, so the clone starts clean.
cp Makefile "$clone/"; cp -r mk/. "$clone/mk/"
git -C "$clone" add -A Makefile mk
git -C "$clone" -c user.name=test -c user.email=test@example.invalid commit -q -m "make files under test" --allow-empty
version() { mk -s -C "$clone" code-version; }
v0=$(version)
case "$v0" in *-dirty | unknown | "") fail "the clean clone's version is '$v0'" ;; esac
echo " " >>"$clone/experiments/ci/dense_qa.json"
echo " " >>"$clone/reports/baselines/ci/tolerances.json"
git -C "$clone" diff --quiet && fail "git does not see the edits under experiments/ and reports/baselines/"
[ "$(version)" = "$v0" ] || fail "editing experiments/ or reports/baselines/ changed the version to $(version)"
grep -q "\"$v0\"" "$clone/build/code_version.h" || fail "build/code_version.h: $(cat "$clone/build/code_version.h")"
echo "/* edit */" >>"$clone/pipeline/base/log.c"
[ "$(version)" = "$v0-dirty" ] || fail "editing pipeline/base/log.c gave version $(version), expected $v0-dirty"
echo "ok: CODE_VERSION $v0 stays clean for edits under experiments/ and reports/baselines/, and is -dirty otherwise"

# ---- quiet build, V=1 ----
unit_sources=(tests/unit/test_*.c)
src=${unit_sources[0]}
obj=build/obj/${src%.c}.o
rm -f "$obj"
mk "$obj" >"$tmp/quiet.log" 2>&1 || { cat "$tmp/quiet.log"; fail "make $obj"; }
grep -q "^  CC  *$src\$" "$tmp/quiet.log" || { cat "$tmp/quiet.log"; fail "quiet make: no 'CC $src' line"; }
if grep -q -- '-MMD' "$tmp/quiet.log"; then cat "$tmp/quiet.log"; fail "quiet make printed the compiler command"; fi
rm -f "$obj"
mk V=1 "$obj" >"$tmp/verbose.log" 2>&1 || { cat "$tmp/verbose.log"; fail "make V=1 $obj"; }
grep -q -- "-MMD -MP -c $src -o $obj" "$tmp/verbose.log" || { cat "$tmp/verbose.log"; fail "make V=1: no compiler command"; }
echo "ok: the build is quiet ($(head -1 "$tmp/quiet.log" | sed 's/^ *//')); V=1 shows the compiler command"

# ---- bin/train interrupted: the exact command that continues ----
train_data "$tmp/data"
train_config "$tmp/run.json" dense qa 400
interrupted_message() { # interrupted_message DIR ENV... -- COMMAND...: SIGINT after 3 logged steps; train's message
  local dir=$1 rc=0 envs=() n0=0; shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  [ -f "$dir/metrics.jsonl" ] && n0=$(wc -l <"$dir/metrics.jsonl") # a continued run: 3 more steps
  env "${envs[@]}" "$@" >"$dir.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 600); do
    [ -f "$dir/metrics.jsonl" ] && [ "$(wc -l <"$dir/metrics.jsonl")" -ge $((n0 + 3)) ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -INT "$pid" 2>/dev/null || true
  wait "$pid" || rc=$?
  [ "$rc" = 130 ] || { cat "$dir.log"; fail "SIGINT: exit status $rc, expected 130"; }
  grep 'interrupted by SIGINT' "$dir.log" || { cat "$dir.log"; fail "no interrupt message"; }
}
train_args=(--config "$tmp/run.json" --data "$tmp/data" --threads 1)
# Under make reproduce (REPRO_COMMAND: the make command line as the user typed it) with RESUME=auto: that command.
typed='make reproduce EXPERIMENT=ci SET="train.lr=1e-3 train.warmup=2"'
msg=$(interrupted_message "$tmp/under_make" MAKELEVEL=1 "REPRO_COMMAND=$typed" -- \
  bin/train "${train_args[@]}" --out "$tmp/under_make" --auto-resume)
grep -qF "checkpoint saved at step" <<<"$msg" || fail "under make: $msg"
grep -qF "; rerun \`$typed\` to continue from the checkpoint" <<<"$msg" || fail "under make: $msg"
# RESUME=0 (no resume flag): the same command would start over, so its RESUME=0 becomes RESUME=auto.
msg=$(interrupted_message "$tmp/under_make_resume0" MAKELEVEL=1 "REPRO_COMMAND=make train EXPERIMENT=ci RESUME=0" -- \
  bin/train "${train_args[@]}" --out "$tmp/under_make_resume0")
grep -qF "; rerun \`make train EXPERIMENT=ci RESUME=auto\` to continue from the checkpoint (RESUME=0 starts over)" <<<"$msg" ||
  fail "under make with RESUME=0: $msg"
# Alone: its own command line with --auto-resume, quoted for the shell (the run directory has a space in its name),
# and pasting that command continues the checkpoint.
alone="$tmp/alone run"
msg=$(interrupted_message "$alone" -u MAKELEVEL -u REPRO_COMMAND -- bin/train "${train_args[@]}" --out "$alone")
step=$(echo "$msg" | sed -nE 's/.*checkpoint saved at step ([0-9]+) of 400.*/\1/p')
[ -n "$step" ] || fail "alone: $msg"
cmd=$(echo "$msg" | sed -nE 's/.*; continue with `(.*)`$/\1/p')
[ "$cmd" = "bin/train --config $tmp/run.json --data $tmp/data --threads 1 --out '$alone' --auto-resume" ] ||
  fail "alone: the continue command is '$cmd' (message: $msg)"
msg=$(interrupted_message "$tmp/alone run" -u MAKELEVEL -u REPRO_COMMAND -- bash -c "exec $cmd")
grep -q "resumed $alone at step $step of 400" "$alone.log" || { cat "$alone.log"; fail "the printed command did not continue"; }
grep -qF "; continue with \`$cmd\`" <<<"$msg" || fail "the continued run's own message: $msg"
echo "ok: an interrupted train prints the command that continues it (the make command as typed, or its own with --auto-resume), and that command continues"
