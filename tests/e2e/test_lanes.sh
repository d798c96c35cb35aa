#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# tests/run_suite.sh's two lanes (SUITE_JOBS > 1), and the promise a script makes by marking itself private:
#  1. Fake suites in a scratch copy: scripts without the mark (the tree lane) never overlap one another, while a
#     private script does run beside them; every program is counted once; a failure in either lane fails the suite;
#     with SUITE_JOBS=1 nothing overlaps at all.
#  2. Every script of tests/e2e marked private (second line "# e2e-lane: private") neither runs make nor writes into
#     the tree's runs/, data/, reports/, build/, bin/ or experiments/ (a static check of its text: a script that
#     broke the promise could race a tree-lane test such as make reproduce).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/test_lanes.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. Fake suites. Each fake script logs "start NAME T" and "end NAME T" (nanoseconds) and sleeps.
mkdir -p "$tmp/tree/tests" "$tmp/tree/t"
cp "$root/tests/run_suite.sh" "$tmp/tree/tests/"
fake() { # fake NAME LANE(tree|private) SECONDS EXIT
  {
    echo '#!/usr/bin/env bash'
    [ "$2" = private ] && echo '# e2e-lane: private (fake)'
    echo "echo \"start $1 \$(date +%s%N)\" >>$tmp/events"
    echo "sleep $3"
    echo "echo \"end $1 \$(date +%s%N)\" >>$tmp/events"
    echo "exit $4"
  } >"$tmp/tree/t/$1.sh"
  chmod +x "$tmp/tree/t/$1.sh"
}
fake tree_a tree 0.6 0
fake tree_b tree 0.6 0
fake tree_c tree 0.6 0
fake priv_a private 0.6 0
fake priv_b private 0.6 0
suite() { (cd "$tmp/tree" && SUITE_JOBS=$1 tests/run_suite.sh e2e t/tree_a.sh t/priv_a.sh t/tree_b.sh t/priv_b.sh \
  t/tree_c.sh) >"$tmp/suite.log" 2>&1; }
# overlaps A B: true if the runs of scripts A and B overlapped in time.
overlaps() {
  awk -v a="$1" -v b="$2" '$1 == "start" {s[$2] = $3} $1 == "end" {e[$2] = $3}
    END {exit !(s[a] < e[b] && s[b] < e[a])}' "$tmp/events"
}

rm -f "$tmp/events" "$tmp/tree/build/test-results.txt"
suite 2 || { cat "$tmp/suite.log"; fail "SUITE_JOBS=2: the suite of passing fakes failed"; }
for p in "tree_a tree_b" "tree_b tree_c" "tree_a tree_c"; do
  ! overlaps $p || { cat "$tmp/events"; fail "SUITE_JOBS=2: tree-lane scripts $p ran at the same time"; }
done
overlaps tree_a priv_a || overlaps tree_b priv_a || overlaps tree_a priv_b || overlaps tree_b priv_b ||
  { cat "$tmp/events"; fail "SUITE_JOBS=2: no private script ran beside the tree lane"; }
[ "$(wc -l <"$tmp/tree/build/test-results.txt")" = 5 ] && [ "$(awk '{p += $3} END {print p}' "$tmp/tree/build/test-results.txt")" = 5 ] ||
  { cat "$tmp/tree/build/test-results.txt"; fail "SUITE_JOBS=2: expected 5 results, 5 passed"; }
echo "ok: SUITE_JOBS=2: the tree lane one at a time, a private script beside it, 5 results"

rm -f "$tmp/events"
suite 1 || { cat "$tmp/suite.log"; fail "SUITE_JOBS=1: the suite of passing fakes failed"; }
for a in tree_a tree_b tree_c priv_a priv_b; do for b in tree_a tree_b tree_c priv_a priv_b; do
  [ "$a" = "$b" ] || ! overlaps "$a" "$b" || fail "SUITE_JOBS=1: $a and $b ran at the same time"
done; done
echo "ok: SUITE_JOBS=1: one at a time"

for lane in tree private; do
  fake tree_b tree 0.2 0
  fake priv_b private 0.2 0
  [ $lane = tree ] && fake tree_b tree 0.2 1 || fake priv_b private 0.2 1
  rm -f "$tmp/events" "$tmp/tree/build/test-results.txt"
  if suite 2; then cat "$tmp/suite.log"; fail "SUITE_JOBS=2: a failing $lane-lane script did not fail the suite"; fi
  grep -q "^FAIL \[e2e\] $([ $lane = tree ] && echo tree_b || echo priv_b).sh" "$tmp/suite.log" ||
    { cat "$tmp/suite.log"; fail "SUITE_JOBS=2: no FAIL line for the failing $lane-lane script"; }
done
echo "ok: SUITE_JOBS=2: a failure in either lane fails the suite"

# 2. The promise of the private scripts, read from their text (comments and quoted messages left out).
cd "$root"
/usr/bin/python3 - tests/e2e/*.sh <<'PY' || fail "a script marked private breaks its promise (above)"
import re, sys
bad = 0
tree = r'(?:runs|data|reports|build|bin|experiments)/'
for path in sys.argv[1:]:
    lines = open(path).read().split("\n")
    if len(lines) < 2 or not lines[1].startswith("# e2e-lane: private"):
        continue
    for n, line in enumerate(lines, 1):
        code = line.split(" #")[0] if not line.lstrip().startswith("#") else ""
        bare = re.sub(r"'[^']*'", "''", code)                   # single-quoted text (messages, awk, python)
        bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', bare)            # double-quoted text (messages, paths)
        if re.search(r'(?:^|[;&|({]|\$\(|\bthen|\bdo|\benv(?:\s+-u\s+\S+)*)\s*make\b(?!-)', bare):
            print(f"{path}:{n}: marked private but runs make: {line.strip()}"); bad += 1
        w = re.search(r'(?:>>?\s*|\b(?:cp|mv|rm|mkdir|touch|ln|tee)\b[^;&|]*\s|--out\s)"?(?:\./)?' + tree, code)
        if w:
            print(f"{path}:{n}: marked private but writes into the tree: {line.strip()}"); bad += 1
sys.exit(1 if bad else 0)
PY
echo "ok: $(grep -l '^# e2e-lane: private' tests/e2e/*.sh | wc -l) scripts marked private: no make, no writes into the tree"
