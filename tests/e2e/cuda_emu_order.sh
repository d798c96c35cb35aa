#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# The CUDA emulator's race check (run by `make test-cuda-emu`, not by test-e2e): bin/inspect of the emulated CUDA
# build on twin fixtures (dense and MoEUT, fp32 and bf16) with the threads between barriers run in forward and in
# reverse order (CUDA_EMU_ORDER). The backend's kernels claim to be race-free and deterministic, so the two outputs
# (logits, losses, every gradient) must be byte-identical; a missing __syncthreads/__syncwarp would make them differ.
# Each run is done with every attention path (DMMATH_CUDA_ATTENTION=fused and =gemm: the fixtures are too short for
# auto to pick the GEMM path; =flash in bf16, its only precision: in fp32 it would repeat auto's run).
set -u
cd "$(dirname "$0")/../.."
exe=${CUDA_TEST_BIN:-build/emu/bin}/inspect
[ -x "$exe" ] || { echo "FAIL: $exe not built (make emu-bins)"; exit 1; }
tmp=$(mktemp -d /tmp/cuda_emu_order.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
n=0
for name in dense_tiny_on moeut_tiny_on moeut_dmmath_answer; do
  d=tests/fixtures/twin/$name
  [ -f "$d/batch.json" ] || { echo "FAIL: fixture $d missing"; exit 1; }
  for prec in fp32 bf16; do
    atts="fused gemm"
    [ "$prec" = bf16 ] && atts="$atts flash"
    for att in $atts; do
      run=$name.$prec.$att
      for order in forward reverse; do
        CUDA_EMU_ORDER=$order DMMATH_CUDA_ATTENTION=$att "$exe" --weights "$d/weights.safetensors" \
          --batch "$d/batch.json" --out "$tmp/$run.$order.st" --backend cuda --precision "$prec" >/dev/null \
          2>"$tmp/err" || { echo "FAIL: $run $order: $(head -n 1 "$tmp/err")"; exit 1; }
      done
      cmp -s "$tmp/$run.forward.st" "$tmp/$run.reverse.st" \
        || { echo "FAIL: $name $prec attention $att: outputs differ between forward and reverse thread order (a race)"; exit 1; }
      echo "ok: $name $prec attention $att: forward and reverse thread order give byte-identical outputs"
      n=$((n + 1))
    done
  done
done
echo "cuda emu order: $n comparisons, all identical"
