# The PyTorch twin (tests/reference/): reference fixtures for the C comparison tests, and the CPU benchmark.
#   make twin-fixtures   self-checks of the twin (finite differences, regularizer closed forms, LR schedule), then
#                        regenerates tests/fixtures/twin/* (deterministic; commit the result)
#   make twin-check      regenerates into a temporary directory and fails if the committed fixtures differ
#   make twin-chain-check  bin/train (one whole step: loader, micro-batches, clipping, AdamW, lr), bin/evaluate and
#                        bin/analyze on the embedded sample against torch and the twin (tests/reference/chain_check.py)
#   make bench-cpu       C vs twin training speed on the tiny CPU configs (tokens/s and the ratio C/twin)
# The C tests (tests/unit/test_twin_compare.c, f64_twin_compare.c) need no torch: they read the committed fixtures.
# Python is Debian's /usr/bin/python3 with python3-torch (mk/deps.sh torch), not a pyenv python on PATH.

TWIN_PY := /usr/bin/python3
BENCH_STEPS ?= 5
BENCH_THREADS ?= 2
BENCH_CONFIGS ?= experiments/tiny/moeut_qa.json experiments/tiny/dense_qa.json

.PHONY: twin-fixtures twin-check twin-selftest twin-chain-check bench-cpu

twin-selftest: deps-torch
	$(TWIN_PY) tests/reference/test_twin.py

twin-fixtures: twin-selftest
	$(TWIN_PY) tests/reference/gen_fixtures.py --out tests/fixtures/twin

twin-check: deps-torch
	$(TWIN_PY) tests/reference/gen_fixtures.py --out tests/fixtures/twin --check

twin-chain-check: deps-torch all
	$(TWIN_PY) tests/reference/chain_check.py --bin bin

build/bench/bench_train_step: $(OBJ)/tests/bench/bench_train_step.o $(NN) $(CORE)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

bench-cpu: deps-torch build/bench/bench_train_step
	$(TWIN_PY) tests/reference/bench_twin.py --c-bench build/bench/bench_train_step --steps $(BENCH_STEPS) \
	  --threads $(BENCH_THREADS) $(addprefix --config ,$(BENCH_CONFIGS))
