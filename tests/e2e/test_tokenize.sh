#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# bin/tokenize end to end on the embedded sample: outputs, byte-identical reruns, one-line errors that leave nothing
# behind, and (when Debian's python3-sentencepiece is installed) a cross-check of the vocabulary and of every shard
# example against SentencePiece trained the reference way.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
[ -x bin/tokenize ] || { echo "bin/tokenize missing (run make first)"; exit 1; }
[ -x "$PY" ] || { echo "SKIP: $PY not found (needed to read the JSON outputs)"; exit 77; }
tmp=$(mktemp -d /tmp/test_tokenize_e2e.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# ---- raw directory: bin/fetch when built, else tar + a manifest in fetch's format ----
if [ -x bin/fetch ]; then
  bin/fetch --source embedded --out "$tmp/raw" --filter 'arithmetic__.*' --tokenizer-corpus-pairs 10000 2>"$tmp/fetch.log" \
    || { cat "$tmp/fetch.log"; echo "bin/fetch failed"; exit 1; }
else
  mkdir -p "$tmp/x" "$tmp/raw/tokenizer_corpus"
  tar xzf datasets/dm_math_sample.tar.gz -C "$tmp/x"
  for s in train-easy train-medium train-hard interpolate extrapolate; do
    mkdir -p "$tmp/raw/mathematics_dataset-v1.0/$s"
    cp "$tmp/x/mathematics_dataset-v1.0/$s"/arithmetic__*.txt "$tmp/raw/mathematics_dataset-v1.0/$s/"
  done
  for f in "$tmp/x/mathematics_dataset-v1.0/train-easy"/*.txt; do head -n 20000 "$f" >"$tmp/raw/tokenizer_corpus/$(basename "$f")"; done
  "$PY" - "$tmp/raw" <<'EOF'
import hashlib, json, os, sys
raw = sys.argv[1]
def entry(path, **kw):
    data = open(path, "rb").read()
    return dict(kw, pairs=data.count(b"\n") // 2, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
files = []
root = os.path.join(raw, "mathematics_dataset-v1.0")
for split in sorted(os.listdir(root)):
    for f in sorted(os.listdir(os.path.join(root, split))):
        files.append(entry(os.path.join(root, split, f), split=split, file=f))
corpus = [entry(os.path.join(raw, "tokenizer_corpus", f), file=f) for f in sorted(os.listdir(os.path.join(raw, "tokenizer_corpus")))]
json.dump({"schema": "dm-math-raw", "schema_version": 1, "source": "embedded", "files": files, "tokenizer_corpus": corpus},
          open(os.path.join(raw, "manifest.json"), "w"), indent=1)
EOF
fi

cat >"$tmp/data.json" <<'EOF'
{
  "fetch": {"source": "embedded", "filter": "arithmetic__.*", "tokenizer_corpus_pairs": 10000},
  "tokenize": {"vocab_size": 512, "max_piece_length": 16, "tokenizer_pairs_per_file": 10000, "eval_examples": 1000,
               "eval_shuffle_seed": 123, "train_shuffle_seed": 1, "exclude_tokenizer_pattern": "probability__swr_.*"}
}
EOF

bin/tokenize --help >/dev/null
outputs="tokenizer.json train.shard interpolate.shard extrapolate.shard tokenize_manifest.json"

# ---- two runs, byte-identical ----
bin/tokenize --raw "$tmp/raw" --config "$tmp/data.json" --out "$tmp/out1" 2>"$tmp/run1.log" || { cat "$tmp/run1.log"; exit 1; }
bin/tokenize --raw "$tmp/raw" --config "$tmp/data.json" --out "$tmp/out2" --quiet
for f in $outputs; do
  cmp "$tmp/out1/$f" "$tmp/out2/$f" || { echo "FAIL: $f differs between two identical runs"; exit 1; }
done
[ "$(ls -A "$tmp/out1" | wc -l)" = 5 ] || { ls -la "$tmp/out1"; echo "FAIL: unexpected files in the output"; exit 1; }
echo "ok: two runs give byte-identical outputs"

# ---- staging directories of killed runs (tokenize has no signal handler: SIGINT/SIGTERM/SIGKILL leave
# OUT/.tokenize.tmp.<pid>, with the full dataset gigabytes of shards) are removed by the next run; a live one stays ----
dead=$(sh -c 'echo $$')
mkdir -p "$tmp/out2/.tokenize.tmp.$dead" "$tmp/out2/.tokenize.tmp.$$"
echo x >"$tmp/out2/.tokenize.tmp.$dead/train.shard.tmp.$dead"
bin/tokenize --raw "$tmp/raw" --config "$tmp/data.json" --out "$tmp/out2" 2>"$tmp/stale.log" \
  || { cat "$tmp/stale.log"; echo "FAIL: tokenize over stale staging directories"; exit 1; }
[ ! -e "$tmp/out2/.tokenize.tmp.$dead" ] || { echo "FAIL: the staging directory of a dead run was left"; exit 1; }
[ -d "$tmp/out2/.tokenize.tmp.$$" ] || { echo "FAIL: the staging directory of a live process was removed"; exit 1; }
grep -q "removed 1 stale staging directory" "$tmp/stale.log" || { cat "$tmp/stale.log"; echo "FAIL: not logged"; exit 1; }
rmdir "$tmp/out2/.tokenize.tmp.$$"
for f in $outputs; do cmp "$tmp/out1/$f" "$tmp/out2/$f" || { echo "FAIL: $f differs after the cleanup run"; exit 1; }; done
echo "ok: stale staging directories of killed runs are removed"

# ---- the manifest and the shards as a reader sees them ----
"$PY" - "$tmp/out1" <<'EOF'
import hashlib, json, struct, sys
out = sys.argv[1]
m = json.load(open(out + "/tokenize_manifest.json"))
tok = json.load(open(out + "/tokenizer.json"))
pieces = [p["piece"] for p in tok["pieces"]]
assert len(pieces) == 512 and pieces[:3] == ["<unk>", "<s>", "</s>"], pieces[:3]
for name, sha in m["outputs"].items():
    assert hashlib.sha256(open(out + "/" + name, "rb").read()).hexdigest() == sha, name
want = {"train": 13500, "interpolate": 1000, "extrapolate": 1000}
for split, n in want.items():
    s = m["splits"][split]
    assert s["n_examples"] == n, (split, s["n_examples"])
    data = open(out + "/" + split + ".shard", "rb").read()
    assert data[:8] == b"DMSHARD1"
    (j,) = struct.unpack_from("<I", data, 12)
    header = json.loads(data[16:16 + j])
    assert header["n_examples"] == n and header["tokenizer_sha256"] == m["tokenizer"]["sha256"]
    body = 16 + (j + 7) // 8 * 8
    toks = struct.unpack_from("<%dH" % header["n_tokens"], data, body + 24 * n)
    for i in range(n):
        q0, ql, al, mod, res = struct.unpack_from("<QIIII", data, body + 24 * i)
        assert pieces[toks[q0]] == "\u2581Q" and pieces[toks[q0 + 1]] == ":", (split, i)
        assert pieces[toks[q0 + ql]].startswith("\u2581"), (split, i)   # answers start with a ▁-piece
        assert all(len(pieces[t]) == 1 for t in toks[q0:q0 + ql + al] if any(c.isdigit() for c in pieces[t]))
    print("ok: %s: %d examples, %.2f tokens/example" % (split, n, s["mean_tokens_per_example"]))
mean = m["splits"]["train"]["mean_tokens_per_example"]
assert 25 < mean < 50, mean
EOF

# ---- bad input: one error line naming file:line, exit 1, nothing written ----
cp -r "$tmp/raw" "$tmp/raw_bad"
bad="$tmp/raw_bad/mathematics_dataset-v1.0/train-easy/arithmetic__add_or_sub.txt"
echo "What is 1 + 1?" >>"$bad"
set +e
bin/tokenize --raw "$tmp/raw_bad" --config "$tmp/data.json" --out "$tmp/out_bad" 2>"$tmp/bad.log"
rc=$?
set -e
[ "$rc" = 1 ] || { cat "$tmp/bad.log"; echo "FAIL: exit $rc on an odd line count (want 1)"; exit 1; }
grep -q "$bad:1001: odd number of lines" "$tmp/bad.log" || { cat "$tmp/bad.log"; echo "FAIL: message lacks file:line"; exit 1; }
[ "$(grep -c 'error' "$tmp/bad.log")" = 1 ] || { cat "$tmp/bad.log"; echo "FAIL: not exactly one error line"; exit 1; }
[ ! -e "$tmp/out_bad" ] || [ -z "$(ls -A "$tmp/out_bad")" ] || { ls -la "$tmp/out_bad"; echo "FAIL: output written"; exit 1; }
# The same bad input over a previous run's outputs leaves them untouched.
cp -r "$tmp/out1" "$tmp/out_keep"
set +e; bin/tokenize --raw "$tmp/raw_bad" --config "$tmp/data.json" --out "$tmp/out_keep" 2>/dev/null; rc=$?; set -e
[ "$rc" = 1 ] || { echo "FAIL: exit $rc"; exit 1; }
for f in $outputs; do cmp "$tmp/out1/$f" "$tmp/out_keep/$f" || { echo "FAIL: $f changed by a failed run"; exit 1; }; done
[ "$(ls -A "$tmp/out_keep" | wc -l)" = 5 ] || { ls -la "$tmp/out_keep"; echo "FAIL: leftovers after a failed run"; exit 1; }
echo "ok: bad input fails with one line naming file:line and writes nothing"

# Unknown key in the tokenize section.
sed 's/"eval_examples"/"eval_exampels"/' "$tmp/data.json" >"$tmp/bad.json"
set +e; bin/tokenize --raw "$tmp/raw" --config "$tmp/bad.json" --out "$tmp/out_cfg" 2>"$tmp/cfg.log"; rc=$?; set -e
[ "$rc" = 1 ] && grep -q "tokenize.eval_exampels" "$tmp/cfg.log" || { cat "$tmp/cfg.log"; echo "FAIL: unknown config key accepted (exit $rc)"; exit 1; }
echo "ok: unknown config key rejected"

# ---- optional cross-check against SentencePiece (Debian python3-sentencepiece) ----
if "$PY" -c "import sentencepiece" 2>/dev/null; then
  "$PY" - "$tmp/raw" "$tmp/out1" "$tmp" <<'EOF'
import glob, json, os, re, struct, sys
import sentencepiece as spm
raw, out, tmp = sys.argv[1:4]
def spaced(s): return re.sub(r"\s+", " ", re.sub(r"([^a-zA-Z0-9\s])", r" \1 ", s)).strip()
sents = []
for f in sorted(glob.glob(raw + "/tokenizer_corpus/*.txt")):
    if re.fullmatch(r"probability__swr_.*", os.path.basename(f)[:-4]): continue
    lines = open(f).read().split("\n")[:-1][:20000]
    sents += ["Q: %s A: %s " % (spaced(lines[i]), spaced(lines[i + 1])) for i in range(0, len(lines), 2)]
spm.SentencePieceTrainer.train(sentence_iterator=iter(sents), model_prefix=tmp + "/spm", vocab_size=512,
                               split_digits=True, model_type="bpe", minloglevel=2)
sp = spm.SentencePieceProcessor(model_file=tmp + "/spm.model")
ref = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
ours = [p["piece"] for p in json.load(open(out + "/tokenizer.json"))["pieces"]]
same = sum(a == b for a, b in zip(ref, ours))
assert same == 512, "only %d of 512 pieces equal SentencePiece's at the same id" % same
checked = 0
for split in ("train", "interpolate", "extrapolate"):
    data = open("%s/%s.shard" % (out, split), "rb").read()
    (j,) = struct.unpack_from("<I", data, 12)
    h = json.loads(data[16:16 + j]); body = 16 + (j + 7) // 8 * 8; n = h["n_examples"]
    toks = struct.unpack_from("<%dH" % h["n_tokens"], data, body + 24 * n)
    for i in range(n):
        q0, ql, al, _, _ = struct.unpack_from("<QIIII", data, body + 24 * i)
        for a, b in ((q0, q0 + ql), (q0 + ql, q0 + ql + al)):
            ids = list(toks[a:b])
            text = "".join(ours[t] for t in ids).replace("\u2581", " ")
            assert sp.encode(text) == ids, (split, i, text)
            checked += 1
print("ok: SentencePiece 0.1.97 cross-check: 512/512 pieces, %d encoded segments identical" % checked)
EOF
else
  echo "note: python3-sentencepiece not installed; SentencePiece cross-check not run"
fi
echo "PASS"
