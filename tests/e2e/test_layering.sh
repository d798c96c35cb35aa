#!/usr/bin/env bash
# The folders form layers, lowest first: pipeline/ (command line, config, records, files), datasets/ (archives,
# tokenizer, shards, loader), kernels/ (the backend ops), model/ (the models: layers, forward/backward, optimizer,
# configs), model/training/ (training and evaluation: they read datasets and drive the models), stages/ (the
# programs' mains). A file may include headers of its own layer and the layers below, never above: a lower folder
# that needs a higher one's code means that code sits in the wrong place (this test once found the RNG in model/ used
# by the data loader, and the shard content hash in pipeline/). So model/ includes neither datasets/ nor
# model/training/. A file's layer is the longest layer folder its path starts with (kernels/cpu/ is kernels/).
# tests/ and kernels/cuda/emu/ may include anything.
set -euo pipefail
cd "$(dirname "$0")/../.."
layers=(pipeline datasets kernels model model/training stages)
# The rank of the layer a path (a file, or an include without its file name) belongs to; -1 for none.
rank() {
  local i best=-1 len=0
  for i in "${!layers[@]}"; do
    case "$1/" in "${layers[$i]}/"*) [ "${#layers[$i]}" -gt "$len" ] && { best=$i; len=${#layers[$i]}; } ;; esac
  done
  echo "$best"
}
[ "$(rank model/training/x.h)" -gt "$(rank model/x.h)" ] && [ "$(rank model/x.h)" -gt "$(rank datasets/x.h)" ] \
  && [ "$(rank kernels/cpu/x.h)" = "$(rank kernels/x.h)" ] || { echo "FAIL: rank() is broken"; exit 1; }
bad=0; checked=0
while IFS= read -r hit; do
  file=${hit%%:*}
  inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$hit")
  mine=$(rank "$file") r=$(rank "$inc")
  checked=$((checked + 1))
  if [ "$r" -gt "$mine" ]; then
    echo "layering: $file includes $inc (${layers[$r]}/ is above ${layers[$mine]}/)"; bad=$((bad + 1))
  fi
done < <(grep -rn --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' -E '^#include "[a-z]+/' \
           pipeline datasets kernels model stages | grep -v '^kernels/cuda/emu/')
[ "$checked" -gt 100 ] || { echo "FAIL: only $checked includes checked (the grep is broken?)"; exit 1; }
[ "$bad" = 0 ] || { echo "FAIL: $bad include(s) against the layering"; exit 1; }
echo "PASS: $checked project includes, none from a lower layer to a higher one"
