#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# Data-parallel training on the cuda backend: the gradient all-reduce over NCCL, one rank per GPU, the
# NCCL id broadcast over MPI. 2 ranks against 1 process on the same micro-batches (MoEUT, 2 micro-batches):
#   * rank 0 says the all-reduce is NCCL's (not the host-staged fallback);
#   * step 1's loss terms are bit-identical; the last step, taken by 2 ranks from the 1-process run's checkpoint one
#     step before the end, gives weights within the one-step summation-order bound (tests/e2e/mpi_common.sh);
#   * two 2-rank runs are bit-identical.
# On the CUDA emulator (make test-cuda-emu: CUDA_TEST_BIN=build/emu/bin) the NCCL calls are emulated over MPI on host
# memory (kernels/cuda/emu/nccl_emu.h) and the emulator shows 2 devices. On real GPUs it needs 2 of them (SKIP with
# fewer: NCCL refuses two ranks on one GPU). SKIP without a usable CUDA backend or without mpirun.
source "$(dirname "$0")/train_common.sh"
source "$(dirname "$0")/mpi_common.sh"

dut_bin=${CUDA_TEST_BIN:-bin}
require_backend cuda "$dut_bin"
if command -v nvidia-smi >/dev/null 2>&1 && [ "$dut_bin" = bin ]; then
  n_gpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$n_gpu" -ge 2 ] || { echo "SKIP: $n_gpu GPU(s) here; 2 ranks need 2 GPUs (one rank per GPU)"; exit 77; }
fi
export CUDA_EMU_DEVICES=2 # the emulator only (ignored by a real CUDA build)
# ASan builds (the emulator): OpenMPI keeps allocations until exit by design; suppress those (full stacks needed to
# see the library frames), keep every other leak check.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
export LSAN_OPTIONS="suppressions=$PWD/tests/e2e/lsan_openmpi.supp" OMPI_MCA_mca_base_component_disable_dlclose=1
export PMIX_MCA_mca_base_component_disable_dlclose=1

e2e_data train.shard
steps=${CUDA_MPI_STEPS:-3}
train_config "$tmp/moeut.json" moeut qa "$steps" n_microbatch=2 context=16 batch_size=4
cfg=$tmp/moeut.json
one=$tmp/one two=$tmp/two again=$tmp/again
"$dut_bin"/train --backend cuda --threads 1 --config "$cfg" --data "$data" --out "$one" >"$one.log" 2>&1 \
  || { cat "$one.log"; fail "1 process"; }
for d in "$two" "$again"; do
  mpirun --oversubscribe -np 2 "$dut_bin"/train --backend cuda --threads 1 --config "$cfg" --data "$data" --out "$d" \
    >"$d.log" 2>&1 || { cat "$d.log"; fail "2 ranks ($d)"; }
done
grep -q "gradient all-reduce: NCCL over 2 ranks" "$two.log" || { cat "$two.log"; fail "the all-reduce did not go through NCCL"; }
diff <(head -n 1 "$one/metrics.jsonl" | loss_fields /dev/stdin) <(head -n 1 "$two/metrics.jsonl" | loss_fields /dev/stdin) \
  || fail "step 1's loss differs between 1 process and 2 ranks"
echo "ok: step 1's loss terms bit-identical, 1 process vs 2 ranks over NCCL"
last=$tmp/last-step-on-2
"$dut_bin"/train --backend cuda --threads 1 --config "$cfg" --data "$data" --out "$last" --stop-after $((steps - 1)) \
  >"$last.log" 2>&1 || { cat "$last.log"; fail "1 process, $((steps - 1)) steps"; }
mpirun --oversubscribe -np 2 "$dut_bin"/train --backend cuda --threads 1 --config "$cfg" --data "$data" --out "$last" \
  --resume >>"$last.log" 2>&1 || { cat "$last.log"; fail "the last step on 2 ranks"; }
weights_within_one_step "$one" "$last" $((4 * 16 * 2)) "cuda: step $steps on 2 ranks over NCCL vs 1 process, from the same checkpoint"
same_as_ref "$two" "$again" "cuda: two 2-rank runs bit-identical"
