#!/usr/bin/env bash
# The position-encoding ablation of the README (the Swin paper's Table 4,
# on Fashion-MNIST, plus Shaw et al.'s relative keys and values): the same
# model, recipe, seed and number of epochs for each --pos variant, then a
# Markdown table of test accuracies and one picture of all the curves.
#   scripts/ablation.sh [EPOCHS] [THREADS]      -> out/ablation/
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-3}
threads=${2:-2}
r=build/relattn
[ -x $r ] || { bash scripts/deps.sh && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null &&
               cmake --build build -j "$(nproc)" >/dev/null; }
out=${RELATTN_OUT:-out}/ablation
mkdir -p "$out"
table=$out/table.md
printf '| --pos | test accuracy | train seconds | images/s |\n|---|---|---|---|\n' > "$table"
ckpts=() labels=()
for pos in none abs relbias relbias+abs shaw; do
  f=$out/${pos/+/_}.safetensors
  echo "ablation: --pos $pos, $epochs epochs" >&2
  $r train --pos "$pos" --epochs "$epochs" --threads "$threads" --seed 0 --json --out "$f" \
    > "$out/${pos/+/_}.jsonl"
  tail -n 1 "$out/${pos/+/_}.jsonl" | sed -E 's/.*"test_accuracy": ([0-9.]+).*"train_seconds": ([0-9.]+).*"images_per_second": ([0-9.]+).*/\1 \2 \3/' |
    { read -r acc secs ips; printf '| %s | %s | %s | %s |\n' "$pos" "$acc" "$secs" "$ips"; } >> "$table"
  ckpts+=("$f") labels+=(--label "$pos")
done
$r plot curves "${ckpts[@]}" "${labels[@]}" -o "$out/curves.png"
cat "$table"
