# Coverage-guided fuzzing (libFuzzer, Debian's clang) of every reader of outside bytes: tests/fuzz/fuzz_*.c, one
# harness per reader (tests/fuzz/README.md). The project's sources are built again with clang, ASan, UBSan and the
# fuzzer's coverage instrumentation into build/fuzz/ (without OpenMP: the readers do not use it and libFuzzer wants
# one thread).
#   make fuzz [FUZZ_SECONDS=N]   every harness for N seconds (default 60), one after another; fails on any crash,
#                                leak, timeout or out-of-memory, whose input is kept in build/fuzz/artifacts/<harness>/
#   make fuzz-one FUZZ=<name> [FUZZ_SECONDS=N]   one harness (name without fuzz_)
#   make fuzz-regressions        every committed input (seed corpus + tests/fuzz/regressions/) once through its
#                                harness (make test runs this through tests/e2e/test_fuzz_regressions.sh)
.PHONY: fuzz fuzz-one fuzz-bins fuzz-regressions deps-fuzz

FUZZ_CC ?= clang
OBJFUZZ := build/fuzz/obj
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS := $(filter-out -fopenmp,$(BASE_CFLAGS)) -Wno-unknown-pragmas -Wno-source-uses-openmp -O1 -g $(FUZZ_SAN) \
               -fsanitize=fuzzer-no-link
# The kernels call omp_get_* outside pragmas; libgomp provides them (single-threaded without -fopenmp).
FUZZ_LDLIBS := $(filter-out -fopenmp,$(LDLIBS)) -lgomp
FUZZ_HARNESSES := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS := $(addprefix build/fuzz/bin/fuzz_,$(FUZZ_HARNESSES))
FUZZ_CORE := build/fuzz/libcore.a
FUZZ_NN := build/fuzz/libnn.a
FUZZ_SECONDS ?= 60

deps-fuzz:
	@mk/deps.sh fuzz

$(OBJFUZZ)/%.o: %.c mk/fuzz.mk $(FLAGS_STAMP) | deps-fuzz
	@mkdir -p $(dir $@)
	$(call quiet,CC-FUZZ,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@
.PRECIOUS: $(OBJFUZZ)/%.o

$(FUZZ_CORE): $(patsubst %.c,$(OBJFUZZ)/%.o,$(CORE_SRC))
	$(call quiet,AR,$@)rm -f $@; ar rcs $@ $^
$(FUZZ_NN): $(patsubst %.c,$(OBJFUZZ)/%.o,$(NN_SRC))
	$(call quiet,AR,$@)rm -f $@; ar rcs $@ $^
build/fuzz/bin/fuzz_%: $(OBJFUZZ)/tests/fuzz/fuzz_%.o $(FUZZ_NN) $(FUZZ_CORE)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(FUZZ_LDLIBS)

fuzz-bins: $(FUZZ_BINS)

fuzz: fuzz-bins
	@tests/fuzz/run_fuzz.sh $(FUZZ_SECONDS) $(FUZZ_HARNESSES)

fuzz-one: $(if $(FUZZ),build/fuzz/bin/fuzz_$(FUZZ))
	@$(if $(FUZZ),tests/fuzz/run_fuzz.sh $(FUZZ_SECONDS) $(FUZZ),echo "fuzz-one: give FUZZ=<name>, one of: $(FUZZ_HARNESSES)" >&2; exit 2)

fuzz-regressions: fuzz-bins
	@tests/fuzz/run_regressions.sh $(FUZZ_HARNESSES)

# make test builds the harnesses with its other programs, where the compiler is installed (test_fuzz_regressions.sh
# skips without it). FUZZ_CC was checked when make started (mk/validate/user_values.mk: paths). Asked only when
# test-programs is a goal: a shell at every make start would cost every stage line and test.
ifneq ($(filter test-programs,$(MAKECMDGOALS)),)
test-programs: $(if $(shell command -v '$(firstword $(FUZZ_CC))' 2>/dev/null),fuzz-bins)
endif

