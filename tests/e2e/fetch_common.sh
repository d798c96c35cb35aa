# Shared harness of the fetch end-to-end tests (sourced, not run): python3 for manifest checks and the test HTTP
# server, a temporary directory removed on exit (the server stopped first), check helpers, run_fetch, json_get and
# start_server. Usage: source tests/e2e/fetch_common.sh NAME BIN...  (NAME names the temporary directory; each
# bin/BIN is built when missing). Afterwards the script runs in the project root with ROOT, PY, FETCH and T set.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
ROOT=$PWD

PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)
if [ -z "$PY" ]; then echo "SKIP: no python3 for manifest checks and the test HTTP server"; exit 77; fi
fetch_test_name=$1; shift
for b in "$@"; do
  if [ ! -x bin/$b ]; then make --no-print-directory bin/$b >/dev/null || { echo "FAIL: cannot build bin/$b"; exit 1; }; fi
done
FETCH=$ROOT/bin/fetch

T=$(mktemp -d "/tmp/$fetch_test_name.XXXXXX")
SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; fi
  rm -rf "$T"
}
trap cleanup EXIT INT TERM

FAILS=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; FAILS=$((FAILS + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
# Runs fetch, capturing output in $T/log; returns its exit status.
run_fetch() { "$FETCH" "$@" >"$T/log" 2>&1; }
no_temp_trees() { ! ls -d "$1".tmp.* >/dev/null 2>&1; }
json_get() { "$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"m": m}))' "$@"; }

# start_server DIR: serves DIR over HTTP on 127.0.0.1 (a free port, written to $T/port), logging requests to
# $T/server.log; sets SERVER_PID (stopped by cleanup). Returns 1 when the server did not come up within 5 s.
start_server() {
  "$PY" tests/e2e/http_server.py --root "$1" --port-file "$T/port" --log "$T/server.log" &
  SERVER_PID=$!
  for _ in $(seq 100); do [ -s "$T/port" ] && return 0; sleep 0.05; done
  return 1
}
