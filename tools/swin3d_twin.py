"""A 3-D window block in PyTorch: the twin of src/swin3d.c (arch swin_block_3d).

Two blocks, chosen as the C loader chooses them (by num_frames_q /
num_frames_kv):

  self   Video Swin's SwinTransformerBlock3D (SwinTransformer/
         Video-Swin-Transformer, mmaction/models/backbones/swin_transformer.py)
         in evaluation mode: get_window_size per axis on (D, H, W), norm1, pad
         the end of every axis, roll by -shift, partition into (Wd, Wh, Ww)
         windows, attention with the shifted-window mask (compute_mask on the
         padded map, only if some shift remains), reverse, roll back, crop,
         residual, norm2, MLP (exact GELU), residual. A clamped window of N
         tokens uses relative_position_index[:N, :N] of the constructor's
         index, as Video Swin's WindowAttention3D does.
  cross  RSTT's cross-attention (llmpass/RSTT models/layers.py, the attn2
         half of VSTSRDecoderTransformerBlock: norm on the queries, norm_kv on
         the key/value frames, no frame shift, windows over all D1 query and
         all D2 key/value frames, attn_mask_qkv with regions by (h, w))
         followed by the MLP. A spatial window clamped below window_size (RSTT
         fails there) uses the constructor's index at the clamped window's
         coordinates.

The attention is RSTT's WindowAttention3D (tools/common.py),
for both: a self block is its frames_q = frames_kv = Wd case, whose index is
Video Swin's. Video Swin names the projection attn.qkv (rows q, k, v);
qkv_state_dict() writes that naming (attn.q and attn.kv concatenated).

Gradient fixtures (tests/test_swin3d_grad.c): GRAD_CASES, written by
write_grad_fixtures, the swin3d_grad family:

    /usr/bin/python3 tools/fixtures.py swin3d_grad [-o tests/fixtures]

Run with Debian's python3-torch (/usr/bin/python3).
"""

import contextlib
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Mlp, WindowAttention3D, metadata as common_metadata,  # noqa: E402
                    padded, seed_of, shift_mask_3d, shift_mask_cross, window_partition_3d,
                    window_reverse_3d, write_case, write_list)


def get_window_size(x_size, window_size, shift_size):
    """Video Swin's (and RSTT's) rule, per axis: an axis no longer than its
    window is one window, without shift."""
    ws, ss = list(window_size), list(shift_size)
    for i, n in enumerate(x_size):
        if n <= window_size[i]:
            ws[i] = n
            ss[i] = 0
    return tuple(ws), tuple(ss)


@contextlib.contextmanager
def index_override(attn, idx):
    """Run the reference module with another (N1, N2) index into the same table."""
    saved = attn.relative_position_index
    attn.relative_position_index = idx
    try:
        yield
    finally:
        attn.relative_position_index = saved


class SwinBlock3D(nn.Module):
    """window_size: self (Wd, Wh, Ww); cross (Wh, Ww) or (D1, Wh, Ww).
    shift_size likewise (cross: (Sh, Sw) or (0, Sh, Sw))."""

    def __init__(self, dim, num_heads, window_size=(2, 7, 7), shift_size=None, mlp_ratio=4.,
                 qkv_bias=True, qk_scale=None, num_frames_q=None, num_frames_kv=None):
        super().__init__()
        assert (num_frames_q is None) == (num_frames_kv is None)
        self.cross = num_frames_q is not None
        self.dim, self.num_heads, self.mlp_ratio = dim, num_heads, mlp_ratio
        window_size = tuple(window_size)
        shift_size = tuple(shift_size) if shift_size is not None else (0,) * len(window_size)
        if self.cross:
            if len(window_size) == 3:
                assert window_size[0] == num_frames_q, "a cross window holds all query frames"
                window_size = window_size[1:]
            if len(shift_size) == 3:
                assert shift_size[0] == 0, "no frame shift"
                shift_size = shift_size[1:]
            assert len(window_size) == len(shift_size) == 2
            self.frames = (num_frames_q, num_frames_kv)
        else:
            assert len(window_size) == len(shift_size) == 3
            self.frames = (window_size[0], window_size[0])
        self.window_size, self.shift_size = window_size, shift_size
        for w, s in zip(window_size, shift_size):
            assert 0 <= s < w, "shift_size must in 0-window_size"
        self.norm1 = nn.LayerNorm(dim)
        if self.cross:
            self.norm_kv = nn.LayerNorm(dim)
        self.attn = WindowAttention3D(dim, num_frames_q=self.frames[0],
                                      num_frames_kv=self.frames[1],
                                      window_size=tuple(window_size[-2:]), num_heads=num_heads,
                                      qkv_bias=qkv_bias, qk_scale=qk_scale)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    # -- the bias index of a run-time window --------------------------------

    def run_index(self, ws):
        full = self.attn.relative_position_index
        if not self.cross:  # Video Swin: relative_position_index[:N, :N]
            n = ws[0] * ws[1] * ws[2]
            return full[:n, :n].contiguous()
        d1, d2 = self.frames
        Wh, Ww = self.window_size
        wh, ww = ws
        sub = full.view(d1, Wh, Ww, d2, Wh, Ww)[:, :wh, :ww, :, :wh, :ww]
        return sub.reshape(d1 * wh * ww, d2 * wh * ww).contiguous()

    # -- forward --------------------------------------------------------------

    def forward(self, x, kv=None):
        """self: x (B, D, H, W, C); cross: x (B, D1, H, W, C) and kv
        (B, D2, H, W, C), or kv None and x holding the D1 query frames then
        the D2 key/value frames. A 4-D x is one clip (no batch axis)."""
        if x.dim() == 4:
            return self.forward(x[None], None if kv is None else kv[None])[0]
        if self.cross:
            if kv is None:
                x, kv = x[:, :self.frames[0]], x[:, self.frames[0]:]
            return self.forward_cross(x, kv)
        assert kv is None
        return self.forward_self(x)

    def forward_self(self, x):
        B, D, H, W, C = x.shape
        ws, ss = get_window_size((D, H, W), self.window_size, self.shift_size)
        Dp, Hp, Wp = padded(D, ws[0]), padded(H, ws[1]), padded(W, ws[2])
        shortcut = x
        x = self.norm1(x)
        x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H, 0, Dp - D))
        shifted = any(s > 0 for s in ss)
        if shifted:
            x = torch.roll(x, shifts=tuple(-s for s in ss), dims=(1, 2, 3))
            mask = shift_mask_3d(Dp, Hp, Wp, *ws, *ss)
        else:
            mask = None
        windows = window_partition_3d(x, *ws)  # B*nW, N, C
        with index_override(self.attn, self.run_index(ws)):
            windows, _ = self.attn(windows, mask=mask)
        x = window_reverse_3d(windows, B, Dp, Hp, Wp, *ws)
        if shifted:
            x = torch.roll(x, shifts=tuple(ss), dims=(1, 2, 3))
        x = shortcut + x[:, :D, :H, :W, :]
        return x + self.mlp(self.norm2(x))

    def forward_cross(self, x, kv):
        B, D1, H, W, C = x.shape
        D2 = kv.shape[1]
        assert (D1, D2) == self.frames, "the cross block's frames are fixed by its index"
        assert kv.shape == (B, D2, H, W, C)
        (wh, ww), (sh, sw) = get_window_size((H, W), self.window_size, self.shift_size)
        Hp, Wp = padded(H, wh), padded(W, ww)
        shortcut = x
        q = F.pad(self.norm1(x), (0, 0, 0, Wp - W, 0, Hp - H))
        k = F.pad(self.norm_kv(kv), (0, 0, 0, Wp - W, 0, Hp - H))
        shifted = sh > 0 or sw > 0
        if shifted:
            q = torch.roll(q, shifts=(-sh, -sw), dims=(2, 3))
            k = torch.roll(k, shifts=(-sh, -sw), dims=(2, 3))
            mask = shift_mask_cross(Hp, Wp, wh, ww, sh, sw, D1, D2)
        else:
            mask = None
        qw = window_partition_3d(q, D1, wh, ww)
        kw = window_partition_3d(k, D2, wh, ww)
        with index_override(self.attn, self.run_index((wh, ww))):
            out, _ = self.attn(qw, kw, mask=mask)
        out = window_reverse_3d(out, B, D1, Hp, Wp, D1, wh, ww)
        if shifted:
            out = torch.roll(out, shifts=(sh, sw), dims=(2, 3))
        x = shortcut + out[:, :, :H, :W, :]
        return x + self.mlp(self.norm2(x))


def metadata(block, hp):
    """The model file's __metadata__ (docs/reference.md, section 2)."""
    keys = ["dim", "num_heads", "window_size", "shift_size", "mlp_ratio", "qkv_bias", "qk_scale"]
    if block.cross:
        keys += ["num_frames_q", "num_frames_kv"]
    hp = dict(hp, **{k: float(hp[k]) for k in ("mlp_ratio", "qk_scale") if hp.get(k) is not None})
    return common_metadata("swin_block_3d", hp, keys)


def qkv_state_dict(sd):
    """attn.q.* and attn.kv.* -> Video Swin's attn.qkv.* (rows q, k, v)."""
    out = {}
    for k, v in sd.items():
        if k.startswith("attn.kv."):
            continue
        if k.startswith("attn.q."):
            out["attn.qkv." + k[len("attn.q."):]] = torch.cat([v, sd["attn.kv." + k[len("attn.q."):]]])
        else:
            out[k] = v
    return out


def video_swin_attention(x, qkv_w, qkv_b, proj_w, proj_b, table, index, num_heads, scale,
                         mask=None):
    """Video Swin's WindowAttention3D.forward, written out (for self_check)."""
    B_, N, C = x.shape
    qkv = F.linear(x, qkv_w, qkv_b).reshape(B_, N, 3, num_heads, C // num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0] * scale, qkv[1], qkv[2]
    attn = q @ k.transpose(-2, -1)
    bias = table[index[:N, :N].reshape(-1)].reshape(N, N, -1).permute(2, 0, 1)
    attn = attn + bias.unsqueeze(0)
    if mask is not None:
        nW = mask.shape[0]
        attn = (attn.view(B_ // nW, nW, num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0))
        attn = attn.view(-1, num_heads, N, N)
    attn = attn.softmax(-1)
    return F.linear((attn @ v).transpose(1, 2).reshape(B_, N, C), proj_w, proj_b)


def self_check():
    """RSTT's WindowAttention3D with q / kv equals Video Swin's fused-qkv
    attention on the same rows, clamped windows included; a cross block
    with D1 = D2 and kv = x equals the self block with window (D, Wh, Ww)
    and norm_kv = norm1."""
    torch.manual_seed(7)
    blk = SwinBlock3D(8, 2, window_size=(2, 3, 3), shift_size=(1, 1, 1))
    with torch.no_grad():
        for p in blk.parameters():
            p.normal_(0, 0.3)
    sd = qkv_state_dict(blk.state_dict())
    a = blk.attn
    x = torch.randn(3, 2 * 2 * 3, 8)
    with torch.no_grad(), index_override(a, blk.run_index((2, 2, 3))):
        y1, _ = a(x)
    y2 = video_swin_attention(x, sd["attn.qkv.weight"], sd["attn.qkv.bias"], a.proj.weight,
                              a.proj.bias, a.relative_position_bias_table,
                              blk.attn.relative_position_index, 2, a.scale)
    assert torch.allclose(y1, y2, atol=1e-5), (y1 - y2).abs().max()

    cr = SwinBlock3D(8, 2, window_size=(3, 3), shift_size=(1, 1), num_frames_q=3,
                     num_frames_kv=3)
    se = SwinBlock3D(8, 2, window_size=(3, 3, 3), shift_size=(0, 1, 1))
    with torch.no_grad():
        for p in cr.parameters():
            p.normal_(0, 0.3)
        cr.norm_kv.load_state_dict(cr.norm1.state_dict())
        se.load_state_dict({k: v for k, v in cr.state_dict().items()
                            if not k.startswith("norm_kv.")})
        x = torch.randn(2, 3, 5, 4, 8)
        assert torch.allclose(cr(x, x), se(x), atol=1e-5)


# ---------------------------------------------------------------------------
# Gradient fixtures (tests/test_swin3d_grad.c)
# ---------------------------------------------------------------------------

def hp_of(dim, heads, window, shift=None, **kw):
    """Constructor arguments of a case (shift None: the key is absent)."""
    d = dict(dim=dim, num_heads=heads, window_size=list(window),
             shift_size=list(shift) if shift is not None else None)
    d.update(kw)
    return d


# name, constructor arguments, clip (D, H, W) of ra_model_forward's x (a
# cross block's D = D1 + D2: query frames, then key/value frames), Video
# Swin's fused attn.qkv naming or not
GRAD_CASES = [
    # shifted on every axis, padded on D (3 -> 4) and H (5 -> 6)
    ("grad3d_self_shift_pad", hp_of(16, 2, (2, 3, 3), (1, 1, 1)), (3, 5, 6), False),
    # no shift (no mask), padded on H, Video Swin's attn.qkv naming
    ("grad3d_self_noshift_qkv", hp_of(16, 2, (2, 3, 3)), (2, 5, 6), True),
    # clamp: D 2 <= Wd 4 and H 4 <= Wh 4 (window = size, no shift there),
    # W 5 shifted by 1, padded to 6; no qkv bias, qk_scale, mlp_ratio 2
    ("grad3d_self_clamp", hp_of(8, 2, (4, 4, 3), (2, 2, 1), qkv_bias=False, qk_scale=0.4,
                              mlp_ratio=2.0), (2, 4, 5), False),
    # clamp of a spatial axis below its window (Video Swin's index[:N, :N]),
    # D 3 > Wd 2 padded and shifted
    ("grad3d_self_clamp_spatial", hp_of(8, 2, (2, 4, 4), (1, 2, 2)), (3, 3, 6), True),
    # RSTT cross block, D1 = 3 query frames, D2 = 2 key/value frames (0, 2),
    # shifted, padded on H
    ("grad3d_cross_d3d2", hp_of(16, 2, (3, 3), (1, 1), num_frames_q=3, num_frames_kv=2),
     (5, 5, 6), False),
    # cross with a clamped spatial window: H 3 < 4 (no row shift), W 6 > 4
    # shifted by 2, padded to 8; no qkv bias
    ("grad3d_cross_clamp", hp_of(8, 2, (4, 4), (2, 2), num_frames_q=3, num_frames_kv=2,
                               qkv_bias=False, mlp_ratio=2.0), (5, 3, 6), False),
]


def grad_fixture(name, spec, clip, qkv, out_dir):
    """NAME.model.safetensors (the model file) and NAME.grad.safetensors:
    x (D, H, W, C), dy, y, grad.x and grad.NAME for every parameter under
    the model file's names, from PyTorch autograd of sum(y * dy) in float32.
    Parameters are re-drawn by export.fixture_init (bias tables std 0.5)."""
    import export
    seed = seed_of(name)
    torch.manual_seed(seed)
    model = SwinBlock3D(**spec)
    export.fixture_init(model, seed)
    meta = metadata(model, spec)
    g = torch.Generator().manual_seed(seed + 1)
    D, H, W = clip
    C = spec["dim"]
    x = torch.randn((D, H, W, C), generator=g).requires_grad_(True)
    y = model(x)
    dy = torch.randn(y.shape, generator=g)
    (y * dy).sum().backward()
    grads = {k: p.grad for k, p in model.named_parameters()}
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    del sd["attn.relative_position_index"]
    if qkv:  # Video Swin's names: the q and kv gradients concatenated as the weights are
        sd, grads = qkv_state_dict(sd), qkv_state_dict(grads)
    grads = {"grad." + k: v for k, v in grads.items()}
    for k in sd:
        assert "grad." + k in grads, k
    out = {"x": x.detach(), "dy": dy, "y": y.detach(), "grad.x": x.grad}
    out.update({k: v.detach().contiguous() for k, v in grads.items()})
    return write_case(out_dir, name, model=sd, meta=meta, grad=out)


def write_grad_fixtures(out_dir):
    """The swin3d_grad family of tools/fixtures.py."""
    total = 0
    for name, spec, clip, qkv in GRAD_CASES:
        total += grad_fixture(name, spec, clip, qkv, out_dir)
    write_list(out_dir, "grads3d.txt", [c[0] for c in GRAD_CASES])
    return total


if __name__ == "__main__":
    torch.set_num_threads(1)
    self_check()
    print("swin3d_twin: self checks pass")
    # /usr/bin/python3 tools/swin3d_twin.py --grad-fixtures tests/fixtures
    if len(sys.argv) == 3 and sys.argv[1] == "--grad-fixtures":
        import fixtures
        fixtures.generate("swin3d_grad", sys.argv[2])
    elif len(sys.argv) > 1:
        sys.exit("usage: swin3d_twin.py [--grad-fixtures DIR]")
