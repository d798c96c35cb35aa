#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# The training, evaluation and analysis chain against torch (tests/reference/chain_check.py, also `make
# twin-chain-check`): one whole bin/train step of each ci run (loader windows, masks, micro-batches, regularizers,
# clipping, AdamW, lr) and every bin/evaluate verdict and bin/analyze erasure score, recomputed in torch from the
# reference documents' text. python3-torch is a test dependency (mk/deps.sh test), so a missing torch is a failure.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
"$PY" -c 'import torch' 2>/dev/null || { echo "FAIL: $PY cannot import torch (mk/deps.sh test installs python3-torch)"; exit 1; }
for b in fetch tokenize train evaluate analyze; do
  [ -x "bin/$b" ] || { echo "FAIL: bin/$b not built"; exit 1; }
done
exec "$PY" tests/reference/chain_check.py --bin bin
