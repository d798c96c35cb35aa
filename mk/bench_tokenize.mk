# make bench-tokenize: wall time of bin/tokenize against `zcat ARCHIVE > /dev/null` (the cost of just reading the
# compressed data once), measured in the same run, and their ratio.
#   ARCHIVE: datasets/dm_math_arithmetic.tar.gz (shipped: 9 arithmetic modules, 20,000 pairs per train
#   file, 5,000 per evaluation file). Override with BENCH_TOKENIZE_ARCHIVE=path (e.g. the embedded sample).
# The raw directory is extracted once with bin/fetch into build/bench/tokenize/raw (redone when the archive changes);
# the tokenize section used is the experiments' default (vocab 512, 10,000 corpus pairs per file, 5,000 eval examples).

BENCH_TOKENIZE_ARCHIVE ?= datasets/dm_math_arithmetic.tar.gz
BENCH_TOKENIZE_DIR := build/bench/tokenize

.PHONY: bench-tokenize
bench-tokenize: bin/tokenize bin/fetch
	@set -euo pipefail; d=$(BENCH_TOKENIZE_DIR); a=$(BENCH_TOKENIZE_ARCHIVE); mkdir -p $$d; \
	stamp="$$a $$(stat -c '%s %Y' $$a)"; \
	if [ ! -f $$d/raw/manifest.json ] || [ "$$(cat $$d/raw.stamp 2>/dev/null)" != "$$stamp" ]; then \
	  rm -rf $$d/raw; \
	  bin/fetch --source $$a --out $$d/raw --filter 'arithmetic__.*' --tokenizer-corpus-pairs 10000 >/dev/null; \
	  echo "$$stamp" >$$d/raw.stamp; \
	fi; \
	printf '%s\n' '{"tokenize": {"vocab_size": 512, "max_piece_length": 16, "tokenizer_pairs_per_file": 10000,' \
	  '"eval_examples": 5000, "eval_shuffle_seed": 123, "train_shuffle_seed": 1,' \
	  '"exclude_tokenizer_pattern": "probability__swr_.*"}}' >$$d/data.json; \
	TIMEFORMAT='%R %U %S'; \
	if ! { time bin/tokenize --raw $$d/raw --config $$d/data.json --out $$d/out --quiet; } 2>$$d/time_tokenize; then \
	  cat $$d/time_tokenize; exit 1; fi; \
	{ time zcat $$a >/dev/null; } 2>$$d/time_zcat; \
	summary=$$(/usr/bin/python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); s=m["splits"]; \
	  print("%d train + %d interpolate + %d extrapolate examples, %d tokens" % (s["train"]["n_examples"], \
	  s["interpolate"]["n_examples"], s["extrapolate"]["n_examples"], sum(v["n_tokens"] for v in s.values())))' \
	  $$d/out/tokenize_manifest.json 2>/dev/null || echo "see $$d/out/tokenize_manifest.json"); \
	echo "bench-tokenize: archive $$a ($$(stat -c %s $$a) bytes); $$(nproc) cores, load average $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	echo "  output: $$summary"; \
	read tw tu ts <$$d/time_tokenize; read zw zu zs <$$d/time_zcat; \
	awk -v tw=$$tw -v tu=$$tu -v ts=$$ts -v zw=$$zw -v zu=$$zu -v zs=$$zs 'BEGIN { \
	  printf "  bin/tokenize: %.3f s wall, %.3f s CPU (user+sys)\n", tw, tu + ts; \
	  printf "  zcat ARCHIVE: %.3f s wall, %.3f s CPU\n", zw, zu + zs; \
	  printf "  ratio tokenize/zcat: %.1fx wall, %.1fx CPU\n", tw / zw, (tu + ts) / (zu + zs) }'
