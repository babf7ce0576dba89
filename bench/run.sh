#!/usr/bin/env bash
# Builds relattn, then runs its benchmark and PyTorch's on the same shapes in
# the same session, and prints relattn / PyTorch ratios per column.
#   bench/run.sh [--threads N] [--reps R]
set -euo pipefail
cd "$(dirname "$0")/.."
RELATTN_WITH_TORCH=1 bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target relattn_bench >/dev/null
out=$(mktemp -d)
build/relattn_bench "$@" | tee "$out/relattn.txt"
echo
/usr/bin/python3 bench/bench_torch.py "$@" | tee "$out/torch.txt"
echo
echo "relattn / PyTorch (same shapes, same flop counts; > 1 is faster):"
awk '/GFLOP\/s$/ { key = substr($0, 1, 40); k = $(NF-5)
       if (FILENAME ~ /torch/) { for (i = 0; i < 4; i++) t[key, i] = $(NF-4+i) }
       else { best[key, k] = 1; for (i = 0; i < 4; i++) r[key, k, i] = $(NF-4+i); order[++n] = key SUBSEP k } }
     END { printf "%-40s %-6s %10s %10s %10s %10s\n", "shape", "kernel", "core fwd", "core bwd", "layer fwd", "layer bwd"
           for (j = 1; j <= n; j++) { split(order[j], p, SUBSEP); key = p[1]; k = p[2]
             printf "%-40s %-6s", key, k
             for (i = 0; i < 4; i++) printf " %9.2fx", (t[key, i] > 0 ? r[key, k, i] / t[key, i] : 0)
             printf "\n" } }' "$out/relattn.txt" "$out/torch.txt"
