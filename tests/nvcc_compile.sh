#!/usr/bin/env bash
# make test-nvcc: every CUDA source (kernels/cuda/*.cu) compiled by the installed nvcc with the real build's flags
# (NVCC_FLAGS: -arch=sm_90, C++17, the host compiler's -Wall -Wextra) and warnings as errors on both sides
# (-Werror all-warnings, -Xcompiler -Werror), into build/nvcc-check/; nothing is linked or run, so no GPU is needed.
# This is what the CPU emulator of CUDA cannot check: code g++ accepts and nvcc rejects (device-code rules,
# intrinsics, __host__/__device__ attributes). Without nvcc: one SKIP line.
# Usage: tests/nvcc_compile.sh NVCC "NVCC_FLAGS" FILE.cu ...   (appends "nvcc NAME passed failed skipped" lines to
# build/test-results.txt, as tests/run_suite.sh does)
set -u
nvcc=$1; flags=$2; shift 2
results=build/test-results.txt
mkdir -p build/nvcc-check build/test-logs
if [ -z "$nvcc" ] || ! [ -x "$(command -v "$nvcc" 2>/dev/null)" ]; then
  echo "nvcc nvcc-missing 0 0 1" >>"$results"
  echo "SKIP [nvcc] no nvcc (neither on PATH nor /usr/local/cuda/bin/nvcc): the CUDA sources were not compiled"
  exit 0
fi
status=0
echo "nvcc: $("$nvcc" --version | tail -1) compiling $# CUDA sources with: $flags -Werror all-warnings -Xcompiler -Werror"
for src in "$@"; do
  name=$(basename "$src" .cu)
  log=build/test-logs/nvcc-$name.log
  start=$(date +%s)
  # shellcheck disable=SC2086
  if "$nvcc" $flags -Werror all-warnings -Xcompiler -Werror -c "$src" -o "build/nvcc-check/$name.o" >"$log" 2>&1; then
    echo "nvcc $name 1 0 0" >>"$results"
    echo "ok   [nvcc] $src ($(( $(date +%s) - start ))s)"
  else
    status=1
    echo "nvcc $name 0 1 0" >>"$results"
    echo "FAIL [nvcc] $src — log: $log"; head -n 30 "$log" | sed 's/^/    /'
  fi
done
exit $status
