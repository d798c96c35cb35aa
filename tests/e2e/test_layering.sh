#!/usr/bin/env bash
# The folders form layers, lowest first: pipeline/ (command line, config, records, files), datasets/ (archives,
# tokenizer, shards, loader), kernels/ (the backend ops), model/ (the models, training), stages/ (the programs'
# mains). A file may include headers of its own layer and the layers below, never above: a lower folder that needs a
# higher one's code means that code sits in the wrong place (this test once found the RNG in model/ used by the data
# loader, and the shard content hash in pipeline/). tests/ and kernels/cuda/emu/ may include anything.
set -euo pipefail
cd "$(dirname "$0")/../.."
layers=(pipeline datasets kernels model stages)
rank() { local i; for i in "${!layers[@]}"; do [ "${layers[$i]}" = "$1" ] && { echo "$i"; return; }; done; echo -1; }
bad=0; checked=0
for dir in "${layers[@]}"; do
  mine=$(rank "$dir")
  while IFS= read -r hit; do
    file=${hit%%:*}
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$hit")
    top=${inc%%/*}
    r=$(rank "$top")
    checked=$((checked + 1))
    if [ "$r" -gt "$mine" ]; then echo "layering: $file includes $inc ($top/ is above $dir/)"; bad=$((bad + 1)); fi
  done < <(grep -rn --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' -E '^#include "[a-z]+/' "$dir" \
             | grep -v '^kernels/cuda/emu/')
done
[ "$checked" -gt 100 ] || { echo "FAIL: only $checked includes checked (the grep is broken?)"; exit 1; }
[ "$bad" = 0 ] || { echo "FAIL: $bad include(s) against the layering"; exit 1; }
echo "PASS: $checked project includes, none from a lower layer to a higher one"
