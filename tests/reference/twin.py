"""Independent PyTorch twin of the two models (dense pre-LN Transformer and MoEUT), written from
model/spec/moeut-spec.md and dm-math-training-code.md (the latter wins), NOT from the C code.

Everything is plain autograd: the gradients the C backward must reproduce come from torch, never from a hand formula.
The modules work in any float dtype (model.double() for fixtures, float32 for the benchmark).

Semantics (DM-math version):
  * h0 = Embedding[tok] (unscaled). Layers: MoEUT peri-LN (shared ABAB: application a uses distinct layer a % Gs),
    dense pre-LN. Final LayerNorm (affine iff out_norm_affine), head Linear (bias iff lm_head_bias).
  * SwitchHead: q,k dense, each scaled by D^-1/4, RoPE NeoX on the first n_rot dims (int(0.5 D) rounded down to even,
    base 1e4, angle table computed in fp32 as the reference does), causal softmax with scale 1; V and O are experts
    chosen per head by sigmoid top-KA routers that read LN1(x); V experts read the RAW x; gates = sigmoid values.
  * sigma-MoE: router on LN2(x1), sigmoid top-K, keys read the raw x1, ReLU, gate-weighted sum (no renormalisation).
    The MoE-variant switches (model/spec/moe-variants.md, from the cited papers): router "softmax" gates with the
    softmax over all E logits at the top-K (Switch / GShard / DeepSeekMoE), router_renorm divides the K gates by their
    sum (GShard, Mixtral's softmax over the top-K logits; DeepSeek-V3's normalised sigmoid), routed_scaling_factor
    multiplies the K routed gates after that (DeepSeek-V3's released config: 2.5); balance "switch" replaces
    the FFN entropy regularizer by Fedus et al.'s alpha * E * sum_i f_i P_i per layer application (f: fraction of the
    K*n routed slots per expert, not differentiated; P: mean softmax probability; over the valid positions), "none"
    by nothing. balance "bias" (DeepSeek-V3 §2.1.2, Wang et al. 2024, auxiliary-loss-free): a per-layer BUFFER
    expert_bias[E] is added to the scores (sigmoid or softmax of the logits) for the top-K selection only, the gates
    are those of the unbiased scores; no FFN balancing loss; after an optimizer step b_e -= gamma * sign(c_e - mean c)
    (update_expert_bias). n_shared_experts K_s (DeepSeekMoE §3.2 eq. 9): K_s always-on experts of size S, gate 1,
    reading the raw x1, outside the router and the balancing statistics (y = x1 + f_routed + f_shared).
    n_dense_first n: the first n layer applications are dense pre-LN layers (DenseLayer, width d_ff) with their own
    weights (transformer.dense_layers.{i}); application a >= n uses MoEUT layer (a - n) % Gs.
    routing "expert_choice" (Zhou et al. 2022, arXiv 2202.09368 §3.1): in training mode (module.training) each expert
    takes its top-c tokens of the batch from its column of S = softmax(X W_g) [n, E] over the n positions with
    valid = True, c = round(ff_capacity_factor * n / E) (halves away from zero) clamped to [1, n], gates = those
    scores, a token gets 0..E experts; ties between equal scores go to the earlier position. In eval mode (and for
    decoding) each position routes alone: its top-ff_k experts of the same softmax (ff_k = round(CF)), causal.
  * Loss: CE over targets != -1, mean over the counted ones; regularizers in the masked [B,B]-broadcast form of the
    reference code (log_softmax, masked logsumexp over the [B, R*T] axis, minus log(cnt) broadcast [B,..]-[B,1,..]),
    history of the R applications of each distinct module concatenated along time.
"""
import json
import math
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-5
ROPE_BASE = 10000.0

# Keys of the JSON "model" object per architecture (model/model_config.c rejects the other arch's keys).
DENSE_KEYS = ["arch", "n_tokens", "d_model", "n_layers", "n_heads", "d_head", "d_ff", "dropout", "lm_head_bias",
              "out_norm_affine"]
MOEUT_KEYS = [
    "arch", "n_tokens", "d_model", "n_layers", "n_heads", "d_head", "ff_n_experts", "ff_expert_size", "ff_k",
    "att_n_experts", "att_k", "group_size", "entropy_reg", "att_entropy_reg", "ff_expert_dropout",
    "att_expert_dropout", "dropout", "lm_head_bias", "out_norm_affine",
]
# MoE-variant switches: written only when the config sets them, so configs without them keep their exact bytes
# (model_config.c reads their defaults: router "sigmoid", router_renorm false, balance "entropy").
# routed_scaling_factor (default 1), n_shared_experts, n_dense_first and balance_gamma likewise; d_ff is written only when n_dense_first > 0 (the dense
# prefix's width; MOEUT_KEYS has no d_ff).
MOEUT_SWITCH_KEYS = ["router", "router_renorm", "routed_scaling_factor", "balance", "balance_alpha", "balance_gamma",
                     "n_shared_experts", "n_dense_first", "routing", "ff_capacity_factor"]
BALANCES = ("entropy", "switch", "none", "bias")
BALANCE_GAMMA_DEFAULT = 0.001


def dense_prefix_d_ff(cfg):
    """Width of the dense-prefix FFNs of a MoEUT config: d_ff when given (nonzero), else the C default
    (ff_k + n_shared_experts) * ff_expert_size (the active expert width)."""
    if cfg.get("d_ff"):
        return cfg["d_ff"]
    return (cfg["ff_k"] + cfg.get("n_shared_experts", 0)) * cfg["ff_expert_size"]


def n_rot_of(d_head):
    """int(0.5 * D) rounded down to an even number (the [T] rule; spec §3.3)."""
    r = int(0.5 * d_head)
    return r - (r % 2)


def _f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def rope_inv_freq(n_rot):
    """fp32 inverse frequencies 1 / base^(2i/n_rot), i < n_rot/2, as the reference computes them in fp32:
    exponent (float)(2i) / (float)n_rot, an fp32 power, an fp32 reciprocal. The fp32 power is taken CORRECTLY ROUNDED
    (double pow, then rounded), so the table does not depend on a particular fp32 pow implementation (torch's CPU
    kernel differs from glibc powf by 1 ulp in ~1.5% of entries; glibc powf equals the correctly rounded value for
    every n_rot <= 148, which test_twin.py checks)."""
    out = []
    for i in range(n_rot // 2):
        e = _f32(_f32(2.0 * i) / _f32(float(n_rot)))
        out.append(_f32(1.0 / _f32(ROPE_BASE ** e)))
    return torch.tensor(out, dtype=torch.float32)


def rope_tables(T, n_rot, dtype, device=None):
    """cos/sin tables [T, n_rot] for positions 0..T-1 (NeoX layout: the half-table repeated twice).

    Like the reference (layers/rope.py), inv_freq (rope_inv_freq) and the angles p * inv_freq are computed in fp32;
    the trig functions are then evaluated in the compute dtype (fp32 for float32 = the reference; float64 for the f64
    fixtures, which is what an f64 build of the same recipe computes)."""
    inv_freq = rope_inv_freq(n_rot)
    pos = torch.arange(T, dtype=torch.float32)
    angles = pos[:, None] * inv_freq[None, :]  # [T, n_rot/2] fp32, one rounding per product
    angles = torch.cat([angles, angles], dim=-1).to(dtype)  # exact widening
    return angles.cos().to(device), angles.sin().to(device)


def apply_rope(x, cos, sin, n_rot):
    """x[B,H,T,D]: rotates dims [0, n_rot) of every head; the rest passes through."""
    if n_rot == 0:
        return x
    xr, xp = x[..., :n_rot], x[..., n_rot:]
    half = n_rot // 2
    rot_half = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
    return torch.cat([xr * cos + rot_half * sin, xp], dim=-1)


def causal_attention(q, k, v):
    """q,k,v [B,H,T,D], scores q.k with scale 1 (q and k are pre-scaled), causal mask (key j <= query i)."""
    T = q.shape[-2]
    scores = q @ k.transpose(-1, -2)  # [B,H,T,T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=q.device), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def cvmm(X, rows, sel, W):
    """Expert-selected vector-matrix products: out[m] = X[rows[m]] @ W[sel[m]] for m < M.
    X[Nx,Kin], rows[M] and sel[M] long, W[E,Kin,Nout] -> out[M,Nout].

    Entries are sorted by expert, gathered once, multiplied per expert on contiguous slices and scattered back to
    their order (what the reference cvmm does), so the benchmark does not pay for a dense [M,Kin,Nout] gather."""
    order = torch.argsort(sel)
    counts = torch.bincount(sel, minlength=W.shape[0]).tolist()
    xs = X.index_select(0, rows.index_select(0, order))  # [M,Kin] in expert order
    # split/unbind (not slicing or W[e]): their backward is one cat/stack instead of a zero-filled full-size
    # gradient per expert
    parts = [xe @ we for xe, we in zip(torch.split(xs, counts), W.unbind(0))]
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    return torch.cat(parts).index_select(0, inverse)


def topk_sigmoid(logits, k):
    """indices of the k largest sigmoid values (no gradient) and the sigmoid values there (with gradient)."""
    g = torch.sigmoid(logits)
    with torch.no_grad():
        idx = g.topk(k, dim=-1, sorted=False).indices
    return idx, g.gather(-1, idx)


def layer_norm(x, module):
    return F.layer_norm(x, (x.shape[-1],), module.weight, module.bias, LN_EPS)


# ---------------------------------------------------------------------------------------------------------------
# MoEUT
# ---------------------------------------------------------------------------------------------------------------
class SwitchHead(nn.Module):
    def __init__(self, C, H, D, EA, KA):
        super().__init__()
        self.C, self.H, self.D, self.EA, self.KA = C, H, D, EA, KA
        self.q = nn.Linear(C, H * D, bias=False)
        self.k = nn.Linear(C, H * D, bias=False)
        self.v = nn.Parameter(torch.empty(H * EA, C, D))
        self.o = nn.Parameter(torch.empty(H * EA, D, C))
        self.sel_v = nn.Parameter(torch.empty(H * EA, C))
        self.sel_o = nn.Parameter(torch.empty(H * EA, C))

    def forward(self, xn, x, cos, sin, n_rot, route_log=None):
        """xn = LN1(x) feeds q, k and both routers; the raw x feeds the V experts. Returns out[B,T,C], (lo, lv)."""
        B, T, C = x.shape
        H, D, EA, KA = self.H, self.D, self.EA, self.KA
        N = B * T
        s = D ** -0.25
        q = (F.linear(xn, self.q.weight) * s).view(B, T, H, D).transpose(1, 2)  # [B,H,T,D]
        k = (F.linear(xn, self.k.weight) * s).view(B, T, H, D).transpose(1, 2)
        lv = F.linear(xn, self.sel_v).view(B, T, H, EA)  # raw router logits (regularizer history)
        lo = F.linear(xn, self.sel_o).view(B, T, H, EA)
        iv, wv = topk_sigmoid(lv, KA)  # [B,T,H,KA]
        io, wo = topk_sigmoid(lo, KA)
        if route_log is not None:
            route_log.append(("att_v", lv.detach(), KA))
            route_log.append(("att_o", lo.detach(), KA))
        head_base = (torch.arange(H, device=x.device) * EA).view(1, 1, H, 1)
        # V: entry (n,h,j) = x[n] @ v[h*EA + iv]
        sel_v = (iv + head_base).reshape(-1)  # [N*H*KA], entry (n,h,j) at n*H*KA + h*KA + j
        entry = torch.arange(N * H * KA, device=x.device)
        yv = cvmm(x.reshape(N, C), entry // (H * KA), sel_v, self.v).view(B, T, H, KA, D)
        v = (wv.unsqueeze(-1) * yv).sum(3).transpose(1, 2)  # [B,H,T,D]
        q = apply_rope(q, cos, sin, n_rot)
        k = apply_rope(k, cos, sin, n_rot)
        r = causal_attention(q, k, v).transpose(1, 2).reshape(N * H, D)  # rows (n,h)
        # O: entry (n,h,j) = r[n,h] @ o[h*EA + io], summed over heads and slots with weights wo
        sel_o = (io + head_base).reshape(-1)
        yo = cvmm(r, entry // KA, sel_o, self.o).view(N, H * KA, C)  # entry (n,h,j) reads row (n,h) of r
        out = (wo.reshape(N, H * KA, 1) * yo).sum(1).view(B, T, C)
        return out, (lo, lv)


class SigmaMoE(nn.Module):
    def __init__(self, C, E, S, K, router="sigmoid", renorm=False, n_shared=0, bias_balance=False, route_scale=1.0,
                 routing="topk", capacity_factor=0.0):
        super().__init__()
        self.routing, self.capacity_factor = routing, float(capacity_factor)
        self.C, self.E, self.S, self.K = C, E, S, K
        self.router, self.renorm = router, bool(renorm)
        self.route_scale = float(route_scale)  # DeepSeek-V3's routed scaling factor (routed gates only)
        self.n_shared = int(n_shared)
        # registration order = state_dict order: keys, values, expert_sel, shared_keys, shared_values, expert_bias
        self.keys = nn.Parameter(torch.empty(E, C, S))
        self.values = nn.Parameter(torch.empty(E, S, C))
        self.expert_sel = nn.Parameter(torch.empty(E, C))
        if self.n_shared > 0:
            self.shared_keys = nn.Parameter(torch.empty(self.n_shared, C, S))
            self.shared_values = nn.Parameter(torch.empty(self.n_shared, S, C))
        if bias_balance:
            self.register_buffer("expert_bias", torch.zeros(E))  # a buffer: no gradient, not trained
        else:
            self.expert_bias = None

    def route(self, l):
        """Routing of logits l[..., E]: (idx[..., K] chosen experts, w[..., K] gates, ranked[..., E] the quantity the
        top-K ranks). scores = sigmoid(l) or softmax(l) over E; ranked = scores (+ expert_bias with balance "bias");
        gates = scores at idx (never the bias), divided by their sum iff router_renorm, then times routed_scaling_factor
        (DeepSeek-V3: g_i = 2.5 * s_i / sum_{j in top-K} s_j; the shared experts keep gate 1)."""
        scores = torch.softmax(l, dim=-1) if self.router == "softmax" else torch.sigmoid(l)
        ranked = scores if self.expert_bias is None else scores + self.expert_bias
        with torch.no_grad():
            idx = ranked.topk(self.K, dim=-1, sorted=False).indices
        w = scores.gather(-1, idx)
        if self.renorm:
            w = w / w.sum(-1, keepdim=True)
        if self.route_scale != 1.0:
            w = w * self.route_scale
        return idx, w, ranked

    def expert_choice(self, x1, l, valid, route_log=None):
        """Expert-choice routing (Zhou et al. 2022 §3.1): S = Softmax(X W_g) [n, E] over the positions with valid (all
        when None); G, I = TopK(S^T, c): expert e takes the c positions of largest S[:, e] (a stable descending sort:
        equal scores keep the earlier position first); f[t] = sum_{(e, j): I[e, j] = t} G[e, j] * FFN_e(x1[t]).
        c = round(CF * n / E), halves away from zero, clamped to [1, n]. Returns f[B,T,C]."""
        B, T, C = x1.shape
        E = self.E
        Sc = torch.softmax(l.reshape(B * T, E), dim=-1)  # [N, E]
        cand = torch.arange(B * T) if valid is None else valid.reshape(-1).nonzero().squeeze(1)  # positions
        n = int(cand.numel())
        f = x1.new_zeros(B * T, C)
        if n == 0:
            return f.view(B, T, C)
        c = min(max(int(math.floor(self.capacity_factor * n / E + 0.5)), 1), n)
        St = Sc.index_select(0, cand).t()  # [E, n]
        if route_log is not None:  # the c-th vs (c+1)-th score of each expert: the margin of its choice
            route_log.append(("ffn", St.detach(), c))
        with torch.no_grad():
            order = torch.sort(St, dim=-1, descending=True, stable=True).indices[:, :c]  # [E, c]
        pos = cand[order].reshape(-1)  # [E*c] entry p = e*c + j
        expert = torch.arange(E).repeat_interleave(c)
        gate = Sc[pos, expert]  # [E*c], differentiable: the softmax Jacobian reaches every logit of the position
        u = cvmm(x1.reshape(B * T, C), pos, expert, self.keys)  # [E*c, S]
        if route_log is not None:
            route_log.append(("relu", u.detach(), None))
        y = cvmm(F.relu(u), torch.arange(E * c), expert, self.values)  # [E*c, C]
        return f.index_add(0, pos, gate.unsqueeze(1) * y).view(B, T, C)

    def forward(self, x1, xs, route_log=None, valid=None):
        """keys read the raw x1, the router reads xs = LN2(x1). Returns the ROUTED output f[B,T,C], raw router logits
        l[B,T,E] and the selection idx[B,T,K] (None with expert choice in training; shared experts: shared_forward).
        valid[B,T] bool: the positions expert choice chooses from in training (None = all)."""
        B, T, C = x1.shape
        N, K = B * T, self.K
        l = F.linear(xs, self.expert_sel)  # [B,T,E]
        if self.routing == "expert_choice" and self.training:
            return self.expert_choice(x1, l, valid, route_log), l, None
        idx, w, ranked = self.route(l)  # [B,T,K]
        if route_log is not None:  # the margin check looks at what the top-K ranks: the logits unless biased
            route_log.append(("ffn", (l if self.expert_bias is None else ranked).detach(), K))
        sel = idx.reshape(-1)  # [N*K], entry (n,j) at n*K + j
        entry = torch.arange(N * K, device=x1.device)
        u = cvmm(x1.reshape(N, C), entry // K, sel, self.keys)  # [N*K, S]
        if route_log is not None:
            route_log.append(("relu", u.detach(), None))
        y = cvmm(F.relu(u), entry, sel, self.values)  # [N*K, C]
        f = (w.reshape(N * K, 1) * y).view(N, K, C).sum(1)
        return f.view(B, T, C), l, idx

    def shared_forward(self, x1, route_log=None):
        """f_shared = sum_{s < K_s} ReLU(x1 @ shared_keys[s]) @ shared_values[s] (gate 1, raw x1), or None."""
        if self.n_shared == 0:
            return None
        B, T, C = x1.shape
        x = x1.reshape(B * T, C)
        f = None
        for s in range(self.n_shared):
            u = x @ self.shared_keys[s]  # [N, S]
            if route_log is not None:
                route_log.append(("relu", u.detach(), None))
            y = F.relu(u) @ self.shared_values[s]
            f = y if f is None else f + y
        return f.view(B, T, C)


class MoEUTLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["d_model"]
        self.attention = SwitchHead(C, cfg["n_heads"], cfg["d_head"], cfg["att_n_experts"], cfg["att_k"])
        self.ffn = SigmaMoE(C, cfg["ff_n_experts"], cfg["ff_expert_size"], cfg["ff_k"], cfg.get("router", "sigmoid"),
                            cfg.get("router_renorm", False), cfg.get("n_shared_experts", 0),
                            cfg.get("balance", "entropy") == "bias", cfg.get("routed_scaling_factor", 1.0),
                            cfg.get("routing", "topk"), cfg.get("ff_capacity_factor", 0.0))
        self.ln1 = nn.LayerNorm(C, eps=LN_EPS)
        self.ln2 = nn.LayerNorm(C, eps=LN_EPS)

    def forward(self, x, cos, sin, n_rot, route_log=None, valid=None):
        xn = layer_norm(x, self.ln1)
        att, att_logits = self.attention(xn, x, cos, sin, n_rot, route_log)
        x1 = x + att
        f_routed, ffn_logits, ffn_sel = self.ffn(x1, layer_norm(x1, self.ln2), route_log, valid)
        f_shared = self.ffn.shared_forward(x1, route_log)
        y = x1 + f_routed if f_shared is None else x1 + f_routed + f_shared
        return y, att_logits, (ffn_logits, ffn_sel)


class _Stack(nn.Module):
    def __init__(self, layers, dense_layers=()):
        super().__init__()
        self.dense_layers = nn.ModuleList(dense_layers)  # MoEUT's dense prefix (registered first: state_dict order)
        self.layers = nn.ModuleList(layers)


class _LMBase(nn.Module):
    """Embedding, layer stack under `transformer.layers`, final norm, head: the state_dict names of model.h."""

    def __init__(self, cfg, layers, dense_layers=()):
        super().__init__()
        self.cfg = dict(cfg)
        V, C = cfg["n_tokens"], cfg["d_model"]
        self.embedding = nn.Embedding(V, C)
        self.transformer = _Stack(layers, dense_layers)
        self.out_norm = nn.LayerNorm(C, eps=LN_EPS, elementwise_affine=bool(cfg["out_norm_affine"]))
        self.lm_head = nn.Linear(C, V, bias=bool(cfg["lm_head_bias"]))
        self.n_rot = n_rot_of(cfg["d_head"])

    def head(self, h):
        return self.lm_head(layer_norm(h, self.out_norm))


class MoEUTLM(_LMBase):
    def __init__(self, cfg):
        assert cfg["arch"] == "moeut"
        n = cfg.get("n_dense_first", 0)
        assert n >= 0 and cfg["n_layers"] - n > 0 and (cfg["n_layers"] - n) % cfg["group_size"] == 0
        assert cfg.get("balance", "entropy") in BALANCES and cfg.get("router", "sigmoid") in ("sigmoid", "softmax")
        assert "balance_gamma" not in cfg or cfg.get("balance") == "bias"
        assert cfg.get("n_shared_experts", 0) >= 0
        dense_cfg = dict(cfg, d_ff=dense_prefix_d_ff(cfg))
        super().__init__(cfg, [MoEUTLayer(cfg) for _ in range(cfg["group_size"])],
                         [DenseLayer(dense_cfg) for _ in range(n)])
        self.n_dense_first = n

    def layer_of(self, a):
        """The module of layer application a: dense_layers[a] for a < n_dense_first, else the shared group's
        layers[(a - n_dense_first) % group_size] (ABAB sharing)."""
        n = self.n_dense_first
        if a < n:
            return self.transformer.dense_layers[a]
        return self.transformer.layers[(a - n) % len(self.transformer.layers)]

    def forward(self, tokens, route_log=None, valid=None):
        """valid[B,T] bool: the positions routing "expert_choice" chooses from in training (None = all).
        tokens[B,T] long -> logits[B,T,V], histories {distinct MoEUT layer: {"ffn"|"ffn_sel"|"att_o"|"att_v":
        [R x logits or selections]}} (R = (n_layers - n_dense_first) / group_size; the dense prefix has none)."""
        B, T = tokens.shape
        h = self.embedding(tokens)
        cos, sin = rope_tables(T, self.n_rot, h.dtype, h.device)
        layers = self.transformer.layers
        hist = [{"ffn": [], "ffn_sel": [], "att_o": [], "att_v": []} for _ in layers]
        n = self.n_dense_first
        for a in range(n):
            h = self.transformer.dense_layers[a](h, cos, sin, self.n_rot, route_log)
        for a in range(n, self.cfg["n_layers"]):
            i = (a - n) % len(layers)  # ABAB sharing
            h, (lo, lv), (lf, sf) = layers[i](h, cos, sin, self.n_rot, route_log, valid)
            hist[i]["ffn"].append(lf)
            hist[i]["ffn_sel"].append(sf)
            hist[i]["att_o"].append(lo)
            hist[i]["att_v"].append(lv)
        return self.head(h), hist


# ---------------------------------------------------------------------------------------------------------------
# Dense
# ---------------------------------------------------------------------------------------------------------------
class DenseAttention(nn.Module):
    def __init__(self, C, H, D):
        super().__init__()
        self.H, self.D = H, D
        self.q = nn.Linear(C, H * D, bias=False)
        self.k = nn.Linear(C, H * D, bias=False)
        self.v = nn.Linear(C, H * D, bias=False)
        self.o = nn.Linear(H * D, C, bias=False)

    def forward(self, xn, cos, sin, n_rot):
        B, T, C = xn.shape
        H, D = self.H, self.D
        s = D ** -0.25  # DM-math code: q and k each scaled by D^-1/4, SDPA scale 1 (dense model too)
        q = (self.q(xn) * s).view(B, T, H, D).transpose(1, 2)
        k = (self.k(xn) * s).view(B, T, H, D).transpose(1, 2)
        v = self.v(xn).view(B, T, H, D).transpose(1, 2)
        q = apply_rope(q, cos, sin, n_rot)
        k = apply_rope(k, cos, sin, n_rot)
        r = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, H * D)
        return self.o(r)


class DenseFFN(nn.Module):
    def __init__(self, C, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(C, d_ff)
        self.linear2 = nn.Linear(d_ff, C)

    def forward(self, x, route_log=None):
        u = self.linear1(x)
        if route_log is not None:
            route_log.append(("relu", u.detach(), None))
        return self.linear2(F.relu(u))


class DenseLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["d_model"]
        self.attention = DenseAttention(C, cfg["n_heads"], cfg["d_head"])
        self.ffn = DenseFFN(C, cfg["d_ff"])
        self.ln1 = nn.LayerNorm(C, eps=LN_EPS)
        self.ln2 = nn.LayerNorm(C, eps=LN_EPS)

    def forward(self, x, cos, sin, n_rot, route_log=None):
        x = x + self.attention(layer_norm(x, self.ln1), cos, sin, n_rot)  # pre-LN
        return x + self.ffn(layer_norm(x, self.ln2), route_log)


class DenseLM(_LMBase):
    def __init__(self, cfg):
        assert cfg["arch"] == "dense"
        super().__init__(cfg, [DenseLayer(cfg) for _ in range(cfg["n_layers"])])

    def forward(self, tokens, route_log=None, valid=None):
        B, T = tokens.shape
        h = self.embedding(tokens)
        cos, sin = rope_tables(T, self.n_rot, h.dtype, h.device)
        for layer in self.transformer.layers:
            h = layer(h, cos, sin, self.n_rot, route_log)
        return self.head(h), None


def build_model(cfg):
    return MoEUTLM(cfg) if cfg["arch"] == "moeut" else DenseLM(cfg)


# ---------------------------------------------------------------------------------------------------------------
# Loss and regularizers
# ---------------------------------------------------------------------------------------------------------------
def masked_entropy_reg(hist, valid):
    """The DM-math reference regularizer of ONE module, in its masked [B,B]-broadcast form.

    hist: list (one per application, R of them) of raw router logits [B,T,(G,)E]; valid[B,T] bool or None.
    X = cat(hist, time axis) -> [B, R*T, (G,) E]; P = log_softmax over E; masked log-mean over the R*T axis with
    cnt = R * (valid positions of the row): logsumexp [B,(G,)E] minus log(cnt) shaped [B,1,(1,)1], which broadcasts to
    [B,B,(G,)E]; entropy over E; value = -mean of everything.
    Rows with no valid position at all are left out (the reference would produce NaN there; backend.h contract)."""
    X = torch.cat(hist, dim=1)
    R = len(hist)
    if valid is None:
        valid = torch.ones(X.shape[0], X.shape[1] // R, dtype=torch.bool, device=X.device)
    keep = valid.any(dim=1)
    X = X[keep]
    valid = valid[keep]
    n_group_dims = X.dim() - 3  # 0 for the FFN [B,RT,E], 1 for attention [B,RT,H,EA]
    P = F.log_softmax(X, dim=-1)
    mask = valid.repeat(1, R).view(*valid.shape[:1], -1, *([1] * (n_group_dims + 1)))  # [B,RT,(1,)1]
    cnt = mask.sum(1, keepdim=True)  # [B,1,(1,)1]
    zcnt = cnt == 0
    n = cnt.clamp(min=1).to(P.dtype).log()
    lse = P.masked_fill(~mask, float("-inf")).logsumexp(1)  # [B,(G,)E]
    log_mean = (lse - n).masked_fill(zcnt, 0)  # [B,(G,)E] - [B,1,(1,)1] -> [B,B,(G,)E]
    entropy = -(log_mean * log_mean.exp()).sum(-1)
    return -entropy.mean()


def switch_balance_loss(logits, sel, valid):
    """Fedus et al. 2021 eqs. 4-6 for ONE routing decision (without alpha): E * sum_i f_i P_i, logits[B,T,E],
    sel[B,T,K] (the chosen experts), over the positions where valid[B,T] (None = all). f_i = fraction of the K*n routed
    slots that chose i (no gradient), P_i = mean over the n positions of softmax(logits)_i."""
    E, K = logits.shape[-1], sel.shape[-1]
    if valid is None:
        valid = torch.ones(logits.shape[:2], dtype=torch.bool, device=logits.device)
    n = int(valid.sum())
    if n == 0:
        return logits.new_zeros(())
    with torch.no_grad():
        f = torch.bincount(sel[valid].reshape(-1), minlength=E).to(logits.dtype) / (K * n)
    P = torch.softmax(logits[valid], dim=-1).mean(0)
    return E * (f * P).sum()


def expert_load_counts(hist, valid, E):
    """Per distinct MoEUT layer, c_e = the number of top-K selections of expert e summed over its R applications
    (hist[i]["ffn_sel"], [B,T,K] each) and over the positions where valid[B,T] (None = all). Shared experts are not
    routed and not counted. Returns a list of [E] int64 tensors."""
    out = []
    for layer_hist in hist:
        c = torch.zeros(E, dtype=torch.long)
        for sel in layer_hist["ffn_sel"]:
            s = sel if valid is None else sel[valid]
            c += torch.bincount(s.reshape(-1).cpu(), minlength=E)
        out.append(c)
    return out


@torch.no_grad()
def update_expert_bias(bias, counts, gamma):
    """DeepSeek-V3 §2.1.2 / Wang et al. 2024: b_e <- b_e - gamma * sign(c_e - mean_e c) (sign 0 when equal), in
    place. The sign is taken exactly in integers: sign(E * c_e - sum c) (mean c = sum c / E)."""
    E = counts.numel()
    sign = torch.sign(E * counts.to(torch.long) - counts.to(torch.long).sum())
    bias.sub_(gamma * sign.to(device=bias.device, dtype=bias.dtype))
    return bias


@torch.no_grad()
def expert_bias_step(model, counts):
    """The after-optimizer-step update of every distinct MoEUT layer's expert_bias (balance "bias" only), with
    counts = expert_load_counts summed over the step's micro-batches (training only)."""
    gamma = model.cfg.get("balance_gamma", BALANCE_GAMMA_DEFAULT)
    for layer, c in zip(model.transformer.layers, counts):
        update_expert_bias(layer.ffn.expert_bias, c, gamma)


def ffn_balance_coef(cfg):
    """The coefficient of reg_ffn in the objective, by cfg["balance"]."""
    balance = cfg.get("balance", "entropy")
    if balance == "switch":
        return cfg.get("balance_alpha", 0.01)
    return cfg.get("entropy_reg", 0.0) if balance == "entropy" else 0.0


def objective(model, inputs, targets, valid=None, grad_scale=1.0, route_log=None):
    """The quantities model_train_step computes. inputs/targets [B,T] long (targets -1 = not counted),
    valid[B,T] bool (regularizer mask) or None. Returns a dict of tensors; 'total' is the differentiated objective
    grad_scale * (ce + c_ffn * reg_ffn + att_entropy_reg * reg_att), c_ffn and reg_ffn by cfg["balance"]."""
    cfg = model.cfg
    logits, hist = model(inputs, route_log, valid=valid)
    V = logits.shape[-1]
    flat_t = targets.reshape(-1)
    counted = flat_t >= 0
    logp = F.log_softmax(logits.reshape(-1, V), dim=-1)
    nll = -logp[counted].gather(1, flat_t[counted].unsqueeze(1)).squeeze(1)
    ce_sum = nll.sum()
    n_counted = int(counted.sum())
    ce = ce_sum / n_counted
    zero = logits.new_zeros(())
    reg_ffn, reg_att = zero, zero
    if hist is not None:
        balance = cfg.get("balance", "entropy")
        for layer_hist in hist:
            if balance == "entropy":
                reg_ffn = reg_ffn + masked_entropy_reg(layer_hist["ffn"], valid)
            elif balance == "switch":  # one loss per layer application, as every Switch layer adds its own
                for lf, sf in zip(layer_hist["ffn"], layer_hist["ffn_sel"]):
                    reg_ffn = reg_ffn + switch_balance_loss(lf, sf, valid)
            reg_att = reg_att + masked_entropy_reg(layer_hist["att_o"], valid) + masked_entropy_reg(
                layer_hist["att_v"], valid)
    total = grad_scale * (ce + ffn_balance_coef(cfg) * reg_ffn + cfg.get("att_entropy_reg", 0.0) * reg_att)
    return {"logits": logits, "ce": ce, "ce_sum": ce_sum, "n_counted": n_counted, "reg_ffn": reg_ffn,
            "reg_att": reg_att, "total": total}


def min_routing_margin(route_log):
    """Smallest gap between the k-th and (k+1)-th largest ranked value over every routing decision of a forward
    (route_log entries: (kind, values[..., E], k); "relu" entries are skipped). The values are the logits, or
    score + expert_bias for a balance "bias" FFN router (what its top-K ranks). A tiny gap would make the top-k choice
    precision-dependent."""
    m = math.inf
    for kind, l, k in route_log:  # "ffn" entries of a biased router carry score + bias (what its top-K ranks)
        if kind == "relu" or k >= l.shape[-1]:
            continue
        top = l.topk(k + 1, dim=-1, sorted=True).values
        m = min(m, float((top[..., k - 1] - top[..., k]).min()))
    return m


def min_relu_margin(route_log):
    """Smallest |pre-activation| of any ReLU in a forward: a value near 0 could switch sides between precisions."""
    m = math.inf
    for kind, u, _ in route_log:
        if kind == "relu":
            m = min(m, float(u.abs().min()))
    return m


# ---------------------------------------------------------------------------------------------------------------
# Reference initialisation (dm-math-training-code.md §C.1-3), used by the benchmark
# ---------------------------------------------------------------------------------------------------------------
@torch.no_grad()
def _renorm_keep_std_rows(w):
    s0 = w.std()
    w.div_(w.norm(dim=1, keepdim=True))
    w.mul_(s0 / w.std())


@torch.no_grad()
def _renorm_rows(w):
    st = w.std(dim=-1, keepdim=True)
    w.div_(w.norm(dim=-1, keepdim=True))
    w.mul_(st / w.std())


@torch.no_grad()
def reference_init(model, gen=None):
    """The reference initialisation (generator gen, or torch's default one when None). Same distributions as
    model_init_weights, not the same numbers (different RNG)."""
    cfg = model.cfg
    C, L = cfg["d_model"], cfg["n_layers"]
    s = math.sqrt(2.0 / L)

    def normal(t, std):
        t.copy_(torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.dtype) * std)

    def uniform(t, bound):
        t.copy_((torch.rand(t.shape, generator=gen, dtype=torch.float64) * 2 - 1).to(t.dtype) * bound)

    normal(model.embedding.weight, 1.0 / math.sqrt(C))
    uniform(model.lm_head.weight, 1.0 / math.sqrt(C))
    if model.lm_head.bias is not None:
        uniform(model.lm_head.bias, 1.0 / math.sqrt(C))
    if model.out_norm.weight is not None:
        model.out_norm.weight.fill_(1.0)
        model.out_norm.bias.fill_(0.0)
    def init_dense(layer):  # Linear weights N(0, 2/(L fan_in)) with L = every application, biases 0
        for lin in (layer.attention.q, layer.attention.k, layer.attention.v, layer.attention.o,
                    layer.ffn.linear1, layer.ffn.linear2):
            normal(lin.weight, s / math.sqrt(lin.weight.shape[1]))
            if lin.bias is not None:
                lin.bias.fill_(0.0)

    for layer in model.transformer.dense_layers:  # MoEUT's dense prefix: as the dense model
        layer.ln1.weight.fill_(1.0), layer.ln1.bias.fill_(0.0)
        layer.ln2.weight.fill_(1.0), layer.ln2.bias.fill_(0.0)
        init_dense(layer)
    for layer in model.transformer.layers:
        layer.ln1.weight.fill_(1.0), layer.ln1.bias.fill_(0.0)
        layer.ln2.weight.fill_(1.0), layer.ln2.bias.fill_(0.0)
        if cfg["arch"] == "moeut":
            att, ffn = layer.attention, layer.ffn
            H, D, E, S = cfg["n_heads"], cfg["d_head"], cfg["ff_n_experts"], cfg["ff_expert_size"]
            for t in (att.q.weight, att.k.weight, att.v, att.sel_v, att.sel_o, ffn.keys, ffn.expert_sel):
                normal(t, s / math.sqrt(C))
            normal(att.o, s / math.sqrt(H * D))
            normal(ffn.values, s / math.sqrt(E * S))
            if ffn.n_shared > 0:  # shared experts like the routed ones
                normal(ffn.shared_keys, s / math.sqrt(C))
                normal(ffn.shared_values, s / math.sqrt(E * S))
            if ffn.expert_bias is not None:
                ffn.expert_bias.zero_()
            _renorm_keep_std_rows(ffn.expert_sel)
            _renorm_rows(att.sel_v)
            _renorm_rows(att.sel_o)
        else:
            init_dense(layer)


# ---------------------------------------------------------------------------------------------------------------
# Learning-rate schedule (spec §6.4; dm-math-training-code.md §C.7)
# ---------------------------------------------------------------------------------------------------------------
def lr_at(i, lr, warmup, steps, min_lr_multiplier):
    """lr of step i (i = completed steps): linear warmup lr*(i+1)/W, then CosineAnnealingLR(T_max=steps) closed form
    stepped with epoch i - W (T_max is `steps`, not steps - warmup)."""
    if i < warmup:
        return lr * (i + 1) / warmup
    lr_min = min_lr_multiplier * lr
    return lr_min + (lr - lr_min) * (1 + math.cos(math.pi * (i - warmup) / steps)) / 2


def config_json(cfg):
    """The model config as the JSON text stored in a checkpoint's __metadata__.config (every key of its arch; the
    MoEUT switch keys only where the config sets them, d_ff only with a dense prefix)."""
    keys = MOEUT_KEYS + MOEUT_SWITCH_KEYS if cfg["arch"] == "moeut" else DENSE_KEYS
    out = {k: cfg[k] for k in keys if k in cfg}
    if cfg["arch"] == "moeut" and cfg.get("n_dense_first", 0) > 0:
        out["d_ff"] = dense_prefix_d_ff(cfg)
    return json.dumps(out)
