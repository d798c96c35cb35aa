#!/usr/bin/env bash
# On a new machine the first make reads the Makefile before mk/deps.sh has installed OpenMPI and pkg-config, so its
# parse-time pkg-config calls fail and the Makefile's fallbacks stand in. The compile flags (and with them
# build/flags-*.stamp, whose change rebuilds every object) must not depend on that: otherwise the second make of a new
# user rebuilds the whole tree. Checked by reading the Makefile (make -n, nothing built) three ways: as installed, with
# pkg-config unable to find any .pc file, and with no pkg-config on PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d /tmp/test_make_first_build.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# the stamp and the MPI flags make computes (a target of its own, given on the command line: nothing else runs)
flags() { env -u MAKEFLAGS -u MAKELEVEL "$@" make --no-print-directory --eval 'show-flags: ; @echo "$(FLAGS_STAMP) | $(MPI_CFLAGS) | $(MPI_LIBS)"' show-flags; }
installed=$(flags)
command -v pkg-config >/dev/null && pkg-config --exists ompi-c ||
  { echo "SKIP: pkg-config or OpenMPI's ompi-c.pc is missing (make deps installs them): nothing to compare with"; exit 77; }
no_pc=$(flags PKG_CONFIG_LIBDIR="$tmp" PKG_CONFIG_PATH="$tmp")
printf '#!/bin/sh\nexit 127\n' >"$tmp/pkg-config" && chmod +x "$tmp/pkg-config" # as if not installed
no_tool=$(flags PATH="$tmp:$PATH")
[ "$installed" = "$no_pc" ] || fail "the flags differ when pkg-config finds no ompi-c.pc:"$'\n'"  installed: $installed"$'\n'"  no .pc:    $no_pc"
[ "$installed" = "$no_tool" ] || fail "the flags differ without pkg-config:"$'\n'"  installed: $installed"$'\n'"  no tool:   $no_tool"
echo "PASS: the same compile flags before and after deps installs OpenMPI and pkg-config ($installed)"
