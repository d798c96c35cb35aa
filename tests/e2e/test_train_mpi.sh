#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# Data-parallel training over MPI on the CPU backend: 1, 2 and 4 ranks on the same micro-batches
# (pipeline/base/dist.md, "What is exact and what is within rounding").
#  - exact: step 1's loss terms (1 process vs 2 ranks), the data stream position (loader RNG, windows, examples)
#    after N steps whatever the ranks, two runs with the same number of ranks (model, AdamW state, metrics);
#  - within rounding: ONE step from an identical checkpoint, W ranks against 1 process (and 2 against 4), within the
#    summation-order bound of one step (tests/e2e/mpi_common.sh derives it); longer runs are compared by their final
#    metrics (tests/e2e/test_reproduce_ci.sh, NPROC=2 against the 1-process baselines), not by a weight bound;
#  - elastic resume: a checkpoint of W ranks continues on W' (4 -> 2, 2 -> 1, 1 -> 2) on the same data stream, and
#    state.json / train_summary.json keep world_size_history; W' not dividing n_microbatch is one error naming both
#    numbers, and leaves --out as it was.
source "$(dirname "$0")/train_common.sh"
source "$(dirname "$0")/mpi_common.sh"

train_data "$tmp/data"
state_stream() { grep -A4 '"loader"' "$1/state.json" | tr -d ' \t\n'; }
history_is() { # history_is DIR EXPECTED_JSON LABEL: world_size_history in state.json and train_summary.json
  local f
  for f in state.json train_summary.json; do
    python3 -c 'import json, sys; h = json.load(open(sys.argv[1])).get("world_size_history")
sys.exit(0 if h == json.loads(sys.argv[2]) else f"{sys.argv[1]}: world_size_history {h}, expected {sys.argv[2]}")' \
      "$1/$f" "$2" || fail "$3: world_size_history in $f"
  done
  echo "ok: $3: world_size_history $2 in state.json and train_summary.json"
}

for arch in dense moeut; do
  if [ "$arch" = dense ]; then nmb=2 m=$((8 * 128)); else nmb=4 m=$((8 * 128 * 2)); fi # moeut: 4 layers, groups of 2
  train_config "$tmp/$arch.json" "$arch" qa 4 n_microbatch=$nmb
  cfg=$tmp/$arch.json
  one=$tmp/$arch-1 two=$tmp/$arch-2 again=$tmp/$arch-2b
  bin/train --config "$cfg" --data "$tmp/data" --out "$one" --threads 1 >"$one.log" 2>&1 || { cat "$one.log"; fail "$arch: 1 process"; }
  mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$two" >"$two.log" 2>&1 || { cat "$two.log"; fail "$arch: 2 ranks"; }
  if [ "$arch" = dense ]; then # (MoEUT's fixed-W identity: the balance "bias" runs below)
    mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$again" >"$again.log" 2>&1 || { cat "$again.log"; fail "$arch: 2 ranks again"; }
  fi
  grep -q "data-parallel: 2 rank(s)" "$two.log" || { cat "$two.log"; fail "$arch: not run as 2 ranks"; }
  [ "$(grep -c 'done: 4 steps' "$two.log")" = 1 ] || { cat "$two.log"; fail "$arch: expected one 'done' line (rank 0's)"; }

  diff <(head -n 1 "$one/metrics.jsonl" | loss_fields /dev/stdin) <(head -n 1 "$two/metrics.jsonl" | loss_fields /dev/stdin) \
    || fail "$arch: step 1's loss differs between 1 process and 2 ranks (other windows or micro-batches?)"
  echo "ok: $arch: step 1's loss terms bit-identical, 1 process vs 2 ranks"
  [ "$(state_stream "$one")" = "$(state_stream "$two")" ] || fail "$arch: the loader stream differs after 4 steps"
  [ "$arch" = moeut ] || same_as_ref "$two" "$again" "$arch: two 2-rank runs bit-identical"
  [ "$(json_get "$two/state.json" world_size)" = 2 ] || fail "$arch: state.json world_size is not 2"
  [ "$(json_get "$one/state.json" world_size)" = 1 ] || fail "$arch: state.json world_size is not 1"
  history_is "$two" '[{"from_step": 0, "world_size": 2}]' "$arch: 2 ranks from the start"
  # One step from the same state: 1 process stopped at step 3 (bit-identical to the first 3 steps of $one: one
  # process is deterministic), continued for step 4 by 2 ranks, against $one's step 4.
  d=$tmp/$arch-resume-1-2
  bin/train --threads 1 --config "$cfg" --data "$tmp/data" --out "$d" --stop-after 3 >"$d.log" 2>&1 \
    || { cat "$d.log"; fail "$arch: 1 process, 3 steps"; }
  mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$d" --resume >>"$d.log" 2>&1 || { cat "$d.log"; fail "$arch: resumed on 2 ranks"; }
  grep -q "written by 1 rank(s), continuing with 2 at step 3" "$d.log" || { cat "$d.log"; fail "$arch: no note of the change"; }
  [ "$(state_stream "$one")" = "$(state_stream "$d")" ] || fail "$arch: resume 1 -> 2: the data stream differs"
  weights_within_one_step "$one" "$d" "$m" "$arch: step 4 on 2 ranks vs 1 process, from the same step-3 checkpoint"
  history_is "$d" '[{"from_step": 0, "world_size": 1}, {"from_step": 3, "world_size": 2}]' "$arch: resume 1 -> 2"
done

# balance "bias": each step's expert selection counts are summed over the ranks before every rank moves its biases,
# so the replicas stay identical (checked at every checkpoint: the replica hash covers the buffers), two 2-rank runs
# are bit-identical, and one step on 2 ranks from a 1-process checkpoint leaves weights and biases within the one-step
# bound of the 1-process run's (biases from one rank's counts alone would move by the whole 2 gamma where the ranks
# disagree)
bias=(--set model.balance=bias --set model.entropy_reg=null --set model.balance_gamma=0.01 --set train.checkpoint_every=2)
bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/bias-1" --threads 1 "${bias[@]}" \
  >"$tmp/bias-1.log" 2>&1 || { cat "$tmp/bias-1.log"; fail "bias: 1 process"; }
for out in bias-2 bias-2b; do
  mpi_train 2 --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/$out" "${bias[@]}" >"$tmp/$out.log" 2>&1 \
    || { cat "$tmp/$out.log"; fail "bias: 2 ranks ($out)"; }
done
same_as_ref "$tmp/bias-2" "$tmp/bias-2b" "bias: two 2-rank runs bit-identical"
bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/bias-1-2" --threads 1 "${bias[@]}" --stop-after 3 \
  >"$tmp/bias-1-2.log" 2>&1 || { cat "$tmp/bias-1-2.log"; fail "bias: 1 process, 3 steps"; }
mpi_train 2 --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/bias-1-2" "${bias[@]}" --resume \
  >>"$tmp/bias-1-2.log" 2>&1 || { cat "$tmp/bias-1-2.log"; fail "bias: resumed on 2 ranks"; }
weights_within_one_step "$tmp/bias-1" "$tmp/bias-1-2" $((8 * 128 * 2)) \
  "bias: step 4 on 2 ranks vs 1 process from the same checkpoint (weights and biases)"

# Elastic resume, 2 -> 1: 2 ranks stopped at step 3, step 4 by 1 process, against the uninterrupted 2-rank run.
cfg=$tmp/dense.json
d=$tmp/dense-resume-2-1
mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$d" --stop-after 3 >"$d.log" 2>&1 || { cat "$d.log"; fail "resume 2 -> 1: 2 ranks"; }
[ "$(json_get "$d/state.json" world_size)" = 2 ] || fail "resume 2 -> 1: world_size in state.json"
cp -r "$d" "$tmp/dense-2-at-step-3" # for the checks of state.json's reader below
bin/train --threads 1 --config "$cfg" --data "$tmp/data" --out "$d" --resume >>"$d.log" 2>&1 || { cat "$d.log"; fail "resume 2 -> 1: 1 process"; }
grep -q "written by 2 rank(s), continuing with 1 at step 3" "$d.log" || { cat "$d.log"; fail "resume 2 -> 1: no note of the change"; }
[ "$(state_stream "$tmp/dense-2")" = "$(state_stream "$d")" ] || fail "resume 2 -> 1: the data stream differs"
weights_within_one_step "$tmp/dense-2" "$d" $((8 * 128)) "dense: step 4 on 1 process vs 2 ranks, from the same step-3 checkpoint"
history_is "$d" '[{"from_step": 0, "world_size": 2}, {"from_step": 3, "world_size": 1}]' "resume 2 -> 1"

# Elastic resume, 4 -> 2 (a lost host): MoEUT in 4 micro-batches, 4 ranks stopped at a checkpoint (step 3), continued
# on 2 ranks, against the uninterrupted 4-rank run: the same data stream (also the 1-process run's), step 4 within the
# one-step bound; 3 ranks, which do not divide n_microbatch 4, are refused before anything is touched.
cfg=$tmp/moeut.json
four=$tmp/moeut-4 d=$tmp/moeut-resume-4-2
mpi_train 4 --config "$cfg" --data "$tmp/data" --out "$four" >"$four.log" 2>&1 || { cat "$four.log"; fail "moeut: 4 ranks"; }
mpi_train 4 --config "$cfg" --data "$tmp/data" --out "$d" --stop-after 3 >"$d.log" 2>&1 || { cat "$d.log"; fail "resume 4 -> 2: 4 ranks"; }
before=$(sha256sum "$d"/*)
rc=0
mpi_train 3 --config "$cfg" --data "$tmp/data" --out "$d" --resume >"$tmp/bad.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "3 ranks for n_microbatch 4 accepted"
grep -q "train.n_microbatch 4 is not a multiple of the 3 ranks" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "no clear refusal"; }
[ "$(grep -c '^train.*error' "$tmp/bad.log")" = 1 ] || { cat "$tmp/bad.log"; fail "the refusal is not one line"; }
[ "$(sha256sum "$d"/*)" = "$before" ] || fail "the refused resume changed --out"
echo "ok: resuming a 4-rank checkpoint on 3 ranks (n_microbatch 4) refused in one line, --out untouched"
mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$d" --resume >>"$d.log" 2>&1 || { cat "$d.log"; fail "resume 4 -> 2: 2 ranks"; }
grep -q "written by 4 rank(s), continuing with 2 at step 3" "$d.log" || { cat "$d.log"; fail "resume 4 -> 2: no note of the change"; }
[ "$(state_stream "$four")" = "$(state_stream "$d")" ] && [ "$(state_stream "$tmp/moeut-1")" = "$(state_stream "$d")" ] \
  || fail "resume 4 -> 2: the data stream differs from the uninterrupted runs'"
echo "ok: resume 4 -> 2: the data stream equals the uninterrupted 4-rank and 1-process runs'"
weights_within_one_step "$four" "$d" $((8 * 128 * 2)) "moeut: step 4 on 2 ranks vs 4 ranks, from the same step-3 checkpoint"
history_is "$d" '[{"from_step": 0, "world_size": 4}, {"from_step": 3, "world_size": 2}]' "resume 4 -> 2"

cfg=$tmp/dense.json
# A finished 1-process run asked for again with 2 ranks and --auto-resume (make NPROC=2 after a 1-process reproduce)
# is left as is, saying why and how to retrain it.
before=$(sha256sum "$tmp/dense-1/model.safetensors")
mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$tmp/dense-1" --auto-resume >"$tmp/again2.log" 2>&1 \
  || { cat "$tmp/again2.log"; fail "a finished run rerun with 2 ranks"; }
grep -q "already finished (4 steps) with 1 rank(s): 2 rank(s) would train the same windows" "$tmp/again2.log" \
  || { cat "$tmp/again2.log"; fail "no note saying why a finished 1-process run is not retrained with 2 ranks"; }
[ "$(sha256sum "$tmp/dense-1/model.safetensors")" = "$before" ] || fail "the finished run was changed"
echo "ok: a finished 1-process run rerun with 2 ranks is left as is, saying why"

# state.json's world_size and world_size_history are checked on read (both absent = 1 rank from step 0, as in files
# written before data-parallel training; a world_size below 1 or a history that does not end with it is refused).
edit_state() { # edit_state DIR PYTHON_STATEMENT (on the dict s)
  python3 -c 'import json, sys; p = sys.argv[1] + "/state.json"; s = json.load(open(p)); exec(sys.argv[2])
json.dump(s, open(p, "w"), indent=1)' "$1" "$2"
}
refused() { # refused DIR MESSAGE LABEL: resuming DIR fails with MESSAGE
  local rc=0
  bin/train --config "$cfg" --data "$tmp/data" --out "$1" --resume --threads 1 >"$1.log" 2>&1 || rc=$?
  [ "$rc" != 0 ] && grep -qF "$2" "$1.log" || { cat "$1.log"; fail "$3 accepted"; }
  echo "ok: $3 refused: $(grep -F "$2" "$1.log")"
}
cp -r "$tmp/dense-2-at-step-3" "$tmp/bad-ws"
edit_state "$tmp/bad-ws" 's["world_size"] = 0'
refused "$tmp/bad-ws" "world_size: must be >= 1, got 0" "state.json world_size 0"
edit_state "$tmp/bad-ws" 's["world_size"] = 1'
refused "$tmp/bad-ws" "world_size_history ends with 2 rank(s), but world_size is 1" "a history that does not end with world_size"
edit_state "$tmp/bad-ws" 's["world_size_history"].append({"from_step": 5, "world_size": 1})'
refused "$tmp/bad-ws" "world_size_history[1].from_step: 5, expected a step after the entry before and <= step" \
  "a history entry after the checkpoint's step"
edit_state "$tmp/bad-ws" 'del s["world_size"]; del s["world_size_history"]'
bin/train --config "$cfg" --data "$tmp/data" --out "$tmp/bad-ws" --resume --threads 1 >"$tmp/bad-ws.log" 2>&1 \
  || { cat "$tmp/bad-ws.log"; fail "a state.json without world_size (older files) not accepted"; }
python3 -c 'import json, sys; h = json.load(open(sys.argv[1]))["world_size_history"]
sys.exit(0 if h == [{"from_step": 0, "world_size": 1}] else f"older state: {h}")' "$tmp/bad-ws/train_summary.json" \
  || fail "a state.json without world_size: not taken as 1 rank from step 0"
echo "ok: a state.json without world_size and its history (older files) is taken as 1 rank from step 0"
