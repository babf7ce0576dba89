#!/usr/bin/env bash
# valgrind memcheck over a representative subset of the command line (every
# arch forward and backward, --attn, networks, show, inspect, resize,
# classify, and malformed files), on the Release build of scripts/test.sh:
# any memory error or definite leak fails.
#   bash scripts/valgrind.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ ! -x "$build/relattn" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target relattn_cli
fi
command -v valgrind >/dev/null || { echo "valgrind: not installed (scripts/deps.sh)" >&2; exit 1; }
bin=$PWD/$build/relattn c=$PWD/tests/corpus f=$PWD/tests/fixtures
tmp=$(mktemp -d "${TMPDIR:-/tmp}/relattn_valgrind.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
failed=0 n=0
vg() {   # expected exit, then the arguments
    local want=$1 rc=0
    shift
    n=$((n + 1))
    valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        --show-leak-kinds=definite "$bin" "$@" >/dev/null 2>"$tmp/err" || rc=$?
    if [ "$rc" != "$want" ]; then
        failed=$((failed + 1))
        echo "FAIL (exit $rc, expected $want): relattn $*" >&2
        head -30 "$tmp/err" >&2
    fi
    rm -f "$tmp"/out*.st
}
vg 0 index --window 7x7
vg 0 index --window 2x2 --frames 7 --kv-frames 4 --json
for m in vit swin w3d shaw; do
    vg 0 forward "$c/ok_$m.model.safetensors" "$c/ok_$m.input.safetensors" -o "$tmp/out.st" --attn
    vg 0 backward "$c/ok_$m.model.safetensors" "$c/ok_$m.input.safetensors" -o "$tmp/out.st"
done
for net in net_swin_official net_block_clamp_5x9_w7 net3d_cross_d3d2 net_swin_tv; do
    vg 0 forward "$f/$net.model.safetensors" "$f/$net.input.safetensors" -o "$tmp/out.st"
done
vg 0 show "$c/ok_swin.input.safetensors"
vg 0 inspect "$f/net_swin_official.model.safetensors" --json
# model sources and precisions: a PyTorch checkpoint refused (its pickle and
# zip read), a state dict without metadata inferred, int8 files
vg 65 inspect "$f/pt_basic.pth"
vg 65 inspect "$f/pt_bad_global.pth"
vg 0 inspect "$f/vit_net_token.model.safetensors" --set num_heads=2 --precision bf16
vg 0 convert "$f/vit_net_token.model.safetensors" --dtype int8 -o "$tmp/int8.st"
vg 0 forward "$tmp/int8.st" "$f/vit_net_token.input.safetensors" -o "$tmp/out.st" --precision int8
vg 0 resize "$f/net_block_clamp_5x5_w7.model.safetensors" --window 4 -o "$tmp/out.st"
vg 0 classify "$f/net_swin_official.model.safetensors" "$f/img_wide.png" "$f/img_tall.jpg"
vg 65 classify "$f/net_swin_official.model.safetensors" "$f/cases.txt"
cp "$c/ok_vit.model.safetensors" "$tmp/model.st"   # -o onto the model: refused (a copy: never a tracked file)
vg 73 forward "$tmp/model.st" "$c/ok_vit.input.safetensors" -o "$tmp/model.st"
for bad in bad_offsets_overlap bad_shape_bytes_overflow bad_invalid_utf8_name bad_len_huge; do
    vg 65 show "$c/$bad.safetensors"
done
echo "valgrind: $n runs, $failed failed"
[ "$failed" -eq 0 ]
