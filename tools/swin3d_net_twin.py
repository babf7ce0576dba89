"""swin3d_net_twin.py - the PyTorch twin of relattn's swin3d network: the
Video Swin classifier as torchvision (>= 0.15) builds it
(torchvision/models/video/swin_transformer.py, SwinTransformer3d), written
here from that architecture in evaluation mode, with its parameter and
buffer names, so that Swin3d(...).state_dict() has the keys and shapes of
torchvision.models.video.swin3d_t(...).state_dict() (Debian's torchvision
0.14 predates the module). Also the mapping to and from the official Video
Swin / mmaction names (backbone.layers.i.blocks.j..., mlp.fc1 / mlp.fc2,
backbone.layers.i.downsample, cls_head.fc_cls), as torchvision's port of
those weights maps them.

    from swin3d_net_twin import Swin3d, to_official, from_official
    m = Swin3d(patch=(2, 4, 4), embed=16, depths=(1, 2), heads=(2, 4),
               window=(2, 3, 3), classes=5)
    y = m(x)          # x (B, C_in, T, H, W)
    maps = m.stages(x)  # each stage's output (B, T', H', W', C)"""
import torch
import torch.nn.functional as F
from torch import nn


def _pad_end(x, sizes, mult):
    """x zero-padded at the end of its last len(sizes) axes to multiples."""
    pads = []
    for s, m in zip(reversed(sizes), reversed(mult)):
        pads += [0, (m - s % m) % m]
    return F.pad(x, pads)


def _region_mask(padded, window, shift):
    """Regions of the shifted map (labels differ across the shift's seams),
    as (nW, N, N): 0 within a region, -100 across."""
    lab = torch.zeros(padded)
    cuts = []
    for a in range(3):   # the slices (0, -w), (-w, -s), (-s, None) of the source:
        n, w, s = padded[a], window[a], shift[a]   # with s = 0 the last is the whole axis
        cuts.append([(0, n - w), (n - w, n - s), (n - s, n)] if s else [(0, n)])
    k = 0
    for d0, d1 in cuts[0]:
        for h0, h1 in cuts[1]:
            for w0, w1 in cuts[2]:
                lab[d0:d1, h0:h1, w0:w1] = k
                k += 1
    nw = [padded[a] // window[a] for a in range(3)]
    lab = lab.view(nw[0], window[0], nw[1], window[1], nw[2], window[2])
    lab = lab.permute(0, 2, 4, 1, 3, 5).reshape(-1, window[0] * window[1] * window[2])
    diff = lab[:, None, :] - lab[:, :, None]
    return torch.where(diff != 0, torch.tensor(-100.0), torch.tensor(0.0))


class WindowAttention3d(nn.Module):
    def __init__(self, dim, window, shift, heads):
        super().__init__()
        self.window, self.shift, self.heads = list(window), list(shift), heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        wd, wh, ww = window
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * wd - 1) * (2 * wh - 1) * (2 * ww - 1), heads))
        c = torch.stack(torch.meshgrid(torch.arange(wd), torch.arange(wh), torch.arange(ww),
                                       indexing="ij")).flatten(1)
        r = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0)
        idx = ((r[..., 0] + wd - 1) * (2 * wh - 1) * (2 * ww - 1)
               + (r[..., 1] + wh - 1) * (2 * ww - 1) + (r[..., 2] + ww - 1))
        self.register_buffer("relative_position_index", idx)

    def forward(self, x):
        b, t, h, w, c = x.shape
        win, sh = list(self.window), list(self.shift)
        for a, s in enumerate((t, h, w)):   # the window clamped to the input
            if s <= win[a]:
                win[a], sh[a] = s, 0
        n = win[0] * win[1] * win[2]
        bias = self.relative_position_bias_table[self.relative_position_index[:n, :n].flatten()]
        bias = bias.view(n, n, -1).permute(2, 0, 1)
        x = _pad_end(x.permute(0, 4, 1, 2, 3), (t, h, w), win).permute(0, 2, 3, 4, 1)
        pt, ph, pw = x.shape[1:4]
        shifted = sum(sh) > 0
        if shifted:
            x = torch.roll(x, shifts=(-sh[0], -sh[1], -sh[2]), dims=(1, 2, 3))
        g = (pt // win[0], ph // win[1], pw // win[2])
        x = x.view(b, g[0], win[0], g[1], win[1], g[2], win[2], c)
        x = x.permute(0, 1, 3, 5, 2, 4, 6, 7).reshape(-1, n, c)
        hd = c // self.heads
        qkv = self.qkv(x).reshape(x.shape[0], n, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * hd ** -0.5, qkv[1], qkv[2]
        a = q @ k.transpose(-2, -1) + bias.unsqueeze(0)
        if shifted:
            nw = g[0] * g[1] * g[2]
            mask = _region_mask((pt, ph, pw), win, sh)
            mask = mask.to(a.dtype)   # as torchvision's, made in x's dtype (bfloat16 runs)
            a = (a.view(b, nw, self.heads, n, n) + mask[None, :, None]).view(-1, self.heads, n, n)
        x = (a.softmax(-1) @ v).transpose(1, 2).reshape(-1, n, c)
        x = self.proj(x)
        x = x.view(b, g[0], g[1], g[2], win[0], win[1], win[2], c)
        x = x.permute(0, 1, 4, 2, 5, 3, 6, 7).reshape(b, pt, ph, pw, c)
        if shifted:
            x = torch.roll(x, shifts=(sh[0], sh[1], sh[2]), dims=(1, 2, 3))
        return x[:, :t, :h, :w].contiguous()


class Block(nn.Module):
    def __init__(self, dim, heads, window, shift, mlp_ratio):
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention3d(dim, window, shift, heads)
        self.norm2 = nn.LayerNorm(dim)
        # torchvision's MLP: Linear, GELU, Dropout, Linear, Dropout
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(0.0),
                                 nn.Linear(hidden, dim), nn.Dropout(0.0))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """2x2 neighbours of each frame (x0..x3: (0,0), (1,0), (0,1), (1,1)),
    odd sides padded at the end, LayerNorm(4C), Linear(4C, 2C, no bias)."""

    def __init__(self, dim):
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x):
        h, w = x.shape[-3:-1]
        x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        x = torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :],
                       x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)
        return self.reduction(self.norm(x))


class PatchEmbed3d(nn.Module):
    def __init__(self, patch, in_chans, embed, norm=True):
        super().__init__()
        self.patch = tuple(patch)
        self.proj = nn.Conv3d(in_chans, embed, kernel_size=self.patch, stride=self.patch)
        self.norm = nn.LayerNorm(embed) if norm else nn.Identity()

    def forward(self, x):
        x = _pad_end(x, x.shape[2:], self.patch)
        return self.norm(self.proj(x).permute(0, 2, 3, 4, 1))


class Swin3d(nn.Module):
    def __init__(self, patch=(2, 4, 4), embed=96, depths=(2, 2, 6, 2), heads=(3, 6, 12, 24),
                 window=(8, 7, 7), mlp_ratio=4.0, classes=400, in_chans=3):
        super().__init__()
        self.patch_embed = PatchEmbed3d(patch, in_chans, embed)
        layers = []
        for i, d in enumerate(depths):
            dim = embed * 2 ** i
            layers.append(nn.Sequential(*[
                Block(dim, heads[i], window, [0 if j % 2 == 0 else w // 2 for w in window],
                      mlp_ratio) for j in range(d)]))
            if i < len(depths) - 1:
                layers.append(PatchMerging(dim))
        self.features = nn.Sequential(*layers)
        self.num_features = embed * 2 ** (len(depths) - 1)
        self.norm = nn.LayerNorm(self.num_features)
        self.head = nn.Linear(self.num_features, classes)

    def forward(self, x):
        x = self.norm(self.features(self.patch_embed(x)))
        return self.head(x.mean(dim=(1, 2, 3)))

    def stages(self, x):
        """Each stage's output (B, T', H', W', C), features[2s]'s, before the
        next merging and the final norm: the feature maps relattn hands out."""
        maps, t = [], self.patch_embed(x)
        for i, child in enumerate(self.features):
            t = child(t)
            maps += [t] if i % 2 == 0 else []
        return maps

    def randomize(self, seed, scale=0.5):
        """Every parameter random (norms around 1), the buffers kept."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                v = torch.randn(p.shape, generator=g) * scale
                if "norm" in name and name.endswith("weight"):
                    v = 1.0 + 0.2 * v
                p.copy_(v if p.dim() < 2 else v / max(1.0, p.shape[-1] ** 0.5 / 2))
        return self


def to_official(sd, depths):
    """torchvision names -> the official Video Swin checkpoint's (flat;
    nest it as {'state_dict': ...})."""
    out = {}
    for k, v in sd.items():
        p = k.split(".")
        if p[0] == "features":
            i = int(p[1])
            if i % 2 == 0:
                rest = ".".join(p[3:]).replace("mlp.0.", "mlp.fc1.").replace("mlp.3.", "mlp.fc2.")
                k2 = "backbone.layers.%d.blocks.%s.%s" % (i // 2, p[2], rest)
            else:
                k2 = "backbone.layers.%d.downsample.%s" % (i // 2, ".".join(p[2:]))
        elif p[0] == "head":
            k2 = "cls_head.fc_cls." + ".".join(p[1:])
        else:
            k2 = "backbone." + k
        out[k2] = v
    return out


def from_official(sd):
    """The official names (backbone. optional) -> torchvision's."""
    out = {}
    for k, v in sd.items():
        if k.startswith("cls_head.fc_cls."):
            out["head." + k[len("cls_head.fc_cls."):]] = v
            continue
        k = k[len("backbone."):] if k.startswith("backbone.") else k
        p = k.split(".")
        if p[0] == "layers" and p[2] == "blocks":
            rest = ".".join(p[4:]).replace("mlp.fc1.", "mlp.0.").replace("mlp.fc2.", "mlp.3.")
            k = "features.%d.%s.%s" % (2 * int(p[1]), p[3], rest)
        elif p[0] == "layers" and p[2] == "downsample":
            k = "features.%d.%s" % (2 * int(p[1]) + 1, ".".join(p[3:]))
        out[k] = v
    return out
