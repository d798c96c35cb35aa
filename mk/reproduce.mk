# make reproduce: the whole experiment, end to end, with file-level dependencies.
#
#   make reproduce [EXPERIMENT=tiny] [BACKEND=cpu] [SOURCE=<from data.json>] [RUNS="dense_qa dense_answer ..."]
#
# Chain: bin/fetch -> bin/tokenize -> per run [bin/upcycle] bin/train, bin/evaluate, bin/analyze -> bin/report ->
# bin/compare
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
#   RESUME=1 passes --resume (continue, and refuse a checkpoint that does not match); RESUME=0 trains the asked runs
#   again from scratch: each trained or partly trained run there is first kept aside as RUN@<variant> (below), never
#   deleted; THREADS=N passes --threads N to train; EVAL_FLAGS / ANALYZE_FLAGS add flags (e.g. EVAL_FLAGS=--batch-size=32).
#   SET="train.lr=1e-3 train.precision=bf16" passes --set KEY=VALUE (one per word) to train, evaluate and analyze of
#   every run; NPROC=W trains each run as W data-parallel ranks on this host (mpirun -np W --oversubscribe
#   bin/train ...; inside a Slurm allocation srun --mpi=pmix -n W; the runs' n_microbatch must be a multiple of W);
#   NPROC 1 is the single process. A changed NPROC reruns train, which continues an interrupted run on the new count
#   and leaves a finished one as it is (the same windows and micro-batches: pipeline/base/dist.md), and re-evaluates;
#   RESUME=0 trains again. `make help` lists
#   every target and variable.
# Variants: a run directory holds one effective config. When the config of runs/EXP/RUN changes (the file is edited,
#   or SET differs), the finished run there is first moved aside to runs/EXP/RUN@<variant> (bin/runs --keep), so
#   the report, runs.csv and `make diff` still have it; going back to a kept config brings it back instead of
#   retraining. `make sweep ... SWEEP="K=V1,V2 ..."` trains a grid, each point in runs/EXP/RUN@<variant>.
#   `make prune` deletes the kept variants and sweep points.
# Seeds: SEEDS=N trains, evaluates and analyzes every run for seeds 1..N; without SEEDS, the "seeds" list of
#   experiments/EXP/seeds.json ({"comment": "...", "seeds": [1, 2, 3]}) if there is one; else each run once with its
#   config's own train.seed, exactly as without seeds. The seed equal to a run config's own train.seed keeps the
#   directory runs/EXP/RUN, any other seed S is runs/EXP/RUN.seed<S>, run with --set train.seed=S (data and tokenizer
#   are shared). Report and compare get every run directory (compare those that have a baseline RUN[.seed<S>]).
#
# What make knows about a run's training: its config file and the data (prerequisites), plus a per-run stamp
# runs/EXP/RUN/train.inputs holding the inputs given on the command line (BACKEND, NPROC, SET). A stamp is rewritten
# only when its text changes, so changing any of them reruns that run's train (train --auto-resume then starts over,
# saying why, except for NPROC: a finished run stands, an interrupted one continues) and re-evaluates and
# re-analyzes it; leaving them alone leaves the run alone.
#
# Console: `make reproduce` builds, then plans: a dry run of the stages (make -n reproduce-stages, below) lists which
# stages will run, so that this file's rules are the one description of the stage graph, and bin/runs --stages
# (pipeline/plan/stage_plan.h) says how many and about how long they take (an estimate from the effective configs, the
# throughput of earlier runs, make's -jN and THREADS: the model is in pipeline/plan/stage_plan.h and `make help`;
# `make reproduce-plan` prints just that line); then it runs them, each
# announced as "[k/N] stage run (experiment, backend)" with the time left (mk/reproduce_stage.sh: once enough has run,
# the estimate is scaled by the measured rate and says "measured"), then compares with the baselines. An interrupted
# train prints the command that continues (REPRO_COMMAND, below). With nothing to do it says everything is up to date.

EXPERIMENT ?= tiny
BACKEND ?= cpu
NPROC ?= 1
SET ?=
# The runs of an experiment: the paper's four that experiments/EXP has, in the paper's order, then its other run
# configs by name (every experiments/EXP/*.json but data.json and seeds.json; e.g. the ablations' variants).
REPRO_PAPER_RUNS := dense_qa dense_answer moeut_qa moeut_answer
repro_exp_configs = $(filter-out data seeds,$(patsubst experiments/$(EXPERIMENT)/%.json,%,\
  $(wildcard experiments/$(EXPERIMENT)/*.json)))
RUNS ?= $(strip $(filter $(repro_exp_configs),$(REPRO_PAPER_RUNS)) \
  $(sort $(filter-out $(REPRO_PAPER_RUNS),$(repro_exp_configs))))
RUN ?= $(RUNS)

EXP_DIR := experiments/$(EXPERIMENT)
DATA := data/$(EXPERIMENT)
RUNS_DIR := runs/$(EXPERIMENT)
REPORT_DIR := reports/$(EXPERIMENT)
BASELINE_DIR := reports/baselines/$(EXPERIMENT)
DATA_JSON := $(EXP_DIR)/data.json

# "a b c" -> "a,b,c" (for --only and --expected-runs, and the seeds makefile's name below).
repro_comma := ,
repro_empty :=
repro_space := $(repro_empty) $(repro_empty)
repro_join = $(subst $(repro_space),$(repro_comma),$(strip $(1)))

# A dry run (make -n, also -q and -t: no recipe runs; MAKE_NO_RECIPES in the Makefile).
repro_dry_run := $(MAKE_NO_RECIPES)

# ---- the runs: the one place where run names expand (seeds and sweeps hook in here) ----
# The run directories and each one's overrides come from bin/runs (pipeline/plan/run_plan.h), which reads the run
# configs, seeds.json, SEEDS, SET and SWEEP strictly and validates every effective config as train will; it writes them
# into a generated makefile that make includes (and so builds first, dry runs included) whenever a pipeline goal is
# given. Its name holds a hash of the code version, SEEDS, RUNS, SET and SWEEP; its prerequisites are the files it
# reads, and bin/runs only when there is none: make remakes included makefiles (and their prerequisites) even under -n,
# and a bin/runs out of date only by the compile flags (BACKEND=cuda) would then compile the CUDA backend in a dry run;
# a new bin/runs comes with a new code version, hence a new plan file.
#   without SWEEP: runs/EXP/RUN for a run config's own seed, RUN.seed<S> for another seed S (the current variant);
#   with SWEEP:    runs/EXP/RUN@<variant>[.seed<S>] for each grid point (variant: a hash of its effective config).
# repro_config: the config name of a run directory; repro_run_sets: its --set overrides (KEY=VALUE words).
REPRO_RUN_DIRS := $(RUNS)
REPRO_SEEDS_JSON := $(wildcard $(EXP_DIR)/seeds.json)
repro_plan_goals := reproduce reproduce-stages reproduce-plan train evaluate analyze report export compare repro-inputs \
  $(RUNS_DIR)/% $(REPORT_DIR)/%
ifneq ($(filter $(repro_plan_goals),$(MAKECMDGOALS)),)
repro_plan_key := $(shell printf '%s\n' $(call shell_quote,$(CODE_VERSION)|$(strip $(SEEDS))|$(RUNS)|$(strip \
  $(SET))|$(strip $(SWEEP))|$(NPROC)) | md5sum | cut -c1-12)
REPRO_SEEDS_MK := build/plan/$(EXPERIMENT)-$(repro_plan_key).mk
repro_plan_opts = --experiment $(EXP_DIR) $(if $(strip $(SEEDS)),--count \
  '$(strip $(SEEDS))') --set $(call shell_quote,$(strip $(SET))) --sweep $(call shell_quote,$(strip $(SWEEP)))
# NPROC reaches bin/runs in its environment, not as an option, so that a bin/runs built before it knew NPROC (make
# runs it before rebuilding anything) still plans, and train refuses instead.
repro_runs = REPRO_NPROC='$(NPROC)' bin/runs
include $(REPRO_SEEDS_MK)
# A refusal is recorded IN the generated makefile (REPRO_SEEDS_ERROR) rather than as a failed recipe: under make -k
# (also make test's -k, which reaches inner makes through MAKEFLAGS) a failed recipe let make go on with the run
# list of an earlier, stale file. repro_seeds_refusal raises it as $(error) where the first recipe line of every
# stage, of the run stamps, of reproduce-check and of compare is expanded: after make has remade this file (so a fixed
# file is read again; not in a prerequisite list, whose second expansion make may do before remaking) and before
# any work, so a refused SET, SWEEP or NPROC changes no file. ('$$' -> '$$$$' and '#' -> '\#' keep the message literal.)
$(REPRO_SEEDS_MK): $(REPRO_SEEDS_JSON) $(foreach r,$(RUNS),$(EXP_DIR)/$(r).json) $(if $(wildcard bin/runs),,bin/runs)
	@mkdir -p $(@D)
	@if $(repro_runs) --runs $(call repro_join,$(RUNS)) $(repro_plan_opts) >$@.tmp 2>$@.err; then :; else \
	  msg=$$(grep -m1 . $@.err | sed -e 's/\$$/$$$$/g' -e 's/#/\\#/g'); \
	  echo "REPRO_SEEDS_ERROR := $${msg:-bin/runs failed without a message}" > $@.tmp; \
	fi; rm -f $@.err; mv -f $@.tmp $@
endif
repro_seeds_refusal = $(if $(REPRO_SEEDS_ERROR),$(error $(REPRO_SEEDS_ERROR)))
# A run directory's config name (RUN of RUN@<variant>.seed<S>); its overrides: those of the plan, else (a directory
# named on the command line that the plan does not list) SET, plus train.seed=S for RUN.seed<S>.
repro_config = $(firstword $(subst @, ,$(firstword $(subst .seed, ,$(1)))))
repro_run_sets = $(if $(filter undefined,$(origin REPRO_DIR_SETS.$(1))),$(SET) $(if $(findstring .seed,$(1)),\
  train.seed=$(lastword $(subst .seed, ,$(1)))),$(REPRO_DIR_SETS.$(1)))
# The run directories of the run names in $(1) (a name that is not in RUNS stands for its own directory).
repro_run_dirs = $(foreach d,$(REPRO_RUN_DIRS),$(if $(filter $(call repro_config,$(d)),$(1)),$(d))) \
  $(filter-out $(RUNS),$(1))
REPRO_RUN_SELECTED = $(strip $(call repro_run_dirs,$(RUN)))
repro_set_flags = $(foreach s,$(call repro_run_sets,$(1)),--set '$(s)')

# ---- checks before anything runs: an unknown experiment or run is one clear error (parse time, exit 2), before
# anything is moved, written or deleted ----
REPRO_GOALS := reproduce reproduce-stages reproduce-plan reproduce-check fetch tokenize train evaluate analyze report \
  export compare reproduce-clean $(DATA)/% $(RUNS_DIR)/% $(REPORT_DIR)/%
ifneq ($(filter $(REPRO_GOALS),$(MAKECMDGOALS)),)
ifeq ($(wildcard $(DATA_JSON)),)
$(error EXPERIMENT=$(EXPERIMENT): $(DATA_JSON) not found; the experiments are: \
  $(patsubst experiments/%/data.json,%,$(wildcard experiments/*/data.json)))
endif
repro_missing_configs := $(filter-out $(wildcard $(EXP_DIR)/*.json),\
  $(foreach r,$(sort $(REPRO_RUN_DIRS) $(REPRO_RUN_SELECTED)),$(EXP_DIR)/$(call repro_config,$(r)).json))
ifneq ($(repro_missing_configs),)
$(error $(repro_missing_configs): not found (RUNS/RUN name a run with no config); the runs of $(EXPERIMENT) are: \
  $(repro_exp_configs))
endif
endif

# Nothing is overwritten: before anything runs, bin/runs --keep moves a trained current run whose config differs
# from the wanted one aside to runs/EXP/RUN@<its variant> (and brings back a kept run of the wanted config); with
# RESUME=0 (--start-over) it moves every trained run of this make aside and brings nothing back, so that train starts
# each from scratch; pipeline/plan/run_variants.h. Never in a dry run (make -n writes nothing) or for make
# reproduce-plan alone (planning is read-only), nor for a sweep (its points have names of their own: RESUME=0 is
# refused there). A failure stops make before any stage.
# The run configs this make works on (RUN narrows train, evaluate and analyze).
repro_asked_configs := $(filter $(sort $(foreach r,$(RUN),$(call repro_config,$(r)))),$(RUNS))
# RESUME=0: the runs asked for are trained again from scratch (the train_summary.json of each also depends on the
# phony repro-force, so that make -n lists their trains too; a run only needed by them, such as an upcycled run's
# dense source, is not started over).
repro_start_over := $(if $(filter 0 no false,$(RESUME)),--start-over)
repro_start_over_force = $(if $(repro_start_over),$(if $(filter $(call repro_config,$(1)),$(repro_asked_configs)),\
  repro-force))
ifneq ($(and $(repro_start_over),$(strip $(SWEEP)),$(filter sweep $(repro_plan_goals),$(MAKECMDGOALS))),)
$(error RESUME=$(RESUME) with SWEEP: a sweep point has no other name to be kept under; to train points again, \
  delete them first (make prune EXPERIMENT=$(EXPERIMENT) deletes every kept run and sweep point))
endif
# The goals that only plan, print or read: with nothing else asked for, make writes, moves and deletes nothing
# (compare reads the runs as they are: a run whose config was edited is compared, and its difference named, not moved
# out of its way).
repro_read_only_goals := reproduce-plan compare
repro_writing_goals := $(filter-out $(repro_read_only_goals),$(MAKECMDGOALS))
# The keep is the recipe of an included makefile, build/plan/EXP-keep.mk, so that nothing moves while make reads its
# makefiles: make reads them all, remakes that file (the keep runs, once: the rule exists only before make's restart),
# then starts over (GNU make's restart after remaking a makefile) and reads the directories as the keep left them.
# The recipe never fails: a refusal of bin/runs is written into the file as REPRO_KEEP_ERROR and raised when the
# restarted make reads it (under make -k a failed recipe would let make go on), before any stage.
ifneq ($(filter $(repro_plan_goals),$(repro_writing_goals)),)
ifeq ($(repro_dry_run),)
ifeq ($(strip $(SWEEP)),)
ifneq ($(wildcard bin/runs),)
# Only the runs this make works on.
repro_keep_runs := $(call repro_join,$(repro_asked_configs))
ifneq ($(repro_keep_runs),)
repro_keep_mk := build/plan/$(EXPERIMENT)-keep.mk
-include $(repro_keep_mk)
ifeq ($(MAKE_RESTARTS),)
.PHONY: repro-keep-now
# A run moved: the report and runs.csv described the runs as they were, so they go (all three, so that no stale
# report.md is left) and are made again by this make's report and export.
$(repro_keep_mk): repro-keep-now
	@mkdir -p $(@D); rm -f $@; \
	if $(repro_runs) --runs $(repro_keep_runs) $(repro_plan_opts) --keep $(RUNS_DIR) $(repro_start_over) \
	  >$@.log 2>&1; then \
	  if [ -s $@.log ]; then cat $@.log; \
	    echo "runs: $(REPORT_DIR)/report.md, report.html and runs.csv removed: they described the runs before the move"; \
	    rm -f $(REPORT_DIR)/runs.csv $(REPORT_DIR)/report.html $(REPORT_DIR)/report.md; fi; \
	  echo '# bin/runs --keep: done' > $@.tmp; \
	else \
	  msg=$$(grep -m1 . $@.log | sed -e 's/\$$/$$$$/g' -e 's/#/\\#/g'); \
	  echo "REPRO_KEEP_ERROR := $${msg:-bin/runs --keep failed without a message}" > $@.tmp; \
	fi; rm -f $@.log; mv -f $@.tmp $@
else
ifneq ($(REPRO_KEEP_ERROR),)
$(error $(REPRO_KEEP_ERROR))
endif
endif
endif
endif
endif
endif
endif

# The command the user typed (the top-level make's goals and command-line variables): bin/train prints it when
# interrupted, as the command that continues.
ifeq ($(MAKELEVEL),0)
repro_cmdline_vars := $(foreach v,$(sort $(.VARIABLES)),$(if $(filter command line,$(origin $(v))),$(v)))
repro_shell_word = $(if $(findstring $(repro_space),$(1))$(findstring ",$(1))$(findstring ',$(1)),'$(subst ','\'',$(1))',$(1))
export REPRO_COMMAND := make $(strip $(MAKECMDGOALS) $(foreach v,$(repro_cmdline_vars),$(v)=$(call \
  repro_shell_word,$(value $(v)))))
endif

# bin/fetch reads the "fetch" section of data.json itself (--config, strictly: a misspelt key is an error), including
# an optional "tokenizer_corpus_source" (experiment small: its arithmetic-only archive lacks characters such as M, T,
# x that the reference tokenizer saw, so the tokenizer corpus comes from the all-modules embedded sample). SOURCE=...
# given on the make command line overrides the section's "source".
FETCH_ARGS := $(strip --config $(DATA_JSON) $(if $(filter command line,$(origin SOURCE)),--source \
  $(call shell_quote,$(SOURCE))))


TRAIN_SUMMARIES := $(foreach r,$(REPRO_RUN_DIRS),$(RUNS_DIR)/$(r)/train_summary.json)
RESULTS := $(foreach r,$(REPRO_RUN_DIRS),$(RUNS_DIR)/$(r)/result.json)
PREDICTIONS := $(foreach r,$(REPRO_RUN_DIRS),$(RUNS_DIR)/$(r)/predictions.jsonl)
ANALYSES := $(foreach r,$(REPRO_RUN_DIRS),$(RUNS_DIR)/$(r)/analysis.json)
TRAIN_INPUTS := $(foreach r,$(REPRO_RUN_DIRS),$(RUNS_DIR)/$(r)/train.inputs)
RESUME ?= auto
repro_resume_flag = $(if $(filter auto,$(RESUME)),--auto-resume,$(if $(filter 1 yes true,$(RESUME)),--resume,\
  $(if $(filter 0 no false,$(RESUME)),,$(error RESUME=$(RESUME): expected auto, 1 or 0))))
TRAIN_FLAGS = $(repro_resume_flag) $(if $(THREADS),--threads $(THREADS))
# What train, evaluate and analyze of a run are all given (each stage's command stays one printed line: tests grep
# "bin/train --config ..." and the flags in make's output).
repro_stage_args = --config $(EXP_DIR)/$(call repro_config,$(1)).json --data $(DATA) --backend $(BACKEND) \
  $(call repro_set_flags,$(1))
# How train is started: NPROC ranks under mpirun, else directly. OpenMPI refuses to run as root unless told (CI runs
# as root). Inside a Slurm allocation (SLURM_JOB_ID set: a batch script or a salloc shell) the ranks are a job step,
# srun --mpi=pmix, which places them on the allocation's nodes, CPUs and GPUs; LAUNCHER=mpirun|srun overrides
# (pipeline/base/dist.md). The launcher changes no number (tests/e2e/test_slurm.sh), so it is not in the stamp.
# (NPROC, LAUNCHER, RESUME and BACKEND were checked against their grammars when make started:
# mk/validate/user_values.mk.)
LAUNCHER ?= $(if $(SLURM_JOB_ID),srun,mpirun)
repro_launch_mpirun = mpirun -np $(NPROC) --oversubscribe$(if $(filter 0,$(shell id -u)), --allow-run-as-root)
repro_launch_srun = srun --mpi=pmix -n $(NPROC)
REPRO_TRAIN_LAUNCH = $(if $(filter-out 1,$(NPROC)),$(repro_launch_$(LAUNCHER)) )

.PHONY: reproduce reproduce-check reproduce-stages reproduce-plan reproduce-clean fetch tokenize train evaluate \
  analyze report export compare repro-force repro-inputs
.PRECIOUS: $(RUNS_DIR)/%/train_summary.json $(RUNS_DIR)/%/result.json $(RUNS_DIR)/%/predictions.jsonl \
  $(RUNS_DIR)/%/analysis.json $(RUNS_DIR)/%/train.inputs $(RUNS_DIR)/%/init.safetensors

# The plan of one make reproduce (bin/runs --stages writes it, mk/reproduce_stage.sh reads it).
REPRO_PLAN_DIR := build/reproduce/$(EXPERIMENT)
# make's job count, for the estimate: in a recipe, MAKEFLAGS holds -jN (GNU make 4.3 and later; -j alone for no
# limit); none: one job. (At parse time it does not: hence a recursive variable, expanded in the recipes.)
repro_make_jobs = $(firstword $(filter -j%,$(MAKEFLAGS)))
# Which stages will run is make's to say: a dry run of the stages (make -n reproduce-stages; this make's command-line
# variables reach it in MAKEFLAGS) prints the first line of each stage's recipe, "$(repro_stage_script) STAGE [RUN]"
# (repro_stage below), and those lines, less the script's name, are the stage list that bin/runs --stages checks,
# estimates and writes into the plan. The dry run's messages are shown only when it fails: otherwise they are those of
# this make's own reading of the same makefiles, or that a dry run gets no job slots of make -jN. (This recipe line
# names make through repro_dry_stages, not as $(MAKE): a line naming $(MAKE) runs under make -n too, and
# `make -n reproduce` must only print the plan.)
repro_stage_script := mk/reproduce_stage.sh
repro_plan_dir_quoted = $(call shell_quote,$(REPRO_PLAN_DIR))
repro_dry_stages = $(MAKE) -n --no-print-directory reproduce-stages
repro_plan_stages = mkdir -p $(repro_plan_dir_quoted) && \
  if $(repro_dry_stages) >$(repro_plan_dir_quoted)/dry-run 2>$(repro_plan_dir_quoted)/dry-run.err; then \
    sed -n 's|^$(repro_stage_script) ||p' $(repro_plan_dir_quoted)/dry-run >$(repro_plan_dir_quoted)/stage-list && \
    bin/runs --runs $(call repro_join,$(RUNS)) $(repro_plan_opts) --stages $(repro_plan_dir_quoted) \
      --stage-list $(repro_plan_dir_quoted)/stage-list --backend '$(BACKEND)' --nproc '$(NPROC)' --resume '$(RESUME)' \
      $(if $(THREADS),--threads '$(THREADS)') $(if $(repro_make_jobs),--jobs '$(patsubst -j%,%,$(repro_make_jobs))') \
      --data-dir $(call shell_quote,$(DATA)) --runs-dir $(call shell_quote,$(RUNS_DIR)); \
  else cat $(repro_plan_dir_quoted)/dry-run.err >&2; exit 2; fi
# What mk/reproduce_stage.sh needs to know (environment variables of their own names).
export REPRO_EXPERIMENT := $(EXPERIMENT)
export REPRO_BACKEND := $(BACKEND)
export REPRO_PLAN
# The line that starts each stage's recipe: "[k/N] train dense_qa (tiny, cpu): ..." (also names the stage in make -n).
repro_stage = $(repro_seeds_refusal)@$(repro_stage_script) $(1) $(2)

# Build, plan (only the stages that will run are counted), run the stages, compare. The stages are a $(MAKE) line, so
# `make -n reproduce` lists the stage commands; the plan is not (a dry run prints it and writes nothing). The plan
# comes after the keep (the recipe of an included makefile, above), so its dry run sees the directories as the stages
# will. (compare's make gets RESUME=auto: under RESUME=0 it would otherwise keep aside the runs just trained.)
reproduce: reproduce-check
	@$(MAKE) all
	@$(repro_plan_stages)
	@$(MAKE) reproduce-stages REPRO_PLAN=$(REPRO_PLAN_DIR)
	@$(MAKE) compare COMPARE_CONFIG_CHANGE=note RESUME=auto
	@echo "reproduce: done: $(REPORT_DIR)/report.md, $(REPORT_DIR)/report.html"

# The predictions first: one evaluate writes them and result.json, so the report and runs.csv, considered after them,
# see a result.json that this make remakes (considered before, they were judged up to date when only predictions.jsonl
# was missing, and stayed older than the new result.json).
reproduce-stages: $(PREDICTIONS) $(REPORT_DIR)/report.html $(REPORT_DIR)/runs.csv

# The plan alone: what make reproduce would run now and about how long it takes (one line; the stages in
# $(REPRO_PLAN_DIR)/plan). Needs bin/runs (mk/gpu/run.sh: what is left after a job's time limit). It moves nothing, so
# its dry run judges the run directories as they are: a run that make reproduce would first bring back (bin/runs
# --keep) counts as make judges the directory it would replace (stages/README.md).
reproduce-plan:
	$(repro_seeds_refusal)@$(repro_plan_stages)

reproduce-check:
	$(repro_seeds_refusal)@test -f $(DATA_JSON) || { echo "reproduce: $(DATA_JSON) not found (EXPERIMENT=$(EXPERIMENT))" >&2; exit 1; }

# ---- data: fetch (reruns when its arguments, data.json or a shipped archive change) and tokenize ----
# fetch.args holds the fetch arguments, a stamp like train.inputs below: when its text differs from this make's
# (SOURCE= given or dropped) it depends on the phony repro-force, so its recipe rewrites it (after the plan's
# refusal: a refused command writes nothing) and fetch reruns; a stamp that matches is never touched, so its time
# stamp marks the last change. make -n prints the rewrite and the fetch it brings, and writes nothing.
repro_fetch_args_read = $(strip $(file <$(DATA)/fetch.args))
repro_fetch_args_stale = $(if $(subst $(FETCH_ARGS),,$(repro_fetch_args_read))$(subst \
  $(repro_fetch_args_read),,$(FETCH_ARGS)),repro-force)
$(DATA)/fetch.args: $$(repro_fetch_args_stale)
	$(repro_seeds_refusal)@mkdir -p $(@D)
	@printf '%s\n' $(call shell_quote,$(FETCH_ARGS)) > $@

# Which archives data.json names is fetch's business (make does not parse JSON), so the stamp depends on every
# shipped archive and the dataset manifest; that is cheap because fetch compares archive hashes and leaves an up-to-date
# raw/ (and its manifest.json) untouched ("up to date"). The stamp lives inside raw/ so that deleting raw/ refetches.
REPRO_SHIPPED_DATA := $(wildcard datasets/*.tar.gz) datasets/dm_math_v1.0.json
$(DATA)/raw/fetch.stamp: $(DATA)/fetch.args $(DATA_JSON) $(REPRO_SHIPPED_DATA) | bin/fetch
	$(call repro_stage,fetch)
	bin/fetch $(FETCH_ARGS) --out $(DATA)/raw
	@touch $@

# raw/manifest.json changes only when fetch extracted something new. Its do-nothing recipe makes make look at its time
# stamp again after the fetch, so an "up to date" fetch does not re-tokenize (and so retrain) anything; the '+' runs
# it in dry runs too, so `make -n` does the same instead of assuming the file changed.
$(DATA)/raw/manifest.json: $(DATA)/raw/fetch.stamp
	+@:

# tokenize writes tokenizer.json and the shards first and the manifest last (all renamed into place together).
$(DATA)/tokenize_manifest.json: $(DATA)/raw/manifest.json $(DATA_JSON) | bin/tokenize
	$(call repro_stage,tokenize)
	bin/tokenize --raw $(DATA)/raw --config $(DATA_JSON) --out $(DATA)

# ---- per run: the stamp of the command-line training inputs, train, evaluate, analyze ----
# The stamp's text; it is compared with the file when make considers the stamp (second expansion: before any recipe
# runs) and, when it differs, the stamp depends on the phony repro-force, so its recipe rewrites it (printed, not run,
# by make -n, which then truthfully lists the retrain). A stamp that matches is never touched.
repro_inputs_text = backend=$(BACKEND) nproc=$(NPROC) set=$(call repro_join,$(sort $(call repro_run_sets,$(1))))
repro_inputs_file = $(RUNS_DIR)/$(1)/train.inputs
# The file is read through $(strip): GNU make 4.3's $(file <F) inside a function's argument sometimes keeps the file's
# trailing newline (for stamps of about 200-500 bytes, i.e. a SET of many keys), and then a stamp never matched its own
# text, so every make call retrained the run (test_make_console.sh checks SETs of 4 to 16 keys).
repro_inputs_read = $(strip $(file <$(call repro_inputs_file,$(1))))
repro_inputs_stale = $(if $(subst $(call repro_inputs_text,$(1)),,$(call repro_inputs_read,$(1)))$(subst \
  $(call repro_inputs_read,$(1)),,$(call repro_inputs_text,$(1))),repro-force)
$(RUNS_DIR)/%/train.inputs: $$(call repro_inputs_stale,$$*)
	$(repro_seeds_refusal)@mkdir -p $(@D)
	@echo '$(call repro_inputs_text,$*)' >$@
repro-force:

# An upcycled run (its config's "upcycle" section; bin/runs names the dense run directory it is converted from,
# REPRO_UPCYCLE_FROM.<dir>) starts from runs/EXP/<dir>/init.safetensors, which bin/upcycle converts from the finished
# dense run's model.safetensors (model/upcycle.h); train leaves the file in place when it starts over.
repro_upcycle_from = $(REPRO_UPCYCLE_FROM.$(1))
repro_upcycle_init = $(if $(call repro_upcycle_from,$(1)),$(RUNS_DIR)/$(1)/init.safetensors)
# (one printed line per stage command: tests read the commands of make -n line by line)
repro_init_flag = $(if $(call repro_upcycle_init,$(1)), --init-from $(call repro_upcycle_init,$(1)))
$(RUNS_DIR)/%/train_summary.json: $(EXP_DIR)/$$(call repro_config,$$*).json $(DATA)/tokenize_manifest.json \
    $(RUNS_DIR)/%/train.inputs $$(call repro_upcycle_init,$$*) $$(call repro_start_over_force,$$*) | bin/train
	$(call repro_stage,train,$*)
	$(REPRO_TRAIN_LAUNCH)bin/train $(call repro_stage_args,$*) --out $(RUNS_DIR)/$* $(TRAIN_FLAGS)$(call repro_init_flag,$*)

$(RUNS_DIR)/%/init.safetensors: $$(RUNS_DIR)/$$(call repro_upcycle_from,$$*)/train_summary.json \
    $(EXP_DIR)/$$(call repro_config,$$*).json $(RUNS_DIR)/%/train.inputs | bin/upcycle
	$(call repro_stage,upcycle,$*)
	bin/upcycle --config $(EXP_DIR)/$(call repro_config,$*).json $(call repro_set_flags,$*) \
	  --dense $(RUNS_DIR)/$(call repro_upcycle_from,$*)/model.safetensors --out $@

# One evaluate run writes both files (a pattern rule with two targets: one recipe makes both), so deleting either
# reruns it. evaluate and analyze take --backend and --set too, hence the stamp among their prerequisites.
$(RUNS_DIR)/%/result.json $(RUNS_DIR)/%/predictions.jsonl: $(RUNS_DIR)/%/train_summary.json \
    $(EXP_DIR)/$$(call repro_config,$$*).json $(DATA)/tokenize_manifest.json $(RUNS_DIR)/%/train.inputs bin/evaluate
	$(call repro_stage,evaluate,$*)
	bin/evaluate --run $(RUNS_DIR)/$* $(call repro_stage_args,$*) --out $(RUNS_DIR)/$*/result.json $(EVAL_FLAGS)

$(RUNS_DIR)/%/analysis.json: $(RUNS_DIR)/%/train_summary.json $(EXP_DIR)/$$(call repro_config,$$*).json \
    $(DATA)/tokenize_manifest.json $(RUNS_DIR)/%/train.inputs bin/analyze
	$(call repro_stage,analyze,$*)
	bin/analyze --run $(RUNS_DIR)/$* $(call repro_stage_args,$*) --out $@ $(ANALYZE_FLAGS)

# ---- report (report.html is written last) and compare ----
# bin/report reads each run's predictions.jsonl too. As a prerequisite it also makes a dry run truthful: with only
# predictions.jsonl missing, make -n takes evaluate's other output, result.json, as remade only when the recipe
# really runs, and so listed no report, which the real make then ran.
$(REPORT_DIR)/report.html: $(PREDICTIONS) $(RESULTS) $(ANALYSES) bin/report
	$(call repro_stage,report)
	bin/report --experiment $(EXPERIMENT) --runs $(RUNS_DIR) --out $(REPORT_DIR) \
	  --expected-runs $(call repro_join,$(REPRO_RUN_DIRS))

# runs.csv: one row per evaluated run of the experiment (every directory with a result.json: the current runs, their
# seeds, kept variants and sweep points; pipeline/records/runs_csv.h), for pandas or R. After this plan's results and
# analyses (its depth columns read analysis.json and depth_prompts.json). (Not after
# every run directory's result.json: as prerequisites they would be targets, and make would retrain a run of another
# plan. Runs that move without retraining, kept aside or brought back, remove runs.csv and report.html in the keep's
# recipe, before any stage, and so does make prune: they are then made again.)
$(REPORT_DIR)/runs.csv: $(RESULTS) $(ANALYSES) bin/export
	bin/export --runs $(RUNS_DIR) --out $@

# The runs compared: every run of its config's own seed, the other seeds' runs that have a baseline record, and the
# seeds the baselines do not hold of a run config they hold 2 or more seeds of (SEEDS=5 against 3 recorded seeds:
# compared with the recorded seeds' mean and spread, pipeline/records/compare_seeds.h).
repro_seed_config = $(firstword $(subst .seed, ,$(1)))
repro_compared = $(strip $(filter $(RUNS),$(REPRO_RUN_DIRS)) $(foreach d,$(filter-out $(RUNS),$(REPRO_RUN_DIRS)),\
  $(if $(or $(wildcard $(BASELINE_DIR)/$(d).result.json),$(word 2,$(wildcard \
    $(BASELINE_DIR)/$(call repro_seed_config,$(d)).result.json \
    $(BASELINE_DIR)/$(call repro_seed_config,$(d)).seed*.result.json))),$(d))))
# `make compare` is the explicit check (CI's): a run whose config differs from its baseline's is an error (exit 2).
# make reproduce passes COMPARE_CONFIG_CHANGE=note: such a run is one note line (a changed config is not a regression
# of the code); when every run was only noted, bin/compare exits 3 ("0 compared"), which is then one line, not a
# failure.
COMPARE_CONFIG_CHANGE ?= error
compare: bin/compare
	$(repro_seeds_refusal)@if [ -d $(BASELINE_DIR) ]; then \
	  $(if $(repro_compared),echo "compare: $(RUNS_DIR) against $(BASELINE_DIR)"; \
	    bin/compare --baselines $(BASELINE_DIR) --runs $(RUNS_DIR) --only $(call repro_join,$(repro_compared)) \
	      --only-failures --config-change=$(COMPARE_CONFIG_CHANGE) || { rc=$$?; \
	      [ $$rc = 3 ] && [ '$(COMPARE_CONFIG_CHANGE)' = note ] && \
	        echo "compare: nothing compared: every run's config differs from its baseline's (not a failure here)"; } \
	      || exit $$rc,echo "compare: no run here has a baseline (a sweep's points are runs of their own): skipped"); \
	else \
	  echo "reproduce: no baselines in $(BASELINE_DIR): compare skipped"; \
	fi

# ---- single stages ----
fetch: $(DATA)/raw/fetch.stamp
tokenize: $(DATA)/tokenize_manifest.json
# Each ends with the plan's refusal: a refused SET, SWEEP, SEEDS or NPROC fails these targets even when every file
# they name is up to date, and so no recipe of theirs would otherwise expand it (the stages' recipes refuse first when
# something is to be done).
train: $(foreach r,$(REPRO_RUN_SELECTED),$(RUNS_DIR)/$(r)/train_summary.json)
	$(repro_seeds_refusal)@:
evaluate: $(foreach r,$(REPRO_RUN_SELECTED),$(RUNS_DIR)/$(r)/result.json $(RUNS_DIR)/$(r)/predictions.jsonl)
	$(repro_seeds_refusal)@:
analyze: $(foreach r,$(REPRO_RUN_SELECTED),$(RUNS_DIR)/$(r)/analysis.json)
	$(repro_seeds_refusal)@:
report: $(REPORT_DIR)/report.html
	$(repro_seeds_refusal)@:
export: $(REPORT_DIR)/runs.csv
	$(repro_seeds_refusal)@:
# Mentioned here so that make treats the stamps as ordinary files (not intermediates it may skip when missing).
repro-inputs: $(TRAIN_INPUTS)
	$(repro_seeds_refusal)@:

# Removes this experiment's runs and report (not the data, not the baselines).
reproduce-clean:
	rm -rf $(RUNS_DIR) $(REPORT_DIR)

# ---- sweeps and kept variants ----
# make sweep RUNS=moeut_answer SWEEP="train.lr=1e-3,2e-3,4e-3 model.ff_k=2,4": make reproduce over the grid (every
# combination of the values; with SET, SEEDS, NPROC as usual), each point trained, evaluated and analyzed in its own
# directory runs/EXP/RUN@<variant>; the report shows them in its "Variants and sweeps" section.
.PHONY: sweep prune
sweep:
	@$(if $(strip $(SWEEP)),,$(error sweep: SWEEP is empty: e.g. make sweep RUNS=moeut_answer \
	  SWEEP="train.lr=1e-3,2e-3 model.ff_k=2,4"))$(MAKE) reproduce SWEEP=$(call shell_quote,$(strip $(SWEEP)))

# Deletes the kept earlier variants and sweep points (runs/EXP/RUN@<variant>[.seed<S>]) of this experiment.
repro_kept_dirs = $(sort $(wildcard $(RUNS_DIR)/*@[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f] \
  $(RUNS_DIR)/*@[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f].seed*))
# The report goes with them, figures included (their legends and file names name the runs): make report remakes it.
repro_report_files = $(wildcard $(REPORT_DIR)/report.md $(REPORT_DIR)/report.html $(REPORT_DIR)/runs.csv \
  $(REPORT_DIR)/*.svg)
prune:
	@$(if $(repro_kept_dirs),echo "prune: deleting $(repro_kept_dirs) and the report that names them \
	  ($(REPORT_DIR)/report.md$(repro_comma) report.html$(repro_comma) runs.csv and the figures: make report remakes \
	  it)"; rm -rf $(repro_kept_dirs) $(repro_report_files),\
	  echo "prune: no kept variants or sweep points in $(RUNS_DIR)")
