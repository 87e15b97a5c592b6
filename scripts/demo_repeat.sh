#!/usr/bin/env bash
# Run the README's demo (./dev demo) N times in a row on this machine and measure each tuned recipe beside the shipped
# recipes/llama3-tiny/cpu-tuned.yaml, paired (runs alternate, tuned first then reference, PAIRS pairs, same
# `attune run` protocol), printing each demo's wall time, gain and the paired throughput ratio.
# Usage: scripts/demo_repeat.sh [N=5] [PAIRS=3]   (run from a checkout with ./dev setup done; nothing else running)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-5}
PAIRS=${2:-3}
ATTUNE="$PWD/.venv/bin/attune"
PY="$PWD/.venv/bin/python"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tps() { "$ATTUNE" run "$1" --out "$2" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["tps_median"])'; }
for i in $(seq 1 "$N"); do
  start=$(date +%s)
  ./dev demo > "$work/demo$i.log" 2>&1 || { echo "demo $i failed"; tail -20 "$work/demo$i.log"; exit 1; }
  wall=$(( $(date +%s) - start ))
  gain=$(grep -m1 '^| gain' "$work/demo$i.log" | cut -d'|' -f3 | sed 's/^ *//; s/ *(.*//')
  clone=$(grep -m1 -o ' in /[^ ]*attune-demo-[^ ]*/repo' "$work/demo$i.log" | sed 's/^ in //')
  cp "$clone/recipes/llama3-tiny/cpu.yaml" "$work/tuned$i.yaml"
  cp "$work/demo$i.log" "/tmp/demo_repeat_$i.log"
  rm -rf "$(dirname "$clone")"
  cp "$work/tuned$i.yaml" recipes/llama3-tiny/.demo-tuned.yaml
  ratios=()
  for p in $(seq 1 "$PAIRS"); do
    a=$(tps recipes/llama3-tiny/.demo-tuned.yaml "$work/r$i-$p-a")
    b=$(tps recipes/llama3-tiny/cpu-tuned.yaml "$work/r$i-$p-b")
    ratios+=("$("$PY" -c "print(f'{$a/$b:.4f}')")")
  done
  rm -f recipes/llama3-tiny/.demo-tuned.yaml
  levers=$(sed -n '/^levers:/,/^[a-z]/p' "$work/tuned$i.yaml" | grep -v '^[a-z]' | tr -s ' ' | tr '\n' ';')
  echo "demo $i: ${wall}s, campaign gain $gain, tuned/cpu-tuned tokens/s per pair: ${ratios[*]}; levers:$levers"
done
