"""Fixtures of the 3-D window block (tests/test_swin3d.c, arch swin_block_3d).

Run with Debian's python3-torch (/usr/bin/python3):

    /usr/bin/python3 tools/fixtures.py swin3d swin3d_grad [-o tests/fixtures]

For each case NAME (all named net3d_*) it writes, with tools/st.py:

  NAME.model.safetensors     the twin's state_dict (tools/swin3d_twin.py),
                             RSTT's attn.q / attn.kv names or Video Swin's
                             attn.qkv, with or without the index buffer;
                             __metadata__ "arch" = swin_block_3d and the
                             constructor arguments
  NAME.input.safetensors     x (B, D, H, W, C), and kv (B, D2, H, W, C) for
                             a cross block
  NAME.expected.safetensors  y (B, D, H, W, C), PyTorch float32 on one
                             thread; __metadata__ "scheme" is the naming
                             scheme the loader must detect
  nets3d.txt                 the case names, one per line

The family swin3d_grad (swin3d_twin.write_grad_fixtures: grad3d_*,
grads3d.txt; tests/test_swin3d_grad.c) is written by this script too.

Every parameter is re-drawn with export.fixture_init, so every term counts.
"""

import os
import sys

import torch

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export  # noqa: E402
import swin3d_twin  # noqa: E402
from common import seed_of, write_case, write_list  # noqa: E402
from swin3d_twin import hp_of as hp  # noqa: E402


# name, constructor arguments, (B, D, H, W) of x (D = D1 for a cross block),
# options: qkv (Video Swin naming), index (keep attn.relative_position_index)
CASES = [
    # self-attention (Video Swin), no shift; shift_size key absent (default 0)
    ("net3d_self_w233", hp(16, 2, (2, 3, 3)), (2, 4, 6, 6), dict(index=True)),
    # shifted windows on every axis, Video Swin's fused qkv naming
    ("net3d_self_shift_qkv", hp(16, 4, (2, 3, 3), (1, 1, 1)), (1, 4, 6, 6),
     dict(qkv=True, index=True)),
    # padding on every axis (3 -> 4 frames, 5 -> 6 rows, 7 -> 8 columns), shifted
    ("net3d_self_pad", hp(12, 3, (2, 3, 4), (1, 1, 2)), (2, 3, 5, 7), dict()),
    # no qkv bias, qk_scale, mlp_ratio 2.5, shift on two axes only
    ("net3d_self_nobias", hp(12, 2, (3, 2, 2), (1, 1, 0), qkv_bias=False, qk_scale=0.3,
                             mlp_ratio=2.5), (1, 5, 4, 4), dict()),
    # clamp: 2 frames <= Wd 4 (window 2, no frame shift), H = Wh = 4 (no row
    # shift), W 5 > 3 keeps its shift and is padded to 6
    ("net3d_self_clamp", hp(8, 2, (4, 4, 3), (2, 2, 1)), (2, 2, 4, 5), dict(index=True)),
    # clamp of a spatial axis below its window: H 3 < Wh 4; Video Swin's
    # relative_position_index[:N, :N]; D 3 > Wd 2 padded and shifted
    ("net3d_self_clamp_spatial", hp(8, 1, (2, 4, 4), (1, 2, 2)), (1, 3, 3, 6),
     dict(qkv=True)),
    # RSTT cross-attention: 7 query frames, 4 key/value frames (0, 2, 4, 6)
    ("net3d_cross_d7d4", hp(16, 2, (2, 2), (1, 1), num_frames_q=7, num_frames_kv=4),
     (1, 7, 4, 4), dict(index=True)),
    # 3 query frames, 2 key/value frames (0, 2); "D1,Wh,Ww" / "0,Sh,Sw" forms;
    # padding of H and W; no qkv bias, qk_scale, mlp_ratio 2
    ("net3d_cross_d3d2", hp(12, 3, (3, 3, 3), (0, 1, 1), num_frames_q=3, num_frames_kv=2,
                            qkv_bias=False, qk_scale=0.25, mlp_ratio=2.0),
     (2, 3, 5, 7), dict()),
    # cross block with a clamped spatial window: H 3 < 4 (window 3, no row
    # shift), W 6 > 4 shifted by 2 and padded to 8
    ("net3d_cross_clamp", hp(8, 2, (4, 4), (2, 2), num_frames_q=3, num_frames_kv=2),
     (1, 3, 3, 6), dict()),
]


def run(name, spec, shape, opts, out_dir):
    seed = seed_of(name)
    torch.manual_seed(seed)
    model = swin3d_twin.SwinBlock3D(**spec)
    model.eval()
    export.fixture_init(model, seed)
    meta = swin3d_twin.metadata(model, spec)

    g = torch.Generator().manual_seed(seed + 1)
    B, D, H, W = shape
    C = spec["dim"]
    x = torch.randn((B, D, H, W, C), generator=g)
    inputs = {"x": x}
    kv = None
    if model.cross:
        kv = torch.randn((B, spec["num_frames_kv"], H, W, C), generator=g)
        inputs["kv"] = kv
    with torch.no_grad():
        y = model(x, kv)
        # one clip without a batch axis, frames concatenated: the same numbers
        xc = x[0] if kv is None else torch.cat([x[0], kv[0]])
        assert torch.allclose(model(xc), y[0], atol=1e-6)
    assert y.shape == (B, D, H, W, C) and torch.isfinite(y).all()

    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if not opts.get("index"):
        del sd["attn.relative_position_index"]
    scheme = "official"
    if opts.get("qkv"):
        sd = swin3d_twin.qkv_state_dict(sd)
        scheme = "video_swin"
    return write_case(out_dir, name, model=sd, meta=meta, input=inputs,
                      expected={"y": y.contiguous()}, scheme=scheme)


def write_fixtures(out_dir):
    """The swin3d family of tools/fixtures.py."""
    swin3d_twin.self_check()
    total = 0
    for name, spec, shape, opts in CASES:
        total += run(name, spec, shape, opts, out_dir)
    write_list(out_dir, "nets3d.txt", [c[0] for c in CASES])
    return total


if __name__ == "__main__":
    import fixtures
    fixtures.script_main({"swin3d": ["swin3d", "swin3d_grad"]})
