"""Export a PyTorch model to a relattn model file (docs/reference.md,
section 2).

Run with Debian's python3-torch (/usr/bin/python3):

    export.py --arch swin_block [--set KEY=VALUE ...] [--seed S] --out M.safetensors
    export.py --arch swin [--naming official|timm] [--set KEY=VALUE ...] --out M.safetensors
    export.py --torchvision swin_t [--set img_size=224] --out M.safetensors

The file holds the model's state_dict() (tensor names as PyTorch writes
them) and __metadata__ with "arch" and the constructor arguments, named as
the official constructor's (integers in decimal, tuples comma-separated,
booleans "true"/"false", an absent optional argument an absent key).

Models (random weights from --seed; no downloads):
  --arch swin_block   tools/swin_twin.py SwinTransformerBlock
  --arch swin         tools/swin_twin.py SwinTransformer; --naming timm
                      renames its state_dict to timm's current names
                      (layers.{i+1}.downsample.* for the official
                      layers.i.downsample.*, head.fc.*, no buffers)
  --torchvision swin_t  torchvision.models.swin_t: torchvision's names
                      (features.*), metadata arch=swin with swin_t's
                      hyperparameters; --torchvision swin lets --set choose
                      them (a small torchvision SwinTransformer)
  --arch vit          tools/vit_twin.py VisionTransformer (timm's names)
  --arch swin_block_3d  tools/swin3d_twin.py SwinBlock3D: a Video Swin self
                      block, or with --set num_frames_q=D1 --set
                      num_frames_kv=D2 (and a 2-D window_size / shift_size)
                      an RSTT cross block; its --example is one clip
                      (D, H, W, C) as `relattn forward` reads it (a cross
                      block's query frames then its key/value frames)
  --torchvision vit_b_16  torchvision's VisionTransformer (conv_proj,
                      encoder.*, heads.head), metadata arch=vit
  --arch swinv2       tools/swinv2_twin.py SwinTransformerV2 (official names)
  --arch swinv2_window_attention  tools/swinv2_twin.py WindowAttentionV2
  --torchvision swin_v2_t  torchvision.models.swin_v2_t (256 x 256, window 8),
                      metadata arch=swinv2; --torchvision swinv2 lets --set
                      choose the hyperparameters
  --torchvision swin3d_t  torchvision >= 0.15's video swin3d_t as
                      tools/swin3d_net_twin.py writes it again: its
                      state_dict alone (no metadata; relattn infers arch
                      swin3d); its --example is clips (B, 3, num_frames, H, W)

--set KEY=VALUE overrides a constructor argument (repeatable), e.g.
--set img_size=32 --set depths=2,2 --set num_heads=1,2. --init fixture
re-draws every parameter with larger values than the models' own
initialisation (so that every term matters in a test). --example PREFIX
also writes PREFIX.input.safetensors (x, --batch images or feature maps of
the model's size, or --size H,W) and PREFIX.expected.safetensors (y, the
model's output in float32 on one thread).

Adding an arch: write build_ARCH(hp) -> (module, metadata) and
example_ARCH(module, hp, batch, size) -> x, and register them in ARCHS.
"""

import argparse
import os
import re
import sys

import torch

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402
import common  # noqa: E402
from common import metadata  # noqa: E402


# --------------------------------------------------------------------------
# --set values
# --------------------------------------------------------------------------

def parse_value(text, default):
    """A --set value, typed like the default it replaces."""
    if isinstance(default, bool):
        if text not in ("true", "false"):
            raise ValueError("expected true or false, got %r" % text)
        return text == "true"
    if isinstance(default, (list, tuple)):
        return [int(e) for e in text.split(",")]
    if isinstance(default, float) or default is None:
        return float(text)
    if isinstance(default, int):
        if "," in text:  # a tuple where an int is usual (img_size "H,W")
            return [int(e) for e in text.split(",")]
        return int(text)
    return text


# --------------------------------------------------------------------------
# Swin (tools/swin_twin.py, torchvision)
# --------------------------------------------------------------------------

SWIN_BLOCK_DEFAULTS = dict(dim=96, input_resolution=[56, 56], num_heads=3, window_size=7,
                           shift_size=0, mlp_ratio=4.0, qkv_bias=True, qk_scale=None)
SWIN_BLOCK_KEYS = list(SWIN_BLOCK_DEFAULTS)

SWIN_DEFAULTS = dict(img_size=224, patch_size=4, in_chans=3, num_classes=1000, embed_dim=96,
                     depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=7,
                     mlp_ratio=4.0, qkv_bias=True, qk_scale=None, ape=False, patch_norm=True,
                     patch_kernel=None)
SWIN_KEYS = list(SWIN_DEFAULTS)

# torchvision.models.swin_t(): patch [4, 4], embed_dim 96, depths [2, 2, 6, 2],
# heads [3, 6, 12, 24], window [7, 7], 1000 classes, 224 x 224 images.
SWIN_T = dict(SWIN_DEFAULTS)


def build_swin_block(hp):
    from swin_twin import SwinTransformerBlock
    kw = dict(hp)
    m = SwinTransformerBlock(**kw)
    return m, metadata("swin_block", hp, SWIN_BLOCK_KEYS)


def example_swin_block(m, hp, batch, size):
    H, W = size if size else hp["input_resolution"]
    return torch.randn(batch, H * W, hp["dim"])


def build_swin(hp):
    from swin_twin import SwinTransformer
    m = SwinTransformer(**hp)
    return m, metadata("swin", hp, SWIN_KEYS)


def image_size(hp):
    s = hp["img_size"]
    return (s, s) if isinstance(s, int) else tuple(s)


def example_swin(m, hp, batch, size):
    H, W = size if size else image_size(hp)
    return torch.randn(batch, hp["in_chans"], H, W)


def timm_names(state_dict):
    """Official Swin state_dict -> timm's current SwinTransformer names:
    patch merging runs at the start of the next stage there
    (layers.{i+1}.downsample.*), the head is a ClassifierHead (head.fc.*),
    and relative_position_index / attn_mask are non-persistent buffers."""
    out = {}
    for k, v in state_dict.items():
        if k.endswith("relative_position_index") or k.endswith("attn_mask"):
            continue
        k = re.sub(r"^layers\.(\d+)\.downsample\.",
                   lambda g: "layers.%d.downsample." % (int(g.group(1)) + 1), k)
        k = re.sub(r"^head\.", "head.fc.", k)
        out[k] = v
    return out


def build_torchvision_swin(hp):
    """A torchvision SwinTransformer (v1 blocks) with these hyperparameters;
    its own naming (features.*) and semantics."""
    from torchvision.models.swin_transformer import SwinTransformer
    if hp["in_chans"] != 3 or hp["ape"] or not hp["patch_norm"] or not hp["qkv_bias"] \
            or hp["qk_scale"] is not None or hp.get("patch_kernel") is not None:
        raise ValueError("torchvision's SwinTransformer has in_chans 3, no ape, patch_norm, "
                         "qkv_bias, no qk_scale and no overlapping patch embedding")
    if hp["num_classes"] < 1:
        raise ValueError("torchvision's SwinTransformer always has a head (num_classes >= 1)")
    ws = hp["window_size"]
    ws = [ws, ws] if isinstance(ws, int) else list(ws)
    m = SwinTransformer(patch_size=[hp["patch_size"]] * 2, embed_dim=hp["embed_dim"],
                        depths=list(hp["depths"]), num_heads=list(hp["num_heads"]),
                        window_size=ws, mlp_ratio=hp["mlp_ratio"],
                        stochastic_depth_prob=0.0, num_classes=hp["num_classes"])
    return m, metadata("swin", hp, SWIN_KEYS)


# --------------------------------------------------------------------------
# ViT (tools/vit_twin.py, torchvision)
# --------------------------------------------------------------------------

# timm's VisionTransformer defaults (fc_norm stays None: derived from the pool)
VIT_DEFAULTS = dict(img_size=224, patch_size=16, in_chans=3, num_classes=1000,
                    global_pool="token", embed_dim=768, depth=12, num_heads=12,
                    mlp_ratio=4.0, qkv_bias=True, proj_bias=True, init_values=None,
                    class_token=True, pos_embed="learn", no_embed_class=False,
                    reg_tokens=0, pre_norm=False, final_norm=True,
                    pool_include_prefix=False, dynamic_img_size=False,
                    dynamic_img_pad=False)
VIT_B_16 = dict(img_size=224, patch_size=16, in_chans=3, num_classes=1000, embed_dim=768,
                depth=12, num_heads=12, mlp_ratio=4.0)


def build_vit(hp):
    import vit_twin
    m = vit_twin.VisionTransformer(**hp)
    return m, vit_twin.vit_metadata(m.hparams)


def build_torchvision_vit(hp):
    """torchvision's VisionTransformer with these hyperparameters (vit_b_16's
    by default); its own names and semantics."""
    import vit_twin
    from torchvision.models.vision_transformer import VisionTransformer
    if hp["in_chans"] != 3 or not isinstance(hp["img_size"], int):
        raise ValueError("torchvision's VisionTransformer takes 3 channels and a square img_size")
    m = VisionTransformer(image_size=hp["img_size"], patch_size=hp["patch_size"],
                          num_layers=hp["depth"], num_heads=hp["num_heads"],
                          hidden_dim=hp["embed_dim"],
                          mlp_dim=int(hp["embed_dim"] * hp["mlp_ratio"]),
                          num_classes=hp["num_classes"])
    return m, vit_twin.vit_metadata(vit_twin.torchvision_hparams(m))


# --------------------------------------------------------------------------
# The 3-D window block (tools/swin3d_twin.py)
# --------------------------------------------------------------------------

# Video Swin's SwinTransformerBlock3D defaults; num_frames_q / num_frames_kv
# 0 mean absent (a self block).
SWIN_BLOCK_3D_DEFAULTS = dict(dim=96, num_heads=3, window_size=[2, 7, 7], shift_size=[0, 0, 0],
                              mlp_ratio=4.0, qkv_bias=True, qk_scale=None, num_frames_q=0,
                              num_frames_kv=0)


def build_swin_block_3d(hp):
    import swin3d_twin
    kw = dict(hp)
    if not kw["num_frames_q"] and not kw["num_frames_kv"]:
        kw["num_frames_q"] = kw["num_frames_kv"] = None
    m = swin3d_twin.SwinBlock3D(**kw)
    return m, swin3d_twin.metadata(m, kw)


def example_swin_block_3d(m, hp, batch, size):
    if batch != 1:
        raise SystemExit("swin_block_3d: the example is one clip (D, H, W, C); use --batch 1")
    H, W = size if size else (2 * m.window_size[-2], 2 * m.window_size[-1])
    D = sum(m.frames) if m.cross else 2 * m.window_size[0]
    return torch.randn(D, H, W, hp["dim"])


# --------------------------------------------------------------------------
# Video Swin (tools/swin3d_net_twin.py: torchvision >= 0.15's SwinTransformer3d)
# --------------------------------------------------------------------------

# torchvision's swin3d_t builder (400 Kinetics classes)
SWIN3D_T = dict(patch_size=[2, 4, 4], in_chans=3, num_classes=400, embed_dim=96,
                depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=[8, 7, 7],
                mlp_ratio=4.0, num_frames=32)


def build_torchvision_swin3d(hp):
    """The twin of torchvision's SwinTransformer3d with these
    hyperparameters (swin3d_t's by default), its bias tables drawn as
    torchvision draws them (truncated normal, std 0.02). No metadata: the
    file is the state_dict torchvision would save, and relattn reads the
    hyperparameters off its names and shapes (and, at swin3d_t's widths,
    the builder's weights' transform), as of a downloaded checkpoint."""
    from swin3d_net_twin import Swin3d
    m = Swin3d(patch=hp["patch_size"], embed=hp["embed_dim"], depths=hp["depths"],
               heads=hp["num_heads"], window=hp["window_size"], mlp_ratio=hp["mlp_ratio"],
               classes=hp["num_classes"], in_chans=hp["in_chans"])
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("relative_position_bias_table"):
                torch.nn.init.trunc_normal_(p, std=0.02)
    return m, None


def example_swin3d(m, hp, batch, size):
    """Clips (batch, C_in, num_frames, H, W), 224 x 224 or --size."""
    H, W = size if size else (224, 224)
    return torch.randn(batch, hp["in_chans"], hp["num_frames"], H, W)


def swinv2_builders():
    import swinv2_twin as v2
    return v2


# arch name -> (builder, example input maker, default hyperparameters)
ARCHS = {
    "swin_block": (build_swin_block, example_swin_block, SWIN_BLOCK_DEFAULTS),
    "swin": (build_swin, example_swin, SWIN_DEFAULTS),
    "vit": (build_vit, example_swin, VIT_DEFAULTS),
    "swin_block_3d": (build_swin_block_3d, example_swin_block_3d, SWIN_BLOCK_3D_DEFAULTS),
    # tools/swinv2_twin.py
    "swinv2": (lambda hp: swinv2_builders().build_swinv2(hp), example_swin, None),
    "swinv2_window_attention": (lambda hp: swinv2_builders().build_layer(hp),
                                lambda *a: swinv2_builders().example_layer(*a), None),
}

TORCHVISION = {
    "swin_t": (build_torchvision_swin, example_swin, SWIN_T),
    "swin": (build_torchvision_swin, example_swin, SWIN_DEFAULTS),
    "vit_b_16": (build_torchvision_vit, example_swin, VIT_B_16),
    # SwinV2 blocks and merging (tools/swinv2_twin.py); swin_v2_t at 256 x 256
    "swin_v2_t": (lambda hp: swinv2_builders().build_torchvision_swinv2(hp), example_swin, None),
    "swinv2": (lambda hp: swinv2_builders().build_torchvision_swinv2(hp), example_swin, None),
    # Video Swin (tools/swin3d_net_twin.py), torchvision's names, no metadata
    "swin3d_t": (build_torchvision_swin3d, example_swin3d, SWIN3D_T),
}
DEFAULTS_OF = {("arch", "swinv2"): "SWINV2_DEFAULTS",
               ("arch", "swinv2_window_attention"): "LAYER_DEFAULTS",
               ("torchvision", "swin_v2_t"): "SWIN_V2_T",
               ("torchvision", "swinv2"): "SWINV2_DEFAULTS"}


# --------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------

def fixture_init(module, seed):
    """Re-draw every parameter: weights N(0, (1.5 / sqrt(fan_in))^2), biases
    N(0, 0.1^2), LayerNorm gains 1 + N(0, 0.2^2), bias tables N(0, 0.5^2),
    so that every term of the forward matters while activations stay near
    unit scale through the residual stream."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("relative_position_bias_table"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif name.endswith("absolute_pos_embed"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif p.dim() == 1 and name.endswith("weight"):  # LayerNorm gains
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.2)
            elif p.dim() == 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / fan_in ** 0.5))


def state_dict_f32(model, naming="official"):
    """The model file's tensors: the state_dict in float32, renamed to
    timm's names for naming "timm"."""
    sd = common.state_dict_f32(model)
    return timm_names(sd) if naming == "timm" else sd


def export(model, meta, path, naming="official"):
    sd = state_dict_f32(model, naming)
    return st.write(path, sd, meta), sd


def make(kind, name, sets=(), seed=0, init="default", naming="official"):
    """-> (module in eval mode, metadata, hyperparameters, example maker)."""
    table = ARCHS if kind == "arch" else TORCHVISION
    if name not in table:
        raise SystemExit("unknown %s %r (known: %s)" % (kind, name, ", ".join(sorted(table))))
    builder, example, defaults = table[name]
    if defaults is None:   # kept in tools/swinv2_twin.py
        defaults = getattr(swinv2_builders(), DEFAULTS_OF[(kind, name)])
    hp = dict(defaults)
    for s in sets:
        key, _, value = s.partition("=")
        if key not in hp:
            raise SystemExit("unknown hyperparameter %r for %s (known: %s)"
                             % (key, name, ", ".join(hp)))
        hp[key] = parse_value(value, defaults[key])
    torch.manual_seed(seed)
    model, meta = builder(hp)
    model.eval()
    if init == "fixture":
        fixture_init(model, seed)
    return model, meta, hp, example


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--arch", help="a relattn arch with a twin here: " + ", ".join(ARCHS))
    src.add_argument("--torchvision", help="a torchvision model: " + ", ".join(TORCHVISION))
    ap.add_argument("--naming", choices=("official", "timm"), default="official",
                    help="tensor names of the file (swin only)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="constructor argument")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", choices=("default", "fixture"), default="default")
    ap.add_argument("--out", required=True, help="model file to write")
    ap.add_argument("--example", metavar="PREFIX",
                    help="also write PREFIX.input.safetensors and PREFIX.expected.safetensors")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--size", help="H,W of the example input (default: the model's)")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    kind, name = ("arch", args.arch) if args.arch else ("torchvision", args.torchvision)
    if args.naming != "official" and name != "swin":
        raise SystemExit("--naming timm applies to --arch swin only")
    model, meta, hp, example = make(kind, name, args.set, args.seed, args.init, args.naming)
    nbytes, sd = export(model, meta, args.out, args.naming)
    nparams = sum(p.numel() for p in model.parameters())
    print("%s: %s, %d tensors, %d parameters, %d bytes"
          % (args.out, meta["arch"] if meta else "no metadata", len(sd), nparams, nbytes))
    if args.example:
        size = tuple(int(v) for v in args.size.split(",")) if args.size else None
        torch.manual_seed(common.seed_of(args.example))
        x = example(model, hp, args.batch, size)
        with torch.no_grad():
            y = model(x)
            if isinstance(y, tuple):
                y = y[0]
        st.write(args.example + ".input.safetensors", {"x": x})
        st.write(args.example + ".expected.safetensors", {"y": y.float().contiguous()})
        print("%s.{input,expected}.safetensors: x %s -> y %s"
              % (args.example, tuple(x.shape), tuple(y.shape)))


if __name__ == "__main__":
    main()
