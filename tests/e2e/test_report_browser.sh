#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# Renders a report built from the recorded CI baselines (reports/baselines/ci: result and analysis records, plus a
# made-up metrics.jsonl per run so that the loss plots have curves and legends) in headless Chromium at 1280 px and
# checks that
#  - the screenshot is not blank: the HTML report opens and draws in a real browser;
#  - the page fits the 1280 px window: no element reaches past its right edge;
#  - the figures are readable at that size: every SVG text is drawn at 11 px or more, and no legend box intersects a
#    plotted line;
#  - the report answers first: the short answer is the first section, the first screen of a 1280 x 800 window holds
#    it whole (its loss-and-accuracy table included) and the table of contents after it, the contents link every
#    section's heading by its id, the verdicts follow the contents, and the rules behind the verdicts sit in a
#    collapsed <details> at the end;
#  - the depth maps of one prompt stand in one row at 1280 px: the four maps of each row side by side (the same top,
#    left to right), not stacked.
# The layout checks run in the page: a copy of report.html gets a small script that measures the laid-out elements
# and writes its findings into the DOM, which chromium --dump-dom prints.
# Exit 77 (skip) when chromium is missing (mk/deps.sh test installs it).
set -u
cd "$(dirname "$0")/../.."
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then echo "SKIP: chromium not installed (make deps-test installs it)"; exit 77; fi
for f in bin/report; do [ -x "$f" ] || { echo "FAIL: $f not built"; exit 1; }; done
base=reports/baselines/ci
ls $base/*.result.json >/dev/null 2>&1 || { echo "FAIL: no baseline records in $base"; exit 1; }
PY=$(command -v /usr/bin/python3 || command -v python3)

tmp=$(mktemp -d /tmp/test_report_browser.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for rec in $base/*.result.json; do
  run=$(basename "$rec" .result.json)
  mkdir -p "$tmp/runs/$run"
  cp "$rec" "$tmp/runs/$run/result.json"
  [ -f "$base/$run.analysis.json" ] && cp "$base/$run.analysis.json" "$tmp/runs/$run/analysis.json"
  # a decaying training loss, so that each loss plot draws curves and a legend
  "$PY" -c 'import math, sys
for s in range(0, 401, 10): print("{\"step\": %d, \"loss\": %.4f, \"ce\": %.4f}" % (s, 4 * math.exp(-s / 150) + 1, 4 * math.exp(-s / 150) + 1))' \
    >"$tmp/runs/$run/metrics.jsonl"
done
bin/report --experiment ci --runs "$tmp/runs" --out "$tmp/report" || { echo "FAIL: bin/report"; exit 1; }

# The top 1600 px of the page hold the title, the answer, the verdicts and the first tables.
timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$tmp/profile" \
  --screenshot="$tmp/shot.png" --window-size=1280,1600 "file://$tmp/report/report.html" \
  >"$tmp/chromium.log" 2>&1 || true
[ -s "$tmp/shot.png" ] || { echo "FAIL: chromium wrote no screenshot"; tail -20 "$tmp/chromium.log"; exit 1; }
out=$("$PY" tests/e2e/png_nonblank.py "$tmp/shot.png" 0.01); rc=$?
echo "screenshot: width height nonwhite_fraction coloured_pixels = $out"
[ $rc = 0 ] || { echo "FAIL: the screenshot is (nearly) blank"; exit 1; }
read -r w h frac col <<<"$out"
[ "$w" = 1280 ] && [ "$h" = 1600 ] || { echo "FAIL: screenshot is ${w}x${h}, expected 1280x1600"; exit 1; }
echo "ok: report.html renders ($frac of the page non-white)"

# Layout checks, measured by the browser on a copy of the page with the script added before </body>.
cat >"$tmp/check.js" <<'EOF'
(function () {
  var bad = [], n = {svg: 0, text: 0, legend: 0, points: 0};
  var W = 1280;
  function name(e) { return e.tagName + (e.id ? '#' + e.id : '') + (e.className && e.className.baseVal === undefined && e.className ? '.' + e.className : ''); }
  // 1. nothing reaches past the window's right edge (and the page does not scroll sideways)
  if (document.documentElement.scrollWidth > W) bad.push('page scrolls sideways: scrollWidth ' + document.documentElement.scrollWidth);
  var all = document.body.getElementsByTagName('*');
  for (var i = 0; i < all.length; i++) {
    var r = all[i].getBoundingClientRect();
    if (r.width > 0 && r.right > W + 0.5) { bad.push('overflows the window: ' + name(all[i]) + ' right=' + r.right.toFixed(1)); if (bad.length > 20) break; }
  }
  // 2. every SVG text at >= 11 px as drawn, 3. legends clear of the plotted lines
  var svgs = document.querySelectorAll('figure svg');
  for (var s = 0; s < svgs.length; s++) {
    var svg = svgs[s], vb = svg.viewBox.baseVal, scale = svg.getBoundingClientRect().width / vb.width;
    n.svg++;
    var texts = svg.getElementsByTagName('text');
    for (var t = 0; t < texts.length; t++) {
      var px = parseFloat(getComputedStyle(texts[t]).fontSize) * scale;
      n.text++;
      if (px < 11 - 1e-6) { bad.push('svg ' + s + ' text "' + texts[t].textContent + '" drawn at ' + px.toFixed(1) + ' px'); break; }
    }
    var legends = svg.querySelectorAll('g.legend');
    for (var g = 0; g < legends.length; g++) {
      var b = legends[g].getBBox();
      n.legend++;
      var lines = svg.getElementsByTagName('polyline');
      for (var p = 0; p < lines.length; p++)
        for (var k = 0; k < lines[p].points.numberOfItems; k++) {
          var pt = lines[p].points.getItem(k);
          n.points++;
          if (pt.x >= b.x && pt.x <= b.x + b.width && pt.y >= b.y && pt.y <= b.y + b.height)
            bad.push('svg ' + s + ': legend box covers a point of line ' + p + ' at ' + pt.x + ',' + pt.y);
        }
    }
  }
  // 4. the answer first: the short answer is the first section and, with the contents after it, fills the first
  // screen (1280 x 800); the contents link every section; the verdicts follow; the rules collapsed at the end
  var FOLD = 800, after = function (a, b) { return !!(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING); };
  var h2 = document.getElementsByTagName('h2'), answer = null, verdicts = null;
  for (var i = 0; i < h2.length; i++) {
    if (h2[i].textContent === 'Short answer') answer = h2[i];
    if (h2[i].textContent.indexOf("Do the paper's claims hold here?") === 0) verdicts = h2[i];
  }
  var table = document.getElementsByTagName('table')[0], toc = document.querySelector('nav.toc');
  if (!answer || !verdicts || !table || !toc) bad.push('no answer, verdict heading, table or contents');
  else {
    if (h2[0] !== answer) bad.push('the first section is not the answer: ' + h2[0].textContent);
    if (!after(answer, table) || !after(table, toc)) bad.push('the first table is not the short answer\'s');
    if (!after(toc, verdicts)) bad.push('the verdicts do not follow the contents');
    var list = answer.nextElementSibling;
    if (!list || list.tagName !== 'UL' || list.children.length < 5) bad.push('the short answer has no list of facts');
    else {
      var text = list.textContent;
      ['What ran:', 'What differs between the runs:', 'Answer:', 'not resolved ('].forEach(function (k) {
        if (text.indexOf(k) < 0) bad.push('the short answer lacks "' + k + '"');
      });
    }
    var fold = toc.getBoundingClientRect().bottom;
    n.fold = Math.round(fold);
    if (fold > FOLD) bad.push('the short answer and the contents end at ' + fold.toFixed(0) + ' px, below the first screen (' + FOLD + ' px)');
    var links = toc.querySelectorAll('a'), linked = {};
    for (var i = 0; i < links.length; i++) {
      var id = links[i].getAttribute('href').slice(1);
      linked[id] = true;
      if (!document.getElementById(id)) bad.push('contents link #' + id + ' has no target');
    }
    n.toc = links.length;
    for (var i = 0; i < h2.length; i++)
      if (h2[i] !== answer && !(h2[i].id && linked[h2[i].id])) bad.push('section "' + h2[i].textContent + '" not in the contents');
  }
  // 5. the depth maps of one prompt in one row: each row of the depth section's maps side by side
  var depthHead = null;
  for (var i = 0; i < h2.length; i++) if (h2[i].textContent.indexOf('Depth analysis') === 0) depthHead = h2[i];
  var rows = document.querySelectorAll('.figrow');
  n.maprows = 0;
  for (var i = 0; i < rows.length; i++) {
    var heads = rows[i].querySelectorAll(':scope > div > svg');
    if (!depthHead || !after(depthHead, rows[i]) || heads.length !== 4) continue;
    n.maprows++;
    for (var k = 1; k < 4; k++) {
      var p = heads[k - 1].getBoundingClientRect(), q = heads[k].getBoundingClientRect();
      if (Math.abs(q.top - p.top) > 1 || q.left < p.right - 0.5)
        bad.push('depth map row ' + n.maprows + ': map ' + (k + 1) + ' is not beside map ' + k + ' (top ' + q.top.toFixed(0) + ' vs ' + p.top.toFixed(0) + ')');
    }
  }
  if (!n.maprows) bad.push('no row of four depth maps found');
  var det = document.getElementsByTagName('details');
  if (det.length !== 1 || det[0].open || det[0].textContent.indexOf('How the verdicts are decided') < 0) bad.push('no collapsed appendix of the rules');
  else if (det[0].nextElementSibling && det[0].nextElementSibling.tagName !== 'SCRIPT') bad.push('the rules are not the last section');
  var out = document.createElement('pre');
  out.id = 'layout-check';
  out.textContent = 'LAYOUT ' + (bad.length ? 'FAIL ' + bad.join(' | ') : 'OK') + ' svgs=' + n.svg + ' texts=' + n.text + ' legends=' + n.legend + ' points=' + n.points + ' maprows=' + n.maprows + ' toc=' + n.toc + ' fold=' + n.fold + ' END';
  document.body.appendChild(out);
})();
EOF
"$PY" - "$tmp/report/report.html" "$tmp/check.js" "$tmp/report/check.html" <<'EOF'
import sys
html, js = open(sys.argv[1]).read(), open(sys.argv[2]).read()
assert html.count("</body>") == 1
open(sys.argv[3], "w").write(html.replace("</body>", "<script>" + js + "</script>\n</body>"))
EOF
timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$tmp/profile" \
  --window-size=1280,1600 --virtual-time-budget=5000 --dump-dom "file://$tmp/report/check.html" \
  >"$tmp/dom.html" 2>"$tmp/chromium2.log" || true
verdict=$(grep -o '<pre id="layout-check">[^<]*' "$tmp/dom.html" | head -1)
verdict=${verdict#<pre id=\"layout-check\">}
[ -n "$verdict" ] || { echo "FAIL: the layout check did not run"; tail -20 "$tmp/chromium2.log"; exit 1; }
echo "$verdict"
case "$verdict" in
  "LAYOUT OK "*) ;;
  *) echo "FAIL: layout"; exit 1 ;;
esac
read -r _ _ svgs texts legends points maprows toc fold _ <<<"$verdict"
[ "${svgs#svgs=}" -ge 8 ] && [ "${legends#legends=}" -ge 2 ] && [ "${points#points=}" -ge 20 ] ||
  { echo "FAIL: too little measured ($svgs $legends $points): the figures, legends or curves are missing"; exit 1; }
# the CI baselines' analyses hold the paper's four prompts: four rows of four maps; the contents list >= 10 sections
[ "${maprows#maprows=}" -ge 4 ] && [ "${toc#toc=}" -ge 10 ] ||
  { echo "FAIL: too little measured ($maprows $toc): the depth map rows or the contents are missing"; exit 1; }
echo "ok: report.html fits 1280 px, figure text >= 11 px, legends clear of the curves, the answer first"
echo "ok: the short answer and the contents fit the first screen (they end at ${fold#fold=} px of 800), the contents link every section, the depth maps of each prompt in one row"

# The Markdown's first screen: the short answer within its first 25 lines, the contents right after it.
md=$tmp/report/report.md
first=$(grep -n '^## ' "$md" | head -1)
[ "${first#*:}" = "## Short answer" ] || { echo "FAIL: the first section of report.md is not the short answer: $first"; exit 1; }
contents=$(grep -n '^\*\*Contents\*\*$' "$md" | head -1 | cut -d: -f1)
[ -n "$contents" ] && [ "$contents" -le 26 ] ||
  { echo "FAIL: report.md's short answer does not end within its first 25 lines (contents at line ${contents:-none})"; exit 1; }
sed -n "$((contents + 2))p" "$md" | grep -q '^- \[Do the paper.s claims hold here?\](#do-the-papers-claims-hold-here)$' ||
  { echo "FAIL: report.md's contents do not start with a link to the verdicts"; sed -n "$contents,$((contents + 4))p" "$md"; exit 1; }
echo "ok: report.md: the short answer in lines 1-$((contents - 1)), then the contents"
