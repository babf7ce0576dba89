#!/usr/bin/env bash
# test_fixtures.sh SRC - the committed fixtures are what the PyTorch twins
# write: tools/fixtures.py regenerates every family (tests/fixtures, and the
# example and corpus families) into a temporary directory and compares each
# file with the committed one (tensor names, dtypes, shapes and metadata
# equal, values within 5e-5 of each tensor's largest magnitude; see
# tools/fixtures.py). 20-30 s on one core.
# Exit 77 (skipped) when /usr/bin/python3 has no PyTorch (Debian's
# python3-torch and python3-torchvision: RELATTN_WITH_TORCH=1 scripts/deps.sh).
set -u
SRC=$1
PY=/usr/bin/python3
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "skipped: PyTorch is not installed"
  exit 77
fi
if ! "$PY" -c 'import torchvision, PIL' 2>/dev/null; then
  echo "skipped: torchvision is not installed (python3-torchvision)"
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1
exec "$PY" "$SRC/tools/fixtures.py" check all example corpus torch_seeds
