#!/usr/bin/env python3
"""Spread table for tests/baselines/measure_spread.sh: how far each variant's result records lie from the baselines.

For every variant directory WORK/<variant>/<run>/result.json and its baseline BASELINES/<run>.result.json, collects
the compared numbers by tolerance class (the classes of bin/compare; counts and greedy disagreements must not move)
and writes, per variant and class, the largest |new - baseline| and |new - baseline| / |baseline| with the metric
where it occurred, and per class the across-seed standard deviation (sample sd over the baseline, seed2, seed3, ...
per metric; the largest and the median over the class's metrics, absolute and relative to the seeds' mean).
"""
import argparse, json, math, os, platform, statistics, subprocess, sys, time

HONEST = ("rerun", "seed", "coretype-", "threads")


def metrics(rec):
    """{name: (class, value)} as in pipeline/records/compare_metrics.c record_metrics_collect."""
    m = {"n_params": ("count", rec["n_params"]),
         "training.steps": ("count", rec["training"]["steps"]),
         "training.tokens": ("count", rec["training"]["tokens"]),
         "training.final_train_loss": ("final_train_loss", rec["training"]["final_train_loss"]),
         "evaluation.mean_accuracy": ("accuracy", rec["evaluation"]["mean_accuracy"])}
    for sn, se in rec["evaluation"]["sets"].items():
        m[sn + ".n"] = ("count", se["n"])
        m[sn + ".accuracy"] = ("accuracy", se["accuracy"])
        m[sn + ".mean_answer_loss"] = ("mean_answer_loss", se["mean_answer_loss"])
        m[sn + ".greedy_disagreements"] = ("greedy_disagreements", se["greedy_n"] - se["greedy_agree"])
        for mn, me in se["modules"].items():
            m[f"{sn}.{mn}.n"] = ("count", me["n"])
            m[f"{sn}.{mn}.accuracy"] = ("accuracy", me["accuracy"])
            m[f"{sn}.{mn}.mean_answer_loss"] = ("mean_answer_loss", me["mean_answer_loss"])
    return m


def subclass(name, klass):
    """Answer losses: mean_answer_loss per evaluation set, module_mean_answer_loss per module (compare's classes)."""
    if klass == "mean_answer_loss" and name.count(".") > 1:
        return "module_mean_answer_loss"
    return klass


def load(path):
    with open(path) as f:
        return json.load(f)


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        model = next(l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("model name"))
        flags = next(l.split(":", 1)[1].split() for l in text.splitlines() if l.startswith("flags"))
        simd = sorted(x for x in flags if x.startswith(("avx", "fma", "sse4")))
        return f"{model}, {os.cpu_count()} cores, {' '.join(simd)}"
    except (OSError, StopIteration):
        return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiment", required=True)
    ap.add_argument("--baselines", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    runs = sorted(f[:-len(".result.json")] for f in os.listdir(a.baselines)
                  if f.endswith(".result.json") and ".seed" not in f)
    base = {r: metrics(load(os.path.join(a.baselines, r + ".result.json"))) for r in runs}
    variants = {}
    seeds = {r: [base[r]] for r in runs}
    verdicts = {}
    vpath = os.path.join(a.work, "verdicts.tsv")
    if os.path.exists(vpath):
        with open(vpath) as f:
            for line in f:
                v, rc, n_worse = line.rstrip("\n").split("\t")
                verdicts[v] = {"compare_exit": int(rc), "metrics_worse": int(n_worse)}
    for v in sorted(os.listdir(a.work)):
        if v.startswith("_") or not os.path.isdir(os.path.join(a.work, v)):
            continue
        per_class = {}
        done = [r for r in runs if os.path.exists(os.path.join(a.work, v, r, "result.json"))]
        if not done:
            continue
        for r in done:
            cur = metrics(load(os.path.join(a.work, v, r, "result.json")))
            if v.startswith("seed"):
                seeds[r].append(cur)
            for name, (klass, b) in base[r].items():
                c = cur[name][1]
                sc = subclass(name, klass)
                d = c - b
                rel = abs(d) / abs(b) if b else (0.0 if d == 0 else math.inf)
                e = per_class.setdefault(sc, {"max_abs": 0.0, "max_abs_at": "", "max_rel": 0.0, "max_rel_at": "",
                                              "worse_max_abs": 0.0, "worse_max_rel": 0.0, "n_changed": 0, "n": 0})
                e["n"] += 1
                e["n_changed"] += d != 0
                if abs(d) > e["max_abs"]:
                    e["max_abs"], e["max_abs_at"] = abs(d), f"{r}:{name} {b:.6g} -> {c:.6g}"
                if rel > e["max_rel"] and klass != "accuracy":
                    e["max_rel"], e["max_rel_at"] = rel, f"{r}:{name} {b:.6g} -> {c:.6g}"
                worse = -d if klass == "accuracy" else d
                if worse > 0:
                    e["worse_max_abs"] = max(e["worse_max_abs"], worse)
                    if b and klass != "accuracy":
                        e["worse_max_rel"] = max(e["worse_max_rel"], worse / abs(b))
        for e in per_class.values():
            if e["max_rel"] == 0:
                del e["max_rel_at"]
        variants[v] = {"kind": "honest" if v.startswith(HONEST) else "degraded", "runs": done, "classes": per_class}
        if v in verdicts:
            variants[v]["compare"] = verdicts[v]
    sd = {}
    for r in runs:
        if len(seeds[r]) < 3:
            continue
        for name, (klass, _) in base[r].items():
            vals = [s[name][1] for s in seeds[r]]
            s_abs = statistics.stdev(vals)
            mean = statistics.fmean(vals)
            e = sd.setdefault(subclass(name, klass), {"abs": [], "rel": []})
            e["abs"].append((s_abs, f"{r}:{name}"))
            if klass != "accuracy" and mean:
                e["rel"].append((s_abs / abs(mean), f"{r}:{name}"))
    seed_sd = {}
    for sc, e in sd.items():
        o = {"n_seeds": 1 + sum(1 for v in variants if v.startswith("seed")),
             "max_abs": max(e["abs"])[0], "max_abs_at": max(e["abs"])[1],
             "median_abs": statistics.median(x for x, _ in e["abs"])}
        if e["rel"]:
            o.update({"max_rel": max(e["rel"])[0], "max_rel_at": max(e["rel"])[1],
                      "median_rel": statistics.median(x for x, _ in e["rel"])})
        seed_sd[sc] = o
    try:
        blas = subprocess.run(["sh", "-c", "dpkg-query -W -f '${Version}' libopenblas0-pthread"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        blas = ""
    out = {"comment": "Drift of honest reruns (seeds, BLAS kernel paths, thread counts) and of deliberately degraded "
                      "runs from the baseline records, per tolerance class of bin/compare. max_abs/max_rel: the "
                      "largest |new - baseline| (relative: / |baseline|; not for accuracies) over every metric of "
                      "the class in every run; worse_*: the same counting only moves in the worse direction. "
                      "compare: bin/compare's exit status on the variant with the tolerances.json of the time (on copies carrying the "
                      "baseline's config identity, see measure_spread.sh) and how many metrics it found WORSE. "
                      "seed_sd: per metric the sample standard deviation over the baseline (seed 1) and the seed "
                      "variants, its largest and median value over the class.",
           "experiment": a.experiment, "command": a.command, "measured": time.strftime("%Y-%m-%d"),
           "machine": cpu_flags(), "openblas": blas, "variants": variants, "seed_sd": seed_sd}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    os.replace(tmp, a.out)
    # A readable table on stdout.
    classes = sorted({c for v in variants.values() for c in v["classes"]})
    print("per class: max |delta|, max |delta|/|baseline|, max worse delta; then compare's exit and WORSE count")
    print(f"{'variant':22s} " + " ".join(f"{c:>30s}" for c in classes))
    for v, e in variants.items():
        cells = []
        for c in classes:
            x = e["classes"].get(c)
            cells.append(f"{'-':>30s}" if not x else f"{x['max_abs']:12.4g} {100 * x['max_rel']:8.3f}% {x['worse_max_abs']:8.3g}")
        verdict = e.get("compare")
        print(f"{v:22s} " + " ".join(cells) + (f"  exit {verdict['compare_exit']} worse {verdict['metrics_worse']}" if verdict else ""))
    for c, o in seed_sd.items():
        print(f"seed sd {c:32s} max {o['max_abs']:.4g} ({100 * o.get('max_rel', 0):.3f}%) median {o['median_abs']:.4g} "
              f"({100 * o.get('median_rel', 0):.3f}%)")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    sys.exit(main())
