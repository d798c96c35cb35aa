#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# The folders form layers, lowest first: pipeline/base/ (command line, JSON reading, files, logs, RNG, statistics, SVG),
# pipeline/records/ (run configs and overrides, the records and their checks, comparisons, exports), pipeline/report/
# (the report's document and sections), datasets/ (archives, tokenizer, shards, loader), kernels/ (the backend ops),
# model/ (the models: layers, forward/backward, optimizer, configs), model/training/ (training and evaluation: they read
# datasets and drive the models), pipeline/plan/ (planning make reproduce: the run directories, keeping earlier
# variants, which stages run and how long they take; not model code, but it reads the model and train configs, so it
# sits above them), stages/ (the programs' mains). A file may include headers of its own layer and the layers below,
# never above: a lower folder that needs a higher one's code means that code sits in the wrong place (this test once
# found the RNG in model/ used by the data loader, and the shard content hash in pipeline/). So model/ includes neither
# datasets/ nor model/training/ nor pipeline/plan/, and pipeline/base/ no record or report code.
# A file's layer is the longest layer folder its path starts with (kernels/cpu/ is kernels/).
# tests/ and kernels/cuda/emu/ may include anything.
layers=(pipeline/base pipeline/records pipeline/report datasets kernels model model/training pipeline/plan stages)
# The rank of the layer a path (a file, or an include without its file name) belongs to; -1 for none.
rank() {
  local i best=-1 len=0
  for i in "${!layers[@]}"; do
    case "$1/" in "${layers[$i]}/"*) [ "${#layers[$i]}" -gt "$len" ] && { best=$i; len=${#layers[$i]}; } ;; esac
  done
  echo "$best"
}
[ "$(rank model/training/x.h)" -gt "$(rank model/x.h)" ] && [ "$(rank model/x.h)" -gt "$(rank datasets/x.h)" ] \
  && [ "$(rank kernels/cpu/x.h)" = "$(rank kernels/x.h)" ] && [ "$(rank pipeline/report/x.h)" -gt \
  "$(rank pipeline/records/x.h)" ] && [ "$(rank pipeline/plan/x.h)" -gt "$(rank model/training/x.h)" ] \
  && [ "$(rank stages/x.c)" -gt "$(rank pipeline/plan/x.h)" ] && [ "$(rank pipeline/x.h)" = -1 ] \
  || { echo "FAIL: rank() is broken"; exit 1; }
# Every source file belongs to a layer (pipeline/ itself holds only its floors, each of them a layer).
loose=$(find pipeline -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \))
[ -z "$loose" ] || { echo "FAIL: source files outside pipeline's floors (base, records, report, plan): $loose"
  exit 1; }
# A new floor of pipeline/ must be ranked in layers: unranked, each include of its files would read as a violation.
stray=$(find pipeline -mindepth 1 -maxdepth 1 -type d | while read -r d; do
  [ "$(rank "$d/x.h")" -ge 0 ] || echo "$d"; done)
[ -z "$stray" ] || { echo "FAIL: folders of pipeline/ that are no layer (add them to layers): $stray"; exit 1; }
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
