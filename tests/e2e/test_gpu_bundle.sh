#!/usr/bin/env bash
# The GPU checklist's plan for a GPU machine without the build libraries, rehearsed without a GPU
# (tests/GPU_CHECKLIST.md): `make gpu-bundle` gives a bundle under its size limit (44 MiB, without the CUDA and NCCL
# libraries the GPU machine has), and on a bare copy of the tree (no .git, no build/, no bin/, no data/; every tracked
# file with a fresh time stamp, as a job that copies the tree anew may give them) `source mk/gpu/env.sh` +
# `mk/gpu/run.sh small` run make reproduce EXPERIMENT=small on the prebuilt
# programs and the bundled data: nothing compiled, fetched or tokenized; stopped at its time limit it exits 3 and names
# the stages left; called again it continues and completes; a third call after fresh time stamps runs nothing; the
# results tarball holds the records and the report and no checkpoint. Here with --backend cpu and a few steps (the GPU
# run is the same command with the defaults). Skips (77) where the build has no CUDA (the bundle needs nvcc's build).
source "$(dirname "$0")/train_common.sh" # set -euo pipefail, cd to the root, bin/ checked, $tmp (KEEP_TMP), fail
ldd bin/train | grep libcudart >/dev/null || { echo "SKIP: bin/train was built without CUDA (no nvcc): no GPU bundle to test"; exit 77; }

# 1. The bundle: within the size limit, no CUDA runtime, cuBLAS or NCCL inside, the small experiment's data in it.
mk/gpu/bundle.sh >"$tmp/bundle.log" 2>&1 || { cat "$tmp/bundle.log"; fail "make gpu-bundle failed"; }
size=$(stat -c %s build/gpu-bundle.tar.gz)
[ "$size" -le $((44 * 1048576)) ] || fail "build/gpu-bundle.tar.gz is $size bytes, over 44 MiB"
tar tzf build/gpu-bundle.tar.gz >"$tmp/bundle.list"
! grep -E 'lib/lib(cudart|cublas|nccl)' "$tmp/bundle.list" || fail "the bundle carries a CUDA or NCCL library"
for f in gpu-bundle/bin/train gpu-bundle/tests/cuda_model_vs_cpu gpu-bundle/bench/bench_train_step \
         gpu-bundle/data-small/train.shard gpu-bundle/data-small/tokenize_manifest.json gpu-bundle/data-small/raw/fetch.stamp \
         gpu-bundle/tools/make gpu-bundle/VERSION gpu-bundle/CUDA_RUNTIME; do
  grep -qx "$f" "$tmp/bundle.list" || fail "the bundle lacks $f"
done
cuda_major=$(ldd bin/train | sed -nE 's/.*libcudart\.so\.([0-9]+).*/\1/p' | head -n 1)
[ "$(tar xzOf build/gpu-bundle.tar.gz gpu-bundle/CUDA_RUNTIME)" = "$cuda_major" ] ||
  fail "the bundle's CUDA_RUNTIME is not the major version of bin/train's libcudart ($cuda_major)"
echo "ok: bundle $((size / 1048576)) MiB with programs, small data and make; no CUDA/NCCL libraries"

# 2. A bare copy of the tree, as a job copies it to the GPU machine, plus the bundle.
sim=$tmp/tree
mkdir -p "$sim/build"
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$sim"
cp build/gpu-bundle.tar.gz "$sim/build/"
cd "$sim"
source mk/gpu/env.sh >"$tmp/env.log" 2>&1 || { cat "$tmp/env.log"; fail "source mk/gpu/env.sh failed"; }
[ "${GPU_PREBUILT:-}" = 1 ] || fail "gpu_env.sh did not export GPU_PREBUILT=1"
[ -x bin/train ] && [ -f data/small/train.shard ] || fail "gpu_env.sh did not place bin/ and data/small"
cmp -s "$OLDPWD/data/small/train.shard" data/small/train.shard || fail "data/small/train.shard differs from the bundle's source"

# A stage missing from bin/ is one clear error, not an attempt to build it.
mv bin/report bin/report.away
if make all >"$tmp/missing.log" 2>&1; then fail "make all with bin/report missing succeeded under GPU_PREBUILT=1"; fi
grep -q "GPU_PREBUILT=1: bin/report missing" "$tmp/missing.log" || { cat "$tmp/missing.log"; fail "no clear error for a missing stage"; }
mv bin/report.away bin/report
echo "ok: gpu_env.sh placed the programs and data; a missing stage is refused by name"

# 3. The small experiment: two runs, a few CPU steps of the real 14.6M-parameter models, two stages at a time
#    (--jobs 2, as mk/gpu/session.sh runs four), stopped at a time limit (SIGTERM: every training saves a checkpoint).
sets="train.steps=40 train.batch_size=2 train.context=64 train.precision=fp32 train.warmup=1 train.log_every=1"
sets="$sets train.checkpoint_every=2 train.evaluate_every=0 evaluate.max_examples_per_set=10 evaluate.greedy_check_examples=2"
small() { OUT=$tmp/out mk/gpu/run.sh small --backend cpu --runs "dense_qa moeut_answer" --set "$sets" "$@"; }
mkdir -p "$tmp/out"
# The first call must stop inside training, after dense_qa's first checkpoint: 8 s does that on an idle machine; a
# busy one may not reach a checkpoint in 8 s, so the limit doubles (up to 64 s) until it has one. Each call is
# checked to stop at its limit with exit 3, and any later call continues from where the earlier ones stopped.
rc=0
for limit in 8 16 32 64; do
  rc=0
  small --limit $limit --jobs 2 >"$tmp/call1.log" 2>&1 || rc=$?
  [ $rc = 3 ] || { tail -n 20 "$tmp/call1.log"; fail "call 1 ($limit s limit) exited $rc, expected 3 (incomplete)"; }
  [ -f runs/small/dense_qa/state.json ] && break
  echo "note: call 1 stopped at its $limit s limit before dense_qa's first checkpoint (a busy machine): limit doubled"
done
[ -f runs/small/dense_qa/state.json ] || fail "no checkpoint of dense_qa after call 1's limits (8-64 s)"
grep -q "^small: stages left: .*report" "$tmp/call1.log" || { tail -n 5 "$tmp/call1.log"; fail "call 1 names no stages left"; }
grep -q "^small: incomplete" "$tmp/call1.log" || fail "call 1 did not say it is incomplete"
echo "ok: call 1 stopped at its limit: $(grep '^small: stages left' "$tmp/call1.log")"

# The next job's copy of the tree: every tracked file gets a fresh time stamp.
git -C "$OLDPWD" ls-files -z | (cd "$sim" && xargs -0 touch)
small --limit 300 --jobs 2 >"$tmp/call2.log" 2>&1 || { tail -n 30 "$tmp/call2.log"; fail "call 2 failed"; }
grep -q "^small: complete" "$tmp/call2.log" && grep -q "^small: stages left: none" "$tmp/call2.log" ||
  fail "call 2 did not complete"
grep -q "train: resumed runs/small/dense_qa at step" "$tmp/call2.log" || fail "call 2 did not resume dense_qa's checkpoint"
cat "$tmp/call1.log" "$tmp/call2.log" >"$tmp/calls.log"
! grep -E "^  (CC|NVCC|LD|AR) |^bin/fetch |^bin/tokenize |deps: installing" "$tmp/calls.log" ||
  fail "the calls built, fetched or tokenized something"
for r in dense_qa moeut_answer; do
  [ "$(jq .training.steps "runs/small/$r/result.json")" = 40 ] || fail "runs/small/$r/result.json is not of 40 steps"
done

git -C "$OLDPWD" ls-files -z | (cd "$sim" && xargs -0 touch)
small --limit 300 >"$tmp/call3.log" 2>&1 || { tail -n 20 "$tmp/call3.log"; fail "call 3 failed"; }
! grep -E "^\[[0-9]+/[0-9]+\]" "$tmp/call3.log" || fail "call 3 ran a stage although everything was done"
echo "ok: call 2 resumed and completed, call 3 (fresh time stamps) ran nothing"

# 4. What comes back: the records and the report, no checkpoint, well under 16 MiB (results are copied back from the GPU machine).
tar tzf "$tmp/out/small-results.tar.gz" >"$tmp/results.list"
for f in runs/small/dense_qa/result.json runs/small/moeut_answer/analysis.json runs/small/moeut_answer/predictions.jsonl \
         runs/small/dense_qa/metrics.jsonl reports/small/report.md reports/small/report.html small-make.log; do
  grep -qx "$f" "$tmp/results.list" || fail "small-results.tar.gz lacks $f"
done
! grep -E 'safetensors|\.tmp\.' "$tmp/results.list" || fail "small-results.tar.gz carries a checkpoint"
rsize=$(stat -c %s "$tmp/out/small-results.tar.gz")
[ "$rsize" -lt $((16 * 1048576)) ] || fail "small-results.tar.gz is $rsize bytes"
echo "ok: small-results.tar.gz ($((rsize / 1024)) KiB) holds the records and the report, no checkpoint"
echo "PASS"
