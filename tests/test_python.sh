#!/usr/bin/env bash
# test_python.sh BIN FIXTURES SRC LIB - the Python package (python/relattn)
# on the shared library LIB: its NumPy side against the command line BIN
# (tests/python/test_numpy.py), its PyTorch side against PyTorch autograd
# and a Swin (tests/python/test_torch.py; skipped with a message when torch
# is not installed: RELATTN_WITH_TORCH=1 scripts/deps.sh installs it), that
# `import relattn` needs no PyTorch and relattn.torch says it does
# (tests/python/test_import.py), and `pip install ./python` into a temporary
# directory, found from elsewhere. Exit 77 (skipped) when no python3 has
# NumPy. With RELATTN_REQUIRE_TORCH=1 (CI's run with PyTorch) a missing
# PyTorch fails instead of skipping.
set -u
BIN=$1 FIXTURES=$2 SRC=$3 LIB=$4
PY=""
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  echo "skipped: no python3 with NumPy (scripts/deps.sh installs python3-numpy)"
  exit 77
fi
T=$(mktemp -d /tmp/relattn-python.XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
export PYTHONDONTWRITEBYTECODE=1
export RELATTN_LIBRARY=$LIB
export PYTHONPATH=$SRC/python

echo "== $PY: NumPy"
"$PY" "$SRC/tests/python/test_numpy.py" "$BIN" "$FIXTURES" || fails=$((fails + 1))

echo "== $PY: PyTorch"
TORCH=0
"$PY" -c 'import torch' 2>/dev/null && TORCH=1
if [ $TORCH = 1 ]; then
  OMP_NUM_THREADS=2 "$PY" "$SRC/tests/python/test_torch.py" || fails=$((fails + 1))
elif [ "${RELATTN_REQUIRE_TORCH:-0}" = 1 ]; then
  echo "FAIL PyTorch is not importable by $PY, and RELATTN_REQUIRE_TORCH=1"; fails=$((fails + 1))
else
  echo "skipped: PyTorch is not installed for $PY (RELATTN_WITH_TORCH=1 scripts/deps.sh)"
fi

echo "== $PY: import relattn, with or without PyTorch"
if (cd "$T" && "$PY" "$SRC/tests/python/test_import.py") >"$T/imp" 2>&1; then sed 's/^/ok   /' "$T/imp"
else echo "FAIL $(tail -1 "$T/imp")"; fails=$((fails + 1)); fi

echo "== import relattn without numpy or a library path"
# import works with the interpreter alone (NumPy is needed for arrays only);
# without RELATTN_LIBRARY the package finds the build tree SRC/build
(cd "$T" && env -u RELATTN_LIBRARY "$PY" -S -c 'import sys; sys.modules["numpy"] = None; import relattn; print(relattn.version())' >"$T/v" 2>&1)
if grep -q "^relattn " "$T/v"; then echo "ok   $(cat "$T/v")"
elif [ "$(dirname "$LIB")" != "$SRC/build" ]; then echo "skipped: the build is not $SRC/build"
else echo "FAIL import relattn: $(tail -1 "$T/v")"; fails=$((fails + 1)); fi
# a missing library is an ImportError that says what to do
if RELATTN_LIBRARY=$T/nothing.so "$PY" -c 'import relattn' 2>"$T/err"; then
  echo "FAIL import relattn with RELATTN_LIBRARY=nothing succeeded"; fails=$((fails + 1))
elif grep -q "RELATTN_LIBRARY" "$T/err"; then echo "ok   a missing library is explained"
else echo "FAIL missing library: $(tail -1 "$T/err")"; fails=$((fails + 1)); fi

echo "== pip install ./python"
if "$PY" -m pip --version >/dev/null 2>&1 && "$PY" -c 'import setuptools' 2>/dev/null; then
  mkdir -p "$T/src" && cp -r "$SRC/python" "$T/src/"
  if "$PY" -m pip install -q --no-deps --no-build-isolation --target "$T/site" "$T/src/python" >"$T/pip" 2>&1; then
    # relattn.torch too when PyTorch is there (it is part of the package)
    mods=relattn; [ $TORCH = 1 ] && mods="relattn, relattn.torch"
    got=$(cd "$T" && env -u RELATTN_LIBRARY PYTHONPATH="$T/site" "$PY" -c "import $mods; print(relattn.library_path)" 2>&1 | tail -1)
    want=$(readlink -f "$LIB")
    if [ "$got" = "$want" ]; then echo "ok   the installed package finds $got"
    else echo "FAIL the installed package found '$got', not $want"; fails=$((fails + 1)); fi
  else echo "FAIL pip install: $(tail -3 "$T/pip")"; fails=$((fails + 1)); fi
else
  echo "skipped: no pip with setuptools for $PY (Debian: python3-pip)"
fi
[ $fails = 0 ] && echo "python: all passed" || echo "python: $fails failed"
[ $fails = 0 ]
