"""The PyTorch twin of relattn's attention core: the fixtures of the
attention, windows and index families of tools/fixtures.py.

    /usr/bin/python3 tools/fixtures.py attention windows index [-o DIR]
    /usr/bin/python3 tools/make_fixtures.py [--out DIR] [--family seeds|relpos|all]

It writes, into the output directory (default: tests/fixtures), safetensors
files made with tools/st.py:

  NAME.model.safetensors     a reference module's state_dict, with
                             __metadata__ "arch" and its constructor
                             arguments (docs/reference.md, section 2)
  NAME.input.safetensors     x (or q and optional kv), optional mask, dy
  NAME.expected.safetensors  y, attn and the autograd gradients given dy:
                             grad.x (or grad.q, grad.kv), grad.<param>
  cases.txt                  the attention case names, one per line

  win_NAME.safetensors       x (B, D, H, W, C), windows (padded, rolled,
                             partitioned) and the shifted-window mask
  windows.txt                the window case names (with the win_ prefix)

  index_NAME.safetensors     index (I64) from the official modules' lines
  indices.txt                the index case names (with the index_ prefix)

--family relpos (or all, the default) also writes the relpos family
(tools/relpos_twin.py: T5, ALiBi, decomposed, RoPE).

The reference modules are the authors' code (ViT Attention here, the
official Swin WindowAttention and RSTT's WindowAttention3D in
tools/common.py), changed only to return (y, attn), plus a naive Shaw et al. 2018 module that
materialises the (N, N, hd) relative tensors. Everything runs in float32 on
one thread with torch.manual_seed per case, so the output is deterministic.
"""

import os
import sys

import torch
import torch.nn as nn

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from common import (WindowAttention, WindowAttention3D, clip_index, index_2d,  # noqa: E402
                    index_3d, make_windows, meta_value, padded, seed_of, shift_mask_2d,
                    shift_mask_3d, window_partition_2d, window_reverse_3d, write_case, write_list)


# --------------------------------------------------------------------------
# Reference modules
# --------------------------------------------------------------------------

class Attention(nn.Module):
    """ViT attention (timm's Attention), returning (x, attn)."""

    def __init__(self, dim, num_heads=8, qkv_bias=False, qk_scale=None,
                 attn_drop_ratio=0., proj_drop_ratio=0.):
        super(Attention, self).__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = qk_scale or head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop_ratio)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop_ratio)

    def forward(self, x, mask=None):
        assert mask is None, "ViT attention takes no mask"
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x, attn


class ShawAttention(nn.Module):
    """Shaw et al. 2018 relative position representations, written naively:
    the (N, N, hd) tensors a^K and a^V are materialised (this is the oracle).

    logits[b,h,i,j] = scale * (q_i . k_j + q_i . relative_keys[rel[i,j]])
    out[b,h,i]      = sum_j p[b,h,i,j] * (v_j + relative_values[rel[i,j]])
    """

    def __init__(self, dim, num_heads, max_relative_position, qkv_bias=True,
                 use_keys=True, use_values=True):
        super().__init__()
        self.num_heads = num_heads
        self.max_relative_position = max_relative_position
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        rows = 2 * max_relative_position + 1
        self.register_parameter(
            "relative_keys", nn.Parameter(torch.zeros(rows, head_dim)) if use_keys else None)
        self.register_parameter(
            "relative_values", nn.Parameter(torch.zeros(rows, head_dim)) if use_values else None)

    def forward(self, x, mask=None):
        B_, N, C = x.shape
        nH = self.num_heads
        qkv = self.qkv(x).reshape(B_, N, 3, nH, C // nH).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # B_, nH, N, hd
        rel = clip_index(N, self.max_relative_position)  # N, N
        logits = q @ k.transpose(-2, -1)
        if self.relative_keys is not None:
            a_k = self.relative_keys[rel]  # N, N, hd
            logits = logits + (q.unsqueeze(3) * a_k).sum(-1)  # B_, nH, N, N
        attn = logits * self.scale
        if mask is not None:
            nW = mask.shape[0]
            attn = attn.view(B_ // nW, nW, nH, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, nH, N, N)
        attn = attn.softmax(dim=-1)
        out = attn @ v
        if self.relative_values is not None:
            a_v = self.relative_values[rel]  # N, N, hd
            out = out + (attn.unsqueeze(-1) * a_v).sum(3)  # B_, nH, N, hd
        x = out.transpose(1, 2).reshape(B_, N, C)
        x = self.proj(x)
        return x, attn


# --------------------------------------------------------------------------
# Attention cases
# --------------------------------------------------------------------------

def init_params(module):
    """Non-trivial values everywhere, so that every term matters."""
    with torch.no_grad():
        for pname, p in module.named_parameters():
            if pname in ("relative_position_bias_table", "relative_keys", "relative_values"):
                p.normal_(0.0, 0.5)
            else:
                p.normal_(0.0, 0.2)


class Case:
    def __init__(self, name, arch, hp, b_, n=None, d1=None, d2=None,
                 mask=None, kv=True, keep_index=True, wdtype=None,
                 omit_qkv_bias_key=False):
        self.name = name
        self.arch = arch
        self.hp = hp            # constructor arguments
        self.b_ = b_
        self.n = n              # tokens (vit / shaw)
        self.mask = mask        # None | ("shift", (H, W, wh, ww, sh, sw)) | ("rand", nW) | ("block", nW)
        self.kv = kv            # window_attention_3d: pass kv
        self.keep_index = keep_index
        self.wdtype = wdtype    # None | "F64" | "BF16" | "F16"
        self.omit_qkv_bias_key = omit_qkv_bias_key


def build_module(c):
    hp = dict(c.hp)
    if c.arch == "vit_attention":
        return Attention(**hp)
    if c.arch == "window_attention":
        return WindowAttention(**hp)
    if c.arch == "window_attention_3d":
        return WindowAttention3D(**hp)
    if c.arch == "shaw_attention":
        return ShawAttention(**hp)
    raise ValueError(c.arch)


def metadata_of(c):
    hp = c.hp
    meta = {"arch": c.arch, "dim": str(hp["dim"]), "num_heads": str(hp["num_heads"])}
    if c.arch in ("window_attention", "window_attention_3d"):
        meta["window_size"] = "%d,%d" % tuple(hp["window_size"])
    if c.arch == "window_attention_3d":
        meta["num_frames_q"] = str(hp["num_frames_q"])
        meta["num_frames_kv"] = str(hp["num_frames_kv"])
    if c.arch == "shaw_attention":
        meta["max_relative_position"] = str(hp["max_relative_position"])
    default_bias = c.arch != "vit_attention"
    qkv_bias = hp.get("qkv_bias", default_bias)
    if not c.omit_qkv_bias_key:
        meta["qkv_bias"] = meta_value(qkv_bias)
    else:
        assert "qkv_bias" not in hp
    if hp.get("qk_scale") is not None:
        meta["qk_scale"] = repr(float(hp["qk_scale"]))
    return meta


TORCH_DTYPES = {"F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16}


def run_case(c, out_dir):
    torch.manual_seed(seed_of(c.name))
    m = build_module(c)
    m.eval()
    init_params(m)

    # Weights in a storage dtype: the expected values use exactly what the
    # C loader will see after conversion to float32.
    stored = {}
    with torch.no_grad():
        for pname, p in m.named_parameters():
            if c.wdtype is None:
                stored[pname] = p.detach().clone()
            elif c.wdtype == "F64":
                # extra bits below float32 precision: the loader must round
                w = p.detach().double()
                w = w + torch.randn(w.shape, dtype=torch.float64) * 1e-9 * (1 + w.abs())
                stored[pname] = w
                p.copy_(w.float())
            else:
                w = p.detach().to(TORCH_DTYPES[c.wdtype])
                stored[pname] = w
                p.copy_(w.float())

    model_tensors = dict(stored)
    if c.arch in ("window_attention", "window_attention_3d") and c.keep_index:
        idx = m.relative_position_index
        assert idx.dtype == torch.int64
        model_tensors["relative_position_index"] = idx.clone()
    sd_names = set(m.state_dict().keys())
    assert set(model_tensors) <= sd_names, (set(model_tensors), sd_names)

    # Inputs
    C = c.hp["dim"]
    inputs = {}
    if c.arch == "window_attention":
        wh, ww = c.hp["window_size"]
        n1 = n2 = wh * ww
    elif c.arch == "window_attention_3d":
        wh, ww = c.hp["window_size"]
        n1 = c.hp["num_frames_q"] * wh * ww
        n2 = c.hp["num_frames_kv"] * wh * ww
    else:
        n1 = n2 = c.n
    if c.arch == "window_attention_3d":
        q = torch.randn(c.b_, n1, C)
        inputs["q"] = q
        if c.kv:
            inputs["kv"] = torch.randn(c.b_, n2, C)
        else:
            assert n1 == n2
    else:
        inputs["x"] = torch.randn(c.b_, n1, C)

    mask = None
    if c.mask is not None:
        kind, arg = c.mask
        if kind == "shift":
            H, W, wh_, ww_, sh, sw = arg
            mask = shift_mask_2d(padded(H, wh_), padded(W, ww_), wh_, ww_, sh, sw)
        elif kind == "rand":
            mask = torch.randn(arg, n1, n2) * 2.0
        elif kind == "block":
            # 0 / -100 pattern, never a fully masked row
            mask = torch.where(torch.rand(arg, n1, n2) < 0.4,
                               torch.tensor(-100.0), torch.tensor(0.0))
            mask[:, :, 0] = 0.0
        else:
            raise ValueError(kind)
        assert c.b_ % mask.shape[0] == 0
        assert mask.shape[1:] == (n1, n2)
        inputs["mask"] = mask

    dy = torch.randn(c.b_, n1, C)
    inputs["dy"] = dy

    # Forward and backward
    leaves = {k: v.clone().requires_grad_(True) for k, v in inputs.items()
              if k in ("x", "q", "kv")}
    if c.arch == "window_attention_3d":
        y, attn = m(leaves["q"], leaves.get("kv"), mask=mask)
    else:
        y, attn = m(leaves["x"], mask=mask)
    assert y.shape == (c.b_, n1, C)
    assert attn.shape == (c.b_, c.hp["num_heads"], n1, n2)
    m.zero_grad(set_to_none=True)
    y.backward(dy)

    expected = {"y": y.detach(), "attn": attn.detach()}
    for k, leaf in leaves.items():
        expected["grad." + k] = leaf.grad.detach()
    for pname, p in m.named_parameters():
        assert p.grad is not None, pname
        expected["grad." + pname] = p.grad.detach()
    for k, v in expected.items():
        assert v.dtype == torch.float32 and torch.isfinite(v).all(), (c.name, k)

    meta = metadata_of(c)
    write_case(out_dir, c.name, model=model_tensors, meta=meta, input=inputs, expected=expected)
    return model_tensors, inputs, expected, meta


def attention_cases():
    V, S, S3, SH = "vit_attention", "window_attention", "window_attention_3d", "shaw_attention"
    cases = [
        # ViT (qkv_bias defaults to false)
        Case("vit_n17_h4", V, dict(dim=32, num_heads=4, qkv_bias=False), b_=2, n=17),
        Case("vit_n17_h2_bias", V, dict(dim=24, num_heads=2, qkv_bias=True), b_=2, n=17),
        Case("vit_n1_h3", V, dict(dim=12, num_heads=3, qkv_bias=True), b_=3, n=1),
        Case("vit_qkscale", V, dict(dim=16, num_heads=4, qkv_bias=True, qk_scale=0.3), b_=2, n=9),
        Case("vit_h1_default", V, dict(dim=8, num_heads=1), b_=2, n=5, omit_qkv_bias_key=True),
        Case("vit_n50_h6", V, dict(dim=48, num_heads=6, qkv_bias=True), b_=1, n=50),
        # Swin window attention (qkv_bias defaults to true)
        Case("swin_7x7", S, dict(dim=24, window_size=(7, 7), num_heads=3, qkv_bias=True), b_=2),
        Case("swin_2x2", S, dict(dim=8, window_size=(2, 2), num_heads=2, qkv_bias=True), b_=3),
        Case("swin_3x5", S, dict(dim=12, window_size=(3, 5), num_heads=3, qkv_bias=True), b_=2),
        Case("swin_4x2_noindex", S, dict(dim=16, window_size=(4, 2), num_heads=4, qkv_bias=True),
             b_=2, keep_index=False),
        Case("swin_1x1", S, dict(dim=8, window_size=(1, 1), num_heads=2, qkv_bias=True), b_=2),
        Case("swin_4x4_shiftmask", S, dict(dim=16, window_size=(4, 4), num_heads=2, qkv_bias=True),
             b_=8, mask=("shift", (8, 8, 4, 4, 2, 2))),
        Case("swin_3x3_randmask", S, dict(dim=12, window_size=(3, 3), num_heads=2, qkv_bias=True),
             b_=4, mask=("rand", 2)),
        Case("swin_2x3_qkscale_noindex", S,
             dict(dim=12, window_size=(2, 3), num_heads=2, qkv_bias=True, qk_scale=0.7),
             b_=2, keep_index=False),
        Case("swin_3x3_nobias", S, dict(dim=12, window_size=(3, 3), num_heads=3, qkv_bias=False), b_=2),
        Case("swin_2x2_default", S, dict(dim=8, window_size=(2, 2), num_heads=2), b_=2,
             omit_qkv_bias_key=True),
        # RSTT 3-D window attention
        Case("w3d_d2d2_kv", S3, dict(dim=8, num_frames_q=2, num_frames_kv=2, window_size=(2, 2),
                                     num_heads=2, qkv_bias=True), b_=2),
        Case("w3d_d7d4", S3, dict(dim=16, num_frames_q=7, num_frames_kv=4, window_size=(2, 2),
                                  num_heads=2, qkv_bias=True), b_=2),
        Case("w3d_d3d2_noindex", S3, dict(dim=12, num_frames_q=3, num_frames_kv=2, window_size=(2, 3),
                                          num_heads=3, qkv_bias=True), b_=2, keep_index=False),
        Case("w3d_d5d3_mask", S3, dict(dim=8, num_frames_q=5, num_frames_kv=3, window_size=(2, 2),
                                       num_heads=2, qkv_bias=True), b_=4, mask=("block", 2)),
        Case("w3d_d3_self", S3, dict(dim=8, num_frames_q=3, num_frames_kv=3, window_size=(2, 2),
                                     num_heads=2, qkv_bias=True), b_=2, kv=False),
        Case("w3d_d1_self", S3, dict(dim=12, num_frames_q=1, num_frames_kv=1, window_size=(2, 3),
                                     num_heads=2, qkv_bias=True), b_=2, kv=False),
        Case("w3d_d3d2_qkscale_nobias", S3,
             dict(dim=8, num_frames_q=3, num_frames_kv=2, window_size=(2, 2), num_heads=2,
                  qkv_bias=False, qk_scale=0.4), b_=2),
        Case("w3d_d4d2_randmask", S3, dict(dim=8, num_frames_q=4, num_frames_kv=2, window_size=(1, 2),
                                           num_heads=1, qkv_bias=True), b_=3, mask=("rand", 3)),
        # Shaw et al. 2018
        Case("shaw_both_k2", SH, dict(dim=16, num_heads=2, max_relative_position=2), b_=2, n=7),
        Case("shaw_keys_k3", SH, dict(dim=12, num_heads=3, max_relative_position=3, use_values=False),
             b_=2, n=8),
        Case("shaw_values_k3", SH, dict(dim=12, num_heads=3, max_relative_position=3, use_keys=False),
             b_=2, n=8),
        Case("shaw_k0", SH, dict(dim=8, num_heads=2, max_relative_position=0), b_=2, n=6),
        Case("shaw_kbig", SH, dict(dim=8, num_heads=2, max_relative_position=8), b_=2, n=5),
        Case("shaw_n1", SH, dict(dim=8, num_heads=2, max_relative_position=2), b_=3, n=1),
        Case("shaw_nobias", SH, dict(dim=16, num_heads=4, max_relative_position=2, qkv_bias=False),
             b_=2, n=7),
        # Weights stored in other float dtypes
        Case("shaw_w_f64", SH, dict(dim=16, num_heads=2, max_relative_position=3), b_=2, n=9,
             wdtype="F64"),
        Case("swin_3x3_w_bf16", S, dict(dim=12, window_size=(3, 3), num_heads=3, qkv_bias=True),
             b_=2, wdtype="BF16"),
        Case("w3d_d3d2_w_f16", S3, dict(dim=8, num_frames_q=3, num_frames_kv=2, window_size=(2, 2),
                                        num_heads=2, qkv_bias=True), b_=2, wdtype="F16"),
        Case("vit_w_f16", V, dict(dim=16, num_heads=2, qkv_bias=True), b_=2, n=6, wdtype="F16"),
    ]
    names = [c.name for c in cases]
    assert len(names) == len(set(names))
    return cases


# --------------------------------------------------------------------------
# Window and index cases
# --------------------------------------------------------------------------

# name, b, c, (d, h, w), (wd, wh, ww), (sd, sh, sw)
WINDOW_CASES = [
    ("2d_8x8_w4_s2", 2, 3, (1, 8, 8), (1, 4, 4), (0, 2, 2)),
    ("2d_7x7_w7_s0", 1, 4, (1, 7, 7), (1, 7, 7), (0, 0, 0)),
    ("2d_14x14_w7_s3", 1, 2, (1, 14, 14), (1, 7, 7), (0, 3, 3)),
    ("2d_10x6_w4_s2", 2, 3, (1, 10, 6), (1, 4, 4), (0, 2, 2)),
    ("2d_6x9_w3x3_s1", 1, 3, (1, 6, 9), (1, 3, 3), (0, 1, 1)),
    ("2d_6x9_w2x3_s1x1", 2, 2, (1, 6, 9), (1, 2, 3), (0, 1, 1)),
    ("2d_5x7_w2x3_s1x2", 1, 3, (1, 5, 7), (1, 2, 3), (0, 1, 2)),
    ("2d_6x8_w3x4_s0x2", 1, 2, (1, 6, 8), (1, 3, 4), (0, 0, 2)),
    ("2d_8x8_w4_s0", 1, 2, (1, 8, 8), (1, 4, 4), (0, 0, 0)),
    ("3d_4x4x4_w2_s1", 1, 3, (4, 4, 4), (2, 2, 2), (1, 1, 1)),
    ("3d_3x5x6_w2x2x4_s1x1x2", 2, 2, (3, 5, 6), (2, 2, 4), (1, 1, 2)),
    ("3d_2x4x4_w2_s0x1x1", 1, 2, (2, 4, 4), (2, 2, 2), (0, 1, 1)),
]

INDEX_CASES = [
    ("2d_2x2", "2d", (2, 2)), ("2d_7x7", "2d", (7, 7)), ("2d_3x5", "2d", (3, 5)),
    ("2d_1x1", "2d", (1, 1)), ("2d_1x4", "2d", (1, 4)),
    ("3d_7_4_2x2", "3d", (7, 4, 2, 2)), ("3d_3_2_2x3", "3d", (3, 2, 2, 3)),
    ("3d_2_2_3x3", "3d", (2, 2, 3, 3)), ("3d_1_1_2x2", "3d", (1, 1, 2, 2)),
    ("3d_5_3_2x2", "3d", (5, 3, 2, 2)),
    ("clip_5_2", "clip", (5, 2)), ("clip_4_0", "clip", (4, 0)), ("clip_3_7", "clip", (3, 7)),
    ("clip_1_1", "clip", (1, 1)),
]


def run_window_case(name, b, c, dhw, wsz, shift, out_dir):
    torch.manual_seed(seed_of("win_" + name))
    d, h, w = dhw
    wd, wh, ww = wsz
    sd, sh, sw = shift
    x = torch.randn(b, d, h, w, c)
    windows = make_windows(x, wd, wh, ww, sd, sh, sw)
    Dp, Hp, Wp = padded(d, wd), padded(h, wh), padded(w, ww)
    nW = (Dp // wd) * (Hp // wh) * (Wp // ww)
    N = wd * wh * ww
    assert windows.shape == (b * nW, N, c)
    if d == 1 and wd == 1:
        mask = shift_mask_2d(Hp, Wp, wh, ww, sh, sw)
        assert torch.equal(mask, shift_mask_3d(1, Hp, Wp, 1, wh, ww, 0, sh, sw))
        # 2-D partition agrees with the official window_partition's order
        xp = torch.zeros(b, Hp, Wp, c)
        xp[:, :h, :w] = x[:, 0]
        xp = torch.roll(xp, shifts=(-sh, -sw), dims=(1, 2))
        assert torch.equal(windows, window_partition_2d(xp, wh, ww))
    else:
        mask = shift_mask_3d(Dp, Hp, Wp, wd, wh, ww, sd, sh, sw)
    assert mask.shape == (nW, N, N)
    # reverse round trip
    back = window_reverse_3d(windows, b, Dp, Hp, Wp, wd, wh, ww)
    back = torch.roll(back, shifts=(sd, sh, sw), dims=(1, 2, 3))[:, :d, :h, :w]
    assert torch.equal(back, x)
    meta = {k: str(v) for k, v in dict(b=b, c=c, d=d, h=h, w=w, wd=wd, wh=wh, ww=ww,
                                        sd=sd, sh=sh, sw=sw).items()}
    st.write(os.path.join(out_dir, "win_" + name + ".safetensors"),
             {"x": x, "windows": windows, "mask": mask}, meta)


def run_index_case(name, kind, args, out_dir):
    if kind == "2d":
        wh, ww = args
        idx = index_2d(wh, ww)
        meta = {"wh": str(wh), "ww": str(ww)}
        rows = (2 * wh - 1) * (2 * ww - 1)
    elif kind == "3d":
        d1, d2, wh, ww = args
        idx = index_3d(d1, d2, wh, ww)
        meta = {"d1": str(d1), "d2": str(d2), "wh": str(wh), "ww": str(ww)}
        rows = (2 * d1 - 1) * (2 * wh - 1) * (2 * ww - 1)
    else:
        n, k = args
        idx = clip_index(n, k)
        meta = {"n": str(n), "k": str(k)}
        rows = 2 * k + 1
    assert idx.dtype == torch.int64
    assert int(idx.min()) >= 0 and int(idx.max()) < rows
    meta["kind"] = kind
    meta["table_rows"] = str(rows)
    st.write(os.path.join(out_dir, "index_" + name + ".safetensors"), {"index": idx}, meta)
    return idx


def self_checks():
    """The indices docs/reference.md prints (section 1.2), and the Shaw oracle against plain attention."""
    i2 = index_2d(2, 2)
    assert i2.tolist() == [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]]  # 2x2 window
    i7 = index_2d(7, 7)
    assert i7[0].tolist() == [84, 83, 82, 81, 80, 79, 78, 71, 70, 69, 68, 67, 66, 65,
                              58, 57, 56, 55, 54, 53, 52, 45, 44, 43, 42, 41, 40, 39,
                              32, 31, 30, 29, 28, 27, 26, 19, 18, 17, 16, 15, 14, 13,
                              6, 5, 4, 3, 2, 1, 0]  # 7x7, row 0
    assert int(i7.min()) == 0 and int(i7.max()) == 168
    # RSTT: D1=7, D2=4 -> kv frames 0, 2, 4, 6 (docs/reference.md, 1.2)
    i3 = index_3d(7, 4, 1, 1)
    assert i3.tolist() == [[(a - f + 6) for f in (0, 2, 4, 6)] for a in range(7)]
    # Shaw with zero tables == ViT attention with the same qkv/proj
    torch.manual_seed(1)
    sh = ShawAttention(8, 2, 2)
    init_params(sh)
    vit = Attention(8, 2, qkv_bias=True)
    vit.load_state_dict({k: v for k, v in sh.state_dict().items() if k.startswith(("qkv", "proj"))})
    with torch.no_grad():
        sh.relative_keys.zero_()
        sh.relative_values.zero_()
        x = torch.randn(2, 5, 8)
        assert torch.allclose(sh(x)[0], vit(x)[0], atol=1e-6)
        # A constant key table adds q_i . c to a whole row of logits (no
        # effect on p); a constant value table adds c to every head's output.
        c = torch.randn(4)
        sh.relative_keys.copy_(c.expand(5, 4))
        sh.relative_values.copy_(c.expand(5, 4))
        y1, a1 = sh(x)
        y0, a0 = vit(x)
        assert torch.allclose(a1, a0, atol=1e-6)
        assert torch.allclose(y1, y0 + sh.proj.weight @ c.repeat(2), atol=1e-5)
    # Shaw relative key term, computed a second way (gather of q . wK^T)
    with torch.no_grad():
        init_params(sh)
        x = torch.randn(1, 6, 8)
        qkv = sh.qkv(x).reshape(1, 6, 3, 2, 4).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        rel = clip_index(6, 2)
        qk = q @ sh.relative_keys.t()  # 1, nH, N, 2k+1
        logits = (q @ k.transpose(-2, -1) + torch.gather(qk, 3, rel.expand(1, 2, 6, 6))) * sh.scale
        p = logits.softmax(-1)
        buckets = torch.zeros(1, 2, 6, 5).scatter_add_(3, rel.expand(1, 2, 6, 6), p)
        out = p @ v + buckets @ sh.relative_values
        y = sh.proj(out.transpose(1, 2).reshape(1, 6, 8))
        y_ref, p_ref = sh(x)
        assert torch.allclose(p, p_ref, atol=1e-6) and torch.allclose(y, y_ref, atol=1e-5)


def write_attention(out_dir):
    self_checks()
    cases = attention_cases()
    for c in cases:
        run_case(c, out_dir)
    write_list(out_dir, "cases.txt", [c.name for c in cases])
    return len(cases)


def write_windows(out_dir):
    for name, b, ch, dhw, wsz, shift in WINDOW_CASES:
        run_window_case(name, b, ch, dhw, wsz, shift, out_dir)
    write_list(out_dir, "windows.txt", ["win_" + wc[0] for wc in WINDOW_CASES])
    return len(WINDOW_CASES)


def write_indices(out_dir):
    for name, kind, iargs in INDEX_CASES:
        run_index_case(name, kind, iargs, out_dir)
    write_list(out_dir, "indices.txt", ["index_" + ic[0] for ic in INDEX_CASES])
    return len(INDEX_CASES)


if __name__ == "__main__":
    import fixtures
    fixtures.script_main({"seeds": ["attention", "windows", "index"], "relpos": ["relpos"]})
