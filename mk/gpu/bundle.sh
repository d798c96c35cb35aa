#!/usr/bin/env bash
# make gpu-bundle: build/gpu-bundle.tar.gz, everything the GPU checks need on a machine that has a GPU, a CUDA 13
# runtime and cuBLAS, but not this project's build dependencies (cJSON, OpenBLAS, Check, ... headers and libraries;
# e.g. a cluster's GPU nodes that reach no package registry). Built on a machine that has them (nvcc compiles the
# kernels without a GPU), then copied to the GPU machine and unpacked there by `source mk/gpu/env.sh`.
#   bin/*                 the stages                    tests/cuda_*        the CUDA unit programs
#   bench/bench_train_step                              lib/                the non-system shared libraries they load
#   e2e-data/             the tokenized embedded sample that tests/e2e/test_cuda_resume.sh trains on (CUDA_E2E_DATA)
#   data-small/           data/small as `make tokenize EXPERIMENT=small` made it here (tokenizer, shards, manifests and
#                         the fetch stamps): bin/fetch needs libcurl and libarchive, which are not bundled (with their
#                         dependencies they weigh 58 MB), so `mk/gpu/run.sh small` trains on this copy
#   tools/make            this machine's GNU make, used there only when the GPU machine has none
#   VERSION               the code version of the tree the binaries were built from (mk/code_version.sh)
#   CUDA_RUNTIME          the major version of the CUDA runtime the programs are linked against (libcudart.so.N):
#                         the GPU machine's driver must support that CUDA version; `source mk/gpu/env.sh` checks it
#                         first and stops with one line where it does not (build the bundle with the toolkit of the
#                         driver's CUDA major for such a machine)
# Kept small, because it is copied to the GPU machine together with the tree (about 16 MiB): the script fails above
# GPU_BUNDLE_MAX_MIB (default 44, so that bundle and tree stay under 64 MiB). NCCL (218 MB) and the CUDA runtime
# are NOT bundled, the GPU machine's own are found by gpu_env.sh.
# Every program is relinked from the objects make built, with an RPATH that finds lib/ both inside the bundle and
# where gpu_env.sh copies the programs (bin/, build/tests/, build/bench/), and /usr/local/cuda/lib64 for cuBLAS.
# The C library, libstdc++, libgcc_s and the CUDA libraries (cudart, cuBLAS, NCCL) are NOT bundled: the GPU machine's
# own are used (its glibc must be at least this machine's; `mk/gpu/run.sh probe` prints it).
set -euo pipefail
cd "$(dirname "$0")/../.."
make --no-print-directory CUDA=1 all build/tests/cuda_backend_ops build/tests/cuda_twin_compare \
  build/tests/cuda_model_vs_cpu build/bench/bench_train_step >/dev/null
make --no-print-directory tokenize EXPERIMENT=small >/dev/null
ldd bin/train | grep libcudart >/dev/null || { echo "gpu-bundle: bin/train was built without CUDA (no nvcc here?)" >&2; exit 1; }

stage=build/gpu-bundle
rm -rf "$stage" build/gpu-bundle.tar.gz
mkdir -p "$stage"/{bin,tests,bench,lib,tools}
link_flags=$(make --no-print-directory -s gpu-print-link-flags)
rpath='$ORIGIN/../lib:$ORIGIN/../gpu-bundle/lib:$ORIGIN/../build/gpu-bundle/lib:/usr/local/cuda/lib64'
relink() { # relink OUT OBJECT
  gcc -O2 -o "$1" "$2" build/libnn.a build/libcore.a -Wl,--as-needed $link_flags \
    -Wl,--disable-new-dtags -Wl,-rpath,"$rpath"
  strip --strip-debug "$1"
}
for s in stages/*.c; do
  n=$(basename "$s" .c)
  relink "$stage/bin/$n" "build/obj/stages/$n.o"
done
for t in build/tests/cuda_backend_ops build/tests/cuda_twin_compare build/tests/cuda_model_vs_cpu; do
  relink "$stage/tests/$(basename "$t")" "build/obj/tests/unit/$(basename "$t").o"
done
relink "$stage/bench/bench_train_step" build/obj/tests/bench/bench_train_step.o

# Shared libraries: what the programs (fetch aside: the e2e data is prebuilt below) load, minus the system's own.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libresolv\.|libstdc\+\+|libgcc_s|libcudart|libcublas|libnccl)'
for f in "$stage"/bin/* "$stage"/tests/* "$stage"/bench/*; do
  [ "$(basename "$f")" = fetch ] && continue
  ldd "$f" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  cp -L "$path" "$stage/lib/$name"
done

# The e2e training data (tests/e2e/train_common.sh's train_data: the embedded sample, arithmetic only).
raw=$(mktemp -d /tmp/gpu_bundle_raw.XXXXXX)
trap 'rm -rf "$raw"' EXIT
bin/fetch --source embedded --out "$raw/raw" --filter 'arithmetic__.*' --tokenizer-corpus-pairs 10000 >/dev/null 2>&1
bin/tokenize --raw "$raw/raw" --config experiments/tiny/data.json --out "$stage/e2e-data" >/dev/null 2>&1
# data/small: the files make reproduce's data rules look at (their time stamps keep their order: tar keeps them).
mkdir -p "$stage/data-small/raw"
cp -p data/small/{fetch.args,tokenizer.json,train.shard,interpolate.shard,extrapolate.shard,tokenize_manifest.json} \
  "$stage/data-small/"
cp -p data/small/raw/{fetch.stamp,manifest.json} "$stage/data-small/raw/"
cp -L "$(command -v make)" "$stage/tools/make"
mk/code_version.sh >"$stage/VERSION" 2>/dev/null || echo unknown >"$stage/VERSION"
source mk/gpu/cuda_versions.sh
cuda_major=$(gpu_runtime_cuda_major bin/train)
echo "$cuda_major" >"$stage/CUDA_RUNTIME"

tar czf build/gpu-bundle.tar.gz -C build gpu-bundle
mib=$(( ($(stat -c %s build/gpu-bundle.tar.gz) + 1048575) / 1048576 ))
max=${GPU_BUNDLE_MAX_MIB:-44}
if [ "$mib" -gt "$max" ]; then
  echo "gpu-bundle: build/gpu-bundle.tar.gz is $mib MiB, over GPU_BUNDLE_MAX_MIB=$max (with the tree it should stay" \
    "under 64 MiB); largest parts: $(du -sm "$stage"/* "$stage"/lib/* | sort -rn | head -n 4 | awk '{printf "%s %s MiB; ", $2, $1}')" >&2
  exit 1
fi
echo "gpu-bundle: build/gpu-bundle.tar.gz ($mib MiB; code $(cat "$stage/VERSION"); built for the CUDA $cuda_major" \
  "runtime: needs a driver that supports CUDA $cuda_major or later);" \
  "libraries: $(ls "$stage/lib" | tr '\n' ' ')"
