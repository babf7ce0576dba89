"""What relattn's bf16 and int8 precisions compute, in PyTorch (the oracle
of tests/test_precision.sh; docs/reference.md section 6, "Precisions").

    precision_twin.py OUT_DIR [full]

For each case writes OUT_DIR/NAME.model.safetensors (tools/export.py),
NAME.input.safetensors (x) and NAME.PREC.safetensors (y) for PREC in fp32,
bf16 and int8, computed by the PyTorch twin with the rounding points of
the precision put into it: every Linear's weight rounded (bf16: to
bfloat16, nearest even; int8: per output channel, symmetric, scale
max|w| / 127, q = round-half-even(w / scale) clamped to +-127, the value
q x scale) and its input rounded as it enters (bf16: the same way; int8:
per row, 7 bits with a zero point, as src/kernels/gemm_i8.c); bf16 also
the attention core's products (q * scale @ k^T, p @ v: their operands
rounded, _Bf16Core); SwinV2's CPB MLP, the patch embedding, norms and
int8's attention core in float32. It also prints, for each case, the relative error of the bf16
and int8 logits against fp32 and that of PyTorch's own bfloat16 (the
model and x in torch.bfloat16) and PyTorch's own dynamic int8
(quantize_dynamic), the figures of docs/reference.md. "full": torchvision's
swin_t, swin_v2_t and vit_b_16 at full size instead of the test's cases.
"""

import os
import sys

import torch
import torch.nn as nn

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
import export  # noqa: E402
import st  # noqa: E402

CASES = [   # name, kind, arch, --set, init
    ("swin", "arch", "swin", ["img_size=56", "embed_dim=32", "depths=2,2", "num_heads=2,4",
                              "window_size=7", "num_classes=10"], "fixture"),
    ("vit", "arch", "vit", ["img_size=32", "patch_size=8", "embed_dim=48", "depth=2",
                            "num_heads=3", "num_classes=10"], "fixture"),
    ("swinv2", "arch", "swinv2", ["img_size=32", "embed_dim=24", "depths=2,2",
                                  "num_heads=2,4", "window_size=4", "num_classes=10"], "fixture"),
    ("swin_t", "torchvision", "swin_t", [], "default"),
]
# The full-size networks of docs/reference.md's table (--cases full).
FULL = [
    ("swin_t", "torchvision", "swin_t", [], "default"),
    ("swin_v2_t", "torchvision", "swin_v2_t", [], "default"),
    ("vit_b_16", "torchvision", "vit_b_16", [], "default"),
]


def round_bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def int8_rows(t):
    """Symmetric int8 per row of the last dimension, as values."""
    amax = t.abs().amax(dim=-1, keepdim=True)
    s = amax / 127.0
    q = torch.where(s > 0, torch.round(t / torch.where(s > 0, s, torch.ones_like(s))),
                    torch.zeros_like(t)).clamp(-127, 127)
    return torch.where(s > 0, q * s, t)


def u7_rows(t):
    """An input as precision int8 quantises it, per row of the last
    dimension: 7 bits with a zero point over [min(0, min), max(0, max)]
    (src/kernels/gemm_i8.c), as values (q - z) x s."""
    lo = t.amin(dim=-1, keepdim=True).clamp(max=0)
    hi = t.amax(dim=-1, keepdim=True).clamp(min=0)
    s = (hi - lo) / 127.0
    ok = (s > 0) & torch.isfinite(1.0 / s)
    s1 = torch.where(ok, s, torch.ones_like(s))
    z = torch.round(-lo / s1).clamp(0, 127)
    q = (torch.round(t * (1.0 / s1)) + z).clamp(0, 127)   # times the float32 reciprocal
    return torch.where(ok, (q - z) * s1, torch.zeros_like(t))


class _Bf16Core:
    """relattn's bf16 attention core (docs/reference.md, "Precisions"):
    while an attention module runs, both operands of every product of two
    activations (q * scale @ k^T and p @ v: a matmul, bmm or baddbmm of
    tensors of 3 or more dimensions) are rounded to bfloat16 as they enter
    it, the sums float32, as PyTorch's autocast runs them. Installed by
    patching those functions for the module's forward (nested calls
    counted); the Linear layers (F.linear) are not touched."""
    depth = 0
    saved = None

    @classmethod
    def enter(cls, *_):
        if cls.depth == 0:
            cls.saved = (torch.Tensor.__matmul__, torch.Tensor.matmul, torch.matmul, torch.bmm,
                         torch.baddbmm)

            def wrap(f, first=0):
                def g(*args, **kw):
                    args = list(args)
                    a, b = args[first], args[first + 1]
                    if torch.is_tensor(a) and torch.is_tensor(b) and a.dim() >= 3 and b.dim() >= 3:
                        args[first], args[first + 1] = round_bf16(a), round_bf16(b)
                    return f(*args, **kw)
                return g
            mm, tmm, fmm, bmm, badd = cls.saved
            torch.Tensor.__matmul__, torch.Tensor.matmul = wrap(mm), wrap(tmm)
            torch.matmul, torch.bmm, torch.baddbmm = wrap(fmm), wrap(bmm), wrap(badd, 1)
        cls.depth += 1

    @classmethod
    def leave(cls, *_):
        cls.depth -= 1
        if cls.depth == 0:
            (torch.Tensor.__matmul__, torch.Tensor.matmul, torch.matmul, torch.bmm,
             torch.baddbmm) = cls.saved


def put_precision(model, prec):
    """Round the Linear weights in place and round every Linear's input;
    bf16: the attention cores' products too (_Bf16Core), on every module
    whose class is an attention (its name holds "Attention")."""
    rnd = round_bf16 if prec == "bf16" else int8_rows
    rnd_in = round_bf16 if prec == "bf16" else u7_rows
    for name, mod in model.named_modules():
        if prec == "bf16" and "Attention" in type(mod).__name__:
            mod.register_forward_pre_hook(_Bf16Core.enter)
            mod.register_forward_hook(_Bf16Core.leave)
        if not isinstance(mod, nn.Linear) or "cpb_mlp" in name:
            continue
        with torch.no_grad():
            mod.weight.copy_(rnd(mod.weight))
        mod.register_forward_pre_hook(lambda m, inp, r=rnd_in: (r(inp[0]),) + tuple(inp[1:]))


def outputs(model):
    y = model if not isinstance(model, tuple) else model[0]
    return y.float().contiguous()


def torch_int8(model, x):
    """PyTorch's own dynamic int8 (quantize_dynamic of every nn.Linear, the
    default engine), or None where it does not run."""
    import copy
    try:
        q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {nn.Linear},
                                                   dtype=torch.qint8)
        with torch.no_grad():
            return outputs(q(x))
    except Exception:   # torchvision's Swin calls F.linear on .weight
        return None


def main(out, cases):
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    for name, kind, arch, sets, init in cases:
        model, meta, hp, example = export.make(kind, arch, sets, 0, init, "official")
        if arch == "vit_b_16":   # torchvision starts its head at zero: logits of 0
            with torch.no_grad():
                g = torch.Generator().manual_seed(1)
                model.heads.head.weight.copy_(torch.randn(model.heads.head.weight.shape, generator=g) * 0.02)
        export.export(model, meta, os.path.join(out, name + ".model.safetensors"), "official")
        torch.manual_seed(common.seed_of("precision/" + name))
        x = example(model, hp, 2, None)
        st.write(os.path.join(out, name + ".input.safetensors"), {"x": x})
        state = {k: v.clone() for k, v in model.state_dict().items()}
        ys = {}
        for prec in ("fp32", "bf16", "int8"):
            model.load_state_dict(state)
            m = model
            if prec != "fp32":
                m = export.make(kind, arch, sets, 0, init, "official")[0]
                m.load_state_dict(state)
                put_precision(m, prec)
            m.eval()
            with torch.no_grad():
                y = m(x)
            ys[prec] = outputs(y)
            st.write(os.path.join(out, "%s.%s.safetensors" % (name, prec)), {"y": ys[prec]})
        model.load_state_dict(state)
        model.eval()
        yq = torch_int8(model, x)
        with torch.no_grad():
            yb = outputs(model.to(torch.bfloat16)(x.to(torch.bfloat16)))
        rel = lambda a: float((a - ys["fp32"]).norm() / ys["fp32"].norm())  # noqa: E731
        print("%s: relative error of the logits against fp32: bf16 %.2e, int8 %.2e; "
              "PyTorch's bfloat16 %.2e, PyTorch's dynamic int8 %s"
              % (name, rel(ys["bf16"]), rel(ys["int8"]), rel(yb),
                 "%.2e" % rel(yq) if yq is not None else "(PyTorch refuses it)"))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "full"):
        raise SystemExit(__doc__)
    main(sys.argv[1], FULL if len(sys.argv) == 3 else CASES)
