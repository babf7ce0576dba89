"""Fixtures of whole models (tests/test_models.c): Swin blocks and networks.

Run with Debian's python3-torch and python3-torchvision (/usr/bin/python3):

    /usr/bin/python3 tools/make_model_fixtures.py [--out tests/fixtures]

For each case NAME it writes, with tools/st.py:

  NAME.model.safetensors     the model file, as tools/export.py writes it
                             (state_dict names of the naming scheme, the
                             constructor arguments in __metadata__)
  NAME.input.safetensors     x: (B, H*W, C) or (B, H, W, C) for swin_block,
                             (B, C_in, H, W) images for swin
  NAME.expected.safetensors  y, the PyTorch output in float32; __metadata__
                             "scheme" is the naming scheme the loader must
                             detect
  nets.txt                   the case names, one per line

The models are tools/swin_twin.py (official design and names), the same
renamed to timm's names (tools/export.py timm_names), and torchvision's own
SwinTransformer / SwinTransformerBlock (its names and semantics: no window
clamp, the shift dropped on an axis that is one window, Conv2d cropping).
Every parameter is re-drawn with export.fixture_init, so every term counts.
Float32 on one thread, seeded per case: the output is deterministic.
"""

import argparse
import os
import sys
import zlib

import torch

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402
import export  # noqa: E402


def seed_of(name):
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


# name, kind, model spec, input spec
#   kind "block":  spec = swin_block constructor arguments; input (B, size, as4d)
#   kind "swin":   spec = swin constructor arguments + naming; input (B, H, W)
#   kind "tvblock": torchvision SwinTransformerBlock; input (B, H, W) as (B, H, W, C)
#   kind "tvswin": torchvision SwinTransformer from swin hyperparameters; input (B, H, W)
def blk(dim, res, heads, ws, shift, **kw):
    d = dict(dim=dim, input_resolution=list(res), num_heads=heads, window_size=ws,
             shift_size=shift, mlp_ratio=4.0, qkv_bias=True, qk_scale=None)
    d.update(kw)
    return d


def net(img, patch, embed, depths, heads, ws, classes=10, **kw):
    d = dict(export.SWIN_DEFAULTS)
    d.update(img_size=img, patch_size=patch, embed_dim=embed, depths=list(depths),
             num_heads=list(heads), window_size=ws, num_classes=classes)
    d.update(kw)
    return d


CASES = [
    # swin_block, official twin
    ("net_block_w4", "block", blk(16, (8, 8), 2, 4, 0), (2, None, False)),
    ("net_block_w4_shift", "block", blk(16, (8, 8), 2, 4, 2), (2, None, False)),
    ("net_block_pad_9x11", "block", blk(12, (9, 11), 3, 4, 2), (2, None, False)),
    ("net_block_pad_9x11_noshift", "block", blk(12, (9, 11), 3, 4, 0), (1, None, False)),
    ("net_block_clamp_5x5_w7", "block", blk(16, (5, 5), 2, 7, 3), (2, None, False)),
    ("net_block_clamp_5x9_w7", "block", blk(8, (5, 9), 2, 7, 3), (2, None, False)),
    ("net_block_equal_7x7_w7", "block", blk(8, (7, 7), 1, 7, 3), (2, None, False)),
    ("net_block_6x10_w3", "block", blk(12, (6, 10), 2, 3, 1), (2, None, False)),
    ("net_block_qkscale_nobias", "block",
     blk(12, (6, 6), 3, 3, 1, qkv_bias=False, qk_scale=0.3, mlp_ratio=2.5), (2, None, False)),
    # (B, H, W, C) input of another size than input_resolution
    ("net_block_4d_10x6", "block", blk(16, (8, 8), 2, 4, 2), (2, (10, 6), True)),
    # torchvision's block: 5x9 map, window 7 not clamped, shift only along W
    ("net_block_tv_5x9_w7", "tvblock", blk(16, (5, 9), 2, 7, 3), (2, (5, 9), True)),
    # networks
    ("net_swin_official", "swin", net(32, 4, 16, (2, 2), (1, 2), 4), (2, 32, 32)),
    ("net_swin_official_w7", "swin", net(56, 4, 12, (2, 2), (2, 3), 7), (1, 56, 56)),
    ("net_swin_ape_nohead", "swin",
     net(32, 4, 16, (1, 2), (2, 2), 4, classes=0, ape=True, patch_norm=False, qkv_bias=False,
         qk_scale=0.25), (2, 32, 32)),
    ("net_swin_odd_input", "swin", net(32, 4, 16, (2, 2), (1, 2), 4), (1, 37, 45)),
    ("net_swin_odd_grid", "swin", net(20, 2, 8, (2, 2, 1), (1, 2, 2), 4), (1, 20, 20)),
    ("net_swin_timm", "swin", net(32, 4, 8, (2, 2, 1), (1, 2, 2), 4, naming="timm"), (2, 32, 32)),
    ("net_swin_tv", "tvswin", net(32, 4, 8, (2, 2), (1, 2), 7), (2, 32, 32)),
    ("net_swin_tv_crop", "tvswin", net(32, 4, 8, (2, 1), (2, 2), 7), (1, 30, 45)),
]


def run(name, kind, spec, inp, out_dir):
    seed = seed_of(name)
    torch.manual_seed(seed)
    spec = dict(spec)
    naming = spec.pop("naming", "official")
    scheme = naming
    if kind == "block":
        model, meta = export.build_swin_block(spec)
    elif kind == "swin":
        model, meta = export.build_swin(spec)
    elif kind == "tvswin":
        model, meta = export.build_torchvision_swin(spec)
        scheme = "torchvision"
    elif kind == "tvblock":
        from torchvision.models.swin_transformer import SwinTransformerBlock
        ws, s = spec["window_size"], spec["shift_size"]
        model = SwinTransformerBlock(spec["dim"], spec["num_heads"], window_size=[ws, ws],
                                     shift_size=[s, s], mlp_ratio=spec["mlp_ratio"])
        meta = export.metadata("swin_block", spec, export.SWIN_BLOCK_KEYS)
        scheme = "torchvision"
    else:
        raise ValueError(kind)
    model.eval()
    export.fixture_init(model, seed)

    g = torch.Generator().manual_seed(seed + 1)
    if kind in ("block", "tvblock"):
        B, size, as4d = inp
        H, W = size if size else spec["input_resolution"]
        x = torch.randn((B, H, W, spec["dim"]), generator=g)
        with torch.no_grad():
            if kind == "tvblock":
                y = model(x)
            else:
                y = model(x.reshape(B, H * W, -1), H, W).reshape(B, H, W, -1)
        if not as4d:
            x, y = x.reshape(B, H * W, -1), y.reshape(B, H * W, -1)
    else:
        B, H, W = inp
        x = torch.randn((B, spec["in_chans"], H, W), generator=g)
        with torch.no_grad():
            y = model(x)
    assert torch.isfinite(y).all()

    path = os.path.join(out_dir, name + ".model.safetensors")
    size, sd = export.export(model, meta, path, naming)
    st.write(os.path.join(out_dir, name + ".input.safetensors"), {"x": x.contiguous()})
    st.write(os.path.join(out_dir, name + ".expected.safetensors"), {"y": y.contiguous()},
             {"scheme": scheme})
    return size


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "fixtures"),
                    help="output directory (default: tests/fixtures)")
    ap.add_argument("--family", choices=("all", "swin", "swinv2"), default="all",
                    help="which fixtures: Swin's (below), SwinV2's (tools/swinv2_twin.py)")
    args = ap.parse_args(argv)
    out_dir = os.path.normpath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    if args.family in ("all", "swinv2"):
        import swinv2_twin
        n = swinv2_twin.write_fixtures(out_dir)
        print("wrote %d SwinV2 cases to %s" % (n, out_dir))
        if args.family == "swinv2":
            return
    total = 0
    for name, kind, spec, inp in CASES:
        total += run(name, kind, spec, inp, out_dir)
    with open(os.path.join(out_dir, "nets.txt"), "w") as f:
        f.write("".join(c[0] + "\n" for c in CASES))
    print("wrote %d model cases (%d bytes of models) to %s" % (len(CASES), total, out_dir))


if __name__ == "__main__":
    main()
