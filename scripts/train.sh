#!/usr/bin/env bash
# The main job: install what is missing, build, train a Swin with learned
# relative position bias on Fashion-MNIST, evaluate the checkpoint, and draw
# what it learned. Extra arguments go to 'relattn train' (for example
# --time-budget 120, --epochs 3, --threads 1).
#   scripts/train.sh [TRAIN OPTIONS]     -> out/ (checkpoint, pictures)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
r=build/relattn
out=${RELATTN_OUT:-out}
mkdir -p "$out"
ck=$out/swin-fmnist.safetensors
say() { printf '\n\033[1m%s\033[0m\n$ %s\n' "$1" "${*:2}" >&2; "${@:2}"; }

say "Train (checkpoint every 500 steps and every epoch; --resume $ck continues)" \
    $r train --out "$ck" --json "$@" | tee "$out/train.jsonl"
say "Evaluate the checkpoint: the same test accuracy, and the confusion matrix" $r eval "$ck"
say "The learned relative position bias of every block and head" \
    $r plot bias "$ck" -o "$out/bias.png"
say "Attention of three query tokens over a test image (stage 1, block 1)" \
    $r plot attention "$ck" --index 0 --stage 0 --block 1 -o "$out/attention.png"
say "Loss and test accuracy" $r plot curves "$ck" --label relbias -o "$out/curves.png"
say "A test image as PNG, classified" $r plot sample --index 0 -o "$out/sample.png"
$r classify "$ck" "$out/sample.png" --top 3
printf '\npictures: %s/bias.png %s/attention.png %s/curves.png\n' "$out" "$out" "$out" >&2
