"""Writes a run config of arch "moe" (a dense Transformer with a routed FFN) from an e2e run config (train_config's):
the same train/evaluate sections, the model replaced by a moe model of the same size class (C 64, 4 layer applications,
one dense first layer of d_ff 64, then 3 MoE layers of 8 experts of 32, top-2, Mixtral's renormalised softmax gates,
the Switch loss with alpha 0.05).

Usage: python3 tests/e2e/moe_arch_config.py SRC.json DST.json
"""
import json
import sys

src, dst = sys.argv[1:3]
with open(src) as f:
    cfg = json.load(f)
cfg["description"] = "e2e test run (moe)"
cfg["model"] = {
    "arch": "moe", "n_tokens": cfg["model"]["n_tokens"], "d_model": 64, "n_layers": 4, "n_heads": 2, "d_head": 32,
    "ff_n_experts": 8, "ff_expert_size": 32, "ff_k": 2, "router": "softmax", "router_renorm": True,
    "balance": "switch", "balance_alpha": 0.05, "n_dense_first": 1, "d_ff": 64, "dropout": 0.0,
    "lm_head_bias": False, "out_norm_affine": False,
}
with open(dst, "w") as f:
    json.dump(cfg, f, indent=1)
    f.write("\n")
