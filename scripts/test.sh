#!/usr/bin/env bash
# Installs what is missing, builds relattn twice (optimised, and with
# AddressSanitizer + UndefinedBehaviorSanitizer) and runs every test in both.
# Both halves run even when the first has failures; the exit status is 1 when
# either had any. Without PyTorch the tests that need it skip (CI runs this
# with PyTorch hidden: scripts/without-torch.sh, .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
failed=()

echo "== release build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs" || failed+=(release)

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build"
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DRELATTN_SANITIZE=ON >/dev/null
cmake --build build-san -j "$jobs"
# OpenMP's runtime keeps thread stacks alive at exit; they are not leaks.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-san --output-on-failure -j "$jobs" || failed+=(sanitizers)

if [ ${#failed[@]} -gt 0 ]; then
  echo "== tests failed in: ${failed[*]}"
  exit 1
fi
echo "== all tests passed (release, sanitizers)"
