# make reproduce: the whole experiment, end to end, with file-level dependencies.
#
#   make reproduce [EXPERIMENT=tiny] [BACKEND=cpu] [SOURCE=<from data.json>] [RUNS="dense_qa dense_answer ..."]
#                  [SEEDS=N]
#
# Chain: bin/fetch -> bin/tokenize -> per run bin/train, bin/evaluate, bin/analyze -> bin/report -> bin/compare
# (compare only when reports/baselines/EXPERIMENT exists). Editing experiments/EXP/RUN.json reruns only that run's
# train/evaluate/analyze and the report; editing experiments/EXP/data.json re-tokenizes (and refetches when its
# "fetch" section changed) and so retrains everything. Code changes rerun evaluate, analyze and report (cheap) but
# not fetch, tokenize or train (expensive; rerun them by deleting their outputs, e.g. make reproduce-clean).
#
# Single stages (RUN defaults to every run in RUNS):
#   make fetch | tokenize | report | compare            [EXPERIMENT=...]
#   make train RUN=dense_qa | evaluate RUN=dense_qa | analyze RUN=dense_qa
#   make runs/tiny/dense_qa/result.json                 (any output file is a target)
# Other knobs: RESUME=auto (default) passes --auto-resume to train: an interrupted run continues from its checkpoint
#   (bit-identically) when its config, length, training data and backend are unchanged, and starts over otherwise;
#   RESUME=1 passes --resume (continue, and refuse a checkpoint that does not match); RESUME=0 always starts over;
#   THREADS=N passes --threads N to train; EVAL_FLAGS / ANALYZE_FLAGS add flags (e.g. EVAL_FLAGS=--batch-size=32).
#   NPROC=W trains each run as W data-parallel ranks on this host (mpirun -np W --oversubscribe bin/train ...; the
#   runs' n_microbatch must be a multiple of W); NPROC unset or 1 is the single process.
# Seeds: SEEDS=N trains, evaluates and analyzes every run for seeds 1..N; without SEEDS, the "seeds" list of
#   experiments/EXP/seeds.json ({"comment": "...", "seeds": [1, 2, 3]}) if there is one; else each run once with its
#   config's own train.seed, exactly as without seeds. The seed equal to a run config's own train.seed keeps the
#   directory runs/EXP/RUN, any other seed S is runs/EXP/RUN.seed<S>, run with --set train.seed=S (data and tokenizer
#   are shared). Report and compare get every run directory (compare those that have a baseline RUN[.seed<S>]).

EXPERIMENT ?= tiny
BACKEND ?= cpu
RUNS ?= dense_qa dense_answer moeut_qa moeut_answer
RUN ?= $(RUNS)

EXP_DIR := experiments/$(EXPERIMENT)
DATA := data/$(EXPERIMENT)
RUNS_DIR := runs/$(EXPERIMENT)
REPORT_DIR := reports/$(EXPERIMENT)
BASELINE_DIR := reports/baselines/$(EXPERIMENT)
DATA_JSON := $(EXP_DIR)/data.json

# bin/fetch reads the "fetch" section of data.json itself (--config, strictly: a misspelt key is an error), including
# an optional "tokenizer_corpus_source" (experiment small: its arithmetic-only archive lacks characters such as M, T,
# x that the reference tokenizer saw, so the tokenizer corpus comes from the all-modules embedded sample). SOURCE=...
# given on the make command line overrides the section's "source".
FETCH_ARGS := $(strip --config $(DATA_JSON) $(if $(filter command line,$(origin SOURCE)),--source '$(SOURCE)'))

repro_comma := ,
repro_empty :=
repro_space := $(repro_empty) $(repro_empty)
repro_join = $(subst $(repro_space),$(repro_comma),$(strip $(1)))

# ---- run directories: every run for every seed (REPRO_RUN_DIRS, computed here only) ----
# The list needs each run config's own train.seed and a strict read of seeds.json, so bin/seeds computes it into a
# generated makefile that make includes (and so builds first, dry runs included); only when seeds are asked for and a
# pipeline goal is given. Its name holds SEEDS and RUNS, its prerequisites are the files it reads.
REPRO_RUN_DIRS := $(RUNS)
REPRO_SEEDS_JSON := $(wildcard $(EXP_DIR)/seeds.json)
ifneq ($(strip $(SEEDS))$(REPRO_SEEDS_JSON),)
ifneq ($(filter reproduce train evaluate analyze report compare $(RUNS_DIR)/% $(REPORT_DIR)/%,$(MAKECMDGOALS)),)
REPRO_SEEDS_MK := build/seeds/$(EXPERIMENT)-$(if $(strip $(SEEDS)),n$(strip $(SEEDS)),json)-$(call repro_join,$(RUNS)).mk
include $(REPRO_SEEDS_MK)
$(REPRO_SEEDS_MK): $(REPRO_SEEDS_JSON) $(foreach r,$(RUNS),$(EXP_DIR)/$(r).json) bin/seeds
	@mkdir -p $(@D)
	@dirs=$$(bin/seeds --experiment $(EXP_DIR) --runs $(call repro_join,$(RUNS)) \
	  $(if $(strip $(SEEDS)),--count '$(strip $(SEEDS))')) && echo "REPRO_RUN_DIRS := $$dirs" > $@
endif
endif
# A run directory's config name (RUN of RUN.seed<S>), the seed override of a RUN.seed<S> directory
# (with its leading space, so that a run of the config's own seed prints today's command exactly) and its config.
repro_config = $(firstword $(subst .seed, ,$(1)))
repro_seed_flags = $(if $(findstring .seed,$(1)), --set train.seed=$(lastword $(subst .seed, ,$(1))))
repro_cfg = $(EXP_DIR)/$(call repro_config,$(1)).json
# The run directories of the run names in $(1) (a name that is not in RUNS stands for its own directory).
repro_dirs_of = $(foreach d,$(REPRO_RUN_DIRS),$(if $(filter $(call repro_config,$(d)),$(1)),$(d))) \
  $(filter-out $(RUNS),$(1))

TRAIN_SUMMARIES := $(foreach r,$(REPRO_RUN_DIRS),$(RUNS_DIR)/$(r)/train_summary.json)
RESULTS := $(foreach r,$(REPRO_RUN_DIRS),$(RUNS_DIR)/$(r)/result.json)
PREDICTIONS := $(foreach r,$(REPRO_RUN_DIRS),$(RUNS_DIR)/$(r)/predictions.jsonl)
ANALYSES := $(foreach r,$(REPRO_RUN_DIRS),$(RUNS_DIR)/$(r)/analysis.json)
RESUME ?= auto
repro_resume_flag = $(if $(filter auto,$(RESUME)),--auto-resume,$(if $(filter 1 yes true,$(RESUME)),--resume,\
  $(if $(filter 0 no false,$(RESUME)),,$(error RESUME=$(RESUME): expected auto, 1 or 0))))
TRAIN_FLAGS = $(repro_resume_flag) $(if $(THREADS),--threads $(THREADS))
NPROC ?= 1
ifeq ($(shell [[ '$(NPROC)' =~ ^[1-9][0-9]*$$ ]] && echo ok),)
$(error NPROC=$(NPROC): expected a number of processes >= 1)
endif
# OpenMPI refuses to run as root unless told (CI runs as root).
TRAIN_LAUNCH = $(if $(filter-out 1,$(NPROC)),mpirun -np $(NPROC) --oversubscribe $(if $(filter 0,$(shell id -u)),--allow-run-as-root))

.PHONY: reproduce reproduce-check reproduce-clean fetch tokenize train evaluate analyze report compare
.PRECIOUS: $(RUNS_DIR)/%/train_summary.json $(RUNS_DIR)/%/result.json $(RUNS_DIR)/%/predictions.jsonl \
  $(RUNS_DIR)/%/analysis.json

reproduce: reproduce-check deps all $(REPORT_DIR)/report.html $(PREDICTIONS)
	@$(MAKE) --no-print-directory compare EXPERIMENT=$(EXPERIMENT) RUNS="$(RUNS)"
	@echo "reproduce: done: $(REPORT_DIR)/report.md, $(REPORT_DIR)/report.html"

reproduce-check:
	@test -f $(DATA_JSON) || { echo "reproduce: $(DATA_JSON) not found (EXPERIMENT=$(EXPERIMENT))" >&2; exit 1; }
	@for r in $(RUNS); do test -f $(EXP_DIR)/$$r.json || { echo "reproduce: $(EXP_DIR)/$$r.json not found" >&2; exit 1; }; done

# ---- data: fetch (reruns when its arguments, data.json or a shipped archive change) and tokenize ----
# fetch.args holds the fetch arguments; it is rewritten (at parse time, when a pipeline goal is asked for) only when
# they change (SOURCE= given or dropped), so its time stamp marks the last change. Doing it at parse time rather than
# in an always-run rule keeps `make -n` truthful (a dry run never writes it, so it does not show a refetch for a
# changed SOURCE either).
repro_dry_run := $(findstring n,$(firstword -$(MAKEFLAGS)))
ifneq ($(filter reproduce fetch tokenize train evaluate analyze report $(DATA)/% $(RUNS_DIR)/% $(REPORT_DIR)/%,$(MAKECMDGOALS)),)
ifeq ($(repro_dry_run),)
$(shell mkdir -p $(DATA) && { [ "$$(cat $(DATA)/fetch.args 2>/dev/null)" = "$(FETCH_ARGS)" ] || echo "$(FETCH_ARGS)" > $(DATA)/fetch.args; })
endif
endif
$(DATA)/fetch.args:
	@mkdir -p $(@D)
	@echo "$(FETCH_ARGS)" > $@

# Which archives data.json names is fetch's business (make does not parse JSON), so the stamp depends on every
# shipped archive and the dataset manifest; that is cheap because fetch compares archive hashes and leaves an up-to-date
# raw/ (and its manifest.json) untouched ("up to date"). The stamp lives inside raw/ so that deleting raw/ refetches.
REPRO_SHIPPED_DATA := $(wildcard datasets/*.tar.gz) datasets/dm_math_v1.0.json
$(DATA)/raw/fetch.stamp: $(DATA)/fetch.args $(DATA_JSON) $(REPRO_SHIPPED_DATA) | bin/fetch
	bin/fetch $(FETCH_ARGS) --out $(DATA)/raw
	@touch $@

# raw/manifest.json changes only when fetch extracted something new. Its do-nothing recipe makes make look at its time
# stamp again after the fetch, so an "up to date" fetch does not re-tokenize (and so retrain) anything; the '+' runs
# it in dry runs too, so `make -n` does the same instead of assuming the file changed.
$(DATA)/raw/manifest.json: $(DATA)/raw/fetch.stamp
	+@:

# tokenize writes tokenizer.json and the shards first and the manifest last (all renamed into place together).
$(DATA)/tokenize_manifest.json: $(DATA)/raw/manifest.json $(DATA_JSON) | bin/tokenize
	bin/tokenize --raw $(DATA)/raw --config $(DATA_JSON) --out $(DATA)

# ---- per run: train (train_summary.json is written last), evaluate, analyze ----
# Each run directory's outputs depend on its run config (RUN.json for RUN and RUN.seed<S>).
$(foreach d,$(REPRO_RUN_DIRS),$(eval $(addprefix $(RUNS_DIR)/$(d)/,train_summary.json result.json predictions.jsonl \
  analysis.json): $(EXP_DIR)/$(call repro_config,$(d)).json))
$(RUNS_DIR)/%/train_summary.json: $(DATA)/tokenize_manifest.json | bin/train
	$(TRAIN_LAUNCH) bin/train --config $(call repro_cfg,$*) --data $(DATA) --out $(RUNS_DIR)/$* --backend $(BACKEND) $(TRAIN_FLAGS)$(call repro_seed_flags,$*)

# One evaluate run writes both files (a pattern rule with two targets: one recipe makes both), so deleting either
# reruns it.
$(RUNS_DIR)/%/result.json $(RUNS_DIR)/%/predictions.jsonl: $(RUNS_DIR)/%/train_summary.json \
    $(DATA)/tokenize_manifest.json bin/evaluate
	bin/evaluate --run $(RUNS_DIR)/$* --config $(call repro_cfg,$*) --data $(DATA) --out $(RUNS_DIR)/$*/result.json \
	  --backend $(BACKEND) $(EVAL_FLAGS)$(call repro_seed_flags,$*)

$(RUNS_DIR)/%/analysis.json: $(RUNS_DIR)/%/train_summary.json $(DATA)/tokenize_manifest.json bin/analyze
	bin/analyze --run $(RUNS_DIR)/$* --config $(call repro_cfg,$*) --data $(DATA) --out $@ --backend $(BACKEND) $(ANALYZE_FLAGS)$(call repro_seed_flags,$*)

# ---- report (report.html is written last) and compare ----
$(REPORT_DIR)/report.html: $(RESULTS) $(ANALYSES) bin/report
	bin/report --experiment $(EXPERIMENT) --runs $(RUNS_DIR) --out $(REPORT_DIR) --expected-runs $(call repro_join,$(REPRO_RUN_DIRS))

# Compared: the runs' own-seed directories (a missing baseline is an error, as without seeds) and the other seeds'
# directories that have a baseline RUN.seed<S>.result.json (compare notes the others as having no baseline).
repro_compared = $(strip $(filter $(RUNS),$(REPRO_RUN_DIRS)) $(foreach d,$(filter-out $(RUNS),$(REPRO_RUN_DIRS)),\
  $(if $(wildcard $(BASELINE_DIR)/$(d).result.json),$(d))))
compare: bin/compare
	@if [ -d $(BASELINE_DIR) ]; then \
	  $(if $(repro_compared),bin/compare --baselines $(BASELINE_DIR) --runs $(RUNS_DIR) --only $(call repro_join,$(repro_compared)) --only-failures,:); \
	else \
	  echo "reproduce: no baselines in $(BASELINE_DIR): compare skipped"; \
	fi

# ---- single stages ----
fetch: $(DATA)/raw/fetch.stamp
tokenize: $(DATA)/tokenize_manifest.json
train: $(foreach r,$(call repro_dirs_of,$(RUN)),$(RUNS_DIR)/$(r)/train_summary.json)
evaluate: $(foreach r,$(call repro_dirs_of,$(RUN)),$(RUNS_DIR)/$(r)/result.json $(RUNS_DIR)/$(r)/predictions.jsonl)
analyze: $(foreach r,$(call repro_dirs_of,$(RUN)),$(RUNS_DIR)/$(r)/analysis.json)
report: $(REPORT_DIR)/report.html

# Removes this experiment's runs and report (not the data, not the baselines).
reproduce-clean:
	rm -rf $(RUNS_DIR) $(REPORT_DIR)

