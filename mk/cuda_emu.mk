# The CUDA backend on the CPU emulator (kernels/cuda/emu/cuda_emu.h): kernels/cuda/*.cu compiled as C++ with
# -DCUDA_EMULATION, everything built with ASan/UBSan into build/emu/, so the CUDA tests run (and check memory
# accesses) on machines without a GPU. Needs g++ only (no nvcc, no GPU). It does not replace a GPU run.
#   make test-cuda-emu   the emulator self-test, the three CUDA unit-test programs, the four CUDA e2e scripts and the
#                        thread-order race check (tests/e2e/cuda_emu_order.sh) on the emulator
#   make bench-model     the cost model: predicted H100/H200 time and MFU of one training step of the paper's dense and
#                        MoEUT configs in bf16, from every launch the backend issues in the emulator's dry run
#                        (CUDA_EMU_DRY_RUN; tests/bench/bench_model.py); a prediction, not a measurement
#   make bench-emu-counts  kernel launches, cuBLAS calls, routing-plan builds, host<->device copies, bf16 roundings and
#                        bytes moved per training step of the paper's layouts in fp32 and bf16
#                        (tests/bench/emu_call_counts.sh), default kernel paths against the comparator paths
.PHONY: test-cuda-emu emu-bins bench-emu-counts bench-model

OBJEMU := build/emu/obj
EMU_CXX ?= g++
EMU_SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
EMU_CFLAGS := $(BASE_CFLAGS) -DHAVE_CUDA -O1 -g $(EMU_SAN)
EMU_CXXFLAGS := -std=c++17 -D_GNU_SOURCE -DCUDA_EMULATION -I. $(WARN) -Wno-unknown-pragmas -O1 -g $(EMU_SAN) $(MPI_CFLAGS)
EMU_RUNTIME_OBJ := $(OBJEMU)/kernels/cuda/emu/cuda_emu_runtime.o $(OBJEMU)/kernels/cuda/emu/cuda_emu_stats.o \
                   $(OBJEMU)/kernels/cuda/emu/cuda_emu_launch_log.o
EMU_CU_OBJ := $(patsubst %.cu,$(OBJEMU)/%.o,$(CUDA_SRC)) $(EMU_RUNTIME_OBJ) $(OBJEMU)/kernels/cuda/emu/nccl_emu.o
EMU_CORE := build/emu/libcore.a
EMU_NN := build/emu/libnn.a
EMU_TESTS := $(addprefix build/emu/tests/,$(CUDA_TESTS))
EMU_STAGES := $(addprefix build/emu/bin/,$(STAGES))
EMU_LDLIBS := $(LDLIBS) -lstdc++

# Objects also rebuild when this fragment (the flags) changes.
$(OBJEMU)/%.o: %.c mk/cuda_emu.mk $(FLAGS_STAMP) | deps
	@mkdir -p $(dir $@)
	$(call quiet,CC-EMU,$<)$(CC) $(EMU_CFLAGS) -MMD -MP -c $< -o $@
$(OBJEMU)/%.o: %.cu mk/cuda_emu.mk | deps
	@mkdir -p $(dir $@)
	$(call quiet,CXX-EMU,$<)$(EMU_CXX) $(EMU_CXXFLAGS) -x c++ -MMD -MP -c $< -o $@
$(OBJEMU)/%.o: %.cpp mk/cuda_emu.mk | deps
	@mkdir -p $(dir $@)
	$(call quiet,CXX-EMU,$<)$(EMU_CXX) $(EMU_CXXFLAGS) -MMD -MP -c $< -o $@
.PRECIOUS: $(OBJEMU)/%.o

$(EMU_CORE): $(patsubst %.c,$(OBJEMU)/%.o,$(CORE_SRC))
	$(call quiet,AR,$@)rm -f $@; ar rcs $@ $^
$(EMU_NN): $(patsubst %.c,$(OBJEMU)/%.o,$(NN_SRC)) $(EMU_CU_OBJ)
	$(call quiet,AR,$@)rm -f $@; ar rcs $@ $^
build/emu/tests/cuda_%: $(OBJEMU)/tests/unit/cuda_%.o $(EMU_NN) $(EMU_CORE)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(EMU_SAN) -o $@ $^ $(EMU_LDLIBS) $(CHECK_LIBS)
build/emu/bin/%: $(OBJEMU)/stages/%.o $(EMU_NN) $(EMU_CORE)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(EMU_SAN) -o $@ $^ $(EMU_LDLIBS)

build/emu/tests/cuda_emu_selftest: $(OBJEMU)/kernels/cuda/emu/cuda_emu_selftest.o $(EMU_RUNTIME_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(EMU_CXX) $(EMU_SAN) -o $@ $^

emu-bins: build/emu/tests/cuda_emu_selftest $(EMU_TESTS) $(EMU_STAGES)

# The e2e scripts take the stage binaries from CUDA_TEST_BIN (the emulated build) and the CPU reference from bin/.
# Leak checking stays on (the emulator frees its fiber stacks at exit).
# The resume test runs 12 training runs; at the emulator's speed (about 1 s per step of 64 tokens under ASan) they use
# 9 steps of 4 x 16 tokens instead of the GPU's 400 steps of 8 x 128 (enough for its stop after 7 steps, and for a
# signal sent after 3 logged steps to arrive seconds before the end).
EMU_ENV_ARGS := --env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 --env UBSAN_OPTIONS=print_stacktrace=1 \
  --env CUDA_TEST_BIN=build/emu/bin --env CUDA_TEST_UNIT_DIR=build/emu/tests --env CUDA_RESUME_STEPS=9 \
  --env 'CUDA_RESUME_SETTINGS=context=16 batch_size=4'
# The suite's arguments to tests/run_suite.sh (make test runs it beside the others): the longest programs first.
SUITE_CUDA_EMU = --suite cuda-emu $(EMU_ENV_ARGS) tests/e2e/test_cuda_resume.sh tests/e2e/test_cuda_cvmm_paths.sh \
  tests/e2e/test_cuda_evaluate.sh tests/e2e/test_cuda_moe_variants.sh tests/e2e/test_cuda_mpi.sh \
  tests/e2e/test_cuda_inspect.sh tests/e2e/test_cuda_inspect_other_paths.sh tests/e2e/cuda_emu_order.sh \
  $(EMU_TESTS) build/emu/tests/cuda_emu_selftest
test-cuda-emu: all emu-bins
	@SUITE_JOBS=$(TEST_JOBS) tests/run_suite.sh $(SUITE_CUDA_EMU)

build/emu/bench/bench_train_step: $(OBJEMU)/tests/bench/bench_train_step.o $(EMU_NN) $(EMU_CORE)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(EMU_SAN) -o $@ $^ $(EMU_LDLIBS)

bench-emu-counts: build/emu/bench/bench_train_step
	@tests/bench/emu_call_counts.sh

# Debian's python (tests/bench/bench_model.py needs nothing beyond the standard library).
bench-model: build/emu/bench/bench_train_step
	@/usr/bin/python3 tests/bench/bench_model.py --exe build/emu/bench/bench_train_step
