# Sourced (not run) from the repository root on a GPU machine that lacks this project's build dependencies:
#     source mk/gpu/env.sh
# First, it checks that this machine's driver supports the CUDA major version the bundle was built for (its
# CUDA_RUNTIME) and stops with one line where it does not: the programs could not start on it.
# Unpacks build/gpu-bundle.tar.gz (made by `make gpu-bundle` on a machine with them, and copied here), copies
# its programs to where the tests and mk/gpu/run.sh look for them (bin/, build/tests/, build/bench/; their RPATH finds
# the bundled libraries from there), puts the tokenized data of experiment small in data/small (unless the same is
# there already), and exports
#   GPU_PREBUILT=1       the Makefile builds and installs nothing (`all` only checks bin/; mk/gpu.mk, make reproduce)
#   CUDA_E2E_DATA=...    tests/e2e/test_cuda_resume.sh trains on the bundled tokenized data (bin/fetch needs libcurl
#                        and libarchive, which are not bundled)
#   LD_LIBRARY_PATH      extended with the directory of each library a program does not find (cuBLAS, cudart, NCCL:
#                        the GPU image may keep them in a Python package rather than /usr/local/cuda/lib64)
#   PATH                 extended with the bundle's tools/ (GNU make) only when the machine has no make
# Copies keep the bundle's time stamps, so sourcing it again in a later call leaves make's view of bin/ and data/small
# unchanged (nothing reruns). It warns when the bundle was built from another code version than this checkout.
gpu_env_find_missing_libs() { # the "not found" libraries of the programs, resolved by a search under /usr/local, /opt, /usr/lib
  local name f dir
  for name in $(ldd bin/train build/tests/cuda_* build/bench/bench_train_step 2>/dev/null |
                awk '/=> not found/ {print $1}' | sort -u); do
    f=$(find /usr/local /opt /usr/lib -name "$name" 2>/dev/null | head -n 1)
    if [ -z "$f" ]; then
      echo "gpu_env: WARNING: $name not found on this machine; the CUDA programs will not start" >&2
      continue
    fi
    dir=$(dirname "$f")
    case ":${LD_LIBRARY_PATH:-}:" in *":$dir:"*) ;; *) export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
    echo "gpu_env: $name from $dir"
  done
}
gpu_env_main() {
  local b=build/gpu-bundle
  if [ -f build/gpu-bundle.tar.gz ]; then
    tar xzf build/gpu-bundle.tar.gz -C build || { echo "gpu_env: cannot unpack build/gpu-bundle.tar.gz" >&2; return 1; }
  fi
  [ -d "$b/bin" ] || { echo "gpu_env: no $b (run make gpu-bundle where the build dependencies are and copy build/gpu-bundle.tar.gz here)" >&2; return 1; }
  source mk/gpu/cuda_versions.sh || return 1
  local need driver
  need=$(cat "$b/CUDA_RUNTIME" 2>/dev/null)
  driver=$(gpu_driver_cuda)
  if gpu_driver_too_old "$driver" "$need"; then
    echo "gpu_env: FAIL: the bundle's programs need the CUDA $need runtime, this machine's driver supports CUDA $driver:" \
      "too old for them (make gpu-bundle with a CUDA ${driver%%.*} toolkit for this machine, or update the driver)" >&2
    return 1
  fi
  mkdir -p bin build/tests build/bench || return 1
  cp -pf "$b"/bin/* bin/ && cp -pf "$b"/tests/* build/tests/ && cp -pf "$b"/bench/* build/bench/ || return 1
  # data/small: replaced only when its manifest differs from the bundle's (a rerun keeps the runs' data as it was).
  if [ -d "$b/data-small" ] && ! cmp -s "$b/data-small/tokenize_manifest.json" data/small/tokenize_manifest.json; then
    rm -rf data/small && mkdir -p data && cp -pr "$b/data-small" data/small || return 1
    echo "gpu_env: data/small from the bundle"
  fi
  export GPU_PREBUILT=1
  export CUDA_E2E_DATA="$PWD/$b/e2e-data"
  if ! command -v make >/dev/null 2>&1 && [ -x "$b/tools/make" ]; then
    export PATH="$PATH:$PWD/$b/tools"
    echo "gpu_env: no make on this machine: using the bundle's ($b/tools/make)"
  fi
  gpu_env_find_missing_libs
  local have want
  have=$(cat "$b/VERSION" 2>/dev/null || echo unknown)
  want=$(mk/code_version.sh 2>/dev/null || echo unknown) # the CODE_VERSION the Makefile builds in
  [ "$have" = "$want" ] || echo "gpu_env: WARNING: the bundle was built from $have, this checkout is $want" >&2
  echo "gpu_env: prebuilt programs from $have in place (bin/, build/tests/, build/bench/); GPU_PREBUILT=1"
}
gpu_env_main
