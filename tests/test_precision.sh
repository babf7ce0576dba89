#!/usr/bin/env bash
# test_precision.sh RELATTN SRC - the bf16 and int8 precisions of whole
# networks against their PyTorch twin (tools/precision_twin.py: the twin
# with the same rounding points). Swin, ViT and SwinV2 (small, fixture
# weights) and torchvision's swin_t (224 x 224), each run by `relattn
# forward --precision P`. fp32 must equal PyTorch (1e-5 of the largest
# logit). A reduced precision cannot be compared bit for bit: its output
# turns on values that sit at a rounding boundary, which the last bit of
# any float32 sum moves (the twin itself moves by 0.3 to 0.6 of its own
# error when x moves by 1e-7; docs/reference.md section 6). So each must
# move the logits from fp32 by what the twin's precision does (0.5x to 2x)
# and stay as close to the twin (at most 2x that). Exit 77 without
# PyTorch (RELATTN_REQUIRE_TORCH=1: a failure). 40-60 s on 2 cores.
set -u
BIN=$1 SRC=$2
PY=/usr/bin/python3
if ! "$PY" -c 'import torch, torchvision' 2>/dev/null; then
  if [ "${RELATTN_REQUIRE_TORCH:-0}" = 1 ]; then echo "FAIL PyTorch is required"; exit 1; fi
  echo "skipped: PyTorch is not installed"
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1
T=$(mktemp -d /tmp/relattn-precision.XXXXXX)
trap 'rm -rf "$T"' EXIT
# RELATTN_PRECISION_CASES=full: torchvision's swin_t, swin_v2_t, vit_b_16
# (the figures of docs/reference.md; minutes) instead of the test's cases.
if [ "${RELATTN_PRECISION_CASES:-}" = full ]; then
  cases="swin_t swin_v2_t vit_b_16" full=full
else
  cases="swin vit swinv2 swin_t" full=
fi
"$PY" "$SRC/tools/precision_twin.py" "$T" $full || { echo "FAIL the twin"; exit 1; }
for n in $cases; do
  for p in fp32 bf16 int8; do
    "$BIN" forward "$T/$n.model.safetensors" "$T/$n.input.safetensors" \
        -o "$T/r_$n.$p.safetensors" --precision "$p" || { echo "FAIL relattn forward $n $p"; exit 1; }
  done
done
"$PY" - "$T" "$SRC/tools" $cases <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[2])
import numpy as np
import st
T = sys.argv[1]
def y(path):
    t = st.read(path)
    return (t[0] if isinstance(t, tuple) else t)["y"].astype(np.float64)
n2 = np.linalg.norm
passed = failed = 0
def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what)
    passed, failed = passed + bool(ok), failed + (not ok)
for n in sys.argv[3:]:
    f = y("%s/%s.fp32.safetensors" % (T, n))
    r32 = y("%s/r_%s.fp32.safetensors" % (T, n))
    e = np.abs(r32 - f).max() / np.abs(f).max()
    check(e <= 1e-5, "%s fp32: %.2e of the largest logit from PyTorch" % (n, e))
    for p in ("bf16", "int8"):
        t, r = y("%s/%s.%s.safetensors" % (T, n, p)), y("%s/r_%s.%s.safetensors" % (T, n, p))
        et, er, d = n2(t - f) / n2(f), n2(r - f) / n2(f), n2(r - t) / n2(t)
        check(0.5 * et <= er <= 2 * et and d <= 2 * et,
              "%s %s: relattn moves the logits by %.2e, the twin by %.2e; they differ by %.2e"
              % (n, p, er, et, d))
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PYEOF
