#!/usr/bin/env bash
# Builds relattn, then runs its benchmark and PyTorch's on the same shapes and
# the same networks in the same session, and prints relattn / PyTorch ratios.
#   bench/run.sh [--threads N] [--reps R] [--what all|layers|nets] [--batches 1,8]
# Networks: torchvision swin_t and vit_b_16 with random weights, exported
# once by tools/export.py into $RELATTN_BENCH_MODELS (default
# /tmp/relattn-bench-models); both sides load the same files.
# $RELATTN_BUILD picks the build directory (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
RELATTN_WITH_TORCH=1 bash scripts/deps.sh
build=${RELATTN_BUILD:-build}
models=${RELATTN_BENCH_MODELS:-/tmp/relattn-bench-models}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target relattn_bench >/dev/null
what=all
prev=
for a in "$@"; do [ "$prev" = --what ] && what=$a; prev=$a; done
if [ "$what" != layers ]; then
  mkdir -p "$models"
  for net in swin_t vit_b_16; do
    [ -s "$models/$net.safetensors" ] ||
      /usr/bin/python3 tools/export.py --torchvision "$net" --out "$models/$net.safetensors" >&2
  done
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$build/relattn_bench" --models "$models" "$@" | tee "$out/relattn.txt"
echo
/usr/bin/python3 bench/bench_torch.py --models "$models" "$@" | tee "$out/torch.txt"
echo
if grep -q 'images/s' "$out/relattn.txt"; then
  echo "networks, relattn / PyTorch images/s (same weights, same input size; > 1 is faster):"
  awk '/images\/s/ && /^net / { key = substr($0, 1, 40); split(substr($0, 41), f, " ")
         if (FILENAME ~ /torch/) t[key] = f[2]
         else { r[key] = f[2]; k[key] = f[1]; order[++n] = key } }
       END { printf "%-40s %-6s %10s %10s %10s\n", "network", "kernel", "relattn", "torch", "ratio"
             for (j = 1; j <= n; j++) { key = order[j]
               printf "%-40s %-6s %10.2f %10.2f %9.2fx\n", key, k[key], r[key], t[key],
                      (t[key] > 0 ? r[key] / t[key] : 0) } }' "$out/relattn.txt" "$out/torch.txt"
  echo
fi
if grep -v '^FMA' "$out/relattn.txt" | grep -q 'GFLOP/s$'; then
  echo "layers, relattn / PyTorch (same shapes, same flop counts; > 1 is faster):"
  awk '/GFLOP\/s$/ && !/^net / && !/^FMA / { key = substr($0, 1, 40); k = $(NF-5)
         if (FILENAME ~ /torch/) { for (i = 0; i < 4; i++) t[key, i] = $(NF-4+i) }
         else { best[key, k] = 1; for (i = 0; i < 4; i++) r[key, k, i] = $(NF-4+i); order[++n] = key SUBSEP k } }
       END { printf "%-40s %-6s %10s %10s %10s %10s\n", "shape", "kernel", "core fwd", "core bwd", "layer fwd", "layer bwd"
             for (j = 1; j <= n; j++) { split(order[j], p, SUBSEP); key = p[1]; k = p[2]
               printf "%-40s %-6s", key, k
               for (i = 0; i < 4; i++) printf " %9.2fx", (t[key, i] > 0 ? r[key, k, i] / t[key, i] : 0)
               printf "\n" } }' "$out/relattn.txt" "$out/torch.txt"
fi
