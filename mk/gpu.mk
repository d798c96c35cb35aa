# GPU checks and benchmark of the CUDA backend. The work is done by mk/gpu/run.sh, so a GPU machine
# without make can run the same steps; mk/gpu/session.sh runs all of them, and the small experiment, as one command
# called again until done (tests/GPU_CHECKLIST.md).
#   make test-gpu             CUDA unit programs (cuda_backend_ops, cuda_twin_compare, cuda_model_vs_cpu) and the
#                             CUDA end-to-end scripts (tests/e2e/test_cuda_*.sh); they skip (exit 77, "SKIP: ...")
#                             where no usable GPU exists
#   make test-gpu-sanitizer   compute-sanitizer memcheck over those programs and a short CUDA training benchmark;
#                             skips with a message without compute-sanitizer or a GPU
#   make bench-gpu            C (CUDA backend) vs PyTorch training tokens/s, their ratio and both MFUs for the paper's
#                             244M dense and MoEUT configs on one GPU; fails with one line without a GPU
#   make bench-gpu-selftest   the FLOP arithmetic and the benchmark's fast PyTorch kernels against the twin's
#   make gpu-bundle           build/gpu-bundle.tar.gz: prebuilt binaries + the shared libraries they need + tokenized
#                             e2e and small-experiment data, for a GPU machine that lacks this project's build
#                             dependencies (mk/gpu/bundle.sh; kept under 44 MiB, so that with the tree it stays under
#                             64 MiB to copy to the GPU machine)
# Knobs: BENCH_GPU_STEPS (10), BENCH_GPU_WARMUP (2), BENCH_GPU_CONFIGS (the paper's dense_qa and moeut_qa),
#   BENCH_GPU_ARGS (more bench_gpu.py flags, e.g. --batch-size 64 --n-microbatch 1), GPU_PY (a python with torch),
#   GPU_PREBUILT=1 (use the binaries already in bin/, build/tests, build/bench: build nothing, e.g. after
#   `source mk/gpu/env.sh` on a machine without the build dependencies).

BENCH_GPU_STEPS ?= 10
BENCH_GPU_WARMUP ?= 2
BENCH_GPU_CONFIGS ?= experiments/paper/dense_qa.json experiments/paper/moeut_qa.json
BENCH_GPU_ARGS ?=

ifeq ($(GPU_PREBUILT),)
GPU_TEST_PREREQS := all $(addprefix build/tests/,$(CUDA_TESTS)) build/bench/bench_train_step
GPU_BENCH_PREREQS := build/bench/bench_train_step
endif

.PHONY: test-gpu test-gpu-sanitizer bench-gpu bench-gpu-selftest gpu-bundle gpu-probe

test-gpu: $(GPU_TEST_PREREQS)
	@mk/gpu/run.sh tests

test-gpu-sanitizer: $(GPU_TEST_PREREQS)
	@mk/gpu/run.sh sanitizer

bench-gpu: $(GPU_BENCH_PREREQS)
	@mk/gpu/run.sh bench --steps $(BENCH_GPU_STEPS) --warmup $(BENCH_GPU_WARMUP) \
	  $(addprefix --config ,$(BENCH_GPU_CONFIGS)) $(BENCH_GPU_ARGS)

bench-gpu-selftest:
	@mk/gpu/run.sh selftest

gpu-probe:
	@mk/gpu/run.sh probe

gpu-bundle:
	@mk/gpu/bundle.sh

# The link flags of the programs (mk/gpu/bundle.sh relinks them with an RPATH for the bundle).
.PHONY: gpu-print-link-flags
gpu-print-link-flags:
	@echo '$(LDLIBS) $(CUDA_LIBS) $(CHECK_LIBS)'
