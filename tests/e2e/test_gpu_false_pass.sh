#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# mk/gpu/run.sh tests (make test-gpu): when every CUDA test skips ("no usable CUDA GPU", exit 77), the step is a
# SKIP only where there is no GPU; where nvidia-smi lists one, it fails, naming the driver's CUDA version and the
# runtime the programs need (the usual cause: a driver older than the CUDA runtime they were built with).
# A scratch tree with run.sh, the suite scripts, one fake CUDA program and one fake CUDA e2e script that both skip,
# and a fake nvidia-smi first on PATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/test_gpu_false_pass.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
tree=$tmp/tree
mkdir -p "$tree/mk/gpu" "$tree/tests/e2e" "$tree/build/tests" "$tmp/gpu" "$tmp/nogpu"
cp "$root/mk/gpu/run.sh" "$root/mk/gpu/cuda_versions.sh" "$tree/mk/gpu/"
cp "$root/tests/run_suite.sh" "$root/tests/summarize.sh" "$tree/tests/"
printf '#!/bin/sh\necho "SKIP: no usable CUDA GPU (cudaErrorInsufficientDriver)"\nexit 77\n' >"$tree/build/tests/cuda_fake"
cp "$tree/build/tests/cuda_fake" "$tree/tests/e2e/test_cuda_fake.sh"
chmod +x "$tree/build/tests/cuda_fake" "$tree/tests/e2e/test_cuda_fake.sh"
cat >"$tmp/gpu/nvidia-smi" <<'SMI'
#!/bin/sh
if [ "$1" = -L ]; then echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"; exit 0; fi
echo "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |"
SMI
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9\n' \
  >"$tmp/nogpu/nvidia-smi"
chmod +x "$tmp/gpu/nvidia-smi" "$tmp/nogpu/nvidia-smi"

rc=0; (cd "$tree" && PATH=$tmp/gpu:$PATH mk/gpu/run.sh tests) >"$tmp/gpu.log" 2>&1 || rc=$?
[ $rc = 1 ] || { cat "$tmp/gpu.log"; fail "a listed GPU with every CUDA test skipped: exit $rc, expected 1"; }
grep -q "test-gpu: FAIL: nvidia-smi lists GPU 0: NVIDIA H100 80GB HBM3 but every CUDA test skipped: the driver supports CUDA 12.2" \
  "$tmp/gpu.log" || { cat "$tmp/gpu.log"; fail "the failure does not name the GPU and the driver's CUDA version"; }
echo "ok: a GPU listed by nvidia-smi with every CUDA test skipped fails: $(grep -o 'the driver supports.*runtime' "$tmp/gpu.log")"

rc=0; (cd "$tree" && PATH=$tmp/nogpu:$PATH mk/gpu/run.sh tests) >"$tmp/nogpu.log" 2>&1 || rc=$?
[ $rc = 0 ] && grep -q "test-gpu: SKIP: every CUDA test skipped (no GPU" "$tmp/nogpu.log" ||
  { cat "$tmp/nogpu.log"; fail "no GPU: exit $rc, expected 0 with a SKIP line"; }
echo "ok: without a GPU the same step is a SKIP (exit 0)"

# A hung program (a kernel that never returns) is stopped at TEST_TIMEOUT_S and counted as failed, and the suite goes
# on to the next program: on a job with a wall-time limit it must not take every later step's time.
printf '#!/bin/sh\nsleep 60\n' >"$tree/build/tests/cuda_hang"
printf '#!/bin/sh\necho "Checks: 1"\nexit 0\n' >"$tree/build/tests/cuda_quick"
chmod +x "$tree/build/tests/cuda_hang" "$tree/build/tests/cuda_quick"
rc=0; start=$SECONDS
(cd "$tree" && TEST_TIMEOUT_S=2 tests/run_suite.sh cuda build/tests/cuda_hang build/tests/cuda_quick) >"$tmp/hang.log" 2>&1 || rc=$?
[ $rc = 1 ] && [ $((SECONDS - start)) -lt 30 ] || { cat "$tmp/hang.log"; fail "a hung program: exit $rc after $((SECONDS - start)) s, expected 1 within 30 s"; }
grep -q "FAIL \[cuda\] cuda_hang" "$tmp/hang.log" && grep -q "stopped at TEST_TIMEOUT_S=2 s" "$tmp/hang.log" &&
  grep -q "ok   \[cuda\] cuda_quick" "$tmp/hang.log" || { cat "$tmp/hang.log"; fail "the hung program is not reported as stopped, or the next one did not run"; }
rc=0; (cd "$tree" && TEST_TIMEOUT_S='1;true' tests/run_suite.sh cuda build/tests/cuda_quick) >"$tmp/bad.log" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "TEST_TIMEOUT_S must be a number of seconds" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "a bad TEST_TIMEOUT_S: exit $rc"; }
echo "ok: a hung program is stopped at TEST_TIMEOUT_S and counted as failed; the next one runs; a bad value is refused"
