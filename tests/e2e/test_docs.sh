#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# The documentation stays usable and about the project:
# 1. README.md is a short introduction: at most 140 lines (the details live in the documents it links).
# 2. Every relative link of README.md and of the Markdown documents it links resolves: the file (or folder) exists and,
#    for a link into a Markdown file with #anchor, a heading of that file has that anchor (GitHub's rule: lower case,
#    punctuation dropped, spaces to hyphens, -1, -2 ... for repeats). Links inside code are not links.
# 3. No file tracked by git (this test aside) describes the circumstances the project was written in rather than the
#    project and its users' world. The phrases are chosen not to hit ordinary uses: an HTTP session, a training
#    budget, Chromium's --no-sandbox and the file names gpu_session.sh / gpu-session stay.
# 4. Every document cited by name in a tracked file (`moeut-spec.md §3.2`, "see dist.md") is a tracked file, so a
#    reader can open what the code cites. A name after a path separator, a $ or a member access (d.md) is a path or a
#    field, not a citation (files a stage writes at run time are named that way).
set -euo pipefail
cd "$(dirname "$0")/../.."
fail=0

# 1. The README's length.
max_lines=140
lines=$(wc -l <README.md)
if [ "$lines" -gt "$max_lines" ]; then
  echo "docs: README.md has $lines lines, more than $max_lines: move details into the documents it links"
  fail=1
else
  echo "ok: README.md has $lines lines (at most $max_lines)"
fi

# 2. Links of README.md and of the documents it links.
python3 - <<'PY' || fail=1
import os, re, sys

FENCE = re.compile(r'^\s*(```|~~~)')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')
LINK = re.compile(r'!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
CODE_SPAN = re.compile(r'(`+)(?:(?!\1).)+?\1')

def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks, with inline code spans removed."""
    out, fenced = [], False
    with open(path, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                out.append((n, CODE_SPAN.sub('', line)))
    return out

def slug(text):
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)  # a link in a heading counts by its text
    text = text.replace('`', '').strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')

def anchors(path):
    seen, result = {}, set()
    fenced = False
    with open(path, encoding='utf-8') as f:
        for line in f:
            if FENCE.match(line):
                fenced = not fenced
                continue
            m = None if fenced else HEADING.match(line)
            if m:
                s = slug(m.group(2))
                k = seen.get(s, 0)
                result.add(s if k == 0 else f'{s}-{k}')
                seen[s] = k + 1
    return result

def links(path):
    for n, line in prose_lines(path):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):  # http:, https:, mailto:, file: ...
                continue
            yield n, target

def check(doc, problems):
    """Checks doc's relative links; returns the Markdown files it links."""
    linked = []
    base = os.path.dirname(doc)
    for n, target in links(doc):
        path, _, anchor = target.partition('#')
        dest = os.path.normpath(os.path.join(base, path)) if path else doc
        if not os.path.exists(dest):
            problems.append(f'{doc}:{n}: link to {target}: {dest} does not exist')
            continue
        if dest.endswith('.md') and os.path.isfile(dest):
            linked.append(dest)
            if anchor and anchor not in anchors(dest):
                problems.append(f'{doc}:{n}: link to {target}: {dest} has no heading with anchor #{anchor}')
    return linked

problems, checked = [], 0
docs = ['README.md']
for d in check('README.md', problems):
    if d not in docs:
        docs.append(d)
for d in docs[1:]:
    check(d, problems)
for d in docs:
    checked += sum(1 for _ in links(d))
for p in problems:
    print('docs: ' + p)
if checked < 20:
    print(f'docs: only {checked} links found in {len(docs)} documents (is the link pattern broken?)')
    sys.exit(1)
if problems:
    sys.exit(1)
print(f'ok: {checked} relative links in README.md and the {len(docs) - 1} documents it links resolve')
PY

# 3. Phrases about how the project was developed, not what it is. Each is written with one letter in a bracket
# class (so "d[e]vice" matches the word itself), so that the list does not itself contain the phrases it looks for.
phrases=(
  'd[e]velopment (machine|session|sandbox)s?'
  '\bl[e]nt\b'
  'd[e]vice (tool|calls?|budget|time)\b'
  'd[e]vice-minutes'
  'this w[o]rkplace'
  'while the machine is w[a]rm'
  '\b(this|next|earlier|these|previous) s[e]ssions?\b'
  '\bGPU s[e]ssions?\b'
  '\b(coding|AI|LLM) a[g]ents?\b'
  '\b(lead|other|another|fellow) e[n]gineers?\b'
  'c[a]rry limit'
  '/w[o]rk/(shared|main|wt)\b'
  '\bi[s]sue #?[0-9]+\b'
  '\.\./s[h]ared/'
  '\bs[h]ared/docs/'
)
pattern=$(IFS='|'; echo "${phrases[*]}")
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "SKIP: not a git checkout: the tracked files cannot be listed for the phrase check"
  [ "$fail" = 0 ] && exit 77
  exit 1
fi
self=tests/e2e/test_docs.sh
hits=$(git ls-files -z | grep -zv "^$self\$" | xargs -0 grep -nIiE "$pattern" -- 2>/dev/null || true)
files=$(git ls-files | wc -l)
if [ -n "$hits" ]; then
  echo "docs: text about how the project was developed (describe the project and its users' world instead):"
  echo "$hits" | cut -c1-200 | sed 's/^/    /'
  fail=1
else
  echo "ok: none of the $files tracked files mentions the circumstances of its development"
fi

# 4. Documents cited by name.
tracked_names=$(git ls-files | sed 's#.*/##' | sort -u)
cited=$(git ls-files -z | grep -zv "^$self\$" | xargs -0 grep -ohIP '(?<![\w.&>/$-])[A-Za-z0-9_-]+\.md\b' -- | sort -u)
missing=$(comm -13 <(echo "$tracked_names") <(echo "$cited"))
if [ -z "$cited" ]; then
  echo "docs: no document citations found at all (is the pattern broken?)"
  fail=1
elif [ -n "$missing" ]; then
  echo "docs: cited but not in the tree (ship the document or cite the one that holds the text):"
  for n in $missing; do git ls-files -z | xargs -0 grep -lIP "(?<![\w.&>/\$-])\Q$n\E" -- | head -3 | sed "s#^#    $n cited in #"; done
  fail=1
else
  echo "ok: the $(echo "$cited" | wc -l) documents cited by name are all in the tree"
fi

[ "$fail" = 0 ] || { echo "FAIL"; exit 1; }
echo "PASS"
