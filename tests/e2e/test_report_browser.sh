#!/usr/bin/env bash
# Renders a report built from the recorded CI baselines (reports/baselines/ci: result and analysis records) in
# headless Chromium and checks that the screenshot is not blank: the HTML report opens and draws in a real browser.
# Exit 77 (skip) when chromium is missing (mk/deps.sh test installs it).
set -u
cd "$(dirname "$0")/../.."
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then echo "SKIP: chromium not installed (make deps-test installs it)"; exit 77; fi
for f in bin/report; do [ -x "$f" ] || { echo "FAIL: $f not built"; exit 1; }; done
base=reports/baselines/ci
ls $base/*.result.json >/dev/null 2>&1 || { echo "FAIL: no baseline records in $base"; exit 1; }

tmp=$(mktemp -d /tmp/test_report_browser.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for rec in $base/*.result.json; do
  run=$(basename "$rec" .result.json)
  mkdir -p "$tmp/runs/$run"
  cp "$rec" "$tmp/runs/$run/result.json"
  [ -f "$base/$run.analysis.json" ] && cp "$base/$run.analysis.json" "$tmp/runs/$run/analysis.json"
done
bin/report --experiment ci --runs "$tmp/runs" --out "$tmp/report" || { echo "FAIL: bin/report"; exit 1; }

# The top 1600 px of the page hold the title, the caveats and the tables (the figures come further down).
timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$tmp/profile" \
  --screenshot="$tmp/shot.png" --window-size=1200,1600 "file://$tmp/report/report.html" \
  >"$tmp/chromium.log" 2>&1 || true
[ -s "$tmp/shot.png" ] || { echo "FAIL: chromium wrote no screenshot"; tail -20 "$tmp/chromium.log"; exit 1; }
PY=$(command -v /usr/bin/python3 || command -v python3)
out=$("$PY" tests/e2e/png_nonblank.py "$tmp/shot.png" 0.01); rc=$?
echo "screenshot: width height nonwhite_fraction coloured_pixels = $out"
[ $rc = 0 ] || { echo "FAIL: the screenshot is (nearly) blank"; exit 1; }
read -r w h frac col <<<"$out"
[ "$w" = 1200 ] && [ "$h" = 1600 ] || { echo "FAIL: screenshot is ${w}x${h}, expected 1200x1600"; exit 1; }
echo "ok: report.html renders ($frac of the page non-white)"
