"""Gradient fixtures of the Swin networks (tests/test_net_grad.c): PyTorch
autograd through the same models as tools/make_model_fixtures.py.

Run with Debian's python3-torch and python3-torchvision (/usr/bin/python3):

    /usr/bin/python3 tools/fixtures.py swin_grad [-o tests/fixtures]

For each case NAME of the list below (cases of make_model_fixtures.py, whose
NAME.model.safetensors and NAME.input.safetensors are reused: the model is
rebuilt from the same seed and checked equal to the committed file) it
writes NAME.grad.safetensors holding

  dy           a random gradient of the output (same shape as y)
  y            the output
  grad.x       autograd's gradient of the input
  grad.NAME    autograd's gradient of every parameter, under the file's
               tensor names (official, timm or torchvision)

and grads.txt, the case names. Float32 on one thread, seeded per case.
"""

import os
import sys

import torch

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
import export  # noqa: E402
import make_model_fixtures as mmf  # noqa: E402
from common import write_case, write_list  # noqa: E402

# shifted windows, padding (maps and images that are not multiples), the
# window clamp, patch merging of odd maps, ape without head, qk_scale
# without qkv bias, and the three naming schemes
GRAD_CASES = [
    "net_block_w4_shift",
    "net_block_pad_9x11",
    "net_block_clamp_5x9_w7",
    "net_block_qkscale_nobias",
    "net_block_4d_10x6",
    "net_block_tv_5x9_w7",
    "net_swin_official",
    "net_swin_ape_nohead",
    "net_swin_odd_input",
    "net_swin_odd_grid",
    "net_swin_overlap",
    "net_swin_timm",
    "net_swin_tv",
    "net_swin_tv_crop",
]


def run(name, kind, spec, inp, out_dir):
    model, _, naming, _, seed = mmf.build(name, kind, spec)
    saved = {k: torch.from_numpy(v) for k, v in
             st.read(os.path.join(out_dir, name + ".model.safetensors"))[0].items()}
    sd = {k: v for k, v in model.state_dict().items()}
    if naming == "timm":
        sd = export.timm_names(sd)
    for k, v in sd.items():
        if k in saved and v.dtype.is_floating_point:
            assert torch.equal(v.float(), saved[k]), "%s: %s differs from the file" % (name, k)
    x = torch.from_numpy(st.read(os.path.join(out_dir, name + ".input.safetensors"))[0]["x"])
    x.requires_grad_(True)
    if kind in ("block", "tvblock"):
        B, size, as4d = inp
        H, W = size if size else spec["input_resolution"]
        xin = x.reshape(B, H, W, -1)
        if kind == "tvblock":
            y = model(xin)
        else:
            y = model(xin.reshape(B, H * W, -1), H, W).reshape(B, H, W, -1)
        y = y.reshape(x.shape)
    else:
        y = model(x)
    g = torch.Generator().manual_seed(seed + 2)
    dy = torch.randn(y.shape, generator=g)
    y.backward(dy)
    grads = {k: p.grad for k, p in model.named_parameters()}
    if naming == "timm":
        grads = export.timm_names(grads)
    out = {"dy": dy, "y": y.detach(), "grad.x": x.grad}
    for k, v in grads.items():
        assert k in saved, "%s: parameter %s is not in the model file" % (name, k)
        out["grad." + k] = v.contiguous()
    write_case(out_dir, name, grad=out)


def write_fixtures(out_dir):
    """The swin_grad family of tools/fixtures.py (reads the swin family's
    files from out_dir)."""
    cases = {c[0]: c for c in mmf.CASES}
    for name in GRAD_CASES:
        run(*cases[name], out_dir)
    write_list(out_dir, "grads.txt", GRAD_CASES)


if __name__ == "__main__":
    import fixtures
    fixtures.script_main({"swin_grad": ["swin_grad"]})
