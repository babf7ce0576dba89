#!/usr/bin/env bash
# ThreadSanitizer over the threaded code: clang, LLVM's OpenMP runtime
# and its TSan tool (archer, which tells TSan about OpenMP's barriers and
# tasks), two OpenMP threads a call. Runs the kernels, layers and networks
# tests (OpenMP inside each call) and test_threads (four callers sharing
# read-only models). Any report fails.
#   bash scripts/tsan.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build-tsan -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DRELATTN_TSAN=ON >/dev/null
tests=(test_threads test_attention test_kernels test_nn test_grad test_vit test_trainer test_swinv2
       test_relpos test_precision test_source test_loader)
cmake --build build-tsan -j "$(nproc 2>/dev/null || echo 2)" --target "${tests[@]}"
archer=$(cd "$(clang -print-resource-dir)/../.." && pwd)/libarcher.so
[ -f "$archer" ] || { echo "tsan: no $archer (libomp-dev)" >&2; exit 1; }
export OMP_TOOL_LIBRARIES=$archer OMP_NUM_THREADS=2
# libomp's own (uninstrumented) locks are not this project's races
export TSAN_OPTIONS=halt_on_error=1:ignore_noninstrumented_modules=1:second_deadlock_stack=1
for t in "${tests[@]}"; do
    echo "== $t"
    "build-tsan/tests/$t" tests/fixtures 2>&1 | tail -n 30
done
echo "tsan: no report"
