#!/usr/bin/env bash
# Prints the code version recorded in every record (CODE_VERSION): `git describe --always --abbrev=12` of HEAD, plus
# "-dirty" when a tracked file differs from HEAD (work tree or index) outside experiments/ and reports/baselines/.
# Those two hold a run's inputs and the recorded baselines, not code: editing a config must not mark the code dirty.
# Untracked files never count (as with git describe --dirty). Prints nothing and fails outside a git checkout.
set -eu
cd "$(dirname "$0")/.."
version=$(git describe --always --abbrev=12 2>/dev/null) || exit 1
# Refresh the index's stat data first, as describe --dirty does, so that a file only touched (same content) is clean.
git update-index -q --refresh >/dev/null 2>&1 || true
if ! git diff-index --quiet HEAD -- . ':(exclude)experiments' ':(exclude)reports/baselines' 2>/dev/null; then
  version="$version-dirty"
fi
echo "$version"
