"""GPU training-speed benchmark, the body of `make bench-gpu`: the C model on the CUDA backend
(build/bench/bench_train_step --backend cuda) and a PyTorch implementation of the same model train the same config on
the same GPU, on random batches of the same shape; prints tokens/s of each, the ratio C/PyTorch and the model FLOPs
utilisation (MFU) of each.

Usage (GPU):   python3 tests/bench/bench_gpu.py --c-bench build/bench/bench_train_step
                   [--config experiments/paper/dense_qa.json --config experiments/paper/moeut_qa.json]
                   [--steps 10] [--warmup 2] [--batch-size 64] [--n-microbatch 2]
Validation without a GPU (tiny configs, fp32, CPU; MFU n/a):
               /usr/bin/python3 tests/bench/bench_gpu.py --device cpu --config experiments/tiny/moeut_qa.json \
                   --c-bench build/bench/bench_train_step --steps 1 --warmup 1
FLOP accounting only:   --flops        Self-checks (hand-computed FLOP counts; fast vs twin kernels):   --self-test

What one step is, on both sides: zero grads, n_microbatch x (forward + loss + backward, grad_scale 1/n_microbatch),
global-norm clip, AdamW at the scheduled lr; every position valid, targets = the next token (the Q+A loss shape, so
the work equals a training step on full windows). --warmup untimed steps precede the --steps timed ones. Precision:
bf16 autocast with fp32 master weights and fp32 AdamW state on the PyTorch side; the C side runs the config with
--precision bf16 (bf16 operands and fp32 accumulation in matmul, cvmm and attention; backend.h / cuda_common.cuh).

The PyTorch implementation is the twin (tests/reference/twin.py: DenseLM / MoEUTLM, objective, reference_init, lr_at)
with three of its module-level functions swapped for fast equivalents of the same math (use_fast_kernels below):
  * causal_attention -> F.scaled_dot_product_attention(is_causal=True, scale=1) (flash attention; the twin builds the
    whole [B,H,T,T] score tensor, about 2 GiB per dense layer at 32 x 1024 tokens, kept for the backward);
  * cvmm -> one grouped GEMM (torch.nn.functional.grouped_mm, else torch._grouped_mm) over the expert-sorted rows:
    the twin's cvmm already sorts rows by expert and gathers them once (index_select), but then loops over experts in
    Python: 387 matmuls per call, about 42,000 kernel launches per MoEUT micro-batch forward+backward, which would
    measure Python overhead rather than the GPU;
  * rope_tables -> cached per (T, n_rot, dtype, device) (the twin rebuilds the table on the host every forward).
Where grouped_mm is missing or fails its probe, the twin's loop is used and the output says so. --self-test checks
the fast functions against the twin's on the same inputs (run it first on the GPU).

MFU = tokens/s x training FLOPs per token / peak dense bf16 throughput of the GPU (train_flops_per_token below).
"""
import argparse
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

DEFAULT_CONFIGS = ["experiments/paper/dense_qa.json", "experiments/paper/moeut_qa.json"]
# Micro-batches per step on a GPU unless --n-microbatch says otherwise: 32-window micro-batches for the paper configs.
CUDA_MICROBATCHES = 2


def fail(msg):
    """One line on stdout, exit 1 (make bench-gpu's failure contract)."""
    print(f"bench-gpu: FAIL: {msg}", flush=True)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------------------------
# FLOP accounting
# ---------------------------------------------------------------------------------------------------------------
# The GPUs the project targets, from NVIDIA's data sheets: dense (no sparsity) bf16 tensor-core peak and fp32
# CUDA-core (non-tensor) peak in TFLOP/s, HBM bandwidth in TB/s, streaming multiprocessors. H100 SXM5 (the device
# reports itself as "NVIDIA H100 80GB HBM3") and H200 SXM. MFU here and the cost model (bench_model.py) use them.
GPU_SPECS = {
    "H100 SXM": {"bf16_tflops": 989.4, "fp32_tflops": 67.0, "hbm_tb_s": 3.35, "sms": 132},
    "H200": {"bf16_tflops": 989.4, "fp32_tflops": 67.0, "hbm_tb_s": 4.8, "sms": 132},
}


# Peak dense bf16 throughput of a device by its name: GPU_SPECS, and H100 PCIe 756. Any other device: MFU n/a.
def peak_bf16_tflops(device_name):
    n = device_name.upper()
    if "H200" in n:
        return GPU_SPECS["H200"]["bf16_tflops"]
    if "H100" in n:
        if "PCIE" in n:
            return 756.0
        if "NVL" in n:
            return None  # not in the table above
        return GPU_SPECS["H100 SXM"]["bf16_tflops"]
    return None


def model_config(run):
    """The run file's "model" object with the C defaults filled in (model/model_config.c; as bench_twin.py does)."""
    mc = dict(run["model"])
    if mc["arch"] == "moeut":
        defaults = dict(group_size=2, ff_k=8, att_k=2, ff_expert_size=128, entropy_reg=0.01, att_entropy_reg=0.001)
        for k, v in defaults.items():
            mc.setdefault(k, v)
    mc.setdefault("d_head", mc["d_model"] // mc["n_heads"])
    mc.setdefault("lm_head_bias", True)
    mc.setdefault("out_norm_affine", True)
    return mc


def active_matmul_params(mc):
    """Weights multiplied with activations for ONE token, counted per layer APPLICATION (a MoEUT layer shared by
    n_layers/group_size applications counts once per application, since each application does the work again).
      dense, per layer : q, k, v [C, H*D] each, o [H*D, C], FFN linear1 [C, d_ff] and linear2 [d_ff, C]
      MoEUT, per appl. : q, k [C, H*D] each; the attention routers sel_v, sel_o [H*EA, C] (every expert's logit is
                         computed); per head the KA selected V experts [C, D] and KA selected O experts [D, C];
                         the FFN router expert_sel [E, C]; the K selected FFN experts (keys [C, S] + values [S, C])
      both             : the head [V, C] once.
    Left out: the embedding (a row lookup, no multiply-adds), biases, LayerNorm, RoPE, softmax, top-k, the
    regularizer and the loss (elementwise work, well under 1% of the FLOPs here)."""
    C, L, H, D, V = mc["d_model"], mc["n_layers"], mc["n_heads"], mc["d_head"], mc["n_tokens"]
    if mc["arch"] == "dense":
        per_app = 3 * C * H * D + H * D * C + 2 * C * mc["d_ff"]
    else:
        EA, KA = mc["att_n_experts"], mc["att_k"]
        E, K, S = mc["ff_n_experts"], mc["ff_k"], mc["ff_expert_size"]
        per_app = (2 * C * H * D + 2 * H * EA * C + H * KA * C * D + H * KA * D * C + E * C + K * 2 * C * S)
    return L * per_app + V * C


def train_flops_per_token(mc, T):
    """Training FLOPs per token of a [*, T] window: forward + backward = 3 x forward, a multiply-add = 2 FLOPs.
      matmul    = 6 x active_matmul_params(mc)
      attention = 12 x L x T x H x D: per layer and token the forward does q.k over T keys (2*T*H*D) and p.v
                  (2*T*H*D); x3 for the backward. This counts the full T x T score matrix as PaLM's MFU does
                  (Chowdhery et al. 2022, app. B); causal masking means a kernel that skips the masked half does
                  about half of this work (attention_causal_half below, printed for reference, not used for MFU).
    Returns a dict of the parts and "total"."""
    L, H, D = mc["n_layers"], mc["n_heads"], mc["d_head"]
    active = active_matmul_params(mc)
    att = 12 * L * T * H * D
    return {"active_params": active, "matmul": 6 * active, "attention": att, "attention_causal_half": att // 2,
            "total": 6 * active + att}


def total_params(mc):
    """Parameter count of the config (as model_count_params in C), for the sanity comparison with 6 x N."""
    C, L, H, D, V = mc["d_model"], mc["n_layers"], mc["n_heads"], mc["d_head"], mc["n_tokens"]
    head = V * C + (V if mc["lm_head_bias"] else 0)
    out_norm = 2 * C if mc["out_norm_affine"] else 0
    if mc["arch"] == "dense":
        F = mc["d_ff"]
        layer = 4 * C * H * D + C * F + F + F * C + C + 4 * C
        return V * C + L * layer + out_norm + head
    EA, E, S = mc["att_n_experts"], mc["ff_n_experts"], mc["ff_expert_size"]
    layer = 2 * C * H * D + 2 * H * EA * C * D + 2 * H * EA * C + 2 * E * C * S + E * C + 4 * C
    return V * C + mc["group_size"] * layer + out_norm + head


def print_flops(cfg_paths):
    for path in cfg_paths:
        with open(path) as f:
            run = json.load(f)
        mc, T = model_config(run), int(run["train"]["context"])
        fl = train_flops_per_token(mc, T)
        n = total_params(mc)
        print(f"{path}: {mc['arch']}, T={T}: total parameters {n:,} (6 x total = {6 * n:,}); active matmul "
              f"parameters per token {fl['active_params']:,} -> 6 x active = {fl['matmul']:,}; attention "
              f"12*L*T*H*D = {fl['attention']:,} (causal half {fl['attention_causal_half']:,}); "
              f"training FLOPs per token {fl['total']:,} ({fl['total'] / 1e9:.4f} GFLOP)")


# ---------------------------------------------------------------------------------------------------------------
# Fast PyTorch kernels for the twin (same math)
# ---------------------------------------------------------------------------------------------------------------
def _grouped_mm_fn():
    import torch
    import torch.nn.functional as F
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def grouped_mm_loop(xs, W, offs):
    """Reference grouped GEMM (what grouped_mm computes): rows [offs[e-1], offs[e]) of xs times W[e]. Used to
    validate fast_cvmm's indexing where no grouped_mm exists (CPU, old torch)."""
    import torch
    ends = offs.tolist()
    out, start = [], 0
    for e, end in enumerate(ends):
        out.append(xs[start:end] @ W[e])
        start = end
    return torch.cat(out)


def make_fast_cvmm(gmm, dtype):
    """cvmm(X, rows, sel, W) -> out[M, Nout] = X[rows[m]] @ W[sel[m]] (twin.cvmm's contract) as one grouped GEMM:
    sort the M entries by expert, gather their input rows once (in the compute dtype), one grouped GEMM over the
    contiguous per-expert slices (offs = cumulative expert counts), scatter back to entry order."""
    import torch

    def fast_cvmm(X, rows, sel, W):
        order = torch.argsort(sel)
        offs = torch.bincount(sel, minlength=W.shape[0]).cumsum(0).to(torch.int32)
        xs = X.to(dtype).index_select(0, rows.index_select(0, order))  # [M, Kin] in expert order
        ys = gmm(xs, W.to(dtype), offs=offs)  # [M, Nout]
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)
        return ys.index_select(0, inverse)

    return fast_cvmm


def sdpa_causal_attention(q, k, v):
    """twin.causal_attention's contract (q, k pre-scaled: scale 1, causal) through the fused SDPA kernels."""
    import torch.nn.functional as F
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)


def have_sdpa():
    import torch.nn.functional as F
    return hasattr(F, "scaled_dot_product_attention")


def probe_grouped_mm(device):
    """The grouped GEMM to use on `device` in bf16, or (None, reason). Probed with a forward and backward on small
    uneven groups (one empty) against grouped_mm_loop."""
    import torch
    gmm = _grouped_mm_fn()
    if gmm is None:
        return None, f"torch {torch.__version__} has no grouped_mm"
    if device != "cuda":
        return None, "grouped_mm is used on CUDA only"
    try:
        g = torch.Generator(device="cpu").manual_seed(3)
        xs = torch.randn(40, 32, generator=g).to(device, torch.bfloat16).requires_grad_()
        W = torch.randn(3, 32, 16, generator=g).to(device, torch.bfloat16).requires_grad_()
        offs = torch.tensor([16, 16, 40], dtype=torch.int32, device=device)
        y = gmm(xs, W, offs=offs)
        y.float().square().sum().backward()
        xs2, W2 = xs.detach().clone().requires_grad_(), W.detach().clone().requires_grad_()
        y2 = grouped_mm_loop(xs2, W2, offs)
        y2.float().square().sum().backward()
        err = max(float((y.float() - y2.float()).abs().max() / y2.float().abs().max()),
                  float((xs.grad.float() - xs2.grad.float()).abs().max() / xs2.grad.float().abs().max()),
                  float((W.grad.float() - W2.grad.float()).abs().max() / W2.grad.float().abs().max()))
        if not err < 2e-2:  # bf16 outputs: a few units of 2^-8
            return None, f"grouped_mm probe disagrees with the loop (max relative error {err:.3g})"
    except Exception as e:  # noqa: BLE001 - any failure means: do not use it
        return None, f"grouped_mm probe failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return gmm, "grouped_mm"


@contextlib.contextmanager
def use_fast_kernels(twin, device, bf16, force_loop=False):
    """Swaps twin.cvmm / twin.causal_attention / twin.rope_tables for the fast versions while active. Yields a
    description of what is used."""
    import torch
    saved = (twin.cvmm, twin.causal_attention, twin.rope_tables)
    used = []
    gmm, why = (None, "disabled") if (force_loop or not bf16) else probe_grouped_mm(device)
    if gmm is not None:
        twin.cvmm = make_fast_cvmm(gmm, torch.bfloat16)
        used.append("cvmm=grouped_mm")
    else:
        used.append(f"cvmm=twin loop ({why})")
    if have_sdpa():
        twin.causal_attention = sdpa_causal_attention
        used.append("attention=SDPA")
    else:
        used.append(f"attention=twin (torch {torch.__version__} has no SDPA)")
    cache, orig_rope = {}, saved[2]

    def cached_rope_tables(T, n_rot, dtype, device_=None):
        key = (T, n_rot, dtype, str(device_))
        if key not in cache:
            cache[key] = orig_rope(T, n_rot, dtype, device_)
        return cache[key]

    twin.rope_tables = cached_rope_tables
    used.append("rope=cached")
    try:
        yield ", ".join(used)
    finally:
        twin.cvmm, twin.causal_attention, twin.rope_tables = saved


# ---------------------------------------------------------------------------------------------------------------
# The two benchmarks
# ---------------------------------------------------------------------------------------------------------------
def torch_bench(cfg_path, device, bf16, steps, warmup, batch, nmb, threads, force_loop=False):
    import torch
    import twin
    with open(cfg_path) as f:
        run = json.load(f)
    mc, tc = model_config(run), run["train"]
    if device == "cpu":
        torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(int(tc["seed"]))
    model = twin.build_model(mc).float()
    twin.reference_init(model, gen)  # on the host (float64 draws), then moved
    model.to(device)
    kw = {}
    if device == "cuda" and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames:
        kw["fused"] = True
    opt = torch.optim.AdamW(model.parameters(), lr=tc["lr"], betas=(tc["adam_beta1"], tc["adam_beta2"]),
                            eps=tc["adam_eps"], weight_decay=tc["weight_decay"], **kw)
    T, V = int(tc["context"]), mc["n_tokens"]
    Bm = batch // nmb
    data_gen = torch.Generator(device=device).manual_seed(12345)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    ce = float("nan")
    with use_fast_kernels(twin, device, bf16, force_loop) as impl:
        for s in range(warmup + steps):
            if s == warmup:
                sync()
                t0, c0 = time.perf_counter(), time.process_time()
            for g in opt.param_groups:
                g["lr"] = twin.lr_at(s, tc["lr"], tc["warmup"], tc["steps"], tc["min_lr_multiplier"])
            opt.zero_grad(set_to_none=False)
            for _ in range(nmb):
                window = torch.randint(3, V, (Bm, T + 1), generator=data_gen, device=device)
                with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
                    res = twin.objective(model, window[:, :T], window[:, 1:], None, 1.0 / nmb)
                res["total"].backward()
                ce = float(res["ce"])
            if tc["grad_clip"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), tc["grad_clip"])
            opt.step()
        sync()
        secs = time.perf_counter() - t0
    tokens = steps * batch * T
    n_params = sum(p.numel() for p in model.parameters())
    mem = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    print(f"bench torch: {mc['arch']} steps {steps} tokens {tokens} seconds {secs:.3f} tokens_per_s "
          f"{tokens / secs:.1f} params {n_params} last_ce {ce:.4f} precision {'bf16' if bf16 else 'fp32'} "
          f"peak_mem_gib {mem:.1f} (torch {torch.__version__}; {impl})", flush=True)
    del model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return tokens / secs, n_params


def parse_c_variant(text):
    """'NAME=VALUE NAME=VALUE' -> dict of environment settings for one extra C run (kernel-path choices such as
    DMMATH_CUDA_ATTENTION=fused DMMATH_CUDA_CVMM=loop, see kernels/cuda/cuda_common.cuh)."""
    env = {}
    for item in text.split():
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("DMMATH_CUDA_"):
            fail(f"--c-variant: expected DMMATH_CUDA_NAME=VALUE items separated by spaces, got {item!r}")
        env[name] = value
    if not env:
        fail("--c-variant: empty")
    return env


def c_bench(exe, cfg_path, device, bf16, steps, warmup, batch, nmb, threads, extra_env=None):
    cmd = [exe, "--config", cfg_path, "--backend", device, "--precision", "bf16" if bf16 else "fp32",
           "--steps", str(steps), "--warmup", str(warmup), "--batch-size", str(batch), "--n-microbatch", str(nmb),
           "--threads", str(threads)]
    env = dict(os.environ, **(extra_env or {}))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        fail(f"C bench on {cfg_path} exited {r.returncode}: {last}")
    paths = " ".join(f"{k}={v}" for k, v in sorted((extra_env or {}).items())) or "default"
    sys.stdout.write(r.stdout.rstrip("\n") + f" paths {paths}\n")
    m = re.search(r"tokens_per_s ([0-9.eE+-]+) .* params (\d+) .*device (.*)$", r.stdout.strip())
    if not m:
        fail(f"cannot parse the C bench output: {r.stdout!r}")
    return float(m.group(1)), int(m.group(2)), m.group(3)


# ---------------------------------------------------------------------------------------------------------------
# Self-test
# ---------------------------------------------------------------------------------------------------------------
def self_test(device):
    """Hand-checked FLOP arithmetic, structural checks of active_matmul_params against real twin models, and the
    fast kernels against the twin's on the same inputs. Returns the number of failed checks."""
    import torch
    import twin
    failures = []

    def check(name, ok, detail=""):
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
        if not ok:
            failures.append(name)

    # (1) by hand. Dense V=10 C=4 L=2 H=2 D=2 d_ff=8, T=8: per layer q,k,v 3*4*4 = 48, o 4*4 = 16, FFN 2*4*8 = 64
    # -> 128; x2 layers = 256; head 10*4 = 40 -> 296 active; 6*296 = 1776; attention 12*2*8*2*2 = 768; total 2544.
    dense = {"arch": "dense", "n_tokens": 10, "d_model": 4, "n_layers": 2, "n_heads": 2, "d_head": 2, "d_ff": 8,
             "lm_head_bias": False, "out_norm_affine": False}
    fl = train_flops_per_token(dense, 8)
    check("FLOPs by hand, dense", (fl["active_params"], fl["matmul"], fl["attention"], fl["total"]) ==
          (296, 1776, 768, 2544), str(fl))
    # MoEUT V=10 C=4 L=4 (Gs=2) H=2 D=3 EA=3 KA=2 E=5 K=2 S=6, T=8: per application q,k 2*4*6 = 48, att routers
    # 2*6*4 = 48, V 2*2*4*3 = 48, O 48, FFN router 5*4 = 20, FFN experts 2*2*4*6 = 96 -> 308; x4 applications = 1232;
    # head 40 -> 1272; 6*1272 = 7632; attention 12*4*8*2*3 = 2304; total 9936.
    moe = {"arch": "moeut", "n_tokens": 10, "d_model": 4, "n_layers": 4, "n_heads": 2, "d_head": 3,
           "att_n_experts": 3, "att_k": 2, "ff_n_experts": 5, "ff_k": 2, "ff_expert_size": 6, "group_size": 2,
           "lm_head_bias": False, "out_norm_affine": False, "entropy_reg": 0.01, "att_entropy_reg": 0.001}
    fl = train_flops_per_token(moe, 8)
    check("FLOPs by hand, MoEUT", (fl["active_params"], fl["matmul"], fl["attention"], fl["total"]) ==
          (1272, 7632, 2304, 9936), str(fl))
    # (2) the paper configs (values worked out by hand in tests/GPU_CHECKLIST.md and below):
    #   dense: per layer 4*1024*1024 + 2*1024*4110 = 12,611,584; x18 = 227,008,512; + head 524,288 = 227,532,800
    #   MoEUT: per application 1,048,576 (q,k) + 81,920 (att routers) + 2,097,152 (V,O: 4 heads x 2 experts) +
    #          396,288 (FFN router) + 4,194,304 (16 experts) = 7,818,240; x18 = 140,728,320; + head = 141,252,608
    expect = {"experiments/paper/dense_qa.json": (228223228, 227532800, 226492416),
              "experiments/paper/moeut_qa.json": (227981312, 141252608, 113246208)}
    for path, (n_total, n_active, att) in expect.items():
        with open(path) as f:
            run = json.load(f)
        mc = model_config(run)
        fl = train_flops_per_token(mc, int(run["train"]["context"]))
        check(f"paper config {path}", (total_params(mc), fl["active_params"], fl["attention"]) ==
              (n_total, n_active, att), f"total {total_params(mc):,} active {fl['active_params']:,} "
              f"attention {fl['attention']:,}")
    # (3) structure: the count equals what real twin modules hold. Dense: every 2-D weight except the embedding.
    # MoEUT with K = E and KA = EA (every expert active): every weight except the embedding and LayerNorms, with
    # each distinct layer counted once per application.
    for cfg in (dict(dense, lm_head_bias=True, out_norm_affine=True),
                dict(moe, ff_k=5, att_k=3, lm_head_bias=True, out_norm_affine=True)):
        m = twin.build_model(cfg)
        reps = cfg["n_layers"] // cfg.get("group_size", 1) if cfg["arch"] == "moeut" else 1
        n = 0
        for name, p in m.named_parameters():
            if name == "embedding.weight" or "ln" in name.split(".")[-2] or name.startswith("out_norm"):
                continue
            if name.endswith("bias"):
                continue
            n += p.numel() * (reps if name.startswith("transformer.") else 1)
        n_all = sum(p.numel() for p in m.parameters())
        check(f"active count = twin module weights ({cfg['arch']}, all experts active)",
              active_matmul_params(cfg) == n and total_params(cfg) == n_all,
              f"formula {active_matmul_params(cfg)} vs modules {n}; total {total_params(cfg)} vs {n_all}")
    check("peak lookup", peak_bf16_tflops("NVIDIA H100 80GB HBM3") == 989.4 and
          peak_bf16_tflops("NVIDIA H200") == 989.4 and peak_bf16_tflops("NVIDIA H100 PCIe") == 756.0 and
          peak_bf16_tflops("NVIDIA A100-SXM4-80GB") is None)

    # (4) fast kernels vs the twin's on the same inputs
    g = torch.Generator().manual_seed(7)
    E, M, Kin, Nout, Nx = 7, 300, 32, 24, 60
    X = torch.randn(Nx, Kin, generator=g).to(device)
    W = torch.randn(E, Kin, Nout, generator=g).to(device)
    rows = torch.randint(0, Nx, (M,), generator=g).to(device)
    sel = torch.randint(0, E - 1, (M,), generator=g).to(device)  # expert E-1 stays empty on purpose
    dY = torch.randn(M, Nout, generator=g).to(device)

    def run_cvmm(fn, dtype):
        Xa, Wa = X.clone().to(dtype).requires_grad_(), W.clone().to(dtype).requires_grad_()
        y = fn(Xa, rows, sel, Wa)
        (y.float() * dY).sum().backward()
        return y.float(), Xa.grad.float(), Wa.grad.float()

    def rel(a, b):
        return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))

    ref = run_cvmm(twin.cvmm, torch.float32)
    loop = run_cvmm(make_fast_cvmm(grouped_mm_loop, torch.float32), torch.float32)
    err = max(rel(a, b) for a, b in zip(loop, ref))
    check("fast_cvmm indexing (loop grouped GEMM, fp32) = twin.cvmm: y, dX, dW", err < 1e-5, f"max rel {err:.2e}")
    gmm, why = probe_grouped_mm(device)
    if gmm is not None:
        # both sides with bf16 operands: the grouped GEMM and the twin's per-expert matmuls on bf16 tensors
        fast = run_cvmm(make_fast_cvmm(gmm, torch.bfloat16), torch.bfloat16)
        twin_bf = run_cvmm(twin.cvmm, torch.bfloat16)
        err = max(rel(a, b) for a, b in zip(fast, twin_bf))
        check("fast_cvmm (grouped_mm, bf16) = twin.cvmm on bf16 inputs: y, dX, dW", err < 2e-2,
              f"max rel {err:.2e} (bf16 outputs, different accumulation order)")
    else:
        print(f"info grouped_mm not checked: {why}")
    if have_sdpa():
        B, H, T, D = 2, 3, 37, 16
        q, k, v, dO = (torch.randn(B, H, T, D, generator=g).to(device) for _ in range(4))
        outs = []
        for fn in (twin.causal_attention, sdpa_causal_attention):
            qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
            o = fn(qa * 0.5, ka * 0.5, va)
            (o * dO).sum().backward()
            outs.append((o, qa.grad, ka.grad, va.grad))
        err = max(rel(a, b) for a, b in zip(outs[1], outs[0]))
        check("SDPA causal (scale 1) = twin.causal_attention, fp32: out, dq, dk, dv", err < 1e-4, f"max rel {err:.2e}")
    else:
        print(f"info SDPA not checked: torch {torch.__version__} has none")
    # (5) one whole MoEUT objective with the fast kernels vs the twin's, all experts active (K = E, KA = EA: no
    # top-k decision that rounding could flip), in the benchmark precision.
    bf16 = device == "cuda"
    cfg = dict(moe, n_tokens=50, d_model=32, d_head=8, n_heads=2, ff_n_experts=6, ff_k=6, att_n_experts=3, att_k=3,
               ff_expert_size=16)
    model = twin.build_model(cfg).float()
    twin.reference_init(model, torch.Generator().manual_seed(1))
    model.to(device)
    win = torch.randint(3, 50, (3, 17), generator=g).to(device)
    grads = []
    for fast in (False, True):
        model.zero_grad()
        ctx = use_fast_kernels(twin, device, bf16) if fast else contextlib.nullcontext("twin")
        with ctx as impl:
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
                res = twin.objective(model, win[:, :16], win[:, 1:], None, 1.0)
            res["total"].backward()
        grads.append((float(res["total"]), {n: p.grad.detach().float().clone() for n, p in model.named_parameters()},
                      impl))
    (l0, g0, _), (l1, g1, impl) = grads
    worst = max(float((g1[n] - g0[n]).norm() / g0[n].norm().clamp(min=1e-30)) for n in g0)
    # bf16: both sides round differently (the twin's explicit attention rounds the scores to bf16, flash attention
    # does not), so each differs from exact by bf16 noise: up to ~25 u per gradient tensor on models of this size
    # (tests/unit/cuda_model_bf16_calibration.py, u = 2^-8). Bounds as in cuda_model_vs_cpu.c: 64 u per gradient
    # tensor, 8 u on the loss; a wiring error (wrong expert, row or head) gives O(1).
    u = 2.0 ** -8
    tol_loss, tol_grad = (8 * u, 64 * u) if bf16 else (1e-5, 1e-5)
    check(f"whole MoEUT step, fast kernels ({impl}) vs twin, {'bf16' if bf16 else 'fp32'}",
          abs(l1 - l0) <= tol_loss * abs(l0) and worst <= tol_grad, f"loss {l1:.6f} vs {l0:.6f} (tol {tol_loss:.2g} "
          f"relative), worst gradient ||diff||/||ref|| {worst:.2e} (tol {tol_grad:.2g})")
    print(f"self-test: {len(failures)} failed" + (f" ({', '.join(failures)})" if failures else ""))
    return len(failures)


# ---------------------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", action="append", help="run config (repeatable; default: the paper's dense_qa and "
                    "moeut_qa)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: validation only (fp32, MFU n/a)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=None, help="windows per step (default: the config's)")
    ap.add_argument("--n-microbatch", type=int, default=None,
                    help="micro-batches per step (default 2 on cuda: 32-window micro-batches for the paper configs; "
                         "the config's on cpu)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (--device cpu)")
    ap.add_argument("--c-bench", default=None, help="build/bench/bench_train_step (omit: PyTorch only)")
    ap.add_argument("--c-variant", action="append", default=[], metavar="'DMMATH_CUDA_X=V ...'",
                    help="also time the C backend with these kernel-path settings (repeatable), e.g. "
                         "'DMMATH_CUDA_ATTENTION=fused DMMATH_CUDA_CVMM=loop'; printed as extra rows")
    ap.add_argument("--torch-loop", action="store_true", help="PyTorch side: the twin's per-expert loop for cvmm")
    ap.add_argument("--flops", action="store_true", help="print the FLOP accounting of the configs and exit")
    ap.add_argument("--self-test", action="store_true", help="hand-checked FLOPs and fast-vs-twin kernels; exit")
    args = ap.parse_args()
    configs = args.config or DEFAULT_CONFIGS
    if args.flops:
        print_flops(configs)
        return
    try:
        import torch
    except ImportError as e:
        fail(f"PyTorch is not importable by {sys.executable} ({e})")
    if args.device == "cuda" and not torch.cuda.is_available():
        fail(f"no usable CUDA GPU for PyTorch (torch {torch.__version__} at {sys.executable}: "
             f"torch.cuda.is_available() is False)")
    if args.self_test:
        sys.exit(1 if self_test(args.device) else 0)
    bf16 = args.device == "cuda"
    if args.device == "cuda":
        dev_name = torch.cuda.get_device_name(0)
        peak = peak_bf16_tflops(dev_name)
    else:
        dev_name, peak = "cpu", None
    # The headline pairs first (per config: C on its default paths, then PyTorch), every config's comparator paths
    # after them: a run stopped at a job's time limit still has the figures that matter (the C lines tell the paths
    # apart by their "paths" field).
    if args.c_variant and not args.c_bench:
        fail("--c-variant needs --c-bench")
    rows = []
    for cfg in configs:
        with open(cfg) as f:
            run = json.load(f)
        mc, tc = model_config(run), run["train"]
        batch = args.batch_size or int(tc["batch_size"])
        nmb = args.n_microbatch or (CUDA_MICROBATCHES if args.device == "cuda" else int(tc["n_microbatch"]))
        if batch % nmb:
            fail(f"--batch-size {batch} is not a multiple of --n-microbatch {nmb}")
        T = int(tc["context"])
        fl = train_flops_per_token(mc, T)
        print(f"== {cfg}: {mc['arch']}, {batch} windows x {T} tokens per step in {nmb} micro-batches of "
              f"{batch // nmb}, {'bf16' if bf16 else 'fp32'}, {args.warmup} warm-up + {args.steps} timed steps, "
              f"{fl['total'] / 1e9:.4f} GFLOP per token", flush=True)
        c = None
        if args.c_bench:
            c_tps, c_np, c_dev = c_bench(args.c_bench, cfg, args.device, bf16, args.steps, args.warmup, batch, nmb,
                                         args.threads)
            c = c_tps
        t_tps, t_np = torch_bench(cfg, args.device, bf16, args.steps, args.warmup, batch, nmb, args.threads,
                                  args.torch_loop)
        if args.c_bench and c_np != t_np:
            fail(f"{cfg}: parameter counts differ (C {c_np}, PyTorch {t_np})")
        rows.append((cfg, mc["arch"], fl["total"], c, t_tps, batch, nmb, T, []))
    if args.c_variant:
        for cfg, _, _, _, _, batch, nmb, _, variants in rows:
            print(f"== {cfg}: the comparator paths", flush=True)
            for text in args.c_variant:
                v_tps, _, _ = c_bench(args.c_bench, cfg, args.device, bf16, args.steps, args.warmup, batch, nmb,
                                      args.threads, parse_c_variant(text))
                variants.append((text, v_tps))

    def mfu(tps, flops):
        return "n/a" if (peak is None or tps is None) else f"{100 * tps * flops / (peak * 1e12):.1f}%"

    peak_txt = f"{peak} TFLOP/s dense bf16" if peak else "unknown peak: MFU n/a"
    print(f"\nbench-gpu summary: device {dev_name} ({peak_txt}); tokens/s of wall time, higher is better")
    print(f"  {'config':34s} {'batch':>12s} {'GFLOP/tok':>9s} {'C tok/s':>10s} {'torch tok/s':>11s} {'C/torch':>7s} "
          f"{'C MFU':>6s} {'torch MFU':>9s}")
    for cfg, arch, flops, c, t, batch, nmb, T, variants in rows:
        ratio = f"{c / t:7.2f}" if c else f"{'-':>7s}"
        ctxt = f"{c:10.1f}" if c else f"{'-':>10s}"
        print(f"  {cfg:34s} {f'{batch}x{T}/{nmb}':>12s} {flops / 1e9:9.4f} {ctxt} {t:11.1f} {ratio} "
              f"{mfu(c, flops):>6s} {mfu(t, flops):>9s}")
        for text, v in variants:
            print(f"    C with {text}: {v:.1f} tokens/s, C/torch {v / t:.2f}, MFU {mfu(v, flops)}"
                  f"{f', default paths / these {c / v:.2f}' if c else ''}")


if __name__ == "__main__":
    main()
