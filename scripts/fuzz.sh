#!/usr/bin/env bash
# Builds the libFuzzer harnesses of fuzz/ (clang, ASan + UBSan) and runs
# each for SECONDS (default 30), one after the other, seeded from the
# repository's corpora (tests/corpus: malformed and valid safetensors files
# and models; tests/fixtures: models of every arch, the images, the PyTorch
# checkpoints pt_*.pth; fuzz/corpus: IDX dataset pairs, pickles, safetensors
# files under transformers' names, infer: state dicts' names and shapes in
# fuzz_infer's encoding, augment: RandAugment policies, video: tiny videos
# made by the ffmpeg command; tests/configs:
# config.json files). New inputs
# go to build-fuzz/corpus/NAME (kept between runs); a crash leaves
# build-fuzz/crash-* and fails the script (make it a regression test).
#   bash scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
bash scripts/deps.sh
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DRELATTN_FUZZ=ON -DRELATTN_TESTS=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc 2>/dev/null || echo 2)" \
      --target fuzz_safetensors fuzz_model fuzz_image fuzz_idx fuzz_pickle fuzz_torch fuzz_args \
               fuzz_hf fuzz_config fuzz_infer fuzz_augment fuzz_video
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=1   # one core a fuzzer; the library's threads are not what is fuzzed
run() {   # name, then libFuzzer seed arguments
    local name=$1
    shift
    mkdir -p "build-fuzz/corpus/$name"
    echo "== $name: ${secs}s"
    (cd build-fuzz && "./$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -max_len=262144 -print_final_stats=1 "corpus/$name" "$@" 2>&1 | tail -n 40)
}
seeds_img=$(ls "$PWD"/tests/fixtures/img_*.png "$PWD"/tests/fixtures/img_*.jpg | paste -sd, -)
seeds_pt=$(ls "$PWD"/tests/fixtures/pt_*.pth | paste -sd, -)
run fuzz_safetensors "$PWD/tests/corpus"
run fuzz_model "$PWD/tests/corpus" "$PWD/tests/fixtures"
run fuzz_image -seed_inputs="$seeds_img"
run fuzz_idx "$PWD/fuzz/corpus/idx"
run fuzz_pickle "$PWD/fuzz/corpus/pickle"
run fuzz_torch -seed_inputs="$seeds_pt"
run fuzz_args -close_fd_mask=2 "$PWD/fuzz/corpus/args"   # (its messages go to stderr)
run fuzz_hf "$PWD/fuzz/corpus/hf"
run fuzz_config "$PWD/tests/configs"
run fuzz_infer "$PWD/fuzz/corpus/infer"
run fuzz_augment "$PWD/fuzz/corpus/augment"
run fuzz_video "$PWD/fuzz/corpus/video"
echo "fuzz: no crash"
