#!/usr/bin/env python3
"""Checks of predictions.jsonl (bin/evaluate's per-example verdicts, schema dm-math-predictions v2; reports/README.md)
and its sidecar predictions.meta.json, standard library only. Used by tests/e2e/test_evaluate_predictions.sh (against the result record of the same run) and
tests/e2e/test_cuda_evaluate.sh (two backends' files, example by example).

  predictions_check.py validate PREDICTIONS RESULT   one "ok: CHECK" or "FAIL: CHECK: ..." line per check; exit 1 on
                                                     any failure

As a module: load(path) -> (header, lines, problems), the header being the sidecar's object (or, in a version-1 file,
the first line); validate(header, lines, record) and compare(ref, dut, tol) return {check name: [problems]} (an empty
list is a pass), so callers can run negative controls on altered copies.
"""
import hashlib
import json
import math
import os
import sys

SCHEMA, SCHEMA_VERSION = "dm-math-predictions", 2
SETS = ("interpolate", "extrapolate")
HEADER_KEYS = ("schema", "schema_version", "experiment", "run", "code_version", "backend", "hardware", "config_sha256")
# Run provenance after them (pipeline/records/run_provenance.h): "overrides" always, "seed" and "run_config" when known;
# absent from files written before they existed.
PROVENANCE_KEYS = ("overrides", "seed", "run_config")
# Last: what ties the sidecar to its predictions file.
TAIL_KEYS = ("n_examples", "predictions_sha256")


def meta_path(path):
    """The sidecar beside a predictions file (pipeline/records/predictions.h): x.jsonl -> x.meta.json."""
    base = os.path.basename(path)
    stem = path[:-len(".jsonl")] if base.endswith(".jsonl") and base != ".jsonl" else path
    return stem + ".meta.json"


def _header_keys_ok(header):
    keys = tuple(header)
    if keys[:len(HEADER_KEYS)] != HEADER_KEYS or keys[-len(TAIL_KEYS):] != TAIL_KEYS:
        return False
    rest = keys[len(HEADER_KEYS):-len(TAIL_KEYS)]
    return rest == tuple(k for k in PROVENANCE_KEYS if k in rest)
# Every line has every key ("greedy_correct" null where the example was not greedy-checked).
LINE_TYPES = {"set": str, "index": int, "module": str, "question": str, "answer": str, "predicted": str,
              "correct": bool, "answer_loss": float, "greedy_correct": (bool, type(None))}
TOL_MEAN = 1e-9  # relative: the record's means are sums of the same doubles (cJSON prints them to ~1e-16)
MAX_LISTED = 10  # problems listed per check


def load(path):
    """The header (the sidecar's object, else a version-1 file's first line), the example lines, and problems: a line
    that is not a JSON object, a missing file, a sidecar that does not describe these bytes."""
    problems, objs = [], []
    try:
        with open(path, "rb") as f:
            data = f.read()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return None, [], ["%s: cannot read: %s" % (path, e)]
    meta = None
    if os.path.exists(meta_path(path)):
        try:
            with open(meta_path(path), encoding="utf-8") as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            return None, [], ["%s: cannot read: %s" % (meta_path(path), e)]
        if not isinstance(meta, dict):
            return None, [], ["%s: not a JSON object" % meta_path(path)]
        if meta.get("predictions_sha256") != hashlib.sha256(data).hexdigest():
            problems.append("%s: predictions_sha256 %r is not the sha256 of %s"
                            % (meta_path(path), meta.get("predictions_sha256"), path))
    if not text.endswith("\n"):
        problems.append("%s: the last line has no newline (a cut file?)" % path)
    for no, line in enumerate(text.splitlines(), 1):
        try:
            obj = json.loads(line)
        except ValueError as e:
            problems.append("%s:%d: not JSON: %s" % (path, no, e))
            continue
        if not isinstance(obj, dict):
            problems.append("%s:%d: not a JSON object" % (path, no))
            continue
        objs.append(obj)
    if meta is not None:
        if meta.get("n_examples") != len(objs):
            problems.append("%s: n_examples %r, but %s has %d lines"
                            % (meta_path(path), meta.get("n_examples"), path, len(objs)))
        return meta, objs, problems
    if not objs:
        return None, [], problems + ["%s: no lines, and no %s" % (path, meta_path(path))]
    return objs[0], objs[1:], problems


def _typed(value, want):
    if isinstance(want, tuple):
        return any(_typed(value, w) for w in want)
    if want is type(None):
        return value is None
    if want is bool:
        return isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if want is float:  # JSON numbers; a loss must be finite
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, want)


def close(a, b, rel):
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))


def validate(header, lines, record):
    """A predictions file against the result record of the same evaluation."""
    d = {k: [] for k in ("header", "fields", "order", "counts", "losses", "predicted", "greedy")}
    if not isinstance(header, dict) or not _header_keys_ok(header):
        d["header"].append("header keys %s, expected %s [+ %s]" % (list(header or {}), list(HEADER_KEYS),
                                                                   list(PROVENANCE_KEYS)))
    else:
        if (header["schema"], header["schema_version"]) != (SCHEMA, SCHEMA_VERSION):
            d["header"].append("schema %r v%r" % (header["schema"], header["schema_version"]))
        for k in HEADER_KEYS[2:] + tuple(k for k in PROVENANCE_KEYS if k in header):
            if header[k] != record.get(k):
                d["header"].append("%s %r, the record has %r" % (k, header[k], record.get(k)))
    by_set = {s: [] for s in SETS}
    for no, ln in enumerate(lines, 1):
        # every line exactly the same keys, in the same order: one table for a JSON-lines reader
        bad = [k for k in LINE_TYPES if k in ln and not _typed(ln[k], LINE_TYPES[k])]
        if list(ln) != list(LINE_TYPES) or bad or ln.get("set") not in SETS:
            d["fields"].append("line %d: keys %s (expected %s), wrong types %s, set %r"
                               % (no, list(ln), list(LINE_TYPES), bad, ln.get("set")))
            continue
        by_set[ln["set"]].append(ln)
    sets_seen = [ln.get("set") for ln in lines]
    if sets_seen != sorted(sets_seen, key=lambda s: SETS.index(s) if s in SETS else -1):
        d["order"].append("the sets are not in the order %s" % (SETS,))
    for s in SETS:
        ev = record["evaluation"]["sets"][s]
        ls = by_set[s]
        if [ln["index"] for ln in ls] != list(range(len(ls))):
            d["order"].append("%s: indices are not 0..%d in shard order" % (s, len(ls) - 1))
        # counts and mean losses, pooled and per module
        groups = [(s, ev, ls)] + [("%s/%s" % (s, m), ev["modules"].get(m, {"n": 0, "correct": 0}),
                                   [ln for ln in ls if ln["module"] == m])
                                  for m in sorted(set(ev["modules"]) | {ln["module"] for ln in ls})]
        for where, rec, group in groups:
            n, correct = len(group), sum(ln["correct"] for ln in group)
            if (n, correct) != (rec["n"], rec["correct"]):
                d["counts"].append("%s: %d lines, %d correct; the record has n %d, correct %d"
                                   % (where, n, correct, rec["n"], rec["correct"]))
            if n and "mean_answer_loss" in rec:
                mean = math.fsum(ln["answer_loss"] for ln in group) / n
                if not close(mean, rec["mean_answer_loss"], TOL_MEAN):
                    d["losses"].append("%s: mean answer_loss %.17g, the record's mean_answer_loss %.17g"
                                       % (where, mean, rec["mean_answer_loss"]))
        for ln in ls:
            if (ln["predicted"] == ln["answer"]) != ln["correct"]:
                d["predicted"].append("%s %d: predicted %r, answer %r, correct %r"
                                      % (s, ln["index"], ln["predicted"], ln["answer"], ln["correct"]))
        # greedy_correct (not null) on exactly the first greedy_n examples; their agreement count is the record's
        checked = [ln for ln in ls if ln.get("greedy_correct") is not None]
        if checked != ls[:ev["greedy_n"]]:
            d["greedy"].append("%s: greedy_correct on %d lines, expected the first %d"
                               % (s, len(checked), ev["greedy_n"]))
        agree = sum(ln["greedy_correct"] == ln["correct"] for ln in checked)
        if agree != ev["greedy_agree"]:
            d["greedy"].append("%s: greedy agrees on %d lines, the record has greedy_agree %d"
                               % (s, agree, ev["greedy_agree"]))
    return {k: v[:MAX_LISTED] + (["... %d more" % (len(v) - MAX_LISTED)] if len(v) > MAX_LISTED else [])
            for k, v in d.items()}


def compare(ref, dut, tol_loss):
    """Two predictions files' example lines (ref, dut) of the same run and data, example by example: the same
    examples, identical verdicts, predicted strings and greedy verdicts, answer losses within tol_loss relative."""
    d = {k: [] for k in ("examples", "verdicts", "predicted", "greedy", "losses")}
    if len(ref) != len(dut):
        d["examples"].append("%d vs %d example lines" % (len(ref), len(dut)))
    for a, b in zip(ref, dut):
        where = "%s %s" % (a.get("set"), a.get("index"))
        if any(a.get(k) != b.get(k) for k in ("set", "index", "module", "question", "answer")):
            d["examples"].append("%s: a different example (%s %s)" % (where, b.get("set"), b.get("index")))
            continue
        if a["correct"] != b["correct"]:
            d["verdicts"].append("%s: correct %r vs %r" % (where, a["correct"], b["correct"]))
        if a["predicted"] != b["predicted"]:
            d["predicted"].append("%s: predicted %r vs %r (answer %r)"
                                  % (where, a["predicted"], b["predicted"], a["answer"]))
        if a.get("greedy_correct") != b.get("greedy_correct"):
            d["greedy"].append("%s: greedy_correct %r vs %r"
                               % (where, a.get("greedy_correct"), b.get("greedy_correct")))
        if not close(a["answer_loss"], b["answer_loss"], tol_loss):
            d["losses"].append("%s: answer_loss %.9g vs %.9g (rel %.2e > %.0e)"
                               % (where, a["answer_loss"], b["answer_loss"],
                                  abs(a["answer_loss"] - b["answer_loss"]) / abs(a["answer_loss"]), tol_loss))
    return {k: v[:MAX_LISTED] + (["... %d more" % (len(v) - MAX_LISTED)] if len(v) > MAX_LISTED else [])
            for k, v in d.items()}


def worst_loss_error(ref, dut):
    return max([abs(a["answer_loss"] - b["answer_loss"]) / abs(a["answer_loss"])
                for a, b in zip(ref, dut) if a["answer_loss"]] or [0.0])


def main(argv):
    if len(argv) != 4 or argv[1] != "validate":
        print(__doc__.strip().split("\n\n")[1])
        return 2
    header, lines, problems = load(argv[2])
    with open(argv[3]) as f:
        record = json.load(f)
    for p in problems:
        print("FAIL: parse: %s" % p)
    if header is None:
        return 1
    fails = len(problems)
    for check, ps in validate(header, lines, record).items():
        for p in ps:
            print("FAIL: %s: %s" % (check, p))
        fails += len(ps)
        if not ps:
            print("ok: %s" % check)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
