#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# A GPU machine whose driver is older than the CUDA runtime the programs were built with, rehearsed without a GPU:
#   1. the CUDA backend's "no usable CUDA GPU" line names the driver's CUDA version (cudaDriverGetVersion) beside the
#      runtime's (cudaRuntimeGetVersion) and says the driver is too old (on the CUDA emulator, whose driver version
#      CUDA_EMU_DRIVER_VERSION sets; its runtime is CUDA 13.0); with a CUDA 13 driver the same run works;
#   2. `mk/gpu/run.sh probe` prints the driver's CUDA version (a fake nvidia-smi) beside the runtime bin/train is
#      linked against (a stub program linked to a stub libcudart.so.13) and one line saying the driver is too old;
#   3. `source mk/gpu/env.sh` on a bundle built for CUDA 13 (its CUDA_RUNTIME) stops first with one line where the
#      driver supports CUDA 12.4, installing nothing, and goes on where it supports CUDA 13.0.
# Builds build/emu/bench/bench_train_step (the emulator build) when missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
tmp=$(mktemp -d /tmp/test_gpu_driver_version.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. The backend's message, on the emulator (a dry run: nothing computed, the step's launches only checked).
exe=build/emu/bench/bench_train_step
${MAKE:-make} -s --no-print-directory "$exe" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log"; fail "cannot build $exe"; }
run_emu() { # DRIVER_VERSION: bench_train_step on the tiny config into $tmp/emu.out; its exit status
  CUDA_EMU_DRIVER_VERSION=$1 CUDA_EMU_DRY_RUN=1 ASAN_OPTIONS=detect_leaks=0 "$exe" \
    --config tests/bench/configs/moeut_cost_model_tiny.json --backend cuda --steps 1 >"$tmp/emu.out" 2>&1
}
rc=0; run_emu 12040 || rc=$?
[ $rc != 0 ] || { cat "$tmp/emu.out"; fail "a CUDA 12.4 driver under a CUDA 13.0 runtime: the run succeeded"; }
grep -q "no usable CUDA GPU: CUDA driver version is insufficient for CUDA runtime version (driver: CUDA 12.4, runtime: CUDA 13.0; the driver is too old for this runtime" \
  "$tmp/emu.out" || { cat "$tmp/emu.out"; fail "the failure does not name both versions and the too-old driver"; }
echo "ok: the backend names the driver's CUDA 12.4 beside the runtime's 13.0 and the driver as too old"
run_emu 13000 || { cat "$tmp/emu.out"; fail "a CUDA 13.0 driver: the run failed"; }
echo "ok: with a CUDA 13.0 driver the same run works"

# A fake nvidia-smi per driver version, first on PATH.
for v in 12.4 13.0; do
  mkdir -p "$tmp/smi-$v"
  cat >"$tmp/smi-$v/nvidia-smi" <<SMI
#!/bin/sh
if [ "\$1" = -L ]; then echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"; exit 0; fi
case "\$1" in --query-gpu=*) echo "NVIDIA H100 80GB HBM3, 550.00, 81559 MiB"; exit 0;; esac
echo "| NVIDIA-SMI 550.00   Driver Version: 550.00   CUDA Version: $v     |"
SMI
  chmod +x "$tmp/smi-$v/nvidia-smi"
done

# 2. The probe, in a scratch tree whose bin/train needs libcudart.so.13 (a stub library: ldd names it).
tree=$tmp/tree
mkdir -p "$tree/mk/gpu" "$tree/bin" "$tmp/lib"
cp mk/gpu/run.sh mk/gpu/cuda_versions.sh mk/gpu/env.sh mk/code_version.sh "$tree/mk/gpu/"
mv "$tree/mk/gpu/code_version.sh" "$tree/mk/"
printf 'int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }\n' >"$tmp/stub.c"
gcc -shared -fPIC -Wl,-soname,libcudart.so.13 -o "$tmp/lib/libcudart.so.13" "$tmp/stub.c"
printf 'int cudaRuntimeGetVersion(int *v);\nint main(void) { int v; return cudaRuntimeGetVersion(&v); }\n' >"$tmp/main.c"
gcc -o "$tree/bin/train" "$tmp/main.c" "$tmp/lib/libcudart.so.13"
(cd "$tree" && PATH=$tmp/smi-12.4:$PATH mk/gpu/run.sh probe) >"$tmp/probe.out" 2>&1 || true
grep -q "^driver: CUDA 12.4; runtime of the programs: CUDA 13" "$tmp/probe.out" &&
  grep -q "^the driver is too old for this runtime: the CUDA 13 programs cannot run on a CUDA 12.4 driver" "$tmp/probe.out" ||
  { cat "$tmp/probe.out"; fail "the probe does not print both versions and the too-old line"; }
(cd "$tree" && PATH=$tmp/smi-13.0:$PATH mk/gpu/run.sh probe) >"$tmp/probe13.out" 2>&1 || true
grep -q "^driver: CUDA 13.0; runtime of the programs: CUDA 13" "$tmp/probe13.out" &&
  ! grep -q "too old" "$tmp/probe13.out" || { cat "$tmp/probe13.out"; fail "a CUDA 13.0 driver: wrong probe output"; }
echo "ok: the probe prints the driver's CUDA 12.4 beside the programs' CUDA 13 runtime and says the driver is too old"

# 3. env.sh on a bundle built for CUDA 13 (programs are placeholders: the check comes before anything is installed).
rm -rf "$tree/bin"
b=$tree/build/gpu-bundle
mkdir -p "$b/bin" "$b/tests" "$b/bench"
for f in bin/train tests/cuda_backend_ops bench/bench_train_step; do printf '#!/bin/sh\n' >"$b/$f"; done
echo 13 >"$b/CUDA_RUNTIME"
echo unknown >"$b/VERSION"
rc=0; (cd "$tree" && PATH=$tmp/smi-12.4:$PATH bash -c 'source mk/gpu/env.sh') >"$tmp/env.out" 2>&1 || rc=$?
[ $rc != 0 ] && grep -q "^gpu_env: FAIL: the bundle's programs need the CUDA 13 runtime, this machine's driver supports CUDA 12.4: too old" \
  "$tmp/env.out" && [ ! -e "$tree/bin/train" ] ||
  { cat "$tmp/env.out"; fail "a CUDA 12.4 driver: env.sh did not stop first with the too-old line (exit $rc)"; }
(cd "$tree" && PATH=$tmp/smi-13.0:$PATH bash -c 'source mk/gpu/env.sh') >"$tmp/env13.out" 2>&1 &&
  [ -e "$tree/bin/train" ] || { cat "$tmp/env13.out"; fail "a CUDA 13.0 driver: env.sh did not install the programs"; }
echo "ok: env.sh stops first with one line where the driver is older than the bundle's CUDA 13, installs it otherwise"
