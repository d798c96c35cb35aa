"""Self-checks of the PyTorch twin (run by `make twin-fixtures` before the fixtures are regenerated).

  * finite differences (float64, central, a random subset of entries of EVERY parameter tensor) against autograd for
    tiny MoEUT (padded batch, answer-only mask, Gs=2) and dense models: relative error < 1e-6 (spec §8.3.8);
  * torch.autograd.gradcheck of the masked regularizer on its own;
  * the regularizer against the closed forms of kernels/backend.h (value and gradient) and, with every position
    valid, against the spec's unmasked layers_time form (spec §2.5);
  * sigma-MoE with K = E equals the dense formula (spec §8.3.3); RoPE scores depend only on p - p' (§8.3.5);
  * the fp32 RoPE inverse frequencies equal the C recipe 1.0f / powf(base, (float)(2i) / (float)n_rot);
  * the LR schedule values of spec §8.3.10, and the closed form against torch's CosineAnnealingLR;
  * safetensors round trip;
  * MoE-variant switches: finite differences for shared-expert / dense-prefix / biased-router models; shared experts
    = routed output + hand-computed sum ReLU(x1 Ks) Vs, outside the router and the load counts; expert_bias changes
    selections, never gates, a zero bias is exactly the unbiased model, the update rule on hand-made counts; the dense
    prefix equals DenseLayer applied to the same weights, application order, R; parameter counts of the fixture
    configs against a closed formula, state_dict order and config JSON keys.
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


def fd_gradcheck(name, cfg, spec, seed, per_tensor=6, h=1e-4, tol=1e-6, routing_margin=5e-3):
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
            model(inputs, log, valid=valid)  # valid: the positions expert choice chooses from
        score_capacity = cfg.get("ff_capacity_order") == "score"  # its decision moves with the gates
        if twin.min_routing_margin(log) > routing_margin and twin.min_relu_margin(log) > 2e-3 and \
                (not score_capacity or twin.capacity_stats(log)[2] > 5e-3):
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
    variant_fd_checks()
    shared_expert_checks()
    routed_scaling_checks()
    hash_routing_checks()
    capacity_checks()
    expert_choice_checks()
    expert_bias_checks()
    dense_prefix_checks()
    variant_count_checks()
    moe_arch_checks()
    group_limited_checks()
    seq_balance_checks()
    residual_mlp_checks()
    pyramid_checks()
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


# -----------------------------------------------------------------------------------------------------------------
# MoE-variant switches: n_shared_experts, n_dense_first, balance "bias"
# -----------------------------------------------------------------------------------------------------------------
def _variant_cfg(**kw):
    base = dict(n_tokens=24, d_model=12, n_layers=4, n_heads=2, d_head=6, ff_n_experts=5, ff_expert_size=4, ff_k=2,
                att_n_experts=3, att_k=2, group_size=2, lm_head_bias=True, out_norm_affine=True)
    base.update(kw)
    return gen_fixtures.moeut_cfg(**base)


def _random_fill(module, gen, scale=1.0):
    with torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            t.copy_(torch.randn(t.shape, generator=gen, dtype=torch.float64) * scale)


def _set_ln(layer):
    with torch.no_grad():
        for ln in (layer.ln1, layer.ln2):
            ln.weight.fill_(1.0)
            ln.bias.zero_()


def variant_fd_checks():
    fd_gradcheck("MoEUT 2 shared experts, sigmoid renorm + expert_bias, padding, answer-only",
                 _variant_cfg(n_shared_experts=2, router="sigmoid", router_renorm=True, balance="bias"),
                 dict(B=3, T=7, rows=[8, 5, 2], answer_only=True, grad_scale=1.0), 21)
    fd_gradcheck("MoEUT dense prefix n=1 (L=3, Gs=2), entropy balancing",
                 _variant_cfg(n_layers=3, n_dense_first=1, d_ff=10),
                 dict(B=2, T=6, rows=[7, 4], answer_only=False, grad_scale=0.5), 22)
    fd_gradcheck("MoEUT dense prefix n=2, Gs=1, 1 shared expert, softmax + expert_bias",
                 _variant_cfg(n_layers=3, group_size=1, n_dense_first=2, n_shared_experts=1, router="softmax",
                              balance="bias", lm_head_bias=False),
                 dict(B=2, T=6, rows=[7, 5], answer_only=True, grad_scale=1.0), 23)

    fd_gradcheck("MoEUT expert-choice routing CF 2, 1 shared expert (gates' softmax Jacobian)",
                 _variant_cfg(ff_n_experts=4, n_shared_experts=1, router="softmax", balance="none",
                              routing="expert_choice", ff_capacity_factor=2.0),
                 dict(B=2, T=6, rows=[7, 4], answer_only=True, grad_scale=1.0), 25,
                 routing_margin=1e-3)  # softmax scores: a 2h step moves them by ~1e-4 at most

    fd_gradcheck("MoEUT DeepSeek-V3 gates: sigmoid renorm x routed_scaling_factor 2.5, 1 shared expert, expert_bias",
                 _variant_cfg(n_shared_experts=1, router="sigmoid", router_renorm=True, routed_scaling_factor=2.5,
                              balance="bias"),
                 dict(B=2, T=6, rows=[7, 4], answer_only=True, grad_scale=1.0), 24)
    fd_gradcheck("MoEUT expert capacity CF 0.75, position order, softmax renorm (dropped slots: no gradient)",
                 _variant_cfg(router="softmax", router_renorm=True, ff_capacity_factor=0.75),
                 dict(B=2, T=6, rows=[7, 4], answer_only=True, grad_scale=1.0), 25)
    fd_gradcheck("MoEUT expert capacity CF 0.75, score order, sigmoid",
                 _variant_cfg(ff_capacity_factor=0.75, ff_capacity_order="score"),
                 dict(B=2, T=6, rows=[7, 7], answer_only=False, grad_scale=1.0), 26)


def capacity_checks():
    """capacity_keep against the published dispatch written as a loop (GShard Algorithm 1: every token's first choice
    in order, each expert counting up to its capacity, then every second choice; the score order: the assignments by
    gate, descending), both orders, several capacities; EC's rounding; eval mode and a capacity above every load drop
    nothing."""
    gen = torch.Generator().manual_seed(41)
    ok, n_dropped = True, 0
    for trial in range(6):
        N, E, K = 23 + trial, 5, 2 + trial % 2
        idx = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(N)])  # [N, K] distinct per token
        w = (torch.randint(0, 5, (N, K), generator=gen) / 4.0).double()  # ties everywhere
        for order in ("position", "score"):
            for cf in (0.5, 1.0, 1.3):
                ffn = twin.SigmaMoE(4, E, 3, K, capacity_factor=cf, capacity_order=order)
                keep = ffn.capacity_keep(idx, w)
                cap = max(1, math.floor(cf * K * N / E + 0.5))
                if order == "position":
                    seq = [(n, j) for j in range(K) for n in range(N)]
                else:
                    seq = sorted(((n, j) for n in range(N) for j in range(K)), key=lambda a: (-float(w[a]), a))
                load = [0] * E
                want = torch.zeros(N, K, dtype=torch.float64)
                for n, j in seq:
                    e = int(idx[n, j])
                    if load[e] < cap:
                        load[e] += 1
                        want[n, j] = 1
                ok = ok and torch.equal(keep, want)
                n_dropped += int((want == 0).sum())
    check("capacity_keep = the dispatch loop of GShard Algorithm 1 / the score order (36 decisions)",
          ok and n_dropped > 0, f"{n_dropped} assignments dropped in all")
    ffn = twin.SigmaMoE(4, 8, 3, 2, capacity_factor=1.0)
    check("EC = max(1, floor(CF*K*N/E + 1/2)): 36 assignments of 8 experts -> 5 (4.5 rounds up); CF 0.01 -> 1",
          int(ffn.capacity_keep(torch.arange(2).repeat(18, 1), torch.ones(18, 2)).sum()) == 2 * 5 and
          int(twin.SigmaMoE(4, 8, 3, 2, capacity_factor=0.01).capacity_keep(torch.arange(2).repeat(18, 1),
                                                                           torch.ones(18, 2)).sum()) == 2)
    cfg = _variant_cfg(ff_capacity_factor=0.5)
    layer = twin.MoEUTLayer(cfg).double()
    _random_fill(layer, gen, 0.5)
    _set_ln(layer)
    plain = twin.MoEUTLayer(dict(cfg, ff_capacity_factor=0.0)).double()
    plain.load_state_dict(layer.state_dict())
    big = twin.MoEUTLayer(dict(cfg, ff_capacity_factor=100.0)).double()
    big.load_state_dict(layer.state_dict())
    x1 = torch.randn(2, 5, cfg["d_model"], generator=gen, dtype=torch.float64)
    xs = torch.randn(2, 5, cfg["d_model"], generator=gen, dtype=torch.float64)
    f_train = layer.ffn(x1, xs)[0]
    layer.eval()
    f_eval = layer.ffn(x1, xs)[0]
    f_plain, f_big = plain.ffn(x1, xs)[0], big.ffn(x1, xs)[0]
    check("capacity: training drops (output moves), eval mode drops nothing, a capacity above every load = none",
          torch.equal(f_eval, f_plain) and torch.equal(f_big, f_plain) and float((f_train - f_plain).abs().max()) > 1e-3)


def routed_scaling_checks():
    """routed_scaling_factor r: the layer with r equals the layer with r = 1 (same weights) whose ROUTED output is
    multiplied by r, the shared experts' output unchanged (DeepSeek-V3: only the routed gates are scaled)."""
    gen = torch.Generator().manual_seed(35)
    for renorm in (False, True):
        cfg = _variant_cfg(n_shared_experts=1, router_renorm=renorm, routed_scaling_factor=2.5)
        layer = twin.MoEUTLayer(cfg).double()
        _random_fill(layer, gen, 0.5)
        _set_ln(layer)
        plain = twin.MoEUTLayer(dict(cfg, routed_scaling_factor=1.0)).double()
        plain.load_state_dict(layer.state_dict())
        B, T, C = 2, 5, cfg["d_model"]
        x1 = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
        xs = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
        f, l, sel = layer.ffn(x1, xs)
        f0, l0, sel0 = plain.ffn(x1, xs)
        err = float((f - 2.5 * f0).abs().max())
        shared_same = torch.equal(layer.ffn.shared_forward(x1), plain.ffn.shared_forward(x1))
        check(f"routed_scaling_factor 2.5 ({'renorm' if renorm else 'no renorm'}): routed output = 2.5 x the r = 1 "
              "output, same logits and selections, shared experts unscaled",
              err < 1e-12 and float(f0.abs().max()) > 1e-2 and torch.equal(l, l0) and torch.equal(sel, sel0)
              and shared_same, f"max err {err:.1e}")


def hash_routing_checks():
    """routing "hash" (Roller et al. 2021 §3): the table is the documented balanced hash; the FFN output of every
    position is the one expert hash(token) applied with weight 1, in every layer; the gradients match finite
    differences (no router: nothing flips)."""
    t = twin.hash_table(10, 3, 1)
    check("hash table: the definition's vector for V=10, E=3, seed 1", t.tolist() == [1, 2, 2, 1, 0, 0, 0, 0, 1, 2])
    ok = True
    for V, E, seed in ((40, 5, 3), (101, 7, 1), (64, 8, 0), (13, 13, 2)):
        counts = torch.bincount(twin.hash_table(V, E, seed), minlength=E)
        ok = ok and int(counts.min()) >= V // E and int(counts.max()) <= -(-V // E)
    check("hash table: every expert owns floor(V/E) or ceil(V/E) token ids", ok)
    check("hash table: another seed, another table", not torch.equal(twin.hash_table(64, 8, 1), twin.hash_table(64, 8, 2)))
    cfg = _variant_cfg(ff_k=1, balance="none", routing="hash", hash_seed=4, n_shared_experts=1)
    layer = twin.MoEUTLayer(cfg).double()
    gen = torch.Generator().manual_seed(41)
    _random_fill(layer, gen, 0.5)
    check("hash layer: no expert_sel, no ln2 in the state_dict",
          not any(k.endswith("expert_sel") or k.startswith("ln2.") for k in layer.state_dict()))
    B, T, C = 2, 6, cfg["d_model"]
    x1 = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    tokens = torch.randint(0, cfg["n_tokens"], (B, T), generator=gen)
    f, l, sel = layer.ffn(x1, None, None, tokens)
    table = twin.hash_table(cfg["n_tokens"], cfg["ff_n_experts"], 4)
    want = torch.zeros_like(f)
    for b in range(B):
        for t in range(T):
            e = int(table[tokens[b, t]])
            want[b, t] = torch.relu(x1[b, t] @ layer.ffn.keys[e]) @ layer.ffn.values[e]
    err = float((f - want).abs().max())
    check("hash layer: f_t = ReLU(x1_t keys[hash(x_t)]) values[hash(x_t)] (one expert, weight 1)",
          err < 1e-12 and l is None and torch.equal(sel[..., 0], table[tokens]), f"max err {err:.1e}")
    model = twin.build_model(dict(cfg, n_shared_experts=0)).double()
    routes = []
    _random_fill(model, gen, 0.5)
    orig = twin.SigmaMoE.forward

    def spy(self, *args, **kw):
        out = orig(self, *args, **kw)
        routes.append(out[2])
        return out
    twin.SigmaMoE.forward = spy
    try:
        model(tokens)
    finally:
        twin.SigmaMoE.forward = orig
    check("hash model: every layer application routes by the same table",
          len(routes) == cfg["n_layers"] and all(torch.equal(r[..., 0], table[tokens]) for r in routes))
    fd_gradcheck("MoEUT hash routing, 1 shared expert, dense first layer, padding, answer-only",
                 _variant_cfg(ff_k=1, balance="none", routing="hash", n_shared_experts=1, n_layers=3,
                              n_dense_first=1, d_ff=10),
                 dict(B=2, T=6, rows=[7, 5], answer_only=True, grad_scale=1.0), 25)


def expert_choice_checks():
    """Expert-choice routing (Zhou et al. 2022 §3.1) against a literal loop over experts: S = softmax over experts per
    token; expert e takes the c valid tokens of largest S[t, e] (equal scores: the earlier token), c = round(CF n / E);
    f[t] = sum over the experts that took t of S[t, e] * ReLU(x1[t] K_e) V_e. Then causality: in eval mode (causal
    top-ff_k routing) no logit of a position depends on a later token; in training mode the choice of the batch does."""
    gen = torch.Generator().manual_seed(41)
    cfg = _variant_cfg(ff_n_experts=4, router="softmax", balance="none", routing="expert_choice",
                       ff_capacity_factor=2.0)
    layer = twin.MoEUTLayer(cfg).double()
    _random_fill(layer, gen, 0.5)
    _set_ln(layer)
    B, T, C, E = 2, 5, cfg["d_model"], cfg["ff_n_experts"]
    x1 = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    xs = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, 3:] = False
    xs[0, 3] = xs[0, 1]  # positions 1 and 3 of row 0 score alike for every expert: a tie, earlier first
    f, l, _ = layer.ffn(x1, xs, valid=valid)
    S = torch.softmax(l.reshape(B * T, E), -1)
    vt = [t for t in range(B * T) if valid.reshape(-1)[t]]
    c = int(math.floor(2.0 * len(vt) / E + 0.5))  # round(2 * 8 / 4) = 4
    want = torch.zeros(B * T, C, dtype=torch.float64)
    chosen = torch.zeros(B * T, E, dtype=torch.bool)
    for e in range(E):
        for t in sorted(vt, key=lambda t: (-float(S[t, e]), t))[:c]:
            chosen[t, e] = True
            want[t] += S[t, e] * (torch.relu(x1.reshape(-1, C)[t] @ layer.ffn.keys[e]) @ layer.ffn.values[e])
    err = float((f.reshape(-1, C) - want).abs().max())
    tie_ok = all(not chosen[3, e] or chosen[1, e] for e in range(E))
    check("expert choice: the layer's routed output = the literal per-expert top-c loop (c = 4 of 8 valid), padding "
          "never chosen, each expert c tokens, a tie goes to the earlier token",
          err < 1e-12 and c == 4 and float(f[1, 3:].abs().max()) == 0.0 and bool((chosen.sum(0) == c).all()) and
          tie_ok, f"max err {err:.1e}")

    model = twin.build_model(_variant_cfg(n_layers=2, group_size=1, ff_n_experts=4, ff_k=2, router="softmax",
                                          balance="none", routing="expert_choice", ff_capacity_factor=2.0)).double()
    gen_fixtures.fixture_weights(model, torch.Generator().manual_seed(42))
    tok = torch.randint(3, 24, (1, 12), generator=gen)
    ev_moved, tr_moved = 0.0, 0.0
    with torch.no_grad():
        for v in range(3, 24):  # every other last token
            tok2 = tok.clone()
            tok2[0, -1] = v
            model.eval()
            ev_moved = max(ev_moved, float((model(tok)[0][0, :-1] - model(tok2)[0][0, :-1]).abs().max()))
            model.train()
            tr_moved = max(tr_moved, float((model(tok)[0][0, :-1] - model(tok2)[0][0, :-1]).abs().max()))
    check("expert choice: evaluation routes causally (no last token moves an earlier logit beyond rounding); "
          "training's batch-wide choice does move them", ev_moved < 1e-12 and tr_moved > 1e-3,
          f"eval {ev_moved:.1e}, training {tr_moved:.2g}")


def shared_expert_checks():
    """y = x1 + f_routed + sum_s ReLU(x1 @ Ks[s]) @ Vs[s]: against the same layer without shared experts (same
    weights) plus the sum computed here by hand; the router, its logits and the load counts ignore shared experts."""
    gen = torch.Generator().manual_seed(31)
    cfg = _variant_cfg(n_shared_experts=2)
    layer = twin.MoEUTLayer(cfg).double()
    _random_fill(layer, gen, 0.5)
    _set_ln(layer)
    plain = twin.MoEUTLayer(dict(cfg, n_shared_experts=0)).double()
    missing = plain.load_state_dict(layer.state_dict(), strict=False)
    B, T, C = 2, 5, cfg["d_model"]
    x = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    n_rot = twin.n_rot_of(cfg["d_head"])
    cos, sin = twin.rope_tables(T, n_rot, torch.float64)
    x1s = []
    hook = layer.ffn.register_forward_hook(lambda m, inp, out: x1s.append(inp[0].detach()))
    y, _, (l, sel) = layer(x, cos, sin, n_rot)
    hook.remove()
    y0, _, (l0, sel0) = plain(x, cos, sin, n_rot)
    x1 = x1s[0]
    Ks, Vs = layer.ffn.shared_keys.detach(), layer.ffn.shared_values.detach()
    hand = torch.zeros(B, T, C, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            for k in range(Ks.shape[0]):
                hand[b, t] += torch.clamp(x1[b, t] @ Ks[k], min=0) @ Vs[k]
    err = float((y.detach() - (y0.detach() + hand)).abs().max())
    check("shared experts: layer output = routed output + sum_s ReLU(x1 Ks_s) Vs_s (raw x1, gate 1)",
          err < 1e-12 and float(hand.abs().max()) > 1e-2 and missing.unexpected_keys == [
              "ffn.shared_keys", "ffn.shared_values"], f"max err {err:.1e}")
    check("shared experts: router logits and selections unchanged", torch.equal(l, l0) and torch.equal(sel, sel0))
    hist = [{"ffn_sel": [sel, sel]}]
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, 3:] = False
    c = twin.expert_load_counts(hist, valid, cfg["ff_n_experts"])[0]
    check("shared experts: load counts hold only routed slots (sum = K * valid positions * R)",
          int(c.sum()) == cfg["ff_k"] * int(valid.sum()) * 2)


def expert_bias_checks():
    gen = torch.Generator().manual_seed(41)
    E, K, C = 6, 2, 8
    # routing of a lone SigmaMoE: biased vs unbiased, for each router
    for router, renorm in (("sigmoid", False), ("softmax", False), ("sigmoid", True), ("softmax", True)):
        moe = twin.SigmaMoE(C, E, 4, K, router, renorm, 0, True).double()
        _random_fill(moe, gen, 0.5)
        l = torch.randn(40, E, generator=gen, dtype=torch.float64) * 2
        with torch.no_grad():
            moe.expert_bias.copy_(torch.randn(E, generator=gen, dtype=torch.float64) *
                                  gen_fixtures.EXPERT_BIAS_STD[router])
        idx_b, w_b, ranked = moe.route(l)
        scores = torch.softmax(l, -1) if router == "softmax" else torch.sigmoid(l)
        with torch.no_grad():
            saved = moe.expert_bias.clone()
            moe.expert_bias.zero_()
        idx_0, w_0, _ = moe.route(l)
        with torch.no_grad():
            moe.expert_bias.copy_(saved)
        sb, s0 = idx_b.sort(-1).values, idx_0.sort(-1).values
        changed = (sb != s0).any(-1)
        # the selection is the top-K of score + bias (brute force)
        rk = scores + saved
        chosen = torch.zeros_like(rk, dtype=torch.bool).scatter(-1, idx_b, True)
        topk_ok = bool((rk.masked_fill(~chosen, math.inf).min(-1).values >
                        rk.masked_fill(chosen, -math.inf).max(-1).values).all())
        # gates: the unbiased scores at the chosen experts (renormalised over them iff renorm)
        g = scores.gather(-1, idx_b)
        if renorm:
            g = g / g.sum(-1, keepdim=True)
        gates_ok = torch.equal(w_b, g)
        if not renorm:  # an expert selected with and without the bias has exactly the same gate
            same = True
            for n in range(l.shape[0]):
                for j in range(K):
                    hit = (idx_0[n] == idx_b[n, j]).nonzero()
                    if hit.numel() and float(w_0[n, hit[0, 0]]) != float(w_b[n, j]):
                        same = False
        else:  # the set decides the normaliser: an unchanged set keeps its gates exactly
            same = torch.equal(w_b.gather(-1, idx_b.argsort(-1))[~changed], w_0.gather(-1, idx_0.argsort(-1))[~changed])
        check(f"expert_bias ({router}{', renorm' if renorm else ''}): changes selections "
              f"({int(changed.sum())}/{changed.numel()}), top-K of score + b, gates from the unbiased scores, a kept "
              f"expert keeps its gate", bool(changed.any()) and topk_ok and gates_ok and same)
        log = []
        x1 = torch.randn(3, 4, C, generator=gen, dtype=torch.float64)
        _, lf, _ = moe(x1, torch.randn(3, 4, C, generator=gen, dtype=torch.float64), log)
        sf = torch.softmax(lf, -1) if router == "softmax" else torch.sigmoid(lf)
        ffn_logged = [t for kind, t, _ in log if kind == "ffn"]
        check(f"expert_bias ({router}{', renorm' if renorm else ''}): the margin check sees score + b",
              torch.equal(ranked.detach(), scores + saved) and len(ffn_logged) == 1 and
              torch.equal(ffn_logged[0], (sf + saved).detach()))

    # a bias of 0 is exactly the no-bias model (balance "none": no FFN loss either)
    for router, renorm in (("sigmoid", True), ("softmax", False)):
        cfg = _variant_cfg(n_shared_experts=1, router=router, router_renorm=renorm, balance="bias")
        spec = dict(B=2, T=6, rows=[7, 4], answer_only=True, grad_scale=1.0)
        g2 = torch.Generator().manual_seed(43)
        inputs, tg, lm = gen_fixtures.make_batch(spec, cfg["n_tokens"], g2)
        valid, targets = gen_fixtures.step_inputs(tg, lm)
        m_b = twin.build_model(cfg).double()
        gen_fixtures.fixture_weights(m_b, g2)
        with torch.no_grad():
            for layer in m_b.transformer.layers:
                layer.ffn.expert_bias.zero_()
        cfg_n = dict(cfg, balance="none")
        m_n = twin.build_model(cfg_n).double()
        m_n.load_state_dict({k: v for k, v in m_b.state_dict().items() if "expert_bias" not in k})
        rb = twin.objective(m_b, inputs, targets, valid, 1.0)
        rn = twin.objective(m_n, inputs, targets, valid, 1.0)
        rb["total"].backward()
        rn["total"].backward()
        gn = dict(m_n.named_parameters())
        ok = torch.equal(rb["logits"], rn["logits"]) and float(rb["total"]) == float(rn["total"]) and all(
            torch.equal(p.grad, gn[k].grad) for k, p in m_b.named_parameters())
        check(f"expert_bias = 0 gives exactly the unbiased model ({router}; logits, total, every gradient)", ok)
        check(f"balance bias ({router}): reg_ffn = 0, coefficient 0; expert_bias is a buffer without gradient",
              float(rb["reg_ffn"]) == 0.0 and twin.ffn_balance_coef(cfg) == 0.0 and
              all("expert_bias" not in k for k, _ in m_b.named_parameters()) and
              all(not layer.ffn.expert_bias.requires_grad for layer in m_b.transformer.layers) and
              sum("expert_bias" in k for k in m_b.state_dict()) == cfg["group_size"])

    # the update rule on hand-made counts: overloaded -gamma, underloaded +gamma, exactly-mean unchanged
    gamma = 0.001
    b = torch.tensor([0.5, -0.25, 0.125, 0.0, 1.0, -1.0], dtype=torch.float32)
    counts = torch.tensor([5, 2, 3, 3, 1, 4])  # mean 3
    want = torch.tensor([0.5 - gamma, -0.25 + gamma, 0.125, 0.0, 1.0 + gamma, -1.0 - gamma], dtype=torch.float32)
    got = twin.update_expert_bias(b.clone(), counts, gamma)
    check("bias update: b -= gamma sign(c - mean c) on hand-made counts (mean 3: 5,4 -gamma; 2,1 +gamma; 3 kept)",
          torch.equal(got, want), f"{got.tolist()}")
    got2 = twin.update_expert_bias(torch.zeros(3, dtype=torch.float64), torch.tensor([1, 1, 2]), 0.5)  # mean 4/3
    got3 = twin.update_expert_bias(torch.zeros(4, dtype=torch.float64), torch.tensor([7, 7, 7, 7]), 0.5)
    check("bias update: non-integer mean (1,1,2 -> +,+,-) and all equal (unchanged)",
          got2.tolist() == [0.5, 0.5, -0.5] and got3.tolist() == [0.0] * 4)
    # the counts: over the R applications and the valid positions only, shared experts not included
    sel_a = torch.tensor([[[0, 1], [2, 1], [3, 0]]])  # [B=1,T=3,K=2]
    sel_b = torch.tensor([[[1, 4], [4, 0], [2, 2]]])
    valid = torch.tensor([[True, True, False]])
    c = twin.expert_load_counts([{"ffn_sel": [sel_a, sel_b]}], valid, 5)[0]
    check("bias update: counts over R applications and valid positions", c.tolist() == [2, 3, 1, 0, 2],
          f"{c.tolist()}")
    # expert_bias_step on a model uses the config's balance_gamma and each layer's own counts
    cfg = _variant_cfg(router="sigmoid", balance="bias", balance_gamma=0.25, group_size=2)
    m = twin.build_model(cfg).double()
    counts = [torch.tensor([4, 0, 2, 2, 2]), torch.tensor([1, 1, 1, 1, 6])]
    twin.expert_bias_step(m, counts)
    check("bias update: expert_bias_step per distinct layer with balance_gamma",
          m.transformer.layers[0].ffn.expert_bias.tolist() == [-0.25, 0.25, 0.0, 0.0, 0.0] and
          m.transformer.layers[1].ffn.expert_bias.tolist() == [0.25, 0.25, 0.25, 0.25, -0.25])


def dense_prefix_checks():
    """With n_dense_first = n, the first n applications equal twin.DenseLayer modules built from the dense config and
    loaded with the same weights; then the MoEUT group in ABAB order, R = (L - n) / Gs histories per distinct layer."""
    for n, L, Gs in ((1, 5, 2), (2, 4, 1)):
        cfg = _variant_cfg(n_layers=L, group_size=Gs, n_dense_first=n, d_ff=14)
        spec = dict(B=2, T=6, rows=[7, 5], answer_only=False, grad_scale=1.0)
        gen = torch.Generator().manual_seed(50 + n)
        inputs, _, _ = gen_fixtures.make_batch(spec, cfg["n_tokens"], gen)
        model = twin.build_model(cfg).double()
        gen_fixtures.fixture_weights(model, gen)
        calls, outs = [], []
        names = {id(m): f"d{i}" for i, m in enumerate(model.transformer.dense_layers)}
        names.update({id(m): f"m{i}" for i, m in enumerate(model.transformer.layers)})
        def hook(m, inp, out):
            calls.append(names[id(m)])
            outs.append(out)

        hooks = [mod.register_forward_hook(hook)
                 for mod in list(model.transformer.dense_layers) + list(model.transformer.layers)]
        with torch.no_grad():
            _, hist = model(inputs)
        for hk in hooks:
            hk.remove()
        want = [f"d{a}" for a in range(n)] + [f"m{(a - n) % Gs}" for a in range(n, L)]
        check(f"dense prefix n={n}, L={L}, Gs={Gs}: application order {want}", calls == want, f"{calls}")
        check(f"dense prefix n={n}: R = (L - n)/Gs = {(L - n) // Gs} histories per distinct layer, none for the prefix",
              len(hist) == Gs and all(len(hl["ffn"]) == (L - n) // Gs and len(hl["att_o"]) == (L - n) // Gs
                                      for hl in hist))
        dense_cfg = gen_fixtures.dense_cfg(n_tokens=cfg["n_tokens"], d_model=cfg["d_model"], n_layers=n,
                                           n_heads=cfg["n_heads"], d_head=cfg["d_head"], d_ff=14,
                                           lm_head_bias=True, out_norm_affine=True)
        with torch.no_grad():
            h = model.embedding(inputs)
            n_rot = twin.n_rot_of(cfg["d_head"])
            cos, sin = twin.rope_tables(inputs.shape[1], n_rot, torch.float64)
            worst = 0.0
            for a in range(n):
                ref = twin.DenseLayer(dense_cfg).double()
                ref.load_state_dict(model.transformer.dense_layers[a].state_dict())
                h = ref(h, cos, sin, n_rot)
                worst = max(worst, float((h - outs[a]).abs().max()))
        check(f"dense prefix n={n}: the first n applications equal twin.DenseLayer on the same weights",
              worst == 0.0, f"max diff {worst:.1e}")
    cfg = _variant_cfg(n_shared_experts=1, n_dense_first=1, n_layers=3)
    del cfg["d_ff"]
    lin1 = twin.build_model(cfg).transformer.dense_layers[0].ffn.linear1
    check("dense prefix: d_ff default (ff_k + n_shared_experts) * ff_expert_size",
          twin.dense_prefix_d_ff(cfg) == 12 and lin1.out_features == 12 and '"d_ff": 12' in twin.config_json(cfg))


def param_count_formula(cfg):
    """Parameters of a MoEUT config written from the spec (buffers not counted)."""
    V, C = cfg["n_tokens"], cfg["d_model"]
    H, D, EA = cfg["n_heads"], cfg["d_head"], cfg["att_n_experts"]
    S, Ks = cfg["ff_expert_size"], cfg.get("n_shared_experts", 0)
    n, Gs = cfg.get("n_dense_first", 0), cfg["group_size"]
    W = cfg.get("ff_residual_size", 0)
    d_ff = cfg.get("d_ff") or (cfg["ff_k"] + Ks) * S + W
    ln = 2 * C
    hashed = cfg.get("routing") == "hash"  # Roller et al.: no router (expert_sel) and so no LN2 before it
    dense_layer = 4 * H * D * C + (C * d_ff + d_ff) + (d_ff * C + C) + 2 * ln
    attention = 2 * H * D * C + H * EA * C * D + H * EA * D * C + 2 * H * EA * C
    Es = cfg.get("ff_n_experts_per_layer") or [cfg["ff_n_experts"]] * Gs  # a pyramid's E_i per layer
    ffn = sum(E * C * S + E * S * C + (0 if hashed else E * C) + Ks * (C * S + S * C) + (C * W + W * C) for E in Es)
    head = V * C + (V if cfg["lm_head_bias"] else 0) + (2 * C if cfg["out_norm_affine"] else 0)
    return V * C + n * dense_layer + Gs * (attention + (1 if hashed else 2) * ln) + ffn + head


def spec_state_dict_names(cfg):
    """The state_dict order the spec prescribes, written out by hand."""
    n, Gs = cfg.get("n_dense_first", 0), cfg["group_size"]
    names = ["embedding.weight"]
    for i in range(n):
        p = f"transformer.dense_layers.{i}."
        names += [p + s for s in ("attention.q.weight", "attention.k.weight", "attention.v.weight",
                                  "attention.o.weight", "ffn.linear1.weight", "ffn.linear1.bias", "ffn.linear2.weight",
                                  "ffn.linear2.bias", "ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias")]
    for i in range(Gs):
        p = f"transformer.layers.{i}."
        # attention as today: SwitchHead's own tensors, then its q/k Linear children
        names += [p + "attention." + s for s in ("v", "o", "sel_v", "sel_o", "q.weight", "k.weight")]
        names += [p + "ffn.keys", p + "ffn.values"] + ([] if cfg.get("routing") == "hash" else [p + "ffn.expert_sel"])
        if cfg.get("n_shared_experts", 0) > 0:
            names += [p + "ffn.shared_keys", p + "ffn.shared_values"]
        if cfg.get("ff_residual_size", 0) > 0:
            names += [p + "ffn.residual_keys", p + "ffn.residual_values"]
        if cfg.get("balance") == "bias":
            names += [p + "ffn.expert_bias"]
        names += [p + s for s in ("ln1.weight", "ln1.bias")]
        if cfg.get("routing") != "hash":
            names += [p + s for s in ("ln2.weight", "ln2.bias")]
    if cfg["out_norm_affine"]:
        names += ["out_norm.weight", "out_norm.bias"]
    names += ["lm_head.weight"] + (["lm_head.bias"] if cfg["lm_head_bias"] else [])
    return names


def variant_count_checks():
    new_keys = ("n_shared_experts", "n_dense_first", "d_ff", "balance_gamma", "routed_scaling_factor", "routing",
                "hash_seed", "ff_capacity_factor", "ff_capacity_order", "ff_residual_size")
    for name in ("moeut_shared_bias", "moeut_dense_first", "moeut_dense_first_shared_softmax_bias",
                 "moeut_deepseek_scaled", "moeut_hash", "moeut_capacity", "moeut_capacity_score"):
        cfg = gen_fixtures.FIXTURES[name][0]
        model = twin.build_model(cfg)
        got = sum(p.numel() for p in model.parameters())
        want = param_count_formula(cfg)
        check(f"{name}: {got} parameters = closed formula {want}", got == want)
        check(f"{name}: state_dict order as the spec", list(model.state_dict()) == spec_state_dict_names(cfg))
        j = twin.json.loads(twin.config_json(cfg))
        check(f"{name}: config JSON carries the keys it sets ({', '.join(k for k in new_keys if k in j)})",
              all((k in j) == (k in cfg and (k != "d_ff" or cfg.get("n_dense_first", 0) > 0)) for k in new_keys) and
              "entropy_reg" not in j if cfg.get("balance") == "bias" else True)
    old = [n for n, (c, *_) in gen_fixtures.FIXTURES.items()
           if not any(k in c for k in ("n_shared_experts", "n_dense_first", "balance_gamma", "routed_scaling_factor",
                                       "routing", "ff_capacity_factor", "ff_residual_size"))]
    check(f"configs without the new switches carry none of their keys ({len(old)} fixtures)",
          all(not any(k in twin.json.loads(twin.config_json(gen_fixtures.FIXTURES[n][0])) for k in new_keys
                      if not (k == "d_ff" and gen_fixtures.FIXTURES[n][0]["arch"] == "dense")) for n in old))
    # reference_init of the new tensors: shared experts like the routed ones, dense prefix as the dense model
    cfg = _variant_cfg(d_model=64, n_heads=4, d_head=16, ff_n_experts=8, ff_expert_size=32, n_shared_experts=2,
                       n_dense_first=1, n_layers=5, d_ff=96, balance="bias", router="sigmoid")
    model = twin.build_model(cfg)
    twin.reference_init(model, torch.Generator().manual_seed(9))
    s = math.sqrt(2.0 / 5)
    lay, dl = model.transformer.layers[0].ffn, model.transformer.dense_layers[0]
    ratios = [float(lay.shared_keys.std()) / (s / 8), float(lay.shared_values.std()) / (s / 16),
              float(dl.ffn.linear1.weight.std()) / (s / 8), float(dl.ffn.linear2.weight.std()) / (s / math.sqrt(96)),
              float(dl.attention.o.weight.std()) / (s / 8)]
    check("reference_init: shared experts and dense prefix at their stds (L = every application), bias 0",
          all(abs(r - 1) < 0.1 for r in ratios) and float(lay.expert_bias.abs().max()) == 0.0 and
          float(dl.ffn.linear1.bias.abs().max()) == 0.0 and float(dl.ln1.weight.min()) == 1.0,
          " ".join(f"{r:.3f}" for r in ratios))


# -----------------------------------------------------------------------------------------------------------------
# Arch "moe": the dense Transformer with a routed FFN (Switch Transformer §2, Mixtral eq. 1-2)
# -----------------------------------------------------------------------------------------------------------------
def _moe_cfg(**kw):
    base = dict(n_tokens=24, d_model=12, n_layers=3, n_heads=2, d_head=6, ff_n_experts=4, ff_expert_size=5,
                lm_head_bias=True, out_norm_affine=True)
    base.update(kw)
    return gen_fixtures.moe_cfg(**base)


def moe_arch_checks():
    fd_gradcheck("moe: Mixtral renormalised softmax top-2, Switch loss alpha 0.5, dense first layer, padding",
                 _moe_cfg(ff_k=2, router_renorm=True, balance_alpha=0.5, n_dense_first=1, d_ff=9),
                 dict(B=3, T=7, rows=[8, 5, 2], answer_only=True, grad_scale=1.0), 41)
    fd_gradcheck("moe: sigmoid top-3 x 2.5, no balancing, no head bias/affine",
                 _moe_cfg(ff_k=3, router="sigmoid", routed_scaling_factor=2.5, balance="none", lm_head_bias=False,
                          out_norm_affine=False),
                 dict(B=2, T=6, rows=[7, 4], answer_only=False, grad_scale=0.5), 42)
    gen = torch.Generator().manual_seed(43)
    # Mixtral eq. 2: G(x) = Softmax(TopK(x W_g)) (softmax over the K selected logits) = the renormalised top-K of the
    # softmax over all E (what RoutedFFN computes with router_renorm)
    ffn = twin.RoutedFFN(8, 6, 4, 2, "softmax", True, 1.0).double()
    _random_fill(ffn, gen)
    u = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64)
    l = torch.nn.functional.linear(u, ffn.expert_sel)
    top = l.topk(2, dim=-1)
    mixtral = torch.softmax(top.values, dim=-1)
    p = torch.softmax(l, dim=-1).gather(-1, top.indices)
    err = float((p / p.sum(-1, keepdim=True) - mixtral).abs().max())
    check("moe: router_renorm softmax gates = Mixtral's softmax over the top-K logits (eq. 2)", err < 1e-14,
          f"max err {err:.1e}")
    # Switch §2, eq. 2 for K = 1: y = p_i(x) E_i(x) with i the argmax, against a per-token loop over the experts
    sw = twin.RoutedFFN(8, 4, 5, 1, "softmax", False, 1.0).double()
    _random_fill(sw, gen, 0.5)
    y, l, idx = sw(u)
    worst = 0.0
    for b in range(2):
        for t in range(5):
            x = u[b, t]
            i = int(l[b, t].argmax())
            e = torch.relu(x @ sw.keys[i] + sw.keys_bias[i]) @ sw.values[i] + sw.values_bias[i]
            worst = max(worst, float((y[b, t] - torch.softmax(l[b, t], -1)[i] * e).abs().max()))
    check("moe: Switch top-1 output = p_i(x) E_i(x) per token (Switch eq. 2)", worst < 1e-13, f"max err {worst:.1e}")
    # sparse upcycling: every expert a copy of the dense layer's FFN and renormalised gates = the dense model
    dcfg = gen_fixtures.dense_cfg(n_tokens=24, d_model=12, n_layers=3, n_heads=2, d_head=6, d_ff=5,
                                  lm_head_bias=True, out_norm_affine=True)
    dense = twin.build_model(dcfg).double()
    _random_fill(dense, gen, 0.5)
    tokens = torch.randint(0, 24, (2, 7), generator=gen)
    for router, renorm, k, same in (("softmax", True, 2, True), ("sigmoid", True, 3, True), ("softmax", False, 2, False)):
        moe = twin.build_model(_moe_cfg(ff_k=k, router=router, router_renorm=renorm, n_dense_first=1, d_ff=5)).double()
        _random_fill(moe, gen, 0.5)
        sd = moe.state_dict()
        with torch.no_grad():
            for n, t in dense.state_dict().items():
                if not n.startswith("transformer.layers."):
                    sd[n].copy_(t)
                    continue
                a = int(n.split(".")[2])
                rest = n.split(".", 3)[3]
                if a < 1:
                    sd[f"transformer.dense_layers.{a}.{rest}"].copy_(t)
                    continue
                p = f"transformer.layers.{a - 1}."
                if rest == "ffn.linear1.weight":
                    sd[p + "ffn.keys"].copy_(t.t().expand_as(sd[p + "ffn.keys"]))
                elif rest == "ffn.linear1.bias":
                    sd[p + "ffn.keys_bias"].copy_(t.expand_as(sd[p + "ffn.keys_bias"]))
                elif rest == "ffn.linear2.weight":
                    sd[p + "ffn.values"].copy_(t.t().expand_as(sd[p + "ffn.values"]))
                elif rest == "ffn.linear2.bias":
                    sd[p + "ffn.values_bias"].copy_(t.expand_as(sd[p + "ffn.values_bias"]))
                else:
                    sd[p + rest].copy_(t)
        moe.load_state_dict(sd)
        with torch.no_grad():
            diff = float((moe(tokens)[0] - dense(tokens)[0]).abs().max())
        label = f"moe: upcycled copies, {router} top-{k}{' renorm' if renorm else ''}"
        if same:
            check(f"{label}: logits = the dense model's", diff < 1e-12, f"max diff {diff:.1e}")
        else:
            check(f"{label}: logits differ from the dense model's (gates do not sum to 1)", diff > 1e-3,
                  f"max diff {diff:.1e}")
    # names and order of the C model (model/moe_layer.c), parameter count, config JSON
    cfg = gen_fixtures.FIXTURES["moe_mixtral_dense_first"][0]
    model = twin.build_model(cfg)
    want = []
    for n, (pfx, count) in (("dense", ("transformer.dense_layers.", 1)), ("moe", ("transformer.layers.", 2))):
        for i in range(count):
            p = f"{pfx}{i}."
            want += [p + f"attention.{x}.weight" for x in "qkvo"]
            if n == "dense":
                want += [p + "ffn.linear1.weight", p + "ffn.linear1.bias", p + "ffn.linear2.weight",
                         p + "ffn.linear2.bias"]
            else:
                want += [p + "ffn." + x for x in ("expert_sel", "keys", "keys_bias", "values", "values_bias")]
            want += [p + x for x in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias")]
    want = ["embedding.weight"] + want + ["lm_head.weight"]
    check("moe: state_dict names and order of model/moe_layer.c", list(model.state_dict()) == want)
    C, V, H, D, E, S, F = 16, 44, 2, 8, 5, 6, 10
    formula = 2 * V * C + 1 * (4 * H * D * C + 2 * F * C + F + C + 4 * C) + \
        2 * (4 * H * D * C + E * C + E * C * S + E * S + E * S * C + E * C + 4 * C)
    check("moe: parameter count = model/param_count.c's formula",
          sum(p.numel() for p in model.parameters()) == formula)
    j = twin.json.loads(twin.config_json(cfg))
    check("moe: config JSON has only keys of arch moe", set(j) <= set(twin.MOE_KEYS) | {"d_ff"} and j["d_ff"] == 10)


def group_limited_checks():
    """DeepSeek-V3's group-limited routing (arXiv 2412.19437 §2.1.2): by hand, the group score is a sum of the two
    largest SCORES (a sum of logits would rank other groups); the chosen experts lie in the topk_group best groups and
    are the top-K of those groups' experts; all groups kept = no limit; finite differences through a grouped model."""
    moe = twin.SigmaMoE(4, 6, 3, 2, n_group=3, topk_group=1).double()
    with torch.no_grad():
        moe.expert_sel.zero_()
    l = torch.tensor([[5.0, 0.0, 1.5, 1.5, -1.0, -2.0]], dtype=torch.float64)
    idx, w, _ = moe.route(l)
    # sigmoid group sums {0.993 + 0.5, 2 x 0.818, 0.269 + 0.119}: group 1; a logit sum would pick group 0 (5 > 3)
    check("group-limited by hand: sigmoid scores {5, 0 | 1.5, 1.5 | -1, -2}, 1 of 3 groups -> experts {2, 3}",
          sorted(idx[0].tolist()) == [2, 3], str(idx.tolist()))
    moe_s = twin.SigmaMoE(4, 6, 3, 2, router="softmax", n_group=3, topk_group=1).double()
    idx, w, _ = moe_s.route(l)
    check("group-limited by hand: softmax scores, same logits -> group 0, experts {0, 1}",
          sorted(idx[0].tolist()) == [0, 1], str(idx.tolist()))
    gen = torch.Generator().manual_seed(2412)
    E, K, G, TG = 12, 3, 4, 2
    l = torch.randn(50, E, generator=gen, dtype=torch.float64) * 2
    for router in ("sigmoid", "softmax"):
        moe = twin.SigmaMoE(4, E, 3, K, router=router, n_group=G, topk_group=TG).double()
        idx, _, _ = moe.route(l)
        s = torch.sigmoid(l) if router == "sigmoid" else torch.softmax(l, -1)
        ok = True
        for n in range(l.shape[0]):
            gs = [sorted(s[n, q * 3:(q + 1) * 3].tolist())[-2:] for q in range(G)]
            kept = sorted(range(G), key=lambda q: -sum(gs[q]))[:TG]
            cand = [e for e in range(E) if e // 3 in kept]
            want = sorted(sorted(cand, key=lambda e: -float(s[n, e]))[:K])
            ok = ok and sorted(idx[n].tolist()) == want
        free = twin.SigmaMoE(4, E, 3, K, router=router).double().route(l)[0]
        moved = int((idx.sort(-1).values != free.sort(-1).values).any(-1).sum())
        allkept = twin.SigmaMoE(4, E, 3, K, router=router, n_group=G, topk_group=G).double().route(l)[0]
        check(f"group-limited ({router}): 50 random rows against a per-row evaluation of the formula; {moved} of 50 "
              "selections differ from the unlimited ones; all groups kept = no limit",
              ok and moved > 10 and torch.equal(allkept.sort(-1).values, free.sort(-1).values))
    fd_gradcheck("MoEUT group-limited: 8 experts in 4 groups, 2 kept, sigmoid",
                 _variant_cfg(ff_n_experts=8, ff_k=3, n_group=4, topk_group=2),
                 dict(B=2, T=6, rows=[7, 5], answer_only=False, grad_scale=1.0), 31)
    fd_gradcheck("MoEUT DeepSeek-V3 routing: sigmoid renorm x 2.5, expert_bias, 8 experts in 4 groups, 2 kept",
                 _variant_cfg(ff_n_experts=8, ff_k=3, router_renorm=True, routed_scaling_factor=2.5, balance="bias",
                              n_group=4, topk_group=2),
                 dict(B=2, T=6, rows=[7, 5], answer_only=False, grad_scale=1.0), 32)
    j = twin.json.loads(twin.config_json(gen_fixtures.FIXTURES["moeut_group_limited"][0]))
    check("moeut_group_limited: config JSON carries n_group and topk_group",
          j.get("n_group") == 4 and j.get("topk_group") == 2)


def seq_balance_checks():
    """DeepSeek-V3's sequence-wise balance loss (arXiv 2412.19437 eqs. 17-20) without alpha: equal scores give 1
    whatever is selected (sum_i f_i = E, P_i = 1/E); one position selecting expert 0 of 2 gives E s'_0 with s' the
    scores normalised over all experts (sigmoid: s_0 / (s_0 + s_1)); a masked-out sequence is left out of the mean;
    finite differences through a model with the loss (alpha 0.5) beside bias balancing."""
    gen = torch.Generator().manual_seed(17)
    B, T, E, K = 3, 5, 6, 2
    sel = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(B * T)]).view(B, T, K)
    l0 = torch.zeros(B, T, E, dtype=torch.float64)
    ok = all(abs(float(twin.seq_balance_loss(l0, sel, None, r)) - 1) < 1e-12 for r in ("sigmoid", "softmax"))
    check("seq_balance: equal scores give 1 (sigmoid and softmax), whatever the selection", ok)
    l = torch.tensor([[[1.0, -1.0]], [[3.0, 2.0]]], dtype=torch.float64)
    s2 = torch.tensor([[[0]], [[1]]])
    valid = torch.tensor([[True], [False]])
    got_sig = float(twin.seq_balance_loss(l, s2, valid, "sigmoid"))
    got_soft = float(twin.seq_balance_loss(l, s2, valid, "softmax"))
    sig = 1 / (1 + math.exp(-1.0))
    check("seq_balance: one position, expert 0 of 2: 2 s'_0 (sigmoid s(1) / (s(1) + s(-1)), softmax); the masked "
          "sequence left out", abs(got_sig - 2 * sig) < 1e-12 and abs(got_soft - 2 / (1 + math.exp(-2.0))) < 1e-12,
          f"{got_sig} {got_soft}")
    both = float(twin.seq_balance_loss(l, s2, None, "softmax"))
    check("seq_balance: the mean over the sequences", abs(both - (2 / (1 + math.exp(-2.0)) + 2 / (1 + math.e)) / 2)
          < 1e-12, f"{both}")
    fd_gradcheck("MoEUT sequence-wise balance loss (alpha 0.5) beside bias balancing, sigmoid renorm",
                 _variant_cfg(router_renorm=True, balance="bias", seq_balance_alpha=0.5),
                 dict(B=3, T=6, rows=[7, 5, 3], answer_only=False, grad_scale=1.0), 41)
    fd_gradcheck("MoEUT sequence-wise balance loss (alpha 0.5) beside the entropy regularizer, softmax",
                 _variant_cfg(router="softmax", seq_balance_alpha=0.5),
                 dict(B=2, T=6, rows=[7, 4], answer_only=True, grad_scale=1.0), 42)


def residual_mlp_checks():
    """ff_residual_size W, written from DeepSpeed-MoE §4.1.2 (Residual-MoE: y = MLP(x) + g E_top1(x)) and Snowflake
    Arctic (y = x + MLP(x) + MoE(x)): the layer equals the same layer without the residual MLP (same weights) plus
    ReLU(x1 Wk) Wv computed here by hand, token by token, at weight 1; the router and its selections do not see it.
    Then finite differences, parameter count, state_dict order and the config JSON of its fixtures."""
    gen = torch.Generator().manual_seed(41)
    for ks in (0, 1):
        cfg = _variant_cfg(ff_k=1, n_shared_experts=ks, ff_residual_size=7)
        layer = twin.MoEUTLayer(cfg).double()
        _random_fill(layer, gen, 0.5)
        _set_ln(layer)
        plain = twin.MoEUTLayer(dict(cfg, ff_residual_size=0)).double()
        missing = plain.load_state_dict(layer.state_dict(), strict=False)
        B, T, C = 2, 5, cfg["d_model"]
        x = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
        n_rot = twin.n_rot_of(cfg["d_head"])
        cos, sin = twin.rope_tables(T, n_rot, torch.float64)
        x1s = []
        hook = layer.ffn.register_forward_hook(lambda m, inp, out: x1s.append(inp[0].detach()))
        y, _, (l, sel) = layer(x, cos, sin, n_rot)
        hook.remove()
        y0, _, (l0, sel0) = plain(x, cos, sin, n_rot)
        x1 = x1s[0]
        Wk, Wv = layer.ffn.residual_keys.detach(), layer.ffn.residual_values.detach()
        hand = torch.zeros(B, T, C, dtype=torch.float64)
        for b in range(B):
            for t in range(T):
                for w in range(Wk.shape[1]):
                    hand[b, t] += max(float(x1[b, t] @ Wk[:, w]), 0.0) * Wv[w]
        err = float((y.detach() - (y0.detach() + hand)).abs().max())
        check(f"residual MLP (K_s={ks}): layer output = layer without it + ReLU(x1 Wk) Wv (raw x1, weight 1)",
              err < 1e-12 and float(hand.abs().max()) > 1e-2 and Wk.shape == (C, 7) and Wv.shape == (7, C) and
              missing.unexpected_keys == ["ffn.residual_keys", "ffn.residual_values"], f"max err {err:.1e}")
        check(f"residual MLP (K_s={ks}): router logits and selections unchanged",
              torch.equal(l, l0) and torch.equal(sel, sel0))
    fd_gradcheck("MoEUT PR-MoE residual: ff_k 1 + residual MLP W=6, padding, answer-only",
                 _variant_cfg(ff_k=1, ff_residual_size=6),
                 dict(B=2, T=6, rows=[7, 4], answer_only=True, grad_scale=1.0), 25)
    fd_gradcheck("MoEUT Arctic: top-2 softmax renorm + residual MLP W=5 + 1 shared, dense prefix of default width",
                 _variant_cfg(n_layers=3, group_size=1, n_dense_first=1, n_shared_experts=1, router="softmax",
                              router_renorm=True, ff_residual_size=5, lm_head_bias=False),
                 dict(B=2, T=6, rows=[7, 5], answer_only=False, grad_scale=0.5), 26)
    for name in ("moeut_residual", "moeut_arctic_residual"):
        cfg = gen_fixtures.FIXTURES[name][0]
        model = twin.build_model(cfg)
        got = sum(p.numel() for p in model.parameters())
        check(f"{name}: {got} parameters = closed formula", got == param_count_formula(cfg))
        check(f"{name}: state_dict order as the spec", list(model.state_dict()) == spec_state_dict_names(cfg))
        j = twin.json.loads(twin.config_json(cfg))
        check(f"{name}: config JSON carries ff_residual_size", j.get("ff_residual_size") == cfg["ff_residual_size"])
    cfg = gen_fixtures.FIXTURES["moeut_arctic_residual"][0]
    check("dense prefix: d_ff default (ff_k + n_shared_experts) * ff_expert_size + ff_residual_size",
          twin.dense_prefix_d_ff(cfg) == (2 + 1) * 4 + 12 and
          twin.build_model(cfg).transformer.dense_layers[0].ffn.linear1.out_features == 24)
    # reference_init: the residual MLP as the shared experts (keys s/sqrt(C), values s/sqrt(E S))
    cfg = _variant_cfg(d_model=64, n_heads=4, d_head=16, ff_n_experts=8, ff_expert_size=32, ff_residual_size=96)
    model = twin.build_model(cfg)
    twin.reference_init(model, torch.Generator().manual_seed(10))
    s = math.sqrt(2.0 / cfg["n_layers"])
    lay = model.transformer.layers[1].ffn
    ratios = [float(lay.residual_keys.std()) / (s / 8), float(lay.residual_values.std()) / (s / 16)]
    check("reference_init: residual MLP at the shared experts' stds", all(abs(r - 1) < 0.1 for r in ratios),
          " ".join(f"{r:.3f}" for r in ratios))


def pyramid_checks():
    """ff_n_experts_per_layer, written from DeepSpeed-MoE §4.1.1 (Pyramid-MoE: the number of experts grows in the
    later layers): distinct layer i is exactly the uniform model's layer with E = E_i (same weights load into it,
    same output and logits); the histories and balancing terms are per layer of its own E_i; then finite
    differences, parameter count, state_dict order and the config JSON of its fixtures."""
    gen = torch.Generator().manual_seed(43)
    cfg = _variant_cfg(ff_n_experts_per_layer=[3, 6])
    del cfg["ff_n_experts"]
    model = twin.build_model(cfg).double()
    _random_fill(model, gen, 0.5)
    B, T, C = 2, 5, cfg["d_model"]
    n_rot = twin.n_rot_of(cfg["d_head"])
    cos, sin = twin.rope_tables(T, n_rot, torch.float64)
    x = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    for i, E in enumerate([3, 6]):
        layer = model.transformer.layers[i]
        ref = twin.MoEUTLayer(dict(cfg, ff_n_experts=E)).double()
        ref.load_state_dict(layer.state_dict())
        y, _, (l, sel) = layer(x, cos, sin, n_rot)
        y0, _, (l0, sel0) = ref(x, cos, sin, n_rot)
        check(f"pyramid: layer {i} has E_{i} = {E} experts (keys, values, router rows) and equals the uniform layer "
              f"with E = {E}", layer.ffn.keys.shape[0] == E and layer.ffn.expert_sel.shape[0] == E and
              l.shape[-1] == E and torch.equal(y, y0) and torch.equal(sel, sel0))
    fd_gradcheck("MoEUT Pyramid-MoE: 3 then 5 experts, entropy balancing per layer, padding, answer-only",
                 {k: v for k, v in _variant_cfg(ff_n_experts_per_layer=[3, 5]).items() if k != "ff_n_experts"},
                 dict(B=2, T=6, rows=[7, 4], answer_only=True, grad_scale=1.0), 27)
    fd_gradcheck("MoEUT PR-MoE: 5 then 3 experts, ff_k 1 + residual MLP, softmax + Switch balancing",
                 {k: v for k, v in _variant_cfg(ff_n_experts_per_layer=[5, 3], ff_k=1, ff_residual_size=4,
                                                router="softmax", balance="switch", balance_alpha=0.5).items()
                  if k != "ff_n_experts"},
                 dict(B=2, T=6, rows=[7, 5], answer_only=False, grad_scale=1.0), 28)
    for name in ("moeut_pyramid", "moeut_pyramid_residual_bias"):
        cfg = gen_fixtures.FIXTURES[name][0]
        model = twin.build_model(cfg)
        got = sum(p.numel() for p in model.parameters())
        check(f"{name}: {got} parameters = closed formula", got == param_count_formula(cfg))
        check(f"{name}: state_dict order as the spec", list(model.state_dict()) == spec_state_dict_names(cfg))
        j = twin.json.loads(twin.config_json(cfg))
        check(f"{name}: config JSON carries ff_n_experts_per_layer, not ff_n_experts",
              j.get("ff_n_experts_per_layer") == cfg["ff_n_experts_per_layer"] and "ff_n_experts" not in j)
    hist = [{"ffn_sel": [torch.tensor([[[0], [2]]])]}, {"ffn_sel": [torch.tensor([[[5], [5]]])]}]
    c = twin.expert_load_counts(hist, None, [3, 6])
    check("pyramid: expert_load_counts per layer of its own E_i",
          [t.tolist() for t in c] == [[1, 0, 1], [0, 0, 0, 0, 0, 2]])


if __name__ == "__main__":
    main()
