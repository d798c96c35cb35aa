# Every value a user gives make (a variable on the command line or in the environment, a goal) is checked here,
# against the grammar its meaning allows, while make reads its makefiles: before any $(shell) runs and before any
# recipe pastes it into a command line. A value that does not fit is one refusal line naming the variable and exit 2:
#   make: *** EXPERIMENT='x;touch M': refused: ";" is not allowed in a name (letters, digits, _ . @ + -). Stop.
# The Makefile includes this file first. (It lives below mk/validate/ so that the wildcard include of mk/*.mk at the
# end of the Makefile does not read it a second time.)
#
# Why the raw text: a command-line variable is recursively expanded, so $(EXPERIMENT) of EXPERIMENT='$(shell cmd)'
# would already run cmd. The checks read $(value NAME) (the text as given, never expanded) and refuse any "$" outright;
# after that, expanding the variable is expanding plain text. Only values that come from outside are checked (origin
# command line, environment, environment override): the makefiles' own defaults are trusted.
#
# Grammars (the characters a value may hold; everything else, a newline or tab included, is refused):
#   name    one word of  A-Z a-z 0-9 _ . @ + -  (no "/", no ".."): run and experiment names, tool names
#   names   words of a name, separated by spaces (RUNS, RUN)
#   count   digits (THREADS, SEEDS, ...: the program that takes it checks the range); positive where zero makes no
#           sense to make itself
# An empty value is "not given" (THREADS=, NVCC=), except for NPROC.
#   enum    one of the listed words
#   path    one word of  A-Z a-z 0-9 _ . @ + - / : , =  (A, B, NVCC, ...): ".." allowed, since a path may point up
#   paths   words of a path
#   flags   words of  A-Z a-z 0-9 _ . @ + - / : , =  (EVAL_FLAGS, CFLAGS, ...)
#   source  one word of a path's characters and  ? & % ~ #  that is an http(s):// or file:// URL or an existing file
#           (SOURCE; always passed single-quoted)
#   set     words KEY=VALUE of  A-Z a-z 0-9 _ . @ + - / : , = [ ]  (SET, SWEEP; bin/runs then checks keys and values)
# Values that legitimately hold characters a shell reads (a URL's & or ?, SET's brackets) reach a shell only through
# $(call shell_quote,VALUE), the one quoting helper (below).

# $(call shell_quote,TEXT): TEXT as one single-quoted shell word ('it'\''s'), whatever it holds.
shell_quote = '$(subst ','\'',$(1))'

uv_empty :=
uv_space := $(uv_empty) $(uv_empty)
uv_comma := ,
define uv_newline


endef
uv_hash := \#
uv_lower := a b c d e f g h i j k l m n o p q r s t u v w x y z
uv_upper := A B C D E F G H I J K L M N O P Q R S T U V W X Y Z
uv_digits := 0 1 2 3 4 5 6 7 8 9
uv_name_chars := $(uv_lower) $(uv_upper) $(uv_digits) _ . @ + -
uv_path_chars := $(uv_name_chars) / : $(uv_comma) =
uv_url_chars := $(uv_path_chars) ? & % ~ $(uv_hash)
uv_set_chars := $(uv_path_chars) [ ]

# $(call uv_strip,TEXT,CHARS): TEXT without any of the characters CHARS (a list of words of one character each).
uv_strip = $(if $(2),$(call uv_strip,$(subst $(firstword $(2)),,$(1)),$(wordlist 2,$(words $(2)),$(2))),$(1))
# The characters of TEXT outside CHARS and outside the space (empty when TEXT fits).
uv_leftover = $(subst $(uv_space),,$(call uv_strip,$(1),$(2)))
# The refusal names the offending characters one by one: those of a shell's metacharacters (and the separators
# that some grammars allow) found in the leftover, else the leftover itself (a tab, a newline, a non-ASCII byte).
uv_open := (
uv_close := )
uv_tab := $(uv_empty)	$(uv_empty)
uv_shown_chars := ; | & ` ' " \ < > $(uv_open) $(uv_close) { } [ ] * ? ! $(uv_hash) ~ % ^ / : $(uv_comma) =
uv_offending = $(or $(strip $(foreach c,$(uv_shown_chars),$(if $(findstring $(c),$(1)),"$(c)"))),$(if $(findstring \
  $(uv_tab),$(1)),a tab),$(if $(findstring $(uv_newline),$(1)),a newline),"$(1)")
# $(call uv_refuse,NAME,REASON): the one refusal line.
uv_refuse = $(error $(1)='$(subst $(uv_newline),\n,$(value $(1)))': refused: $(2))

uv_chars_what.name := a name (letters, digits, _ . @ + -)
uv_chars_what.path := a path (letters, digits, _ . @ + - / : , =)
uv_chars_what.flags := flags (letters, digits, _ . @ + - / : , =)
uv_chars_what.url := a source (letters, digits, _ . @ + - / : , = ? & % ~ \#)
uv_chars_what.set := KEY=VALUE words (letters, digits, _ . @ + - / : , = [ ])

# $(call uv_check_chars,NAME,CHARS,KIND): refuses a "$", then any character outside CHARS (spaces are allowed; the
# caller checks the number of words). Newlines and tabs are outside every CHARS, so they are refused here too.
uv_check_chars = $(if $(findstring $$,$(value $(1))),$(call uv_refuse,$(1),"$$" is not allowed in $(uv_chars_what.$(3))),\
  $(if $(call uv_leftover,$(value $(1)),$(2)),$(call uv_refuse,$(1),$(call uv_offending,$(call \
  uv_leftover,$(value $(1)),$(2))) not allowed in $(uv_chars_what.$(3)))))
uv_one_word = $(if $(filter-out 0 1,$(words $(value $(1)))),$(call uv_refuse,$(1),expected one word))
uv_no_updir = $(foreach w,$(value $(1)),$(if $(findstring ..,$(w)),$(call uv_refuse,$(1),".." is not allowed in a name)))
uv_no_leading_dash = $(foreach w,$(value $(1)),$(if $(filter -%,$(w)),$(call uv_refuse,$(1),"$(w)" starts with "-")))

# The checks of each grammar, on the variable NAME.
uv_grammar.name = $(call uv_check_chars,$(1),$(uv_name_chars),name)$(call uv_one_word,$(1))$(call \
  uv_no_updir,$(1))$(call uv_no_leading_dash,$(1))
uv_grammar.names = $(call uv_check_chars,$(1),$(uv_name_chars),name)$(call uv_no_updir,$(1))$(call \
  uv_no_leading_dash,$(1))
uv_grammar.path = $(call uv_check_chars,$(1),$(uv_path_chars),path)$(call uv_one_word,$(1))$(call \
  uv_no_leading_dash,$(1))
uv_grammar.paths = $(call uv_check_chars,$(1),$(uv_path_chars),path)$(call uv_no_leading_dash,$(1))
uv_grammar.flags = $(call uv_check_chars,$(1),$(uv_path_chars),flags)
uv_grammar.url = $(call uv_check_chars,$(1),$(uv_url_chars),url)$(call uv_one_word,$(1))$(call \
  uv_no_leading_dash,$(1))
uv_grammar.set = $(call uv_check_chars,$(1),$(uv_set_chars),set)$(call uv_no_leading_dash,$(1))
# SOURCE: a URL fetch can download, or a file that exists (so a stray word is refused here, not after make has
# written data/EXP/fetch.args).
uv_grammar.source = $(call uv_grammar.url,$(1))$(if $(filter http://% https://% file://%,$(value $(1)))$(wildcard \
  $(value $(1))),,$(call uv_refuse,$(1),expected an http://$(uv_comma) https:// or file:// URL$(uv_comma) or an existing file))
# An empty value stands for "unset" (THREADS= means all cores, NVCC= no compiler) except where a number is
# required: NPROC (make's default applies only when it is not given at all).
uv_grammar.count = $(if $(call uv_strip,$(value $(1)),$(uv_digits)),$(call uv_refuse,$(1),expected a number (digits \
  only)))
uv_grammar.positive = $(call uv_grammar.count,$(1))$(if $(value $(1)),$(if $(filter-out 0,$(patsubst 0%,%,$(patsubst \
  0%,%,$(patsubst 0%,%,$(value $(1)))))),,$(call uv_refuse,$(1),expected a number >= 1)))
uv_grammar.required_positive = $(if $(strip $(value $(1))),$(call uv_grammar.positive,$(1)),$(call \
  uv_refuse,$(1),expected a number >= 1$(uv_comma) got nothing))
# enum: the allowed words are the rest of the rule's name, e.g. uv_enum.BACKEND.
uv_grammar.enum = $(if $(filter-out 1,$(words $(value $(1))))$(filter-out $(uv_enum.$(1)),$(value $(1))),$(call \
  uv_refuse,$(1),expected one of: $(uv_enum.$(1))))
uv_grammar.optenum = $(if $(strip $(value $(1))),$(call uv_grammar.enum,$(1)))

uv_enum.BACKEND := cpu cuda
uv_enum.RESUME := auto 1 yes true 0 no false
uv_enum.LAUNCHER := mpirun srun
uv_enum.COMPARE_CONFIG_CHANGE := error note
uv_enum.V := 0 1
uv_enum.CUDA := 1 yes true 0 no false
uv_enum.GPU_PREBUILT := 1 0
uv_enum.OMP_WAIT_POLICY := passive PASSIVE active ACTIVE Passive Active

# The table: every variable a user sets (make help lists them; tests/e2e/test_make_injection.sh checks that each one
# listed there has a row here, and drives every payload through every row).
USER_VALUE_GRAMMAR := \
  EXPERIMENT:name RUNS:names RUN:names A:path B:path FUZZ:name CODE_VERSION:name \
  NPROC:required_positive THREADS:count SEEDS:count FUZZ_SECONDS:positive BENCH_STEPS:positive \
  BENCH_THREADS:positive BENCH_GPU_STEPS:positive BENCH_GPU_WARMUP:count TEST_JOBS:positive \
  BACKEND:enum RESUME:enum LAUNCHER:enum COMPARE_CONFIG_CHANGE:enum V:enum CUDA:optenum GPU_PREBUILT:optenum \
  OMP_WAIT_POLICY:enum \
  SET:set SWEEP:set SOURCE:source \
  EVAL_FLAGS:flags ANALYZE_FLAGS:flags CFLAGS:flags OPT:flags NVCC_FLAGS:flags BENCH_GPU_ARGS:flags \
  NVCC:path CUDA_HOME:path CC:paths EMU_CXX:paths FUZZ_CC:paths GPU_PY:path BENCH_TOKENIZE_ARCHIVE:path \
  BENCH_CONFIGS:paths BENCH_GPU_CONFIGS:paths REPRO_PLAN:path

uv_from_outside = $(filter command line environment,$(origin $(1)))
$(foreach row,$(USER_VALUE_GRAMMAR),$(if $(call uv_from_outside,$(firstword $(subst :, ,$(row)))),$(call \
  uv_grammar.$(lastword $(subst :, ,$(row))),$(firstword $(subst :, ,$(row))))))
# Any other variable given on the command line overrides one of the makefiles' own (RUNS_DIR, DATA, LDLIBS, ...) and
# reaches the same shells: it gets the flags grammar. (Other environment variables are not make's business: the
# makefiles read none but those of the table and SLURM_JOB_ID, which only selects the launcher.)
uv_table_names := $(foreach row,$(USER_VALUE_GRAMMAR),$(firstword $(subst :, ,$(row))))
$(foreach v,$(filter-out $(uv_table_names),$(.VARIABLES)),$(if $(filter command line,$(origin $(v))),$(call \
  uv_grammar.flags,$(v))))

# The goals: file targets and target names, so the path grammar (a goal such as runs/tiny/x;cmd/result.json would
# otherwise reach a recipe through $*). MAKECMDGOALS is make's own, so it is checked as text, not through $(value).
uv_goal_leftover := $(call uv_leftover,$(MAKECMDGOALS),$(uv_path_chars))
ifneq ($(findstring $$,$(MAKECMDGOALS)),)
$(error goal '$(MAKECMDGOALS)': refused: "$$" is not allowed in a target)
endif
ifneq ($(uv_goal_leftover),)
$(error goal '$(MAKECMDGOALS)': refused: $(call uv_offending,$(uv_goal_leftover)) not allowed in a target (letters, \
  digits, _ . @ + - / : , =))
endif
