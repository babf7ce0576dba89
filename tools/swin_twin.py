"""An official-style Swin Transformer in PyTorch: the twin of src/swin.c.

Written from the design of microsoft/Swin-Transformer
(models/swin_transformer.py): the same modules, constructor arguments,
state_dict names and numbers, with two extensions that the official
classification code leaves out (it asserts instead) and the Swin detection
backbone has:

  - a feature map that is not a multiple of the window is zero-padded at
    the bottom/right after norm1 and before the cyclic shift; the shifted-
    window mask is built on the padded map; the padding is cropped after the
    reverse shift (docs/reference.md, section 1.3);
  - an image that is not a multiple of the patch size is zero-padded before
    the patch embedding, and PatchMerging pads an odd map.

The resolution comes from the input: every module takes (x, H, W), and a
block keeps the window and shift its constructor chose (the official clamp
on input_resolution: if min(H, W) <= window_size the window is min(H, W)
and the shift is 0), so a different input size only changes the padding
and the mask. With the constructor's resolution and multiples of the window
this is exactly the official model.

The attention is the official WindowAttention (tools/common.py),
changed only to return (y, attn).

Run with Debian's python3-torch (/usr/bin/python3).
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Mlp, WindowAttention, padded, shift_mask_2d,  # noqa: E402
                    window_partition_2d, window_reverse_2d)


def clamp_window(resolution, window_size, shift_size):
    """The official block's rule: a feature map no larger than the window is
    one window, without shift."""
    if min(resolution) <= window_size:
        return min(resolution), 0
    return window_size, shift_size


class SwinTransformerBlock(nn.Module):
    """Pre-norm block: x + WMSA(norm1(x)), then x + MLP(norm2(x))."""

    def __init__(self, dim, input_resolution, num_heads, window_size=7, shift_size=0,
                 mlp_ratio=4., qkv_bias=True, qk_scale=None):
        super().__init__()
        self.dim = dim
        self.input_resolution = tuple(input_resolution)
        self.num_heads = num_heads
        self.mlp_ratio = mlp_ratio
        self.window_size, self.shift_size = clamp_window(self.input_resolution, window_size,
                                                         shift_size)
        assert 0 <= self.shift_size < self.window_size, "shift_size must be in [0, window_size)"
        ws = self.window_size
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window_size=(ws, ws), num_heads=num_heads,
                                    qkv_bias=qkv_bias, qk_scale=qk_scale)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        H, W = self.input_resolution
        self.register_buffer("attn_mask", self.make_mask(H, W) if self.shift_size > 0 else None)

    def make_mask(self, H, W):
        ws, s = self.window_size, self.shift_size
        return shift_mask_2d(padded(H, ws), padded(W, ws), ws, ws, s, s)

    def forward(self, x, H=None, W=None):
        """x (B, H*W, C) -> (B, H*W, C)."""
        if H is None:
            H, W = self.input_resolution
        B, L, C = x.shape
        assert L == H * W, "input feature has wrong size"
        ws, s = self.window_size, self.shift_size
        Hp, Wp = padded(H, ws), padded(W, ws)

        shortcut = x
        x = self.norm1(x).view(B, H, W, C)
        x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))
        if s > 0:
            x = torch.roll(x, shifts=(-s, -s), dims=(1, 2))
            mask = self.attn_mask if (H, W) == self.input_resolution else self.make_mask(H, W)
        else:
            mask = None
        windows = window_partition_2d(x, ws, ws)  # nW*B, ws*ws, C
        windows, _ = self.attn(windows, mask=mask)
        x = window_reverse_2d(windows, ws, ws, Hp, Wp)
        if s > 0:
            x = torch.roll(x, shifts=(s, s), dims=(1, 2))
        x = x[:, :H, :W, :].reshape(B, H * W, C)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """2x2 neighbours -> 4C (order x0, x1, x2, x3) -> LayerNorm -> Linear(4C, 2C)."""

    def __init__(self, input_resolution, dim):
        super().__init__()
        self.input_resolution = tuple(input_resolution)
        self.dim = dim
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x, H, W):
        B, L, C = x.shape
        assert L == H * W, "input feature has wrong size"
        x = x.view(B, H, W, C)
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))  # odd sizes: zero row / column
        x0 = x[:, 0::2, 0::2, :]
        x1 = x[:, 1::2, 0::2, :]
        x2 = x[:, 0::2, 1::2, :]
        x3 = x[:, 1::2, 1::2, :]
        x = torch.cat([x0, x1, x2, x3], -1).view(B, -1, 4 * C)
        return self.reduction(self.norm(x))


class PatchEmbed(nn.Module):
    """Conv2d(kernel = stride = patch_size), optional LayerNorm; with kernel
    (relattn's patch_kernel, patch_size + an even number) an overlapping
    embedding: Conv2d(kernel, stride patch_size, padding (kernel - patch) / 2)."""

    def __init__(self, img_size=224, patch_size=4, in_chans=3, embed_dim=96, norm=True,
                 kernel=None):
        super().__init__()
        self.img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        self.patch_size = patch_size
        self.patches_resolution = [self.img_size[0] // patch_size, self.img_size[1] // patch_size]
        self.num_patches = self.patches_resolution[0] * self.patches_resolution[1]
        k = kernel or patch_size
        assert k >= patch_size and (k - patch_size) % 2 == 0
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=k, stride=patch_size,
                              padding=(k - patch_size) // 2)
        self.norm = nn.LayerNorm(embed_dim) if norm else None

    def forward(self, x):
        """x (B, Cin, H, W) -> (B, Hp*Wp, E), Hp, Wp."""
        _, _, H, W = x.shape
        p = self.patch_size
        x = F.pad(x, (0, (p - W % p) % p, 0, (p - H % p) % p))
        x = self.proj(x)
        Hp, Wp = x.shape[2], x.shape[3]
        x = x.flatten(2).transpose(1, 2)
        if self.norm is not None:
            x = self.norm(x)
        return x, Hp, Wp


class BasicLayer(nn.Module):
    """One stage: depth blocks alternating shift 0 and window_size // 2, then
    an optional PatchMerging."""

    def __init__(self, dim, input_resolution, depth, num_heads, window_size, mlp_ratio=4.,
                 qkv_bias=True, qk_scale=None, downsample=False):
        super().__init__()
        self.blocks = nn.ModuleList([
            SwinTransformerBlock(dim, input_resolution, num_heads, window_size=window_size,
                                 shift_size=0 if i % 2 == 0 else window_size // 2,
                                 mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_scale=qk_scale)
            for i in range(depth)])
        self.downsample = PatchMerging(input_resolution, dim) if downsample else None

    def forward(self, x, H, W):
        for blk in self.blocks:
            x = blk(x, H, W)
        if self.downsample is not None:
            x = self.downsample(x, H, W)
            H, W = (H + 1) // 2, (W + 1) // 2
        return x, H, W


class SwinTransformer(nn.Module):
    """The classification network (official constructor arguments)."""

    def __init__(self, img_size=224, patch_size=4, in_chans=3, num_classes=1000, embed_dim=96,
                 depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24), window_size=7, mlp_ratio=4.,
                 qkv_bias=True, qk_scale=None, ape=False, patch_norm=True, patch_kernel=None):
        super().__init__()
        self.num_classes = num_classes
        self.num_layers = len(depths)
        self.ape = ape
        self.num_features = int(embed_dim * 2 ** (self.num_layers - 1))
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim, norm=patch_norm,
                                      kernel=patch_kernel)
        pr = self.patch_embed.patches_resolution
        if ape:
            self.absolute_pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches,
                                                               embed_dim))
            nn.init.trunc_normal_(self.absolute_pos_embed, std=.02)
        self.layers = nn.ModuleList([
            BasicLayer(int(embed_dim * 2 ** i), (pr[0] // 2 ** i, pr[1] // 2 ** i), depths[i],
                       num_heads[i], window_size, mlp_ratio, qkv_bias, qk_scale,
                       downsample=i < self.num_layers - 1)
            for i in range(self.num_layers)])
        self.norm = nn.LayerNorm(self.num_features)
        self.avgpool = nn.AdaptiveAvgPool1d(1)
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def forward_features(self, x):
        x, H, W = self.patch_embed(x)
        if self.ape:
            x = x + self.absolute_pos_embed
        for layer in self.layers:
            x, H, W = layer(x, H, W)
        x = self.norm(x)  # B L C
        return torch.flatten(self.avgpool(x.transpose(1, 2)), 1)

    def forward(self, x):
        return self.head(self.forward_features(x))
