"""SwinV2 in PyTorch: the twin of src/swinv2.c and the swinv2 parts of
src/swin.c / src/swin_train.c, and its fixtures.

Written from the design of microsoft/Swin-Transformer
(models/swin_transformer_v2.py) and torchvision's swin_v2_*: the same
modules, constructor arguments, state_dict names and numbers.

  WindowAttentionV2     continuous position bias: cpb_mlp (Linear(2, 512),
                        ReLU, Linear(512, nH) without bias) over the
                        log-spaced relative coordinates, 16 * sigmoid,
                        gathered by the Swin index; scaled cosine attention
                        (F.normalize of q and k, logits times
                        exp(clamp(logit_scale, max=log(100)))); q_bias and
                        v_bias with a zero key bias
  SwinTransformerBlockV2  post-norm: x + norm1(attn(x)), x + norm2(mlp(x)),
                        shifted windows and the mask as Swin v1 (and the
                        zero padding of tools/swin_twin.py for maps that are
                        not multiples of the window)
  PatchMergingV2        x0..x3 gather, reduction, then LayerNorm(2C)
  SwinTransformerV2     the classification network (pretrained_window_sizes)

Fixtures (tests/test_swinv2.c, tests/test_net_grad.c with "swinv2"):

    /usr/bin/python3 tools/fixtures.py swinv2 [-o tests/fixtures]

writes, for the layer cases (swinv2_layers.txt) NAME.model.safetensors,
NAME.input.safetensors (x, dy, mask when shifted: what `relattn backward`
reads) and NAME.grad.safetensors (y, grad.x, grad.NAME: what it writes); for the network cases (swinv2_grads.txt: the
official twin and reduced-depth torchvision SwinTransformers with v2 blocks)
NAME.model / NAME.input (x) / NAME.grad (dy, y, grad.x, grad.NAME). Float32
on one thread, seeded per case.

Run with Debian's python3-torch (/usr/bin/python3).
"""

import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import (index_2d, metadata, padded, seed_of, shift_mask_2d, state_dict_f32,  # noqa: E402
                    window_partition_2d, window_reverse_2d, write_case, write_list)
from swin_twin import BasicLayer, PatchEmbed, SwinTransformer, SwinTransformerBlock  # noqa: E402

LOGIT_MAX = math.log(1.0 / 0.01)


def coords_table(wh, ww, pretrained=(0, 0)):
    """(1, 2wh-1, 2ww-1, 2): (dh, dw) scaled to [-8, 8] by the (pretrained)
    window - 1, then sign(u) * log2(|u| + 1) / log2(8)."""
    h = torch.arange(-(wh - 1), wh, dtype=torch.float32)
    w = torch.arange(-(ww - 1), ww, dtype=torch.float32)
    t = torch.stack(torch.meshgrid([h, w], indexing="ij")).permute(1, 2, 0).contiguous()
    t = t.unsqueeze(0)
    ph, pw = (pretrained[0], pretrained[1]) if pretrained[0] > 0 else (wh, ww)
    t[:, :, :, 0] /= ph - 1
    t[:, :, :, 1] /= pw - 1
    t *= 8
    return torch.sign(t) * torch.log2(torch.abs(t) + 1.0) / math.log2(8)


class WindowAttentionV2(nn.Module):
    def __init__(self, dim, window_size, num_heads, qkv_bias=True, pretrained_window_size=(0, 0)):
        super().__init__()
        self.dim, self.num_heads = dim, num_heads
        self.window_size = tuple(window_size)
        self.pretrained_window_size = tuple(pretrained_window_size)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones((num_heads, 1, 1))))
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 512, bias=True), nn.ReLU(inplace=True),
                                     nn.Linear(512, num_heads, bias=False))
        wh, ww = self.window_size
        self.register_buffer("relative_coords_table", coords_table(wh, ww, pretrained_window_size))
        self.register_buffer("relative_position_index", index_2d(wh, ww))
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        if qkv_bias:
            self.q_bias = nn.Parameter(torch.zeros(dim))
            self.v_bias = nn.Parameter(torch.zeros(dim))
        else:
            self.q_bias = self.v_bias = None
        self.proj = nn.Linear(dim, dim)

    def bias_table(self):
        """(T, nH) = 16 sigmoid(cpb_mlp(coords))."""
        return 16 * torch.sigmoid(self.cpb_mlp(self.relative_coords_table).view(-1, self.num_heads))

    def forward(self, x, mask=None):
        """x (B_, N, C), mask (nW, N, N) or None -> (B_, N, C)."""
        B_, N, C = x.shape
        nh = self.num_heads
        bias = None
        if self.q_bias is not None:
            bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias), self.v_bias))
        qkv = F.linear(x, self.qkv.weight, bias).reshape(B_, N, 3, nh, C // nh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        attn = attn * torch.clamp(self.logit_scale, max=LOGIT_MAX).exp()
        rpb = self.bias_table()[self.relative_position_index.view(-1)].view(N, N, nh)
        attn = attn + rpb.permute(2, 0, 1).unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(B_ // nw, nw, nh, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, nh, N, N)
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B_, N, C))


class SwinTransformerBlockV2(SwinTransformerBlock):
    """Post-norm block; the window clamp and the mask of swin_twin's block,
    with SwinV2's attention."""

    def __init__(self, dim, input_resolution, num_heads, window_size=7, shift_size=0,
                 mlp_ratio=4., qkv_bias=True, pretrained_window_size=0):
        super().__init__(dim, input_resolution, num_heads, window_size, shift_size, mlp_ratio,
                         qkv_bias)
        ws = self.window_size
        self.attn = WindowAttentionV2(dim, (ws, ws), num_heads, qkv_bias,
                                      (pretrained_window_size, pretrained_window_size))

    def forward(self, x, H, W):
        B, L, C = x.shape
        ws, s = self.window_size, self.shift_size
        Hp, Wp = padded(H, ws), padded(W, ws)
        t = F.pad(x.view(B, H, W, C), (0, 0, 0, Wp - W, 0, Hp - H))
        mask = None
        if s > 0:
            t = torch.roll(t, shifts=(-s, -s), dims=(1, 2))
            mask = self.attn_mask if (H, W) == self.input_resolution else self.make_mask(H, W)
        t = self.attn(window_partition_2d(t, ws, ws), mask=mask)
        t = window_reverse_2d(t, ws, ws, Hp, Wp)
        if s > 0:
            t = torch.roll(t, shifts=(s, s), dims=(1, 2))
        x = x + self.norm1(t[:, :H, :W, :].reshape(B, H * W, C))
        return x + self.norm2(self.mlp(x))


class PatchMergingV2(nn.Module):
    """x0..x3 (odd maps zero-padded) -> Linear(4C, 2C) -> LayerNorm(2C)."""

    def __init__(self, input_resolution, dim):
        super().__init__()
        self.input_resolution = tuple(input_resolution)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(2 * dim)

    def forward(self, x, H, W):
        B, L, C = x.shape
        x = F.pad(x.view(B, H, W, C), (0, 0, 0, W % 2, 0, H % 2))
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]],
                      -1).view(B, -1, 4 * C)
        return self.norm(self.reduction(x))


class BasicLayerV2(BasicLayer):
    """A stage of V2 blocks (shift 0, window // 2, ...), then PatchMergingV2;
    the forward is swin_twin's."""

    def __init__(self, dim, input_resolution, depth, num_heads, window_size, mlp_ratio,
                 qkv_bias, downsample, pretrained_window_size):
        nn.Module.__init__(self)
        self.blocks = nn.ModuleList([
            SwinTransformerBlockV2(dim, input_resolution, num_heads, window_size,
                                   0 if i % 2 == 0 else window_size // 2, mlp_ratio, qkv_bias,
                                   pretrained_window_size)
            for i in range(depth)])
        self.downsample = PatchMergingV2(input_resolution, dim) if downsample else None


class SwinTransformerV2(SwinTransformer):
    """The classification network (the official constructor's arguments);
    the forward is swin_twin's (patch embedding, ape, stages, norm, mean,
    head)."""

    def __init__(self, img_size=256, patch_size=4, in_chans=3, num_classes=1000, embed_dim=96,
                 depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24), window_size=8, mlp_ratio=4.,
                 qkv_bias=True, ape=False, patch_norm=True, pretrained_window_sizes=(0, 0, 0, 0)):
        nn.Module.__init__(self)
        n = len(depths)
        self.ape = ape
        self.num_features = int(embed_dim * 2 ** (n - 1))
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim, norm=patch_norm)
        pr = self.patch_embed.patches_resolution
        if ape:
            self.absolute_pos_embed = nn.Parameter(torch.zeros(1, pr[0] * pr[1], embed_dim))
        self.layers = nn.ModuleList([
            BasicLayerV2(int(embed_dim * 2 ** i), (pr[0] // 2 ** i, pr[1] // 2 ** i), depths[i],
                         num_heads[i], window_size, mlp_ratio, qkv_bias, i < n - 1,
                         pretrained_window_sizes[i])
            for i in range(n)])
        self.norm = nn.LayerNorm(self.num_features)
        self.avgpool = nn.AdaptiveAvgPool1d(1)
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()


# --------------------------------------------------------------------------
# metadata (docs/reference.md, section 2)
# --------------------------------------------------------------------------

SWINV2_DEFAULTS = dict(img_size=256, patch_size=4, in_chans=3, num_classes=1000, embed_dim=96,
                       depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=8,
                       mlp_ratio=4.0, qkv_bias=True, ape=False, patch_norm=True,
                       pretrained_window_sizes=[0, 0, 0, 0])
SWINV2_KEYS = list(SWINV2_DEFAULTS)
# torchvision.models.swin_v2_t(): 256 x 256 images, window 8
SWIN_V2_T = dict(SWINV2_DEFAULTS)
LAYER_DEFAULTS = dict(dim=96, window_size=[8, 8], num_heads=3, qkv_bias=True,
                      pretrained_window_size=[0, 0])
LAYER_KEYS = list(LAYER_DEFAULTS)


def build_swinv2(hp):
    hp = dict(hp)
    if len(hp["pretrained_window_sizes"]) != len(hp["depths"]):
        hp["pretrained_window_sizes"] = [0] * len(hp["depths"])
    return SwinTransformerV2(**hp), metadata("swinv2", hp, SWINV2_KEYS)


def build_layer(hp):
    return (WindowAttentionV2(hp["dim"], hp["window_size"], hp["num_heads"], hp["qkv_bias"],
                              hp["pretrained_window_size"]),
            metadata("swinv2_window_attention", hp, LAYER_KEYS))


def build_torchvision_swinv2(hp):
    """torchvision's SwinTransformer with v2 blocks and merging (swin_v2_t's
    hyperparameters by default): its names (features.*) and semantics."""
    from torchvision.models.swin_transformer import (PatchMergingV2 as TvMerge, SwinTransformer,
                                                     SwinTransformerBlockV2 as TvBlock)
    if hp["in_chans"] != 3 or hp["ape"] or not hp["patch_norm"] or not hp["qkv_bias"] \
            or any(hp["pretrained_window_sizes"]) or hp["num_classes"] < 1:
        raise ValueError("torchvision's SwinTransformer V2 has in_chans 3, no ape, patch_norm, "
                         "qkv_bias, no pretrained windows and a head")
    ws = hp["window_size"]
    ws = [ws, ws] if isinstance(ws, int) else list(ws)
    m = SwinTransformer(patch_size=[hp["patch_size"]] * 2, embed_dim=hp["embed_dim"],
                        depths=list(hp["depths"]), num_heads=list(hp["num_heads"]),
                        window_size=ws, mlp_ratio=hp["mlp_ratio"], stochastic_depth_prob=0.0,
                        num_classes=hp["num_classes"], block=TvBlock, downsample_layer=TvMerge)
    hp = dict(hp)
    hp.pop("pretrained_window_sizes")
    return m, metadata("swinv2", hp, SWINV2_KEYS)


def example_layer(m, hp, batch, size):
    return torch.randn(batch, hp["window_size"][0] * hp["window_size"][1], hp["dim"])


# --------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------

def fixture_init(module, seed, clamp_head=False):
    """export.fixture_init's larger values for every parameter, with the
    logit scales near log(10) and, with clamp_head, one head of each layer
    above the clamp (its gradient is then zero; a scale of 100 makes the
    softmax nearly one-hot). Without it (the networks' fixtures) the
    attention is kept soft: scales near 4, a bias of a few units. Through a
    few post-norm blocks a peaked softmax amplifies float32 rounding beyond
    the 1e-4 the tests ask, in PyTorch as much as here (measured against
    float64)."""
    import export
    export.fixture_init(module, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("logit_scale"):
                centre = math.log(10) if clamp_head else math.log(4)
                p.copy_(centre + torch.randn(p.shape, generator=g) * 0.5)
                if clamp_head and p.shape[0] > 1:
                    p[-1] = 4.8
            elif name.endswith("cpb_mlp.2.weight") and not clamp_head:
                p.mul_(0.3)
            elif name.endswith("cpb_mlp.0.bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)


def grads_of(module, x, dy, names, mask=None):
    """y, grad.x and grad.NAME (NAME under the file's names) by autograd."""
    x = x.clone().requires_grad_(True)
    for p in module.parameters():
        p.grad = None
    y = module(x, mask) if mask is not None else module(x)
    (y * dy).sum().backward()
    out = {"y": y.detach(), "grad.x": x.grad, "dy": dy}
    sd = dict(module.named_parameters())
    for n in names:
        g = sd[n].grad
        out["grad." + n] = g if g is not None else torch.zeros_like(sd[n])
    return out


LAYER_CASES = [
    # name, hyperparameters, B_, shift (None: no mask)
    ("v2_attn_w4", dict(dim=16, window_size=[4, 4], num_heads=2), 3, None),
    ("v2_attn_shift_pre8", dict(dim=8, window_size=[4, 4], num_heads=2,
                                pretrained_window_size=[8, 8]), 4, 2),
    ("v2_attn_nobias_3x5", dict(dim=12, window_size=[3, 5], num_heads=3, qkv_bias=False), 4,
     None),
]


def net(**kw):
    d = dict(SWINV2_DEFAULTS)
    d.update(img_size=16, patch_size=2, embed_dim=8, depths=[2, 2], num_heads=[2, 4],
             window_size=4, num_classes=5, pretrained_window_sizes=[0, 0])
    d.update(kw)
    return d


NET_CASES = [
    # name, kind (official | torchvision), hyperparameters, input (B, H, W)
    # shifted windows, patch merging, the clamp at stage 1, ape
    ("v2_net_official", "official", net(depths=[2, 1], ape=True), (1, 16, 16)),
    # pretrained windows, no qkv bias, a map padded to the window
    ("v2_net_pre_pad", "official",
     net(pretrained_window_sizes=[6, 4], depths=[1, 1], qkv_bias=False), (1, 20, 18)),
    # torchvision's names and semantics: cropping conv, padding, the shift
    # dropped on a map of one window
    ("v2_net_tv_pad", "torchvision", net(depths=[2, 1]), (2, 22, 20)),
]


def write_layer_case(name, hp, b_, shift, out_dir):
    seed = seed_of(name)
    torch.manual_seed(seed)
    h = dict(LAYER_DEFAULTS)
    h.update(hp)
    m, meta = build_layer(h)
    fixture_init(m, seed, clamp_head=True)
    wh, ww = h["window_size"]
    x = torch.randn(b_, wh * ww, h["dim"])
    dy = torch.randn(b_, wh * ww, h["dim"])
    inputs = {"x": x, "dy": dy}
    mask = None
    if shift is not None:   # the windows of a (2wh x 2ww) map shifted by `shift`
        mask = shift_mask_2d(2 * wh, 2 * ww, wh, ww, shift, shift)
        inputs["mask"] = mask
    names = [n for n, _ in m.named_parameters()]
    g = grads_of(m, x, dy, names, mask)
    write_case(out_dir, name, model=state_dict_f32(m), meta=meta, input=inputs,
               grad={k: v.contiguous() for k, v in g.items() if k != "dy"})  # dy: in the input


def write_net_case(name, kind, hp, inp, out_dir):
    seed = seed_of(name)
    torch.manual_seed(seed)
    if kind == "official":
        m, meta = build_swinv2(hp)
    else:
        m, meta = build_torchvision_swinv2(hp)
    fixture_init(m, seed)
    B, H, W = inp
    x = torch.randn(B, hp["in_chans"], H, W)
    with torch.no_grad():
        y = m(x)
    dy = torch.randn(y.shape)
    names = [n for n, _ in m.named_parameters()]
    g = grads_of(m, x, dy, names)
    write_case(out_dir, name, model=state_dict_f32(m), meta=meta, input={"x": x},
               grad={k: v.contiguous() for k, v in g.items()})


def write_fixtures(out_dir):
    """The swinv2 family of tools/fixtures.py: every SwinV2 fixture and the
    two case lists; returns the case count."""
    for name, hp, b_, shift in LAYER_CASES:
        write_layer_case(name, hp, b_, shift, out_dir)
    for name, kind, hp, inp in NET_CASES:
        write_net_case(name, kind, hp, inp, out_dir)
    write_list(out_dir, "swinv2_layers.txt", [c[0] for c in LAYER_CASES])
    write_list(out_dir, "swinv2_grads.txt", [c[0] for c in NET_CASES])
    return len(LAYER_CASES) + len(NET_CASES)
