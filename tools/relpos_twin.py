"""PyTorch twin of relattn's relative position schemes (docs/arch-relpos.md), and
the
writer of their fixtures.

Run with Debian's python3-torch (only /usr/bin/python3 has it), through
the one fixture tool:

    /usr/bin/python3 tools/fixtures.py relpos [-o tests/fixtures]

Reference modules, written from the papers and the authors' code (read,
not copied), in float32:

  T5Attention          Hugging Face's T5Attention (no 1/sqrt(d) scaling,
                       q/k/v/o without biases, the bucketed bias of
                       _relative_position_bucket; is_decoder: one-sided
                       buckets and a causal mask of finfo.min, as the
                       decoder's extended attention mask)
  AlibiAttention       timm-style qkv/proj attention plus -m_h |i - j| after
                       the scaling, slopes from the authors' get_slopes;
                       causal: the future filled with -inf
  DecomposedAttention  SAM's image-encoder Attention with use_rel_pos
                       (MViTv2 / ViTDet): get_rel_pos (linear resampling)
                       and add_decomposed_rel_pos; x (B, H, W, C)
  RoPEAttention        RoPE-Axial from naver-ai/rope-vit (compute_axial_cis,
                       apply_rotary_emb: adjacent pairs as complex numbers,
                       x frequencies on the first half of the pairs, y on
                       the second; the prefix tokens not rotated)

Fixtures (file names as make_fixtures.py's attention cases):
  NAME.model.safetensors / NAME.input.safetensors / NAME.expected.safetensors
  relpos_cases.txt     the case names
  relpos_tables.safetensors  T5 buckets of j - i for several configurations
                       (bucket.<nb>.<md>.<bi|uni>, I32 over j - i = -140..140)
                       and ALiBi slopes (slopes.<n>, F32) as the references
                       compute them
"""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import st  # noqa: E402
from common import meta_value, seed_of, write_case, write_list  # noqa: E402


# --------------------------------------------------------------------------
# T5 (Raffel et al.; Hugging Face's T5Attention)
# --------------------------------------------------------------------------

def t5_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """Hugging Face's _relative_position_bucket of j - i (a long tensor)."""
    buckets = torch.zeros_like(relative_position)
    n = relative_position
    if bidirectional:
        num_buckets //= 2
        buckets += (n > 0).long() * num_buckets
        n = n.abs()
    else:
        n = -torch.min(n, torch.zeros_like(n))
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, n, large)


class T5Attention(nn.Module):
    def __init__(self, d_model, d_kv, num_heads, relative_attention_num_buckets=32,
                 relative_attention_max_distance=128, is_decoder=False,
                 has_relative_attention_bias=True):
        super().__init__()
        self.h, self.dkv = num_heads, d_kv
        self.nb, self.md, self.is_decoder = (relative_attention_num_buckets,
                                             relative_attention_max_distance, is_decoder)
        inner = num_heads * d_kv
        self.q = nn.Linear(d_model, inner, bias=False)
        self.k = nn.Linear(d_model, inner, bias=False)
        self.v = nn.Linear(d_model, inner, bias=False)
        self.o = nn.Linear(inner, d_model, bias=False)
        # Hugging Face gives the first layer of a stack the table; the others
        # get its position bias, here none (zeros)
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.nb, num_heads)
        else:
            self.relative_attention_bias = None

    def forward(self, x):
        B, N, _ = x.shape
        shape = lambda t: t.view(B, N, self.h, self.dkv).transpose(1, 2)
        q, k, v = shape(self.q(x)), shape(self.k(x)), shape(self.v(x))
        scores = q @ k.transpose(3, 2)   # no scaling in T5
        ctx = torch.arange(N)[:, None]
        mem = torch.arange(N)[None, :]
        buckets = t5_bucket(mem - ctx, not self.is_decoder, self.nb, self.md)
        if self.relative_attention_bias is not None:
            bias = self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)
        else:
            bias = torch.zeros(1, self.h, N, N)
        if self.is_decoder:   # the decoder's extended causal mask
            causal = (mem <= ctx).float()
            bias = bias + (1.0 - causal) * torch.finfo(torch.float32).min
        attn = F.softmax((scores + bias).float(), dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, N, self.h * self.dkv)
        return self.o(out), attn


# --------------------------------------------------------------------------
# ALiBi (Press et al.)
# --------------------------------------------------------------------------

def alibi_slopes(n):
    """The authors' get_slopes (Python floats)."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    p = 2 ** math.floor(math.log2(n))
    return power_of_2(p) + alibi_slopes(2 * p)[0::2][:n - p]


class QKVAttention(nn.Module):
    """The qkv / proj attention of timm's ViT, with a hook for the logits."""

    def __init__(self, dim, num_heads, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def heads(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads)
        return qkv.permute(2, 0, 3, 1, 4).unbind(0)

    def finish(self, attn, v, B, N, C):
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C)), attn


class AlibiAttention(QKVAttention):
    def __init__(self, dim, num_heads, qkv_bias=True, causal=False):
        super().__init__(dim, num_heads, qkv_bias)
        self.causal = causal
        self.register_buffer("slopes", torch.tensor(alibi_slopes(num_heads), dtype=torch.float32))

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.heads(x)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        dist = (torch.arange(N)[None, :] - torch.arange(N)[:, None]).abs().float()
        attn = attn + (-(self.slopes[:, None, None] * dist)).unsqueeze(0)
        if self.causal:
            future = torch.arange(N)[None, :] > torch.arange(N)[:, None]
            attn = attn.masked_fill(future, float("-inf"))
        return self.finish(attn, v, B, N, C)


# --------------------------------------------------------------------------
# Decomposed relative positions (MViTv2 / ViTDet / SAM)
# --------------------------------------------------------------------------

def get_rel_pos(q_size, k_size, rel_pos):
    """SAM's get_rel_pos: the (q_size, k_size, hd) table of relative
    positions, resampled linearly when the table's length differs."""
    max_rel = int(2 * max(q_size, k_size) - 1)
    if rel_pos.shape[0] != max_rel:
        r = F.interpolate(rel_pos.reshape(1, rel_pos.shape[0], -1).permute(0, 2, 1),
                          size=max_rel, mode="linear")
        r = r.reshape(-1, max_rel).permute(1, 0)
    else:
        r = rel_pos
    qc = torch.arange(q_size)[:, None] * max(k_size / q_size, 1.0)
    kc = torch.arange(k_size)[None, :] * max(q_size / k_size, 1.0)
    rel = (qc - kc) + (k_size - 1) * max(q_size / k_size, 1.0)
    return r[rel.long()]


class DecomposedAttention(QKVAttention):
    def __init__(self, dim, num_heads, qkv_bias=True, input_size=(4, 4)):
        super().__init__(dim, num_heads, qkv_bias)
        hd = dim // num_heads
        self.rel_pos_h = nn.Parameter(torch.zeros(2 * input_size[0] - 1, hd))
        self.rel_pos_w = nn.Parameter(torch.zeros(2 * input_size[1] - 1, hd))

    def forward(self, x):
        B, H, W, C = x.shape
        nh = self.num_heads
        qkv = self.qkv(x).reshape(B, H * W, 3, nh, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.reshape(3, B * nh, H * W, -1).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        Rh = get_rel_pos(H, H, self.rel_pos_h)
        Rw = get_rel_pos(W, W, self.rel_pos_w)
        r_q = q.reshape(B * nh, H, W, -1)
        rel_h = torch.einsum("bhwc,hkc->bhwk", r_q, Rh)
        rel_w = torch.einsum("bhwc,wkc->bhwk", r_q, Rw)
        attn = (attn.view(B * nh, H, W, H, W) + rel_h[:, :, :, :, None]
                + rel_w[:, :, :, None, :]).view(B * nh, H * W, H * W)
        attn = attn.softmax(dim=-1)
        out = (attn @ v).view(B, nh, H, W, -1).permute(0, 2, 3, 1, 4).reshape(B, H, W, -1)
        return self.proj(out), attn.view(B, nh, H * W, H * W)


# --------------------------------------------------------------------------
# 2-D axial RoPE (Heo et al. 2024, RoPE-Axial)
# --------------------------------------------------------------------------

def axial_cis(hd, end_x, end_y, theta):
    freqs = 1.0 / (theta ** (torch.arange(0, hd, 4)[: hd // 4].float() / hd))
    t = torch.arange(end_x * end_y, dtype=torch.float32)
    t_x, t_y = (t % end_x).float(), torch.div(t, end_x, rounding_mode="floor").float()
    fx, fy = torch.outer(t_x, freqs), torch.outer(t_y, freqs)
    return torch.cat([torch.polar(torch.ones_like(fx), fx),
                      torch.polar(torch.ones_like(fy), fy)], dim=-1)


def rotate(x, cis):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * cis).flatten(-2)


class RoPEAttention(QKVAttention):
    def __init__(self, dim, num_heads, qkv_bias=True, grid_size=(4, 4), rope_theta=100.0,
                 num_prefix_tokens=1):
        super().__init__(dim, num_heads, qkv_bias)
        self.prefix = num_prefix_tokens
        # grid_size is (H, W): x runs along W (end_x), y along H
        self.register_buffer("cis", axial_cis(dim // num_heads, grid_size[1], grid_size[0],
                                              rope_theta), persistent=False)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.heads(x)
        P = self.prefix
        q = torch.cat([q[:, :, :P], rotate(q[:, :, P:], self.cis)], dim=2)
        k = torch.cat([k[:, :, :P], rotate(k[:, :, P:], self.cis)], dim=2)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        return self.finish(attn, v, B, N, C)


# --------------------------------------------------------------------------
# Cases and fixtures
# --------------------------------------------------------------------------

# name, arch, constructor arguments, metadata left out (defaults), B, input size
CASES = [
    ("t5_enc", "t5_attention", dict(d_model=16, d_kv=6, num_heads=3,
                                    relative_attention_num_buckets=8,
                                    relative_attention_max_distance=10), (), 2, (24,)),
    ("t5_dec", "t5_attention", dict(d_model=16, d_kv=4, num_heads=2,
                                    relative_attention_num_buckets=6,
                                    relative_attention_max_distance=9, is_decoder=True), (),
     2, (20,)),
    ("t5_defaults", "t5_attention", dict(d_model=12, d_kv=4, num_heads=2),
     ("relative_attention_num_buckets", "relative_attention_max_distance", "is_decoder"), 1,
     (9,)),
    ("t5_long", "t5_attention", dict(d_model=8, d_kv=4, num_heads=2), (), 1, (136,)),
    ("t5_dec_nobias", "t5_attention", dict(d_model=8, d_kv=4, num_heads=2, is_decoder=True,
                                           has_relative_attention_bias=False),
     ("has_relative_attention_bias",), 2, (7,)),
    ("alibi_h8", "alibi_attention", dict(dim=32, num_heads=8), ("qkv_bias", "causal"), 2, (11,)),
    ("alibi_h8_causal", "alibi_attention", dict(dim=32, num_heads=8, causal=True), (), 2, (9,)),
    ("alibi_h6", "alibi_attention", dict(dim=24, num_heads=6, qkv_bias=False), (), 2, (10,)),
    ("alibi_h6_causal", "alibi_attention", dict(dim=24, num_heads=6, causal=True), (), 1, (13,)),
    ("alibi_h5_causal", "alibi_attention", dict(dim=20, num_heads=5, causal=True), (), 2, (7,)),
    ("dec_same", "decomposed_attention", dict(dim=16, num_heads=2, input_size=(3, 4)), (), 2,
     (3, 4)),
    ("dec_up", "decomposed_attention", dict(dim=16, num_heads=2, input_size=(3, 4)), (), 2,
     (4, 6)),
    ("dec_down", "decomposed_attention", dict(dim=12, num_heads=3, input_size=(5, 4),
                                              qkv_bias=False), (), 1, (3, 2)),
    ("rope_p1", "rope_attention", dict(dim=32, num_heads=2, grid_size=(3, 4)),
     ("rope_theta", "num_prefix_tokens", "qkv_bias"), 2, (13,)),
    ("rope_p0", "rope_attention", dict(dim=24, num_heads=3, grid_size=(4, 3), rope_theta=10000.0,
                                       num_prefix_tokens=0), (), 2, (12,)),
    ("rope_p2", "rope_attention", dict(dim=16, num_heads=1, grid_size=(2, 5), num_prefix_tokens=2,
                                       qkv_bias=False), (), 1, (12,)),
]

MODULES = {"t5_attention": T5Attention, "alibi_attention": AlibiAttention,
           "decomposed_attention": DecomposedAttention, "rope_attention": RoPEAttention}

# the defaults of the constructors, written out unless a case leaves them out
DEFAULTS = {
    "t5_attention": dict(relative_attention_num_buckets=32, relative_attention_max_distance=128,
                         is_decoder=False),
    "alibi_attention": dict(qkv_bias=True, causal=False),
    "decomposed_attention": dict(qkv_bias=True),
    "rope_attention": dict(qkv_bias=True, rope_theta=100.0, num_prefix_tokens=1),
}


def metadata(arch, hp, omit):
    meta = {"arch": arch}
    for k, v in dict(DEFAULTS[arch], **hp).items():   # (a T5 table's absence shows)
        if k not in omit:
            meta[k] = meta_value(v)
    return meta


def run_case(name, arch, hp, omit, b, size, out_dir, seed):
    torch.manual_seed(seed)
    m = MODULES[arch](**hp)
    with torch.no_grad():
        for pname, p in m.named_parameters():
            p.normal_(0.0, 0.5 if "rel" in pname else 0.2)
    dim = hp.get("d_model", hp.get("dim"))
    x = torch.randn(b, *size, dim)
    xl = x.clone().requires_grad_(True)
    y, attn = m(xl)
    dy = torch.randn_like(y)
    y.backward(dy)
    expected = {"y": y.detach()}
    if attn.numel() <= 20000:
        expected["attn"] = attn.detach().reshape(b, -1, attn.shape[-2], attn.shape[-1])
    expected["grad.x"] = xl.grad.detach()
    for pname, p in m.named_parameters():
        expected["grad." + pname] = p.grad.detach()
    for k, v in expected.items():
        assert v.dtype == torch.float32 and torch.isfinite(v).all(), (name, k)
    params = {k: v.detach() for k, v in m.named_parameters()}
    write_case(out_dir, name, model=params, meta=metadata(arch, hp, omit),
               input={"x": x, "dy": dy}, expected=expected)


def tables(out_dir):
    t = {}
    rel = torch.arange(-140, 141)
    for nb in (4, 6, 8, 32, 33):
        for md in (5, 9, 10, 128, 129):
            for bi in (True, False):
                me = (nb // 2 if bi else nb) // 2
                if me < 1 or md <= me:
                    continue
                t["bucket.%d.%d.%s" % (nb, md, "bi" if bi else "uni")] = \
                    t5_bucket(rel, bi, nb, md).int()
    for n in range(1, 33):
        t["slopes.%d" % n] = torch.tensor(alibi_slopes(n), dtype=torch.float32)
    st.write(os.path.join(out_dir, "relpos_tables.safetensors"), t, {"rel_min": "-140"})


def self_checks():
    # ALiBi slopes: the paper's examples
    assert alibi_slopes(8) == [2 ** -(i + 1) for i in range(8)]
    assert alibi_slopes(6)[:4] == [2 ** -(2 * (i + 1)) for i in range(4)]
    assert alibi_slopes(6)[4:] == [2 ** -1, 2 ** -3]
    # T5 at the max_distance boundary: the last bucket from there on
    r = torch.tensor([127, 128, 129, 1000])
    assert t5_bucket(r, True, 32, 128).tolist() == [31, 31, 31, 31]
    assert t5_bucket(-r, False, 32, 128).tolist()[1:] == [31, 31, 31]
    # decomposed == a Shaw key term over (Rh + Rw)[a, b] / scale
    torch.manual_seed(3)
    m = DecomposedAttention(8, 2, input_size=(2, 3))
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
        x = torch.randn(1, 2, 3, 8)
        y, a = m(x)
        q, k, _ = m.qkv(x).reshape(1, 6, 3, 2, 4).permute(2, 0, 3, 1, 4)
        ii = torch.arange(6)
        ah = (ii[:, None] // 3 - ii[None, :] // 3 + 1)
        aw = (ii[:, None] % 3 - ii[None, :] % 3 + 2)
        comb = m.rel_pos_h[ah] + m.rel_pos_w[aw]        # (N, N, hd)
        logits = m.scale * (q @ k.transpose(-2, -1)) + torch.einsum("bhid,ijd->bhij", q, comb)
        assert torch.allclose(logits.softmax(-1), a, atol=1e-6)
    # RoPE: rotating by the conjugate undoes it; relative: q_i . k_j depends on i - j
    cis = axial_cis(8, 3, 2, 100.0)
    v = torch.randn(6, 8)
    assert torch.allclose(rotate(rotate(v, cis), cis.conj()), v, atol=1e-6)


def write_fixtures(out_dir):
    """The relpos family of tools/fixtures.py."""
    self_checks()
    for name, arch, hp, omit, b, size in CASES:
        run_case(name, arch, hp, omit, b, size, out_dir, seed_of(name))
    write_list(out_dir, "relpos_cases.txt", [c[0] for c in CASES])
    tables(out_dir)
    return len(CASES)
