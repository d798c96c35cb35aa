# make diff A=RUN B=RUN [EXPERIMENT=tiny]: what differs between two runs (bin/compare --diff A B): the config keys
# whose values differ, then every metric (accuracy and mean answer loss per set and per module, final training loss,
# counts) with A, B, B-A and, where both runs have predictions.jsonl on the same examples, a paired 95% bootstrap
# interval of B-A over those examples. A and B are run names in runs/EXPERIMENT (dense_qa, dense_qa.seed2,
# dense_qa@1a2b3c4d: a sweep point or an earlier variant of dense_qa), paths (a run directory, a baseline record
# reports/baselines/ci/dense_qa.result.json or its prefix reports/baselines/ci/dense_qa), or the word baseline: the
# recorded baseline of the other side's run, reports/baselines/EXPERIMENT/RUN.result.json (make diff A=dense_qa
# B=baseline: how a run moved from its baseline, key by key and metric by metric). A name that is a run directory in
# runs/EXPERIMENT wins over a path of the same spelling. A diff is not a gate: it exits 0 whenever both runs can be
# read.
.PHONY: diff
# diff_resolve NAME WHICH OTHER: the directory or prefix bin/compare is given, or one error line and exit 2.
diff_resolve = if [ -z $(call shell_quote,$(1)) ]; then \
    echo "make diff: $(2) is missing: give two runs, e.g. make diff EXPERIMENT=$(EXPERIMENT) A=dense_qa B=dense_qa@1a2b3c4d (run names in runs/$(EXPERIMENT), paths, or B=baseline: A's recorded baseline)" >&2; \
    exit 2; \
  elif [ $(call shell_quote,$(1)) = baseline ]; then \
    other=$(call shell_quote,$(3)); other=$${other%/}; other=$${other\#\#*/}; other=$${other%.result.json}; \
    if [ -z "$$other" ] || [ "$$other" = baseline ]; then \
      echo "make diff: $(2)=baseline needs a run on the other side, e.g. make diff EXPERIMENT=$(EXPERIMENT) A=dense_qa B=baseline" >&2; \
      exit 2; \
    elif [ -f '$(BASELINE_DIR)'/"$$other".result.json ]; then $(2)_path='$(BASELINE_DIR)'/"$$other"; \
    else \
      recorded=$$(cd '$(BASELINE_DIR)' 2>/dev/null && for f in *.result.json; do [ -f "$$f" ] && printf ' %s' "$${f%.result.json}"; done); \
      echo "make diff: $(2)=baseline: no baseline record $(BASELINE_DIR)/$$other.result.json$${recorded:+ (recorded in $(BASELINE_DIR):$$recorded)}" >&2; \
      exit 2; \
    fi; \
  elif [ -d $(call shell_quote,$(RUNS_DIR)/$(1)) ]; then $(2)_path=$(call shell_quote,$(RUNS_DIR)/$(1)); \
  elif [ -d $(call shell_quote,$(1)) ] || [ -f $(call shell_quote,$(1).result.json) ]; then $(2)_path=$(call shell_quote,$(1)); \
  elif [ -f $(call shell_quote,$(1)) ] && [ $(call shell_quote,$(1)) != $(call shell_quote,$(patsubst %.result.json,%,$(1))) ]; then \
    $(2)_path=$(call shell_quote,$(patsubst %.result.json,%,$(1))); \
  else \
    runs=$$(cd '$(RUNS_DIR)' 2>/dev/null && for d in */; do [ -d "$$d" ] && printf ' %s' "$${d%/}"; done); \
    echo "make diff: $(2)=$(1): no run $(RUNS_DIR)/$(1) and no run directory or baseline record $(1)[.result.json]$${runs:+ (runs in $(RUNS_DIR):$$runs)}" >&2; \
    exit 2; \
  fi
diff: bin/compare
	@$(call diff_resolve,$(A),A,$(B)); $(call diff_resolve,$(B),B,$(A)); \
	  echo "bin/compare --diff $$A_path $$B_path"; bin/compare --diff "$$A_path" "$$B_path"
