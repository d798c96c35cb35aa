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
    ff_capacity_factor CF > 0 (Switch Transformer §2.2, GShard Algorithm 1; training mode only, model.training): each
    expert takes at most EC = max(1, floor(CF*K*N/E + 1/2)) of a layer application's N*K token-expert assignments
    (N = B*T positions); the others get gate 0 (the token passes through the residual for that slot). Which ones an
    expert keeps: ff_capacity_order "position" (GShard's dispatch: all first choices in position order, then all second
    choices, ...) or "score" (Riquelme et al. 2021 §3.1, batch-prioritised routing, per assignment: by gate, descending).
    ff_residual_size W (DeepSpeed-MoE's Residual-MoE, arXiv 2201.05596 §4.1.2 "Residual-MoE"; Snowflake Arctic 2024:
    a dense MLP in parallel with a residual MoE MLP, y = x + MLP(x) + MoE(x)): a dense ReLU MLP of its own width W,
    weight 1, reading the raw x1 like the experts (y = x1 + f_routed + f_shared + ReLU(x1 Wk) Wv).
    ff_n_experts_per_layer [E_0, .., E_{Gs-1}] (DeepSpeed-MoE §4.1.1 "Pyramid-MoE": more experts in the later layers,
    their First-Half-MoE vs Second-Half-MoE study): distinct layer i is a sigma-MoE of E_i experts (its own router
    of E_i rows, histories, balancing term and expert_bias), instead of ff_n_experts for every layer.
    n_dense_first n: the first n layer applications are dense pre-LN layers (DenseLayer, width d_ff) with their own
    weights (transformer.dense_layers.{i}); application a >= n uses MoEUT layer (a - n) % Gs.
    routing "hash" (Roller et al. 2021, "Hash Layers For Large Sparse Models", arXiv 2106.04426 §3): the FFN expert
    of position t is hash(x_t), a fixed function of the position's input token id x_t (the same in every layer),
    one expert with weight 1: f = ReLU(x1 @ keys[hash(x_t)]) @ values[hash(x_t)]; no router parameters, and so no
    ln2 (MoEUT's LN2 feeds only the router), no FFN balancing. The hash is the paper's random lookup table made
    balanced over ids: hash(v) = perm[v] mod E, perm a seeded permutation of the vocabulary (hash_table()).
    routing "expert_choice" (Zhou et al. 2022, arXiv 2202.09368 §3.1): in training mode (module.training) each expert
    takes its top-c tokens of the batch from its column of S = softmax(X W_g) [n, E] over the n positions with
    valid = True, c = round(ff_capacity_factor * n / E) (halves away from zero) clamped to [1, n], gates = those
    scores, a token gets 0..E experts; ties between equal scores go to the earlier position. In eval mode (and for
    decoding) each position routes alone: its top-ff_k experts of the same softmax (ff_k = round(CF)), causal.
  * Arch "moe" (MoELM): the dense pre-LN layer with its FFN replaced by a routed mixture of experts with biases
    (RoutedFFN: Switch Transformer arXiv 2101.03961 §2, Mixtral arXiv 2401.04088 eq. 1-2), the router and gates
    switches as above, balance "switch" (one loss per MoE layer) or "none"; n_dense_first dense layers first.
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

# Keys of the JSON "model" object per architecture (model/switch_rules.c: a key of another arch is refused).
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
                     "n_shared_experts", "n_dense_first", "routing", "hash_seed",
                     "ff_capacity_factor", "ff_capacity_order", "n_group", "topk_group",
                     "seq_balance_alpha", "ff_residual_size", "ff_n_experts_per_layer"]
BALANCES = ("entropy", "switch", "none", "bias")
BALANCE_GAMMA_DEFAULT = 0.001


def dense_prefix_d_ff(cfg):
    """Width of the dense-prefix FFNs of a MoEUT config: d_ff when given (nonzero), else the C default
    (ff_k + n_shared_experts) * ff_expert_size + ff_residual_size (the active FFN width)."""
    if cfg.get("d_ff"):
        return cfg["d_ff"]
    return (cfg["ff_k"] + cfg.get("n_shared_experts", 0)) * cfg["ff_expert_size"] + cfg.get("ff_residual_size", 0)


def hash_table(V, E, seed):
    """routing "hash"'s token -> expert table [V] (long): hash(v) = perm[v] mod E, so every expert owns floor(V/E) or
    ceil(V/E) ids (Roller et al. §3's random hash, balanced over ids). perm: the Fisher-Yates shuffle of 0..V-1
    (for i = V-1 .. 1: j = next() mod (i+1), swap perm[i], perm[j]) driven by splitmix64 from state = seed, the
    definition in model/hash_routing.h's comment."""
    mask = (1 << 64) - 1
    state = seed & mask

    def next_u64():
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    perm = list(range(V))
    for i in range(V - 1, 0, -1):
        j = next_u64() % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return torch.tensor([p % E for p in perm], dtype=torch.long)


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
                 hash_table=None, capacity_factor=0.0,
                 capacity_order="position", n_group=1, topk_group=None,
                 residual_size=0, routing="topk"):
        super().__init__()
        assert capacity_factor >= 0 and capacity_order in ("position", "score")
        self.capacity_factor, self.capacity_order = float(capacity_factor), capacity_order
        self.routing = routing
        self.C, self.E, self.S, self.K = C, E, S, K
        self.router, self.renorm = router, bool(renorm)
        self.route_scale = float(route_scale)  # DeepSeek-V3's routed scaling factor (routed gates only)
        # DeepSeek-V3's group-limited routing: E experts in n_group groups, topk_group of them eligible per token
        self.n_group = int(n_group)
        self.topk_group = int(topk_group if topk_group is not None else n_group)
        self.n_shared = int(n_shared)
        # registration order = state_dict order: keys, values, expert_sel, shared_keys, shared_values, expert_bias
        self.keys = nn.Parameter(torch.empty(E, C, S))
        self.values = nn.Parameter(torch.empty(E, S, C))
        if hash_table is None:
            self.expert_sel = nn.Parameter(torch.empty(E, C))
        else:  # routing "hash": no router; the table follows from the config: not state, not a parameter or buffer
            assert K == 1 and not bias_balance
            self.expert_sel = None
            self.hash_table = hash_table.clone()  # [V] long
        if self.n_shared > 0:
            self.shared_keys = nn.Parameter(torch.empty(self.n_shared, C, S))
            self.shared_values = nn.Parameter(torch.empty(self.n_shared, S, C))
        self.residual_size = int(residual_size)  # PR-MoE / Arctic residual MLP width W (0 = none)
        if self.residual_size > 0:
            self.residual_keys = nn.Parameter(torch.empty(C, self.residual_size))
            self.residual_values = nn.Parameter(torch.empty(self.residual_size, C))
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
        self.group_scores = None
        if self.n_group > 1 and self.topk_group < self.n_group:
            ranked = self.group_limit(ranked)
        with torch.no_grad():
            idx = ranked.topk(self.K, dim=-1, sorted=False).indices
        w = scores.gather(-1, idx)
        if self.renorm:
            w = w / w.sum(-1, keepdim=True)
        if self.route_scale != 1.0:
            w = w * self.route_scale
        return idx, w, ranked

    def capacity_keep(self, idx, w):
        """Expert capacity (Fedus et al. 2021 §2.2: expert capacity = tokens per batch / experts x capacity factor,
        here times K for K assignments per token; GShard Algorithm 1) of one routing decision idx[N, K], gates w[N, K]:
        keep[N, K] (1 = kept, 0 = over capacity), not differentiated. EC = max(1, floor(CF*K*N/E + 1/2)).
        "position": GShard's dispatch, the k-th choices of all tokens after the (k-1)-th ones; within a round the
        tokens in order: position_in_expert = cumsum of the one-hot dispatch mask over the tokens (Switch/GShard's
        mesh-tensorflow code), offset by what the earlier rounds put in the expert. "score": the assignments sorted by
        gate, descending (a stable sort of the n-major entries: ties to the earlier position), then the same cumsum."""
        N, K = idx.shape
        E = self.E
        cap = max(1, math.floor(self.capacity_factor * K * N / E + 0.5))
        with torch.no_grad():
            onehot = F.one_hot(idx, E).to(torch.float64)  # [N, K, E]
            if self.capacity_order == "position":
                order = torch.arange(N * K).view(N, K).t().reshape(-1)  # round j = 0..K-1, tokens in order
            else:
                order = torch.sort(-w.detach().reshape(-1), stable=True).indices  # gate descending, ties: earlier n
            flat = onehot.reshape(N * K, E)[order]  # [N*K, E] in admission order
            pos_in_expert = (flat.cumsum(0) - 1.0) * flat  # [N*K, E]: 0-based rank of the assignment in its expert
            keep_sorted = ((pos_in_expert < cap) * flat).sum(-1)  # [N*K]
            keep = torch.empty_like(keep_sorted)
            keep[order] = keep_sorted
        return keep.view(N, K).to(w.dtype)

    def group_limit(self, ranked):
        """Group-limited routing (DeepSeek-V3, arXiv 2412.19437 §2.1.2; its released model config: n_group 8,
        topk_group 4 of 256 experts): the E experts form n_group contiguous groups of E/n_group; a token's group score
        is the sum of the two largest selection scores s_i (+ b_i with the bias) in the group, only the topk_group best
        groups stay eligible, and the top-K is taken over their experts. Returns ranked with the other groups' experts
        at -inf; self.group_scores [..., n_group] keeps the group scores (for the margin check)."""
        G, Eg = self.n_group, self.E // self.n_group
        with torch.no_grad():
            grouped = ranked.unflatten(-1, (G, Eg))  # [..., G, E/G]
            self.group_scores = grouped.topk(2, dim=-1).values.sum(-1)  # [..., G]
            kept = self.group_scores.topk(self.topk_group, dim=-1).indices
            eligible = torch.zeros_like(self.group_scores, dtype=torch.bool).scatter(-1, kept, True)
            eligible = eligible.repeat_interleave(Eg, dim=-1)  # [..., E]
        return ranked.masked_fill(~eligible, -math.inf)

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

    def forward(self, x1, xs, route_log=None, tokens=None, valid=None):
        """keys read the raw x1, the router reads xs = LN2(x1). Returns the ROUTED output f[B,T,C], raw router logits
        l[B,T,E] and the selection idx[B,T,K] (shared experts: shared_forward). routing "hash": idx = hash(tokens)
        (tokens[B,T], the model's input ids), gate 1, no logits (l is None) and xs unused."""
        B, T, C = x1.shape
        N, K = B * T, self.K
        if self.expert_sel is None:  # Roller et al. §3: the expert is a fixed function of the input token id
            l = None
            idx = self.hash_table[tokens].unsqueeze(-1)  # [B,T,1]
            w = torch.ones(B, T, 1, dtype=x1.dtype, device=x1.device)
        else:
            l = F.linear(xs, self.expert_sel)  # [B,T,E]
            if self.routing == "expert_choice" and self.training:
                return self.expert_choice(x1, l, valid, route_log), l, None
            idx, w, ranked = self.route(l)  # [B,T,K]
        if self.capacity_factor > 0 and self.training:  # evaluation drops nothing
            keep = self.capacity_keep(idx.reshape(N, K), w.reshape(N, K))  # [N, K]
            if route_log is not None:  # gates before the dropping, and the decision
                route_log.append(("capacity", torch.stack([w.detach().reshape(N, K), keep], -1), idx.reshape(N, K)))
            w = w * keep.view(B, T, K)
        if route_log is not None and l is not None:  # the margin check looks at what the top-K ranks (the logits
            # unless biased); a hash choice has no margin to lose
            ffn_ranked = l if self.expert_bias is None else ranked
            if self.group_scores is not None:  # the eligible experts only, and the choice of the groups
                ffn_ranked = ffn_ranked.masked_fill(ranked == -math.inf, -math.inf)
                route_log.append(("ffn_group", self.group_scores.detach(), self.topk_group))
            route_log.append(("ffn", ffn_ranked.detach(), K))
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

    def residual_forward(self, x1, route_log=None):
        """DeepSpeed-MoE Residual-MoE (arXiv 2201.05596 §4.1.2: y = MLP(x) + g E_top1(x), the MLP a fixed dense one on
        every token) and Snowflake Arctic (a dense MLP in parallel with the MoE MLP): f_res = ReLU(x1 @ residual_keys)
        @ residual_values with weight 1 on the raw x1, or None without one."""
        if self.residual_size == 0:
            return None
        B, T, C = x1.shape
        u = x1.reshape(B * T, C) @ self.residual_keys  # [N, W]
        if route_log is not None:
            route_log.append(("relu", u.detach(), None))
        return (F.relu(u) @ self.residual_values).view(B, T, C)


class MoEUTLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["d_model"]
        self.attention = SwitchHead(C, cfg["n_heads"], cfg["d_head"], cfg["att_n_experts"], cfg["att_k"])
        hashed = cfg.get("routing", "topk") == "hash"
        table = hash_table(cfg["n_tokens"], cfg["ff_n_experts"], cfg.get("hash_seed", 1)) if hashed else None
        self.ffn = SigmaMoE(C, cfg["ff_n_experts"], cfg["ff_expert_size"], cfg["ff_k"], cfg.get("router", "sigmoid"),
                            cfg.get("router_renorm", False), cfg.get("n_shared_experts", 0),
                            cfg.get("balance", "entropy") == "bias", cfg.get("routed_scaling_factor", 1.0), table,
                            cfg.get("ff_capacity_factor", 0.0), cfg.get("ff_capacity_order", "position"),
                            cfg.get("n_group", 1), cfg.get("topk_group"), cfg.get("ff_residual_size", 0),
                            cfg.get("routing", "topk"))
        self.ln1 = nn.LayerNorm(C, eps=LN_EPS)
        self.ln2 = None if hashed else nn.LayerNorm(C, eps=LN_EPS)  # LN2 feeds only the router

    def forward(self, x, cos, sin, n_rot, route_log=None, tokens=None, valid=None):
        xn = layer_norm(x, self.ln1)
        att, att_logits = self.attention(xn, x, cos, sin, n_rot, route_log)
        x1 = x + att
        xs = None if self.ln2 is None else layer_norm(x1, self.ln2)
        f_routed, ffn_logits, ffn_sel = self.ffn(x1, xs, route_log, tokens, valid)
        f_shared = self.ffn.shared_forward(x1, route_log)
        y = x1 + f_routed if f_shared is None else x1 + f_routed + f_shared
        f_res = self.ffn.residual_forward(x1, route_log)
        if f_res is not None:
            y = y + f_res
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
        assert cfg.get("n_shared_experts", 0) >= 0 and cfg.get("ff_residual_size", 0) >= 0
        assert cfg.get("routing", "topk") in ("topk", "expert_choice", "hash")
        if cfg.get("routing") == "hash":  # Roller et al.: one expert, nothing to balance, no router keys
            assert cfg["ff_k"] == 1 and cfg.get("balance") == "none" and not cfg.get("ff_expert_dropout")
            assert not any(k in cfg for k in ("router", "router_renorm", "routed_scaling_factor"))
        dense_cfg = dict(cfg, d_ff=dense_prefix_d_ff(cfg))
        pyramid = cfg.get("ff_n_experts_per_layer")
        assert pyramid is None or ("ff_n_experts" not in cfg and len(pyramid) == cfg["group_size"])
        super().__init__(cfg, [MoEUTLayer(cfg if pyramid is None else dict(cfg, ff_n_experts=pyramid[i]))
                               for i in range(cfg["group_size"])],
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
            h, (lo, lv), (lf, sf) = layers[i](h, cos, sin, self.n_rot, route_log, tokens, valid)
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


# ---------------------------------------------------------------------------------------------------------------
# "moe": the dense pre-LN Transformer with a routed FFN (Switch Transformer / GShard / Mixtral layout)
# ---------------------------------------------------------------------------------------------------------------
# Keys of arch "moe": the dense model's (d_ff only with a dense prefix) and the FFN-routing ones.
MOE_KEYS = ["arch", "n_tokens", "d_model", "n_layers", "n_heads", "d_head", "dropout", "lm_head_bias",
            "out_norm_affine", "ff_n_experts", "ff_expert_size", "ff_k", "router", "router_renorm",
            "routed_scaling_factor", "balance", "balance_alpha", "n_dense_first"]
MOE_DEFAULTS = dict(ff_k=2, router="softmax", router_renorm=False, routed_scaling_factor=1.0, balance="switch",
                    balance_alpha=0.01, n_dense_first=0)


class RoutedFFN(nn.Module):
    """The FFN of a Switch Transformer layer (Fedus et al. 2021, arXiv 2101.03961 §2, eq. 1-2) and of Mixtral (Jiang et
    al. 2024, arXiv 2401.04088 §2.1, eq. 1-2), on u = LN2(x1):
        l = u W_r^T  [.., E]  (W_r = expert_sel);  T = the K experts of largest l
        p = softmax(l) over all E (Switch eq. 1) or sigmoid(l);  gate_i = p_i for i in T,
            divided by sum_{j in T} p_j with router_renorm (Mixtral eq. 2: Softmax(TopK(l)) = the renormalised top-K
            softmax probabilities), times routed_scaling_factor (DeepSeek-V3)
        y = sum_{i in T} gate_i E_i(u)   (Switch eq. 2, Mixtral eq. 1)
        E_i(u) = ReLU(u keys[i] + keys_bias[i]) values[i] + values_bias[i]   (the dense FFN with biases, one per expert:
                 a dense layer's FFN copied into every expert is the sparse-upcycling initialisation)
    Written as a loop over the K slots with gathered expert weights (no grouping by expert)."""

    def __init__(self, C, E, S, K, router, renorm, route_scale):
        super().__init__()
        self.E, self.K = E, K
        self.router, self.renorm, self.route_scale = router, bool(renorm), float(route_scale)
        # registration order = state_dict order of model/moe_layer.c
        self.expert_sel = nn.Parameter(torch.empty(E, C))
        self.keys = nn.Parameter(torch.empty(E, C, S))
        self.keys_bias = nn.Parameter(torch.empty(E, S))
        self.values = nn.Parameter(torch.empty(E, S, C))
        self.values_bias = nn.Parameter(torch.empty(E, C))

    def forward(self, u, route_log=None):
        l = F.linear(u, self.expert_sel)  # [B,T,E]
        p = torch.softmax(l, dim=-1) if self.router == "softmax" else torch.sigmoid(l)
        with torch.no_grad():
            idx = l.topk(self.K, dim=-1, sorted=False).indices  # [B,T,K]; the top-K of l is the top-K of p
        gate = p.gather(-1, idx)
        if self.renorm:
            gate = gate / gate.sum(-1, keepdim=True)
        gate = gate * self.route_scale
        if route_log is not None:
            route_log.append(("ffn", l.detach(), self.K))
        y = torch.zeros_like(u)
        for j in range(self.K):
            e = idx[..., j]  # [B,T]
            h = torch.einsum("btc,btcs->bts", u, self.keys[e]) + self.keys_bias[e]
            if route_log is not None:
                route_log.append(("relu", h.detach(), None))
            out = torch.einsum("bts,btsc->btc", F.relu(h), self.values[e]) + self.values_bias[e]
            y = y + gate[..., j:j + 1] * out
        return y, l, idx


class MoELayer(nn.Module):
    """The dense pre-LN layer (DenseLayer) with its FFN replaced by RoutedFFN: x1 = x + Attn(LN1(x)); y = x1 + FFN(LN2(x1))."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg["d_model"]
        self.attention = DenseAttention(C, cfg["n_heads"], cfg["d_head"])
        self.ffn = RoutedFFN(C, cfg["ff_n_experts"], cfg["ff_expert_size"], cfg["ff_k"], cfg["router"],
                             cfg["router_renorm"], cfg["routed_scaling_factor"])
        self.ln1 = nn.LayerNorm(C, eps=LN_EPS)
        self.ln2 = nn.LayerNorm(C, eps=LN_EPS)

    def forward(self, x, cos, sin, n_rot, route_log=None):
        x = x + self.attention(layer_norm(x, self.ln1), cos, sin, n_rot)
        f, l, idx = self.ffn(layer_norm(x, self.ln2), route_log)
        return x + f, l, idx


class MoELM(_LMBase):
    """Arch "moe": n_dense_first DenseLayers (transformer.dense_layers.i, width d_ff, default K * S), then one MoELayer
    per remaining application (transformer.layers.i = application n_dense_first + i, no sharing)."""

    def __init__(self, cfg):
        assert cfg["arch"] == "moe"
        cfg = dict(MOE_DEFAULTS, **cfg)
        n = cfg["n_dense_first"]
        assert 0 <= n < cfg["n_layers"] and cfg["balance"] in ("switch", "none")
        assert cfg["router"] in ("sigmoid", "softmax") and 1 <= cfg["ff_k"] <= cfg["ff_n_experts"]
        dense_cfg = dict(cfg, d_ff=cfg.get("d_ff") or cfg["ff_k"] * cfg["ff_expert_size"])
        super().__init__(cfg, [MoELayer(cfg) for _ in range(cfg["n_layers"] - n)],
                         [DenseLayer(dense_cfg) for _ in range(n)])
        self.n_dense_first = n

    def forward(self, tokens, route_log=None, valid=None):  # valid: only MoEUT's expert choice reads it
        """tokens[B,T] -> logits[B,T,V], histories [{"ffn": [l], "ffn_sel": [idx]}] one per MoE layer (each applied
        once; no attention routers)."""
        B, T = tokens.shape
        h = self.embedding(tokens)
        cos, sin = rope_tables(T, self.n_rot, h.dtype, h.device)
        for layer in self.transformer.dense_layers:
            h = layer(h, cos, sin, self.n_rot, route_log)
        hist = []
        for layer in self.transformer.layers:
            h, l, idx = layer(h, cos, sin, self.n_rot, route_log)
            hist.append({"ffn": [l], "ffn_sel": [idx], "att_o": [], "att_v": []})
        return self.head(h), hist


def build_model(cfg):
    if cfg["arch"] == "moe":
        return MoELM(cfg)
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
    routed and not counted. E: one int, or a pyramid's list of E_i (one per layer). Returns a list of [E_i] int64
    tensors."""
    Es = list(E) if isinstance(E, (list, tuple)) else [E] * len(hist)
    out = []
    for layer_hist, E in zip(hist, Es):
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
    reg_ffn, reg_att, reg_seq = zero, zero, zero
    alpha_seq = cfg.get("seq_balance_alpha", 0.0)
    if hist is not None:
        balance = cfg.get("balance", "entropy")
        for layer_hist in hist:
            if balance == "entropy":
                reg_ffn = reg_ffn + masked_entropy_reg(layer_hist["ffn"], valid)
            elif balance == "switch":  # one loss per layer application, as every Switch layer adds its own
                for lf, sf in zip(layer_hist["ffn"], layer_hist["ffn_sel"]):
                    reg_ffn = reg_ffn + switch_balance_loss(lf, sf, valid)
            if layer_hist["att_o"]:  # arch "moe" has no attention routers
                reg_att = reg_att + masked_entropy_reg(layer_hist["att_o"], valid) + masked_entropy_reg(
                    layer_hist["att_v"], valid)
            if alpha_seq > 0:  # beside the balance above, one loss per layer application (V3: per MoE layer)
                for lf, sf in zip(layer_hist["ffn"], layer_hist["ffn_sel"]):
                    reg_seq = reg_seq + seq_balance_loss(lf, sf, valid, cfg.get("router", "sigmoid"))
    total = grad_scale * (ce + ffn_balance_coef(cfg) * reg_ffn + cfg.get("att_entropy_reg", 0.0) * reg_att +
                          alpha_seq * reg_seq)
    out = {"logits": logits, "ce": ce, "ce_sum": ce_sum, "n_counted": n_counted, "reg_ffn": reg_ffn,
           "reg_att": reg_att, "total": total}
    if alpha_seq > 0:
        out["reg_seq"] = reg_seq
    return out


def seq_balance_loss(l, sel, valid, router):
    """DeepSeek-V3's sequence-wise balance loss (arXiv 2412.19437 §2.1.2, eqs. 17-20) without alpha, of one layer
    application: for each sequence b with T_b counted positions (valid; all when None)
        f_i = E / (K T_b) * sum_t 1[i in TopK_t]                 (eq. 18; not differentiated)
        s'_{i,t} = s_{i,t} / sum_j s_{j,t}                        (eq. 19; s = sigmoid, or softmax which is normalised)
        P_i = (1/T_b) sum_t s'_{i,t}                              (eq. 20)
        L_b = sum_i f_i P_i                                       (eq. 17)
    then the mean over the sequences with T_b > 0 (V3 states it per sequence; a micro-batch averages them).
    l[B,T,E] raw logits, sel[B,T,K] expert ids."""
    B, T, E = l.shape
    K = sel.shape[-1]
    s = torch.softmax(l, dim=-1) if router == "softmax" else torch.sigmoid(l)
    s_norm = s / s.sum(-1, keepdim=True)
    mask = torch.ones(B, T, dtype=torch.bool) if valid is None else valid
    losses = []
    for b in range(B):
        Tb = int(mask[b].sum())
        if Tb == 0:
            continue
        with torch.no_grad():
            counts = torch.zeros(E, dtype=l.dtype)
            counts.index_add_(0, sel[b][mask[b]].reshape(-1), torch.ones(Tb * K, dtype=l.dtype))
            f = E / (K * Tb) * counts
        P = s_norm[b][mask[b]].sum(0) / Tb
        losses.append((f * P).sum())
    return torch.stack(losses).mean() if losses else l.new_zeros(())


def min_routing_margin(route_log):
    """Smallest gap between the k-th and (k+1)-th largest ranked value over every routing decision of a forward
    (route_log entries: (kind, values[..., E], k); "relu" entries are skipped). The values are the logits, or
    score + expert_bias for a balance "bias" FFN router (what its top-K ranks). A tiny gap would make the top-k choice
    precision-dependent."""
    m = math.inf
    for kind, l, k in route_log:  # "ffn" entries of a biased router carry score + bias (what its top-K ranks)
        if kind in ("relu", "capacity") or k >= l.shape[-1]:
            continue
        top = l.topk(k + 1, dim=-1, sorted=True).values
        m = min(m, float((top[..., k - 1] - top[..., k]).min()))
    return m


def capacity_stats(route_log):
    """Over the capacity decisions of a forward (route_log "capacity" entries: gates and keep [N, K, 2], idx [N, K]):
    (dropped, total) assignments, and the smallest gap between two different gates of one expert in one decision (a
    smaller gap could reorder the score order between precisions; equal gates tie by position in every precision)."""
    dropped = total = 0
    gap = math.inf
    for kind, wk, idx in route_log:
        if kind != "capacity":
            continue
        w, keep = wk[..., 0].reshape(-1), wk[..., 1].reshape(-1)
        dropped += int((keep == 0).sum())
        total += keep.numel()
        flat = idx.reshape(-1)
        for e in flat.unique():
            g = w[flat == e].sort().values
            d = g[1:] - g[:-1]
            d = d[d > 0]
            if d.numel():
                gap = min(gap, float(d.min()))
    return dropped, total, gap


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
        if layer.ln2 is not None:  # routing "hash" has none
            layer.ln2.weight.fill_(1.0), layer.ln2.bias.fill_(0.0)
        if cfg["arch"] == "moe":  # the dense recipe for attention and experts, MoEUT's for the router
            for lin in (layer.attention.q, layer.attention.k, layer.attention.v, layer.attention.o):
                normal(lin.weight, s / math.sqrt(lin.weight.shape[1]))
            ffn = layer.ffn
            normal(ffn.expert_sel, s / math.sqrt(C))
            _renorm_keep_std_rows(ffn.expert_sel)
            normal(ffn.keys, s / math.sqrt(C))
            normal(ffn.values, s / math.sqrt(cfg["ff_expert_size"]))
            ffn.keys_bias.zero_(), ffn.values_bias.zero_()
        elif cfg["arch"] == "moeut":
            att, ffn = layer.attention, layer.ffn
            H, D, E, S = cfg["n_heads"], cfg["d_head"], ffn.E, cfg["ff_expert_size"]  # E_l of a pyramid
            for t in (att.q.weight, att.k.weight, att.v, att.sel_v, att.sel_o, ffn.keys, ffn.expert_sel):
                if t is not None:  # routing "hash": no expert_sel
                    normal(t, s / math.sqrt(C))
            normal(att.o, s / math.sqrt(H * D))
            normal(ffn.values, s / math.sqrt(E * S))
            if ffn.n_shared > 0:  # shared experts like the routed ones
                normal(ffn.shared_keys, s / math.sqrt(C))
                normal(ffn.shared_values, s / math.sqrt(E * S))
            if ffn.residual_size > 0:  # the residual MLP like the shared experts
                normal(ffn.residual_keys, s / math.sqrt(C))
                normal(ffn.residual_values, s / math.sqrt(E * S))
            if ffn.expert_bias is not None:
                ffn.expert_bias.zero_()
            if ffn.expert_sel is not None:
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
    keys = {"moeut": MOEUT_KEYS + MOEUT_SWITCH_KEYS, "moe": MOE_KEYS}.get(cfg["arch"], DENSE_KEYS)
    out = {k: cfg[k] for k in keys if k in cfg}
    if cfg["arch"] == "moe" and cfg.get("n_dense_first", 0) > 0:
        out["d_ff"] = cfg.get("d_ff") or cfg.get("ff_k", MOE_DEFAULTS["ff_k"]) * cfg["ff_expert_size"]
    if cfg["arch"] == "moeut" and cfg.get("n_dense_first", 0) > 0:
        out["d_ff"] = dense_prefix_d_ff(cfg)
    return json.dumps(out)
