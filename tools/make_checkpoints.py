"""The checkpoints people have, written by PyTorch, for tests/test_checkpoints.sh.

    /usr/bin/python3 tools/make_checkpoints.py OUT_DIR

Writes into OUT_DIR one directory per case and OUT_DIR/cases.tsv, the list
the test reads. The files are what the code bases write when they save a
model, built here from the twins of tools/ with seeded random weights (every
parameter re-drawn, LayerNorm gains and biases included, so that a tensor
mapped to the wrong place shows in the logits):

  torchvision    torch.save(model.state_dict(), "x.pth")
  official Swin  torch.save({"model": state_dict}, "x.pth") (the release
                 layout), also with DistributedDataParallel's "module."
                 prefixes and training state beside it
  timm train.py  torch.save({"epoch", "arch", "state_dict", "optimizer",
                 "version", "args": argparse.Namespace, "metric",
                 "state_dict_ema"}, "x.pth.tar")
  safetensors    a plain state_dict without __metadata__
  transformers   a folder: config.json as PretrainedConfig.save_pretrained
                 writes it (SwinConfig, Swinv2Config, ViTConfig) and
                 pytorch_model.bin or model.safetensors under transformers'
                 names (mapped here from the official / timm names, as
                 transformers' convert_*_timm_to_pytorch.py scripts map
                 them: qkv split into query, key, value); the classify
                 cases also preprocessor_config.json (mean and std)
  timm hub       a folder: config.json ("architecture", "model_args",
                 "pretrained_cfg") and model.safetensors under timm's names
  refusals       a pickle global that runs a command, a truncated zip, a
                 complex64 tensor, a missing tensor, a ViT width with no
                 known head count, the legacy (pre-zip) torch.save format

Each case directory holds input.safetensors (x, images), expected.safetensors
(y, the twin's logits in float32 on one thread) and, where the test converts
the model to float16 / bfloat16, expected_f16 / expected_bf16: the logits of
the same model with every parameter rounded to that type and back.
inspect.json (what `relattn inspect --json` must report) and, for classify,
image.png and classify.json.

cases.tsv: one case a line, tab-separated:
  name  kind  model  tol  checks  args  expect
kind is "forward" (runs and must give expected.safetensors within tol of its
largest magnitude) or "refuse" (exit 65 with one line on stderr, which must
contain `expect`); model is a path relative to OUT_DIR; checks a comma list
of convert, f16, bf16, inspect, classify; args extra command-line arguments
(space-separated); "-" stands for an empty field.

Before it returns, every checkpoint written is read back with torch.load
and compared with what was meant to be in it, and every transformers-named
state_dict is mapped back to the original names and compared exactly.
Run with Debian's python3-torch and python3-torchvision (/usr/bin/python3).
"""

import argparse
import collections
import copy
import json
import os
import re
import struct
import sys
import time
import zlib

import torch
import torch.nn as nn

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
import export  # noqa: E402
import st  # noqa: E402
import swin_twin  # noqa: E402
import swinv2_twin  # noqa: E402
import vit_twin  # noqa: E402

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HF_SCHEME = "transformers"   # the naming scheme inspect reports for transformers' names
TOL = 1e-5          # docs/reference.md, section 6: forward within 1e-5 relative
TOL_F16 = 3e-3      # weights rounded alike; what is left is where relattn
TOL_BF16 = 3e-2     # keeps a tensor in float32 that the reference rounded


# --------------------------------------------------------------------------
# Models: the twins with seeded random weights
# --------------------------------------------------------------------------

def swin_hp(**kw):
    """Official Swin constructor arguments: a small model by default."""
    hp = dict(export.SWIN_DEFAULTS)
    hp.update(img_size=56, patch_size=4, num_classes=10, embed_dim=32, depths=[2, 2],
              num_heads=[2, 4], window_size=7)
    hp.update(kw)
    return hp


def swinv2_hp(**kw):
    hp = dict(swinv2_twin.SWINV2_DEFAULTS)
    hp.update(img_size=64, patch_size=4, num_classes=10, embed_dim=32, depths=[2, 2],
              num_heads=[2, 4], window_size=8, pretrained_window_sizes=[0, 0])
    hp.update(kw)
    return hp


def vit_hp(**kw):
    hp = dict(img_size=32, patch_size=8, in_chans=3, num_classes=10, embed_dim=192,
              depth=2, num_heads=3, mlp_ratio=4.0, qkv_bias=True)
    hp.update(kw)
    return hp


def official_swin(seed, hp):
    torch.manual_seed(seed)
    m = swin_twin.SwinTransformer(**hp).eval()
    export.fixture_init(m, seed)
    return m


def torchvision_swin(seed, hp):
    torch.manual_seed(seed)
    m, _ = export.build_torchvision_swin(hp)
    m.eval()
    export.fixture_init(m, seed)
    return m


def official_swinv2(seed, hp):
    torch.manual_seed(seed)
    m, _ = swinv2_twin.build_swinv2(hp)
    m.eval()
    swinv2_twin.fixture_init(m, seed)
    return m


def torchvision_swinv2(seed, hp):
    torch.manual_seed(seed)
    m, _ = swinv2_twin.build_torchvision_swinv2(hp)
    m.eval()
    swinv2_twin.fixture_init(m, seed)
    return m


def timm_vit(seed, hp, ln_eps=None):
    """tools/vit_twin.py's timm VisionTransformer; ln_eps replaces the
    LayerNorm epsilon (transformers' ViTConfig says 1e-12)."""
    torch.manual_seed(seed)
    m = vit_twin.VisionTransformer(**hp).eval()
    vit_twin.randomize_(m, seed)
    if ln_eps is not None:
        for mod in m.modules():
            if isinstance(mod, nn.LayerNorm):
                mod.eps = ln_eps
    return m


def torchvision_vit(seed, hp):
    m = vit_twin.torchvision_vit("custom", seed, image_size=hp["img_size"],
                                 patch_size=hp["patch_size"], num_layers=hp["depth"],
                                 num_heads=hp["num_heads"], hidden_dim=hp["embed_dim"],
                                 mlp_dim=int(hp["embed_dim"] * hp["mlp_ratio"]),
                                 num_classes=hp["num_classes"])
    vit_twin.randomize_(m, seed)   # torchvision's LayerNorms start at 1 and 0
    return m.eval()


def images(seed, batch, size, chans=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, chans, size, size, generator=g)


def logits(model, x):
    with torch.no_grad():
        y = model(x)
    return (y[0] if isinstance(y, tuple) else y).float().contiguous()


def rounded_logits(model, x, dtype):
    """The logits of model with every parameter rounded to dtype and back."""
    m = copy.deepcopy(model)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.to(dtype).float())
    return logits(m, x)


# --------------------------------------------------------------------------
# transformers' names (models/{swin,swinv2,vit}/modeling_*.py)
# --------------------------------------------------------------------------

# official block suffix -> transformers' SwinLayer / Swinv2Layer suffix
HF_SWIN_BLOCK = [
    ("norm1.", "layernorm_before."),
    ("norm2.", "layernorm_after."),
    ("attn.relative_position_bias_table", "attention.self.relative_position_bias_table"),
    ("attn.relative_position_index", "attention.self.relative_position_index"),
    ("attn.proj.", "attention.output.dense."),
    ("attn.logit_scale", "attention.self.logit_scale"),
    ("attn.cpb_mlp.", "attention.self.continuous_position_bias_mlp."),
    ("attn.q_bias", "attention.self.query.bias"),
    ("attn.v_bias", "attention.self.value.bias"),
    ("mlp.fc1.", "intermediate.dense."),
    ("mlp.fc2.", "output.dense."),
]
HF_VIT_BLOCK = [
    ("norm1.", "layernorm_before."),
    ("norm2.", "layernorm_after."),
    ("attn.proj.", "attention.output.dense."),
    ("mlp.fc1.", "intermediate.dense."),
    ("mlp.fc2.", "output.dense."),
]
QKV = ("query", "key", "value")


def _swap_prefix(name, table, forward=True):
    for a, b in table:
        src, dst = (a, b) if forward else (b, a)
        if name.startswith(src):
            return dst + name[len(src):]
    return None


def _split_qkv(out, prefix, kind, t):
    """qkv rows q, k, v (the official and timm layout) -> query, key, value:
    views of the fused tensor, as the conversion scripts' slices are."""
    c = t.shape[0] // 3
    for i, part in enumerate(QKV):
        out["%s%s.%s" % (prefix, part, kind)] = t[i * c:(i + 1) * c]


def hf_swin_names(sd, v2=False):
    """An official Swin / SwinV2 state_dict -> SwinForImageClassification's
    (Swinv2ForImageClassification's). transformers keeps no attn_mask, and
    in SwinV2 relative_coords_table / relative_position_index are not
    persistent."""
    top = "swinv2" if v2 else "swin"
    out = collections.OrderedDict()
    for k, v in sd.items():
        if k.endswith("attn_mask") or (v2 and (k.endswith("relative_coords_table")
                                               or k.endswith("relative_position_index"))):
            continue
        m = re.match(r"layers\.(\d+)\.blocks\.(\d+)\.(.*)$", k)
        if m:
            base = "%s.encoder.layers.%s.blocks.%s." % (top, m.group(1), m.group(2))
            rest = m.group(3)
            if rest.startswith("attn.qkv."):
                _split_qkv(out, base + "attention.self.", rest.split(".")[-1], v)
                continue
            new = _swap_prefix(rest, HF_SWIN_BLOCK)
            if new is None:
                raise ValueError("no transformers name for " + k)
            out[base + new] = v
            continue
        new = _swap_prefix(k, [
            ("patch_embed.proj.", top + ".embeddings.patch_embeddings.projection."),
            ("patch_embed.norm.", top + ".embeddings.norm."),
            ("layers.", top + ".encoder.layers."),          # downsample.*
            ("norm.", top + ".layernorm."),
            ("head.", "classifier.")])
        if new is None:
            raise ValueError("no transformers name for " + k)
        out[new] = v
    return out


def official_from_hf_swin(sd, v2=False):
    """The inverse of hf_swin_names (what the test checks it against)."""
    top = "swinv2" if v2 else "swin"
    out = collections.OrderedDict()
    fused = {}
    for k, v in sd.items():
        m = re.match(r"%s\.encoder\.layers\.(\d+)\.blocks\.(\d+)\.(.*)$" % top, k)
        if m:
            base = "layers.%s.blocks.%s." % (m.group(1), m.group(2))
            rest = m.group(3)
            q = re.match(r"attention\.self\.(query|key|value)\.(weight|bias)$", rest)
            if q and not (v2 and q.group(2) == "bias"):
                fused.setdefault((base, q.group(2)), {})[q.group(1)] = v
                continue
            new = _swap_prefix(rest, HF_SWIN_BLOCK, forward=False)
            if new is None:
                raise ValueError("no official name for " + k)
            out[base + new] = v
            continue
        new = _swap_prefix(k, [
            ("patch_embed.proj.", top + ".embeddings.patch_embeddings.projection."),
            ("patch_embed.norm.", top + ".embeddings.norm."),
            ("layers.", top + ".encoder.layers."),
            ("norm.", top + ".layernorm."),
            ("head.", "classifier.")], forward=False)
        if new is None:
            raise ValueError("no official name for " + k)
        out[new] = v
    for (base, kind), parts in fused.items():
        out[base + "attn.qkv." + kind] = torch.cat([parts[p] for p in QKV])
    return out


def hf_vit_names(sd):
    """A timm ViT state_dict -> ViTForImageClassification's."""
    out = collections.OrderedDict()
    for k, v in sd.items():
        m = re.match(r"blocks\.(\d+)\.(.*)$", k)
        if m:
            base = "vit.encoder.layer.%s." % m.group(1)
            rest = m.group(2)
            if rest.startswith("attn.qkv."):
                _split_qkv(out, base + "attention.attention.", rest.split(".")[-1], v)
                continue
            new = _swap_prefix(rest, HF_VIT_BLOCK)
            if new is None:
                raise ValueError("no transformers name for " + k)
            out[base + new] = v
            continue
        new = _swap_prefix(k, HF_VIT_TOP)
        if new is None:
            raise ValueError("no transformers name for " + k)
        out[new] = v
    return out


HF_VIT_TOP = [("cls_token", "vit.embeddings.cls_token"),
              ("pos_embed", "vit.embeddings.position_embeddings"),
              ("patch_embed.proj.", "vit.embeddings.patch_embeddings.projection."),
              ("norm.", "vit.layernorm."),
              ("head.", "classifier.")]


def timm_from_hf_vit(sd):
    out = collections.OrderedDict()
    fused = {}
    for k, v in sd.items():
        m = re.match(r"vit\.encoder\.layer\.(\d+)\.(.*)$", k)
        if m:
            base = "blocks.%s." % m.group(1)
            q = re.match(r"attention\.attention\.(query|key|value)\.(weight|bias)$", m.group(2))
            if q:
                fused.setdefault((base, q.group(2)), {})[q.group(1)] = v
                continue
            new = _swap_prefix(m.group(2), HF_VIT_BLOCK, forward=False)
            if new is None:
                raise ValueError("no timm name for " + k)
            out[base + new] = v
            continue
        new = _swap_prefix(k, HF_VIT_TOP, forward=False)
        if new is None:
            raise ValueError("no timm name for " + k)
        out[new] = v
    for (base, kind), parts in fused.items():
        out[base + "attn.qkv." + kind] = torch.cat([parts[p] for p in QKV])
    return out


def labels_of(n):
    """Class names as ImageNet's label files spell them (commas, spaces, one
    that is not ASCII)."""
    words = ["tench, Tinca tinca", "goldfish, Carassius auratus", "great white shark",
             "tiger shark, Galeocerdo cuvieri", "café au lait", "electric ray, crampfish",
             "stingray", "cock", "hen", "ostrich, Struthio camelus", "brambling",
             "goldfinch", "house finch, linnet", "junco, snowbird", "hammerhead"]
    return [words[i % len(words)] + ("" if i < len(words) else " %d" % i) for i in range(n)]


def hf_config(model_type, arch, fields, num_classes):
    """config.json as PretrainedConfig.save_pretrained writes it: the
    model's own fields, architectures, model_type, id2label / label2id,
    torch_dtype and transformers_version; keys sorted."""
    labels = labels_of(num_classes)
    cfg = dict(fields)
    cfg.update(architectures=[arch], model_type=model_type, torch_dtype="float32",
               transformers_version="4.44.2",
               id2label={str(i): lab for i, lab in enumerate(labels)},
               label2id={lab: i for i, lab in enumerate(labels)})
    return dict(sorted(cfg.items()))


def hf_swin_config(hp, v2=False):
    n = len(hp["depths"])
    fields = dict(image_size=hp["img_size"], patch_size=hp["patch_size"],
                  num_channels=hp["in_chans"], embed_dim=hp["embed_dim"],
                  depths=list(hp["depths"]), num_layers=n, num_heads=list(hp["num_heads"]),
                  window_size=hp["window_size"], mlp_ratio=hp["mlp_ratio"],
                  qkv_bias=hp["qkv_bias"], hidden_act="gelu", hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0, drop_path_rate=0.1,
                  use_absolute_embeddings=False, initializer_range=0.02,
                  layer_norm_eps=1e-5, encoder_stride=32,
                  # SwinConfig's hidden_size is the last stage's width, not embed_dim
                  hidden_size=int(hp["embed_dim"] * 2 ** (n - 1)),
                  path_norm=True,
                  stage_names=["stem"] + ["stage%d" % (i + 1) for i in range(n)],
                  out_features=["stage%d" % n], out_indices=[n])
    if v2:
        fields["pretrained_window_sizes"] = list(hp["pretrained_window_sizes"])
        return hf_config("swinv2", "Swinv2ForImageClassification", fields, hp["num_classes"])
    return hf_config("swin", "SwinForImageClassification", fields, hp["num_classes"])


def hf_vit_config(hp):
    fields = dict(image_size=hp["img_size"], patch_size=hp["patch_size"],
                  num_channels=hp["in_chans"], hidden_size=hp["embed_dim"],
                  num_hidden_layers=hp["depth"], num_attention_heads=hp["num_heads"],
                  intermediate_size=int(hp["embed_dim"] * hp["mlp_ratio"]),
                  hidden_act="gelu", hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0, initializer_range=0.02,
                  layer_norm_eps=1e-12, qkv_bias=hp["qkv_bias"], encoder_stride=16)
    return hf_config("vit", "ViTForImageClassification", fields, hp["num_classes"])


def timm_config(arch, hp, model_args, mean, std, classifier, size, pool=None):
    """config.json as timm's push_to_hf_hub / save_for_hf writes it."""
    cfg = {"architecture": arch, "num_classes": hp["num_classes"],
            "num_features": model_args.get("num_features", 0),
           # the model's own pool, as timm writes it: Swin's avg, ViT's token
           "global_pool": hp.get("global_pool", "avg" if "swin" in arch else "token"),
            "model_args": {k: v for k, v in model_args.items() if k != "num_features"},
            "pretrained_cfg": {"tag": "relattn_test", "custom_load": False,
                               "input_size": [3, size, size], "fixed_input_size": True,
                               "interpolation": "bicubic", "crop_pct": 0.9,
                               "crop_mode": "center", "mean": list(mean), "std": list(std),
                               "num_classes": hp["num_classes"],
                               "first_conv": "patch_embed.proj", "classifier": classifier}}
    if pool:
        cfg["pretrained_cfg"]["pool_size"] = [pool, pool]
    return cfg


def hf_preprocessor(size, mean, std):
    """preprocessor_config.json of transformers' ViTImageProcessor (Swin's
    and ViT's): the folder's normalisation."""
    return {"do_normalize": True, "do_rescale": True, "do_resize": True,
            "image_mean": list(mean), "image_processor_type": "ViTImageProcessor",
            "image_std": list(std), "resample": 2, "rescale_factor": 1 / 255,
            "size": {"height": size, "width": size}}


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------

def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_png(path, rgb):
    """An 8-bit RGB PNG of rgb (H, W, 3) uint8: signature, IHDR, one IDAT
    (filter 0 on every row), IEND."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + bytes(rgb[r].flatten().tolist()) for r in range(h))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)   # 8 bits, RGB
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def st_tensors(sd):
    """Contiguous copies for safetensors (views of a fused qkv included)."""
    return collections.OrderedDict((k, v.detach().contiguous()) for k, v in sd.items())


class Writer:
    """Writes the cases into out and remembers what to read back."""

    def __init__(self, out):
        self.out = out
        self.lines = []
        self.saved = []       # (path, what torch.load must give back)
        self.hf_checks = []   # (name, transformers sd, original sd, inverse)

    def dir(self, name):
        d = os.path.join(self.out, name)
        os.makedirs(d, exist_ok=True)
        return d

    def save(self, obj, path, **kw):
        torch.save(obj, path, **kw)
        self.saved.append((path, obj))

    def case(self, name, kind, model, tol=TOL, checks=(), args=(), expect=""):
        fields = [name, kind, model, "%g" % tol, ",".join(checks) or "-",
                  " ".join(args) or "-", expect or "-"]
        assert all("\t" not in f and "\n" not in f for f in fields)
        self.lines.append("\t".join(fields))

    def expected(self, name, model, x, inspect=None, rounded=True):
        """input, expected (and the rounded expectations) of a case."""
        d = self.dir(name)
        st.write(os.path.join(d, "input.safetensors"), {"x": x})
        st.write(os.path.join(d, "expected.safetensors"), {"y": logits(model, x)})
        if rounded:
            st.write(os.path.join(d, "expected_f16.safetensors"),
                     {"y": rounded_logits(model, x, torch.float16)})
            st.write(os.path.join(d, "expected_bf16.safetensors"),
                     {"y": rounded_logits(model, x, torch.bfloat16)})
        if inspect is not None:
            write_json(os.path.join(d, "inspect.json"), inspect)
        return d

    def classify(self, name, model, size, mean, std, seed, labels=None):
        """image.png (size x size) and what classify must print for it: the
        top class, its probability and label, from the twin on the image
        scaled to [0, 1] and normalised by mean / std. The image is drawn
        again until the top two classes are clearly apart."""
        d = self.dir(name)
        g = torch.Generator().manual_seed(seed)
        for _ in range(20):
            rgb = torch.randint(0, 256, (size, size, 3), generator=g, dtype=torch.uint8)
            x = rgb.permute(2, 0, 1).float().div(255.0)
            x = (x - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)
            p = torch.softmax(logits(model, x.unsqueeze(0))[0].double(), 0)
            top = torch.topk(p, 2)
            if top.values[0] - top.values[1] > 0.05:
                break
        write_png(os.path.join(d, "image.png"), rgb.numpy())
        write_json(os.path.join(d, "classify.json"),
                   {"args": ["--resize", str(size), "--crop", str(size)],
                    "class": int(top.indices[0]), "probability": float(top.values[0]),
                    "label": labels[int(top.indices[0])] if labels else None})

    def finish(self):
        with open(os.path.join(self.out, "cases.tsv"), "w", encoding="utf-8") as f:
            f.write("# name\tkind\tmodel\ttol\tchecks\targs\texpect "
                    "(tools/make_checkpoints.py)\n")
            f.write("".join(line + "\n" for line in self.lines))


def inspect_of(arch, scheme, hp, keys, sources=None):
    """What inspect must show: arch, naming scheme, hyperparameters (and
    the files some of them must be said to come from)."""
    d = {"arch": arch, "scheme": scheme, "hp": {k: hp[k] for k in keys}}
    if sources:
        d["sources"] = sources
    return d


SWIN_KEYS = ["patch_size", "in_chans", "embed_dim", "depths", "num_heads", "window_size",
             "mlp_ratio", "num_classes"]
VIT_KEYS = ["img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio",
            "num_classes"]
ALL = ("convert", "f16", "bf16", "inspect")


# --------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------

def swin_cases(w):
    # torchvision's names, torch.save(model.state_dict()): windows of 4 on a
    # 16x16 and an 8x8 map (no clamp whatever img_size the loader assumes;
    # torchvision decides the shift from the map it gets)
    hp = swin_hp(img_size=64, window_size=4)
    m = torchvision_swin(common.seed_of("swin_tv_pth"), hp)
    d = w.expected("swin_tv_pth", m, images(1, 2, 64),
                   inspect_of("swin", "torchvision", hp, SWIN_KEYS))
    w.save(m.state_dict(), os.path.join(d, "model.pth"))
    w.case("swin_tv_pth", "forward", "swin_tv_pth/model.pth", checks=ALL)

    # official names, the release layout {"model": sd}: 56x56 images, window
    # 7, so stage 1 (7x7) is one window without shift; img_size only shows
    # in the attn_mask buffers
    hp = swin_hp()
    m = official_swin(common.seed_of("swin_official_pth"), hp)
    d = w.expected("swin_official_pth", m, images(2, 2, 56),
                   inspect_of("swin", "official", hp, SWIN_KEYS + ["img_size"]))
    w.save({"model": m.state_dict()}, os.path.join(d, "model.pth"))
    w.case("swin_official_pth", "forward", "swin_official_pth/model.pth", checks=ALL)

    # the same layout written by a DistributedDataParallel run: "module."
    # prefixes, training state beside the model
    m = official_swin(common.seed_of("swin_official_module"), hp)
    d = w.expected("swin_official_module", m, images(3, 2, 56),
                   inspect_of("swin", "official", hp, SWIN_KEYS + ["img_size"]))
    sd = collections.OrderedDict(("module." + k, v) for k, v in m.state_dict().items())
    w.save({"model": sd, "epoch": 3, "max_accuracy": 12.5}, os.path.join(d, "model.pth"))
    w.case("swin_official_module", "forward", "swin_official_module/model.pth", checks=ALL)

    # plain safetensors, official names (index and mask buffers included),
    # no __metadata__
    m = official_swin(common.seed_of("swin_official_st"), hp)
    d = w.expected("swin_official_st", m, images(4, 2, 56),
                   inspect_of("swin", "official", hp, SWIN_KEYS + ["img_size"]))
    st.write(os.path.join(d, "model.safetensors"), st_tensors(m.state_dict()))
    w.case("swin_official_st", "forward", "swin_official_st/model.safetensors", checks=ALL)


def timm_cases(w):
    """timm's train.py checkpoint (CheckpointSaver): the model under timm's
    names in "state_dict", its EMA in "state_dict_ema", the optimizer's
    state, argparse's Namespace of the run."""
    hp = swin_hp(img_size=64, window_size=4)
    m = official_swin(common.seed_of("swin_timm_pthtar"), hp)
    ema = official_swin(common.seed_of("swin_timm_pthtar/ema"), hp)
    x = images(5, 2, 64)
    d = w.expected("swin_timm_pthtar", m, x, inspect_of("swin", "timm", hp, SWIN_KEYS))
    opt_model = copy.deepcopy(m)
    opt = torch.optim.AdamW(opt_model.parameters(), lr=5e-4)
    for p in opt_model.parameters():
        p.grad = torch.ones_like(p) * 1e-3
    opt.step()
    args = argparse.Namespace(model="swin_tiny_patch4_window7_224", img_size=64,
                              num_classes=10, batch_size=128, lr=5e-4, epochs=5,
                              opt="adamw", opt_betas=(0.9, 0.999), weight_decay=0.05,
                              model_ema=True, decay_milestones=[90, 180, 270],
                              mean=None, std=None, data_dir="/data/imagenet")
    ckpt = {"epoch": 5, "arch": "swin_tiny_patch4_window7_224",
            "state_dict": collections.OrderedDict(export.timm_names(m.state_dict())),
            "optimizer": opt.state_dict(), "version": 2, "args": args, "metric": 12.5,
            "state_dict_ema": collections.OrderedDict(export.timm_names(ema.state_dict()))}
    path = os.path.join(d, "model.pth.tar")
    w.save(ckpt, path)
    model = "swin_timm_pthtar/model.pth.tar"
    # the image size is in nothing relattn reads (args is an opaque Namespace;
    # "arch" names another model): given, as relattn's refusal asks
    size = ["--set", "img_size=64"]
    w.case("swin_timm_pthtar", "forward", model, checks=ALL, args=size)
    w.expected("swin_timm_pthtar_key", m, x, inspect_of("swin", "timm", hp, SWIN_KEYS))
    w.case("swin_timm_pthtar_key", "forward", model, checks=ALL,
           args=["--key", "state_dict"] + size)
    w.expected("swin_timm_pthtar_ema", ema, x, inspect_of("swin", "timm", hp, SWIN_KEYS))
    w.case("swin_timm_pthtar_ema", "forward", model, checks=ALL,
           args=["--key", "state_dict_ema"] + size)


def swin_full(w):
    """torchvision's swin_t as it is (28 M parameters, 224x224, batch 1),
    random weights: the realistic size."""
    seed = common.seed_of("swin_t_tv_pth")
    torch.manual_seed(seed)
    import torchvision
    m = torchvision.models.swin_t().eval()
    export.fixture_init(m, seed)
    hp = dict(export.SWIN_T)
    d = w.expected("swin_t_tv_pth", m, images(6, 1, 224),
                   inspect_of("swin", "torchvision", hp, SWIN_KEYS), rounded=False)
    w.save(m.state_dict(), os.path.join(d, "model.pth"))
    w.case("swin_t_tv_pth", "forward", "swin_t_tv_pth/model.pth",
           checks=("convert", "inspect"))


def swinv2_cases(w):
    # the official SwinV2 release layout {"model": sd}: 16x16 then 8x8 maps,
    # window 8 (stage 1 one window, no shift)
    hp = swinv2_hp()
    m = official_swinv2(common.seed_of("swinv2_official_pth"), hp)
    d = w.expected("swinv2_official_pth", m, images(7, 2, 64),
                   inspect_of("swinv2", "official", hp, SWIN_KEYS + ["img_size"]))
    w.save({"model": m.state_dict()}, os.path.join(d, "model.pth"))
    w.case("swinv2_official_pth", "forward", "swinv2_official_pth/model.pth", checks=ALL)

    m = torchvision_swinv2(common.seed_of("swinv2_tv_pth"), hp)
    d = w.expected("swinv2_tv_pth", m, images(8, 2, 64),
                   inspect_of("swinv2", "torchvision", hp, SWIN_KEYS))
    w.save(m.state_dict(), os.path.join(d, "model.pth"))
    w.case("swinv2_tv_pth", "forward", "swinv2_tv_pth/model.pth", checks=ALL)


def vit_cases(w):
    # timm's names, a standard width (192: 3 heads, vit_tiny's)
    hp = vit_hp()
    m = timm_vit(common.seed_of("vit_timm_pth"), hp)
    d = w.expected("vit_timm_pth", m, images(9, 2, 32),
                   inspect_of("vit", "timm", hp, VIT_KEYS))
    w.save(m.state_dict(), os.path.join(d, "model.pth"))
    w.case("vit_timm_pth", "forward", "vit_timm_pth/model.pth", checks=ALL)

    # torchvision's names (vit_b_16's layout), .pth and plain safetensors
    m = torchvision_vit(common.seed_of("vit_tv_pth"), hp)
    d = w.expected("vit_tv_pth", m, images(10, 2, 32),
                   inspect_of("vit", "torchvision", hp, VIT_KEYS))
    w.save(m.state_dict(), os.path.join(d, "model.pth"))
    w.case("vit_tv_pth", "forward", "vit_tv_pth/model.pth", checks=ALL)

    m = torchvision_vit(common.seed_of("vit_tv_st"), hp)
    d = w.expected("vit_tv_st", m, images(11, 2, 32),
                   inspect_of("vit", "torchvision", hp, VIT_KEYS))
    st.write(os.path.join(d, "model.safetensors"), st_tensors(m.state_dict()))
    w.case("vit_tv_st", "forward", "vit_tv_st/model.safetensors", checks=ALL)

    # a width with no known head count: --set num_heads= says it (without,
    # the refusal below)
    hp80 = vit_hp(embed_dim=80, num_heads=5)
    m = timm_vit(common.seed_of("vit_w80_set"), hp80)
    d = w.expected("vit_w80_set", m, images(12, 2, 32),
                   inspect_of("vit", "timm", hp80, VIT_KEYS))
    w.save(m.state_dict(), os.path.join(d, "model.pth"))
    w.case("vit_w80_set", "forward", "vit_w80_set/model.pth", checks=ALL,
           args=["--set", "num_heads=5"])
    w.case("refuse_ambiguous_heads", "refuse", "vit_w80_set/model.pth",
           expect="--set num_heads=")


def hf_cases(w):
    """transformers' folders: config.json and the weights under its names;
    the expected logits are the official / timm twin's."""
    # Swin, pytorch_model.bin; query / key / value are views of the fused
    # qkv tensor, so the file's storages are shared at offsets
    hp = swin_hp()
    m = official_swin(common.seed_of("hf_swin_bin"), hp)
    src = {"config.json": ["img_size", "window_size"]}
    d = w.expected("hf_swin_bin", m, images(13, 2, 56),
                   inspect_of("swin", HF_SCHEME, hp, SWIN_KEYS + ["img_size"], src))
    folder = os.path.join(d, "model")
    os.makedirs(folder, exist_ok=True)
    sd = hf_swin_names(m.state_dict())
    write_json(os.path.join(folder, "config.json"), hf_swin_config(hp))
    w.save(sd, os.path.join(folder, "pytorch_model.bin"))
    w.hf_checks.append(("hf_swin_bin", sd, m.state_dict(), official_from_hf_swin))
    write_json(os.path.join(folder, "preprocessor_config.json"),
               hf_preprocessor(56, IMAGENET_MEAN, IMAGENET_STD))
    w.classify("hf_swin_bin", m, 56, IMAGENET_MEAN, IMAGENET_STD, 14, labels_of(10))
    w.case("hf_swin_bin", "forward", "hf_swin_bin/model", checks=ALL + ("classify",))

    # Swin, model.safetensors (with the {"format": "pt"} metadata
    # save_pretrained writes): four stages, patch 2, window 4
    hp = swin_hp(img_size=64, patch_size=2, embed_dim=16, depths=[1, 1, 2, 1],
                 num_heads=[1, 2, 2, 4], window_size=4)
    m = official_swin(common.seed_of("hf_swin_st"), hp)
    d = w.expected("hf_swin_st", m, images(15, 2, 64),
                   inspect_of("swin", HF_SCHEME, hp, SWIN_KEYS + ["img_size"], src))
    folder = os.path.join(d, "model")
    os.makedirs(folder, exist_ok=True)
    sd = hf_swin_names(m.state_dict())
    write_json(os.path.join(folder, "config.json"), hf_swin_config(hp))
    st.write(os.path.join(folder, "model.safetensors"), st_tensors(sd), {"format": "pt"})
    w.hf_checks.append(("hf_swin_st", sd, m.state_dict(), official_from_hf_swin))
    w.case("hf_swin_st", "forward", "hf_swin_st/model", checks=ALL)

    # SwinV2: nothing in transformers' state_dict says the window (no
    # coordinate table, no index): config.json does
    hp = swinv2_hp()
    m = official_swinv2(common.seed_of("hf_swinv2_st"), hp)
    d = w.expected("hf_swinv2_st", m, images(16, 2, 64),
                   inspect_of("swinv2", HF_SCHEME, hp, SWIN_KEYS + ["img_size"], src))
    folder = os.path.join(d, "model")
    os.makedirs(folder, exist_ok=True)
    sd = hf_swin_names(m.state_dict(), v2=True)
    write_json(os.path.join(folder, "config.json"), hf_swin_config(hp, v2=True))
    st.write(os.path.join(folder, "model.safetensors"), st_tensors(sd), {"format": "pt"})
    w.hf_checks.append(("hf_swinv2_st", sd, m.state_dict(),
                        lambda s: official_from_hf_swin(s, v2=True)))
    w.case("hf_swinv2_st", "forward", "hf_swinv2_st/model", checks=ALL)

    hf_vit_cases(w)


def hf_vit_cases(w):
    # ViT: a width with no known head count (80: 5 heads), mlp_ratio 2.5
    # (intermediate_size 200), LayerNorm eps 1e-12 as ViTConfig has it
    hp = vit_hp(embed_dim=80, num_heads=5, mlp_ratio=2.5)
    m = timm_vit(common.seed_of("hf_vit_st"), hp, ln_eps=1e-12)
    src = {"config.json": ["num_heads"]}
    d = w.expected("hf_vit_st", m, images(17, 2, 32),
                   inspect_of("vit", HF_SCHEME, hp, VIT_KEYS, src))
    folder = os.path.join(d, "model")
    os.makedirs(folder, exist_ok=True)
    sd = hf_vit_names(m.state_dict())
    write_json(os.path.join(folder, "config.json"), hf_vit_config(hp))
    st.write(os.path.join(folder, "model.safetensors"), st_tensors(sd), {"format": "pt"})
    w.hf_checks.append(("hf_vit_st", sd, m.state_dict(), timm_from_hf_vit))
    # google/vit-base-patch16-224's normalisation: mean and std 0.5
    half = (0.5, 0.5, 0.5)
    write_json(os.path.join(folder, "preprocessor_config.json"), hf_preprocessor(32, half, half))
    w.classify("hf_vit_st", m, 32, half, half, 18, labels_of(10))
    w.case("hf_vit_st", "forward", "hf_vit_st/model", checks=ALL + ("classify",))

    # a standard width (192) whose config says 4 heads, not vit_tiny's 3:
    # the config wins; pytorch_model.bin with separate (cloned) tensors
    hp = vit_hp(num_heads=4)
    m = timm_vit(common.seed_of("hf_vit_bin"), hp, ln_eps=1e-12)
    d = w.expected("hf_vit_bin", m, images(19, 2, 32),
                   inspect_of("vit", HF_SCHEME, hp, VIT_KEYS, src))
    folder = os.path.join(d, "model")
    os.makedirs(folder, exist_ok=True)
    sd = collections.OrderedDict((k, v.clone()) for k, v in hf_vit_names(m.state_dict()).items())
    write_json(os.path.join(folder, "config.json"), hf_vit_config(hp))
    w.save(sd, os.path.join(folder, "pytorch_model.bin"))
    w.hf_checks.append(("hf_vit_bin", sd, m.state_dict(), timm_from_hf_vit))
    w.case("hf_vit_bin", "forward", "hf_vit_bin/model", checks=ALL)


def timm_folder_cases(w):
    """timm's hub layout: config.json and model.safetensors under timm's
    names; the small models are registered names with model_args."""
    hp = swin_hp()
    m = official_swin(common.seed_of("timm_swin_folder"), hp)
    src = {"config.json": ["img_size"]}
    d = w.expected("timm_swin_folder", m, images(20, 2, 56),
                   inspect_of("swin", "timm", hp, SWIN_KEYS + ["img_size"], src))
    folder = os.path.join(d, "model")
    os.makedirs(folder, exist_ok=True)
    args = dict(img_size=56, patch_size=4, window_size=7, embed_dim=32, depths=[2, 2],
                num_heads=[2, 4], num_features=64)
    write_json(os.path.join(folder, "config.json"),
               timm_config("swin_tiny_patch4_window7_224", hp, args, IMAGENET_MEAN,
                           IMAGENET_STD, "head.fc", 56, pool=7))
    st.write(os.path.join(folder, "model.safetensors"),
             st_tensors(export.timm_names(m.state_dict())), {"format": "pt"})
    w.case("timm_swin_folder", "forward", "timm_swin_folder/model", checks=ALL)

    # ViT of width 80: the heads come from model_args; mean and std 0.5 from
    # pretrained_cfg (classify must use them)
    hp = vit_hp(embed_dim=80, num_heads=5)
    m = timm_vit(common.seed_of("timm_vit_folder"), hp)
    d = w.expected("timm_vit_folder", m, images(21, 2, 32),
                   inspect_of("vit", "timm", hp, VIT_KEYS, {"config.json": ["num_heads"]}))
    folder = os.path.join(d, "model")
    os.makedirs(folder, exist_ok=True)
    args = dict(img_size=32, patch_size=8, embed_dim=80, depth=2, num_heads=5,
                num_features=80)
    half = (0.5, 0.5, 0.5)
    write_json(os.path.join(folder, "config.json"),
               timm_config("vit_tiny_patch16_224", hp, args, half, half, "head", 32))
    st.write(os.path.join(folder, "model.safetensors"), st_tensors(m.state_dict()),
             {"format": "pt"})
    w.classify("timm_vit_folder", m, 32, half, half, 22)
    w.case("timm_vit_folder", "forward", "timm_vit_folder/model", checks=ALL + ("classify",))


class RunsACommand:
    """Unpickling this calls os.system (posix.system): what a malicious
    checkpoint does. The command only creates a file the test looks for."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch '%s'" % self.marker,))


def refusal_cases(w):
    hp = swin_hp()
    m = official_swin(common.seed_of("refusals"), hp)
    sd = m.state_dict()

    d = w.dir("refuse_pickle_global")
    marker = os.path.join(d, "EXECUTED")
    torch.save({"model": sd, "hook": RunsACommand(marker)}, os.path.join(d, "model.pth"))
    w.case("refuse_pickle_global", "refuse", "refuse_pickle_global/model.pth", expect="system")

    d = w.dir("refuse_truncated_zip")
    good = os.path.join(d, "whole.pth")
    torch.save({"model": sd}, good)
    with open(good, "rb") as f:
        blob = f.read()
    os.unlink(good)
    with open(os.path.join(d, "model.pth"), "wb") as f:
        f.write(blob[:len(blob) * 2 // 3])
    w.case("refuse_truncated_zip", "refuse", "refuse_truncated_zip/model.pth")

    d = w.dir("refuse_complex64")
    bad = collections.OrderedDict(sd)
    bad["head.weight"] = torch.complex(sd["head.weight"], torch.zeros_like(sd["head.weight"]))
    w.save({"model": bad}, os.path.join(d, "model.pth"))
    w.case("refuse_complex64", "refuse", "refuse_complex64/model.pth", expect="complex")

    # one tensor of a block gone; the block's other tensors still there
    d = w.dir("refuse_missing_tensor")
    missing = "layers.1.blocks.1.norm2.weight"
    w.save({"model": collections.OrderedDict((k, v) for k, v in sd.items() if k != missing)},
           os.path.join(d, "model.pth"))
    w.case("refuse_missing_tensor", "refuse", "refuse_missing_tensor/model.pth",
           expect="norm2.weight")

    # torch.save before PyTorch 1.6: a pickle stream, not a zip
    d = w.dir("refuse_legacy_format")
    w.save({"model": sd}, os.path.join(d, "model.pth"), _use_new_zipfile_serialization=False)
    w.case("refuse_legacy_format", "refuse", "refuse_legacy_format/model.pth")

    # every refusal runs on a valid input
    st.write(os.path.join(w.out, "refusal_input.safetensors"), {"x": images(23, 1, 56)})


# --------------------------------------------------------------------------
# Reading back
# --------------------------------------------------------------------------

def same(a, b, where):
    """a == b, tensors exactly (dtype, shape, values), containers by key."""
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a, b)):
            raise AssertionError("%s differs after reading back" % where)
    elif isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            raise AssertionError("%s: keys differ after reading back" % where)
        for k in a:
            same(a[k], b[k], "%s[%r]" % (where, k))
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            raise AssertionError("%s: lengths differ" % where)
        for i, (u, v) in enumerate(zip(a, b)):
            same(u, v, "%s[%d]" % (where, i))
    elif isinstance(a, argparse.Namespace):
        same(vars(a), vars(b), where)
    elif a != b:
        raise AssertionError("%s: %r != %r" % (where, a, b))


def verify(w):
    """torch.load gives back every checkpoint as written; the transformers
    names map back to the originals exactly; PyTorch's own safe loader
    refuses the command-running pickle (and it ran nothing)."""
    for path, obj in w.saved:
        same(obj, torch.load(path, map_location="cpu"), os.path.relpath(path, w.out))
    for name, hf_sd, orig, inverse in w.hf_checks:
        back = inverse(hf_sd)
        kept = collections.OrderedDict(
            (k, v) for k, v in orig.items()
            if not k.endswith("attn_mask") and not (
                name.startswith("hf_swinv2") and (k.endswith("relative_coords_table")
                                                  or k.endswith("relative_position_index"))))
        if sorted(back) != sorted(kept):
            raise AssertionError("%s: names differ after mapping back: %s" % (
                name, sorted(set(back) ^ set(kept))[:5]))
        for k in kept:
            same(kept[k], back[k], "%s: %s" % (name, k))
    d = os.path.join(w.out, "refuse_pickle_global")
    try:
        torch.load(os.path.join(d, "model.pth"), weights_only=True)
        raise AssertionError("torch.load(weights_only=True) took the os.system pickle")
    except __import__("pickle").UnpicklingError:
        pass
    if os.path.exists(os.path.join(d, "EXECUTED")):
        raise AssertionError("the os.system pickle ran")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="directory to write (created)")
    args = ap.parse_args()
    common.setup()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    w = Writer(args.out)
    for part in (swin_cases, timm_cases, swin_full, swinv2_cases, vit_cases, hf_cases,
                 timm_folder_cases, refusal_cases):
        part(w)
    w.finish()
    verify(w)
    print("%s: %d cases in %.1f s (read back: %d checkpoints, %d transformers mappings)"
          % (args.out, len(w.lines), time.time() - t0, len(w.saved), len(w.hf_checks)))


if __name__ == "__main__":
    main()
