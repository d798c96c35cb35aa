#!/usr/bin/env bash
# The GPU checks, one step per call; `make test-gpu | test-gpu-sanitizer | bench-gpu` (mk/gpu.mk) call it,
# and so can a GPU machine without make or without this project's build dependencies (after
# `source mk/gpu/env.sh`, which unpacks the prebuilt bundle of mk/gpu/bundle.sh). Run from the repository root.
#
#   mk/gpu/run.sh probe       what the machine has: GPU, driver, nvcc, compute-sanitizer, PyTorch, build dependencies
#   mk/gpu/run.sh tests       CUDA unit programs (build/tests/cuda_*) and the CUDA end-to-end scripts
#                             (tests/e2e/test_cuda_*.sh), each stopped after TEST_TIMEOUT_S (default 300) seconds;
#                             closing line "N passed, N failed, N skipped"
#   mk/gpu/run.sh sanitizer   compute-sanitizer --tool memcheck (leak check on) over the CUDA unit programs and one
#                             short CUDA training benchmark of each tiny config (fp32 and bf16)
#   mk/gpu/run.sh selftest    tests/bench/bench_gpu.py --self-test on the GPU (fast PyTorch kernels vs the twin's)
#   mk/gpu/run.sh bench [ARGS...]   tests/bench/bench_gpu.py (C vs PyTorch tokens/s and MFU; ARGS are passed on)
#   mk/gpu/run.sh small [--seeds N] [--runs "a b"] [--limit S] [--jobs J] [--backend B] [--set "KEY=VALUE ..."]
#                             make reproduce EXPERIMENT=small BACKEND=cuda (GPU_PREBUILT=1: the bundle's programs and
#                             data/small) for at most S seconds (default 540: a 10-minute job, with room to copy
#                             files in and out), then
#                             packs the records of runs/small (JSON, JSON lines, figures; no checkpoint),
#                             reports/small and make's log (also left as $OUT/small-make.log) into
#                             $OUT/small-results.tar.gz ($OUT unset: build/). At the limit, training saves a
#                             checkpoint (SIGTERM) and the same command, called again on the same tree (as the next
#                             job under a batch scheduler's wall-time limit), continues (RESUME=auto). Last line:
#                             "small: complete" or "small: incomplete ...".
#                             --jobs J runs J stages at once (make -j J; default 1): a 14.6M-parameter run leaves
#                             most of an H100 idle (its kernels are small), so J runs share it at little cost each;
#                             their records' tokens/s are then those of a shared GPU (the results are the same: no
#                             kernel choice depends on timing).
#                             --backend and --set (make's BACKEND and SET) are for rehearsing it without a GPU
#                             (tests/e2e/test_gpu_bundle.sh: --backend cpu with a few steps).
# Exit status: 0 when the step passed (or skipped with a "SKIP:" line: no GPU, no compute-sanitizer), 1 on failure,
# 3 when `small` stopped at its time limit (rerun it to continue).
set -u
cd "$(dirname "$0")/../.."
source mk/gpu/cuda_versions.sh # gpu_driver_cuda, gpu_runtime_cuda_major, gpu_driver_too_old
step=${1:-}
shift || true

# A Python with PyTorch: plain python3 first (the GPU image's, with CUDA), then Debian's /usr/bin/python3.
find_torch_python() {
  local p
  for p in ${GPU_PY:-} python3 /usr/bin/python3; do
    command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch' >/dev/null 2>&1 && { command -v "$p"; return 0; }
  done
  return 1
}

cuda_unit_bins() { ls build/tests/cuda_* 2>/dev/null | grep -v '\.'; }

case "$step" in
probe)
  echo "== GPU";           (nvidia-smi -L 2>&1 || echo "nvidia-smi: not available") | head -n 4
  echo "== driver";        (nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true) | head -n 2
  echo "== CUDA driver and runtime"
  drv=$(gpu_driver_cuda)
  rt=$( [ -e bin/train ] && gpu_runtime_cuda_major bin/train)
  echo "driver: CUDA ${drv:-unknown (no nvidia-smi)}; runtime of the programs: CUDA ${rt:-(bin/train has none: not built with CUDA)}" \
    "$( [ -f build/gpu-bundle/CUDA_RUNTIME ] && echo "(the bundle is built for CUDA $(cat build/gpu-bundle/CUDA_RUNTIME))")"
  if gpu_driver_too_old "$drv" "$rt"; then
    echo "the driver is too old for this runtime: the CUDA $rt programs cannot run on a CUDA $drv driver (build them" \
      "with a CUDA ${drv%%.*} toolkit, or update the driver)"
  fi
  echo "== nvcc";          (command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || echo "nvcc: not found") | head -n 1
  echo "== compute-sanitizer"; (command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo "not found") | head -n 1
  echo "== python/torch";  py=$(find_torch_python) && "$py" -c 'import torch,sys; print(sys.executable, torch.__version__, "cuda available:", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' || echo "no python3 with torch"
  echo "== libc";          ldd --version 2>&1 | head -n 1
  echo "== build tools";   for t in gcc make pkg-config; do printf '%s: %s\n' "$t" "$(command -v $t || echo missing)"; done
  echo "== build libraries (headers)"
  for h in cjson/cJSON.h curl/curl.h archive.h openssl/sha.h cblas.h check.h zlib.h; do
    f=$(ls /usr/include/$h /usr/include/*/$h /usr/include/x86_64-linux-gnu/*/$h 2>/dev/null | head -n 1)
    printf '%-16s %s\n' "$h" "${f:-MISSING}"
  done
  echo "== prebuilt bundle"; ls -la build/gpu-bundle.tar.gz build/gpu-bundle 2>/dev/null | head -n 3 || true
  ;;
tests)
  # One hung program must not take a wall-time-limited job's whole window (run_suite.sh counts it as failed).
  export TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-300}
  bins=$(cuda_unit_bins)
  [ -n "$bins" ] || { echo "FAIL: no build/tests/cuda_* programs (build them: make test-cuda, or source mk/gpu/env.sh)"; exit 1; }
  # run_suite.sh appends to build/test-results.txt (make test's record): count only the lines added here
  mkdir -p build
  res=build/test-results.txt
  before=$( [ -f $res ] && wc -l <$res || echo 0 )
  tests/run_suite.sh cuda $bins; s1=$?
  tests/run_suite.sh e2e tests/e2e/test_cuda_*.sh; s2=$?
  tail -n +$((before + 1)) $res >build/test-results-gpu.txt
  tests/summarize.sh build/test-results-gpu.txt  # exits 1 when nothing passed: here only failures count
  if [ $s1 = 0 ] && [ $s2 = 0 ] && ! awk '$3 > 0 {p = 1} END {exit !p}' build/test-results-gpu.txt; then
    # Every test skipped. Where the driver lists a GPU that is no "no GPU" skip but a failure: the programs could not
    # use it, most often because the driver is older than the CUDA runtime they were built with.
    gpus=$(nvidia-smi -L 2>/dev/null | grep '^GPU ' || true)
    if [ -n "$gpus" ]; then
      driver_cuda=$(gpu_driver_cuda)
      runtime=$(gpu_runtime_cuda_major "$(echo "$bins" | head -n 1)")
      echo "test-gpu: FAIL: nvidia-smi lists $(echo "$gpus" | head -n 1 | cut -d'(' -f1)but every CUDA test skipped:" \
        "the driver supports CUDA ${driver_cuda:-(unknown)}, the programs need the CUDA ${runtime:-(unknown)} runtime" \
        "(libcudart.so.${runtime:-?}); a driver older than the runtime cannot run them (build for this driver's CUDA," \
        "or update the driver)"
      exit 1
    fi
    echo "test-gpu: SKIP: every CUDA test skipped (no GPU: nvidia-smi lists none)"
  fi
  [ $s1 = 0 ] && [ $s2 = 0 ]
  ;;
sanitizer)
  san=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
        /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)}
  [ -n "$san" ] && [ -x "$san" ] || { echo "test-gpu-sanitizer: SKIP: compute-sanitizer not found (PATH, /usr/local/cuda/bin)"; exit 0; }
  bins=$(cuda_unit_bins)
  [ -n "$bins" ] || { echo "FAIL: no build/tests/cuda_* programs"; exit 1; }
  first=$(echo "$bins" | head -n 1)
  mkdir -p build/test-logs
  rc=0
  "$first" >build/test-logs/memcheck-probe.log 2>&1 || rc=$?
  [ "$rc" != 77 ] || { echo "test-gpu-sanitizer: SKIP: $(head -n 1 build/test-logs/memcheck-probe.log)"; exit 0; }
  status=0
  run_memcheck() { # run_memcheck LABEL CMD...
    local label=$1 log="build/test-logs/memcheck-$(echo "$1" | tr ' /' '__').log"
    shift
    local start=$SECONDS rc=0
    "$san" --tool memcheck --leak-check full --error-exitcode 99 --print-limit 50 "$@" >"$log" 2>&1 || rc=$?
    local summary
    summary=$(grep -E "ERROR SUMMARY" "$log" | tail -n 1)
    if [ "$rc" = 0 ] && grep -q "ERROR SUMMARY: 0 errors" "$log"; then
      echo "ok   memcheck $label ($((SECONDS - start))s): $summary"
    else
      echo "FAIL memcheck $label (exit $rc; ${summary:-no summary}) — log: $log"
      grep -E "=========" "$log" | head -n 30 | sed 's/^/    /'
      status=1
    fi
  }
  for b in $bins; do run_memcheck "$(basename "$b")" "$b"; done
  if [ -x build/bench/bench_train_step ]; then
    for cfg in experiments/tiny/dense_qa.json experiments/tiny/moeut_qa.json; do
      for prec in fp32 bf16; do
        run_memcheck "bench_train_step $(basename "$cfg" .json) $prec" build/bench/bench_train_step --config "$cfg" \
          --backend cuda --precision "$prec" --steps 1 --warmup 1
      done
    done
  fi
  [ $status = 0 ] && echo "test-gpu-sanitizer: memcheck clean" || echo "test-gpu-sanitizer: memcheck found errors"
  exit $status
  ;;
selftest|bench)
  py=$(find_torch_python) || { echo "bench-gpu: FAIL: no python3 with PyTorch found (tried \$GPU_PY, python3, /usr/bin/python3)"; exit 1; }
  if [ "$step" = selftest ]; then
    exec "$py" tests/bench/bench_gpu.py --self-test "$@"
  fi
  [ -x build/bench/bench_train_step ] || { echo "bench-gpu: FAIL: build/bench/bench_train_step not built"; exit 1; }
  PYTHONUNBUFFERED=1 exec "$py" tests/bench/bench_gpu.py --c-bench build/bench/bench_train_step "$@"
  ;;
small)
  seeds= runs= limit=540 backend=cuda sets= jobs=1
  while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "mk/gpu/run.sh small: $1 needs a value" >&2; exit 2; }
    case "$1" in
      --seeds) seeds=$2 ;;
      --runs) runs=$2 ;;
      --limit) limit=$2 ;;
      --jobs) jobs=$2 ;;
      --backend) backend=$2 ;;
      --set) sets=$2 ;;
      *) echo "mk/gpu/run.sh small: unknown argument '$1' (--seeds N, --runs \"a b\", --limit SECONDS, --jobs J, --backend B, --set \"K=V ...\")" >&2
         exit 2 ;;
    esac
    shift 2
  done
  [ -f data/small/tokenize_manifest.json ] || { echo "small: FAIL: no data/small (source mk/gpu/env.sh: the bundle carries it)"; exit 1; }
  # A fresh copy of the tree on the GPU machine (each job copying it anew) may give the tracked files new time stamps
  # on every call; make would then take the configs and archives as newer than the data and the finished runs, and
  # refetch (no libarchive there) or retrain.
  # Pin the experiment's inputs to one old time instead: make then judges the runs by their outputs alone. (A config
  # edited on the GPU machine is therefore not noticed: delete its runs/small/RUN to redo it.)
  touch -d @946684800 experiments/small/*.json datasets/*.tar.gz datasets/dm_math_v1.0.json
  out=${OUT:-build}
  mkdir -p "$out" build
  start=$SECONDS
  set -o pipefail
  make_vars=(EXPERIMENT=small BACKEND="$backend" GPU_PREBUILT=1)
  [ -z "$seeds" ] || make_vars+=(SEEDS="$seeds")
  [ -z "$runs" ] || make_vars+=(RUNS="$runs")
  [ -z "$sets" ] || make_vars+=(SET="$sets")
  timeout -s TERM -k 60 "$limit" make -j "$jobs" "${make_vars[@]}" reproduce 2>&1 | tee "$out/small-make.log"
  rc=$?
  set +o pipefail
  # The records only (what report, compare and the baselines read, and the figures): never a checkpoint or the
  # temporary file of one that SIGTERM interrupted: the tarball stays small enough to copy back after every job
  # (tests/e2e/test_gpu_bundle.sh holds it under 16 MiB).
  find runs/small reports/small -type f \( -name '*.json' -o -name '*.jsonl' -o -name '*.svg' -o -name '*.md' \
       -o -name '*.html' -o -name train.inputs \) 2>/dev/null | sort >build/small-files.txt
  tar czf "$out/small-results.tar.gz" -T build/small-files.txt -C "$out" small-make.log
  echo "small: $((SECONDS - start)) s; records in $out/small-results.tar.gz ($(du -h "$out/small-results.tar.gz" | cut -f1))"
  # What is left, as make sees it: the stages the next call would run (make reproduce-plan writes them, one
  # "STAGE RUN SECONDS ..." line each, RUN "-" for fetch, tokenize and report).
  left=
  if make -s "${make_vars[@]}" reproduce-plan >/dev/null 2>&1; then
    left=$(awk '{ print $1 ($2 == "-" ? "" : " " $2) }' build/reproduce/small/plan | paste -sd, | sed 's/,/, /g')
  else
    left="unknown (make reproduce-plan failed)"
  fi
  echo "small: stages left: ${left:-none}"
  if [ $rc = 0 ]; then
    echo "small: complete"
  elif [ $rc = 124 ] || [ $rc = 137 ]; then
    echo "small: incomplete (stopped at the ${limit} s limit; run the same command again to continue)"
    exit 3
  else
    echo "small: FAIL (make reproduce exited $rc; see small-make.log)"
    exit 1
  fi
  ;;
*)
  echo "usage: mk/gpu/run.sh probe|tests|sanitizer|selftest|bench [bench_gpu.py args]|small [--seeds N] [--runs \"a b\"] [--limit S] [--jobs J] [--backend B] [--set \"K=V ...\"]" >&2
  exit 2
  ;;
esac
