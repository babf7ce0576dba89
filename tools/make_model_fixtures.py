"""Fixtures of whole models (tests/test_models.c): Swin blocks and networks.

Run with Debian's python3-torch and python3-torchvision (/usr/bin/python3):

    /usr/bin/python3 tools/fixtures.py swin [-o tests/fixtures]

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

import os
import sys

import torch

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export  # noqa: E402
from common import seed_of, write_case, write_list  # noqa: E402


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
    # relattn's overlapping patch embedding (patch_kernel), on a padded input
    ("net_swin_overlap", "swin", net(32, 4, 16, (2, 2), (1, 2), 4, patch_kernel=8), (2, 30, 37)),
    ("net_swin_timm", "swin", net(32, 4, 8, (2, 2, 1), (1, 2, 2), 4, naming="timm"), (2, 32, 32)),
    ("net_swin_tv", "tvswin", net(32, 4, 8, (2, 2), (1, 2), 7), (2, 32, 32)),
    ("net_swin_tv_crop", "tvswin", net(32, 4, 8, (2, 1), (2, 2), 7), (1, 30, 45)),
]


def build(name, kind, spec):
    """-> (model in eval mode with fixture_init's weights, metadata, file
    naming, the scheme the loader must detect, the case's seed)."""
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
    return model, meta, naming, scheme, seed


def run(name, kind, spec, inp, out_dir):
    model, meta, naming, scheme, seed = build(name, kind, spec)
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

    return write_case(out_dir, name, model=export.state_dict_f32(model, naming), meta=meta,
                      input={"x": x.contiguous()}, expected={"y": y.contiguous()},
                      scheme=scheme)


def write_fixtures(out_dir):
    """The swin family of tools/fixtures.py."""
    total = sum(run(*c, out_dir) for c in CASES)
    write_list(out_dir, "nets.txt", [c[0] for c in CASES])
    return total


if __name__ == "__main__":
    import fixtures
    fixtures.script_main({"swin": ["swin"], "swinv2": ["swinv2"]})
