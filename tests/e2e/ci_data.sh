# The ci data in a test's own directory (sourced, not run), as `make tokenize EXPERIMENT=ci` makes it under data/ci,
# for tests that run beside others and so may not touch data/ci. Usage: source tests/e2e/ci_data.sh; then
# `ci_data DIR` fetches experiments/ci/data.json's sets into DIR/raw and tokenizes them into DIR; on failure it prints
# the tail of both logs (DIR/../fetch.log, DIR/../tokenize.log) and returns 1. It sets no shell options, so a script
# written around `cmd; rc=$?` keeps its own.
ci_data() {
  local out=$1 logs
  logs=$(dirname "$1")
  bin/fetch --config experiments/ci/data.json --out "$out/raw" >"$logs/fetch.log" 2>&1 &&
    bin/tokenize --raw "$out/raw" --config experiments/ci/data.json --out "$out" >"$logs/tokenize.log" 2>&1 ||
    { cat "$logs/fetch.log" "$logs/tokenize.log" 2>/dev/null | tail -20; return 1; }
}
