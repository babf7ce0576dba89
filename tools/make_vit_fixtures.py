"""Fixtures of whole ViT models for tests/test_vit.c.

    /usr/bin/python3 tools/fixtures.py vit [-o tests/fixtures]

For each case NAME it writes, with tools/st.py:

  vit_net_NAME.model.safetensors     the model file (tools/vit_twin.py's
                                     export_vit: state_dict + the
                                     metadata of docs/reference.md,
                                     section 2), timm or torchvision names
  vit_net_NAME.input.safetensors     x (B, in_chans, H, W) images
  vit_net_NAME.expected.safetensors  y, the PyTorch output (logits, or
                                     features for num_classes 0); metadata
                                     "scheme": the naming scheme relattn
                                     must detect
  vit_nets.txt                       the case names (with the vit_net_ prefix)

The timm-named cases run tools/vit_twin.py's VisionTransformer (timm's
semantics); the torchvision cases run torchvision's own VisionTransformer
class with small hyperparameters (and assert that the twin, given the same
weights under timm's names, computes the same logits). Weights are random
but non-trivial (vit_twin.randomize_), everything float32 on one thread,
seeded per case.
"""

import os
import sys

import torch

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vit_twin  # noqa: E402
from common import seed_of, write_case, write_list  # noqa: E402

# name -> (timm constructor arguments, batch, input size (H, W))
TIMM_CASES = {
    # the usual values: class token, qkv bias, token pooling
    "token": (dict(img_size=32, patch_size=8, in_chans=3, num_classes=10,
                   embed_dim=32, depth=2, num_heads=2, mlp_ratio=4.0,
                   qkv_bias=True), 2, (32, 32)),
    # ViT's seed Attention without qkv bias; non-integer-looking mlp ratio
    "nobias": (dict(img_size=32, patch_size=8, in_chans=3, num_classes=10,
                    embed_dim=40, depth=3, num_heads=4, mlp_ratio=1.5,
                    qkv_bias=False), 2, (32, 32)),
    # mean over the patch tokens, fc_norm instead of norm (timm's avg)
    "avg": (dict(img_size=32, patch_size=8, in_chans=3, num_classes=10,
                 embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0,
                 qkv_bias=True, global_pool="avg"), 2, (32, 32)),
    # non-square image, patch 4
    "rect": (dict(img_size=(16, 24), patch_size=4, in_chans=2, num_classes=7,
                  embed_dim=24, depth=2, num_heads=3, mlp_ratio=2.0,
                  qkv_bias=True), 2, (16, 24)),
    # dynamic_img_size: pos_embed resampled up (4x4 -> 6x5) ...
    "dyn_up": (dict(img_size=32, patch_size=8, in_chans=3, num_classes=10,
                    embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0,
                    qkv_bias=True, dynamic_img_size=True), 2, (48, 40)),
    # ... and down with antialiasing (8x8 -> 3x5), register tokens, no
    # pos_embed on the prefix, pre-norm, LayerScale, max pooling with
    # norm (fc_norm false), no proj/mlp bias
    "dyn_opts": (dict(img_size=32, patch_size=4, in_chans=1, num_classes=5,
                      embed_dim=16, depth=2, num_heads=2, mlp_ratio=2.0,
                      qkv_bias=True, dynamic_img_size=True, reg_tokens=2,
                      no_embed_class=True, pre_norm=True, init_values=0.5,
                      global_pool="max", fc_norm=False, proj_bias=False),
                 2, (12, 20)),
    # no class token, avgmax pooling over all tokens, padded input,
    # num_classes 0: the pooled (fc_norm'ed) features are the output
    "feat": (dict(img_size=30, patch_size=8, in_chans=3, num_classes=0,
                  embed_dim=16, depth=1, num_heads=2, mlp_ratio=4.0,
                  qkv_bias=False, class_token=False, reg_tokens=1,
                  global_pool="avgmax", pool_include_prefix=True,
                  dynamic_img_pad=True), 3, (30, 30)),
    # no pooling: logits for every token, y (B, N, num_classes)
    "seq": (dict(img_size=16, patch_size=8, in_chans=3, num_classes=4,
                 embed_dim=16, depth=1, num_heads=4, mlp_ratio=4.0,
                 qkv_bias=True, global_pool=""), 2, (16, 16)),
}

# name -> (torchvision VisionTransformer arguments, batch)
TV_CASES = {
    "tv": (dict(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                hidden_dim=32, mlp_dim=64, num_classes=10), 2),
    "tv_deep": (dict(image_size=16, patch_size=4, num_layers=3, num_heads=2,
                     hidden_dim=16, mlp_dim=48, num_classes=6), 1),
}


def run(out, name, model, hparams, scheme, x):
    with torch.no_grad():
        y = model(x)
    write_case(out, "vit_net_" + name, model=vit_twin.vit_state_dict(model, scheme),
               meta=vit_twin.vit_metadata(hparams), input={"x": x}, expected={"y": y},
               scheme=scheme)
    return "vit_net_" + name


def write_fixtures(out):
    """The vit family of tools/fixtures.py."""
    names = []
    for name, (kw, batch, (h, w)) in TIMM_CASES.items():
        s = seed_of(name)
        torch.manual_seed(s)
        model = vit_twin.randomize_(vit_twin.VisionTransformer(**kw), s).eval()
        x = torch.randn(batch, kw["in_chans"], h, w, generator=torch.Generator().manual_seed(s + 1))
        names.append(run(out, name, model, model.hparams, "timm", x))
    for name, (kw, batch) in TV_CASES.items():
        s = seed_of(name)
        model = vit_twin.torchvision_vit("custom", s, **kw)
        vit_twin.randomize_(model, s)
        s_img = kw["image_size"]
        x = torch.randn(batch, 3, s_img, s_img, generator=torch.Generator().manual_seed(s + 1))
        hp = vit_twin.torchvision_hparams(model)
        # the twin computes torchvision's function on the same weights
        twin = vit_twin.VisionTransformer(**hp).eval()
        twin.load_state_dict(vit_twin.timm_state_dict_from_torchvision(model.state_dict()))
        with torch.no_grad():
            err = (twin(x) - model(x)).abs().max().item()
        assert err < 1e-5, "twin and torchvision differ by %g on %s" % (err, name)
        names.append(run(out, name, model, hp, "torchvision", x))
    write_list(out, "vit_nets.txt", names)
    return len(names)


if __name__ == "__main__":
    import fixtures
    fixtures.script_main({"vit": ["vit"]})
