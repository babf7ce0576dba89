# harness.sh - what the shell tests of the command line share, sourced as
#   . "$(dirname "${BASH_SOURCE[0]}")/harness.sh" NAME RELATTN_BINARY FIXTURES_DIR
# BIN (the binary), FIX (the fixtures, absolute), HERE (tests/), PY (python3,
# /usr/bin's first), H (tests/hostile.py under PY), T (a temporary directory
# relattn_NAME.XXXXXX, removed at exit), ASAN_OPTIONS for the sanitizer
# build, and the counters: ok, bad MESSAGE (the test ends with
# "N passed, N failed"). Returns 2 (after a message) on a usage error.
[ $# -eq 3 ] || { echo "usage: $0 RELATTN_BINARY FIXTURES_DIR" >&2; return 2; }
BIN=$2
FIX=$(cd "$3" && pwd -P) || return 2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
PY=/usr/bin/python3
command -v "$PY" >/dev/null 2>&1 || PY=python3
H=("$PY" "$HERE/hostile.py")
T=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || return 2
trap 'rm -rf "$T"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); printf 'FAIL: %s\n' "$*" >&2; }
