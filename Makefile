# The build and the pipeline. `make` builds every stage into bin/ (CPU; the CUDA backend too with CUDA=1 or BACKEND=cuda),
# `make test` runs the test suite, `make reproduce` runs the experiment end to end (see README).
# Extra targets live in mk/*.mk (one fragment per concern), included at the end.

SHELL := /bin/bash
.DEFAULT_GOAL := all
# Every variable and goal a user gives is checked first, before any $(shell) below can see it (one refusal line).
include mk/validate/user_values.mk

# Quiet by default: a compile prints "  CC      pipeline/base/config.c", a link "  LD      bin/train". V=1 shows the
# commands. ($(call quiet,TAG,WHAT) goes in front of a recipe line that has no @ of its own.)
V ?= 0
ifeq ($(V),1)
quiet =
else
quiet = @printf '  %-7s %s\n' '$(1)' '$(2)';
MAKEFLAGS += --no-print-directory
endif
CC ?= gcc
ifeq ($(origin CC),default)
CC := gcc
endif

# The commit, plus "-dirty" when a tracked file differs from it, except files under experiments/ and reports/baselines/:
# those are inputs and records, not code (editing a run config must not stamp every record "-dirty" and so rebuild
# bin/evaluate and re-evaluate every run). Untracked files (data/, runs/, new files) never count, as with describe.
CODE_VERSION := $(shell mk/code_version.sh 2>/dev/null || echo unknown)
WARN := -Wall -Wextra -Wno-unused-parameter
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -fopenmp -I. -I/usr/include/x86_64-linux-gnu/openblas-pthread \
               -include pipeline/base/version.h '-DCODE_VERSION=code_version()' \
               -DHAVE_ZLIB
OPT ?= -O2 -g
CFLAGS ?= $(OPT)
# zlib: fetch verifies the gzip CRC-32/length trailer that libarchive's gzip reader skips (datasets/archive_extract.c).
LDLIBS := -lcjson -lcurl -larchive -lcrypto -lopenblas -lz -lm -fopenmp
# MPI (OpenMPI, pipeline/base/dist.c: train's data parallelism). --as-needed: programs that never call MPI do not load it.
# Before deps installs OpenMPI (and pkg-config) make reads the Makefile with the fallbacks, which are what Debian's
# ompi-c.pc says: the compile flags, hence build/flags-*.stamp, are then the same before and after the install, so a
# new machine's second make does not rebuild everything (tests/e2e/test_make_first_build.sh).
MPI_CFLAGS := $(strip $(shell pkg-config --cflags ompi-c 2>/dev/null || \
  echo -I/usr/lib/x86_64-linux-gnu/openmpi/include -I/usr/lib/x86_64-linux-gnu/openmpi/include/openmpi))
MPI_LIBS := $(strip $(shell pkg-config --libs ompi-c 2>/dev/null || echo -L/usr/lib/x86_64-linux-gnu/openmpi/lib -lmpi))
BASE_CFLAGS += $(MPI_CFLAGS)
LDLIBS += -Wl,--as-needed $(MPI_LIBS) -Wl,--no-as-needed

# ---- CUDA: built only when asked for (a GPU is only needed to run it) ----
# A CPU build never runs nvcc, even where one is installed. The CUDA objects are built (and every program compiled with
# -DHAVE_CUDA) when
#   - CUDA=1 is given (CUDA=0 switches a CUDA build tree back to the CPU only), or
#   - BACKEND=cuda is given (command line or environment: make reproduce BACKEND=cuda needs the CUDA programs), or
#   - a GPU target is the goal typed on the command line (test-cuda, test-gpu, test-gpu-sanitizer, bench-gpu,
#     gpu-bundle; exported as CUDA=1 to the make calls of their scripts); not under `make test`, whose test-cuda
#     runs the CUDA programs only in a CUDA build tree, or
#   - this build tree was built with CUDA before (the marker build/cuda.enabled, written when libnn.a is archived with
#     the CUDA objects): sticky, so a later `make reproduce` with BACKEND=cpu does not rebuild and relink every stage
#     (bin/evaluate is a prerequisite of every result.json: a relink would re-evaluate every run).
# Asked for without nvcc: one error line when something is to be built (a dry run only prints it).
# GPU_PREBUILT=1 builds nothing, so it asks for nothing either.
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_SRC := $(wildcard kernels/cuda/*.cu)
# A dry run (make -n): MAKEFLAGS's first word holds the one-letter flags, unless it is a long option such as
# --no-print-directory (which has an n of its own). Expanded where it is used (recipes see the whole MAKEFLAGS).
MAKE_DRY_RUN = $(if $(filter -%,$(firstword $(MAKEFLAGS))),,$(findstring n,$(firstword $(MAKEFLAGS))))
# make -q (question) and -t (touch) run no recipe either: like -n, they must not move runs aside (mk/reproduce.mk),
# which a real run does in the recipe of its keep makefile, before any stage.
MAKE_NO_RECIPES = $(MAKE_DRY_RUN)$(if $(filter -%,$(firstword $(MAKEFLAGS))),,$(findstring q,$(firstword \
  $(MAKEFLAGS)))$(findstring t,$(firstword $(MAKEFLAGS))))
CUDA_MARKER := build/cuda.enabled
CUDA_GOALS := test-cuda test-gpu test-gpu-sanitizer bench-gpu gpu-bundle
CUDA ?=
CUDA_GOALS_ASKED := $(if $(filter 0,$(MAKELEVEL)),$(filter $(CUDA_GOALS),$(MAKECMDGOALS)))
# A tree built with CUDA before the marker existed: its libnn.a holds the CUDA objects.
CUDA_BUILT_BEFORE := $(or $(wildcard $(CUDA_MARKER)),$(if $(wildcard build/libnn.a),$(shell ar t build/libnn.a \
  2>/dev/null | grep -qx 'cuda_backend.o' && echo build/libnn.a)))
ifeq ($(GPU_PREBUILT),)
ifneq ($(filter 1 yes true,$(CUDA)),)
CUDA_WANTED := CUDA=$(CUDA)
else ifneq ($(filter 0 no false,$(CUDA)),)
CUDA_WANTED :=
else ifeq ($(BACKEND),cuda)
CUDA_WANTED := BACKEND=cuda
else ifneq ($(CUDA_GOALS_ASKED),)
CUDA_WANTED := make $(CUDA_GOALS_ASKED)
# The scripts of these targets (mk/gpu/bundle.sh, mk/gpu/run.sh) call make again: the same build.
CUDA := 1
export CUDA
else ifneq ($(CUDA_BUILT_BEFORE),)
CUDA_WANTED := this build tree, built with CUDA before ($(CUDA_BUILT_BEFORE); CUDA=0 rebuilds it for the CPU only),
endif
endif
ifneq ($(CUDA_WANTED),)
ifneq ($(NVCC),)
ifneq ($(CUDA_SRC),)
CUDA_ENABLED := 1
endif
else
CUDA_MISSING := 1
endif
endif
# Refused at build time, not parse time, so that dry runs (make -n reproduce BACKEND=cuda) still plan.
.PHONY: cuda-missing
cuda-missing:
	$(if $(MAKE_DRY_RUN),@echo "nvcc not found",$(error $(CUDA_WANTED) asks for the CUDA build, \
	  but nvcc was not found (neither on PATH nor /usr/local/cuda/bin/nvcc): install the CUDA toolkit or give NVCC=/path/to/nvcc))
NVCC_FLAGS ?= -O3 -std=c++17 -arch=sm_90 -I. -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-fPIC --expt-relaxed-constexpr
# NCCL (the cuda backend's gradient all-reduce) comes with some CUDA toolkits ($(CUDA_HOME)/include/nccl.h) and not
# with others (then a package such as libnccl-dev provides it). Found: linked (mk/dist.mk). Not found: the CUDA
# objects are built with DMMATH_NO_NCCL (kernels/cuda/cuda_nccl.cu): everything works on one rank, and a multi-rank
# CUDA run is refused in one line.
NCCL_HEADER := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h))
NVCC_DEFS := $(if $(NCCL_HEADER),,-DDMMATH_NO_NCCL)

# ---- sources ----
# libcore: the layers below the models; libnn: the backend, the models, training, and the planning above them
# (pipeline/plan/ reads model configs, so it cannot sit in libcore, which is linked after libnn).
CORE_SRC := $(wildcard pipeline/base/*.c pipeline/records/*.c pipeline/report/*.c) $(wildcard datasets/*.c)
NN_SRC := $(wildcard kernels/*.c) $(wildcard kernels/cpu/*.c) $(wildcard model/*.c) $(wildcard model/training/*.c) \
  $(wildcard pipeline/plan/*.c)
# Programs whose source includes a kernels/, model/ or pipeline/plan/ header also link the nn library (the others build
# without it).
USES_NN := $(shell grep -l -E '^\#include "(kernels|model|pipeline/plan)/' stages/*.c tests/unit/*.c 2>/dev/null)
nn_for = $(if $(filter $(1),$(USES_NN)),$(2))
STAGES := $(patsubst stages/%.c,%,$(wildcard stages/*.c))
UNIT_TESTS := $(patsubst tests/unit/%.c,%,$(wildcard tests/unit/test_*.c))
F64_TESTS := $(patsubst tests/unit/%.c,%,$(wildcard tests/unit/f64_*.c))
CUDA_TESTS := $(patsubst tests/unit/%.c,%,$(wildcard tests/unit/cuda_*.c))

# ---- build variants: default (f32, +CUDA), f64 (CPU only, for gradient checks), asan (sanitizers) ----
OBJ := build/obj
OBJ64 := build/f64
OBJASAN := build/asan
CORE := build/libcore.a
NN := build/libnn.a
CORE64 := build/libcore_f64.a
NN64 := build/libnn_f64.a
COREASAN := build/libcore_asan.a
NNASAN := build/libnn_asan.a

ifdef CUDA_ENABLED
CUDA_OBJ := $(patsubst %.cu,$(OBJ)/%.o,$(CUDA_SRC))
CUDA_DEFS := -DHAVE_CUDA
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcublasLt -lcudart -lstdc++
endif

ifeq ($(GPU_PREBUILT),)
all: deps $(if $(CUDA_MISSING),cuda-missing) $(addprefix bin/,$(STAGES))
else
# GPU_PREBUILT=1 (exported by `source mk/gpu/env.sh` on a GPU machine that lacks this project's build dependencies and
# reaches no package registry): the stages in bin/ come prebuilt from build/gpu-bundle.tar.gz, so `all` (and with it
# make reproduce) installs and compiles nothing; it only checks that every stage is there. Their rule below is off too,
# so a stage that is present is up to date.
all:
	@for s in $(STAGES); do [ -x bin/$$s ] || { echo "GPU_PREBUILT=1: bin/$$s missing (source mk/gpu/env.sh first)" >&2; \
	  exit 1; }; done
endif

# The version string lives in one generated header, rewritten only when it changes (pipeline/base/version.c includes it).
VERSION_HEADER_TEXT := \#define CODE_VERSION_STRING "$(CODE_VERSION)"
$(shell mkdir -p build; [ "$$(cat build/code_version.h 2>/dev/null)" = '$(VERSION_HEADER_TEXT)' ] || \
        echo '$(VERSION_HEADER_TEXT)' > build/code_version.h)
# Objects rebuild when the compile flags change (e.g. -DHAVE_CUDA appearing once nvcc and kernels/cuda exist).
FLAGS_TEXT := $(subst ',,$(BASE_CFLAGS) $(CUDA_DEFS) $(CFLAGS) $(NVCC_FLAGS) $(NVCC_DEFS))
FLAGS_STAMP := build/flags-$(shell echo $(call shell_quote,$(FLAGS_TEXT)) | md5sum | cut -c1-12).stamp
$(FLAGS_STAMP):
	@mkdir -p build; rm -f build/flags-*.stamp; touch $@

.PHONY: all deps deps-test deps-torch clean check test test-unit test-f64 test-asan test-e2e test-cuda test-cuda-emu

deps:
	@mk/deps.sh build
deps-test:
	@mk/deps.sh test
deps-torch:
	@mk/deps.sh torch

$(OBJ)/%.o: %.c $(FLAGS_STAMP) | deps
	@mkdir -p $(dir $@)
	$(call quiet,CC,$<)$(CC) $(BASE_CFLAGS) $(CUDA_DEFS) $(CFLAGS) -MMD -MP -c $< -o $@
$(OBJ)/%.o: %.cu $(FLAGS_STAMP) | deps
	@mkdir -p $(dir $@)
	$(call quiet,NVCC,$<)$(NVCC) $(NVCC_FLAGS) $(NVCC_DEFS) -MMD -MP -c $< -o $@
$(OBJ64)/%.o: %.c $(FLAGS_STAMP) | deps
	@mkdir -p $(dir $@)
	$(call quiet,CC-F64,$<)$(CC) $(BASE_CFLAGS) -DSCALAR_F64 $(CFLAGS) -MMD -MP -c $< -o $@
$(OBJASAN)/%.o: %.c $(FLAGS_STAMP) | deps
	@mkdir -p $(dir $@)
	$(call quiet,CC-ASAN,$<)$(CC) $(BASE_CFLAGS) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
	  -MMD -MP -c $< -o $@

$(CORE): $(patsubst %.c,$(OBJ)/%.o,$(CORE_SRC))
	$(call quiet,AR,$@)rm -f $@; ar rcs $@ $^
# The CUDA objects first: a failing nvcc fails before the C objects are compiled. The marker records which kind of
# build libnn.a now holds.
$(NN): $(CUDA_OBJ) $(patsubst %.c,$(OBJ)/%.o,$(NN_SRC)) $(if $(CUDA_MISSING),| cuda-missing)
	$(call quiet,AR,$@)rm -f $@; ar rcs $@ $^
	@$(if $(CUDA_ENABLED),touch,rm -f) $(CUDA_MARKER)
$(CORE64): $(patsubst %.c,$(OBJ64)/%.o,$(CORE_SRC))
	$(call quiet,AR,$@)rm -f $@; ar rcs $@ $^
$(NN64): $(patsubst %.c,$(OBJ64)/%.o,$(NN_SRC))
	$(call quiet,AR,$@)rm -f $@; ar rcs $@ $^
$(COREASAN): $(patsubst %.c,$(OBJASAN)/%.o,$(CORE_SRC))
	$(call quiet,AR,$@)rm -f $@; ar rcs $@ $^
$(NNASAN): $(patsubst %.c,$(OBJASAN)/%.o,$(NN_SRC))
	$(call quiet,AR,$@)rm -f $@; ar rcs $@ $^

.SECONDEXPANSION:
# Keep intermediate objects (test mains) so a second make does not rebuild them. (Not a bare .SECONDARY:, which
# would make every target intermediate: a deleted run output would then not be rebuilt by make reproduce.)
.PRECIOUS: $(OBJ)/%.o $(OBJ64)/%.o $(OBJASAN)/%.o
ifeq ($(GPU_PREBUILT),)
bin/%: $(OBJ)/stages/%.o $$(call nn_for,stages/$$*.c,$(NN)) $(CORE)
	@mkdir -p bin
	$(call quiet,LD,$@)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(call nn_for,stages/$*.c,$(CUDA_LIBS))
endif

# ---- tests (Check) ----
# pkg-config may not see Check before deps installs it (parse time); the fallback is what Debian's check.pc says.
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null || echo -lcheck_pic -lrt -lm -lsubunit)
build/tests/test_%: $(OBJ)/tests/unit/test_%.o $$(call nn_for,tests/unit/test_$$*.c,$(NN)) $(CORE)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(call nn_for,tests/unit/test_$*.c,$(CUDA_LIBS)) $(CHECK_LIBS)
build/tests/f64_%: $(OBJ64)/tests/unit/f64_%.o $(NN64) $(CORE64)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CHECK_LIBS)
build/tests/cuda_%: $(OBJ)/tests/unit/cuda_%.o $(NN) $(CORE)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS) $(CHECK_LIBS)
build/asan/tests/test_%: $(OBJASAN)/tests/unit/test_%.o $$(call nn_for,tests/unit/test_$$*.c,$(NNASAN)) $(COREASAN)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) -fsanitize=address,undefined -fopenmp -o $@ $^ $(LDLIBS) $(CHECK_LIBS)

UNIT_BINS := $(addprefix build/tests/,$(UNIT_TESTS))
F64_BINS := $(addprefix build/tests/,$(F64_TESTS))
CUDA_BINS := $(if $(CUDA_ENABLED),$(addprefix build/tests/,$(CUDA_TESTS)))
ASAN_BINS := $(addprefix build/asan/tests/,$(UNIT_TESTS))

# The unit, f64 and sanitizer programs share nothing (each works in its own temporary directory), so they run
# TEST_JOBS at a time (default: the cores). The e2e scripts marked private do too; the others share runs/, data/ and
# make's tree and run one at a time in a lane of their own beside them (tests/run_suite.sh). Each suite's arguments
# to tests/run_suite.sh are defined once (SUITE_*: its name, its environment, its programs) and serve both its own
# target and make test.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
SUITE_UNIT = --suite unit $(UNIT_BINS)
SUITE_F64 = --suite f64 $(F64_BINS)
SUITE_ASAN = --suite asan --env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 --env UBSAN_OPTIONS=print_stacktrace=1 \
  $(ASAN_BINS)
# The e2e scripts in name order (the tree lane's order: test_reproduce_ci leaves runs for test_reproduce_seeds), the
# longest private ones first, so that the pool does not end on them.
E2E_LONG_PRIVATE := tests/e2e/test_compare_spread.sh tests/e2e/test_twin_chain.sh
SUITE_E2E = --suite e2e $(E2E_LONG_PRIVATE) $(filter-out $(E2E_LONG_PRIVATE),$(sort $(wildcard tests/e2e/test_*.sh)))
test-unit: all $(UNIT_BINS)
	@SUITE_JOBS=$(TEST_JOBS) tests/run_suite.sh $(SUITE_UNIT)
test-f64: all $(F64_BINS)
	@SUITE_JOBS=$(TEST_JOBS) tests/run_suite.sh $(SUITE_F64)
test-asan: all $(ASAN_BINS)
	@SUITE_JOBS=$(TEST_JOBS) tests/run_suite.sh $(SUITE_ASAN)
# In a CPU build tree (make test's default) the CUDA programs are not built: one skip, saying how to build them.
test-cuda: all $(CUDA_BINS)
	@$(if $(CUDA_ENABLED),tests/run_suite.sh cuda $(CUDA_BINS),mkdir -p build; echo "cuda cuda-build-off 0 0 1" \
	  >>build/test-results.txt; echo "SKIP [cuda] the CUDA build is off in this tree: make test-cuda (or CUDA=1) builds it")
test-e2e: all
	@SUITE_JOBS=$(TEST_JOBS) tests/run_suite.sh $(SUITE_E2E)

# Every program the suites of make test run, built by one make with TEST_JOBS compilers (mk/fuzz.mk adds the fuzz
# harnesses of test_fuzz_regressions.sh where their compiler is installed).
.PHONY: test-programs
test-programs: all $(UNIT_BINS) $(F64_BINS) $(ASAN_BINS) emu-bins

# Everything, then one closing line "N passed, N failed" summed over the suites. First every program is built (and
# nvcc compiles the CUDA sources) at TEST_JOBS jobs; then the CUDA programs of a CUDA build tree run alone (they
# share the GPU); then the other suites run in ONE tests/run_suite.sh, their programs mixed in one pool (the longest
# first: the emulated CUDA scripts, then the e2e scripts) beside the tree lane, so that no core idles at the end of
# one suite while another has work. A failed build fails make test but does not stop it: the programs that were built
# still run (one that was not is counted failed).
test: deps-test
	@rm -f build/test-results.txt
	@$(MAKE) --no-print-directory -k -j$(TEST_JOBS) test-programs test-nvcc; status=$$?; \
	  $(MAKE) --no-print-directory test-cuda || status=1; \
	  SUITE_JOBS=$(TEST_JOBS) tests/run_suite.sh $(SUITE_CUDA_EMU) $(SUITE_E2E) $(SUITE_F64) $(SUITE_ASAN) $(SUITE_UNIT) \
	    || status=1; \
	  tests/summarize.sh build/test-results.txt; s2=$$?; [ $$status = 0 ] && [ $$s2 = 0 ]

# The fast loop while editing: the unit and double-precision tests, the layering and docs checks and one short
# end-to-end run (train, evaluate and report on tiny ci runs), ending with the same closing line as make test.
CHECK_E2E := tests/e2e/test_layering.sh tests/e2e/test_docs.sh tests/e2e/test_report_settings.sh
check: all $(UNIT_BINS) $(F64_BINS)
	@rm -f build/test-results.txt
	@SUITE_JOBS=$(TEST_JOBS) tests/run_suite.sh $(SUITE_UNIT) $(SUITE_F64) --suite e2e $(CHECK_E2E); status=$$?; \
	  tests/summarize.sh build/test-results.txt; s2=$$?; [ $$status = 0 ] && [ $$s2 = 0 ]

clean:
	rm -rf build bin

# The compilers' dependency files (-MMD -MP) of every build tree (obj, f64, asan, emu, fuzz). The empty rule tells
# make that they are made by nothing: without it make searched its pattern rules for a way to remake each of them
# (hundreds) at every start, 0.35 s of a 0.5 s parse, in every make that a test or a stage line starts.
DEP_FILES := $(shell find build -name '*.d' 2>/dev/null)
$(DEP_FILES): ;
-include $(DEP_FILES)
-include $(sort $(wildcard mk/*.mk))
