# make reproduce: the whole experiment, end to end, with file-level dependencies.
#
#   make reproduce [EXPERIMENT=tiny] [BACKEND=cpu] [SOURCE=<from data.json>] [RUNS="dense_qa dense_answer ..."]
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
# Other knobs: RESUME=1 passes --resume to train (continue an interrupted run of the same config);
#   THREADS=N passes --threads N to train; EVAL_FLAGS / ANALYZE_FLAGS add flags (e.g. EVAL_FLAGS=--batch-size=32).

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

# The "fetch" section of data.json (flat scalars; bin/fetch takes them as options).
repro_json_str = $(shell sed -n 's/.*"$(1)"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' $(DATA_JSON) 2>/dev/null | head -n 1)
repro_json_num = $(shell sed -n 's/.*"$(1)"[[:space:]]*:[[:space:]]*\([0-9][0-9]*\).*/\1/p' $(DATA_JSON) 2>/dev/null | head -n 1)
SOURCE ?= $(call repro_json_str,source)
FETCH_FILTER := $(call repro_json_str,filter)
FETCH_PAIRS := $(call repro_json_num,tokenizer_corpus_pairs)
FETCH_ARGS := --source '$(SOURCE)' --filter '$(FETCH_FILTER)' $(if $(FETCH_PAIRS),--tokenizer-corpus-pairs $(FETCH_PAIRS))
# Optional "tokenizer_corpus_source": an archive whose train-easy files train the tokenizer instead of SOURCE's. The
# reference tokenizer was trained on all 54 train-easy modules; an arithmetic-only archive (experiment small) has only
# 9, which drops characters (M, T, x) to <unk>, so that experiment takes the corpus from the all-modules sample.
TOKCORPUS_SOURCE := $(call repro_json_str,tokenizer_corpus_source)
ifneq ($(TOKCORPUS_SOURCE),)
TOKCORPUS_RAW := $(DATA)/tokenizer_raw
TOKCORPUS_STAMP := $(TOKCORPUS_RAW)/fetch.stamp
TOKENIZE_EXTRA := --tokenizer-raw $(TOKCORPUS_RAW)
FETCH_ARGS += --tokenizer-corpus-source '$(TOKCORPUS_SOURCE)'
endif

repro_comma := ,
repro_empty :=
repro_space := $(repro_empty) $(repro_empty)
repro_join = $(subst $(repro_space),$(repro_comma),$(strip $(1)))

TRAIN_SUMMARIES := $(foreach r,$(RUNS),$(RUNS_DIR)/$(r)/train_summary.json)
RESULTS := $(foreach r,$(RUNS),$(RUNS_DIR)/$(r)/result.json)
ANALYSES := $(foreach r,$(RUNS),$(RUNS_DIR)/$(r)/analysis.json)
TRAIN_FLAGS := $(if $(filter 1 yes true,$(RESUME)),--resume) $(if $(THREADS),--threads $(THREADS))

.PHONY: reproduce reproduce-check reproduce-clean fetch tokenize train evaluate analyze report compare
.PRECIOUS: $(RUNS_DIR)/%/train_summary.json $(RUNS_DIR)/%/result.json $(RUNS_DIR)/%/analysis.json

reproduce: reproduce-check deps all $(REPORT_DIR)/report.html
	@$(MAKE) --no-print-directory compare EXPERIMENT=$(EXPERIMENT) RUNS="$(RUNS)"
	@echo "reproduce: done: $(REPORT_DIR)/report.md, $(REPORT_DIR)/report.html"

reproduce-check:
	@test -f $(DATA_JSON) || { echo "reproduce: $(DATA_JSON) not found (EXPERIMENT=$(EXPERIMENT))" >&2; exit 1; }
	@test -n "$(SOURCE)" || { echo "reproduce: $(DATA_JSON): no fetch.source (or pass SOURCE=...)" >&2; exit 1; }
	@for r in $(RUNS); do test -f $(EXP_DIR)/$$r.json || { echo "reproduce: $(EXP_DIR)/$$r.json not found" >&2; exit 1; }; done

# ---- data: fetch (reruns when its arguments change) and tokenize ----
# fetch.args holds the fetch arguments; it is rewritten (at parse time, when a pipeline goal is asked for) only when
# they change, so its time stamp marks the last change. Doing it at parse time rather than in an always-run rule keeps
# `make -n` truthful (a dry run never writes it, so it does not show a refetch for a changed SOURCE either).
repro_dry_run := $(findstring n,$(firstword -$(MAKEFLAGS)))
ifneq ($(filter reproduce fetch tokenize train evaluate analyze report $(DATA)/% $(RUNS_DIR)/% $(REPORT_DIR)/%,$(MAKECMDGOALS)),)
ifeq ($(repro_dry_run),)
$(shell mkdir -p $(DATA) && { [ "$$(cat $(DATA)/fetch.args 2>/dev/null)" = "$(FETCH_ARGS)" ] || echo "$(FETCH_ARGS)" > $(DATA)/fetch.args; })
endif
endif
$(DATA)/fetch.args:
	@mkdir -p $(@D)
	@echo "$(FETCH_ARGS)" > $@

# fetch leaves an up-to-date raw/ (and its manifest.json) untouched, so a stamp beside it marks a finished fetch; it
# lives inside raw/ so that deleting raw/ refetches.
$(DATA)/raw/fetch.stamp: $(DATA)/fetch.args $(if $(filter embedded,$(SOURCE)),datasets/dm_math_sample.tar.gz) | bin/fetch
	bin/fetch $(filter-out --tokenizer-corpus-source '$(TOKCORPUS_SOURCE)',$(FETCH_ARGS)) --out $(DATA)/raw
	@touch $@

ifneq ($(TOKCORPUS_SOURCE),)
$(TOKCORPUS_STAMP): $(DATA)/fetch.args | bin/fetch
	bin/fetch --source '$(TOKCORPUS_SOURCE)' --filter '$(FETCH_FILTER)' $(if $(FETCH_PAIRS),--tokenizer-corpus-pairs $(FETCH_PAIRS)) --out $(TOKCORPUS_RAW)
	@touch $@
endif

# tokenize writes tokenizer.json and the shards first and the manifest last (all renamed into place together).
$(DATA)/tokenize_manifest.json: $(DATA)/raw/fetch.stamp $(TOKCORPUS_STAMP) $(DATA_JSON) | bin/tokenize
	bin/tokenize --raw $(DATA)/raw --config $(DATA_JSON) --out $(DATA) $(TOKENIZE_EXTRA)

# ---- per run: train (train_summary.json is written last), evaluate, analyze ----
$(RUNS_DIR)/%/train_summary.json: $(EXP_DIR)/%.json $(DATA)/tokenize_manifest.json | bin/train
	bin/train --config $(EXP_DIR)/$*.json --data $(DATA) --out $(RUNS_DIR)/$* --backend $(BACKEND) $(TRAIN_FLAGS)

$(RUNS_DIR)/%/result.json: $(RUNS_DIR)/%/train_summary.json $(EXP_DIR)/%.json $(DATA)/tokenize_manifest.json bin/evaluate
	bin/evaluate --run $(RUNS_DIR)/$* --config $(EXP_DIR)/$*.json --data $(DATA) --out $@ --backend $(BACKEND) $(EVAL_FLAGS)

$(RUNS_DIR)/%/analysis.json: $(RUNS_DIR)/%/train_summary.json $(EXP_DIR)/%.json $(DATA)/tokenize_manifest.json bin/analyze
	bin/analyze --run $(RUNS_DIR)/$* --config $(EXP_DIR)/$*.json --data $(DATA) --out $@ --backend $(BACKEND) $(ANALYZE_FLAGS)

# ---- report (report.html is written last) and compare ----
$(REPORT_DIR)/report.html: $(RESULTS) $(ANALYSES) bin/report
	bin/report --experiment $(EXPERIMENT) --runs $(RUNS_DIR) --out $(REPORT_DIR) --expected-runs $(call repro_join,$(RUNS))

compare: bin/compare
	@if [ -d $(BASELINE_DIR) ]; then \
	  bin/compare --baselines $(BASELINE_DIR) --runs $(RUNS_DIR) --only $(call repro_join,$(RUNS)) --only-failures; \
	else \
	  echo "reproduce: no baselines in $(BASELINE_DIR): compare skipped"; \
	fi

# ---- single stages ----
fetch: $(DATA)/raw/fetch.stamp
tokenize: $(DATA)/tokenize_manifest.json
train: $(foreach r,$(RUN),$(RUNS_DIR)/$(r)/train_summary.json)
evaluate: $(foreach r,$(RUN),$(RUNS_DIR)/$(r)/result.json)
analyze: $(foreach r,$(RUN),$(RUNS_DIR)/$(r)/analysis.json)
report: $(REPORT_DIR)/report.html

# Removes this experiment's runs and report (not the data, not the baselines).
reproduce-clean:
	rm -rf $(RUNS_DIR) $(REPORT_DIR)

