# The first line of each stage's recipe (mk/reproduce.mk): announces "STAGE [RUN]" with the experiment and backend.
# Under `make reproduce` (REPRO_PLAN names the plan bin/runs --stages wrote: pipeline/plan/stage_plan.h) it also counts:
# "[k/N]" and the time left for the stages not started yet, this one included. The count is kept in
# REPRO_PLAN/started (one line "STAGE RUN START_TIME" per started stage) under a lock, so it stays right under make -j
# (stages then start in an order of make's choosing).
#
# The time left starts as the plan's estimate and is corrected by what was measured: once the stages started so far
# were estimated at RATIO_TRUST_FRACTION of the plan's total at least and MIN_MEASURED_S have gone by, the estimate
# of what is left is scaled by (time since the plan started / estimated time of the stages started before this one),
# and the line says "measured" instead of "estimate". Under make -j the ratio is wall time per estimated second,
# so it takes in the parallelism too. (Which stages started, not their order, decides; under -j a stage still
# running is counted as done, so the time left is a little short there.)
set -u
RATIO_TRUST_FRACTION=0.2 MIN_MEASURED_S=10
stage=$1 run=${2:-}
what="$stage${run:+ $run} (${REPRO_EXPERIMENT:-?}, ${REPRO_BACKEND:-cpu})"
plan_dir=${REPRO_PLAN:-}
if [ -z "$plan_dir" ] || [ ! -f "$plan_dir/plan" ]; then echo "$what"; exit 0; fi
exec 9>>"$plan_dir/started.lock"
command -v flock >/dev/null && flock 9
now=${REPRO_NOW:-$(date +%s.%N)} # (REPRO_NOW: a fixed clock, for tests)
echo "$stage ${run:--} $now" >>"$plan_dir/started"
k=$(wc -l <"$plan_dir/started")
n=$(wc -l <"$plan_dir/plan")
[ "$k" -le "$n" ] || n=$k # a stage the dry run did not foresee
plan_start=$(cat "$plan_dir/plan_start" 2>/dev/null || echo "$now")
# left: the estimates of the stages not started yet plus this one (started, yet its time is still ahead); before:
# the estimates of the stages started before this one (the last line of started); total: the whole plan's.
read -r left before total < <(awk -v key="$stage ${run:--}" '
  NR == FNR { est[$1 " " $2] = $3; total += $3; next }
  { started[$1 " " $2] = 1; if (FNR > 1 && last != "") before += est[last]; last = $1 " " $2 }
  END {
    for (s in est) if (!(s in started) || s == key) left += est[s]
    printf "%.0f %.0f %.0f\n", left, before, total
  }' "$plan_dir/plan" "$plan_dir/started")
read -r left how < <(awk -v left="$left" -v before="$before" -v total="$total" -v t0="$plan_start" -v now="$now" \
    -v frac="$RATIO_TRUST_FRACTION" -v min_s="$MIN_MEASURED_S" 'BEGIN {
  elapsed = now - t0
  if (before > 0 && before >= frac * total && elapsed >= min_s) {
    r = elapsed / before
    printf "%.0f measured,_%s_the_estimate\n", left * r, (r >= 10 ? sprintf("%.0fx", r) : sprintf("%.1fx", r))
  } else printf "%.0f estimate\n", left }')
# "45 s", "3 min", "1 h 20 min" (as pipeline/plan/stage_plan.h's stage_plan_duration writes the plan's total).
human_duration() {
  local s=${1%.*}
  [ -n "$s" ] || s=0
  if [ "$s" -lt 90 ]; then echo "$s s"
  elif [ "$s" -lt 5400 ]; then echo "$(( (s + 30) / 60 )) min"
  else echo "$(( s / 3600 )) h $(( (s % 3600 + 30) / 60 )) min"; fi
}
echo "[$k/$n] $what: about $(human_duration "$left") left in all (${how//_/ })"
