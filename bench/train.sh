#!/usr/bin/env bash
# Training throughput of relattn against its PyTorch twin (tools/train_twin.py),
# same model (the default of relattn train), same batch, same machine, one
# after the other: relattn at 1 and 2 threads (relattn_bench_train: medians of
# repetitions, GFLOP/s and share of the FMA peak measured in the same run),
# PyTorch at 1 and 2 threads with OPENBLAS_NUM_THREADS to match, each with
# OPENBLAS_CORETYPE as the environment has it (or unset) and with the best
# kernel set for this CPU (bench/blas.sh), so that no ratio flatters
# relattn. Prints images/s and the ratio to PyTorch's best.
#   bench/train.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/blas.sh
reps=${1:-3}
RELATTN_WITH_TORCH=1 bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target relattn_bench_train >/dev/null
declare -A ips
for t in 1 2; do
  line=$(build/relattn_bench_train --threads $t --steps 10 --reps "$reps" | tail -n 1)
  echo "relattn  $line"
  ips[relattn_$t]=$(echo "$line" | sed -E 's/.*median ([0-9.]+) img\/s.*/\1/')
done
torch_best=0 torch_best_how=
for bb in $(blas_builds); do
  for t in 1 2; do
    for ct in $(blas_coretypes); do
      runs=()
      for r in $(seq 1 "$reps"); do
        v=$(blas_run "$bb" "$ct" "$t" /usr/bin/python3 tools/train_twin.py --threads "$t" \
              --bench-steps 20 2>/dev/null | tail -n 1)
        runs+=("$(echo "$v" | sed -E 's/.*"images_per_second": ([0-9.]+).*/\1/')")
        core=$(echo "$v" | sed -E 's/.*"blas_core": "?([A-Za-z0-9_]*)"?.*/\1/')
      done
      med=$(printf '%s\n' "${runs[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
      echo "pytorch  OpenBLAS $bb build, threads $t OPENBLAS_CORETYPE=$ct (kernel set $core): runs ${runs[*]} img/s, median $med"
      if awk -v a="$med" -v b="$torch_best" 'BEGIN {exit !(a > b)}'; then
        torch_best=$med torch_best_how="OpenBLAS $bb build, threads $t, OPENBLAS_CORETYPE=$ct"
      fi
    done
  done
done
echo "pytorch best: $torch_best img/s ($torch_best_how)"
for t in 1 2; do
  awk -v a="${ips[relattn_$t]}" -v b="$torch_best" -v t=$t \
    'BEGIN {printf "relattn %d thread(s) / pytorch best: %.2fx\n", t, a / b}'
done
