#!/usr/bin/env python3
"""Table and plot of the cpu_arith learning-curve study (learning_curves.sh runs it).

Reads, for each study run directory given as LABEL=DIR, the evaluated checkpoints DIR/checkpoints/step<S>/result.json
(bin/evaluate on train.keep_checkpoints weights) and writes a Markdown table (stdout) and an SVG plot (--svg):
pooled and per-module accuracy and mean answer loss on interpolate and extrapolate against training tokens.
Standard library only."""
import argparse
import glob
import json
import os
import re
import sys

EASY = ["arithmetic__add_or_sub", "arithmetic__add_sub_multiple", "arithmetic__mul", "arithmetic__div"]


def load(label, run_dir):
    points = []
    for path in glob.glob(os.path.join(run_dir, "checkpoints", "step*", "result.json")):
        with open(path) as f:
            r = json.load(f)
        step = int(re.search(r"step(\d+)", path).group(1))
        sets = r["evaluation"]["sets"]
        # tokens at this step: the run's tokens per step times the step
        cfg = r["config"]["train"]
        tokens = step * cfg["batch_size"] * cfg["context"]
        easy_n = sum(sets["interpolate"]["modules"][m]["n"] for m in EASY)
        easy_c = sum(sets["interpolate"]["modules"][m]["correct"] for m in EASY)
        points.append({
            "label": label, "arch": r["arch"], "params": r["n_params"], "step": step, "tokens": tokens,
            "acc_i": sets["interpolate"]["accuracy"], "acc_e": sets["extrapolate"]["accuracy"],
            "loss_i": sets["interpolate"]["mean_answer_loss"], "loss_e": sets["extrapolate"]["mean_answer_loss"],
            "n_i": sets["interpolate"]["n"], "n_e": sets["extrapolate"]["n"],
            "easy": easy_c / easy_n if easy_n else float("nan"), "easy_n": easy_n,
            "modules": {s: {m: v["accuracy"] for m, v in sets[s]["modules"].items()} for s in sets},
        })
    if not points:
        sys.exit(f"learning_curves.py: {run_dir}: no evaluated checkpoint (checkpoints/step*/result.json)")
    return sorted(points, key=lambda p: p["step"])


def table(series):
    out = ["| run | parameters | tokens | interpolate acc | extrapolate acc | easy modules acc | "
           "interpolate answer loss | extrapolate answer loss |", "|---|---|---|---|---|---|---|---|"]
    for pts in series:
        for p in pts:
            out.append(f"| {p['label']} | {p['params'] / 1e6:.2f}M | {p['tokens'] / 1e6:.2f}M | {100 * p['acc_i']:.1f}% | "
                       f"{100 * p['acc_e']:.1f}% | {100 * p['easy']:.1f}% | {p['loss_i']:.2f} | {p['loss_e']:.2f} |")
    mods = sorted({m for pts in series for p in pts for m in p["modules"]["interpolate"]})
    out += ["", "Per module, interpolate accuracy at the last evaluated step:", "",
            "| run | " + " | ".join(m.replace("arithmetic__", "") for m in mods) + " |",
            "|---|" + "---|" * len(mods)]
    for pts in series:
        p = pts[-1]
        out.append(f"| {p['label']} | " + " | ".join(f"{100 * p['modules']['interpolate'].get(m, float('nan')):.1f}%"
                                                     for m in mods) + " |")
    return "\n".join(out)


COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def svg(series, path):
    """Three panels against training tokens: interpolate answer loss, easy-module accuracy, pooled accuracy."""
    W, H, pw, ph, ml, mt = 1250, 420, 330, 300, 70, 50
    panels = [("interpolate mean answer loss (nats)", "loss_i", 1), ("easy modules accuracy (%)", "easy", 100),
              ("pooled interpolate accuracy (%)", "acc_i", 100)]
    xmax = max(p["tokens"] for pts in series for p in pts)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
             f'font-size="13"><rect width="{W}" height="{H}" fill="white"/>']
    for k, (title, key, scale) in enumerate(panels):
        x0 = ml + k * (pw + 70)
        ys = [scale * p[key] for pts in series for p in pts]
        ymin, ymax = (0, max(ys) * 1.1 or 1) if key != "loss_i" else (min(ys) * 0.9, max(ys) * 1.05)
        X = lambda t: x0 + pw * t / xmax
        Y = lambda v: mt + ph - ph * (v - ymin) / (ymax - ymin)
        parts.append(f'<text x="{x0 + pw / 2}" y="{mt - 15}" text-anchor="middle">{title}</text>')
        parts.append(f'<rect x="{x0}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
        for i in range(5):
            v = ymin + (ymax - ymin) * i / 4
            parts.append(f'<text x="{x0 - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
            t = xmax * i / 4
            parts.append(f'<text x="{X(t):.1f}" y="{mt + ph + 18}" text-anchor="middle">{t / 1e6:.1f}M</text>')
        parts.append(f'<text x="{x0 + pw / 2}" y="{mt + ph + 38}" text-anchor="middle">training tokens</text>')
        for j, pts in enumerate(series):
            c = COLOURS[j % len(COLOURS)]
            d = " ".join(f"{X(p['tokens']):.1f},{Y(scale * p[key]):.1f}" for p in pts)
            parts.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="2"/>')
            for p in pts:
                parts.append(f'<circle cx="{X(p["tokens"]):.1f}" cy="{Y(scale * p[key]):.1f}" r="3" fill="{c}"/>')
    for j, pts in enumerate(series):
        c = COLOURS[j % len(COLOURS)]
        parts.append(f'<rect x="{ml + j * 190}" y="{H - 22}" width="14" height="4" fill="{c}"/>'
                     f'<text x="{ml + j * 190 + 20}" y="{H - 16}">{pts[0]["label"]} ({pts[0]["params"] / 1e6:.2f}M)</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", nargs="+", help="LABEL=DIR")
    ap.add_argument("--svg", required=True)
    a = ap.parse_args()
    series = []
    for spec in a.runs:
        label, _, d = spec.partition("=")
        if not d:
            sys.exit(f"learning_curves.py: {spec}: expected LABEL=DIR")
        series.append(load(label, d))
    print(table(series))
    svg(series, a.svg)


if __name__ == "__main__":
    main()
