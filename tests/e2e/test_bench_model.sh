#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# make bench-model's cost model (tests/bench/bench_model.py) on small configs, checked for internal consistency:
#   - the predicted step time of each GPU is the sum of the per-launch times in the launch list it writes, and the
#     list has one kernel row per kernel launch the summary counts;
#   - the cuBLAS FLOPs the emulator recorded, plus those cvmm's tensor-core kernels state (their 2mnk, the default
#     --cvmm mma), equal the model FLOPs of tests/bench/bench_gpu.py: 6 x active parameters
#     x tokens for the matmuls, plus, where attention runs on cuBLAS, 7/6 of the attention term (the forward's QK^T and
#     PV, the backward's recomputed QK^T, dP, dV, dQ, dK: 7 products where the PaLM count has 6); with the fused
#     or the flash attention kernels the matmuls alone (the flash kernels' tensor-core FLOPs, their executed tiles,
#     are summed apart);
#   - MFU in (0, 1], the output labelled a prediction, ten heaviest kernels listed;
#   - the paper's MoEUT and dense bf16 steps wait for the device at most 3 times (each micro-batch's one read of its
#     loss and regularizers, the gradient norm), and the MoEUT step is predicted at most 0.25 s on an H100 SXM;
#   - the dry run (CUDA_EMU_DRY_RUN=1, nothing computed) issues the same step as an executed run on the emulator:
#     the same records in the same order with the same grids and costs, except where real routing decides (the
#     grouped GEMMs' problem lists and the pointer kernel over the non-empty experts: the dry run gives every expert
#     rows), and there the GEMM FLOPs still agree.
# Builds build/emu/bench/bench_train_step (the emulator build) when missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
tmp=$(mktemp -d /tmp/test_bench_model.XXXXXX)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
exe=build/emu/bench/bench_train_step
${MAKE:-make} -s --no-print-directory "$exe" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log"; fail "cannot build $exe"; }
tiny=tests/bench/configs/moeut_cost_model_tiny.json
narrow=(tests/bench/configs/dense_paper_layout_narrow.json tests/bench/configs/moeut_paper_layout_narrow.json)

# check_summary OUTPUT_FILE: every "bench-model summary:" line of a run, checked against its launch list
check_summary() {
  /usr/bin/python3 - "$1" <<'PY'
import sys
TENSOR_KERNELS = ("k_mma_rows", "k_mma_rows_bf16", "k_mma_rows_relu_grad", "k_mma_dw")  # cvmm's (cuda_cvmm_mma.cu)
out = open(sys.argv[1]).read()
lines = [l for l in out.splitlines() if l.startswith("bench-model summary: ")]
if not lines:
    sys.exit("FAIL: no summary line")
for line in lines:
    s = dict(kv.split("=", 1) for kv in line[len("bench-model summary: "):].split())
    name = s["config"]
    rows = [l.split("\t") for l in open(s["launches_file"]) if not l.startswith("#")]
    for col, key in ((7, "h100_s"), (8, "h200_s")):
        total = sum(float(r[col]) for r in rows) * 1e-6
        if abs(total - float(s[key])) > 1e-9 * float(s[key]):
            sys.exit(f"FAIL: {name}: {key} {s[key]} is not the sum of the launch list's rows ({total})")
    kernels = sum(r[1] == "kernel" for r in rows)
    gemms = sum(r[1] == "gemm" for r in rows)
    if kernels != int(s["kernels"]) or gemms != int(s["gemms"]):
        sys.exit(f"FAIL: {name}: the list has {kernels} kernels and {gemms} cuBLAS calls, the summary "
                 f"{s['kernels']} and {s['gemms']}")
    gemm_flops = sum(float(r[5]) for r in rows if r[1] == "gemm")
    if abs(gemm_flops - float(s["gemm_flops"])) > 1e-9 * gemm_flops:
        sys.exit(f"FAIL: {name}: the list's cuBLAS FLOPs {gemm_flops} differ from the summary's {s['gemm_flops']}")
    tensor_flops = sum(float(r[5]) for r in rows if r[1] == "kernel" and r[3] in TENSOR_KERNELS)
    if abs(tensor_flops - float(s["tensor_kernel_flops"])) > 1e-9 * max(tensor_flops, 1.0):
        sys.exit(f"FAIL: {name}: the list's tensor-core kernel FLOPs {tensor_flops} differ from the summary's "
                 f"{s['tensor_kernel_flops']}")
    expect = float(s["matmul_flops"]) + (7 / 6 * float(s["attention_flops"]) if s["attention_on_gemm"] == "1" else 0)
    if abs(gemm_flops + tensor_flops - expect) > 1e-9 * expect:
        sys.exit(f"FAIL: {name}: cuBLAS FLOPs {gemm_flops:.6g} + tensor-core kernel FLOPs {tensor_flops:.6g}, "
                 f"expected {expect:.6g} from the model FLOPs "
                 f"(matmul {float(s['matmul_flops']):.6g}, attention {float(s['attention_flops']):.6g}, on cuBLAS: "
                 f"{s['attention_on_gemm']})")
    for key in ("h100_mfu", "h200_mfu"):
        if not 0 < float(s[key]) <= 1:
            sys.exit(f"FAIL: {name}: {key} {s[key]} outside (0, 1]")
    if not float(s["h200_s"]) < float(s["h100_s"]):
        sys.exit(f"FAIL: {name}: the H200 (more bandwidth, same peak) is not faster: {s['h200_s']} vs {s['h100_s']}")
    print(f"ok: {name}: step = sum of {len(rows)} listed rows; cuBLAS + tensor-core kernel FLOPs = model FLOPs "
          f"({'with' if s['attention_on_gemm'] == '1' else 'without'} 7/6 attention); MFU "
          f"{100 * float(s['h100_mfu']):.1f}% (H100), {100 * float(s['h200_mfu']):.1f}% (H200)")
if (out.count("A PREDICTION, NOT A MEASUREMENT") != len(lines) or
        out.count("predicted step time (PREDICTION)") != len(lines)):
    sys.exit("FAIL: a config's output is not labelled a prediction")
PY
}

run_model() { # NAME ARGS...: bench_model.py into $tmp/NAME.out, its launch lists into $tmp/NAME/
  local name=$1
  shift
  /usr/bin/python3 tests/bench/bench_model.py --exe "$exe" --launches-dir "$tmp/$name" "$@" >"$tmp/$name.out" 2>&1 ||
    { cat "$tmp/$name.out"; fail "bench_model.py $*"; }
}

run_model narrow --config "${narrow[0]}" --config "${narrow[1]}"
check_summary "$tmp/narrow.out"
heavy=$(awk '/the ten heaviest kernels/ {on = 1; getline; next} on && NF == 0 {on = 0} on' "$tmp/narrow.out" | wc -l)
[ "$heavy" = 20 ] ||
  { cat "$tmp/narrow.out"; fail "expected ten heaviest kernels per config, got $heavy rows for two"; }
echo "ok: ten heaviest kernels listed per config"

# The host synchronisations of a paper-size bf16 step (bench_gpu.py's 2 micro-batches): each micro-batch reads its
# loss and regularizer sums once (read_values, with the device's error record) and the step reads its gradient norm
# once for clipping; the uploads are asynchronous and the rest stays on the device. A wait that comes back fails here.
# And the paper MoEUT step's predicted H100 time stays within the design's budget (the four paper runs in a day on one
# H100 need about 0.2 s; the budget is 0.25 s): a change that adds launches or bytes past it fails here.
run_model paper --config experiments/paper/moeut_qa.json --config experiments/paper/dense_qa.json
/usr/bin/python3 - "$tmp/paper.out" <<'PY' || { cat "$tmp/paper.out"; fail "host synchronisations or predicted time of the paper step"; }
import sys
MAX_SYNCS = 3  # 2 micro-batches' read_values + the gradient norm
MOEUT_H100_BUDGET_S = 0.25
lines = [l for l in open(sys.argv[1]) if l.startswith("bench-model summary: ")]
if len(lines) != 2:
    sys.exit(f"FAIL: {len(lines)} summary lines, expected 2")
for line in lines:
    s = dict(kv.split("=", 1) for kv in line.split()[2:])
    if int(s["host_syncs"]) > MAX_SYNCS:
        sys.exit(f"FAIL: {s['config']}: {s['host_syncs']} host synchronisations per step, at most {MAX_SYNCS} expected")
    print(f"ok: {s['config']}: {s['host_syncs']} host synchronisations per step (at most {MAX_SYNCS})")
    if s["config"].endswith("moeut_qa.json"):
        if float(s["h100_s"]) > MOEUT_H100_BUDGET_S:
            sys.exit(f"FAIL: {s['config']}: predicted H100 step {float(s['h100_s']) * 1e3:.1f} ms, over the "
                     f"{MOEUT_H100_BUDGET_S * 1e3:.0f} ms budget")
        print(f"ok: {s['config']}: predicted H100 step {float(s['h100_s']) * 1e3:.1f} ms (at most "
              f"{MOEUT_H100_BUDGET_S * 1e3:.0f})")
PY

run_model fused --config "$tiny" --attention fused
run_model gemm --config "$tiny" --attention gemm --cvmm loop --print-launches
run_model flash --config "$tiny" --attention flash
check_summary "$tmp/fused.out"
check_summary "$tmp/gemm.out"
check_summary "$tmp/flash.out"
grep -q "attention fused -> fused kernels" "$tmp/fused.out" && grep -q "attention gemm -> cuBLAS" "$tmp/gemm.out" &&
  grep -q "attention flash -> flash kernels" "$tmp/flash.out" || fail "the attention path is not the one asked for"
grep -q "attention_backward: k_flash_bwd_dkdv" "$tmp/flash.out" ||
  { cat "$tmp/flash.out"; fail "the flash attention kernels are not priced"; }
echo "ok: --attention flash prices the flash kernels"
printed=$(awk '/every launch \(/ {on = 1; next} on && NF' "$tmp/gemm.out" | wc -l)
listed=$(grep -vc '^#' "$tmp/gemm/moeut_cost_model_tiny.bf16.launches.tsv")
[ "$printed" = "$listed" ] || fail "--print-launches printed $printed launches, the list has $listed"
echo "ok: --print-launches prints every launch of the list ($listed)"

# The dry run against an executed run of the same step on the emulator.
step() { # LOG: the records between the last two synchronize calls
  awk -F'\t' '!/^#/ {r[NR] = $0; if ($1 == "sync" && $2 == "synchronize") { a = b; b = NR } }
              END { for (i = a + 1; i < b; i++) if (i in r) print r[i] }' "$1"
}
# With cvmm on the grouped GEMM (routing-sized records) and on the tensor-core kernels (grids over an upper bound of
# row tiles, costs from the row count: nothing routing-sized, so every record must match).
for cvmm in grouped mma; do
  for mode in dry executed; do
    dry=0; [ $mode = dry ] && dry=1
    CUDA_EMU_DRY_RUN=$dry CUDA_EMU_LAUNCH_LOG=$tmp/$cvmm.$mode.log ASAN_OPTIONS=detect_leaks=0 DMMATH_CUDA_CVMM=$cvmm \
      DMMATH_CUDA_ATTENTION=gemm "$exe" --config "$tiny" --backend cuda --precision bf16 --steps 1 --warmup 1 \
      >"$tmp/$cvmm.$mode.out" 2>&1 || { cat "$tmp/$cvmm.$mode.out"; fail "the $mode run of $tiny (cvmm $cvmm) failed"; }
    step "$tmp/$cvmm.$mode.log" >"$tmp/$cvmm.$mode.step"
  done
  /usr/bin/python3 - "$tmp/$cvmm.dry.step" "$tmp/$cvmm.executed.step" "$cvmm" <<'PY'
import sys
dry, ex = ([l.rstrip("\n").split("\t") for l in open(p)] for p in sys.argv[1:3])
cvmm = sys.argv[3]
if len(dry) != len(ex) or len(dry) < 100:
    sys.exit(f"FAIL: cvmm {cvmm}: the dry step has {len(dry)} records, the executed one {len(ex)}")
routed = mma = 0
for i, (d, e) in enumerate(zip(dry, ex)):
    mma += d[0] == "launch" and d[2] in ("k_mma_rows", "k_mma_rows_bf16", "k_mma_rows_relu_grad", "k_mma_dw")
    if cvmm == "grouped" and d[0] == "launch" and d[2] == "k_expert_pointers" and e[:3] == d[:3]:
        routed += 1  # its grid and bytes follow the non-empty experts
    elif cvmm == "grouped" and d[0] == "gemm" and d[2] == "cublasGemmGroupedBatchedEx" and e[:4] == d[:4] and \
            e[6] == d[6]:
        routed += 1  # problems, tiles and bytes follow the routing; the FLOPs (all rows) do not
    elif d != e:
        sys.exit(f"FAIL: cvmm {cvmm}: record {i} of the step differs: dry {d}, executed {e}")
if not (routed if cvmm == "grouped" else mma):
    sys.exit(f"FAIL: cvmm {cvmm}: no expert GEMM of that path in the step (the comparison did not cover cvmm)")
print(f"ok: cvmm {cvmm}: the dry run's step is the executed step: {len(dry)} records alike ({routed} routing-sized "
      f"ones alike in kind and FLOPs, {mma} tensor-core kernel launches)")
PY
done
