#!/usr/bin/env bash
# `make help` lists every target and variable a user can use, from Makefile and mk/*.mk:
#  - targets: every target declared .PHONY there, but for the internal ones in INTERNAL_TARGETS (each with its
#    reason); help must name it at the start of a line ("  name  description" or "  a, name, b  description");
#  - variables a user sets: every NAME assigned with ?= there (a default meant to be overridden), and every NAME that
#    is read as $(NAME) but never assigned there (its value can only come from the command line or the environment),
#    but for make's own variables and those in INTERNAL_VARIABLES; help must have a line "  NAME=...".
# Also the targets and variables being added with them (sweep, diff, prune, export; SWEEP, A, B, CUDA), so that help
# describes them as soon as they exist.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory "$@"; }

declare -A INTERNAL_TARGETS=(
  [cuda-missing]="the error step of a CUDA build without nvcc"
  [reproduce-check]="the first step of make reproduce (EXPERIMENT exists, the seeds list is valid)"
  [reproduce-stages]="the stages of make reproduce, which plans and counts them around it"
  [repro-force]="makes a changed train.inputs stamp rewrite itself"
  [repro-inputs]="names the train.inputs stamps so make keeps them"
  [repro-keep-now]="forces the keep makefile (build/plan/EXP-keep.mk) to be remade on make's first read"
  [gpu-print-link-flags]="prints the link flags for mk/gpu/bundle.sh"
  [nvcc-print-flags]="prints the CUDA build's nvcc flags for tests/e2e/test_nvcc_compile_check.sh"
)
declare -A INTERNAL_VARIABLES=(
  [REPRO_SEEDS_ERROR]="written by the generated seeds makefile (build/seeds/*.mk), not by a user"
  [REPRO_KEEP_ERROR]="written by the generated keep makefile (build/plan/EXP-keep.mk), not by a user"
  [SLURM_JOB_ID]="set by Slurm inside an allocation (make then launches with srun); help names LAUNCHER"
)
MAKE_OWN="MAKE MAKECMDGOALS MAKEFLAGS MAKELEVEL MFLAGS CURDIR SHELL MAKEFILE_LIST .DEFAULT_GOAL MAKE_RESTARTS"
NEW_TARGETS="sweep diff prune export"
NEW_VARIABLES="SWEEP A B CUDA"

files=(Makefile mk/*.mk)
# The make files with continuation lines joined.
joined=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "${files[@]}")
phony=$(echo "$joined" | sed -n 's/^\.PHONY://p' | tr ' \t' '\n\n' | grep -v '^$' | sort -u)
[ "$(echo "$phony" | wc -l)" -ge 40 ] || fail "found only $(echo "$phony" | wc -l) .PHONY targets: the extraction is broken"
assigned=$(echo "$joined" | grep -oE '^(export +|override +)?[A-Za-z_][A-Za-z0-9_]* *(:=|::=|\+=|\?=|=)' |
  sed -E 's/^(export|override) +//; s/ *(:=|::=|\+=|\?=|=)$//' | sort -u)
defaulted=$(echo "$joined" | grep -oE '^(export +)?[A-Z][A-Z0-9_]* *\?=' | sed -E 's/^export +//; s/ *\?=$//' | sort -u)
read_only=$(echo "$joined" | grep -oE '\$[({][A-Z][A-Z0-9_]*[)}:]' | sed -E 's/^\$[({]//; s/[)}:]$//' | sort -u |
  comm -23 - <(echo "$assigned"))
variables=$(printf '%s\n' $defaulted $read_only | sort -u)
for v in "${!INTERNAL_VARIABLES[@]}" $MAKE_OWN; do variables=$(grep -vx "$v" <<<"$variables" || true); done
for v in EXPERIMENT BACKEND SEEDS THREADS SOURCE EVAL_FLAGS V; do # the rule must find these (a broken one would not)
  grep -qx "$v" <<<"$variables" || fail "the variable rule does not find $v: it is broken"
done

help=$(mk help) || fail "make help failed"
missing=()
for t in $phony $NEW_TARGETS; do
  [ -n "${INTERNAL_TARGETS[$t]:-}" ] && continue
  grep -qE "^  ([a-z0-9-]+, )*$t(,| |$)" <<<"$help" || missing+=("target $t")
done
for v in $variables $NEW_VARIABLES; do
  grep -qE "^  $v=" <<<"$help" || missing+=("variable $v")
done
[ ${#missing[@]} = 0 ] || fail "make help omits: ${missing[*]}"
# The exclusions must still exist (a removed target would otherwise keep an excuse for ever).
for t in "${!INTERNAL_TARGETS[@]}"; do
  grep -qx "$t" <<<"$phony" || fail "INTERNAL_TARGETS names $t, which is no .PHONY target any more"
done
n_t=$(echo "$phony" | wc -l); n_v=$(echo "$variables" | wc -l)
echo "ok: make help lists all $n_t .PHONY targets (${#INTERNAL_TARGETS[@]} internal ones excepted) and $n_v user variables of Makefile and mk/*.mk, and sweep, diff, prune, export, SWEEP, A, B, CUDA"
# Readable: grouped under headings, no line wider than 120 characters.
[ "$(grep -cE '^[A-Z][A-Za-z ]*( \(.*\))?:$' <<<"$help")" -ge 6 ] || fail "make help has fewer than 6 groups"
wide=$(echo "$help" | awk 'length > 120' | head -3)
[ -z "$wide" ] || fail "make help lines wider than 120 characters: $wide"
echo "ok: make help is grouped (pipeline, your runs, tests, benchmarks, GPU, housekeeping) and fits 120 columns"
