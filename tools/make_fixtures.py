"""The PyTorch twin of relattn: writes the test fixtures.

Run with Debian's python3-torch (only /usr/bin/python3 has it):

    /usr/bin/python3 tools/make_fixtures.py [--out tests/fixtures]

It writes, into the output directory (default: tests/fixtures next to this
script's parent), safetensors files made with tools/st.py:

  NAME.model.safetensors     a seed module's state_dict, with __metadata__
                             "arch" and its constructor arguments (SPEC 3.1)
  NAME.input.safetensors     x (or q and optional kv), optional mask, dy
  NAME.expected.safetensors  y, attn and the autograd gradients given dy:
                             grad.x (or grad.q, grad.kv), grad.<param>
  cases.txt                  the attention case names, one per line

  win_NAME.safetensors       x (B, D, H, W, C), windows (padded, rolled,
                             partitioned) and the shifted-window mask
  windows.txt                the window case names (with the win_ prefix)

  index_NAME.safetensors     index (I64) from the seeds' PyTorch lines
  indices.txt                the index case names (with the index_ prefix)

With --family relpos (or all, the default) also the cases of the relative
position schemes (T5, ALiBi, decomposed, RoPE) from tools/relpos_twin.py:
relpos_cases.txt, their NAME.{model,input,expected}.safetensors and
relpos_tables.safetensors.

The reference modules are the seed code (ViT Attention and Swin
WindowAttention from seeds 001/002, RSTT WindowAttention3D from seed 000),
changed only to return (y, attn), plus a naive Shaw et al. 2018 module that
materialises the (N, N, hd) relative tensors. Everything runs in float32 on
one thread with torch.manual_seed per case, so the output is deterministic.
"""

import argparse
import os
import sys
import warnings
import zlib

import torch
import torch.nn as nn

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

# torch.meshgrid without indexing= warns in 1.13; the seeds call it that way
# and mean "ij", which is the default.
warnings.filterwarnings("ignore", message=".*meshgrid.*")


def trunc_normal_(t, std=1.0):
    # The seeds' initialiser; every parameter is re-initialised below with
    # non-trivial values anyway (see init_params).
    return nn.init.trunc_normal_(t, std=std, a=-2 * std, b=2 * std)


# --------------------------------------------------------------------------
# Reference modules
# --------------------------------------------------------------------------

class Attention(nn.Module):
    """ViT attention (seed 002), returning (x, attn)."""

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


class WindowAttention(nn.Module):
    """Swin W-MSA / SW-MSA (seeds 001, 002), returning (x, attn)."""

    def __init__(self, dim, window_size, num_heads, qkv_bias=True, qk_scale=None, attn_drop=0., proj_drop=0.):
        super().__init__()
        self.dim = dim
        self.window_size = window_size  # Wh, Ww
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = qk_scale or head_dim ** -0.5

        # define a parameter table of relative position bias
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size[0] - 1) * (2 * window_size[1] - 1), num_heads))  # 2*Wh-1 * 2*Ww-1, nH

        # get pair-wise relative position index for each token inside the window
        coords_h = torch.arange(self.window_size[0])
        coords_w = torch.arange(self.window_size[1])
        coords = torch.stack(torch.meshgrid([coords_h, coords_w]))  # 2, Wh, Ww
        coords_flatten = torch.flatten(coords, 1)  # 2, Wh*Ww
        relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]  # 2, Wh*Ww, Wh*Ww
        relative_coords = relative_coords.permute(1, 2, 0).contiguous()  # Wh*Ww, Wh*Ww, 2
        relative_coords[:, :, 0] += self.window_size[0] - 1  # shift to start from 0
        relative_coords[:, :, 1] += self.window_size[1] - 1
        relative_coords[:, :, 0] *= 2 * self.window_size[1] - 1
        relative_position_index = relative_coords.sum(-1)  # Wh*Ww, Wh*Ww
        self.register_buffer("relative_position_index", relative_position_index)

        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

        trunc_normal_(self.relative_position_bias_table, std=.02)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x, mask=None):
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # make torchscript happy (cannot use tensor as tuple)

        q = q * self.scale
        attn = (q @ k.transpose(-2, -1))

        relative_position_bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
            self.window_size[0] * self.window_size[1], self.window_size[0] * self.window_size[1], -1)  # Wh*Ww,Wh*Ww,nH
        relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous()  # nH, Wh*Ww, Wh*Ww
        attn = attn + relative_position_bias.unsqueeze(0)

        if mask is not None:
            nW = mask.shape[0]
            attn = attn.view(B_ // nW, nW, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, N, N)
            attn = self.softmax(attn)
        else:
            attn = self.softmax(attn)

        attn = self.attn_drop(attn)

        x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x, attn


class WindowAttention3D(nn.Module):
    """RSTT W-MSA / W-MCA with a 3-D relative position bias (seed 000)."""

    def __init__(self, dim, num_frames_q, num_frames_kv, window_size, num_heads,
                 qkv_bias=True, qk_scale=None, attn_drop=0., proj_drop=0.):
        super().__init__()
        self.dim = dim
        self.num_frames_q = num_frames_q  # D1
        self.num_frames_kv = num_frames_kv  # D2
        self.window_size = window_size  # Wh, Ww
        self.num_heads = num_heads  # nH
        head_dim = dim // num_heads
        self.scale = qk_scale or head_dim ** -0.5

        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * num_frames_q - 1) * (2 * window_size[0] - 1) * (2 * window_size[1] - 1), num_heads)
        )  # 2*D-1 * 2*Wh-1 * 2*Ww-1, nH

        # Get pair-wise relative position index for each token inside the window
        coords_d_q = torch.arange(self.num_frames_q)
        coords_d_kv = torch.arange(0, self.num_frames_q, int((self.num_frames_q + 1) // self.num_frames_kv))
        assert coords_d_kv.numel() == num_frames_kv, "invalid num_frames_kv"
        coords_h = torch.arange(self.window_size[0])
        coords_w = torch.arange(self.window_size[1])
        coords_q = torch.stack(torch.meshgrid([coords_d_q, coords_h, coords_w]))  # 3, D1, Wh, Ww
        coords_kv = torch.stack(torch.meshgrid([coords_d_kv, coords_h, coords_w]))  # 3, D2, Wh, Ww
        coords_q_flatten = torch.flatten(coords_q, 1)  # 3, D1*Wh*Ww
        coords_kv_flatten = torch.flatten(coords_kv, 1)  # 3, D2*Wh*Ww
        relative_coords = coords_q_flatten[:, :, None] - coords_kv_flatten[:, None, :]  # 3, D1*Wh*Ww, D2*Wh*Ww
        relative_coords = relative_coords.permute(1, 2, 0).contiguous()  # D1*Wh*Ww, D2*Wh*Ww, 3
        relative_coords[:, :, 0] += self.num_frames_q - 1
        relative_coords[:, :, 1] += self.window_size[0] - 1
        relative_coords[:, :, 2] += self.window_size[1] - 1
        relative_coords[:, :, 0] *= (2 * self.window_size[0] - 1) * (2 * self.window_size[1] - 1)
        relative_coords[:, :, 1] *= 2 * self.window_size[1] - 1
        relative_position_index = relative_coords.sum(-1)  # D1*Wh*Ww, D2*Wh*Ww
        self.register_buffer("relative_position_index", relative_position_index)

        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

        trunc_normal_(self.relative_position_bias_table, std=.02)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, q, kv=None, mask=None):
        kv = q if kv is None else kv
        B_, N1, C = q.shape  # N1 = D1*Wh*Ww, B_ = B*nW
        B_, N2, C = kv.shape  # N2 = D2*Wh*Ww, B_ = B*nW

        q = self.q(q).reshape(B_, N1, 1, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        kv = self.kv(kv).reshape(B_, N2, 2, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = q[0], kv[0], kv[1]  # B_, nH, N1(2), C
        q = q * self.scale
        attn = (q @ k.transpose(-2, -1))  # B_, nH, N1, N2

        relative_position_bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
            N1, N2, -1)  # D1*Wh*Ww, D2*Wh*Ww, nH
        relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous()  # nH, D1*Wh*Ww, D2*Wh*Ww
        attn = attn + relative_position_bias.unsqueeze(0)  # B_, nH, D1*Wh*Ww, D2*Wh*Ww

        if mask is not None:
            nW = mask.shape[0]
            attn = attn.view(B_ // nW, nW, self.num_heads, N1, N2) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, N1, N2)
            attn = self.softmax(attn)
        else:
            attn = self.softmax(attn)

        attn = self.attn_drop(attn)

        x = (attn @ v).transpose(1, 2).reshape(B_, N1, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x, attn


def clip_index(n, k):
    """Shaw: rel[i, j] = clamp(j - i, -k, k) + k, (n, n) int64."""
    r = torch.arange(n)
    return (r[None, :] - r[:, None]).clamp(-k, k) + k


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
# Windows (SPEC 2.4): padding, roll, partition, shifted-window mask
# --------------------------------------------------------------------------

def window_partition_2d(x, wh, ww):
    """(B, H, W, C) -> (B * nW, wh*ww, C): seed 002's order, non-square."""
    B, H, W, C = x.shape
    x = x.view(B, H // wh, wh, W // ww, ww, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, wh * ww, C)


def window_partition_3d(x, wd, wh, ww):
    """(B, D, H, W, C) -> (B * nW, wd*wh*ww, C): batch, window depth, row,
    column; tokens row-major (Video Swin's order)."""
    B, D, H, W, C = x.shape
    x = x.view(B, D // wd, wd, H // wh, wh, W // ww, ww, C)
    return x.permute(0, 1, 3, 5, 2, 4, 6, 7).contiguous().view(-1, wd * wh * ww, C)


def padded(n, w):
    return (n + w - 1) // w * w


def region_slices(ws, s):
    if s == 0:
        return (slice(None),)
    return (slice(0, -ws), slice(-ws, -s), slice(-s, None))


def shift_mask_2d(Hp, Wp, wh, ww, sh, sw):
    """The official Swin block's attn_mask on the padded (Hp, Wp) map."""
    img_mask = torch.zeros((1, Hp, Wp, 1))  # 1 H W 1
    cnt = 0
    for h in region_slices(wh, sh):
        for w in region_slices(ww, sw):
            img_mask[:, h, w, :] = cnt
            cnt += 1
    mask_windows = window_partition_2d(img_mask, wh, ww)  # nW, wh, ww, 1
    mask_windows = mask_windows.view(-1, wh * ww)
    attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
    attn_mask = attn_mask.masked_fill(attn_mask != 0, float(-100.0)).masked_fill(attn_mask == 0, float(0.0))
    return attn_mask


def shift_mask_3d(Dp, Hp, Wp, wd, wh, ww, sd, sh, sw):
    """Video Swin's compute_mask, three axes, on the padded map."""
    img_mask = torch.zeros((1, Dp, Hp, Wp, 1))
    cnt = 0
    for d in region_slices(wd, sd):
        for h in region_slices(wh, sh):
            for w in region_slices(ww, sw):
                img_mask[:, d, h, w, :] = cnt
                cnt += 1
    mask_windows = window_partition_3d(img_mask, wd, wh, ww).squeeze(-1)  # nW, N
    attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
    attn_mask = attn_mask.masked_fill(attn_mask != 0, float(-100.0)).masked_fill(attn_mask == 0, float(0.0))
    return attn_mask


def make_windows(x, wd, wh, ww, sd, sh, sw):
    """x (B, D, H, W, C): pad at the end, roll by -shift, partition."""
    B, D, H, W, C = x.shape
    Dp, Hp, Wp = padded(D, wd), padded(H, wh), padded(W, ww)
    xp = torch.zeros((B, Dp, Hp, Wp, C), dtype=x.dtype)
    xp[:, :D, :H, :W, :] = x
    if sd or sh or sw:
        xp = torch.roll(xp, shifts=(-sd, -sh, -sw), dims=(1, 2, 3))
    return window_partition_3d(xp, wd, wh, ww)


def window_reverse_3d(windows, B, Dp, Hp, Wp, wd, wh, ww):
    C = windows.shape[-1]
    x = windows.view(B, Dp // wd, Hp // wh, Wp // ww, wd, wh, ww, C)
    return x.permute(0, 1, 4, 2, 5, 3, 6, 7).contiguous().view(B, Dp, Hp, Wp, C)


# --------------------------------------------------------------------------
# Relative position indices, by the seeds' lines
# --------------------------------------------------------------------------

def index_2d(wh, ww):
    return WindowAttention(dim=1, window_size=(wh, ww), num_heads=1).relative_position_index


def index_3d(d1, d2, wh, ww):
    return WindowAttention3D(dim=1, num_frames_q=d1, num_frames_kv=d2,
                             window_size=(wh, ww), num_heads=1).relative_position_index


# --------------------------------------------------------------------------
# Attention cases
# --------------------------------------------------------------------------

def case_seed(name):
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


def init_params(module):
    """Non-trivial values everywhere, so that every term matters."""
    with torch.no_grad():
        for pname, p in module.named_parameters():
            if pname in ("relative_position_bias_table", "relative_keys", "relative_values"):
                p.normal_(0.0, 0.5)
            else:
                p.normal_(0.0, 0.2)


def bool_str(b):
    return "true" if b else "false"


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
        meta["qkv_bias"] = bool_str(qkv_bias)
    else:
        assert "qkv_bias" not in hp
    if hp.get("qk_scale") is not None:
        meta["qk_scale"] = repr(float(hp["qk_scale"]))
    return meta


TORCH_DTYPES = {"F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16}


def run_case(c, out_dir):
    torch.manual_seed(case_seed(c.name))
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
    st.write(os.path.join(out_dir, c.name + ".model.safetensors"), model_tensors, meta)
    st.write(os.path.join(out_dir, c.name + ".input.safetensors"), inputs)
    st.write(os.path.join(out_dir, c.name + ".expected.safetensors"), expected)
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
    torch.manual_seed(case_seed("win_" + name))
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
        # 2-D partition agrees with seed 002's order
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
    """The seeds' printed examples, and the Shaw oracle against plain attention."""
    i2 = index_2d(2, 2)
    assert i2.tolist() == [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]]  # seed 004
    i7 = index_2d(7, 7)
    assert i7[0].tolist() == [84, 83, 82, 81, 80, 79, 78, 71, 70, 69, 68, 67, 66, 65,
                              58, 57, 56, 55, 54, 53, 52, 45, 44, 43, 42, 41, 40, 39,
                              32, 31, 30, 29, 28, 27, 26, 19, 18, 17, 16, 15, 14, 13,
                              6, 5, 4, 3, 2, 1, 0]  # seed 001
    assert int(i7.min()) == 0 and int(i7.max()) == 168
    # RSTT: D1=7, D2=4 -> kv frames 0, 2, 4, 6 (SPEC 2.2)
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


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures"),
                    help="output directory (default: tests/fixtures)")
    ap.add_argument("--family", choices=("all", "seeds", "relpos"), default="all",
                    help="which fixtures: the seed modules', the relative position "
                    "schemes' (tools/relpos_twin.py), or both (default)")
    args = ap.parse_args(argv)
    out_dir = os.path.normpath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)

    if args.family in ("all", "relpos"):
        import relpos_twin
        n = relpos_twin.write_fixtures(out_dir, case_seed)
        print("wrote %d relative position scheme cases to %s" % (n, out_dir))
        if args.family == "relpos":
            return

    self_checks()

    cases = attention_cases()
    for c in cases:
        run_case(c, out_dir)
    with open(os.path.join(out_dir, "cases.txt"), "w") as f:
        f.write("".join(c.name + "\n" for c in cases))

    for name, b, ch, dhw, wsz, shift in WINDOW_CASES:
        run_window_case(name, b, ch, dhw, wsz, shift, out_dir)
    with open(os.path.join(out_dir, "windows.txt"), "w") as f:
        f.write("".join("win_" + wc[0] + "\n" for wc in WINDOW_CASES))

    for name, kind, iargs in INDEX_CASES:
        run_index_case(name, kind, iargs, out_dir)
    with open(os.path.join(out_dir, "indices.txt"), "w") as f:
        f.write("".join("index_" + ic[0] + "\n" for ic in INDEX_CASES))

    print("wrote %d attention cases, %d window cases, %d index cases to %s"
          % (len(cases), len(WINDOW_CASES), len(INDEX_CASES), out_dir))


if __name__ == "__main__":
    main()
