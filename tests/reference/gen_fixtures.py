"""Generates the twin reference fixtures the C tests compare against (no torch needed at test time).

Usage: /usr/bin/python3 tests/reference/gen_fixtures.py [--out tests/fixtures/twin] [--check]
  --check: regenerate into a temporary directory and verify the committed fixtures match it (weights and batch.json
           bit for bit, expected values within 1e-12 of each tensor's max), instead of writing.

Each fixture tests/fixtures/twin/<name>/ holds
  weights.safetensors   every parameter (F32 values, so the f32 and f64 C builds load exactly the same numbers),
                        __metadata__ {"config": <model config JSON, every key of its arch>, "format": "pt"}
  batch.json            the batch in bin/inspect's format {"inputs", "targets", "loss_mask"}: targets = next token or
                        -1 where there is none (valid = targets >= 0 is the regularizer mask), loss_mask = 1 where
                        the CE counts the target (all ones in Q+A mode, answer tokens in answer-only mode)
  fixture.json          {"description", "B", "T", "grad_scale", "loss_mode"}
  expected.safetensors  F64, computed by the twin in float64 from those weights: logits [B,T,V], cross_entropy,
                        ce_sum, n_counted, reg_ffn, reg_att, total (each [1]) and grad.<name> for every parameter
                        (the gradient of total = grad_scale * (ce + c_ffn*reg_ffn + att_entropy_reg*reg_att), c_ffn =
                        entropy_reg, balance_alpha or 0 by the config's balance switch); buffers (expert_bias of
                        balance "bias") are in weights.safetensors but have no grad. entry. With routing
                        "expert_choice" also eval_logits [B,T,V]: the eval-mode forward (causal top-ff_k routing).
Everything is deterministic in the per-fixture seed. Weights are random (not the reference init) and scaled so that
routing and attention are far from uniform; a draw is rejected (next seed) when any top-k decision has a logit margin
below ROUTING_MARGIN or any ReLU pre-activation lies within RELU_MARGIN of 0, so that f32 and f64 builds make the same
discrete choices (for a balance "bias" FFN router the margin is taken on score + expert_bias, what its top-K ranks).
"""
import argparse
import filecmp
import json
import math
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402
import twin  # noqa: E402

ROUTING_MARGIN = 1e-3
RELU_MARGIN = 3e-5
CAPACITY_MARGIN = 1e-4  # score-order capacity: smallest gap between two different gates of one expert's assignments
MAX_ATTEMPTS = 200

def moeut_cfg(**kw):
    cfg = dict(arch="moeut", d_ff=0, entropy_reg=0.01, att_entropy_reg=0.001, ff_expert_dropout=0.0,
               att_expert_dropout=0.0, dropout=0.0)
    cfg.update(kw)
    if cfg.get("balance", "entropy") != "entropy":
        del cfg["entropy_reg"]  # the C config refuses a key that has no effect
    if cfg.get("routing") == "hash":
        del cfg["ff_expert_dropout"]  # likewise: hash routing has no router choice to drop experts from
    return cfg


def dense_cfg(**kw):
    cfg = dict(arch="dense", dropout=0.0)
    cfg.update(kw)
    return cfg


def moe_cfg(**kw):
    cfg = dict(arch="moe", dropout=0.0)
    cfg.update(kw)
    return cfg


# name -> (config, batch spec, seed, description)
#   batch spec: rows = window lengths n_b (real tokens, <= T+1; T+1 = full window, every position valid),
#               answer_only: CE only on targets that are answer tokens, grad_scale.
FIXTURES = {
    "moeut_tiny_on": (
        moeut_cfg(n_tokens=48, d_model=24, n_layers=4, n_heads=2, d_head=10, ff_n_experts=6, ff_expert_size=8, ff_k=2,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=True, out_norm_affine=True),
        dict(B=2, T=10, rows=[11, 11], answer_only=False, grad_scale=1.0), 101,
        "MoEUT Gs=2 (R=2), head bias and final-norm affine ON, full windows (no padding, all positions valid), "
        "Q+A loss; D=10 gives n_rot=4 (int(5) rounded down to even)"),
    "moeut_dmmath_answer": (
        moeut_cfg(n_tokens=56, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=8, ff_expert_size=6, ff_k=3,
                  att_n_experts=4, att_k=2, group_size=2, lm_head_bias=False, out_norm_affine=False),
        dict(B=3, T=12, rows=[13, 9, 6], answer_only=True, grad_scale=1.0), 202,
        "MoEUT DM-math style: no head bias, no final-norm params; trailing padding (rows of 12, 8, 5 valid "
        "positions, so r_ij != 1) and an answer-only loss mask; EA=4 > KA=2"),
    "moeut_g1": (
        moeut_cfg(n_tokens=40, d_model=18, n_layers=3, n_heads=3, d_head=6, ff_n_experts=5, ff_expert_size=7, ff_k=2,
                  att_n_experts=3, att_k=1, group_size=1, lm_head_bias=True, out_norm_affine=True),
        dict(B=2, T=8, rows=[9, 6], answer_only=False, grad_scale=0.5), 303,
        "MoEUT group_size 1 (one layer applied 3 times), KA=1 of EA=3, D=6 -> n_rot=2, one padded row, "
        "grad_scale 0.5 (expected gradients include it)"),
    "moeut_mostly_pad": (
        moeut_cfg(n_tokens=44, d_model=16, n_layers=2, n_heads=2, d_head=8, ff_n_experts=6, ff_expert_size=8, ff_k=2,
                  att_n_experts=4, att_k=3, group_size=2, lm_head_bias=True, out_norm_affine=True),
        dict(B=3, T=12, rows=[13, 7, 3], answer_only=False, grad_scale=1.0), 404,
        "MoEUT Gs=2 with n_layers=2 (R=1); one row mostly padding (valid counts 12, 6, 2: strongly unequal r_ij)"),
    "moeut_empty_row": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=2, n_heads=2, d_head=8, ff_n_experts=4, ff_expert_size=6, ff_k=2,
                  att_n_experts=3, att_k=2, group_size=1, lm_head_bias=False, out_norm_affine=False),
        dict(B=3, T=8, rows=[9, 0, 5], answer_only=False, grad_scale=1.0), 505,
        "Project contract (backend.h entropy_reg), not reference behaviour: a row with no valid position at all is "
        "left out of the regularizer's B (the reference code would give NaN there)"),
    "moeut_softmax_renorm_switch": (
        moeut_cfg(n_tokens=44, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=6, ff_expert_size=6, ff_k=2,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=False, out_norm_affine=False,
                  router="softmax", router_renorm=True, balance="switch", balance_alpha=0.25),
        dict(B=3, T=9, rows=[10, 7, 4], answer_only=True, grad_scale=1.0), 808,
        "MoE variants: softmax router renormalised over the top-K (Mixtral / GShard), Switch balancing loss per "
        "application (alpha 0.25 so its gradient is visible), padding and an answer-only loss"),
    "moeut_softmax_none": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=3, n_heads=2, d_head=8, ff_n_experts=5, ff_expert_size=6, ff_k=2,
                  att_n_experts=3, att_k=1, group_size=1, lm_head_bias=True, out_norm_affine=True,
                  router="softmax", balance="none"),
        dict(B=2, T=8, rows=[9, 6], answer_only=False, grad_scale=1.0), 909,
        "MoE variants: softmax probabilities at the top-K, not renormalised (Switch / DeepSeekMoE), no FFN balancing"),
    "moeut_sigmoid_renorm_entropy": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=2, n_heads=2, d_head=8, ff_n_experts=6, ff_expert_size=8, ff_k=3,
                  att_n_experts=4, att_k=2, group_size=2, lm_head_bias=True, out_norm_affine=False,
                  router="sigmoid", router_renorm=True, balance="entropy"),
        dict(B=2, T=10, rows=[11, 8], answer_only=False, grad_scale=0.5), 1010,
        "MoE variants: sigmoid gates normalised over the selected (DeepSeek-V3 without its bias), entropy balancing"),
    "moeut_shared_bias": (
        moeut_cfg(n_tokens=44, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=6, ff_expert_size=6, ff_k=2,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=True, out_norm_affine=False,
                  n_shared_experts=2, router="sigmoid", router_renorm=True, balance="bias", balance_gamma=0.001),
        dict(B=3, T=9, rows=[10, 7, 4], answer_only=True, grad_scale=1.0), 1111,
        "MoE variants: DeepSeek-V3 router (sigmoid scores + expert_bias for the top-K only, gates normalised over the "
        "selected, unbiased), 2 shared experts (gate 1, raw x1), bias balancing (no FFN loss, reg_ffn 0; the "
        "expert_bias buffer is random so that it changes selections), Gs=2 R=2, padding and an answer-only loss"),
    "moeut_deepseek_scaled": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=6, ff_expert_size=6, ff_k=3,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=False, out_norm_affine=True,
                  n_shared_experts=1, router="sigmoid", router_renorm=True, routed_scaling_factor=2.5,
                  balance="bias"),
        dict(B=2, T=9, rows=[10, 6], answer_only=True, grad_scale=1.0), 1414,
        "MoE variants: DeepSeek-V3's gates g_i = 2.5 * s_i / sum_{j in top-K} s_j (sigmoid scores normalised over "
        "the selected, times the routed scaling factor 2.5 of its released config), 1 shared expert at gate 1, "
        "bias balancing (random expert_bias), Gs=2 R=2, one padded row, answer-only"),
    "moeut_hash": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=5, ff_expert_size=6, ff_k=1,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=True, out_norm_affine=True,
                  balance="none", routing="hash", hash_seed=3),
        dict(B=2, T=9, rows=[10, 6], answer_only=True, grad_scale=1.0), 1515,
        "MoE variants: hash routing (Roller et al. 2021 §3): the FFN expert of a position is hash(input token id), "
        "a balanced random table (perm[v] mod E, hash_seed 3), k=1, gate 1, no router, no ln2, no FFN balancing; "
        "Gs=2 R=2, one padded row (its <unk> inputs hash too), answer-only"),
    "moeut_capacity": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=4, ff_expert_size=6, ff_k=2,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=False, out_norm_affine=True,
                  router="softmax", router_renorm=True, ff_capacity_factor=1.0),
        dict(B=2, T=9, rows=[10, 6], answer_only=True, grad_scale=1.0), 1515,
        "MoE variants: expert capacity CF 1.0 (EC = 9 of the 36 assignments of 18 positions, K=2 of 4), position "
        "order (GShard Algorithm 1), softmax gates renormalised over the top-2 before the dropping; Gs=2 R=2, one "
        "padded row, answer-only; eval_logits: the eval path drops nothing"),
    "moeut_capacity_score": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=4, ff_expert_size=6, ff_k=2,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=False, out_norm_affine=True,
                  ff_capacity_factor=0.75, ff_capacity_order="score"),
        dict(B=2, T=9, rows=[10, 8], answer_only=False, grad_scale=1.0), 1616,
        "MoE variants: expert capacity CF 0.75 (EC = 7 of 36), score order (by gate, Riquelme et al. 2021 §3.1), "
        "MoEUT's sigmoid gates, entropy balancing; Gs=2 R=2, Q+A loss; eval_logits: the eval path drops nothing"),
    "moeut_expert_choice": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=4, ff_expert_size=6, ff_k=2,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=False, out_norm_affine=True,
                  n_shared_experts=1, router="softmax", balance="none", routing="expert_choice",
                  ff_capacity_factor=2.0),
        dict(B=2, T=9, rows=[10, 6], answer_only=True, grad_scale=1.0), 1515,
        "MoE variants: expert-choice routing (Zhou et al. 2022 §3.1) in training: each of the 4 experts takes its "
        "top-c valid positions of the batch by softmax score, c = round(2 * 14 / 4) = 7, gates = those scores; 1 "
        "shared expert at gate 1, no balancing term, Gs=2 R=2, one padded row (never chosen), answer-only"),
    "moeut_dense_first": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=5, n_heads=2, d_head=8, ff_n_experts=5, ff_expert_size=6, ff_k=2,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=True, out_norm_affine=True,
                  n_dense_first=1, d_ff=20),
        dict(B=2, T=8, rows=[9, 5], answer_only=False, grad_scale=0.5), 1212,
        "MoE variants: a dense first layer application (transformer.dense_layers.0, d_ff 20), then the MoEUT group "
        "Gs=2 applied R=2 times; default sigmoid routing and entropy balancing, head bias and final-norm affine ON, "
        "one padded row, grad_scale 0.5"),
    "moeut_dense_first_shared_softmax_bias": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=4, d_head=4, ff_n_experts=6, ff_expert_size=6, ff_k=2,
                  att_n_experts=3, att_k=1, group_size=1, lm_head_bias=False, out_norm_affine=True,
                  n_dense_first=2, d_ff=18, n_shared_experts=1, router="softmax", balance="bias"),
        dict(B=2, T=8, rows=[9, 6], answer_only=False, grad_scale=1.0), 1313,
        "MoE variants: two dense first applications (d_ff 18 = (ff_k + n_shared_experts) * ff_expert_size, the "
        "default, written explicitly), then one MoEUT layer applied twice with 1 shared expert and a softmax router "
        "(probabilities at the top-K, not renormalised) with bias balancing (balance_gamma left at its default); "
        "D=4 -> n_rot=2, one padded row"),
    "dense_tiny_on": (
        dense_cfg(n_tokens=40, d_model=16, n_layers=2, n_heads=2, d_head=8, d_ff=40, lm_head_bias=True,
                  out_norm_affine=True),
        dict(B=2, T=8, rows=[9, 9], answer_only=False, grad_scale=1.0), 606,
        "dense pre-LN, head bias and final-norm affine ON, full windows, Q+A loss"),
    "dense_tiny_off": (
        dense_cfg(n_tokens=52, d_model=20, n_layers=3, n_heads=4, d_head=5, d_ff=36, lm_head_bias=False,
                  out_norm_affine=False),
        dict(B=3, T=10, rows=[11, 8, 4], answer_only=True, grad_scale=1.0), 707,
        "dense DM-math style (no head bias, no final-norm params), padding, answer-only loss; D=5 -> n_rot=2"),
    "moe_switch": (
        moe_cfg(n_tokens=40, d_model=16, n_layers=2, n_heads=2, d_head=8, ff_n_experts=4, ff_expert_size=6, ff_k=1,
                lm_head_bias=True, out_norm_affine=True, router="softmax", router_renorm=False, balance="switch",
                balance_alpha=0.5),
        dict(B=2, T=8, rows=[9, 6], answer_only=False, grad_scale=1.0), 1414,
        "arch moe, Switch Transformer routing: top-1 of 4 experts with biases, softmax gate (not renormalised), "
        "the Switch loss per MoE layer (alpha 0.5), head bias and final-norm affine ON, one padded row"),
    "moe_mixtral_dense_first": (
        moe_cfg(n_tokens=44, d_model=16, n_layers=3, n_heads=2, d_head=8, ff_n_experts=5, ff_expert_size=6, ff_k=2,
                lm_head_bias=False, out_norm_affine=False, router="softmax", router_renorm=True, n_dense_first=1,
                d_ff=10),
        dict(B=3, T=10, rows=[11, 8, 4], answer_only=True, grad_scale=1.0), 1515,
        "arch moe, Mixtral routing: softmax over the top-2 of 5 experts (router_renorm), the default Switch loss "
        "(alpha 0.01, not written), one dense first layer of d_ff 10, DM-math wrapper (no head bias, no final-norm "
        "params), padding and an answer-only loss"),
    "moe_sigmoid_scaled": (
        moe_cfg(n_tokens=40, d_model=16, n_layers=2, n_heads=4, d_head=4, ff_n_experts=6, ff_expert_size=5, ff_k=3,
                lm_head_bias=True, out_norm_affine=False, router="sigmoid", routed_scaling_factor=2.5,
                balance="none"),
        dict(B=2, T=8, rows=[9, 9], answer_only=False, grad_scale=0.5), 1616,
        "arch moe with sigmoid gates (not renormalised) times routed_scaling_factor 2.5, no balancing loss, top-3 of "
        "6, D=4 -> n_rot=2, grad_scale 0.5"),
    "moeut_group_limited": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=8, ff_expert_size=6, ff_k=3,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=False, out_norm_affine=True,
                  n_group=4, topk_group=2),
        dict(B=2, T=9, rows=[10, 6], answer_only=True, grad_scale=1.0), 1515,
        "MoE variants: DeepSeek-V3's group-limited routing on MoEUT's sigmoid router: 8 experts in 4 groups of 2, a "
        "group's score the sum of its two sigmoid scores, the 2 best groups eligible, top-3 among their 4 experts; "
        "entropy balancing, Gs=2 R=2, one padded row, answer-only"),
    "moeut_group_limited_softmax_bias": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=9, ff_expert_size=6, ff_k=2,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=False, out_norm_affine=True,
                  router="softmax", router_renorm=True, balance="bias", n_group=3, topk_group=1),
        dict(B=2, T=9, rows=[10, 7], answer_only=False, grad_scale=1.0), 1616,
        "MoE variants: group-limited routing on softmax scores + expert_bias (random): 9 experts in 3 groups of 3, a "
        "group's score the sum of its two largest softmax probability + bias, 1 group eligible, top-2 of its 3, gates "
        "renormalised over the selected; bias balancing, Gs=2 R=2, one padded row"),
    "moeut_seq_balance": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=8, ff_expert_size=6, ff_k=2,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=False, out_norm_affine=True,
                  router="sigmoid", router_renorm=True, routed_scaling_factor=2.5, balance="bias", n_group=4,
                  topk_group=2, seq_balance_alpha=0.5),
        dict(B=3, T=9, rows=[10, 7, 4], answer_only=True, grad_scale=1.0), 1717,
        "MoE variants: DeepSeek-V3's routing (sigmoid gates normalised over the selected x 2.5, bias balancing, 8 "
        "experts in 4 groups of 2, 2 kept) with its sequence-wise balance loss, alpha 0.5 (V3: 0.0001; large here so "
        "that its gradient shows): per sequence sum_i f_i P_i over its valid positions (three unequal rows), the mean "
        "over the sequences, one loss per layer application; Gs=2 R=2, answer-only"),
    "moeut_residual": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts=6, ff_expert_size=6, ff_k=1,
                  att_n_experts=3, att_k=2, group_size=2, lm_head_bias=True, out_norm_affine=False,
                  ff_residual_size=10),
        dict(B=2, T=9, rows=[10, 7], answer_only=True, grad_scale=1.0), 1515,
        "MoE variants: DeepSpeed-MoE's Residual-MoE (arXiv 2201.05596 §4.1.2): one routed expert (ff_k 1, sigmoid) "
        "beside a dense ReLU MLP of width 10 on every token with weight 1 (reads the raw x1), entropy balancing, "
        "Gs=2 R=2, one padded row, answer-only"),
    "moeut_arctic_residual": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=3, n_heads=2, d_head=8, ff_n_experts=6, ff_expert_size=4, ff_k=2,
                  att_n_experts=3, att_k=1, group_size=1, lm_head_bias=False, out_norm_affine=True,
                  n_dense_first=1, n_shared_experts=1, router="softmax", router_renorm=True, balance="switch",
                  balance_alpha=0.25, ff_residual_size=12),
        dict(B=2, T=8, rows=[9, 6], answer_only=False, grad_scale=0.5), 1616,
        "MoE variants: Snowflake Arctic's dense residual MLP (width 12) in parallel with top-2 softmax routing "
        "renormalised over the selected, plus 1 shared expert, Switch balancing; a dense first application of the "
        "default width (ff_k + n_shared_experts) * ff_expert_size + ff_residual_size = 24, then one MoEUT layer "
        "applied twice, one padded row"),
    "moeut_pyramid": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts_per_layer=[3, 8],
                  ff_expert_size=6, ff_k=2, att_n_experts=3, att_k=2, group_size=2, lm_head_bias=False,
                  out_norm_affine=False),
        dict(B=2, T=9, rows=[10, 6], answer_only=True, grad_scale=1.0), 1717,
        "MoE variants: DeepSpeed-MoE's Pyramid-MoE (arXiv 2201.05596 §4.1.1): 3 experts in the first distinct layer, "
        "8 in the second (ff_n_experts_per_layer), top-2 sigmoid, entropy balancing per layer over its own E_i; "
        "Gs=2 R=2, one padded row, answer-only"),
    "moeut_pyramid_residual_bias": (
        moeut_cfg(n_tokens=40, d_model=16, n_layers=4, n_heads=2, d_head=8, ff_n_experts_per_layer=[6, 3],
                  ff_expert_size=4, ff_k=1, att_n_experts=3, att_k=1, group_size=2, lm_head_bias=True,
                  out_norm_affine=True, ff_residual_size=8, router="softmax", balance="bias"),
        dict(B=2, T=8, rows=[9, 7], answer_only=False, grad_scale=1.0), 1818,
        "MoE variants: PR-MoE (DeepSpeed-MoE §4.1: Pyramid-Residual), 6 then 3 experts with one routed expert "
        "beside a residual MLP of width 8; softmax router with bias balancing (a random expert_bias of each "
        "layer's own size); Gs=2 R=2, one padded row"),
}


def make_batch(spec, V, gen):
    """A DM-math style batch: window w of n real tokens; inputs[t] = w[t] and targets[t] = w[t+1] for t < n-1; every
    other position has input 0 (<unk>) and target -1. valid = (target >= 0) drives the regularizer mask. Answer-only:
    the window is split into examples (question tokens then answer tokens) and only targets that are answer tokens
    are counted by the CE. Returns inputs, targets, loss_mask ([B,T] each)."""
    B, T = spec["B"], spec["T"]
    inputs = torch.zeros(B, T, dtype=torch.long)
    targets = torch.full((B, T), -1, dtype=torch.long)
    for b, n in enumerate(spec["rows"]):
        assert n <= T + 1
        if n < 2:
            continue
        w = torch.randint(3, V, (n,), generator=gen)  # ids 0..2 are <unk>, <s>, </s>: never real text
        inputs[b, : n - 1] = w[: n - 1]
        targets[b, : n - 1] = w[1:n]
    loss_mask = torch.ones(B, T, dtype=torch.bool)
    if spec["answer_only"]:
        for b, n in enumerate(spec["rows"]):
            is_answer = torch.zeros(n, dtype=torch.bool)
            pos = 0
            while pos < n:  # examples of 2..4 question tokens followed by 1..3 answer tokens
                q = int(torch.randint(2, 5, (1,), generator=gen))
                a = int(torch.randint(1, 4, (1,), generator=gen))
                is_answer[pos + q : pos + q + a] = True
                pos += q + a
            loss_mask[b, max(n - 1, 0):] = False  # padding is never an answer (as the loader's eval_mask)
            for t in range(max(n - 1, 0)):
                if not is_answer[t + 1]:
                    loss_mask[b, t] = False
    assert int(((targets >= 0) & loss_mask).sum()) > 0
    return inputs, targets, loss_mask


def step_inputs(targets, loss_mask):
    """What bin/inspect (and the C test) derive from a batch: valid = targets >= 0 (regularizer mask) and the CE
    targets (-1 unless valid and loss_mask)."""
    valid = targets >= 0
    return valid, torch.where(valid & loss_mask, targets, torch.full_like(targets, -1))


# std of the random expert_bias of a balance "bias" fixture, by router: comparable to the spread of the scores it is
# added to (sigmoid values of logits of std ~2; softmax probabilities over E ~ 6 experts), so that it changes selections
EXPERT_BIAS_STD = {"sigmoid": 0.25, "softmax": 0.1}


@torch.no_grad()
def fixture_weights(model, gen):
    """Random weights with O(1) activations: routers sharp enough that top-k is decided by clear margins, attention
    far from uniform, non-trivial LayerNorm affines and biases. Order of the draws: embedding, head, final norm, the
    dense prefix (MoEUT with n_dense_first), the layers; a draw exists only for a tensor the config has."""
    cfg = model.cfg
    C = cfg["d_model"]

    def normal(t, std, mean=0.0):
        t.copy_(torch.randn(t.shape, generator=gen, dtype=torch.float64) * std + mean)

    def dense_layer(layer):
        for ln in (layer.ln1, layer.ln2):
            normal(ln.weight, 0.2, 1.0)
            normal(ln.bias, 0.2)
        a, f = layer.attention, layer.ffn
        for lin in (a.q, a.k):
            normal(lin.weight, 1.5 / math.sqrt(C))
        normal(a.v.weight, 1.0 / math.sqrt(C))
        normal(a.o.weight, 1.0 / math.sqrt(a.o.weight.shape[1]))
        normal(f.linear1.weight, 1.0 / math.sqrt(C))
        normal(f.linear1.bias, 0.1)
        normal(f.linear2.weight, 1.0 / math.sqrt(f.linear2.weight.shape[1]))
        normal(f.linear2.bias, 0.1)

    normal(model.embedding.weight, 1.0)
    normal(model.lm_head.weight, 1.0 / math.sqrt(C))
    if model.lm_head.bias is not None:
        normal(model.lm_head.bias, 0.5)
    if model.out_norm.weight is not None:
        normal(model.out_norm.weight, 0.2, 1.0)
        normal(model.out_norm.bias, 0.2)
    for layer in model.transformer.dense_layers:
        dense_layer(layer)
    for layer in model.transformer.layers:
        if cfg["arch"] == "moe":  # the dense attention, a sharp router, experts with biases
            for ln in (layer.ln1, layer.ln2):
                normal(ln.weight, 0.2, 1.0)
                normal(ln.bias, 0.2)
            a, f = layer.attention, layer.ffn
            for lin in (a.q, a.k):
                normal(lin.weight, 1.5 / math.sqrt(C))
            normal(a.v.weight, 1.0 / math.sqrt(C))
            normal(a.o.weight, 1.0 / math.sqrt(a.o.weight.shape[1]))
            normal(f.expert_sel, 2.0 / math.sqrt(C))
            normal(f.keys, 1.0 / math.sqrt(C))
            normal(f.keys_bias, 0.1)
            normal(f.values, 1.0 / math.sqrt(cfg["ff_expert_size"]))
            normal(f.values_bias, 0.1)
            continue
        if cfg["arch"] != "moeut":
            dense_layer(layer)
            continue
        for ln in (layer.ln1, layer.ln2):
            if ln is None:  # routing "hash" has no ln2
                continue
            normal(ln.weight, 0.2, 1.0)
            normal(ln.bias, 0.2)
        att, ffn = layer.attention, layer.ffn
        D, S = cfg["d_head"], cfg["ff_expert_size"]
        normal(att.q.weight, 1.5 / math.sqrt(C))
        normal(att.k.weight, 1.5 / math.sqrt(C))
        normal(att.v, 1.0 / math.sqrt(C))
        normal(att.o, 1.0 / math.sqrt(D))
        normal(att.sel_v, 2.0 / math.sqrt(C))
        normal(att.sel_o, 2.0 / math.sqrt(C))
        normal(ffn.keys, 1.0 / math.sqrt(C))
        normal(ffn.values, 1.0 / math.sqrt(S))
        if ffn.expert_sel is not None:  # routing "hash" has no router
            normal(ffn.expert_sel, 2.0 / math.sqrt(C))
        if ffn.n_shared > 0:
            normal(ffn.shared_keys, 1.0 / math.sqrt(C))
            normal(ffn.shared_values, 1.0 / math.sqrt(S))
        if ffn.residual_size > 0:
            normal(ffn.residual_keys, 1.0 / math.sqrt(C))
            normal(ffn.residual_values, 1.0 / math.sqrt(ffn.residual_size))
        if ffn.expert_bias is not None:
            normal(ffn.expert_bias, EXPERT_BIAS_STD[ffn.router])
    # Round to f32: the stored weights are F32, and the twin computes from exactly those values.
    for p in list(model.parameters()) + list(model.buffers()):
        p.copy_(p.float().double())


@torch.no_grad()
def bias_changed_selections(model, inputs, valid):
    """For a balance "bias" model: how many (layer application, valid position) top-K sets differ from those of the
    same model with expert_bias = 0, and the total number compared."""
    _, hist = model(inputs)
    saved = [layer.ffn.expert_bias.clone() for layer in model.transformer.layers]
    for layer in model.transformer.layers:
        layer.ffn.expert_bias.zero_()
    _, hist0 = model(inputs)
    for layer, b in zip(model.transformer.layers, saved):
        layer.ffn.expert_bias.copy_(b)
    changed = total = 0
    for lh, lh0 in zip(hist, hist0):
        for s, s0 in zip(lh["ffn_sel"], lh0["ffn_sel"]):
            diff = (s.sort(-1).values != s0.sort(-1).values).any(-1)[valid]
            changed += int(diff.sum())
            total += int(diff.numel())
    return changed, total


@torch.no_grad()
def group_changed_selections(model, inputs, valid):
    """For a group-limited model (n_group > 1): how many (layer application, valid position) top-K sets differ from
    those of the same model without the group limit, and the total number compared."""
    _, hist = model(inputs)
    saved = [layer.ffn.n_group for layer in model.transformer.layers]
    for layer in model.transformer.layers:
        layer.ffn.n_group = 1
    _, hist0 = model(inputs)
    for layer, g in zip(model.transformer.layers, saved):
        layer.ffn.n_group = g
    changed = total = 0
    for lh, lh0 in zip(hist, hist0):
        for s, s0 in zip(lh["ffn_sel"], lh0["ffn_sel"]):
            diff = (s.sort(-1).values != s0.sort(-1).values).any(-1)[valid]
            changed += int(diff.sum())
            total += int(diff.numel())
    return changed, total


def build_fixture(name, out_dir):
    cfg, spec, seed, desc = FIXTURES[name]
    torch.manual_seed(seed)  # nothing should use the global RNG; set anyway for safety
    for attempt in range(MAX_ATTEMPTS):
        gen = torch.Generator().manual_seed(seed * 1000 + attempt)
        inputs, targets, loss_mask = make_batch(spec, cfg["n_tokens"], gen)
        valid, ce_targets = step_inputs(targets, loss_mask)
        model = twin.build_model(cfg).double()
        fixture_weights(model, gen)
        log = []
        with torch.no_grad():
            model(inputs, log, valid=valid)  # valid: the positions expert choice chooses from
            if cfg.get("routing") == "expert_choice":  # and its causal evaluation routing, top-ff_k per position
                model.eval()
                model(inputs, log)
                model.train()
        r_margin = twin.min_routing_margin(log)
        u_margin = twin.min_relu_margin(log)
        c_dropped, c_total, c_gap = twin.capacity_stats(log)
        c_ok = cfg.get("ff_capacity_order", "position") != "score" or c_gap > CAPACITY_MARGIN
        if r_margin > ROUTING_MARGIN and u_margin > RELU_MARGIN and c_ok:
            break
    else:
        raise SystemExit(f"{name}: no draw with routing margin > {ROUTING_MARGIN} in {MAX_ATTEMPTS} attempts")

    extra_meta = {}
    if cfg.get("balance") == "bias":  # the bias must really change the routing (else the fixture could not see it)
        changed, total = bias_changed_selections(model, inputs, valid)
        if changed == 0:
            raise SystemExit(f"{name}: the expert_bias changes no selection")
        extra_meta["bias_changed_selections"] = f"{changed}/{total}"
    eval_logits = None
    if cfg.get("ff_capacity_factor", 0) > 0 and cfg.get("routing", "topk") == "topk":  # capacity must drop some
        # assignments and keep most
        if not 0 < c_dropped < c_total:
            raise SystemExit(f"{name}: the capacity drops {c_dropped} of {c_total} assignments")
        extra_meta["capacity_dropped"] = f"{c_dropped}/{c_total}"
        model.eval()  # evaluation drops nothing: the eval path's logits differ from the training step's
        with torch.no_grad():
            eval_logits = model(inputs)[0].detach()
        model.train()
    if cfg.get("n_group", 1) > 1:  # the group limit must really change the routing
        changed, total = group_changed_selections(model, inputs, valid)
        if changed == 0:
            raise SystemExit(f"{name}: the group limit changes no selection")
        extra_meta["group_changed_selections"] = f"{changed}/{total}"

    model.zero_grad()
    res = twin.objective(model, inputs, ce_targets, valid, spec["grad_scale"])
    res["total"].backward()

    os.makedirs(out_dir, exist_ok=True)
    weights = {n: p.detach().float() for n, p in model.state_dict().items()}
    st_io.save(os.path.join(out_dir, "weights.safetensors"), weights,
               {"config": twin.config_json(cfg), "format": "pt"})
    one = lambda v: torch.tensor([float(v)], dtype=torch.float64)  # noqa: E731
    expected = {
        "logits": res["logits"].detach(),
        "cross_entropy": one(res["ce"]),
        "ce_sum": one(res["ce_sum"]),
        "n_counted": one(res["n_counted"]),
        "reg_ffn": one(res["reg_ffn"]),
        "reg_att": one(res["reg_att"]),
        "total": one(res["total"]),
    }
    if eval_logits is not None:
        expected["eval_logits"] = eval_logits
    if "reg_seq" in res:  # model.seq_balance_alpha > 0
        expected["reg_seq"] = one(res["reg_seq"])
    if cfg.get("routing") == "expert_choice":  # evaluation routes causally (twin.py): its logits apart
        model.eval()
        with torch.no_grad():
            expected["eval_logits"] = model(inputs)[0].detach()
        model.train()
    for n, p in model.named_parameters():  # parameters only: the expert_bias buffer has no gradient
        expected["grad." + n] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    st_io.save(os.path.join(out_dir, "expected.safetensors"), expected,
               {"generator": "tests/reference/gen_fixtures.py", "torch": torch.__version__,
                "routing_margin": repr(r_margin), "relu_margin": repr(u_margin), "seed": str(seed * 1000 + attempt),
                **extra_meta})
    # batch.json in the format of bin/inspect: targets are the real next tokens (-1 = none; valid = targets >= 0) and
    # loss_mask selects the counted ones (the CE counts targets >= 0 with loss_mask 1)
    batch = {"inputs": inputs.tolist(), "targets": targets.tolist(), "loss_mask": loss_mask.int().tolist()}
    with open(os.path.join(out_dir, "batch.json"), "w") as f:
        json.dump(batch, f, separators=(", ", ": "))
        f.write("\n")
    info = {"description": desc, "B": spec["B"], "T": spec["T"], "grad_scale": spec["grad_scale"],
            "loss_mode": "answer_only" if spec["answer_only"] else "qa"}
    with open(os.path.join(out_dir, "fixture.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print(f"{name}: attempt {attempt}, routing margin {r_margin:.3g}, relu margin {u_margin:.3g}, "
          f"ce {float(res['ce']):.6f}, reg_ffn {float(res['reg_ffn']):.6f}, reg_att {float(res['reg_att']):.6f}, "
          f"{sum(p.numel() for p in model.parameters())} params" +
          (f", bias changes {extra_meta['bias_changed_selections']} selections"
           if "bias_changed_selections" in extra_meta else "") +
          (f", capacity drops {extra_meta['capacity_dropped']} assignments" if "capacity_dropped" in extra_meta else "") +
          (f", the group limit changes {extra_meta['group_changed_selections']} selections"
           if "group_changed_selections" in extra_meta else ""))


CHECK_RTOL = 1e-12


def compare_fixture(new_dir, old_dir, name):
    """Weights and batch.json must be identical (they come from the seeded RNG only); the expected values may differ
    in the last bits between machines (BLAS kernels), so they are compared relative to each tensor's max."""
    bad = []
    for fn in ("weights.safetensors", "batch.json", "fixture.json"):
        b = os.path.join(old_dir, fn)
        if not os.path.exists(b) or not filecmp.cmp(os.path.join(new_dir, fn), b, shallow=False):
            bad.append(f"{name}/{fn} differs")
    b = os.path.join(old_dir, "expected.safetensors")
    if not os.path.exists(b):
        return bad + [f"{name}/expected.safetensors missing"]
    new, _ = st_io.load(os.path.join(new_dir, "expected.safetensors"))
    old, _ = st_io.load(b)
    if set(new) != set(old):
        return bad + [f"{name}/expected.safetensors: tensor names differ"]
    for k in sorted(new):
        scale = float(new[k].abs().max()) if new[k].numel() else 0.0
        diff = float((new[k] - old[k]).abs().max()) if new[k].numel() else 0.0
        if new[k].shape != old[k].shape or diff > CHECK_RTOL * max(scale, 1e-300):
            bad.append(f"{name}/expected.safetensors: {k} differs by {diff:.3g} (max {scale:.3g})")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join("tests", "fixtures", "twin"))
    ap.add_argument("--check", action="store_true", help="verify the committed fixtures instead of writing")
    ap.add_argument("--only", default=None, help="comma-separated fixture names")
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = args.only.split(",") if args.only else list(FIXTURES)
    if args.check:
        tmp = tempfile.mkdtemp(prefix="twin-fixtures-")
        try:
            bad = []
            for n in names:
                build_fixture(n, os.path.join(tmp, n))
                bad += compare_fixture(os.path.join(tmp, n), os.path.join(args.out, n), n)
            if bad:
                raise SystemExit("gen_fixtures --check: committed fixtures differ from a regeneration: " +
                                 "; ".join(bad))
            print(f"gen_fixtures --check: {len(names)} fixtures match a regeneration (weights and batch exactly, "
                  f"expected values within {CHECK_RTOL:g} of each tensor's max)")
        finally:
            shutil.rmtree(tmp)
        return
    for n in names:
        tmpdir = os.path.join(args.out, n + ".tmp.gen")
        shutil.rmtree(tmpdir, ignore_errors=True)
        build_fixture(n, tmpdir)
        final = os.path.join(args.out, n)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmpdir, final)


if __name__ == "__main__":
    main()
