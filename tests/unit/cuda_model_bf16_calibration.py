"""Calibration of the bf16 tolerances of tests/unit/cuda_model_vs_cpu.c (run by hand; no GPU needed):

    /usr/bin/python3 tests/unit/cuda_model_bf16_calibration.py

The C test compares the CUDA backend in bf16 mode with the CPU backend in fp32 on the same weights and batch. The
difference is bf16 rounding, which no closed-form bound follows through a whole model and its backward. This script
measures its size with the PyTorch twin on the CPU, on the same configs and batch shape as the C test (8 seeds of
weights and tokens), in two ways:
  operands  the CUDA backend's bf16 mode emulated: the operands of every matmul-like op (F.linear, the cvmm expert
            products, q.k and p.v of attention) are rounded to bf16, accumulation and outputs stay fp32; in the
            backward the gradients flowing out of those ops are rounded to bf16 (the GPU rounds the incoming gradient
            operand instead: one rounding of the same size per op);
  autocast  torch.autocast(bfloat16) on the CPU: rounds MORE (every matmul output and gradient too), an upper
            estimate.
The C test's bf16 tolerances are set from the operands figures (about 3x their worst case, see its comments) and
stay below the autocast worst cases only where those are dominated by output rounding the GPU does not do.

Error measure (as in the C test): ||x_bf16 - x_fp32||_2 / ||x_fp32||_2 per tensor (logits, every gradient tensor) and
|x_bf16 - x_fp32| / |x_fp32| for the scalars (CE, reg_ffn, reg_att).
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import twin  # noqa: E402

DENSE = {"arch": "dense", "n_tokens": 37, "d_model": 48, "n_layers": 3, "n_heads": 3, "d_head": 16, "d_ff": 80,
         "dropout": 0, "lm_head_bias": True, "out_norm_affine": True}
MOEUT_ALLK = {"arch": "moeut", "n_tokens": 37, "d_model": 48, "n_layers": 4, "n_heads": 2, "d_head": 20,
              "ff_n_experts": 6, "ff_expert_size": 12, "ff_k": 6, "att_n_experts": 3, "att_k": 3, "group_size": 2,
              "entropy_reg": 0.01, "att_entropy_reg": 0.001, "ff_expert_dropout": 0, "att_expert_dropout": 0,
              "dropout": 0, "lm_head_bias": False, "out_norm_affine": False}
B, T, LENS = 3, 24, (24, 17, 9)  # the C test's batch shape: padded rows, answer-only CE on the later 60%


def batch(V, gen):
    inputs = torch.zeros(B, T, dtype=torch.long)
    targets = torch.full((B, T), -1, dtype=torch.long)
    ce_targets = targets.clone()
    for b, n in enumerate(LENS):
        row = torch.randint(3, V, (n + 1,), generator=gen)
        inputs[b, :n] = row[:n]
        targets[b, :n] = row[1:]
        q = (2 * n) // 5  # question part: not counted by the CE (answer-only), still valid for the regularizer
        ce_targets[b, q:n] = row[1 + q:]
    return inputs, ce_targets, targets >= 0


class RoundBf16(torch.autograd.Function):
    """Forward: x rounded to bf16 (kept as fp32). Backward: the incoming gradient rounded to bf16."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g.to(torch.bfloat16).to(g.dtype)


R = RoundBf16.apply
_linear, _cvmm, _attention = torch.nn.functional.linear, twin.cvmm, twin.causal_attention


def linear_rounded(x, w, b=None):
    return _linear(R(x), R(w), b)


def cvmm_rounded(X, rows, sel, W):
    return _cvmm(R(X), rows, sel, R(W))


def attention_rounded(q, k, v):
    T = q.shape[-2]
    scores = R(q) @ R(k).transpose(-1, -2)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    p = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    return R(p) @ R(v)


def emulate_operands(on):
    torch.nn.functional.linear = linear_rounded if on else _linear
    twin.cvmm = cvmm_rounded if on else _cvmm
    twin.causal_attention = attention_rounded if on else _attention


def measure(cfg, seed, mode):
    gen = torch.Generator().manual_seed(seed)
    model = twin.build_model(cfg).float()
    twin.reference_init(model, gen)
    with torch.no_grad():  # as the C test: init + N(0, 0.05) noise so biases and LayerNorm affines matter
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    inputs, ce_targets, valid = batch(cfg["n_tokens"], gen)
    out = []
    for bf16 in (False, True):
        model.zero_grad()
        emulate_operands(bf16 and mode == "operands")
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=bf16 and mode == "autocast"):
            res = twin.objective(model, inputs, ce_targets, valid, 1.0)
        res["total"].backward()
        emulate_operands(False)
        vals = {"logits": res["logits"].detach().float(), "ce": float(res["ce"]), "reg_ffn": float(res["reg_ffn"]),
                "reg_att": float(res["reg_att"])}
        vals.update({"grad." + n: p.grad.detach().float().clone() for n, p in model.named_parameters()})
        out.append(vals)
    ref, got = out
    err = {}
    for k, r in ref.items():
        g = got[k]
        if isinstance(r, float):
            err[k] = abs(g - r) / abs(r) if r != 0 else abs(g)
        else:
            err[k] = float((g - r).norm() / r.norm()) if float(r.norm()) > 0 else float(g.norm())
    return err


def measure_fixture(fdir, mode):
    """The same measurement on a committed twin fixture (its weights and batch, as bin/inspect runs them): the bf16
    checks of tests/e2e/test_cuda_inspect.sh on the dense fixtures use the bounds set from the figures above."""
    import json
    import st_io
    tensors, meta = st_io.load(os.path.join(fdir, "weights.safetensors"))
    cfg = json.loads(meta["config"])
    model = twin.build_model(cfg).float()
    model.load_state_dict({k: v.float() for k, v in tensors.items()})
    b = json.load(open(os.path.join(fdir, "batch.json")))
    inputs, targets = torch.tensor(b["inputs"]), torch.tensor(b["targets"])
    mask = torch.tensor(b.get("loss_mask", [[1] * len(r) for r in b["targets"]])).bool()
    valid = targets >= 0
    ce_targets = torch.where(valid & mask, targets, torch.full_like(targets, -1))
    out = []
    for bf16 in (False, True):
        model.zero_grad()
        emulate_operands(bf16 and mode == "operands")
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=bf16 and mode == "autocast"):
            res = twin.objective(model, inputs, ce_targets, valid, 1.0)
        res["total"].backward()
        emulate_operands(False)
        vals = {"logits": res["logits"].detach().float(), "ce": float(res["ce"])}
        vals.update({"grad." + n: p.grad.detach().float().clone() for n, p in model.named_parameters()})
        out.append(vals)
    err = {}
    for k, r in out[0].items():
        g = out[1][k]
        err[k] = abs(g - r) / abs(r) if isinstance(r, float) else float((g - r).norm() / r.norm())
    return err


def main():
    u = 2.0 ** -8  # bf16 unit roundoff (8 significand bits, round to nearest)
    fix = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "twin")
    for name in ("dense_tiny_off", "dense_tiny_on"):
        for mode in ("operands", "autocast"):
            e = measure_fixture(os.path.join(fix, name), mode)
            g = max(v for k, v in e.items() if k.startswith("grad."))
            print(f"{mode:8s} fixture {name:15s} logits {e['logits'] / u:5.2f} u, ce {e['ce'] / u:5.2f} u, "
                  f"worst gradient {g / u:6.2f} u")
    for mode in ("operands", "autocast"):
        for name, cfg in (("dense", DENSE), ("moeut_allk", MOEUT_ALLK)):
            worst, grads = {}, []
            for seed in range(1, 9):
                for k, e in measure(cfg, seed, mode).items():
                    kind = "logits" if k == "logits" else ("grad" if k.startswith("grad.") else "scalar " + k)
                    if kind == "grad":
                        grads.append(e)
                    if e > worst.get(kind, (0, ""))[0]:
                        worst[kind] = (e, k, seed)
            for kind, (e, k, seed) in sorted(worst.items()):
                print(f"{mode:8s} {name:11s} {kind:16s} worst {e:.3e} = {e / u:6.2f} u  ({k}, seed {seed})")
            grads.sort()
            print(f"{mode:8s} {name:11s} grad median {grads[len(grads) // 2] / u:.2f} u, 90th percentile "
                  f"{grads[int(0.9 * len(grads))] / u:.2f} u over {len(grads)} tensors")


if __name__ == "__main__":
    main()
