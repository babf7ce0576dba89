#!/usr/bin/env bash
# Builds relattn, runs its benchmark (relattn_bench) and PyTorch's
# (bench/bench_torch.py) on the same rows and networks in one session, and
# sets them side by side against the issue's targets (bench/summary.py).
#   bench/run.sh [--threads N] [--reps R] [--what all|layers|nets]
#                [--batches 1,8] [--rows TEXT] [--kernels all|default]
#                [--precisions fp32,bf16,int8] [--markdown FILE] [--keep DIR]
# relattn runs every row at 1 and N threads (default N: every core).
# PyTorch runs in one process per BLAS setting, each kernel set of
# bench/blas.sh at 1 and N threads; summary.py takes its best per row.
# --precisions: the networks' forward in each (default all three), on both
# sides; PyTorch's bf16 and int8 run in one BLAS setting per thread count,
# the last (the OpenMP build with the CPU's best kernel set, PyTorch's best
# in float32; what stays float32 in them, as vit_b_16's attention
# projections under int8, is OpenBLAS's): their bf16 and int8 products are
# not OpenBLAS's, and its bf16 products are slow enough on CPUs without
# AVX512_BF16 that eight settings would take hours.
# --markdown FILE writes the targets' summary and the networks' tables as
# Markdown; --keep DIR keeps the raw results (DIR/results.tsv) instead of a
# temporary directory.
# Networks: torchvision swin_t and vit_b_16 with random weights, exported
# once by tools/export.py into $RELATTN_BENCH_MODELS (default
# /tmp/relattn-bench-models); both sides load the same files.
# $RELATTN_BUILD picks the build directory (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/blas.sh
threads=$(nproc) reps=5 what=all batches=1,8 rows= kernels=all markdown= keep=
precisions=fp32,bf16,int8
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 64; }
  case $1 in
    --threads) threads=$2 ;;
    --reps) reps=$2 ;;
    --what) what=$2 ;;
    --batches) batches=$2 ;;
    --rows) rows=$2 ;;
    --kernels) kernels=$2 ;;
    --precisions) precisions=$2 ;;
    --markdown) markdown=$2 ;;
    --keep) keep=$2 ;;
    *) echo "run.sh: unknown option $1 (see the top of bench/run.sh)" >&2; exit 64 ;;
  esac
  shift 2
done
counts=1
[ "$threads" -gt 1 ] && counts="1 $threads"

RELATTN_WITH_TORCH=1 bash scripts/deps.sh
build=${RELATTN_BUILD:-build}
models=${RELATTN_BENCH_MODELS:-/tmp/relattn-bench-models}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target relattn_bench >/dev/null
if [ "$what" != layers ]; then
  mkdir -p "$models"
  for net in swin_t vit_b_16 swin_v2_t; do
    [ -s "$models/$net.safetensors" ] ||
      /usr/bin/python3 tools/export.py --torchvision "$net" --out "$models/$net.safetensors" >&2
  done
fi
if [ -n "$keep" ]; then
  out=$keep
  mkdir -p "$out"
  rm -f "$out/results.tsv"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
common=(--reps "$reps" --what "$what" --batches "$batches" --rows "$rows"
        --models "$models" --results "$out/results.tsv")

"$build/relattn_bench" "${common[@]}" --threads "${counts// /,}" --kernels "$kernels" \
  --precisions "$precisions"
echo
memory=(--memory)   # the Shaw rows' memory: once, it does not depend on the setting
last_bb=$(blas_builds | tail -n 1) last_ct=$(blas_coretypes | tail -n 1)
case ",$precisions," in *,fp32,*) fp32=fp32 ;; *) fp32= ;; esac
for bb in $(blas_builds); do
  for ct in $(blas_coretypes); do
    prec=$fp32   # the reduced precisions in the last setting only (above)
    [ "$bb" = "$last_bb" ] && [ "$ct" = "$last_ct" ] && prec=$precisions
    for t in $counts; do
      blas_run "$bb" "$ct" "$t" /usr/bin/python3 -u bench/bench_torch.py "${common[@]}" \
        --threads "$t" --precisions "$prec" "${memory[@]}"
      memory=()
      echo
    done
  done
done
/usr/bin/python3 bench/summary.py "$out/results.tsv" ${markdown:+--markdown "$markdown"}
