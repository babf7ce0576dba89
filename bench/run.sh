#!/usr/bin/env bash
# Builds relattn, runs its benchmark (relattn_bench) and PyTorch's
# (bench/bench_torch.py) on the same rows and networks in one session, and
# sets them side by side against the issue's targets (bench/summary.py).
#   bench/run.sh [--threads N] [--reps R] [--what all|layers|nets|video3d]
#                [--batches 1,8] [--rows TEXT] [--kernels all|default]
#                [--precisions fp32,bf16,int8] [--clip T,S] [--markdown FILE]
#                [--keep DIR]
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
# --what video3d: the video network swin3d_t alone (torchvision >= 0.15's,
# exported once through tools/swin3d_net_twin.py), one clip of --clip T,S
# (default 32,224: 1 x 3 x 32 x 224 x 224) in every precision on both sides
# as above; then the classify path's decoding + sampling + transform of one
# clip of T frames at an interval of 2 from a generated 10-s 340x256 H.264
# video (bench_video.c decode), and the resident memory of each side's
# inference, one process per precision (relattn) and per way (PyTorch).
# A small --clip (8,64) checks the whole session in minutes; it prints an
# estimate of its duration first.
# $RELATTN_BUILD picks the build directory (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/blas.sh

# video3d_estimate CLIP REPS THREADS PRECISIONS WAYS BUILDS CORETYPES:
# prints the expected duration of a --what video3d session, from the forward
# calls it makes on each side and the seconds per GFLOP of swin_t B=8 on the
# 2-core AMD EPYC (Zen 4) of 2026-11-27 (results/2026-11-27_amd-epyc-zen4_s6
# _bench-run_b8.tsv; PyTorch's int8 from vit_b_16's), its flops scaled from
# swin3d_t's 32x224x224 (2 x 87.8 G multiply-adds, ra_model_flops) by
# T x S^2, and by 1.7 for Video Swin's 392-token windows, whose attention
# weighs more than swin_t's 49-token ones (relattn's fp32 forward of
# 32x224x224 took 3.2 CPU-seconds on a loaded 2-core Zen 4 on 2026-11-28,
# 1.7x swin_t's per flop). Rough: +-50 %.
video3d_estimate() {
  awk -v clip="$1" -v reps="$2" -v n="$3" -v precs="$4" -v ways="$5" -v nb="$6" -v nc="$7" '
  BEGIN {
    split(clip, c, ","); g = 175.6 * (c[1] / 32) * (c[2] / 224) ^ 2   # GFLOP a forward
    k = 1.7   # seconds per GFLOP, Video Swin over swin_t (above)
    # s/GFLOP at 1 and N threads: relattn per precision, PyTorch per precision
    r1["fp32"] = .0104; rn["fp32"] = .0053; t1["fp32"] = .0107; tn["fp32"] = .0090
    r1["bf16"] = .0057; rn["bf16"] = .0030; t1["bf16"] = .0107; tn["bf16"] = .0058
    r1["int8"] = .0038; rn["int8"] = .0019; t1["int8"] = .0080; tn["int8"] = .0050
    multi = n > 1; calls = reps + 1; proc = 8   # seconds to start python + load the model
    np_ = split(precs, p, ","); nw = split(ways, w, "\n")
    for (i = 1; i <= np_; i++) {   # relattn: 1 and N threads interleaved, + 1 check; rss
      rel += g * (calls * (r1[p[i]] + multi * rn[p[i]]) + rn[p[i]]) + 2 + 2 * g * rn[p[i]]
    }
    for (i = 1; i <= nw; i++) {   # PyTorch: fp32 in every BLAS setting and split, the
      q = w[i] ~ /^bf16/ ? "bf16" : (w[i] ~ /^int8/ ? "int8" : "fp32")   # others in one
      if (q == "fp32") tor += nb * nc * (g * calls * (t1[q] + multi * 3 * tn[q]) + proc * (1 + multi))
      else tor += g * calls * (t1[q] + multi * tn[q])
      tor += proc + 2 * g * tn[q]   # its rss process
    }
    dec = 2 * calls * 1.0   # one clip of each 10-s video: about a second
    rel *= k; tor *= k
    printf "expected duration of this session: about %.0f min (relattn %.0f, PyTorch %.0f, " \
           "decoding %.0f; %.1f GFLOP a forward, %d reps)\n", (rel + tor + dec) / 60 + 1,
           rel / 60, tor / 60, dec / 60, g, reps
  }'
}
threads=$(nproc) reps=5 what=all batches=1,8 rows= kernels=all markdown= keep=
precisions=fp32,bf16,int8 clip=32,224
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
    --clip) clip=$2 ;;
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
targets=(relattn_bench)
[ "$what" = video3d ] && targets+=(relattn_bench_video)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >/dev/null
nets="swin_t vit_b_16 swin_v2_t"
[ "$what" = video3d ] && nets=swin3d_t
if [ "$what" != layers ]; then
  mkdir -p "$models"
  for net in $nets; do
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
last_bb=$(blas_builds | tail -n 1) last_ct=$(blas_coretypes | tail -n 1)
if [ "$what" = video3d ]; then
  common+=(--clip "$clip")
  # 10 s at Kinetics' typical size, 30 frames a second, H.264: testsrc as it
  # is (x264 makes ~40 kbit/s of it, cheap to decode), and with noise at
  # 1 Mbit/s (every macroblock coded, the cost of camera footage)
  videos=("$models/testsrc_340x256_10s.mp4" "$models/testsrc-noise_340x256_10s_1M.mp4")
  [ -s "${videos[0]}" ] || ffmpeg -nostdin -loglevel error -f lavfi \
    -i testsrc=duration=10:size=340x256:rate=30 -c:v libx264 -pix_fmt yuv420p "${videos[0]}"
  [ -s "${videos[1]}" ] || ffmpeg -nostdin -loglevel error -f lavfi \
    -i testsrc=duration=10:size=340x256:rate=30 -vf noise=alls=30:allf=t+u -c:v libx264 \
    -b:v 1M -pix_fmt yuv420p "${videos[1]}"
  ways=$(/usr/bin/python3 bench/bench_torch.py --list-ways --precisions "$precisions")
  video3d_estimate "$clip" "$reps" "$threads" "$precisions" "$ways" \
    "$(blas_builds | wc -l)" "$(blas_coretypes | wc -l)"
  start=$(date +%s)
fi

"$build/relattn_bench" "${common[@]}" --threads "${counts// /,}" --kernels "$kernels" \
  --precisions "$precisions"
echo
memory=(--memory)   # the Shaw rows' memory: once, it does not depend on the setting
[ "$what" = video3d ] && memory=()
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
if [ "$what" = video3d ]; then
  # what feeds the network: the classify path of one clip (ffmpeg decodes
  # on one thread, the transform runs on every thread)
  for video in "${videos[@]}"; do
    "$build/relattn_bench_video" decode "$video" "$models/swin3d_t.safetensors" \
      --clip-len "${clip%%,*}" --interval 2 --reps "$reps" --threads "$threads" \
      --results "$out/results.tsv"
    echo
  done
  # the memory of an inference, a process each: relattn per precision, then
  # PyTorch per way in its reduced precisions' BLAS setting, at N threads
  for p in ${precisions//,/ }; do
    "$build/relattn_bench_video" rss "$models/swin3d_t.safetensors" --precision "$p" \
      --clip "$clip" --threads "$threads" --results "$out/results.tsv"
  done
  while IFS= read -r way; do
    [ -n "$way" ] || continue
    blas_run "$last_bb" "$last_ct" "$threads" /usr/bin/python3 -u bench/bench_torch.py \
      "${common[@]}" --threads "$threads" --rss "$way" | tail -n 1
  done <<< "$ways"
  echo
  echo "the session took $(( ($(date +%s) - start + 30) / 60 )) min"
fi
/usr/bin/python3 bench/summary.py "$out/results.tsv" ${markdown:+--markdown "$markdown"}
