#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# test_cuda_inspect.sh (bin/inspect on the CUDA backend against the CPU backend and the PyTorch twin, every fixture,
# fp32 and bf16) with the kernel paths the default does not take on these short fixtures: the cuBLAS attention
# (DMMATH_CUDA_ATTENTION=gemm; auto picks the fused kernels below 64 query rows) with the per-expert GEMM loop of cvmm
# (DMMATH_CUDA_CVMM=loop; auto picks the grouped GEMM where its probe passes), then the flash attention kernels
# (DMMATH_CUDA_ATTENTION=flash: bf16; fp32 takes auto's path), then the matmul comparator DMMATH_CUDA_MATMUL=plain
# (no conversion cache reuse, split-K, narrow forms, kept copies or joined linear_backward). Same tolerances, same
# skips.
# Then the narrow registry's fallback (kernels/cuda/cuda_bf16_cache.cu): with DMMATH_CUDA_NARROW_ENTRIES=0 (no
# narrow LayerNorm output: every one the exact fp32 y and a cached copy) and =1 (the first registered, the rest
# falling back while it lives), every fixture's bf16 output must be byte-identical to the default run's, in which
# MoEUT's backward reads the LN1 and LN2 outputs its forward kept (narrow ones) rather than recomputing them; and
# cuda_backend_ops' layernorm_forward_narrow cases (from CUDA_TEST_UNIT_DIR, default build/tests; left out where it
# is not built) with DMMATH_CUDA_NARROW_ENTRIES=4, below the 10 live narrow outputs of its case.
set -u
cd "$(dirname "$0")/../.."
DMMATH_CUDA_ATTENTION=gemm DMMATH_CUDA_CVMM=loop tests/e2e/test_cuda_inspect.sh || exit $?
DMMATH_CUDA_ATTENTION=flash tests/e2e/test_cuda_inspect.sh || exit $?
DMMATH_CUDA_MATMUL=plain tests/e2e/test_cuda_inspect.sh || exit $?

dut=${CUDA_TEST_BACKEND:-cuda}
dut_bin=${CUDA_TEST_BIN:-bin}
tmp=$(mktemp -d /tmp/test_cuda_inspect_narrow.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
n=0
for d in tests/fixtures/twin/*/; do
  name=$(basename "$d")
  [ -f "$d/batch.json" ] || continue
  for cap in default 0 1; do
    out="$tmp/$name.$cap"
    (
      [ "$cap" = default ] || export DMMATH_CUDA_NARROW_ENTRIES=$cap
      "$dut_bin"/inspect --weights "$d/weights.safetensors" --batch "$d/batch.json" --out "$out.st" \
        --backend "$dut" --precision bf16 >/dev/null 2>"$out.err"
    ) || { echo "FAIL: $name: narrow entries $cap: $(head -n 1 "$out.err")"; exit 1; }
    [ "$cap" = default ] || cmp -s "$tmp/$name.default.st" "$out.st" || {
      echo "FAIL: $name: bf16 output with DMMATH_CUDA_NARROW_ENTRIES=$cap differs from the default run's"; exit 1
    }
  done
  n=$((n + 1))
done
[ "$n" -ge 7 ] || { echo "FAIL: expected the committed twin fixtures, found $n"; exit 1; }
echo "PASS: $n fixtures' bf16 outputs byte-identical with the narrow registry at 0 and 1 entries"
ops=${CUDA_TEST_UNIT_DIR:-build/tests}/cuda_backend_ops
if [ "$dut" = cuda ] && [ -x "$ops" ]; then
  DMMATH_CUDA_NARROW_ENTRIES=4 "$ops" --op layernorm_forward_narrow >"$tmp/ops.log" 2>&1 || {
    echo "FAIL: $ops --op layernorm_forward_narrow with DMMATH_CUDA_NARROW_ENTRIES=4"; tail -n 20 "$tmp/ops.log"; exit 1
  }
  echo "PASS: layernorm_forward_narrow with 4 narrow entries: $(grep -E '^[0-9]+%: Checks' "$tmp/ops.log")"
else
  echo "note: $ops not run (not built, or not the cuda backend)"
fi
