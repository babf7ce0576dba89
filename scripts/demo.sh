#!/usr/bin/env bash
# Installs what is missing, builds relattn and walks through what it does on
# the example shipped in examples/: the relative position index tables, then a Swin
# window attention forward pass with a summary of its attention map.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
r=build/relattn
say() { printf '\n\033[1m%s\033[0m\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }

say "Swin 2x2 window: the relative position index" $r index --window 2x2
say "Swin 7x7 window: the first row of the index (values span 0..168)" \
    bash -c "$r index --window 7x7 | head -n 1"
say "RSTT 3-D: 7 query frames, 4 key/value frames (0,2,4,6), 1x2 window" \
    $r index --frames 7 --kv-frames 4 --window 1x2
say "Shaw et al.: clip(j-i, -2, 2) + 2 over 6 tokens" $r index --length 6 --clip 2
say "The example model: a Swin window attention, 7x7 window, 3 heads" \
    $r show examples/swin_window_7x7.safetensors
out=$(mktemp -d)/out.safetensors
say "Forward pass over 8 windows with the shifted-window mask" \
    $r forward examples/swin_window_7x7.safetensors examples/swin_windows_input.safetensors \
       -o "$out" --attn
say "The output and its attention map" $r show "$out"
