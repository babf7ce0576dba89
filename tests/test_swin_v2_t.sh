#!/usr/bin/env bash
# torchvision's swin_v2_t (random weights, seed 0, then --init fixture with a
# batch of 2) at 256 x 256, exported with tools/export.py --torchvision
# swin_v2_t: `relattn forward` must give torchvision's output (within 1e-5
# of its largest magnitude). The model file (114 MB) is made here, in a
# temporary directory; without PyTorch and torchvision the test is skipped
# (exit 77).
#   test_swin_v2_t.sh RELATTN TOOLS_DIR
set -euo pipefail
relattn=$1 tools=$2
py=/usr/bin/python3
if ! "$py" -c "import torch, torchvision.models.swin_transformer as s; s.swin_v2_t" 2>/dev/null; then
  echo "skipped: no PyTorch / torchvision under $py"
  exit 77
fi
tmp=$(mktemp -d /tmp/test_swin_v2_t.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for run in "0 default 1" "1 fixture 2"; do
  set -- $run
  "$py" "$tools/export.py" --torchvision swin_v2_t --seed "$1" --init "$2" --batch "$3" \
    --out "$tmp/m.safetensors" --example "$tmp/ex" >/dev/null
  "$relattn" forward "$tmp/m.safetensors" "$tmp/ex.input.safetensors" -o "$tmp/y.safetensors"
  "$py" - "$tmp/y.safetensors" "$tmp/ex.expected.safetensors" "$tools" "$2" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import st
import numpy as np
got, _ = st.read(sys.argv[1])
want, _ = st.read(sys.argv[2])
d = float(np.abs(got["y"] - want["y"]).max())
s = float(np.abs(want["y"]).max())
print("swin_v2_t 256x256 (%s init): y %s, max |relattn - torchvision| %.3g, %.3g of scale"
      % (sys.argv[4], tuple(want["y"].shape), d, d / s))
sys.exit(0 if d <= 1e-5 * s else 1)
PY
done
