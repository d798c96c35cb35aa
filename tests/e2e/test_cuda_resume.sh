#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# Kill-and-resume bit identity on the CUDA backend (the backend claims deterministic reductions: no floating-point
# atomics, fixed reduction orders; kernels/cuda/cuda_common.cuh). For a MoEUT run in bf16 with expert dropout and
# frequent checkpoints, and a dense run in fp32:
#   * two uninterrupted runs give byte-identical model.safetensors and optim.safetensors (run-to-run determinism);
#   * a run stopped by --stop-after, by SIGINT or by SIGTERM and continued with --resume ends byte-identical to the
#     uninterrupted run (weights, AdamW state, and metrics.jsonl apart from tokens_per_s);
#   * negative control: seed 2 gives other weights (the comparison can fail).
# Exit 77 (SKIP) when this build or machine has no usable CUDA GPU.
# CUDA_E2E_DATA=DIR uses an already tokenized data directory (made by train_common.sh's train_data, e.g. carried to a
# GPU machine by mk/gpu/bundle.sh) instead of running bin/fetch and bin/tokenize here.
# Validation without a GPU: CUDA_TEST_BACKEND=cpu runs everything on the cpu backend (plumbing only).
# CUDA_TEST_BIN=DIR takes bin/train and bin/inspect from DIR (make test-cuda-emu: build/emu/bin, the CUDA backend on
# the CPU emulator, with CUDA_RESUME_STEPS lowered and CUDA_RESUME_SETTINGS="context=16 batch_size=4" (extra
# train_config KEY=VALUE overrides) to fit its speed).
source "$(dirname "$0")/train_common.sh"

cuda_device_under_test
e2e_data train.shard
train() { "$dut_bin"/train --backend "$be" --threads 2 "$@"; }

# interrupt_with SIGNAL CONFIG DIR EXPECTED_RC: starts a run, signals it once 3 steps are logged, checks the exit.
interrupt_with() {
  local sig=$1 cfg=$2 dir=$3 want=$4 rc=0
  # bin/train itself in the background (not the train() function, whose subshell would receive the signal)
  "$dut_bin"/train --backend "$be" --threads 2 --config "$cfg" --data "$data" --out "$dir" >"$dir.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 3000); do # up to 60 s for the first 3 steps (CUDA start-up included)
    [ -f "$dir/metrics.jsonl" ] && [ "$(wc -l <"$dir/metrics.jsonl")" -ge 3 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  kill "-$sig" "$pid" 2>/dev/null || true
  wait "$pid" || rc=$?
  [ ! -f "$dir/train_summary.json" ] || fail "$sig: the run finished before the signal arrived (raise steps)"
  [ "$rc" = "$want" ] || { cat "$dir.log"; fail "$sig: exit status $rc, expected $want"; }
  grep -q "interrupted by SIG$sig: checkpoint saved at step" "$dir.log" || { cat "$dir.log"; fail "$sig: no message"; }
  echo "$sig: checkpoint at step $(json_get "$dir/state.json" step)"
}

# Enough steps that a signal sent after 3 logged steps arrives long before the end on a fast GPU.
steps=${CUDA_RESUME_STEPS:-400}
extra=${CUDA_RESUME_SETTINGS:-}
for arch in moeut dense; do
  if [ "$arch" = moeut ]; then
    settings=(moeut answer $steps checkpoint_every=4 ff_expert_dropout=0.1 att_expert_dropout=0.1 $extra)
    prec=bf16
  else
    settings=(dense qa $steps checkpoint_every=0 $extra)
    prec=fp32
  fi
  cfg="$tmp/$arch.json"
  train_config "$cfg.tmp" "${settings[@]}"
  sed "s/\"precision\": \"fp32\"/\"precision\": \"$prec\"/" "$cfg.tmp" >"$cfg"
  grep -q "\"precision\": \"$prec\"" "$cfg" || fail "$arch: could not set precision $prec"
  echo "== $arch, $prec, $steps steps on the $be backend"

  ref="$tmp/$arch-ref"
  train --config "$cfg" --data "$data" --out "$ref" >"$ref.log" 2>&1 || { cat "$ref.log"; fail "$arch: reference run"; }
  grep -q "backend $be" "$ref.log" || { cat "$ref.log"; fail "$arch: the log does not name backend $be"; }

  # run-to-run determinism
  d="$tmp/$arch-again"
  train --config "$cfg" --data "$data" --out "$d" >"$d.log" 2>&1 || { cat "$d.log"; fail "$arch: second run"; }
  same_as_ref "$ref" "$d" "$arch $prec: two uninterrupted runs are byte-identical"

  # --stop-after then --resume
  d="$tmp/$arch-stop"
  train --config "$cfg" --data "$data" --out "$d" --stop-after 7 >"$d.log" 2>&1 || { cat "$d.log"; fail "$arch: --stop-after"; }
  [ "$(json_get "$d/state.json" step)" = 7 ] || fail "$arch: --stop-after 7 left state step $(json_get "$d/state.json" step)"
  train --config "$cfg" --data "$data" --out "$d" --resume >>"$d.log" 2>&1 || { cat "$d.log"; fail "$arch: resume"; }
  grep -q "resumed .* at step 7 of $steps" "$d.log" || { cat "$d.log"; fail "$arch: no resume message"; }
  same_as_ref "$ref" "$d" "$arch $prec: --stop-after 7 + --resume is byte-identical"

  for sig in INT TERM; do
    d="$tmp/$arch-$sig"
    want=130
    [ "$sig" = TERM ] && want=143
    interrupt_with "$sig" "$cfg" "$d" "$want"
    train --config "$cfg" --data "$data" --out "$d" --resume >>"$d.log" 2>&1 || { cat "$d.log"; fail "$arch: resume after $sig"; }
    same_as_ref "$ref" "$d" "$arch $prec: SIG$sig + --resume is byte-identical"
  done

  # negative control
  train_config "$tmp/$arch-seed2.json.tmp" "${settings[@]}" seed=2
  sed "s/\"precision\": \"fp32\"/\"precision\": \"$prec\"/" "$tmp/$arch-seed2.json.tmp" >"$tmp/$arch-seed2.json"
  train --config "$tmp/$arch-seed2.json" --data "$data" --out "$tmp/$arch-seed2" >/dev/null 2>&1 \
    || fail "$arch: seed 2 run"
  ! cmp -s "$ref/model.safetensors" "$tmp/$arch-seed2/model.safetensors" || fail "$arch: seed 2 gave identical weights"
done
echo "cuda resume: all checks passed on the $be backend"
