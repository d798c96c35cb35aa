#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# bin/train on the embedded sample for both architectures x both loss modes: the training loss falls (mean CE of the
# last 10% of steps clearly below the first 10%), every output is written (and nothing temporary left behind), the
# metrics and the summary carry the documented fields, and the MoEUT routing entropy lies in (0, log E].
source "$(dirname "$0")/train_common.sh"

bin/train --help | grep -q -- "--resume" || fail "--help does not document --resume"
train_data "$tmp/data"
steps=40
for arch in dense moeut; do
  for mode in qa answer; do
    run="${arch}_$mode"
    train_config "$tmp/$run.json" "$arch" "$mode" "$steps"
    bin/train --config "$tmp/$run.json" --data "$tmp/data" --out "$tmp/runs/$run" --threads 1 >"$tmp/$run.log" 2>&1 \
      || { cat "$tmp/$run.log"; fail "$run: bin/train failed"; }
    d="$tmp/runs/$run"
    for f in model.safetensors optim.safetensors state.json metrics.jsonl train_summary.json; do
      [ -s "$d/$f" ] || fail "$run: $f missing"
    done
    leftovers=$(ls "$d" | grep -E '\.pending$|\.tmp\.' || true)
    [ -z "$leftovers" ] || fail "$run: temporary files left: $leftovers"
    [ "$(wc -l <"$d/metrics.jsonl")" = "$steps" ] || fail "$run: expected $steps metrics lines (log_every 1)"
    for k in step loss ce reg_ffn reg_att lr grad_norm tokens tokens_per_s expert_entropy; do
      grep -q "\"$k\":" "$d/metrics.jsonl" || fail "$run: metrics field $k missing"
    done
    for k in steps tokens wall_time_s final_train_loss tokens_per_s backend hardware precision config_sha256 n_params \
             code_version; do
      grep -q "\"$k\"" "$d/train_summary.json" || fail "$run: train_summary field $k missing"
    done
    [ "$(json_get "$d/train_summary.json" steps)" = "$steps" ] || fail "$run: summary steps"
    [ "$(json_get "$d/train_summary.json" tokens)" = "$((steps * 8 * 128))" ] || fail "$run: summary tokens"
    [ "$(json_get "$d/train_summary.json" backend)" = cpu ] || fail "$run: summary backend"
    want_sha=$(sha256sum "$tmp/$run.json" | cut -d' ' -f1)
    [ "$(json_get "$d/train_summary.json" config_sha256)" = "$want_sha" ] || fail "$run: summary config_sha256"

    # falling loss: mean CE over the first and the last 10% of the steps
    read -r first last < <(awk -v n="$steps" '
      { match($0, /"ce":[-0-9.eE+]+/); ce = substr($0, RSTART + 5, RLENGTH - 5); k = int(n / 10);
        if (NR <= k) f += ce; if (NR > n - k) l += ce }
      END { printf "%.4f %.4f\n", f / int(n / 10), l / int(n / 10) }' "$d/metrics.jsonl")
    echo "$run: mean CE first 10% $first, last 10% $last"
    awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.75 * f) }' || fail "$run: loss did not fall enough ($first -> $last)"

    # routing entropy: MoEUT reports the mean over modules, in (0, log 8]; dense reports 0
    ent=$(tail -n 1 "$d/metrics.jsonl" | sed -E 's/.*"expert_entropy":([-0-9.eE+]+).*/\1/')
    if [ "$arch" = moeut ]; then
      awk -v e="$ent" 'BEGIN { exit !(e > 0 && e <= log(8) + 1e-9) }' || fail "$run: expert_entropy $ent outside (0, log 8]"
    else
      [ "$ent" = 0 ] || fail "$run: dense expert_entropy should be 0, got $ent"
    fi
  done
done
echo "ok: all four runs trained with falling loss"
