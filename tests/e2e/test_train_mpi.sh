#!/usr/bin/env bash
# Data-parallel training over MPI on the CPU backend: 2 ranks against 1 process on the same micro-batches.
#  - step 1's loss terms are bit-identical (same windows, same micro-batch split, exact reduction of the values);
#  - weights after N steps are within the summation-order bound (tests/e2e/mpi_common.sh derives it), and the data
#    stream position (loader RNG, windows, examples) is identical;
#  - two 2-rank runs are bit-identical (model, AdamW state, metrics);
#  - a checkpoint records the world size; resuming with another number of ranks continues the same data stream;
#  - n_microbatch not a multiple of the ranks is one error naming both numbers, and leaves --out as it was.
source "$(dirname "$0")/train_common.sh"
source "$(dirname "$0")/mpi_common.sh"

train_data "$tmp/data"
state_stream() { grep -A4 '"loader"' "$1/state.json" | tr -d ' \t\n'; }

for arch in dense moeut; do
  if [ "$arch" = dense ]; then nmb=2 m=$((8 * 128)); else nmb=4 m=$((8 * 128 * 2)); fi # moeut: 4 layers, groups of 2
  train_config "$tmp/$arch.json" "$arch" qa 4 n_microbatch=$nmb
  cfg=$tmp/$arch.json
  one=$tmp/$arch-1 two=$tmp/$arch-2 again=$tmp/$arch-2b
  bin/train --config "$cfg" --data "$tmp/data" --out "$one" --threads 1 >"$one.log" 2>&1 || { cat "$one.log"; fail "$arch: 1 process"; }
  mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$two" >"$two.log" 2>&1 || { cat "$two.log"; fail "$arch: 2 ranks"; }
  mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$again" >"$again.log" 2>&1 || { cat "$again.log"; fail "$arch: 2 ranks again"; }
  grep -q "data-parallel: 2 rank(s)" "$two.log" || { cat "$two.log"; fail "$arch: not run as 2 ranks"; }
  [ "$(grep -c 'done: 4 steps' "$two.log")" = 1 ] || { cat "$two.log"; fail "$arch: expected one 'done' line (rank 0's)"; }

  diff <(head -n 1 "$one/metrics.jsonl" | loss_fields /dev/stdin) <(head -n 1 "$two/metrics.jsonl" | loss_fields /dev/stdin) \
    || fail "$arch: step 1's loss differs between 1 process and 2 ranks (other windows or micro-batches?)"
  echo "ok: $arch: step 1's loss terms bit-identical, 1 process vs 2 ranks"
  [ "$(state_stream "$one")" = "$(state_stream "$two")" ] || fail "$arch: the loader stream differs after 4 steps"
  weights_within "$one" "$two" "$m" "$arch: 2 ranks vs 1 process after 4 steps"
  same_as_ref "$two" "$again" "$arch: two 2-rank runs bit-identical"
  [ "$(json_get "$two/state.json" world_size)" = 2 ] || fail "$arch: state.json world_size is not 2"
  [ "$(json_get "$one/state.json" world_size)" = 1 ] || fail "$arch: state.json world_size is not 1"
done

# balance "bias": each step's expert selection counts are summed over the ranks before every rank moves its biases,
# so the replicas stay identical (checked at every checkpoint: the replica hash covers the buffers), two 2-rank runs
# are bit-identical, and the biases equal the 1-process run's within the bound (biases from one rank's counts alone
# would move by the whole 2 gamma where the ranks disagree)
bias=(--set model.balance=bias --set model.entropy_reg=null --set model.balance_gamma=0.01 --set train.checkpoint_every=2)
bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/bias-1" --threads 1 "${bias[@]}" \
  >"$tmp/bias-1.log" 2>&1 || { cat "$tmp/bias-1.log"; fail "bias: 1 process"; }
for out in bias-2 bias-2b; do
  mpi_train 2 --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/$out" "${bias[@]}" >"$tmp/$out.log" 2>&1 \
    || { cat "$tmp/$out.log"; fail "bias: 2 ranks ($out)"; }
done
same_as_ref "$tmp/bias-2" "$tmp/bias-2b" "bias: two 2-rank runs bit-identical"
weights_within "$tmp/bias-1" "$tmp/bias-2" $((8 * 128 * 2)) "bias: 2 ranks vs 1 process after 4 steps (weights and biases)"

# Resume with another number of ranks: 2 ranks for 2 steps, then 1 process (and the other way round); the stream
# position at the end equals the uninterrupted run's, the weights are within the bound.
cfg=$tmp/dense.json
for order in "2 1" "1 2"; do
  set -- $order
  d=$tmp/dense-resume-$1-$2
  if [ "$1" = 1 ]; then start=(bin/train --threads 1); else start=(mpi_train 2); fi
  if [ "$2" = 1 ]; then cont=(bin/train --threads 1); else cont=(mpi_train 2); fi
  "${start[@]}" --config "$cfg" --data "$tmp/data" --out "$d" --stop-after 2 >"$d.log" 2>&1 || { cat "$d.log"; fail "resume $order: first part"; }
  [ "$(json_get "$d/state.json" world_size)" = "$1" ] || fail "resume $order: world_size in state.json"
  "${cont[@]}" --config "$cfg" --data "$tmp/data" --out "$d" --resume >>"$d.log" 2>&1 || { cat "$d.log"; fail "resume $order: continuation"; }
  grep -q "written by $1 rank(s), continuing with $2" "$d.log" || { cat "$d.log"; fail "resume $order: no note of the change"; }
  [ "$(state_stream "$tmp/dense-1")" = "$(state_stream "$d")" ] || fail "resume $order: the data stream differs"
  weights_within "$tmp/dense-1" "$d" $((8 * 128)) "resume from $1 to $2 rank(s)"
done

# A finished 1-process run asked for again with 2 ranks and --auto-resume (make NPROC=2 after a 1-process reproduce)
# is left as is, saying why and how to retrain it.
before=$(sha256sum "$tmp/dense-1/model.safetensors")
mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$tmp/dense-1" --auto-resume >"$tmp/again2.log" 2>&1 \
  || { cat "$tmp/again2.log"; fail "a finished run rerun with 2 ranks"; }
grep -q "already finished (4 steps) with 1 rank(s): 2 rank(s) would train the same windows" "$tmp/again2.log" \
  || { cat "$tmp/again2.log"; fail "no note saying why a finished 1-process run is not retrained with 2 ranks"; }
[ "$(sha256sum "$tmp/dense-1/model.safetensors")" = "$before" ] || fail "the finished run was changed"
echo "ok: a finished 1-process run rerun with 2 ranks is left as is, saying why"

# Refused: 3 ranks for n_microbatch 2; the finished run in --out is left alone.
before=$(sha256sum "$tmp/dense-2/model.safetensors")
rc=0
mpi_train 3 --config "$cfg" --data "$tmp/data" --out "$tmp/dense-2" >"$tmp/bad.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "3 ranks for n_microbatch 2 accepted"
grep -q "train.n_microbatch 2 is not a multiple of the 3 ranks" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "no clear refusal"; }
[ "$(sha256sum "$tmp/dense-2/model.safetensors")" = "$before" ] || fail "the refused run changed --out"
echo "ok: 3 ranks for n_microbatch 2 refused, --out untouched"

# state.json's world_size is checked on read (absent = 1, as in files written before data-parallel training; below 1 is refused).
cp -r "$tmp/dense-2" "$tmp/bad-ws"
sed -i -E 's/"world_size":[[:space:]]*2/"world_size": 0/' "$tmp/bad-ws/state.json"
rc=0
bin/train --config "$cfg" --data "$tmp/data" --out "$tmp/bad-ws" --resume --threads 1 >"$tmp/bad-ws.log" 2>&1 || rc=$?
[ "$rc" != 0 ] && grep -q "world_size: must be >= 1, got 0" "$tmp/bad-ws.log" || { cat "$tmp/bad-ws.log"; fail "world_size 0 accepted"; }
sed -i -E '/"world_size"/d' "$tmp/bad-ws/state.json"
bin/train --config "$cfg" --data "$tmp/data" --out "$tmp/bad-ws" --resume --threads 1 >"$tmp/bad-ws.log" 2>&1 \
  || { cat "$tmp/bad-ws.log"; fail "a state.json without world_size (older files) not accepted"; }
echo "ok: state.json world_size 0 refused, absent accepted"
