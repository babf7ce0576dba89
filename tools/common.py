"""What the PyTorch twins and fixture writers of tools/ share.

  seeding         seed_of(name): a case's seed from its name; setup(): one
                  thread, float32 (the fixtures are then deterministic)
  fixture files   write_case (NAME.model / .input / .expected / .grad
                  .safetensors), write_list (a NAME.txt of case names),
                  meta_value / metadata (the metadata strings of
                  docs/reference.md, section 2),
                  state_dict_f32
  reference       WindowAttention (the official Swin's) and
  modules         WindowAttention3D (RSTT's), kept as their authors
                  wrote them, changed only to return (y, attn)
  indices         index_2d, index_3d (the reference modules' buffers), clip_index
                  (Shaw)
  windows         padded, window_partition_2d/3d, window_reverse_2d/3d,
                  make_windows (pad, roll, partition), region_slices,
                  shift_mask_2d/3d (the shifted-window masks)
  Mlp             Linear, exact GELU, Linear (Swin, Video Swin, timm ViT)
  Rng, mix64      relattn's generator (src/base/rng.c): xoshiro256** seeded
                  by splitmix64, uniform doubles, and its seed mixer

Run with Debian's python3-torch (/usr/bin/python3). st.py (safetensors) has
no torch; everything here does.
"""

import os
import sys
import warnings
import zlib

import torch
import torch.nn as nn

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import st  # noqa: E402

FIXTURES = os.path.normpath(os.path.join(HERE, "..", "tests", "fixtures"))

# torch.meshgrid without indexing= warns in 1.13; the official code calls it
# that way and means "ij", which is the default.
warnings.filterwarnings("ignore", message=".*meshgrid.*")


# --------------------------------------------------------------------------
# Seeding and fixture files
# --------------------------------------------------------------------------

def seed_of(name):
    """A case's seed: CRC-32 of its name, 31 bits."""
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


def setup():
    """One thread and float32: the fixtures do not depend on the machine's
    core count."""
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)


def meta_value(v):
    """A metadata string (docs/reference.md, section 2): booleans
    true/false, integers in decimal, floats as Python's repr, tuples
    comma-separated."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return ",".join(meta_value(e) for e in v)
    return str(v)


def metadata(arch, hp, keys):
    """{"arch": arch} and hp[k] for the keys whose value is not None."""
    meta = {"arch": arch}
    for k in keys:
        if hp.get(k) is not None:
            meta[k] = meta_value(hp[k])
    return meta


def write_case(out_dir, name, model=None, meta=None, input=None, expected=None, grad=None,
               scheme=None):
    """The files of one case, each a dict of tensors (or None: not written):
    NAME.model.safetensors (with meta), NAME.input.safetensors,
    NAME.expected.safetensors and NAME.grad.safetensors; scheme, when given,
    is the naming scheme the loader must detect, in the metadata of the
    expected (or else the grad) file. -> the bytes written."""
    files = (("model", model, meta), ("input", input, None),
             ("expected", expected, {"scheme": scheme} if scheme else None),
             ("grad", grad, {"scheme": scheme} if scheme and expected is None else None))
    return sum(st.write(os.path.join(out_dir, "%s.%s.safetensors" % (name, kind)), t, m)
               for kind, t, m in files if t is not None)


def state_dict_f32(module):
    """A module's state_dict, detached copies, floats as float32."""
    return {k: (v.float() if v.dtype.is_floating_point else v).detach().clone().contiguous()
            for k, v in module.state_dict().items()}


def write_list(out_dir, filename, names):
    """A case list: one name a line."""
    with open(os.path.join(out_dir, filename), "w") as f:
        f.write("".join(n + "\n" for n in names))


# --------------------------------------------------------------------------
# The reference modules
# --------------------------------------------------------------------------

def trunc_normal_(t, std=1.0):
    # The official initialiser; the fixtures re-draw every parameter anyway.
    return nn.init.trunc_normal_(t, std=std, a=-2 * std, b=2 * std)


class WindowAttention(nn.Module):
    """Swin W-MSA / SW-MSA (the official WindowAttention), returning (x, attn)."""

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
    """RSTT W-MSA / W-MCA with a 3-D relative position bias (RSTT's WindowAttention3D)."""

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


# --------------------------------------------------------------------------
# Relative position indices
# --------------------------------------------------------------------------

def index_2d(wh, ww):
    """Swin's (wh*ww, wh*ww) index, by the official module's lines."""
    return WindowAttention(dim=1, window_size=(wh, ww), num_heads=1).relative_position_index


def index_3d(d1, d2, wh, ww):
    """RSTT's (d1*wh*ww, d2*wh*ww) index, by RSTT's module's lines."""
    return WindowAttention3D(dim=1, num_frames_q=d1, num_frames_kv=d2,
                             window_size=(wh, ww), num_heads=1).relative_position_index


def clip_index(n, k):
    """Shaw: rel[i, j] = clamp(j - i, -k, k) + k, (n, n) int64."""
    r = torch.arange(n)
    return (r[None, :] - r[:, None]).clamp(-k, k) + k


# --------------------------------------------------------------------------
# Windows (docs/reference.md, section 1.3): padding, roll, partition, shifted-window mask
# --------------------------------------------------------------------------

def padded(n, w):
    return (n + w - 1) // w * w


def window_partition_2d(x, wh, ww):
    """(B, H, W, C) -> (B * nW, wh*ww, C): the official order, non-square."""
    B, H, W, C = x.shape
    x = x.view(B, H // wh, wh, W // ww, ww, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, wh * ww, C)


def window_reverse_2d(windows, wh, ww, H, W):
    """(B * nW, wh*ww, C) -> (B, H, W, C), H and W multiples of the window."""
    C = windows.shape[-1]
    B = windows.shape[0] // ((H // wh) * (W // ww))
    x = windows.view(B, H // wh, W // ww, wh, ww, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, C)


def window_partition_3d(x, wd, wh, ww):
    """(B, D, H, W, C) -> (B * nW, wd*wh*ww, C): batch, window depth, row,
    column; tokens row-major (Video Swin's order)."""
    B, D, H, W, C = x.shape
    x = x.view(B, D // wd, wd, H // wh, wh, W // ww, ww, C)
    return x.permute(0, 1, 3, 5, 2, 4, 6, 7).contiguous().view(-1, wd * wh * ww, C)


def window_reverse_3d(windows, B, Dp, Hp, Wp, wd, wh, ww):
    C = windows.shape[-1]
    x = windows.view(B, Dp // wd, Hp // wh, Wp // ww, wd, wh, ww, C)
    return x.permute(0, 1, 4, 2, 5, 3, 6, 7).contiguous().view(B, Dp, Hp, Wp, C)


def make_windows(x, wd, wh, ww, sd, sh, sw):
    """x (B, D, H, W, C): pad at the end, roll by -shift, partition."""
    B, D, H, W, C = x.shape
    Dp, Hp, Wp = padded(D, wd), padded(H, wh), padded(W, ww)
    xp = torch.zeros((B, Dp, Hp, Wp, C), dtype=x.dtype)
    xp[:, :D, :H, :W, :] = x
    if sd or sh or sw:
        xp = torch.roll(xp, shifts=(-sd, -sh, -sw), dims=(1, 2, 3))
    return window_partition_3d(xp, wd, wh, ww)


def region_slices(ws, s):
    """The regions of one axis of a map shifted by s (one region if s is 0)."""
    if s == 0:
        return (slice(None),)
    return (slice(0, -ws), slice(-ws, -s), slice(-s, None))


def _mask_of(labels_q, labels_kv):
    m = labels_kv.unsqueeze(1) - labels_q.unsqueeze(2)
    return m.masked_fill(m != 0, float(-100.0)).masked_fill(m == 0, float(0.0))


def shift_mask_2d(Hp, Wp, wh, ww, sh, sw):
    """The official Swin block's attn_mask on the padded (Hp, Wp) map."""
    img_mask = torch.zeros((1, Hp, Wp, 1))  # 1 H W 1
    cnt = 0
    for h in region_slices(wh, sh):
        for w in region_slices(ww, sw):
            img_mask[:, h, w, :] = cnt
            cnt += 1
    labels = window_partition_2d(img_mask, wh, ww).view(-1, wh * ww)  # nW, wh*ww
    return _mask_of(labels, labels)


def shift_mask_3d(Dp, Hp, Wp, wd, wh, ww, sd, sh, sw):
    """Video Swin's compute_mask, three axes, on the padded map."""
    img_mask = torch.zeros((1, Dp, Hp, Wp, 1))
    cnt = 0
    for d in region_slices(wd, sd):
        for h in region_slices(wh, sh):
            for w in region_slices(ww, sw):
                img_mask[:, d, h, w, :] = cnt
                cnt += 1
    labels = window_partition_3d(img_mask, wd, wh, ww).squeeze(-1)  # nW, N
    return _mask_of(labels, labels)


def shift_mask_cross(Hp, Wp, wh, ww, sh, sw, d1, d2):
    """RSTT's attn_mask_qkv on the padded (Hp, Wp) map: region labels by
    (h, w), the same for every frame, for D1 query and D2 key/value frames."""
    def labels(d):
        img = torch.zeros((1, d, Hp, Wp, 1))
        cnt = 0
        for h in region_slices(wh, sh):
            for w in region_slices(ww, sw):
                img[:, :, h, w, :] = cnt
                cnt += 1
        return window_partition_3d(img, d, wh, ww).squeeze(-1)  # nW, d*wh*ww
    return _mask_of(labels(d1), labels(d2))  # nW, N1, N2


# --------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------

class Mlp(nn.Module):
    """fc1, exact GELU, fc2: the MLP of Swin, Video Swin and timm's ViT."""

    def __init__(self, in_features, hidden_features, bias=True):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features, bias=bias)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


# --------------------------------------------------------------------------
# relattn's generator (src/base/rng.c)
# --------------------------------------------------------------------------

M64 = (1 << 64) - 1


def mix64(a, b):
    """rai_mix64: a seed from two numbers (splitmix64's finaliser)."""
    z = a ^ ((b * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & M64)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class Rng:
    """ra_rng: xoshiro256** whose state is four splitmix64 outputs of the seed."""

    def __init__(self, seed):
        self.s, x = [], seed & M64
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    def u64(self):
        def rotl(v, k):
            return ((v << k) | (v >> (64 - k))) & M64
        s = self.s
        out = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return out

    def uniform(self):
        """ra_rng_uniform: the top 53 bits, in [0, 1)."""
        return (self.u64() >> 11) * 2.0 ** -53
