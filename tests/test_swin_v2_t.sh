#!/usr/bin/env bash
# torchvision's swin_v2_t at 256 x 256, exported with tools/export.py
# --torchvision swin_v2_t (random weights):
#   - forward (seed 0; then --init fixture with a batch of 2): `relattn
#     forward` gives torchvision's output within 1e-5 of its largest
#     magnitude;
#   - backward (seed 0, one image, a random dy): `relattn backward` gives
#     autograd's y, grad.x and the gradient of every parameter (211
#     tensors) within 1e-4 of each tensor's largest magnitude.
# The model file (114 MB) is made here, in a temporary directory; without
# PyTorch and torchvision the test is skipped (exit 77), or fails with
# RELATTN_REQUIRE_TORCH=1 (CI's run with PyTorch). Under the sanitizers
# (RELATTN_SANITIZED set) only the first forward runs.
#   test_swin_v2_t.sh RELATTN TOOLS_DIR
set -euo pipefail
relattn=$1 tools=$2
py=/usr/bin/python3
if ! "$py" -c "import torch, torchvision.models.swin_transformer as s; s.swin_v2_t" 2>/dev/null; then
  if [ "${RELATTN_REQUIRE_TORCH:-0}" = 1 ]; then
    echo "FAIL no PyTorch / torchvision (with swin_v2_t) under $py, and RELATTN_REQUIRE_TORCH=1"
    exit 1
  fi
  echo "skipped: no PyTorch / torchvision (with swin_v2_t) under $py (RELATTN_WITH_TORCH=1 scripts/deps.sh)"
  exit 77
fi
tmp=$(mktemp -d /tmp/test_swin_v2_t.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
compare() {   # OUT EXPECTED LABEL TOLERANCE: every tensor of EXPECTED, of its scale
  "$py" - "$1" "$2" "$tools" "$3" "$4" <<'PY'
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[3])
import st
import numpy as np
got, _ = st.read(sys.argv[1])
want, _ = st.read(sys.argv[2])
worst, name = 0.0, ""
for k, e in want.items():
    if k not in got or got[k].shape != e.shape:
        print("%s: %s missing or misshapen" % (sys.argv[4], k))
        sys.exit(1)
    s = float(np.abs(e).max())
    r = float(np.abs(got[k] - e).max()) / (s if s > 0 else 1.0)
    if not r <= worst:
        worst, name = (r, k) if r == r else (float("inf"), k)
print("swin_v2_t 256x256 %s: %d tensors, worst %.3g of scale (%s)"
      % (sys.argv[4], len(want), worst, name))
sys.exit(0 if worst <= float(sys.argv[5]) else 1)
PY
}
runs=("0 default 1" "1 fixture 2")
[ -n "${RELATTN_SANITIZED:-}" ] && runs=("0 default 1")
for run in "${runs[@]}"; do
  set -- $run
  "$py" "$tools/export.py" --torchvision swin_v2_t --seed "$1" --init "$2" --batch "$3" \
    --out "$tmp/m.safetensors" --example "$tmp/ex" >/dev/null
  "$relattn" forward "$tmp/m.safetensors" "$tmp/ex.input.safetensors" -o "$tmp/y.safetensors"
  compare "$tmp/y.safetensors" "$tmp/ex.expected.safetensors" "forward ($2 init)" 1e-5
done
[ -n "${RELATTN_SANITIZED:-}" ] && exit 0
# the backward of seed 0's model against autograd
"$py" "$tools/export.py" --torchvision swin_v2_t --seed 0 --out "$tmp/m.safetensors" >/dev/null
"$py" - "$tools" "$tmp" <<'PY'
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import st
import torch
import torchvision
tmp = sys.argv[2]
t, _ = st.read(tmp + "/m.safetensors")
m = torchvision.models.swin_v2_t()
m.load_state_dict({k: torch.from_numpy(v) for k, v in t.items()})
for mod in m.modules():   # relattn's swinv2 has no stochastic depth
    if isinstance(mod, torchvision.ops.StochasticDepth):
        mod.p = 0.0
torch.manual_seed(5)
x = torch.randn(1, 3, 256, 256, requires_grad=True)
dy = torch.randn(1, 1000)
y = m(x)
(y * dy).sum().backward()
st.write(tmp + "/in.safetensors", {"x": x.detach(), "dy": dy})
out = {"y": y.detach(), "grad.x": x.grad}
out.update(("grad." + n, p.grad) for n, p in m.named_parameters())
st.write(tmp + "/want.safetensors", out)
PY
"$relattn" backward "$tmp/m.safetensors" "$tmp/in.safetensors" -o "$tmp/got.safetensors"
compare "$tmp/got.safetensors" "$tmp/want.safetensors" backward 1e-4
