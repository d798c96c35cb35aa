#!/usr/bin/env bash
# The first line of each stage's recipe (mk/reproduce.mk): announces "STAGE [RUN]" with the experiment and backend.
# Under `make reproduce` (REPRO_PLAN names the plan mk/reproduce_plan.sh wrote) it also counts: "[k/N]" and the
# estimated time left for the stages not started yet, this one included. The count is kept in REPRO_PLAN/started
# under a lock, so it stays right under make -j (stages then start in an order of make's choosing).
set -u
. "$(dirname "$0")/reproduce_common.sh"
stage=$1 run=${2:-}
what="$stage${run:+ $run} (${REPRO_EXPERIMENT:-?}, ${REPRO_BACKEND:-cpu})"
plan_dir=${REPRO_PLAN:-}
if [ -z "$plan_dir" ] || [ ! -f "$plan_dir/plan" ]; then echo "$what"; exit 0; fi
exec 9>>"$plan_dir/started.lock"
command -v flock >/dev/null && flock 9
echo "$stage ${run:--}" >>"$plan_dir/started"
k=$(wc -l <"$plan_dir/started")
n=$(wc -l <"$plan_dir/plan")
[ "$k" -le "$n" ] || n=$k # a stage the dry run did not foresee
left=$(awk 'NR == FNR { started[$1 " " $2] = 1; next } !(($1 " " $2) in started) { t += $3 } END { print t + 0 }' \
  "$plan_dir/started" "$plan_dir/plan")
# This stage has started, yet its time is still ahead: add it back.
this=$(awk -v k="$stage ${run:--}" '($1 " " $2) == k { print $3; exit }' "$plan_dir/plan")
left=$((left + ${this:-0}))
echo "[$k/$n] $what: about $(human_duration "$left") left in all (estimate)"
