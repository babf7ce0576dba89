"""A PyTorch twin of timm's VisionTransformer, and the exporters of vit
model files (arch "vit", docs/reference.md, section 2).

Run with Debian's python3-torch (only /usr/bin/python3 has it). timm itself
is not needed: VisionTransformer below has timm's constructor arguments,
its state_dict() names and its inference semantics (timm/models/
vision_transformer.py: pre-norm blocks, LayerNorm eps 1e-6, exact GELU,
class token first, pos_embed added after the concatenation, final norm,
pooling, fc_norm, head). Dropout and drop-path are left out: the twin is an
inference reference.

    import vit_twin
    m = vit_twin.VisionTransformer(img_size=32, patch_size=8, embed_dim=32,
                                   depth=2, num_heads=2, num_classes=10)
    vit_twin.export_vit(m, m.hparams, "vit.model.safetensors", "timm")

    tv = vit_twin.torchvision_vit("vit_b_16")          # random weights
    vit_twin.export_vit(tv, vit_twin.torchvision_hparams(tv), "b16.safetensors",
                        "torchvision")

export_vit writes the state_dict with its own names (timm's or
torchvision's: relattn detects the scheme from the names) and the metadata of
docs/reference.md, section 2: arch=vit, the constructor arguments as strings (integers in
decimal, booleans true/false, tuples "a,b", floats as Python's repr, an
argument that is None is left out).

From the command line:
    /usr/bin/python3 tools/vit_twin.py --torchvision vit_b_16 -o OUT.safetensors
        [--seed N] [--input IN.safetensors --expected EXP.safetensors
         --batch 1 --image-size 224]
writes a torchvision model with random weights (its zero-initialised head
and class token re-drawn, so that the logits say something) and, with
--input/--expected, an input x and the torchvision logits y.
"""

import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from common import Mlp, meta_value  # noqa: E402

LN_EPS = 1e-6  # timm's and torchvision's ViT LayerNorm


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


# --------------------------------------------------------------------------
# The twin
# --------------------------------------------------------------------------

class PatchEmbed(nn.Module):
    """Conv2d(kernel = stride = patch) then flatten to tokens (B, L, C)."""

    def __init__(self, img_size, patch_size, in_chans, embed_dim, bias=True,
                 dynamic_img_size=False, dynamic_img_pad=False):
        super().__init__()
        self.img_size = _pair(img_size)
        self.patch_size = _pair(patch_size)
        self.dynamic_img_size = dynamic_img_size
        self.dynamic_img_pad = dynamic_img_pad
        ceil = dynamic_img_pad
        self.grid_size = tuple(
            (s + p - 1) // p if ceil else s // p
            for s, p in zip(self.img_size, self.patch_size))
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=self.patch_size,
                              stride=self.patch_size, bias=bias)

    def forward(self, x):
        _, _, h, w = x.shape
        ph, pw = self.patch_size
        if not self.dynamic_img_size:
            assert (h, w) == self.img_size, \
                "input %dx%d differs from img_size %s" % (h, w, self.img_size)
        elif not self.dynamic_img_pad:
            assert h % ph == 0 and w % pw == 0, "input not a multiple of the patch"
        if self.dynamic_img_pad:
            x = F.pad(x, (0, (pw - w % pw) % pw, 0, (ph - h % ph) % ph))
        x = self.proj(x)                       # (B, C, gh, gw)
        grid = x.shape[-2:]
        return x.flatten(2).transpose(1, 2), grid


class Attention(nn.Module):
    """timm's Attention: qkv Linear(C, 3C) (rows q, k, v), softmax, proj."""

    def __init__(self, dim, num_heads, qkv_bias=False, proj_bias=True):
        super().__init__()
        assert dim % num_heads == 0
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)     # (B, nH, N, hd)
        a = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        out = (a @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(out)


class LayerScale(nn.Module):
    def __init__(self, dim, init_values):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio, qkv_bias, proj_bias,
                 init_values):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=LN_EPS)
        self.attn = Attention(dim, num_heads, qkv_bias, proj_bias)
        self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.mlp = Mlp(dim, int(dim * mlp_ratio) or dim, bias=proj_bias)
        self.ls2 = LayerScale(dim, init_values) if init_values else nn.Identity()

    def forward(self, x):
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


def resample_abs_pos_embed(posemb, new_size, old_size, num_prefix_tokens):
    """timm's resample_abs_pos_embed (bicubic, antialias=True), including its
    shortcut: a square new grid with as many tokens is returned unchanged."""
    if (new_size[0] * new_size[1] + num_prefix_tokens == posemb.shape[1]
            and new_size[0] == new_size[1]):
        return posemb
    prefix, grid = posemb[:, :num_prefix_tokens], posemb[:, num_prefix_tokens:]
    c = grid.shape[-1]
    grid = grid.reshape(1, old_size[0], old_size[1], c).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=tuple(new_size), mode="bicubic",
                         antialias=True)
    grid = grid.permute(0, 2, 3, 1).reshape(1, -1, c)
    return torch.cat([prefix, grid], dim=1)


class VisionTransformer(nn.Module):
    """timm's VisionTransformer, the options relattn computes. Arguments and
    defaults are timm's; self.hparams holds them for the export."""

    def __init__(self, img_size=224, patch_size=16, in_chans=3,
                 num_classes=1000, global_pool="token", embed_dim=768,
                 depth=12, num_heads=12, mlp_ratio=4.0, qkv_bias=True,
                 proj_bias=True, init_values=None, class_token=True,
                 pos_embed="learn", no_embed_class=False, reg_tokens=0,
                 pre_norm=False, final_norm=True, fc_norm=None,
                 pool_include_prefix=False, dynamic_img_size=False,
                 dynamic_img_pad=False):
        super().__init__()
        assert global_pool in ("", "avg", "avgmax", "max", "token")
        assert class_token or global_pool != "token"
        assert pos_embed in ("", "none", "learn")
        self.hparams = dict(
            img_size=img_size, patch_size=patch_size, in_chans=in_chans,
            num_classes=num_classes, global_pool=global_pool,
            embed_dim=embed_dim, depth=depth, num_heads=num_heads,
            mlp_ratio=float(mlp_ratio), qkv_bias=qkv_bias, proj_bias=proj_bias,
            init_values=init_values, class_token=class_token,
            pos_embed=pos_embed, no_embed_class=no_embed_class,
            reg_tokens=reg_tokens, pre_norm=pre_norm, final_norm=final_norm,
            fc_norm=fc_norm, pool_include_prefix=pool_include_prefix,
            dynamic_img_size=dynamic_img_size, dynamic_img_pad=dynamic_img_pad)
        use_fc_norm = (global_pool in ("avg", "avgmax", "max")
                       if fc_norm is None else fc_norm)
        self.global_pool = global_pool
        self.num_prefix_tokens = (1 if class_token else 0) + reg_tokens
        self.no_embed_class = no_embed_class
        self.pool_include_prefix = pool_include_prefix
        self.dynamic_img_size = dynamic_img_size

        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim,
                                      bias=not pre_norm,
                                      dynamic_img_size=dynamic_img_size,
                                      dynamic_img_pad=dynamic_img_pad)
        n = self.patch_embed.num_patches
        self.cls_token = (nn.Parameter(torch.zeros(1, 1, embed_dim))
                          if class_token else None)
        self.reg_token = (nn.Parameter(torch.zeros(1, reg_tokens, embed_dim))
                          if reg_tokens else None)
        embed_len = n if no_embed_class else n + self.num_prefix_tokens
        self.pos_embed = (nn.Parameter(torch.zeros(1, embed_len, embed_dim))
                          if pos_embed == "learn" else None)
        self.norm_pre = (nn.LayerNorm(embed_dim, eps=LN_EPS) if pre_norm
                         else nn.Identity())
        self.blocks = nn.Sequential(*[
            Block(embed_dim, num_heads, mlp_ratio, qkv_bias, proj_bias,
                  init_values) for _ in range(depth)])
        self.norm = (nn.LayerNorm(embed_dim, eps=LN_EPS)
                     if final_norm and not use_fc_norm else nn.Identity())
        self.fc_norm = (nn.LayerNorm(embed_dim, eps=LN_EPS)
                        if final_norm and use_fc_norm else nn.Identity())
        self.head = (nn.Linear(embed_dim, num_classes) if num_classes > 0
                     else nn.Identity())

    def _pos_embed(self, x, grid):
        b = x.shape[0]
        prefix = []
        if self.cls_token is not None:
            prefix.append(self.cls_token.expand(b, -1, -1))
        if self.reg_token is not None:
            prefix.append(self.reg_token.expand(b, -1, -1))
        pos = self.pos_embed
        if pos is None:
            return torch.cat(prefix + [x], dim=1)
        if self.dynamic_img_size:
            pos = resample_abs_pos_embed(
                pos, list(grid), list(self.patch_embed.grid_size),
                0 if self.no_embed_class else self.num_prefix_tokens)
        if self.no_embed_class:
            return torch.cat(prefix + [x + pos], dim=1)
        return torch.cat(prefix + [x], dim=1) + pos

    def forward_features(self, x):
        x, grid = self.patch_embed(x)
        x = self._pos_embed(x, grid)
        x = self.norm_pre(x)
        x = self.blocks(x)
        return self.norm(x)

    def pool(self, x):
        if self.global_pool == "":
            return x
        if self.global_pool == "token":
            return x[:, 0]
        if not self.pool_include_prefix:
            x = x[:, self.num_prefix_tokens:]
        if self.global_pool == "avg":
            return x.mean(dim=1)
        if self.global_pool == "max":
            return x.amax(dim=1)
        return 0.5 * (x.amax(dim=1) + x.mean(dim=1))    # avgmax

    def forward(self, x):
        x = self.pool(self.forward_features(x))
        return self.head(self.fc_norm(x))


def randomize_(model, seed, scale=1.0):
    """Non-trivial weights for tests: Linear/Conv weights N(0, 1/fan_in),
    biases, LayerNorm shifts, tokens and embeddings of order 0.1-0.5, norm
    and LayerScale gains around 1 (timm's init would make the blocks nearly
    the identity and the head zero). Works on timm-named and torchvision
    models alike."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and not any(k in name for k in (
                    "token", "pos_embed", "pos_embedding")):
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) * scale / math.sqrt(fan_in))
            elif name.endswith(".gamma") or (p.dim() == 1 and name.endswith(
                    ".weight")):   # LayerScale and LayerNorm gains
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "token" in name or "pos_emb" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:          # biases
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model


# --------------------------------------------------------------------------
# torchvision
# --------------------------------------------------------------------------

def torchvision_vit(name="vit_b_16", seed=0, **kwargs):
    """A torchvision ViT with random weights (nothing downloaded). name is a
    torchvision builder (vit_b_16, ...) or "custom" with VisionTransformer's
    keyword arguments. The zero-initialised head and class token are drawn
    again (N(0, 0.02) and N(0, 0.5)) so that the logits are not all zero."""
    import torchvision.models as tvm
    from torchvision.models.vision_transformer import VisionTransformer as TV

    torch.manual_seed(seed)
    model = TV(**kwargs) if name == "custom" else getattr(tvm, name)(weights=None, **kwargs)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        model.heads.head.weight.copy_(
            0.02 * torch.randn(model.heads.head.weight.shape, generator=g))
        model.heads.head.bias.copy_(
            0.02 * torch.randn(model.heads.head.bias.shape, generator=g))
        model.class_token.copy_(0.5 * torch.randn(model.class_token.shape, generator=g))
    return model.eval()


def torchvision_hparams(model):
    """The hyperparameters (docs/reference.md, section 2) of a torchvision VisionTransformer."""
    if not isinstance(model.conv_proj, nn.Conv2d):
        raise ValueError("a conv stem (conv_stem_configs) has no vit equivalent")
    if model.representation_size is not None:
        raise ValueError("representation_size (heads.pre_logits) has no vit equivalent")
    hidden, mlp = model.hidden_dim, model.mlp_dim
    ratio = mlp / hidden
    if int(hidden * ratio) != mlp:
        raise ValueError("mlp_dim %d is not int(hidden_dim * mlp_ratio)" % mlp)
    layers = list(model.encoder.layers)
    for layer in layers:
        if abs(layer.ln_1.eps - LN_EPS) > 0 or abs(layer.ln_2.eps - LN_EPS) > 0:
            raise ValueError("LayerNorm eps must be 1e-6")
    return dict(img_size=model.image_size, patch_size=model.patch_size,
                in_chans=model.conv_proj.in_channels,
                num_classes=model.num_classes, embed_dim=hidden,
                depth=len(layers),
                num_heads=layers[0].num_heads if layers else 1,
                mlp_ratio=ratio, qkv_bias=True)


_TV_TOP = {"conv_proj.": "patch_embed.proj.", "class_token": "cls_token",
           "encoder.pos_embedding": "pos_embed", "encoder.ln.": "norm.",
           "heads.head.": "head."}
_TV_BLOCK = {"ln_1.": "norm1.", "ln_2.": "norm2.",
             "self_attention.in_proj_weight": "attn.qkv.weight",
             "self_attention.in_proj_bias": "attn.qkv.bias",
             "self_attention.out_proj.": "attn.proj.",
             "mlp.0.": "mlp.fc1.", "mlp.3.": "mlp.fc2.",
             "mlp.linear_1.": "mlp.fc1.", "mlp.linear_2.": "mlp.fc2."}


def timm_state_dict_from_torchvision(sd):
    """A torchvision ViT state_dict under timm's names (relattn's canonical
    ones): what relattn's torchvision naming scheme maps."""
    out = {}
    for k, v in sd.items():
        new = None
        for a, b in _TV_TOP.items():
            if k.startswith(a):
                new = b + k[len(a):]
        pre = "encoder.layers.encoder_layer_"
        if k.startswith(pre):
            i, rest = k[len(pre):].split(".", 1)
            for a, b in _TV_BLOCK.items():
                if rest.startswith(a):
                    new = "blocks.%d.%s%s" % (int(i), b, rest[len(a):])
        if new is None:
            raise ValueError("no timm name for %s" % k)
        out[new] = v
    return out


# --------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------

REQUIRED_KEYS = ("img_size", "patch_size", "in_chans", "num_classes", "embed_dim",
             "depth", "num_heads", "mlp_ratio", "qkv_bias")


def vit_metadata(hparams):
    missing = [k for k in REQUIRED_KEYS if hparams.get(k) is None]
    if missing:
        raise ValueError("hyperparameters lack %s" % ", ".join(missing))
    meta = {"arch": "vit"}
    for k, v in hparams.items():
        if v is not None:
            meta[k] = meta_value(v)
    return meta


def vit_state_dict(model_or_state_dict, scheme="timm"):
    """The tensors of a vit model file: the state_dict (timm's names for
    scheme "timm", torchvision's for "torchvision", kept as they are) in
    float32."""
    sd = (model_or_state_dict.state_dict()
          if isinstance(model_or_state_dict, nn.Module) else model_or_state_dict)
    marker = {"timm": "patch_embed.proj.weight", "torchvision": "conv_proj.weight"}
    if scheme not in marker:
        raise ValueError("scheme must be timm or torchvision")
    if marker[scheme] not in sd:
        raise ValueError("the state_dict has no %s: not the %s scheme"
                         % (marker[scheme], scheme))
    return {k: v.detach().to(torch.float32).contiguous() for k, v in sd.items()}


def export_vit(model_or_state_dict, hyperparameters, path, scheme="timm"):
    """Write a vit model file: vit_state_dict and the metadata (docs/reference.md,
    section 2) from
    hyperparameters (timm constructor names). -> the bytes written."""
    return st.write(path, vit_state_dict(model_or_state_dict, scheme),
                    vit_metadata(hyperparameters))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torchvision", required=True, metavar="NAME",
                    help="torchvision builder, e.g. vit_b_16")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input", help="also write an input x here")
    ap.add_argument("--expected", help="and torchvision's logits y here")
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = torchvision_vit(args.torchvision, args.seed)
    n = export_vit(model, torchvision_hparams(model), args.output, "torchvision")
    print("%s: %d bytes" % (args.output, n))
    if args.input:
        g = torch.Generator().manual_seed(args.seed + 2)
        s = model.image_size
        x = torch.randn(args.batch, 3, s, s, generator=g)
        st.write(args.input, {"x": x})
        if args.expected:
            with torch.no_grad():
                st.write(args.expected, {"y": model(x)})


if __name__ == "__main__":
    main()
