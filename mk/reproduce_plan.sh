#!/usr/bin/env bash
# Called by `make reproduce` between the build and the stages: reads the dry run of `make reproduce-stages` (DRY, its
# printed recipes), in which every stage's recipe starts with "mk/reproduce_stage.sh STAGE [RUN]", so exactly the
# stages that will run are listed; estimates each one's time and writes the plan (PLAN_DIR/plan: one line
# "STAGE RUN SECONDS WHERE_FROM" per stage) that mk/reproduce_stage.sh counts against. Prints one summary line, or says
# that everything is up to date.
#
# Estimates: train = tokens to train (steps x batch_size x context from the run config and SET, less what an
# interrupted run already did) / throughput, the throughput measured by an earlier run on the same backend
# (runs/EXP/RUN/train_summary.json, its state.json when interrupted, else the mean of the experiment's other runs),
# else a stated default; evaluate = the same run's last evaluation time, else a default per example; the others are
# defaults. Usage: mk/reproduce_plan.sh PLAN_DIR DRY; environment: REPRO_EXPERIMENT, REPRO_BACKEND, REPRO_SET,
# REPRO_RESUME (exported by mk/reproduce.mk).
set -u # (not -e: a number missing from a record only leaves that estimate to its default)
. "$(dirname "$0")/reproduce_common.sh"
plan_dir=$1 dry=$2
exp=${REPRO_EXPERIMENT:?}
backend=${REPRO_BACKEND:-cpu}
SET=${REPRO_SET:-}
runs_dir=runs/$exp
mkdir -p "$plan_dir"
: >"$plan_dir/started"
date +%s.%N >"$plan_dir/plan_start" # mk/reproduce_stage.sh measures the time since then against the estimates

# Defaults when nothing was measured: train throughput in tokens/s per backend (measured on the 2-core development
# machine for experiment tiny/ci: dense about 9000, MoEUT about 5000 tokens/s; an H100 does far more), evaluation
# seconds per example (both sets), and fixed seconds for the short stages.
default_tokens_per_s() { case "$backend" in cpu) echo 5000 ;; *) echo 200000 ;; esac; }
DEFAULT_EVAL_S_PER_EXAMPLE=0.01
DEFAULT_S_FETCH=5 DEFAULT_S_TOKENIZE=10 DEFAULT_S_ANALYZE=2 DEFAULT_S_REPORT=2

# config_value RUN SECTION.KEY: the SET override of KEY for this run, else the config file's value.
config_value() {
  local run=$1 key=$2 w v=
  for w in $SET; do [ "${w%%=*}" = "$key" ] && v=${w#*=}; done
  [ -n "$v" ] || v=$(json_number "experiments/$exp/${run%%.seed*}.json" "${key#*.}")
  echo "$v"
}

# The mean train throughput of this experiment's finished runs on this backend (empty when there is none).
measured_mean=$(for s in "$runs_dir"/*/train_summary.json; do
    [ -f "$s" ] && [ "$(json_string "$s" backend)" = "$backend" ] && json_number "$s" tokens_per_s
  done | awk '$1 > 0 { t += $1; n++ } END { if (n) printf "%.0f", t / n }')

train_estimate() { # prints "SECONDS WHERE_FROM"
  local run=$1 dir=$runs_dir/$1 steps batch ctx tokens done=0 tps= from
  steps=$(config_value "$run" train.steps); batch=$(config_value "$run" train.batch_size)
  ctx=$(config_value "$run" train.context)
  tokens=$(awk -v a="${steps:-0}" -v b="${batch:-0}" -v c="${ctx:-0}" 'BEGIN { printf "%.0f", a * b * c }')
  if [ -f "$dir/train_summary.json" ]; then
    [ "$(json_string "$dir/train_summary.json" backend)" = "$backend" ] &&
      tps=$(json_number "$dir/train_summary.json" tokens_per_s) && from="$run's last run"
  elif [ -f "$dir/state.json" ]; then # interrupted: its checkpoint is continued (RESUME=auto or 1) on this backend
    # (its own throughput only after 30 s of training: the first steps are dominated by start-up)
    if [ "$(json_string "$dir/state.json" backend)" = "$backend" ]; then
      tps=$(awk -v n="$(json_number "$dir/state.json" tokens)" -v s="$(json_number "$dir/state.json" wall_time_s)" \
        'BEGIN { if (s >= 30 && n > 0) printf "%.0f", n / s }') from="$run's interrupted run"
      [ "${REPRO_RESUME:-auto}" = 0 ] || done=$(json_number "$dir/state.json" tokens)
    fi
  fi
  if [ -z "$tps" ] || ! awk -v t="$tps" 'BEGIN { exit !(t > 0) }'; then
    if [ -n "$measured_mean" ]; then tps=$measured_mean from="runs/$exp on $backend"
    else tps=$(default_tokens_per_s) from="default"; fi
  fi
  awk -v n="$tokens" -v d="${done:-0}" -v t="$tps" -v f="$from" \
    'BEGIN { r = n - d; if (r < 0) r = 0; printf "%.0f %.0f tokens/s (%s)\n", r / t, t, f }'
}

evaluate_estimate() {
  local run=$1 s n
  s=$([ -f "$runs_dir/$run/result.json" ] && tr -d ' \t\r\n' <"$runs_dir/$run/result.json" | grep -o '"evaluation":{"wall_time_s":[0-9.eE+-]*' |
      cut -d: -f3 || true)
  if [ -n "$s" ]; then printf '%.0f last evaluation\n' "$s"; return; fi
  n=$(config_value "$run" evaluate.max_examples_per_set)
  awk -v n="${n:-1000}" -v e="$DEFAULT_EVAL_S_PER_EXAMPLE" 'BEGIN { printf "%.0f default\n", 2 * n * e }'
}

stages=$(dry_run_stages "$dry")
: >"$plan_dir/plan"
total=0 n=0 counts=""
while read -r stage run; do
  [ -n "$stage" ] || continue
  case $stage in
    train) est=$(train_estimate "$run") ;;
    evaluate) est=$(evaluate_estimate "$run") ;;
    fetch) est="$DEFAULT_S_FETCH default" ;;
    tokenize) est="$DEFAULT_S_TOKENIZE default" ;;
    analyze) est="$DEFAULT_S_ANALYZE default" ;;
    *) est="$DEFAULT_S_REPORT default" ;;
  esac
  echo "$stage ${run:--} $est" >>"$plan_dir/plan"
  n=$((n + 1)); total=$((total + ${est%% *}))
done <<<"$stages"

if [ "$n" = 0 ]; then
  echo "reproduce: everything is up to date for EXPERIMENT=$exp ($backend): nothing to fetch, tokenize, train, evaluate,"\
       "analyze or report"
  exit 0
fi
# "fetch, tokenize, 4 train, 4 evaluate, 4 analyze, report"
summary=$(awk '{ c[$1]++; if (!($1 in o)) o[$1] = NR } END { for (s in c) print o[s], (c[s] > 1 ? c[s] " " : "") s }' \
  "$plan_dir/plan" | sort -n | cut -d' ' -f2- | paste -sd, | sed 's/,/, /g')
basis=$(awk '$1 == "train"' "$plan_dir/plan" | cut -d' ' -f4- | sort -u | paste -sd';' | sed 's/;/; /g')
echo "reproduce: EXPERIMENT=$exp on $backend: $n stages to run ($summary), about $(human_duration $total) in all"\
     "(an estimate${basis:+; training at $basis})"
