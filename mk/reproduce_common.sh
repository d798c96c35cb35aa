# Shared by mk/reproduce_plan.sh, mk/reproduce_stage.sh and mk/gpu/run.sh (sourced): reading numbers out of the JSON
# records and configs without a JSON tool (they are the project's own files: cJSON's output and the experiments/
# configs), and the stages a dry run of make lists.

# json_number FILE KEY: the first number given for "KEY" in FILE (whitespace ignored; a number written as a string,
# as state.json writes doubles, counts too), or nothing.
json_number() {
  [ -f "$1" ] || return 0
  tr -d ' \t\r\n' <"$1" | grep -o "\"$2\":\"\?[-+0-9.eE]*" | head -1 | cut -d: -f2 | tr -d '"'
}

# json_string FILE KEY: the first string given for "KEY" in FILE, or nothing.
json_string() {
  [ -f "$1" ] || return 0
  tr -d '\r\n' <"$1" | grep -o "\"$2\":[[:space:]]*\"[^\"]*\"" | head -1 | sed 's/.*:[[:space:]]*"//; s/"$//'
}

# human_duration SECONDS: "45 s", "3 min", "1 h 20 min".
human_duration() {
  local s=${1%.*}
  [ -n "$s" ] || s=0
  if [ "$s" -lt 90 ]; then echo "$s s"
  elif [ "$s" -lt 5400 ]; then echo "$(( (s + 30) / 60 )) min"
  else echo "$(( s / 3600 )) h $(( (s % 3600 + 30) / 60 )) min"; fi
}

# dry_run_stages [FILE]: the stages a dry run of `make reproduce-stages` lists (FILE, else standard input), one
# "STAGE RUN" line each (RUN empty for fetch, tokenize and report): every stage's recipe starts with
# "mk/reproduce_stage.sh STAGE [RUN]" (mk/reproduce.mk's repro_stage).
dry_run_stages() {
  sed -nE 's/.*mk\/reproduce_stage\.sh ([a-z]+) ?([^ ]*).*/\1 \2/p' "$@"
}
