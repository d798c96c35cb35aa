"""Self-checks of the PyTorch twin (run by `make twin-fixtures` before the fixtures are regenerated).

  * finite differences (float64, central, a random subset of entries of EVERY parameter tensor) against autograd for
    tiny MoEUT (padded batch, answer-only mask, Gs=2) and dense models: relative error < 1e-6 (spec §8.3.8);
  * torch.autograd.gradcheck of the masked regularizer on its own;
  * the regularizer against the closed forms of kernels/backend.h (value and gradient) and, with every position
    valid, against the spec's unmasked layers_time form (spec §2.5);
  * sigma-MoE with K = E equals the dense formula (spec §8.3.3); RoPE scores depend only on p - p' (§8.3.5);
  * the fp32 RoPE inverse frequencies equal the C recipe 1.0f / powf(base, (float)(2i) / (float)n_rot);
  * the LR schedule values of spec §8.3.10, and the closed form against torch's CosineAnnealingLR;
  * safetensors round trip.
Exit status 0 when every check passes; prints one line per check.
"""
import ctypes
import ctypes.util
import math
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures  # noqa: E402
import st_io  # noqa: E402
import twin  # noqa: E402

failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    if not ok:
        failures.append(name)


def fd_gradcheck(name, cfg, spec, seed, per_tensor=6, h=1e-4, tol=1e-6):
    """Fourth-order central differences (f(-2h), f(-h), f(h), f(2h); truncation O(h^4), rounding ~1e-12 absolute)
    on `per_tensor` random entries of every parameter tensor. Draws whose routing margins or ReLU pre-activations are
    within reach of a 2h perturbation are rejected, so no difference crosses a top-k or ReLU switch."""
    gen = torch.Generator().manual_seed(seed)
    inputs, full_targets, loss_mask = gen_fixtures.make_batch(spec, cfg["n_tokens"], gen)
    valid, targets = gen_fixtures.step_inputs(full_targets, loss_mask)
    for attempt in range(200):
        model = twin.build_model(cfg).double()
        gen_w = torch.Generator().manual_seed(seed * 1000 + attempt)
        gen_fixtures.fixture_weights(model, gen_w)
        log = []
        with torch.no_grad():
            model(inputs, log)
        if twin.min_routing_margin(log) > 5e-3 and twin.min_relu_margin(log) > 2e-3:
            break
    else:
        check(f"finite differences vs autograd, {name}", False, "no draw with clear margins")
        return
    gs = spec["grad_scale"]
    model.zero_grad()
    twin.objective(model, inputs, targets, valid, gs)["total"].backward()

    def f_at(flat, i, x):
        flat[i] = x
        return float(twin.objective(model, inputs, targets, valid, gs)["total"])

    worst, worst_at = 0.0, ""
    n_checked = 0
    for pname, p in model.named_parameters():
        flat = p.data.view(-1)
        g = p.grad.view(-1)
        idx = torch.randperm(flat.numel(), generator=gen)[:per_tensor]
        for i in idx.tolist():
            x0 = float(flat[i])
            with torch.no_grad():
                fd = (8 * (f_at(flat, i, x0 + h) - f_at(flat, i, x0 - h)) -
                      (f_at(flat, i, x0 + 2 * h) - f_at(flat, i, x0 - 2 * h))) / (12 * h)
                flat[i] = x0
            err = abs(fd - float(g[i])) / max(abs(fd), abs(float(g[i])), 1e-8)
            if err > worst:
                worst, worst_at = err, f"{pname}[{i}] autograd {float(g[i]):.6e} fd {fd:.6e}"
            n_checked += 1
    check(f"finite differences vs autograd, {name}", worst < tol,
          f"{n_checked} entries (every tensor), max rel err {worst:.2e} at {worst_at}")


def reg_closed_forms():
    gen = torch.Generator().manual_seed(7)
    R, B, T, G, E = 3, 4, 5, 2, 6
    hist = [torch.randn(B, T, G, E, generator=gen, dtype=torch.float64) * 2 for _ in range(R)]
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, 3:] = False
    valid[2, 1:] = False
    valid[3, :] = False  # no valid position: left out entirely
    for h in hist:
        h.requires_grad_(True)
    val = twin.masked_entropy_reg(hist, valid)
    val.backward()
    # closed form of backend.h over the kept rows
    keep = valid.any(1)
    Bk = int(keep.sum())
    X = torch.stack([h.detach() for h in hist])[:, keep]  # [R,Bk,T,G,E]
    vk = valid[keep]  # [Bk,T]
    p = torch.softmax(X, -1)
    m = vk.view(1, Bk, T, 1, 1).to(p.dtype)
    cnt = R * vk.sum(1).to(p.dtype)  # [Bk]
    pbar = (p * m).sum((0, 2)) / cnt.view(Bk, 1, 1)  # [Bk,G,E]
    Hj = -(pbar * pbar.log()).sum(-1)  # [Bk,G]
    r = cnt.view(1, Bk) / cnt.view(Bk, 1)  # r[i,j] = cnt_j / cnt_i
    closed = -(r.view(Bk, Bk, 1) * (Hj.view(1, Bk, G) - r.log().view(Bk, Bk, 1))).sum() / (Bk * Bk * G)
    check("regularizer value = -(1/B^2G) sum r_ij (H_j - log r_ij)", abs(float(val) - float(closed)) < 1e-12,
          f"{float(val):.15f} vs {float(closed):.15f}")
    lpb = pbar.log()
    grad_closed = p * (lpb.view(1, Bk, 1, G, E) - (p * lpb.view(1, Bk, 1, G, E)).sum(-1, keepdim=True))
    grad_closed = grad_closed * (1.0 / cnt).mean() / (Bk * G) * m
    full = torch.zeros(R, B, T, G, E, dtype=torch.float64)
    full[:, keep] = grad_closed
    auto = torch.stack([h.grad for h in hist])
    err = float((auto - full).abs().max())
    check("regularizer gradient = p (log pbar_j - sum p log pbar_j) mean_i(1/cnt_i) / (B G)", err < 1e-14,
          f"max abs err {err:.1e}")
    check("regularizer gradient sums to 0 over experts", float(auto.sum(-1).abs().max()) < 1e-15)
    check("regularizer gradient is 0 at invalid positions",
          float(auto.permute(1, 2, 0, 3, 4)[~valid].abs().max()) == 0.0)
    ok = torch.autograd.gradcheck(lambda *hs: twin.masked_entropy_reg(list(hs), valid),
                                  tuple(h.detach().requires_grad_(True) for h in hist), eps=1e-6, atol=1e-9)
    check("torch.autograd.gradcheck of the masked regularizer", ok)
    # all valid: the spec's unmasked layers_time form -mean_b H_b (FFN layout [B,T,E])
    hist2 = [torch.randn(B, T, E, generator=gen, dtype=torch.float64) for _ in range(R)]
    v_all = twin.masked_entropy_reg(hist2, None)
    Xs = torch.stack(hist2, 2).flatten(1, 2)  # [B, T*R, E]
    M = torch.log_softmax(Xs, -1).logsumexp(-2) - math.log(T * R)
    spec_form = -(-(M.exp() * M).sum(-1)).mean()
    check("all valid: equals the spec's layers_time form", abs(float(v_all) - float(spec_form)) < 1e-13)
    check("value within [-log E, 0]", -math.log(E) - 1e-12 <= float(v_all) <= 0.0)


def sigma_moe_dense_equivalence():
    gen = torch.Generator().manual_seed(3)
    C, E, S = 8, 4, 5
    moe = twin.SigmaMoE(C, E, S, E).double()
    with torch.no_grad():
        for p in moe.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
    x = torch.randn(2, 3, C, generator=gen, dtype=torch.float64)
    xs = torch.randn(2, 3, C, generator=gen, dtype=torch.float64)
    f, _, _ = moe(x, xs)
    g = torch.sigmoid(xs @ moe.expert_sel.T)  # [2,3,E]
    dense = sum(g[..., e:e + 1] * (torch.relu(x @ moe.keys[e]) @ moe.values[e]) for e in range(E))
    check("sigma-MoE with K=E equals the dense formula", float((f - dense).abs().max()) < 1e-12)


def rope_checks():
    n_rot, D, T = 6, 8, 12
    cos, sin = twin.rope_tables(T + 5, n_rot, torch.float64)
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(1, 1, 1, D, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, 1, D, generator=gen, dtype=torch.float64)

    def score(pq, pk):
        qr = twin.apply_rope(q, cos[pq:pq + 1], sin[pq:pq + 1], n_rot)
        kr = twin.apply_rope(k, cos[pk:pk + 1], sin[pk:pk + 1], n_rot)
        return float((qr * kr).sum())

    # fp32 angles make the invariance hold only to fp32 level
    err = max(abs(score(p + 3, p) - score(3, 0)) for p in range(T))
    check("RoPE score depends only on p - p'", err < 1e-5, f"max diff {err:.1e}")
    qr = twin.apply_rope(q, cos[7:8], sin[7:8], n_rot)
    check("RoPE preserves the norm and leaves dims >= n_rot unchanged",
          abs(float(qr[..., :n_rot].norm() - q[..., :n_rot].norm())) < 1e-12 and
          torch.equal(qr[..., n_rot:], q[..., n_rot:]))
    check("n_rot rounding: D=82 -> 40, 128 -> 64, 64 -> 32, 10 -> 4, 5 -> 2",
          [twin.n_rot_of(d) for d in (82, 128, 64, 10, 5)] == [40, 64, 32, 4, 2])
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.powf.restype = ctypes.c_float
    libm.powf.argtypes = [ctypes.c_float, ctypes.c_float]
    one = torch.tensor(1.0, dtype=torch.float32)
    mismatches = []
    for n in list(range(2, 150, 2)) + [160, 192, 256]:
        tw = twin.rope_inv_freq(n).tolist()
        for i in range(n // 2):
            e = float(torch.tensor(2.0 * i, dtype=torch.float32) / torch.tensor(float(n), dtype=torch.float32))
            c = float(one / torch.tensor(libm.powf(10000.0, e), dtype=torch.float32))
            if c != tw[i]:
                mismatches.append((n, i))
    check("fp32 RoPE inverse frequencies equal the C recipe 1.0f/powf(base, (float)(2i)/(float)n_rot), "
          "n_rot <= 148 and 160, 192, 256", not mismatches,
          f"{len(mismatches)} mismatches, first {mismatches[:3]}" if mismatches else "")


def lr_checks():
    f = lambda i: twin.lr_at(i, 2.5e-4, 4000, 100000, 0.1)  # noqa: E731
    # spec values with half a unit of their last printed digit as tolerance
    vals = {0: (6.25e-8, 5e-11), 3999: (2.5e-4, 5e-8), 4000: (2.5e-4, 5e-8), 50000: (1.516e-4, 5e-8),
            99999: (2.58875e-5, 5e-11)}
    for i, (v, tol) in vals.items():
        check(f"lr({i}) = {v:g} (spec §8.3.10)", abs(f(i) - v) <= tol, f"{f(i):.10g}")
    # closed form against torch's scheduler stepped with epoch i - warmup (short schedule)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=50, eta_min=1e-4)
    worst = 0.0
    for i in range(10, 60):
        torch_lr = opt.param_groups[0]["lr"]
        worst = max(worst, abs(torch_lr - twin.lr_at(i, 1e-3, 10, 50, 0.1)))
        opt.step()
        sched.step()
    check("cosine closed form equals torch CosineAnnealingLR (T_max = steps)", worst < 1e-12, f"max diff {worst:.1e}")


def st_roundtrip():
    t = {"a": torch.randn(3, 4, dtype=torch.float64), "b.c": torch.arange(5, dtype=torch.float32),
         "s": torch.tensor([1.5], dtype=torch.float64), "i": torch.tensor([[1, -2]], dtype=torch.int32)}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.safetensors")
        st_io.save(path, t, {"config": "{}", "format": "pt"})
        back, meta = st_io.load(path)
        with open(path, "rb") as fh:
            hlen = int.from_bytes(fh.read(8), "little")
    ok = meta == {"config": "{}", "format": "pt"} and set(back) == set(t) and hlen % 8 == 0 and all(
        back[k].dtype == t[k].dtype and torch.equal(back[k], t[k]) for k in t)
    check("safetensors round trip", ok)


def main():
    torch.set_num_threads(1)
    moeut = gen_fixtures.moeut_cfg(n_tokens=24, d_model=12, n_layers=4, n_heads=2, d_head=6, ff_n_experts=5,
                                   ff_expert_size=4, ff_k=2, att_n_experts=3, att_k=2, group_size=2,
                                   lm_head_bias=True, out_norm_affine=True)
    fd_gradcheck("MoEUT Gs=2, padding, answer-only", moeut,
                 dict(B=3, T=7, rows=[8, 5, 2], answer_only=True, grad_scale=1.0), 11)
    moeut_off = dict(moeut, lm_head_bias=False, out_norm_affine=False, group_size=1, n_layers=2, att_k=1)
    fd_gradcheck("MoEUT Gs=1, no head bias/affine", moeut_off,
                 dict(B=2, T=6, rows=[7, 4], answer_only=False, grad_scale=0.5), 12)
    dense = gen_fixtures.dense_cfg(n_tokens=20, d_model=10, n_layers=2, n_heads=2, d_head=5, d_ff=14,
                                   lm_head_bias=True, out_norm_affine=True)
    fd_gradcheck("dense", dense, dict(B=2, T=6, rows=[7, 4], answer_only=True, grad_scale=1.0), 13)
    reg_closed_forms()
    sigma_moe_dense_equivalence()
    rope_checks()
    lr_checks()
    st_roundtrip()
    switch_balance_checks()
    if failures:
        print(f"test_twin: {len(failures)} check(s) FAILED: {', '.join(failures)}")
        sys.exit(1)
    print("test_twin: all checks passed")


def switch_balance_checks():
    """Fedus et al. eq. 4 without alpha: a uniform router gives 1 whatever it selects; a collapsed router (every slot
    on expert 0, probability 1 there) gives E (f_0 = 1, P_0 = 1)."""
    gen = torch.Generator().manual_seed(11)
    B, T, E, K = 2, 5, 6, 2
    flat = torch.zeros(B, T, E, dtype=torch.float64)
    sel = torch.randint(0, E, (B, T, K), generator=gen)
    check("switch loss of a uniform router is 1", abs(float(twin.switch_balance_loss(flat, sel, None)) - 1) < 1e-12)
    peaked = flat.clone()
    peaked[..., 0] = 1e4
    sel0 = torch.zeros(B, T, K, dtype=torch.long)
    check("switch loss of a collapsed router is E", abs(float(twin.switch_balance_loss(peaked, sel0, None)) - E) < 1e-9)


if __name__ == "__main__":
    main()
