#!/usr/bin/env bash
# The MoE-variant switches (README "MoE-variant switches") through bin/train on the CPU: every switch trains (loss
# finite and falling), reg_ffn is the balancing term the switch names (the Switch loss > 0, "none" exactly 0,
# expert_entropy 0 outside "entropy"), a Switch run interrupted and resumed ends byte-identical to the uninterrupted
# one, and a coefficient of another balance is refused with one line naming the key (--set KEY=null removes it).
source "$(dirname "$0")/train_common.sh"

train_data "$tmp/data"
train_config "$tmp/moeut.json" moeut answer 24 checkpoint_every=6
metric() { # metric DIR LINE KEY: a field of line LINE (1-based; $ = last) of metrics.jsonl
  sed -n "$2p" "$1/metrics.jsonl" | sed -E "s/.*\"$3\":([-0-9.eE+]+).*/\1/"
}

run() { # run NAME --set ... : trains 24 steps into $tmp/NAME
  local name=$1
  shift
  bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/$name" --threads 1 "$@" >"$tmp/$name.log" 2>&1 \
    || { cat "$tmp/$name.log"; fail "$name: bin/train failed"; }
}

run switch --set model.router=softmax --set model.router_renorm=true --set model.balance=switch \
  --set model.balance_alpha=0.05 --set model.entropy_reg=null
run none --set model.router=softmax --set model.balance=none --set model.entropy_reg=null
run sigmoid_renorm --set model.router_renorm=true

for name in switch none sigmoid_renorm; do
  first=$(metric "$tmp/$name" 1 loss) last=$(metric "$tmp/$name" '$' loss)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b == b + 0 && b < a) }' \
    || fail "$name: loss did not fall (first $first, last $last)"
  echo "ok: $name trains (loss $first -> $last)"
done
reg=$(metric "$tmp/switch" '$' reg_ffn)
# 2 distinct layers x 2 applications: four Switch losses, each E * sum f P (1 for a perfectly uniform router)
awk -v r="$reg" 'BEGIN { exit !(r > 0.5 && r < 4 * 8) }' || fail "switch: reg_ffn $reg is not a sum of 4 Switch losses"
[ "$(metric "$tmp/switch" '$' expert_entropy)" = 0 ] || fail "switch: expert_entropy should be 0"
[ "$(metric "$tmp/none" '$' reg_ffn)" = 0 ] || fail "none: reg_ffn should be exactly 0"
ent=$(metric "$tmp/sigmoid_renorm" '$' expert_entropy)
awk -v e="$ent" 'BEGIN { exit !(e > 0 && e <= log(8) + 1e-9) }' || fail "sigmoid_renorm: expert_entropy $ent"
echo "ok: reg_ffn follows the balance (switch $reg, none 0, entropy run's expert_entropy $ent)"

# the checkpoint keeps the switches: interrupted at step 8, resumed, byte-identical to the uninterrupted run
sets=(--set model.router=softmax --set model.router_renorm=true --set model.balance=switch
  --set model.balance_alpha=0.05 --set model.entropy_reg=null)
bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/switch_resumed" --threads 1 "${sets[@]}" \
  --stop-after 8 >"$tmp/stop.log" 2>&1 || { cat "$tmp/stop.log"; fail "--stop-after run failed"; }
bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/switch_resumed" --threads 1 "${sets[@]}" \
  --resume >"$tmp/resume.log" 2>&1 || { cat "$tmp/resume.log"; fail "--resume run failed"; }
same_as_ref "$tmp/switch" "$tmp/switch_resumed" "switch run stopped at step 8 and resumed"

# a coefficient that has no effect under the chosen balance: refused, one line naming the key, no run written
rc=0
bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/refused" --threads 1 \
  --set model.balance=switch >"$tmp/refused.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "entropy_reg with balance switch was accepted"
grep -q 'model.entropy_reg: has no effect with model.balance "switch"' "$tmp/refused.log" \
  || { cat "$tmp/refused.log"; fail "the refusal does not name model.entropy_reg"; }
[ "$(grep -c 'error' "$tmp/refused.log")" = 1 ] || { cat "$tmp/refused.log"; fail "the refusal is not one error line"; }
[ ! -e "$tmp/refused/model.safetensors" ] || fail "a refused run wrote a checkpoint"
echo "ok: a coefficient of another balance is refused naming the key"
