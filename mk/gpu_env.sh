# Sourced (not run) from the repository root on a GPU machine that lacks this project's build dependencies:
#     source mk/gpu_env.sh
# Unpacks build/gpu-bundle.tar.gz (made by `make gpu-bundle` on the development machine and carried over), copies
# its programs to where the tests and mk/gpu_run.sh look for them (bin/, build/tests/, build/bench/; their RPATH finds
# the bundled libraries from there), and exports
#   GPU_PREBUILT=1       mk/gpu.mk builds nothing
#   CUDA_E2E_DATA=...    tests/e2e/test_cuda_resume.sh trains on the bundled tokenized data (bin/fetch needs libcurl
#                        and libarchive, which are not bundled)
#   LD_LIBRARY_PATH      extended with the directory holding libcublas.so.13 only when /usr/local/cuda/lib64 lacks it
# It warns when the bundle was built from another code version than this checkout.
gpu_env_main() {
  local b=build/gpu-bundle
  if [ -f build/gpu-bundle.tar.gz ]; then
    tar xzf build/gpu-bundle.tar.gz -C build || { echo "gpu_env: cannot unpack build/gpu-bundle.tar.gz" >&2; return 1; }
  fi
  [ -d "$b/bin" ] || { echo "gpu_env: no $b (make gpu-bundle on the development machine and carry build/gpu-bundle.tar.gz)" >&2; return 1; }
  mkdir -p bin build/tests build/bench || return 1
  cp -f "$b"/bin/* bin/ && cp -f "$b"/tests/* build/tests/ && cp -f "$b"/bench/* build/bench/ || return 1
  export GPU_PREBUILT=1
  export CUDA_E2E_DATA="$PWD/$b/e2e-data"
  if [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ] && ! ldconfig -p 2>/dev/null | grep 'libcublas\.so\.13' >/dev/null; then
    local f
    f=$(find /usr/local /opt /usr/lib -name 'libcublas.so.13' 2>/dev/null | head -n 1)
    if [ -n "$f" ]; then
      export LD_LIBRARY_PATH="$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "gpu_env: cuBLAS from $(dirname "$f")"
    else
      echo "gpu_env: WARNING: libcublas.so.13 not found; the CUDA programs will not start" >&2
    fi
  fi
  local have want
  have=$(cat "$b/VERSION" 2>/dev/null || echo unknown)
  want=$(mk/code_version.sh 2>/dev/null || echo unknown) # the CODE_VERSION the Makefile builds in
  [ "$have" = "$want" ] || echo "gpu_env: WARNING: the bundle was built from $have, this checkout is $want" >&2
  echo "gpu_env: prebuilt programs from $have in place (bin/, build/tests/, build/bench/); GPU_PREBUILT=1"
}
gpu_env_main
