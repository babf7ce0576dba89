"""The PyTorch twin of relattn's layers and optimiser: writes the fixtures of
tests/test_nn.c.

Run with Debian's python3-torch (only /usr/bin/python3 has it):

    /usr/bin/python3 tools/fixtures.py nn [-o tests/fixtures]

Each case is one safetensors file (tools/st.py) named nn_NAME.safetensors
holding the inputs, the outputs, the upstream gradient `dy` (or `dloss`) and
the autograd gradients `grad.INPUT`; scalar settings (eps, patch size, ...)
are in __metadata__.

  nn_linear             torch.nn.functional.linear
  nn_layernorm_swin     torch.nn.functional.layer_norm, eps 1e-5 (Swin)
  nn_layernorm_vit      eps 1e-6 (timm ViT), variance ~1e-5 so eps matters
  nn_gelu               torch.nn.functional.gelu (exact erf form)
  nn_ce_plain           torch.nn.functional.cross_entropy, mean
  nn_ce_smooth          the same with label_smoothing 0.1 and dloss 0.7
  nn_patch_embed        Conv2d(k = stride = P) + flatten(2).transpose(1, 2)
  nn_patch_embed_pad    the same after Swin's zero padding bottom/right
  nn_patch_embed_k*     overlapping: Conv2d(k, stride P, padding (k - P) / 2)
  nn_patch_merge_even   Swin's PatchMerging gather, even H, W
  nn_patch_merge_odd    odd H, W, zero-padded as the detection backbone
  nn_mean_tokens        x.mean(1)
  nn_adamw              5 steps of clip_grad_norm_ + torch.optim.AdamW with
                        Swin's two parameter groups (decay / no decay) and
                        timm's cosine schedule with warm-up (re-implemented
                        below: timm is not installed; formula as
                        timm/scheduler/cosine_lr.py), the parameters after
                        every step, and tables of the schedule
  nn_rng                the first outputs of xoshiro256** seeded by
                        splitmix64, from an independent Python version

Everything is float32, one thread, seeded, so the output is deterministic.
"""

import math
import os
import sys

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from common import M64, Rng  # noqa: E402


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def save(out_dir, name, tensors, meta=None):
    path = os.path.join(out_dir, "nn_%s.safetensors" % name)
    clean = {k: (v.detach().contiguous() if isinstance(v, torch.Tensor) else v)
             for k, v in tensors.items()}
    return st.write(path, clean, meta or {})


# --------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------

def case_linear(out):
    torch.manual_seed(101)
    x, w, b = leaf(torch.randn(5, 7)), leaf(0.3 * torch.randn(6, 7)), leaf(torch.randn(6))
    y = F.linear(x, w, b)
    dy = torch.randn_like(y)
    y.backward(dy)
    return save(out, "linear", {"x": x, "weight": w, "bias": b, "y": y, "dy": dy,
                                "grad.x": x.grad, "grad.weight": w.grad,
                                "grad.bias": b.grad})


def case_layernorm(out, name, shape, eps, offset, scale):
    torch.manual_seed(202 if eps == 1e-5 else 203)
    c = shape[-1]
    x = leaf(offset + scale * torch.randn(*shape))
    g, b = leaf(1.0 + 0.5 * torch.randn(c)), leaf(0.5 * torch.randn(c))
    y = F.layer_norm(x, (c,), g, b, eps)
    dy = torch.randn_like(y)
    y.backward(dy)
    return save(out, name, {"x": x, "weight": g, "bias": b, "y": y, "dy": dy,
                            "grad.x": x.grad, "grad.weight": g.grad,
                            "grad.bias": b.grad}, {"eps": repr(eps)})


def case_gelu(out):
    torch.manual_seed(303)
    x = leaf(torch.cat([torch.linspace(-8.0, 8.0, 161), 3.0 * torch.randn(95)]))
    y = F.gelu(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    return save(out, "gelu", {"x": x, "y": y, "dy": dy, "grad.x": x.grad})


def case_ce(out, name, b, k, smoothing, dloss):
    torch.manual_seed(404 + int(smoothing * 100))
    logits = leaf(3.0 * torch.randn(b, k))
    targets = torch.randint(0, k, (b,), dtype=torch.int64)
    loss = F.cross_entropy(logits, targets, label_smoothing=smoothing)
    loss.backward(torch.tensor(dloss))
    return save(out, name, {"logits": logits, "targets": targets.to(torch.int32),
                            "loss": loss.reshape(1),
                            "probs": torch.softmax(logits, dim=1),
                            "dloss": torch.tensor([dloss]),
                            "grad.logits": logits.grad},
                {"smoothing": repr(smoothing)})


def case_patch_embed(out, name, b, cin, h, w, p, e, k=None):
    """k: an overlapping embedding (relattn's patch_kernel): Conv2d(k,
    stride p, padding (k - p) / 2) after the same bottom/right padding."""
    torch.manual_seed(505 + h * 100 + w + (k or 0))
    k = k or p
    x = leaf(torch.randn(b, cin, h, w))
    wt, bias = leaf(0.2 * torch.randn(e, cin, k, k)), leaf(torch.randn(e))
    xp = x
    # Swin's PatchEmbed (detection / video): pad bottom/right to a multiple of P
    if w % p:
        xp = F.pad(xp, (0, p - w % p))
    if h % p:
        xp = F.pad(xp, (0, 0, 0, p - h % p))
    y = F.conv2d(xp, wt, bias, stride=p, padding=(k - p) // 2).flatten(2).transpose(1, 2)
    dy = torch.randn_like(y)
    y.backward(dy)
    return save(out, name, {"x": x, "weight": wt, "bias": bias, "y": y, "dy": dy,
                            "grad.x": x.grad, "grad.weight": wt.grad,
                            "grad.bias": bias.grad},
                {"patch_size": str(p), "pad": "true" if (h % p or w % p) else "false",
                 **({"patch_kernel": str(k)} if k != p else {})})


def patch_merge(x):
    """Swin's PatchMerging.forward up to the norm, with the padding of the
    detection backbone; x (B, H, W, C) -> (B, ceil(H/2)*ceil(W/2), 4C)."""
    B, H, W, C = x.shape
    if H % 2 or W % 2:
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
    x0 = x[:, 0::2, 0::2, :]
    x1 = x[:, 1::2, 0::2, :]
    x2 = x[:, 0::2, 1::2, :]
    x3 = x[:, 1::2, 1::2, :]
    x = torch.cat([x0, x1, x2, x3], -1)
    return x.view(B, -1, 4 * C)


def case_patch_merge(out, name, b, h, w, c):
    torch.manual_seed(606 + h * 10 + w)
    x = leaf(torch.randn(b, h, w, c))
    y = patch_merge(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    return save(out, name, {"x": x, "y": y, "dy": dy, "grad.x": x.grad})


def case_mean_tokens(out):
    torch.manual_seed(707)
    x = leaf(torch.randn(3, 5, 4) + 2.0)
    y = x.mean(1)
    dy = torch.randn_like(y)
    y.backward(dy)
    return save(out, "mean_tokens", {"x": x, "y": y, "dy": dy, "grad.x": x.grad})


# --------------------------------------------------------------------------
# Optimiser
# --------------------------------------------------------------------------

def lr_cosine(t, total, warmup, base_lr, min_lr, warmup_lr, warmup_prefix):
    """timm CosineLRScheduler._get_lr(t) as Swin's build_scheduler configures
    it (cycle_limit=1, cycle_mul=1, cycle_decay=1, k_decay=1, no noise,
    t_initial = total - warmup if warmup_prefix else total), in the same
    operation order."""
    t_initial = total - warmup if warmup_prefix else total
    if t < warmup:
        return warmup_lr + t * ((base_lr - warmup_lr) / warmup)
    if warmup_prefix:
        t = t - warmup
    i = t // t_initial
    t_curr = t - t_initial * i
    if i < 1:
        return min_lr + 0.5 * (base_lr - min_lr) * (
            1 + math.cos(math.pi * t_curr ** 1.0 / t_initial ** 1.0))
    return min_lr


NO_DECAY_PARTS = ("norm", "relative_position_bias_table", "absolute_pos_embed",
                  "cls_token", "pos_embed", "relative_keys", "relative_values")


def no_decay(name):
    return name.endswith(".bias") or any(p in name for p in NO_DECAY_PARTS)


def case_adamw(out):
    torch.manual_seed(808)
    shapes = [("layers.0.blocks.0.attn.qkv.weight", (12, 4)),
              ("layers.0.blocks.0.attn.qkv.bias", (12,)),
              ("layers.0.blocks.0.norm1.weight", (4,)),
              ("layers.0.blocks.0.attn.relative_position_bias_table", (9, 2)),
              ("head.weight", (3, 4))]
    params = {n: torch.nn.Parameter(0.5 * torch.randn(*s)) for n, s in shapes}
    hp = dict(lr=5e-2, weight_decay=0.05, betas=(0.9, 0.999), eps=1e-8,
              max_norm=2.0, total=6, warmup=2, warmup_lr=5e-3, min_lr=1e-3,
              warmup_prefix=True)
    decay = [params[n] for n, _ in shapes if not no_decay(n)]
    rest = [params[n] for n, _ in shapes if no_decay(n)]
    opt = torch.optim.AdamW([{"params": decay},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=hp["lr"], betas=hp["betas"], eps=hp["eps"],
                            weight_decay=hp["weight_decay"])
    tensors = {"param.%s" % n: params[n].detach().clone() for n, _ in shapes}
    # gradient scales so that some steps clip and some do not
    scales = [0.5, 3.0, 0.2, 5.0, 1.0]
    norms, lrs = [], []
    for step, sc in enumerate(scales):
        lr = lr_cosine(step, hp["total"], hp["warmup"], hp["lr"], hp["min_lr"],
                       hp["warmup_lr"], hp["warmup_prefix"])
        for g in opt.param_groups:
            g["lr"] = lr
        for n, s in shapes:
            g = sc * torch.randn(*s)
            tensors["grad.%d.%s" % (step, n)] = g.clone()
            params[n].grad = g
        norm = torch.nn.utils.clip_grad_norm_([params[n] for n, _ in shapes],
                                              hp["max_norm"])
        opt.step()
        norms.append(float(norm))
        lrs.append(lr)
        for n, _ in shapes:
            tensors["param.%d.%s" % (step, n)] = params[n].detach().clone()
    tensors["grad_norm"] = torch.tensor(norms, dtype=torch.float32)
    tensors["lr"] = torch.tensor(lrs, dtype=torch.float64)
    # schedule tables, both warm-up conventions, past the end
    tensors["lr_table.prefix"] = torch.tensor(
        [lr_cosine(t, 10, 3, 1e-3, 1e-5, 1e-6, True) for t in range(14)], dtype=torch.float64)
    tensors["lr_table.noprefix"] = torch.tensor(
        [lr_cosine(t, 10, 3, 1e-3, 1e-5, 1e-6, False) for t in range(14)], dtype=torch.float64)
    tensors["lr_table.nowarmup"] = torch.tensor(
        [lr_cosine(t, 7, 0, 2e-3, 0.0, 0.0, True) for t in range(9)], dtype=torch.float64)
    meta = {"names": ",".join(n for n, _ in shapes),
            "no_decay": ",".join("1" if no_decay(n) else "0" for n, _ in shapes),
            "steps": str(len(scales)), "lr": repr(hp["lr"]),
            "weight_decay": repr(hp["weight_decay"]), "beta1": repr(hp["betas"][0]),
            "beta2": repr(hp["betas"][1]), "eps": repr(hp["eps"]),
            "max_norm": repr(hp["max_norm"]), "total": str(hp["total"]),
            "warmup": str(hp["warmup"]), "warmup_lr": repr(hp["warmup_lr"]),
            "min_lr": repr(hp["min_lr"]), "warmup_prefix": "true"}
    return save(out, "adamw", tensors, meta)


# --------------------------------------------------------------------------
# The generator's stream, independently
# --------------------------------------------------------------------------

def xoshiro256ss(seed, n):
    r = Rng(seed)
    return [r.u64() for _ in range(n)]


def as_i64(values):
    return torch.tensor([v - (1 << 64) if v >> 63 else v for v in values], dtype=torch.int64)


def case_rng(out):
    return save(out, "rng", {"seed0": as_i64(xoshiro256ss(0, 8)),
                             "seed42": as_i64(xoshiro256ss(42, 8)),
                             "seed_max": as_i64(xoshiro256ss(M64, 8))})


def write_fixtures(out):
    """The nn family of tools/fixtures.py."""
    total = 0
    total += case_linear(out)
    total += case_layernorm(out, "layernorm_swin", (2, 5, 24), 1e-5, 0.5, 2.0)
    total += case_layernorm(out, "layernorm_vit", (7, 32), 1e-6, 0.001, 0.003)
    total += case_gelu(out)
    total += case_ce(out, "ce_plain", 6, 10, 0.0, 1.0)
    total += case_ce(out, "ce_smooth", 6, 10, 0.1, 0.7)
    total += case_patch_embed(out, "patch_embed", 2, 3, 8, 8, 4, 5)
    total += case_patch_embed(out, "patch_embed_pad", 1, 2, 7, 10, 4, 6)
    total += case_patch_embed(out, "patch_embed_k8", 2, 3, 8, 12, 4, 5, k=8)
    total += case_patch_embed(out, "patch_embed_k7_pad", 1, 2, 7, 10, 3, 6, k=7)
    total += case_patch_merge(out, "patch_merge_even", 2, 4, 6, 3)
    total += case_patch_merge(out, "patch_merge_odd", 1, 5, 3, 2)
    total += case_mean_tokens(out)
    total += case_adamw(out)
    total += case_rng(out)
    return total


if __name__ == "__main__":
    import fixtures
    fixtures.script_main({"nn": ["nn"]})
