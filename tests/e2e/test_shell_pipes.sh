#!/usr/bin/env bash
# e2e-lane: private (it reads tracked scripts only)
# Under `set -o pipefail`, `producer | grep -q PATTERN` is a race: grep -q (or -m N) exits at its first match, and a
# producer still writing gets SIGPIPE (status 141), which pipefail makes the pipeline's status. Under load that turned
# a found line into "not found" (a make test failure of test_reproduce_seeds_config.sh, at 3 in 3,000 tries of a
# 10 KB echo on 2 busy cores) and, under `!`, a present line into "absent". A here-string (`grep -q P <<<"$out"`)
# or a grep that reads to the end (-c) has no producer to kill. This test refuses the pattern in every tracked shell
# script that turns pipefail on, and checks that it finds a planted one.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
# offending FILE...: the lines of pipefail scripts that pipe into grep -q / grep -m (file:line: text).
offending() {
  local f
  for f in "$@"; do
    grep -q 'pipefail' "$f" || continue
    grep -nE '\|[[:space:]]*grep[[:space:]]+([^|]*[[:space:]])?-([a-zA-Z]*[qm]|-quiet|-silent|-max-count)' "$f" |
      grep -vE '^[0-9]+:[[:space:]]*#' | sed "s|^|$f:|" || true
  done
}
tmp=$(mktemp -d /tmp/test_shell_pipes.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
printf '#!/bin/bash\nset -o pipefail\necho "$out" | grep -q x || exit 1\nls | grep -E -m1 y\n  # a | grep -q z\n' >"$tmp/planted.sh"
printf '#!/bin/bash\necho "$out" | grep -q x || exit 1\n' >"$tmp/no_pipefail.sh"
[ "$(offending "$tmp/planted.sh" | wc -l)" = 2 ] || fail "the check misses a planted echo | grep -q or | grep -E -m1, or flags a comment"
[ -z "$(offending "$tmp/no_pipefail.sh")" ] || fail "the check flags a script without pipefail"
mapfile -t scripts < <(git ls-files '*.sh' | grep -vx tests/e2e/test_shell_pipes.sh) # (this file plants them)
[ "${#scripts[@]}" -gt 50 ] || fail "only ${#scripts[@]} tracked shell scripts found"
found=$(offending "${scripts[@]}")
[ -z "$found" ] || fail "pipefail scripts piping into grep -q / -m (use grep ... <<<\"\$var\" or grep -c):"$'\n'"$found"
echo "PASS: ${#scripts[@]} tracked shell scripts, none pipes into grep -q / -m under pipefail"
