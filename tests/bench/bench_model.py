"""Cost model of one training step of the CUDA backend, without a GPU: the body of `make bench-model`.

A PREDICTION, NOT A MEASUREMENT. For each run config it prints the kernel launches, cuBLAS calls, memsets and copies
of one training step (forward, backward, clip, AdamW) with their FLOPs, bytes and roofline time on an H100 SXM and an
H200, grouped by backend op, the ten heaviest kernels, and the predicted step time and MFU; every launch, one per line,
goes to LAUNCHES_DIR/<config>.<precision>.launches.tsv (--print-launches also prints them).

Where the launches come from: the backend itself. build/emu/bench/bench_train_step runs one warm-up and one timed
step of the config (random tokens, --no-init weights) with the CUDA backend on the CUDA emulator's dry run
(CUDA_EMU_DRY_RUN=1: every launch is checked and recorded with its grid and the FLOPs and bytes its LAUNCH states,
every cuBLAS call with its problems, FLOPs, bytes and output tiles; nothing is computed, so a paper-size step takes
seconds) and writes the launch log (CUDA_EMU_LAUNCH_LOG, format in kernels/cuda/emu/cuda_emu_launch_log.cpp). The
step is what lies between bench_train_step's synchronize calls around its timed step, i.e. what make bench-gpu times.

Each record's time on each GPU of GPU_SPECS (tests/bench/bench_gpu.py), the roofline at the share of the GPU the
launch can fill:
  time = max(FLOPs / (rate x fill), bytes / (HBM bandwidth x fill))
  rate  the dense bf16 tensor-core peak for bf16 cuBLAS calls and for kernels whose LAUNCH states tensor-core FLOPs
        (tensor_core_cost in kernels/cuda/cuda_common.cuh: cvmm's wmma kernels and the flash attention kernels); the
        fp32 CUDA-core peak for fp32
        calls and every other kernel
  fill  min(1, parallel units / SMs): a kernel's thread blocks, a cuBLAS call's 128 x 128 output tiles (summed over
        its problems); a launch too small to give every SM work runs at that share of the GPU
  memsets and device-to-device copies: their bytes at HBM bandwidth; host<->device copies are not GPU time (counted)
The step's time is the sum (one stream: every launch waits for the one before). Not in it: the gaps between launches
and the waits at host synchronisations (both counted and printed), caches, clocks below peak, the imbalance of real
routing (the dry run gives every expert an equal share of the rows: cuda_cvmm_plan.cu; and gradient clipping scales
the gradients, as in most steps: cuda_loss_optim.cu). MFU = model FLOPs per step (train_flops_per_token of
bench_gpu.py x tokens, the PaLM convention make bench-gpu uses) / (time x bf16 peak).

Usage: python3 tests/bench/bench_model.py --exe build/emu/bench/bench_train_step [--config C ...] [--precision bf16]
           [--n-microbatch M] [--cvmm mma|grouped|loop] [--attention auto|fused|gemm|flash] [--matmul auto|plain]
           [--launches-dir DIR]
           [--print-launches]
"""
import argparse
import collections
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import CUDA_MICROBATCHES, DEFAULT_CONFIGS, GPU_SPECS, model_config, train_flops_per_token  # noqa: E402

import json  # noqa: E402

GPUS = ["H100 SXM", "H200"]  # the two columns, in GPU_SPECS


def fail(msg):
    print(f"bench-model: FAIL: {msg}", flush=True)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------------------------
# The launch log
# ---------------------------------------------------------------------------------------------------------------
Row = collections.namedtuple("Row", "index kind op name units flops bytes engine")  # one device operation
# kind: kernel | gemm | memset | d2d;  units: blocks or tiles (None: the whole GPU);  engine: tensor | cuda


def parse_log(path):
    """The log's records as tuples of fields (kernels/cuda/emu/cuda_emu_launch_log.cpp)."""
    records = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            if fields[0] not in ("launch", "gemm", "memset", "copy", "sync"):
                fail(f"{path}:{n}: unknown record '{fields[0]}'")
            records.append(fields)
    return records


def step_records(records, path):
    """The records of the timed step: between the last two synchronize calls (bench_train_step's, around it)."""
    marks = [i for i, r in enumerate(records) if r[0] == "sync" and r[1] == "synchronize"]
    if len(marks) < 2:
        fail(f"{path}: {len(marks)} synchronize records, expected the two around bench_train_step's timed step")
    return records[marks[-2] + 1:marks[-1]]


def step_rows(records):
    """The GPU work of the step as Rows, and the host side: copies to or from the host and synchronisations."""
    rows, host = [], collections.Counter()
    for r in records:
        kind, op = r[0], r[1]
        if kind == "launch":
            gx, gy, gz = (int(v) for v in r[3].split(","))
            rows.append(Row(len(rows), "kernel", op, r[2], gx * gy * gz, float(r[6]), float(r[7]), r[8]))
        elif kind == "gemm":
            engine = "tensor" if r[3] == "bf16" else "cuda"
            problems = f" ({r[4]} problems)" if int(r[4]) > 1 else ""
            rows.append(Row(len(rows), "gemm", op, f"{r[2]} {r[3]}{problems}", int(r[5]), float(r[6]), float(r[7]),
                            engine))
        elif kind == "memset":
            rows.append(Row(len(rows), "memset", op, "cudaMemset", None, 0.0, float(r[2]), "cuda"))
        elif kind == "copy" and r[2] == "d2d":
            rows.append(Row(len(rows), "d2d", op, "cudaMemcpy device-to-device", None, 0.0, 2.0 * float(r[4]),
                            "cuda"))
        elif kind == "copy":
            host[r[2] + "_copies"] += 1
            host[r[2] + "_bytes"] += int(r[4])
            host["syncs"] += r[3] == "sync"
        else:  # sync: cudaDeviceSynchronize or cudaFree
            host["syncs"] += 1
    return rows, host


# ---------------------------------------------------------------------------------------------------------------
# The roofline
# ---------------------------------------------------------------------------------------------------------------
def fill(row, gpu):
    return 1.0 if row.units is None else min(1.0, row.units / GPU_SPECS[gpu]["sms"])


def seconds(row, gpu, whole_gpu=False):
    """(compute time, memory time) of one row on gpu; the row's time is the larger."""
    spec = GPU_SPECS[gpu]
    share = 1.0 if whole_gpu else fill(row, gpu)
    rate = (spec["bf16_tflops"] if row.engine == "tensor" else spec["fp32_tflops"]) * 1e12
    return row.flops / (rate * share), row.bytes / (spec["hbm_tb_s"] * 1e12 * share)


def row_time(row, gpu, whole_gpu=False):
    return max(seconds(row, gpu, whole_gpu))


# ---------------------------------------------------------------------------------------------------------------
# One config
# ---------------------------------------------------------------------------------------------------------------
def dry_run(args, cfg, nmb, log_path):
    env = dict(os.environ, CUDA_EMU_DRY_RUN="1", CUDA_EMU_LAUNCH_LOG=log_path, DMMATH_CUDA_CVMM=args.cvmm,
               DMMATH_CUDA_ATTENTION=args.attention, DMMATH_CUDA_MATMUL=args.matmul, ASAN_OPTIONS="detect_leaks=0")
    cmd = [args.exe, "--config", cfg, "--backend", "cuda", "--precision", args.precision, "--steps", "1", "--warmup",
           "1", "--no-init", "--n-microbatch", str(nmb)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        fail(f"the dry run of {cfg} failed (exit {p.returncode}): {' '.join(cmd)}")


def fmt_ms(s):
    return f"{s * 1e3:10.3f}"


def write_launches(path, rows):
    with open(path, "w") as f:
        f.write("# " + "\t".join(["index", "kind", "op", "name", "units", "flops", "bytes"] +
                                 [f"{g} us" for g in GPUS]) + "\n")
        for r in rows:
            f.write("\t".join([str(r.index), r.kind, r.op, r.name, "-" if r.units is None else str(r.units),
                               f"{r.flops:.17g}", f"{r.bytes:.17g}"] +
                              [f"{row_time(r, g) * 1e6:.17g}" for g in GPUS]) + "\n")


def report(args, cfg):
    with open(cfg) as f:
        run = json.load(f)
    mc, tc = model_config(run), run["train"]
    T, batch = int(tc["context"]), int(tc["batch_size"])
    nmb = args.n_microbatch or CUDA_MICROBATCHES
    if batch % nmb:
        fail(f"{cfg}: batch size {batch} is not a multiple of {nmb} micro-batches")
    with tempfile.TemporaryDirectory(prefix="bench_model.") as tmp:
        log = os.path.join(tmp, "launch.log")
        dry_run(args, cfg, nmb, log)
        records = step_records(parse_log(log), log)
    rows, host = step_rows(records)
    if not rows:
        fail(f"{cfg}: the step recorded no GPU work")
    name = os.path.splitext(os.path.basename(cfg))[0]
    os.makedirs(args.launches_dir, exist_ok=True)
    launches_path = os.path.join(args.launches_dir, f"{name}.{args.precision}.launches.tsv")
    write_launches(launches_path, rows)

    totals = {g: sum(row_time(r, g) for r in rows) for g in GPUS}
    whole = {g: sum(row_time(r, g, whole_gpu=True) for r in rows) for g in GPUS}
    fl = train_flops_per_token(mc, T)
    tokens = batch * T
    model_flops = fl["total"] * tokens
    gemm_flops = sum(r.flops for r in rows if r.kind == "gemm")
    # tensor-core kernels: cvmm's (counted in the model FLOPs as its 2mnk) apart from the flash attention kernels'
    # (their executed tile products, masked halves of the diagonal tiles and head-dim padding included)
    tensor_rows = [r for r in rows if r.kind == "kernel" and r.engine == "tensor"]
    tensor_kernel_flops = sum(r.flops for r in tensor_rows if not r.op.startswith("attention_"))
    flash_kernel_flops = sum(r.flops for r in tensor_rows if r.op.startswith("attention_"))
    attention_on_gemm = any(r.kind == "gemm" and r.op.startswith("attention_") for r in rows)
    attention_path = "cuBLAS" if attention_on_gemm else "flash kernels" if flash_kernel_flops else "fused kernels"
    mfu = {g: model_flops / (totals[g] * GPU_SPECS[g]["bf16_tflops"] * 1e12) for g in GPUS}
    counts = collections.Counter(r.kind for r in rows)

    print(f"\n== bench-model: {cfg} ({mc['arch']}, {args.precision}; {batch} x {T} tokens per step in {nmb} "
          f"micro-batches; cvmm {args.cvmm}, attention {args.attention} -> "
          f"{attention_path}, matmul {args.matmul})")
    print("   A PREDICTION, NOT A MEASUREMENT: roofline times of the launches the CUDA backend issues for one training "
          "step,\n   recorded by the CUDA emulator's dry run (nothing computed; routing balanced, gradient clipping "
          "active)")
    print(f"   one step: {counts['kernel']} kernel launches, {counts['gemm']} cuBLAS calls, {counts['memset']} "
          f"memsets, {counts['d2d']} device-to-device copies; host: {host['h2d_copies']} uploads "
          f"({host['h2d_bytes']:,} bytes), "
          f"{host['d2h_copies']} downloads ({host['d2h_bytes']:,} bytes), {host['syncs']} host syncs")

    def table(title, groups, limit=None):
        print(f"\n   {title}")
        print(f"   {'':64s} {'launches':>8s} {'GFLOP':>9s} {'GB moved':>8s} {'bound':>7s} "
              f"{'H100 ms':>10s} {'H200 ms':>10s} {'share':>6s}")
        items = sorted(groups.items(), key=lambda kv: -sum(row_time(r, GPUS[0]) for r in kv[1]))
        for key, rs in items[:limit]:
            t = {g: sum(row_time(r, g) for r in rs) for g in GPUS}
            compute = sum(seconds(r, GPUS[0])[0] for r in rs if seconds(r, GPUS[0])[0] >= seconds(r, GPUS[0])[1])
            bound = "compute" if compute >= t[GPUS[0]] / 2 else "memory"
            print(f"   {key[:64]:64s} {len(rs):8d} {sum(r.flops for r in rs) / 1e9:9.1f} "
                  f"{sum(r.bytes for r in rs) / 1e9:8.2f} {bound:>7s} {fmt_ms(t[GPUS[0]])} {fmt_ms(t[GPUS[1]])} "
                  f"{100 * t[GPUS[0]] / totals[GPUS[0]]:5.1f}%")

    by_op, by_kernel = collections.defaultdict(list), collections.defaultdict(list)
    for r in rows:
        by_op[r.op].append(r)
        by_kernel[f"{r.op}: {r.name}"].append(r)
    table("per backend op (H100 SXM time order)", by_op)
    table("the ten heaviest kernels (op: kernel, summed over its launches; H100 SXM time order)", by_kernel, 10)

    print(f"\n   predicted step time (PREDICTION): H100 SXM {totals['H100 SXM'] * 1e3:.1f} ms (MFU "
          f"{100 * mfu['H100 SXM']:.1f}%), H200 {totals['H200'] * 1e3:.1f} ms (MFU {100 * mfu['H200']:.1f}%)")
    print(f"   if every launch filled the GPU (pure roofline): H100 SXM {whole['H100 SXM'] * 1e3:.1f} ms, "
          f"H200 {whole['H200'] * 1e3:.1f} ms")
    print(f"   model FLOPs per step {model_flops / 1e12:.2f} TFLOP (6 x {fl['active_params']:,} active parameters x "
          f"{tokens:,} tokens + attention {fl['attention'] * tokens / 1e12:.2f} TFLOP, tests/bench/bench_gpu.py); "
          f"cuBLAS FLOPs recorded {gemm_flops / 1e12:.2f} TFLOP, tensor-core kernel FLOPs (cvmm's mma path) "
          f"{tensor_kernel_flops / 1e12:.2f} TFLOP" +
          (f", flash attention kernels {flash_kernel_flops / 1e12:.2f} TFLOP" if flash_kernel_flops else ""))
    print(f"   not in the prediction: the gaps of {counts['kernel'] + counts['gemm']} launches and "
          f"{host['syncs']} host syncs where the GPU waits for the host; every launch: {launches_path}")
    # one line for scripts (tests/e2e/test_bench_model.sh): the figures above, unrounded
    print("bench-model summary: " + " ".join(f"{k}={v}" for k, v in [
        ("config", cfg), ("launches_file", launches_path), ("kernels", counts["kernel"]), ("gemms", counts["gemm"]),
        ("host_syncs", host["syncs"]), ("gemm_flops", repr(gemm_flops)),
        ("tensor_kernel_flops", repr(tensor_kernel_flops)), ("model_flops", repr(float(model_flops))),
        ("matmul_flops", repr(float(fl["matmul"] * tokens))),
        ("attention_flops", repr(float(fl["attention"] * tokens))),
        ("attention_on_gemm", int(attention_on_gemm)),
        ("h100_s", repr(totals["H100 SXM"])), ("h200_s", repr(totals["H200"])),
        ("h100_mfu", repr(mfu["H100 SXM"])), ("h200_mfu", repr(mfu["H200"]))]))
    if args.print_launches:
        print(f"\n   every launch ({len(rows)}): index kind op name units FLOPs bytes H100_us H200_us")
        for r in rows:
            print(f"   {r.index:6d} {r.kind:6s} {r.op:22s} {r.name:44s} {'-' if r.units is None else r.units:>8} "
                  f"{r.flops:14.6g} {r.bytes:14.6g} {row_time(r, GPUS[0]) * 1e6:10.3f} "
                  f"{row_time(r, GPUS[1]) * 1e6:10.3f}")
    if not (math.isfinite(totals["H100 SXM"]) and 0 < mfu["H100 SXM"] <= 1 and 0 < mfu["H200"] <= 1):
        fail(f"{cfg}: MFU outside (0, 1]: {mfu}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", required=True, help="build/emu/bench/bench_train_step (the emulator build)")
    ap.add_argument("--config", action="append", help="run config (repeatable; default: the paper's dense_qa and "
                    "moeut_qa)")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--n-microbatch", type=int, default=None,
                    help=f"micro-batches per step (default {CUDA_MICROBATCHES}, as make bench-gpu)")
    ap.add_argument("--cvmm", choices=["mma", "grouped", "loop"], default="mma",
                    help="cvmm's expert-GEMM path (default mma: the tensor-core kernels, what auto picks for bf16 "
                    "where cuBLAS refuses the grouped GEMM for bf16, as the H100's cuBLAS 13.0 does; fp32 operands "
                    "then run grouped; grouped: what auto picks where cuBLAS >= 12.5 passes its probe)")
    ap.add_argument("--attention", choices=["auto", "fused", "gemm", "flash"], default="auto",
                    help="DMMATH_CUDA_ATTENTION (flash: the tensor-core kernels, bf16 only; fp32 takes auto's path)")
    ap.add_argument("--matmul", choices=["auto", "plain"], default="auto",
                    help="DMMATH_CUDA_MATMUL (plain: no split-K, no bf16 conversion cache)")
    ap.add_argument("--launches-dir", default="build/bench/model", help="where the per-launch lists go")
    ap.add_argument("--print-launches", action="store_true", help="also print every launch")
    args = ap.parse_args()
    if not os.access(args.exe, os.X_OK):
        fail(f"{args.exe} is missing (make bench-model builds it)")
    if args.n_microbatch is not None and args.n_microbatch < 1:
        fail(f"--n-microbatch {args.n_microbatch}: must be >= 1")
    for cfg in args.config or DEFAULT_CONFIGS:
        report(args, cfg)


if __name__ == "__main__":
    main()
