#!/usr/bin/env bash
# The CUDA backend is built only when asked for (Makefile, "CUDA: built only when asked for"), with a fake nvcc first
# on PATH that records every call:
#  - in this (CPU) build tree: `make all` and a whole `make reproduce` (a scratch copy of experiment ci, one run)
#    never call it; BACKEND=cuda without nvcc is one error line before anything is built, and a dry run still plans;
#  - in a scratch clone: `make all CUDA=1` calls it (and stops at its failure, before compiling the C objects, and
#    leaves no CUDA marker); a successful CUDA build writes build/cuda.enabled, after which a plain make (also
#    BACKEND=cpu) stays a CUDA build and CUDA=0 switches back (a dry run shows the compile flags); a tree whose libnn.a holds the CUDA objects (built
#    before the marker existed) counts as a CUDA build; `make test-cuda` asks for CUDA, `make test`'s inner make
#    does not.
# Needs a CPU build tree (it checks that a CPU make calls no nvcc); in a CUDA build tree it skips (exit 77).
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
# make as a user types it: not the flags or variables of a make that runs this test.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u CUDA -u BACKEND make --no-print-directory "$@"; }
[ -x bin/train ] || fail "bin/train missing (run make first)"
if [ -e build/cuda.enabled ] || { [ -f build/libnn.a ] && grep -qx cuda_backend.o <<<"$(ar t build/libnn.a)"; }; then
  echo "SKIP: this build tree is a CUDA build (build/cuda.enabled): the CPU checks need a CPU build tree (make CUDA=0)"
  exit 77
fi
tmp=$(mktemp -d /tmp/test_make_cuda.XXXXXX)
exp=zz_cuda_optin_$$
cleanup() { rm -rf "$tmp" "experiments/$exp" "data/$exp" "runs/$exp" "reports/$exp" "build/reproduce/$exp"; }
trap cleanup EXIT

# Two fake nvcc: one fails, one writes an empty object (a CUDA build that links nothing real: enough for libnn.a).
calls=$tmp/nvcc.calls
mkdir -p "$tmp/failing" "$tmp/working"
printf '#!/bin/sh\necho "nvcc $*" >>"%s"\necho "fake nvcc: refusing" >&2\nexit 1\n' "$calls" >"$tmp/failing/nvcc"
cat >"$tmp/working/nvcc" <<EOF
#!/bin/sh
echo "nvcc \$*" >>"$calls"
while [ \$# -gt 0 ]; do [ "\$1" = -o ] && out=\$2; shift; done
echo 'int fake_cuda_object;' | gcc -x c -c - -o "\$out"
EOF
chmod +x "$tmp/failing/nvcc" "$tmp/working/nvcc"
nvcc_calls() { [ -f "$calls" ] && wc -l <"$calls" || echo 0; }

# ---- this build tree: CPU ----
PATH=$tmp/failing:$PATH mk all >"$tmp/all.log" 2>&1 || { cat "$tmp/all.log"; fail "make all with a fake nvcc on PATH"; }
[ "$(nvcc_calls)" = 0 ] || { cat "$calls"; fail "a CPU make all called nvcc"; }
mkdir -p "experiments/$exp"
cp experiments/ci/data.json experiments/ci/dense_qa.json "experiments/$exp/"
# (shortened by SET: which compiler the stages' make calls is under test, not the run)
PATH=$tmp/failing:$PATH mk reproduce EXPERIMENT="$exp" RUNS=dense_qa \
  SET="train.steps=4 evaluate.max_examples_per_set=20 analyze.eval_prompts=2" >"$tmp/reproduce.log" 2>&1 ||
  { tail -30 "$tmp/reproduce.log"; fail "make reproduce with a fake nvcc on PATH"; }
grep -q '^reproduce: done' "$tmp/reproduce.log" || { tail -30 "$tmp/reproduce.log"; fail "make reproduce did not finish"; }
grep -q '^bin/train ' "$tmp/reproduce.log" || fail "make reproduce trained nothing"
[ "$(nvcc_calls)" = 0 ] || { cat "$calls"; fail "a CPU make reproduce called nvcc"; }
[ ! -e build/cuda.enabled ] || fail "a CPU build wrote build/cuda.enabled"
echo "ok: with nvcc on PATH, a CPU make all and make reproduce (fetch to report) never call it"

rc=0; mk all BACKEND=cuda NVCC= >"$tmp/missing.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || { cat "$tmp/missing.log"; fail "BACKEND=cuda without nvcc exited 0"; }
[ "$(wc -l <"$tmp/missing.log")" = 1 ] && grep -q 'BACKEND=cuda asks for the CUDA build, but nvcc was not found' \
  "$tmp/missing.log" || { cat "$tmp/missing.log"; fail "BACKEND=cuda without nvcc: expected one error line"; }
mk -n reproduce EXPERIMENT="$exp" RUNS=dense_qa BACKEND=cuda NVCC= >"$tmp/dry.log" 2>&1 ||
  { cat "$tmp/dry.log"; fail "make -n reproduce BACKEND=cuda without nvcc (a dry run) failed"; }
grep -q -- '^bin/train .*--backend cuda' "$tmp/dry.log" || { cat "$tmp/dry.log"; fail "the dry run lists no CUDA train"; }
echo "ok: BACKEND=cuda without nvcc: $(cat "$tmp/missing.log" | cut -c1-100)...; a dry run still plans"

# ---- a scratch clone: asking for CUDA ----
clone=$tmp/clone
git clone -q --no-checkout "$(git rev-parse --show-toplevel)" "$clone"
git -C "$clone" checkout -q "$(git rev-parse HEAD)"
cp Makefile "$clone/"; cp -r mk/. "$clone/mk/" # this checkout's make files (possibly uncommitted)
cmk() { PATH=$1:$PATH mk -C "$clone" OPT=-O0 "${@:2}"; } # cmk NVCC_DIR ARGS...: make in the clone (fast flags)
rc=0; cmk "$tmp/failing" all CUDA=1 >"$tmp/cuda1.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || { cat "$tmp/cuda1.log"; fail "make all CUDA=1 with a failing nvcc exited 0"; }
grep -q '^nvcc .*kernels/cuda/.*\.cu' "$calls" || { cat "$tmp/cuda1.log"; fail "make all CUDA=1 did not call nvcc"; }
[ "$(grep -c '^  CC ' "$tmp/cuda1.log" || true)" -le 2 ] ||
  { cat "$tmp/cuda1.log"; fail "make all CUDA=1 compiled C objects before trying nvcc"; }
[ ! -e "$clone/build/cuda.enabled" ] || fail "a failed CUDA build wrote the marker"
echo "ok: make all CUDA=1 calls nvcc first ($(head -1 "$calls" | cut -c1-60)...) and stops at its failure"

: >"$calls"
cmk "$tmp/working" CUDA=1 build/libnn.a >"$tmp/libnn.log" 2>&1 || { cat "$tmp/libnn.log"; fail "make CUDA=1 build/libnn.a"; }
[ "$(nvcc_calls)" = "$(ls kernels/cuda/*.cu | wc -l)" ] || { cat "$calls"; fail "expected one nvcc call per kernels/cuda/*.cu"; }
[ -e "$clone/build/cuda.enabled" ] || fail "a CUDA build did not write build/cuda.enabled"
has_cuda_flags() { grep -q -- '-DHAVE_CUDA.* -o build/obj/' "$1"; } # a C compile command of the main build
cmk "$tmp/working" -n V=1 all >"$tmp/sticky.log" 2>&1
has_cuda_flags "$tmp/sticky.log" || { head "$tmp/sticky.log"; fail "after a CUDA build, a plain make is not a CUDA build"; }
cmk "$tmp/working" -n V=1 all BACKEND=cpu >"$tmp/sticky_cpu.log" 2>&1
has_cuda_flags "$tmp/sticky_cpu.log" || fail "after a CUDA build, make BACKEND=cpu would rebuild for the CPU (and relink)"
cmk "$tmp/working" -n V=1 all CUDA=0 >"$tmp/cuda0.log" 2>&1
! has_cuda_flags "$tmp/cuda0.log" || fail "CUDA=0 does not switch back to the CPU build"
rm "$clone/build/cuda.enabled" # libnn.a still holds the CUDA objects: a tree built before the marker existed
cmk "$tmp/working" -n V=1 all >"$tmp/legacy.log" 2>&1
has_cuda_flags "$tmp/legacy.log" || fail "a tree whose libnn.a holds the CUDA objects is not taken as a CUDA build"
rm "$clone/build/libnn.a"
cmk "$tmp/working" -n V=1 all >"$tmp/plain.log" 2>&1
! has_cuda_flags "$tmp/plain.log" || fail "without the marker and CUDA objects, a plain make is a CUDA build"
cmk "$tmp/working" -n V=1 test-cuda >"$tmp/goal.log" 2>&1 || true
has_cuda_flags "$tmp/goal.log" || fail "make test-cuda does not ask for the CUDA build"
cmk "$tmp/working" -n V=1 test >"$tmp/test.log" 2>&1 || true
grep -q -- '-o build/obj/' "$tmp/test.log" || { tail "$tmp/test.log"; fail "make -n test lists no compile command"; }
! has_cuda_flags "$tmp/test.log" || fail "make test (its inner make's test-cuda) asks for the CUDA build"
echo "ok: a CUDA build writes build/cuda.enabled and stays one (BACKEND=cpu too) until CUDA=0; make test-cuda asks for it, make test does not"
