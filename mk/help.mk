# make help: every target and variable a user can use, grouped, one line each (details: README, mk/*.mk headers,
# tests/README.md). tests/e2e/test_make_help.sh fails when a .PHONY target or a user variable of Makefile and
# mk/*.mk is missing here (its rule and exclusions are in that script).
.PHONY: help code-version
HELP_EXPERIMENTS := $(patsubst experiments/%/data.json,%,$(wildcard experiments/*/data.json))
help:
	@printf '%s\n' \
	'Usage: make [TARGET ...] [NAME=value ...]' \
	'' \
	'The pipeline (data/EXP/, runs/EXP/, reports/EXP/ of the experiment EXPERIMENT):' \
	'  reproduce            the whole experiment: fetch, tokenize, train/evaluate/analyze each run, report, compare' \
	'  reproduce-plan       what make reproduce would run now (the stages make -n lists) and about how long it takes' \
	'                       (one line; runs, moves and writes nothing under data/, runs/, reports/; make -n neither).' \
	'                       The estimate: a train takes its tokens at its run'"'"'s measured rate (else a default by' \
	'                       model size), whatever its threads; min(-jN, cores / (NPROC x THREADS)) runs train at once,' \
	'                       so the throughput scales with min(cores, jobs x threads) / threads; a run already trained' \
	'                       with the asked config is a no-op (seconds); evaluations take one thread each, min(-jN,' \
	'                       cores) at once' \
	'  fetch, tokenize      the data of EXPERIMENT (data/EXP/)' \
	'  train, evaluate, analyze  one stage for the runs in RUN (runs/EXP/RUN/)' \
	'  report               reports/EXP/report.md and report.html from the runs' \
	'  compare              the runs against the recorded baselines reports/baselines/EXP/ (what CI checks)' \
	'  export               reports/EXP/runs.csv: one row per run' \
	'Your runs:' \
	'  sweep                train every point of a grid: make sweep RUNS=moeut_answer SWEEP="train.lr=1e-3,2e-3' \
	'                       model.ff_k=2,4"; each point its own run runs/EXP/RUN@<variant>, all in the report' \
	'  diff                 compare two runs side by side: make diff A=dense_qa B=dense_qa@1a2b3c4d: config keys that' \
	'                       differ, each metric'"'"'s change with a paired interval; B=baseline: A against its own' \
	'                       recorded baseline reports/baselines/EXP/A.result.json (make diff A=dense_qa B=baseline)' \
	'  prune                delete the kept earlier variants and sweep points (runs/EXP/*@*) of EXPERIMENT' \
	'  reproduce-clean      delete the runs and report of EXPERIMENT (not the data, not the baselines)' \
	'Tests (tests/README.md):' \
	'  check                the fast loop: unit and f64 tests, layering, docs and one short end-to-end run' \
	'  test                 test-unit, test-f64, test-asan, test-cuda, test-nvcc, test-cuda-emu and test-e2e (CI),' \
	'                       their programs TEST_JOBS at a time in one pool, ending "N passed, N failed, N skipped"' \
	'                       (logs: build/test-logs/), the sanitizer reruns of the unit tests on a line of their own' \
	'  test-programs        build every program make test runs (TEST_JOBS compilers), run nothing' \
	'  test-unit, test-f64, test-asan, test-e2e  one suite: the Check unit tests, the double-precision gradient' \
	'                       checks, the unit tests under ASan/UBSan, the end-to-end scripts tests/e2e/' \
	'  test-cuda            the CUDA unit programs (builds the CUDA backend; they skip without a GPU)' \
	'  test-nvcc            every kernels/cuda/*.cu compiled (not run) by nvcc: sm_90, warnings as errors' \
	'  test-cuda-emu, emu-bins  the CUDA tests on the CPU emulator of CUDA under ASan/UBSan (no nvcc or GPU needed);' \
	'                       emu-bins only builds them (build/emu/)' \
	'  fuzz, fuzz-one       libFuzzer: every harness FUZZ_SECONDS each; one harness, FUZZ=<name> (tests/fuzz/README.md)' \
	'  fuzz-regressions, fuzz-bins  every committed fuzz input once through its harness; only build the harnesses' \
	'  twin-check, twin-fixtures  the PyTorch twin'"'"'s fixtures (tests/fixtures/twin/): verify them; regenerate them' \
	'  twin-selftest, twin-chain-check  the twin'"'"'s own checks; one bin/train step, bin/evaluate and bin/analyze' \
	'                       recomputed in torch' \
	'Benchmarks (measured figures: tests/README.md):' \
	'  bench-cpu            C against the PyTorch twin: training tokens/s of BENCH_CONFIGS' \
	'  bench-tokenize       bin/tokenize against zcat of the same archive (BENCH_TOKENIZE_ARCHIVE)' \
	'  bench-emu-counts     kernel launches, cuBLAS calls and copies per CUDA training step, on the emulator (~20 min)' \
	'  bench-model          predicted (not measured) H100/H200 step time and MFU of the paper configs: the roofline' \
	'                       of every launch of one CUDA training step, recorded by the emulator'"'"'s dry run (~20 s)' \
	'  bench-gpu            C (CUDA) against PyTorch: tokens/s and MFU of BENCH_GPU_CONFIGS on one GPU' \
	'  bench-gpu-selftest   the FLOP arithmetic and the benchmark'"'"'s PyTorch kernels against the twin' \
	'GPU (tests/GPU_CHECKLIST.md):' \
	'  test-gpu             the CUDA unit programs and end-to-end scripts (they skip without a usable GPU)' \
	'  test-gpu-sanitizer   compute-sanitizer memcheck over them and a short CUDA training' \
	'  gpu-probe            what this machine has: GPU, driver, nvcc, compute-sanitizer, PyTorch, build libraries' \
	'  gpu-bundle           build/gpu-bundle.tar.gz: prebuilt programs, libraries and data for a GPU machine that' \
	'                       lacks the build dependencies (there: source mk/gpu/env.sh)' \
	'Build and housekeeping:' \
	'  all                  (the default) build every stage into bin/ (the CPU backend; CUDA too: CUDA=1)' \
	'  deps, deps-test, deps-torch, deps-fuzz  install the Debian packages of the build, the tests, the PyTorch' \
	'                       twin, fuzzing (make does this itself when needed)' \
	'  clean                delete build/ and bin/' \
	'  code-version         print the code version written into every record' \
	'  help                 this list' \
	'' \
	'Variables (NAME=value on the make command line):' \
	'  EXPERIMENT=tiny      the experiment: a directory experiments/EXP/, one of' \
	'                       $(HELP_EXPERIMENTS)' \
	'  BACKEND=cpu          cpu or cuda, for train, evaluate and analyze (changing it redoes them; cuda builds CUDA)' \
	'  RUNS="..."           the runs of make reproduce (default: every run config of EXPERIMENT, the paper four first)' \
	'  RUN=name             the runs of make train/evaluate/analyze (default: all of RUNS)' \
	'  SEEDS=N              train seeds 1..N of every run (runs/EXP/RUN.seed<S>; default: the config'"'"'s own seed)' \
	'  SET="k=v ..."        config overrides, e.g. SET="train.lr=1e-3 train.precision=bf16"; runs/EXP/RUN holds the' \
	'                       config asked for now: a run of another config there (trained or finished) is kept aside' \
	'                       as RUN@<variant>, and the same SET again brings it back (no command discards training)' \
	'  SWEEP="k=v1,v2 ..."  the grid of make sweep: each KEY=V1,V2,... is an axis, every combination a run' \
	'  A=RUN                the first run of make diff: a name in runs/EXP (dense_qa@1a2b3c4d), a path (a run' \
	'                       directory, or a baseline record reports/baselines/EXP/RUN.result.json) or baseline' \
	'  B=RUN                the second run of make diff (B=baseline: the recorded baseline of A'"'"'s run)' \
	'  NPROC=1              processes that train one run together (mpirun -np NPROC). Changing it reruns train, which' \
	'                       continues an interrupted run with the new count and leaves a finished one as it is (the' \
	'                       same windows and micro-batches), then re-evaluates; RESUME=0 trains it again' \
	'  LAUNCHER=...         how NPROC ranks start: mpirun, or srun (the default inside a Slurm allocation)' \
	'  RESUME=auto          auto: continue an interrupted train when it can; 1: must continue; 0: train the asked runs' \
	'                       again from scratch, each trained one first kept aside as RUN@<variant> (not with SWEEP)' \
	'  THREADS=N            CPU threads of each train (default: all cores); make -jN THREADS=1 trains N runs side by' \
	'                       side, faster for small models (experiments/cpu_arith/README.md)' \
	'  SOURCE=...           where fetch gets the data (overrides data.json "source")' \
	'  EVAL_FLAGS=...       extra flags for bin/evaluate (e.g. EVAL_FLAGS=--batch-size=32)' \
	'  ANALYZE_FLAGS=...    extra flags for bin/analyze' \
	'  COMPARE_CONFIG_CHANGE=error  make compare on a run whose config differs from its baseline'"'"'s: error (exit' \
	'                       2) or note (make reproduce passes note)' \
	'  V=1                  show the full compiler and linker commands' \
	'  CUDA=1               build the CUDA backend (needs nvcc; a tree built with it stays so); CUDA=0: the CPU only' \
	'  NVCC=path            the CUDA compiler (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)' \
	'  CUDA_HOME=dir        the CUDA toolkit for cuBLAS, cudart and NCCL (default: from NVCC)' \
	'  NVCC_FLAGS=...       nvcc'"'"'s flags (default: -O3 -arch=sm_90 ...)' \
	'  CC=gcc               the C compiler' \
	'  OPT="-O2 -g"         optimisation and debug flags (the default of CFLAGS)' \
	'  CFLAGS=...           the C flags added to the project'"'"'s own (default: OPT)' \
	'  GPU_PREBUILT=1       build nothing: use the programs a GPU bundle put in bin/ (set by source mk/gpu/env.sh)' \
	'  OMP_WAIT_POLICY=passive  OpenMP threads sleep between parallel regions (active spins; mk/kernels.mk)' \
	'  EMU_CXX=g++          the C++ compiler of the CUDA emulator build' \
	'  FUZZ=name            the harness of make fuzz-one (tests/fuzz/fuzz_<name>.c)' \
	'  FUZZ_SECONDS=60      seconds per harness of make fuzz and fuzz-one' \
	'  FUZZ_CC=clang        the compiler of the fuzzing build' \
	'  TEST_JOBS=N          unit, f64 and sanitizer test programs run at once (default: the cores)' \
	'  BENCH_STEPS=5        training steps per config of make bench-cpu' \
	'  BENCH_THREADS=2      CPU threads of make bench-cpu' \
	'  BENCH_CONFIGS=...    the run configs of make bench-cpu (default: experiments/tiny moeut_qa and dense_qa)' \
	'  BENCH_TOKENIZE_ARCHIVE=...  the archive of make bench-tokenize (default: datasets/dm_math_arithmetic.tar.gz)' \
	'  BENCH_GPU_STEPS=10   timed steps of make bench-gpu' \
	'  BENCH_GPU_WARMUP=2   untimed steps before them' \
	'  BENCH_GPU_CONFIGS=...  the run configs of make bench-gpu (default: experiments/paper dense_qa and moeut_qa)' \
	'  BENCH_GPU_ARGS=...   more flags of tests/bench/bench_gpu.py (e.g. --batch-size 64 --n-microbatch 1)' \
	'  GPU_PY=python3       (environment) a python with PyTorch for make bench-gpu'

code-version:
	@echo '$(CODE_VERSION)'
