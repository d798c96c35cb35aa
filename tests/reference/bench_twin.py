"""CPU training-speed comparison, the body of `make bench-cpu`: the C model (tests/bench/bench_train_step.c) and the
PyTorch twin train the same configuration for the same number of steps on random batches of the config's shape
[batch_size, context] (Q+A loss, every position valid), float32, the same thread count; prints tokens/s of each and
the ratio C/twin.

Usage: /usr/bin/python3 tests/reference/bench_twin.py --config experiments/tiny/moeut_qa.json [--config ...]
           [--steps 5] [--threads 2] [--c-bench build/bench/bench_train_step]
A step = zero grads, n_microbatch x (forward + loss + backward with grad_scale 1/n_microbatch), global-norm clip,
AdamW at the scheduled lr; one untimed warm-up step precedes the timed ones on both sides.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import twin  # noqa: E402


def twin_bench(cfg_path, steps, threads):
    with open(cfg_path) as f:
        run = json.load(f)
    mc, tc = dict(run["model"]), run["train"]
    if mc["arch"] == "dense":
        mc.setdefault("d_head", mc["d_model"] // mc["n_heads"])
    else:
        defaults = dict(group_size=2, ff_k=8, att_k=2, ff_expert_size=128, entropy_reg=0.01, att_entropy_reg=0.001)
        for k, v in defaults.items():
            mc.setdefault(k, v)
        mc.setdefault("d_head", mc["d_model"] // mc["n_heads"])
    mc.setdefault("lm_head_bias", True)
    mc.setdefault("out_norm_affine", True)
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(int(tc["seed"]))
    model = twin.build_model(mc).float()
    twin.reference_init(model, gen)
    opt = torch.optim.AdamW(model.parameters(), lr=tc["lr"], betas=(tc["adam_beta1"], tc["adam_beta2"]),
                            eps=tc["adam_eps"], weight_decay=tc["weight_decay"])
    B, T, nmb = int(tc["batch_size"]), int(tc["context"]), int(tc["n_microbatch"])
    Bm, V = B // nmb, mc["n_tokens"]
    data_gen = torch.Generator().manual_seed(12345)
    t0, ce = None, float("nan")
    for s in range(steps + 1):
        if s == 1:
            t0, c0 = time.perf_counter(), time.process_time()  # step 0 is the untimed warm-up
        for g in opt.param_groups:
            g["lr"] = twin.lr_at(s, tc["lr"], tc["warmup"], tc["steps"], tc["min_lr_multiplier"])
        opt.zero_grad(set_to_none=False)
        for _ in range(nmb):
            window = torch.randint(3, V, (Bm, T + 1), generator=data_gen)
            res = twin.objective(model, window[:, :T], window[:, 1:], None, 1.0 / nmb)
            res["total"].backward()
            ce = float(res["ce"])
        if tc["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc["grad_clip"])
        opt.step()
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    tokens = steps * B * T
    n_params = sum(p.numel() for p in model.parameters())
    print(f"bench twin: {mc['arch']} steps {steps} tokens {tokens} seconds {secs:.3f} tokens_per_s {tokens / secs:.1f} "
          f"cpu_seconds {cpu:.3f} threads {threads} params {n_params} last_ce {ce:.4f} (torch {torch.__version__})",
          flush=True)
    return tokens / secs, tokens / cpu, n_params


def c_bench(exe, cfg_path, steps, threads):
    out = subprocess.run([exe, "--config", cfg_path, "--steps", str(steps), "--threads", str(threads)],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    sys.stdout.write(out)
    m = re.search(r"tokens ([0-9.]+) seconds [0-9.]+ tokens_per_s ([0-9.eE+-]+) cpu_seconds ([0-9.eE+-]+)"
                  r".* params (\d+)", out)
    if not m:
        raise SystemExit(f"bench_twin: cannot parse the C bench output: {out!r}")
    return float(m.group(2)), float(m.group(1)) / float(m.group(3)), int(m.group(4))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", action="append", required=True, help="run config (repeatable)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--c-bench", default=None, help="path of build/bench/bench_train_step (omit: twin only)")
    args = ap.parse_args()
    rows = []
    for cfg in args.config:
        print(f"== {cfg}: {args.steps} timed steps, {args.threads} threads, float32", flush=True)
        c = None
        if args.c_bench:
            *c, c_np = c_bench(args.c_bench, cfg, args.steps, args.threads)
        *t, t_np = twin_bench(cfg, args.steps, args.threads)
        if c is not None and c_np != t_np:
            raise SystemExit(f"bench_twin: {cfg}: parameter counts differ (C {c_np}, twin {t_np})")
        rows.append((cfg, c, t))
    print("\nbench-cpu summary: tokens/s of wall time (and of process CPU time), higher is better")
    print(f"  {'config':36s} {'C':>9s} {'twin':>9s} {'C/twin':>7s}   {'C cpu':>9s} {'twin cpu':>9s} {'C/twin':>7s}")
    for cfg, c, t in rows:
        if c:
            print(f"  {cfg:36s} {c[0]:9.1f} {t[0]:9.1f} {c[0] / t[0]:7.2f}   "
                  f"{c[1]:9.1f} {t[1]:9.1f} {c[1] / t[1]:7.2f}")
        else:
            print(f"  {cfg:36s} {'-':>9s} {t[0]:9.1f} {'-':>7s}   {'-':>9s} {t[1]:9.1f} {'-':>7s}")


if __name__ == "__main__":
    main()
