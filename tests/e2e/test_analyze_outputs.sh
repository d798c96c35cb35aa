#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# bin/analyze's outputs and bin/evaluate/analyze's refusal of non-finite weights, on a short MoEUT run:
#  - analyze writes its heat maps, depth_prompts.json (analyze.eval_prompts 4) and analysis.json as ONE set (as
#    evaluate does): under strace, every output's temporary file is created and fsynced before the first rename into
#    place, so an analyze interrupted or failing at any point leaves the earlier complete set, never new maps beside
#    an old record; no temporary is left; the 4 prompts' verdicts agree with evaluate's predictions.jsonl;
#  - weights holding a NaN (written into model.safetensors) are refused by evaluate and analyze with one line naming
#    the tensor and the element, non-zero exit, and the earlier outputs untouched.
source "$(dirname "$0")/train_common.sh"
for b in evaluate analyze; do [ -x "bin/$b" ] || fail "bin/$b missing (run make first)"; done
command -v strace >/dev/null || fail "strace not installed (mk/deps.sh test installs it)"
train_data "$tmp/data"
train_config "$tmp/run.json" moeut answer 4
sed -i 's/"analyze": {"enabled": false}/"analyze": {"enabled": true, "eval_prompts": 4}/' "$tmp/run.json"
bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$tmp/run" >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; fail "train"; }

strace -f -qq -o "$tmp/trace" -e trace=openat,fsync,fdatasync,rename,renameat,renameat2 \
  bin/analyze --run "$tmp/run" --config "$tmp/run.json" --data "$tmp/data" --out "$tmp/run/analysis.json" \
  >"$tmp/an.log" 2>&1 || { cat "$tmp/an.log"; fail "analyze"; }
python3 - "$tmp/trace" "$tmp/run" <<'PY' || fail "analyze does not commit its outputs as one set"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
run = sys.argv[2]
outputs = re.compile(re.escape(run) + r"/(depth_\d+\.svg|depth_prompts\.json|analysis\.json)")
creates = [i for i, l in enumerate(lines) if "openat(" in l and "O_CREAT" in l and outputs.search(l) and ".tmp." in l]
renames = [i for i, l in enumerate(lines) if re.match(r"\d+\s+rename", l) and outputs.search(l.split(",")[-1] if "renameat" in l else l)]
fsyncs = [i for i, l in enumerate(lines) if re.match(r"\d+\s+f(data)?sync", l)]
assert len(creates) == 6, ("expected 6 temporaries (4 maps, depth_prompts.json, analysis.json)", len(creates))
assert len(renames) == 6, ("expected 6 renames into place", len(renames), [lines[i] for i in renames])
assert max(creates) < min(renames), "a file was renamed into place before every temporary of the set existed"
assert sum(1 for i in fsyncs if max(creates) < i < min(renames)) >= 6, "the set is not fsynced before the renames"
assert "analysis.json" in lines[max(renames)], "analysis.json is not renamed last"
print("ok: 6 temporaries created and fsynced, then 6 renames, analysis.json last")
PY
for k in 1 2 3 4; do [ -s "$tmp/run/depth_$k.svg" ] || fail "depth_$k.svg missing"; done
[ -s "$tmp/run/depth_prompts.json" ] || fail "depth_prompts.json missing"
ls "$tmp/run" | grep -q '\.tmp\.' && fail "a temporary file was left: $(ls "$tmp/run")"
echo "ok: analyze commits its 4 maps, depth_prompts.json and analysis.json as one set, no temporary left"

# A NaN in one weight: both stages refuse, naming tensor and element; earlier outputs untouched.
bin/evaluate --run "$tmp/run" --config "$tmp/run.json" --data "$tmp/data" --out "$tmp/run/result.json" \
  >"$tmp/ev.log" 2>&1 || { cat "$tmp/ev.log"; fail "evaluate"; }
# One definition of "answered correctly": each analyzed prompt's verdict is evaluate's for that example.
python3 - "$tmp/run" <<'PY' || fail "depth_prompts.json's verdicts disagree with predictions.jsonl"
import json, sys
run = sys.argv[1]
pred = {(p["set"], p["index"]): p["correct"] for p in map(json.loads, open(run + "/predictions.jsonl"))}
prompts = json.load(open(run + "/depth_prompts.json"))["prompts"]
assert len(prompts) == 4, len(prompts)
for p in prompts:
    assert pred[(p["set"], p["index"])] == p["correct"], p
print("ok: the 4 analyzed prompts' verdicts are evaluate's")
PY
before=$(cat "$tmp/run/result.json" "$tmp/run/analysis.json" "$tmp/run/depth_prompts.json" "$tmp/run/depth_1.svg" | sha256sum)
python3 - "$tmp/run/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
d = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n])
name = sorted(k for k in h if k != "__metadata__")[0]
t = h[name]
assert t["dtype"] == "F32", t
off = 8 + n + t["data_offsets"][0] + 4 * 3  # element 3 of that tensor
d[off:off + 4] = struct.pack("<f", float("nan"))
open(p, "wb").write(d)
print(name)
PY
for stage in evaluate analyze; do
  rc=0
  bin/$stage --run "$tmp/run" --config "$tmp/run.json" --data "$tmp/data" --out "$tmp/run/x_$stage.json" \
    >"$tmp/nan.log" 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "$stage accepted weights holding a NaN"
  grep -q "model.safetensors: tensor .*: element 3 is NaN" "$tmp/nan.log" || { cat "$tmp/nan.log"; fail "$stage: no line naming the tensor and element"; }
  [ "$(grep -c 'error:' "$tmp/nan.log")" = 1 ] || { cat "$tmp/nan.log"; fail "$stage: not one error line"; }
  [ ! -e "$tmp/run/x_$stage.json" ] || fail "$stage wrote an output from NaN weights"
done
[ "$(cat "$tmp/run/result.json" "$tmp/run/analysis.json" "$tmp/run/depth_prompts.json" "$tmp/run/depth_1.svg" | sha256sum)" = "$before" ] \
  || fail "the earlier outputs changed"
echo "ok: evaluate and analyze refuse NaN weights naming tensor and element: $(grep -m1 error: "$tmp/nan.log")"
echo "PASS"
