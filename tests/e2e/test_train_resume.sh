#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# Kill-and-resume bit identity on the CPU backend: a run interrupted by --stop-after, SIGINT or SIGTERM and then
# continued with --resume ends with byte-identical model.safetensors and optim.safetensors (and the same metrics,
# tokens_per_s aside) as the uninterrupted run. MoEUT runs with expert dropout, so the dropout RNG must be restored
# too. Also: a changed config or --steps is refused on --resume, and a finished run is left alone.
# All runs use --threads 1 (the thread count must match between the runs; 1 is also fastest on a shared machine).
source "$(dirname "$0")/train_common.sh"

train_data "$tmp/data"
# interrupt_with SIGNAL CONFIG DIR EXPECTED_RC: starts a run, signals it after a few logged steps, checks the exit.
interrupt_with() {
  local sig=$1 cfg=$2 dir=$3 want=$4 rc=0
  bin/train --config "$cfg" --data "$tmp/data" --out "$dir" --threads 1 >"$dir.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 600); do # up to 60 s for the first 3 steps
    [ -f "$dir/metrics.jsonl" ] && [ "$(wc -l <"$dir/metrics.jsonl")" -ge 3 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "-$sig" "$pid" 2>/dev/null || true
  wait "$pid" || rc=$?
  [ "$rc" = "$want" ] || { cat "$dir.log"; fail "$sig: exit status $rc, expected $want"; }
  grep -q "interrupted by SIG$sig: checkpoint saved at step" "$dir.log" || { cat "$dir.log"; fail "$sig: no message"; }
  [ ! -f "$dir/train_summary.json" ] || fail "$sig: train_summary.json written by an interrupted run"
  local k
  k=$(json_get "$dir/state.json" step)
  echo "$sig: checkpoint at step $k"
  [ "$(wc -l <"$dir/metrics.jsonl")" -ge "$k" ] || fail "$sig: metrics behind the checkpoint"
}

for arch in moeut dense; do
  steps=60
  if [ "$arch" = moeut ]; then
    settings=(moeut answer $steps checkpoint_every=4 ff_expert_dropout=0.1 att_expert_dropout=0.1)
  else
    settings=(dense qa $steps checkpoint_every=0)
  fi
  train_config "$tmp/$arch.json" "${settings[@]}"
  cfg="$tmp/$arch.json"
  ref="$tmp/$arch-ref"
  bin/train --config "$cfg" --data "$tmp/data" --out "$ref" --threads 1 >"$ref.log" 2>&1 || { cat "$ref.log"; fail "$arch: reference run"; }

  # --stop-after then --resume
  d="$tmp/$arch-stop"
  bin/train --config "$cfg" --data "$tmp/data" --out "$d" --threads 1 --stop-after 7 >"$d.log" 2>&1 || { cat "$d.log"; fail "$arch: --stop-after"; }
  [ "$(json_get "$d/state.json" step)" = 7 ] || fail "$arch: --stop-after 7 left state step $(json_get "$d/state.json" step)"
  [ ! -f "$d/train_summary.json" ] || fail "$arch: train_summary.json after --stop-after"
  bin/train --config "$cfg" --data "$tmp/data" --out "$d" --threads 1 --resume >>"$d.log" 2>&1 || { cat "$d.log"; fail "$arch: resume"; }
  grep -q "resumed .* at step 7 of $steps" "$d.log" || { cat "$d.log"; fail "$arch: no resume message"; }
  same_as_ref "$ref" "$d" "$arch --stop-after 7 resumed bit-identically"

  # signals at an arbitrary step boundary
  for sig in INT TERM; do
    d="$tmp/$arch-$sig"
    want=130
    [ "$sig" = TERM ] && want=143
    interrupt_with "$sig" "$cfg" "$d" "$want"
    bin/train --config "$cfg" --data "$tmp/data" --out "$d" --threads 1 --resume >>"$d.log" 2>&1 || { cat "$d.log"; fail "$arch: resume after $sig"; }
    same_as_ref "$ref" "$d" "$arch SIG$sig resumed bit-identically"
  done

  # negative control: the comparison can fail (the same run with another seed gives other weights)
  train_config "$tmp/$arch-seed2.json" "${settings[@]}" seed=2
  bin/train --config "$tmp/$arch-seed2.json" --data "$tmp/data" --out "$tmp/$arch-seed2" --threads 1 2>/dev/null
  ! cmp -s "$ref/model.safetensors" "$tmp/$arch-seed2/model.safetensors" || fail "$arch: seed 2 gave identical weights"
done

# a finished run is left alone by --resume
d="$tmp/dense-ref"
before=$(sha256sum "$d/model.safetensors")
bin/train --config "$tmp/dense.json" --data "$tmp/data" --out "$d" --threads 1 --resume >"$tmp/again.log" 2>&1 || { cat "$tmp/again.log"; fail "resume of a finished run"; }
grep -q "already finished" "$tmp/again.log" || { cat "$tmp/again.log"; fail "no 'already finished' message"; }
[ "$before" = "$(sha256sum "$d/model.safetensors")" ] || fail "a finished run was modified by --resume"

# refusals: the config changed, or --steps differs from the checkpoint's
d="$tmp/dense-stop"
bin/train --config "$tmp/dense.json" --data "$tmp/data" --out "$tmp/refuse" --threads 1 --stop-after 2 2>/dev/null
sed 's/"lr": 0.003/"lr": 0.002/' "$tmp/dense.json" >"$tmp/dense-changed.json"
rc=0
bin/train --config "$tmp/dense-changed.json" --data "$tmp/data" --out "$tmp/refuse" --threads 1 --resume 2>"$tmp/refuse.log" || rc=$?
[ "$rc" = 1 ] || fail "changed config: exit status $rc, expected 1"
grep -q "refusing to resume .*dense-changed.json changed since the checkpoint" "$tmp/refuse.log" || { cat "$tmp/refuse.log"; fail "changed config: message"; }
rc=0
bin/train --config "$tmp/dense.json" --data "$tmp/data" --out "$tmp/refuse" --threads 1 --resume --steps 50 2>"$tmp/refuse.log" || rc=$?
[ "$rc" = 1 ] || fail "--steps mismatch: exit status $rc, expected 1"
grep -q "refusing to resume .*made for $steps steps, this run asks for 50" "$tmp/refuse.log" || { cat "$tmp/refuse.log"; fail "--steps mismatch: message"; }
[ "$(json_get "$tmp/refuse/state.json" step)" = 2 ] || fail "a refused resume changed the checkpoint"
echo "ok: resume refusals"
