#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# bin/inspect end to end: checkpoints written independently (Python, from the documented state_dict names and shapes)
# load; the output holds logits, the loss terms and a gradient for every parameter; cross_entropy equals the CE
# recomputed from the logits under the loss mask; the dense gradients agree with finite differences of inspect's own
# objective; bad batches are refused with one line naming the field and leave no output; forged checkpoints (a header
# claiming 100,000 layers) are refused from the header in under a second and 64 MB; NaN or infinite weights are refused
# naming the tensor.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
[ -x "$PY" ] || { echo "SKIP: $PY (Debian python3) not installed"; exit 77; }
[ -x bin/inspect ] || { echo "FAIL: bin/inspect not built"; exit 1; }
tmp=$(mktemp -d /tmp/test_inspect.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

bin/inspect --help >/dev/null || { echo "FAIL: --help"; exit 1; }

"$PY" - "$tmp" <<'EOF' || exit 1
import json, math, os, random, struct, subprocess, sys, time

tmp = sys.argv[1]

def write_st(path, tensors, meta):
    header, blobs, off = {}, [], 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, (shape, vals) in tensors.items():
        b = struct.pack("<%df" % len(vals), *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

def read_st(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", (name, e["dtype"])
        a, b = e["data_offsets"]
        cnt = (b - a) // 4
        out[name] = (e["shape"], list(struct.unpack("<%df" % cnt, data[8 + n + a:8 + n + b])))
    return out, meta

def numel(shape):
    p = 1
    for s in shape:
        p *= s
    return p

def dense_tensors(c):
    C, H, D, F, V = c["d_model"], c["n_heads"], c["d_head"], c["d_ff"], c["n_tokens"]
    t = {"embedding.weight": [V, C]}
    for l in range(c["n_layers"]):
        p = "transformer.layers.%d." % l
        t.update({p + "attention.q.weight": [H * D, C], p + "attention.k.weight": [H * D, C],
                  p + "attention.v.weight": [H * D, C], p + "attention.o.weight": [C, H * D],
                  p + "ffn.linear1.weight": [F, C], p + "ffn.linear1.bias": [F],
                  p + "ffn.linear2.weight": [C, F], p + "ffn.linear2.bias": [C],
                  p + "ln1.weight": [C], p + "ln1.bias": [C], p + "ln2.weight": [C], p + "ln2.bias": [C]})
    t.update({"out_norm.weight": [C], "out_norm.bias": [C], "lm_head.weight": [V, C], "lm_head.bias": [V]})
    return t

def moeut_tensors(c):
    C, H, D, V = c["d_model"], c["n_heads"], c["d_head"], c["n_tokens"]
    EA, E, S = c["att_n_experts"], c["ff_n_experts"], c["ff_expert_size"]
    t = {"embedding.weight": [V, C]}
    for l in range(c["group_size"]):
        p = "transformer.layers.%d." % l
        t.update({p + "attention.q.weight": [H * D, C], p + "attention.k.weight": [H * D, C],
                  p + "attention.v": [H * EA, C, D], p + "attention.o": [H * EA, D, C],
                  p + "attention.sel_v": [H * EA, C], p + "attention.sel_o": [H * EA, C],
                  p + "ffn.keys": [E, C, S], p + "ffn.values": [E, S, C], p + "ffn.expert_sel": [E, C],
                  p + "ln1.weight": [C], p + "ln1.bias": [C], p + "ln2.weight": [C], p + "ln2.bias": [C]})
    t.update({"lm_head.weight": [V, C]})  # DM-math wrapper: no head bias, no final-norm affine
    return t

rng = random.Random(5)
def make(shapes, scale):
    return {n: (s, [rng.gauss(0, scale) + (1.0 if n.endswith("ln1.weight") or n.endswith("ln2.weight")
                                           or n == "out_norm.weight" else 0.0) for _ in range(numel(s))])
            for n, s in shapes.items()}

dense_cfg = {"arch": "dense", "n_tokens": 13, "d_model": 8, "n_layers": 2, "n_heads": 2, "d_head": 4, "d_ff": 10,
             "dropout": 0, "lm_head_bias": True, "out_norm_affine": True}
moeut_cfg = {"arch": "moeut", "n_tokens": 13, "d_model": 8, "n_layers": 4, "n_heads": 2, "d_head": 4,
             "ff_n_experts": 5, "ff_expert_size": 3, "ff_k": 2, "att_n_experts": 3, "att_k": 2, "group_size": 2,
             "entropy_reg": 0.01, "att_entropy_reg": 0.001, "ff_expert_dropout": 0, "att_expert_dropout": 0,
             "dropout": 0, "lm_head_bias": False, "out_norm_affine": False}

batch = {"inputs": [[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 0, 0]],
         "targets": [[1, 4, 1, 5, 9, 2], [6, 5, 3, -1, -1, -1]],
         "loss_mask": [[0, 0, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]}
bpath = os.path.join(tmp, "batch.json")
json.dump(batch, open(bpath, "w"))

def inspect(w, out, b=bpath, expect_ok=True):
    r = subprocess.run(["bin/inspect", "--weights", w, "--batch", b, "--out", out], capture_output=True, text=True)
    if expect_ok and r.returncode != 0:
        print("FAIL: inspect exited %d: %s" % (r.returncode, r.stderr.strip()))
        sys.exit(1)
    return r

def objective(o, cfg):
    j = o["cross_entropy"][1][0]
    if cfg["arch"] == "moeut":
        j += cfg["entropy_reg"] * o["reg_ffn"][1][0] + cfg["att_entropy_reg"] * o["reg_att"][1][0]
    return j

fails = []
for cfg, shapes in ((dense_cfg, dense_tensors(dense_cfg)), (moeut_cfg, moeut_tensors(moeut_cfg))):
    arch = cfg["arch"]
    params = make(shapes, 0.4)
    w = os.path.join(tmp, arch + ".safetensors")
    write_st(w, params, {"config": json.dumps(cfg), "format": "pt"})
    out = os.path.join(tmp, arch + ".out.safetensors")
    inspect(w, out)
    o, meta = read_st(out)
    V = cfg["n_tokens"]
    if o["logits"][0] != [2, 6, V]:
        fails.append("%s: logits shape %s" % (arch, o["logits"][0]))
    for s in ("cross_entropy", "reg_ffn", "reg_att"):
        if o[s][0] != []:
            fails.append("%s: %s shape %s, expected []" % (arch, s, o[s][0]))
    for n, s in shapes.items():
        g = o.get("grad." + n)
        if g is None or g[0] != s:
            fails.append("%s: grad.%s missing or wrong shape" % (arch, n))
        elif not any(abs(x) > 0 for x in g[1]):
            fails.append("%s: grad.%s is all zero" % (arch, n))
    extra = set(o) - {"grad." + n for n in shapes} - {"logits", "cross_entropy", "reg_ffn", "reg_att"}
    if extra:
        fails.append("%s: unexpected output tensors %s" % (arch, sorted(extra)))
    # cross_entropy = mean over (target >= 0 and loss_mask) of -log softmax(logits)[target]
    lg, tot, cnt = o["logits"][1], 0.0, 0
    for b in range(2):
        for t in range(6):
            tg = batch["targets"][b][t]
            if tg < 0 or not batch["loss_mask"][b][t]:
                continue
            row = lg[(b * 6 + t) * V:(b * 6 + t + 1) * V]
            mx = max(row)
            tot += mx + math.log(sum(math.exp(x - mx) for x in row)) - row[tg]
            cnt += 1
    ce = o["cross_entropy"][1][0]
    if cnt != 7 or meta.get("n_counted") != "7" or abs(ce - tot / cnt) > 1e-5 * abs(ce):
        fails.append("%s: cross_entropy %.7g vs recomputed %.7g (%d counted, meta %s)" %
                     (arch, ce, tot / cnt, cnt, meta.get("n_counted")))
    if arch == "dense":
        if o["reg_ffn"][1][0] != 0 or o["reg_att"][1][0] != 0:
            fails.append("dense: nonzero regularizer")
        # Finite differences of inspect's own objective (f32 noise ~1e-7/h: Richardson steps 4e-3/2e-3, the largest
        # gradient entries, 2% tolerance).
        for n in ("transformer.layers.0.attention.q.weight", "transformer.layers.1.ffn.linear1.bias",
                  "embedding.weight", "out_norm.bias", "transformer.layers.0.ln1.weight"):
            g = o["grad." + n][1]
            i = max(range(len(g)), key=lambda k: abs(g[k]))
            def central(h):
                js = []
                for sgn in (1, -1):
                    p2 = {k: (s, list(v)) for k, (s, v) in params.items()}
                    p2[n][1][i] += sgn * h
                    w2 = os.path.join(tmp, "pert.safetensors")
                    write_st(w2, p2, {"config": json.dumps(cfg), "format": "pt"})
                    inspect(w2, os.path.join(tmp, "pert.out"))
                    js.append(objective(read_st(os.path.join(tmp, "pert.out"))[0], cfg))
                return (js[0] - js[1]) / (2 * h)
            fd = (4 * central(2e-3) - central(4e-3)) / 3  # Richardson: O(h^4) truncation
            if abs(fd - g[i]) > 2e-2 * abs(g[i]) + 1e-4:
                fails.append("dense: grad.%s[%d] = %.6g but finite difference %.6g" % (n, i, g[i], fd))
    else:
        E, EA, Gs = cfg["ff_n_experts"], cfg["att_n_experts"], cfg["group_size"]
        rf, ra = o["reg_ffn"][1][0], o["reg_att"][1][0]
        # each module's entropy term lies in [-log E, 0] (attention: o and v terms, so twice)
        if not (-Gs * math.log(E) - 1e-5 <= rf < 0) or not (-2 * Gs * math.log(EA) - 1e-5 <= ra < 0):
            fails.append("moeut: regularizers out of range: reg_ffn %g reg_att %g" % (rf, ra))

# Bad batches: one line naming the field, non-zero exit, no output file.
w = os.path.join(tmp, "dense.safetensors")
bad = [({"inputs": [[1, 2], [3]], "targets": [[1, 2], [3, 4]]}, "inputs[1]"),
       ({"inputs": [[1, 2]], "targets": [[1, 13]]}, "targets[0][1]"),
       ({"inputs": [[1, -1]], "targets": [[1, 2]]}, "inputs[0][1]"),
       ({"inputs": [[1, 2]], "targets": [[1, 2]], "loss_mask": [[1, 2]]}, "loss_mask[0][1]"),
       ({"inputs": [[1, 2]], "targets": [[1, 2]], "mask": [[1, 1]]}, "mask"),
       ({"inputs": [[1, "a"]], "targets": [[1, 2]]}, "inputs[0][1]"),
       ({"inputs": [[1, 2.5]], "targets": [[1, 2]]}, "inputs[0][1]"),
       ({"inputs": [[1, 2]]}, "targets"),
       ({"inputs": [[1, 2]], "targets": [[1, 2], [2, 3]]}, "targets"),
       ({"inputs": [[1, 2]], "targets": [[-1, -1]]}, "counted")]
for k, (b, frag) in enumerate(bad):
    bp = os.path.join(tmp, "bad%d.json" % k)
    json.dump(b, open(bp, "w"))
    out = os.path.join(tmp, "bad.out")
    r = inspect(w, out, bp, expect_ok=False)
    err = r.stderr.strip()
    if r.returncode == 0 or frag not in err or len(err.splitlines()) != 1 or os.path.exists(out):
        fails.append("bad batch %d (%s): rc %d, stderr %r" % (k, frag, r.returncode, err))
# A checkpoint missing a tensor is refused, naming it.
p = make(dense_tensors(dense_cfg), 0.4)
del p["transformer.layers.1.ln2.bias"]
write_st(os.path.join(tmp, "short.safetensors"), p, {"config": json.dumps(dense_cfg), "format": "pt"})
r = inspect(os.path.join(tmp, "short.safetensors"), os.path.join(tmp, "x.out"), expect_ok=False)
if r.returncode == 0 or "transformer.layers.1.ln2.bias" not in r.stderr:
    fails.append("missing tensor not reported: %r" % r.stderr)


# Forged checkpoints: a header whose config claims 100,000 layers is refused from the header alone, before the model
# it describes is built: in under a second and 64 MB, with one line, no output. Measured per child (wait4).
def timed_inspect(w, out):
    t0 = time.monotonic()
    p = subprocess.Popen(["bin/inspect", "--weights", w, "--batch", bpath, "--out", out],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    secs = time.monotonic() - t0
    err = p.stderr.read().strip()
    p.stdout.close()
    p.stderr.close()
    return os.waitstatus_to_exitcode(status), err, secs, ru.ru_maxrss  # ru_maxrss: KiB

def write_bf16_filler(path, tensors, meta, filler_values):
    """write_st plus one BF16 tensor "filler" of filler_values zeros (bulk for the file, cheap to make)."""
    write_st(path, tensors, meta)
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    end = max((e["data_offsets"][1] for k, e in header.items() if k != "__metadata__"), default=0)
    header["filler"] = {"dtype": "BF16", "shape": [filler_values], "data_offsets": [end, end + 2 * filler_values]}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data[8 + n:] + bytes(2 * filler_values))

forged = [
    # the real 2-layer model's tensors under a config of 100,000 layers, bulked up to 3.7 MB
    ("claims 100000 layers", dict(dense_cfg, n_layers=100000), make(dense_tensors(dense_cfg), 0.4), 1800000,
     "__metadata__.config describes a dense model of"),
    # tiny layers whose 3.1 M parameters the filler's values could hold: the tensor list itself is checked
    ("claims 100000 tiny layers", dict(dense_cfg, d_model=2, n_heads=1, d_head=2, d_ff=1, n_layers=100000), {},
     3200000, "embedding.weight: missing tensor"),
]
for label, cfg, tensors, filler, want in forged:
    w = os.path.join(tmp, "forged.safetensors")
    write_bf16_filler(w, tensors, {"config": json.dumps(cfg), "format": "pt"}, filler)
    size = os.path.getsize(w)
    out = os.path.join(tmp, "forged.out")
    rc, err, secs, rss_kib = timed_inspect(w, out)
    print("forged checkpoint (%s, %.1f MB): exit %d in %.3f s, max RSS %.1f MiB: %s" %
          (label, size / 1e6, rc, secs, rss_kib / 1024, err))
    if rc == 0 or want not in err or len(err.splitlines()) != 1 or os.path.exists(out):
        fails.append("forged checkpoint (%s): rc %d, stderr %r" % (label, rc, err))
    if secs >= 1.0 or rss_kib >= 64 * 1024:
        fails.append("forged checkpoint (%s): %.3f s and %d KiB, over 1 s or 64 MiB" % (label, secs, rss_kib))

# Non-finite weights: refused naming the tensor and the element, one line, no output.
for bad_value, word in ((float("nan"), "NaN"), (float("inf"), "infinite")):
    p = make(dense_tensors(dense_cfg), 0.4)
    p["transformer.layers.1.ffn.linear1.bias"][1][3] = bad_value
    w = os.path.join(tmp, "nonfinite.safetensors")
    write_st(w, p, {"config": json.dumps(dense_cfg), "format": "pt"})
    out = os.path.join(tmp, "nonfinite.out")
    r = inspect(w, out, expect_ok=False)
    err = r.stderr.strip()
    want = "%s: tensor transformer.layers.1.ffn.linear1.bias: element 3 is %s" % (w, word)
    if r.returncode == 0 or want not in err or len(err.splitlines()) != 1 or os.path.exists(out):
        fails.append("%s weight: rc %d, stderr %r" % (word, r.returncode, err))

for f in fails:
    print("FAIL:", f)
if fails:
    sys.exit(1)
print("inspect: all checks passed")
EOF
