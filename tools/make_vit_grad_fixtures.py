"""Autograd fixtures of whole ViT models for tests/test_vit_grad.c.

    /usr/bin/python3 tools/fixtures.py vit_grad [-o tests/fixtures]

For each case NAME it writes, with tools/st.py:

  vit_grad_NAME.model.safetensors  the model file (tools/vit_twin.py's
                                   export_vit), timm or torchvision names
  vit_grad_NAME.grad.safetensors   x (B, in_chans, H, W), dy (the shape of
                                   y), y = model(x), grad.x = dL/dx and
                                   grad.NAME = dL/dNAME for every parameter
                                   NAME of the model file, for the loss
                                   L = sum(y * dy)
  vit_grads.txt                    the case names (with the vit_grad_ prefix)

The timm-named cases differentiate tools/vit_twin.py's VisionTransformer,
the torchvision case torchvision's own VisionTransformer (its
nn.MultiheadAttention). Weights are random but non-trivial
(vit_twin.randomize_); the gradients are computed in float64 from the
float32 weights and inputs (the reference is then exact to float32), one
thread, seeded per case. Every file stays well under 200 KB.
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
    # class token pooling, qkv bias (the required keys' usual values), rectangular-free small
    "token": (dict(img_size=16, patch_size=4, in_chans=3, num_classes=5,
                   embed_dim=24, depth=2, num_heads=2, mlp_ratio=2.0,
                   qkv_bias=True), 2, (16, 16)),
    # timm's Attention without qkv bias, mean pooling with fc_norm
    "avg_nobias": (dict(img_size=(16, 24), patch_size=8, in_chans=2,
                        num_classes=4, embed_dim=24, depth=2, num_heads=3,
                        mlp_ratio=1.5, qkv_bias=False, global_pool="avg"),
                   3, (16, 24)),
    # everything else the arch computes: dynamic_img_size (pos_embed
    # resampled 4x4 -> 3x5), a register token, no pos_embed on the prefix,
    # pre-norm, LayerScale, max pooling with the final norm, no proj/mlp
    # bias
    "opts": (dict(img_size=16, patch_size=4, in_chans=1, num_classes=3,
                  embed_dim=16, depth=2, num_heads=2, mlp_ratio=2.0,
                  qkv_bias=True, dynamic_img_size=True, reg_tokens=1,
                  no_embed_class=True, pre_norm=True, init_values=0.5,
                  global_pool="max", fc_norm=False, proj_bias=False),
             2, (12, 20)),
    # no class token, avgmax over all tokens, padded input, num_classes 0
    # (the pooled, fc_norm'ed features are the output)
    "feat": (dict(img_size=14, patch_size=4, in_chans=3, num_classes=0,
                  embed_dim=16, depth=1, num_heads=2, mlp_ratio=4.0,
                  qkv_bias=False, class_token=False, reg_tokens=1,
                  global_pool="avgmax", pool_include_prefix=True,
                  dynamic_img_pad=True), 2, (14, 14)),
    # no pooling: logits for every token, y (B, N, num_classes); dynamic
    # size upsampled 2x2 -> 3x2
    "seq": (dict(img_size=16, patch_size=8, in_chans=3, num_classes=4,
                 embed_dim=16, depth=1, num_heads=4, mlp_ratio=4.0,
                 qkv_bias=True, global_pool="", dynamic_img_size=True),
            2, (24, 16)),
}

# name -> (torchvision VisionTransformer arguments, batch)
TV_CASES = {
    "tv": (dict(image_size=16, patch_size=4, num_layers=2, num_heads=2,
                hidden_dim=24, mlp_dim=48, num_classes=6), 2),
}


def run(out, name, model, hparams, scheme, x, seed):
    """Export model (float32), then differentiate a float64 copy."""
    sd = vit_twin.vit_state_dict(model, scheme)
    model = model.double()
    xd = x.double().requires_grad_(True)
    y = model(xd)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed + 3))
    (y * dy.double()).sum().backward()
    tensors = {"x": x, "dy": dy, "y": y.detach().float(), "grad.x": xd.grad.float()}
    for pname, p in model.named_parameters():
        tensors["grad." + pname] = p.grad.float()
    write_case(out, "vit_grad_" + name, model=sd, meta=vit_twin.vit_metadata(hparams),
               grad=tensors, scheme=scheme)
    return "vit_grad_" + name


def write_fixtures(out):
    """The vit_grad family of tools/fixtures.py."""
    names = []
    for name, (kw, batch, (h, w)) in TIMM_CASES.items():
        s = seed_of("grad_" + name)
        torch.manual_seed(s)
        model = vit_twin.randomize_(vit_twin.VisionTransformer(**kw), s).train()
        x = torch.randn(batch, kw["in_chans"], h, w,
                        generator=torch.Generator().manual_seed(s + 1))
        names.append(run(out, name, model, model.hparams, "timm", x, s))
    for name, (kw, batch) in TV_CASES.items():
        s = seed_of("grad_" + name)
        model = vit_twin.torchvision_vit("custom", s, **kw)
        vit_twin.randomize_(model, s)
        model.eval()   # dropout rates are 0; eval keeps MultiheadAttention's math path
        s_img = kw["image_size"]
        x = torch.randn(batch, 3, s_img, s_img, generator=torch.Generator().manual_seed(s + 1))
        names.append(run(out, name, model, vit_twin.torchvision_hparams(model),
                         "torchvision", x, s))
    write_list(out, "vit_grads.txt", names)
    for n in names:
        for sfx in (".model.safetensors", ".grad.safetensors"):
            size = os.path.getsize(os.path.join(out, n + sfx))
            assert size < 200 * 1024, "%s%s is %d bytes" % (n, sfx, size)
    return len(names)


if __name__ == "__main__":
    import fixtures
    fixtures.script_main({"vit_grad": ["vit_grad"]})
