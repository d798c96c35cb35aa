#!/usr/bin/env bash
# No make variable, and no goal, becomes a command: every variable of make help (and the grammar table of
# mk/validate/user_values.mk, which must name each of them) is given every payload of a shell-injection matrix
# ($(...), backticks, ; | &, single and double quotes, a newline, a tab, spaces, and make's own $(shell ...)), under
# `make -n` and a real make of a goal that uses it. Each payload tries to run `mkmarker`, a program on PATH here that
# creates a marker file. For every cell:
#   - no marker appears (nothing ran), and nothing under data/, runs/, reports/ changed (names, sizes, times);
#   - a payload with a character outside the variable's grammar exits non-zero with the one refusal line naming the
#     variable ("VAR='...': refused: ..."); the few that a grammar admits (spaces in a list, e.g. RUNS) still run nothing.
# Also: EXPERIMENT=../experiments/ci is refused before anything is written; make train with a refused SWEEP fails with
# the plan's error even when every file it names is up to date.
source "$(dirname "$0")/train_common.sh" # set -euo pipefail, cd to the root, $tmp, fail
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PATH="$tmp/bin:$PATH" make --no-print-directory "$@"; }

mkdir -p "$tmp/bin"
marker=$tmp/MARKER
printf '#!/bin/sh\ntouch %s\n' "$marker" >"$tmp/bin/mkmarker"
chmod +x "$tmp/bin/mkmarker"

tree_state() { # names, sizes and modification times of everything under the pipeline's output directories
  { find data runs reports -printf '%p %s %T@\n' 2>/dev/null || true; } | LC_ALL=C sort
}

grammar_rows=$(make -s -f - <<'EOF'
include mk/validate/user_values.mk
all: ; @echo $(USER_VALUE_GRAMMAR)
EOF
)
declare -A grammar
for row in $grammar_rows; do grammar[${row%%:*}]=${row#*:}; done
[ ${#grammar[@]} -ge 30 ] || fail "found only ${#grammar[@]} rows in USER_VALUE_GRAMMAR: the extraction is broken"
help_vars=$(mk help | grep -oE '^  [A-Z][A-Z0-9_]*=' | tr -d ' =' | sort -u)
[ "$(wc -l <<<"$help_vars")" -ge 30 ] || fail "make help lists only $(wc -l <<<"$help_vars") variables"
for v in $help_vars; do
  [ -n "${grammar[$v]:-}" ] || fail "make help lists $v, but mk/validate/user_values.mk has no grammar for it"
done
echo "ok: every one of the $(wc -l <<<"$help_vars") variables of make help has a grammar (${#grammar[@]} rows)"

# A value the variable accepts, which the payload is appended to (so that a check of only the first characters, or
# of the first word, would let it through).
valid_prefix() {
  case $1 in
    EXPERIMENT) echo ci ;; RUNS|RUN) echo dense_qa ;; A|B) echo dense_qa ;; FUZZ) echo json ;;
    CODE_VERSION) echo v1 ;; BACKEND) echo cpu ;; RESUME) echo auto ;; LAUNCHER) echo mpirun ;;
    COMPARE_CONFIG_CHANGE) echo note ;; V|CUDA) echo 1 ;; GPU_PREBUILT) echo 1 ;; OMP_WAIT_POLICY) echo passive ;;
    SET|SWEEP) echo train.lr=1e-3 ;; SOURCE) echo datasets/dm_math_sample.tar.gz ;;
    NVCC|CUDA_HOME|CC|EMU_CXX|FUZZ_CC|GPU_PY|BENCH_TOKENIZE_ARCHIVE|BENCH_CONFIGS|BENCH_GPU_CONFIGS|REPRO_PLAN)
      echo build/x ;;
    *) case ${grammar[$1]} in count|positive) echo 1 ;; *) echo -O2 ;; esac ;;
  esac
}
# The goal of the real make: one that expands the variable in a shell command, and is cheap.
goal_for() {
  case $1 in
    A|B) echo "diff EXPERIMENT=ci" ;;
    FUZZ|FUZZ_SECONDS|FUZZ_CC|BENCH_STEPS|BENCH_THREADS|BENCH_CONFIGS|BENCH_GPU_STEPS|BENCH_GPU_WARMUP|\
    BENCH_GPU_CONFIGS|BENCH_GPU_ARGS|BENCH_TOKENIZE_ARCHIVE|GPU_PY) echo "help" ;;
    CC|CFLAGS|OPT|NVCC|NVCC_FLAGS|CUDA_HOME|EMU_CXX|CUDA|V|GPU_PREBUILT|CODE_VERSION|OMP_WAIT_POLICY) echo "code-version" ;;
    EXPERIMENT) echo "reproduce-plan" ;;
    *) echo "reproduce-plan EXPERIMENT=ci" ;;
  esac
}
# The goal of the dry run: the one that uses the variable most directly.
dry_goal_for() {
  case $1 in
    FUZZ|FUZZ_SECONDS|FUZZ_CC) echo fuzz-one ;;
    BENCH_STEPS|BENCH_THREADS|BENCH_CONFIGS) echo bench-cpu ;;
    BENCH_GPU_STEPS|BENCH_GPU_WARMUP|BENCH_GPU_CONFIGS|BENCH_GPU_ARGS|GPU_PY) echo bench-gpu ;;
    BENCH_TOKENIZE_ARCHIVE) echo bench-tokenize ;;
    *) goal_for "$1" | sed 's/^help$/all/; s/^code-version$/all/' ;;
  esac
}

nl=$'\n'; tab=$'\t'
payloads=(
  '$(mkmarker)' '`mkmarker`' ';mkmarker' '|mkmarker' '&mkmarker' "';mkmarker;'" '";mkmarker;"' "${nl}mkmarker"
  "${tab}mkmarker" ' mkmarker' '$(shell mkmarker)' "'\$(mkmarker)'" '"`mkmarker`"'
)
before=$(tree_state)
cells=0; refused=0; admitted=()
for v in $(printf '%s\n' "${!grammar[@]}" | sort); do
  prefix=$(valid_prefix "$v")
  for p in "${payloads[@]}"; do
    value=$prefix$p
    for mode in dry real; do
      if [ $mode = dry ]; then goal=$(dry_goal_for "$v"); args=(-n); else goal=$(goal_for "$v"); args=(); fi
      rc=0
      # shellcheck disable=SC2086
      mk "${args[@]}" $goal "$v=$value" >"$tmp/out" 2>&1 </dev/null || rc=$?
      cells=$((cells + 1))
      shown=$(printf '%q' "$value")
      [ ! -e "$marker" ] || { cat "$tmp/out"; fail "make $mode $goal $v=$shown ran the payload"; }
      if grep -qE "^[^ ]* \*\*\* $v='.*': refused: " "$tmp/out"; then
        [ $rc != 0 ] || fail "make $mode $goal $v=$shown printed the refusal but exited 0"
        [ "$(grep -c 'refused:' "$tmp/out")" = 1 ] || { cat "$tmp/out"; fail "$v=$shown: more than one refusal line"; }
        refused=$((refused + 1))
      else
        # Only spaces may pass a grammar, and only a list's (RUNS, SET, CFLAGS, ...): such a value is several words.
        [ "$p" = ' mkmarker' ] || { cat "$tmp/out"; fail "make $mode $goal $v=$shown was not refused (exit $rc)"; }
        case ${grammar[$v]} in names|paths|flags|set) ;; *) cat "$tmp/out"; fail "$v=$shown (one word) was not refused" ;; esac
        admitted+=("$v")
      fi
    done
  done
done
after=$(tree_state)
[ "$before" = "$after" ] || { diff <(echo "$before") <(echo "$after") | head -20; fail "the matrix changed data/, runs/ or reports/"; }
echo "ok: $cells make calls (${#grammar[@]} variables x ${#payloads[@]} payloads x make -n and a real make): nothing ran," \
  "nothing under data/ runs/ reports/ changed; $refused refused in one line naming the variable; spaces admitted by" \
  "the list variables $(printf '%s\n' "${admitted[@]}" | sort -u | tr '\n' ' ')"

# A goal that holds a command.
rc=0; mk -n 'runs/ci/a;mkmarker;/result.json' >"$tmp/out" 2>&1 || rc=$?
[ $rc != 0 ] && [ ! -e "$marker" ] && grep -q "refused: \";\" not allowed in a target" "$tmp/out" ||
  { cat "$tmp/out"; fail "a goal holding ';' was not refused"; }
echo "ok: a goal holding a command is refused"

# EXPERIMENT pointing into the source tree: refused before fetch, tokenize or train write anything.
src_before=$(git status --porcelain --untracked-files=all -- experiments datasets | LC_ALL=C sort)
for goal in fetch tokenize train reproduce; do
  rc=0; mk $goal EXPERIMENT=../experiments/ci >"$tmp/out" 2>&1 || rc=$?
  [ $rc != 0 ] && grep -q "EXPERIMENT='../experiments/ci': refused: \"/\" not allowed in a name" "$tmp/out" ||
    { cat "$tmp/out"; fail "make $goal EXPERIMENT=../experiments/ci was not refused"; }
done
[ "$(git status --porcelain --untracked-files=all -- experiments datasets | LC_ALL=C sort)" = "$src_before" ] ||
  fail "EXPERIMENT=../experiments/ci wrote into the source tree"
[ "$before" = "$(tree_state)" ] || fail "EXPERIMENT=../experiments/ci changed data/, runs/ or reports/"
echo "ok: EXPERIMENT=../experiments/ci is refused by fetch, tokenize, train and reproduce, writing nothing"

# Every target that plans runs exits non-zero with the plan's error, also when nothing is to be done: a scratch
# experiment whose outputs are faked up to date (as in test_make_console.sh), then a SWEEP whose value is no number.
exp=zz_make_injection_$$
cleanup_exp() { rm -rf "experiments/$exp" "data/$exp" "runs/$exp" "reports/$exp" "build/reproduce/$exp"; }
trap 'cleanup_exp; rm -rf "$tmp"' EXIT
mkdir -p "experiments/$exp"
cp experiments/ci/data.json experiments/ci/dense_qa.json "experiments/$exp/"
mkdir -p "data/$exp/raw" "reports/$exp" "runs/$exp/dense_qa"
printf '%s\n' "--config experiments/$exp/data.json" >"data/$exp/fetch.args"
touch "data/$exp/raw/fetch.stamp" "data/$exp/raw/manifest.json" "data/$exp/tokenize_manifest.json"
echo "backend=cpu nproc=1 set=" >"runs/$exp/dense_qa/train.inputs"
touch runs/$exp/dense_qa/{train_summary.json,result.json,predictions.jsonl,analysis.json} \
  "reports/$exp/report.html" "reports/$exp/runs.csv"
mk -n train EXPERIMENT=$exp >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "make -n train EXPERIMENT=$exp"; }
! grep -q '^bin/' "$tmp/out" || { cat "$tmp/out"; fail "the faked outputs of $exp are not up to date"; }
for goal in train evaluate analyze report export reproduce-plan; do
  rc=0; mk $goal EXPERIMENT=$exp SWEEP=train.lr=abc >"$tmp/out" 2>&1 || rc=$?
  [ $rc != 0 ] && grep -q "train.lr: expected a number" "$tmp/out" ||
    { cat "$tmp/out"; fail "make $goal SWEEP=train.lr=abc: exit $rc without the plan's error"; }
done
echo "ok: train, evaluate, analyze, report, export and reproduce-plan with a refused SWEEP exit non-zero with its error"
