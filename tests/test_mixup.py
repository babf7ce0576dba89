"""test_mixup.py - timm's Mixup / CutMix (batch mode) and SoftTargetCrossEntropy
against relattn's ra_mixup_with, ra_mixup_apply and ra_cross_entropy_soft_*,
called through ctypes on the shared library (RELATTN_LIBRARY).

The PyTorch twin below is written from timm/data/mixup.py (one_hot,
mixup_target, rand_bbox, cutmix_bbox_and_lam, Mixup._mix_batch) and
timm/loss/cross_entropy.py (SoftTargetCrossEntropy); timm itself is not
needed.
  1. ra_mixup_with against the twin for a fixed lam and box: mixup and cutmix,
     several shapes (odd H and W, 1 x 1 images), boxes at every edge, empty
     and whole-image boxes, boxes from rand_bbox at edge centres; x and the
     targets must agree to the bit;
  2. ra_mixup_apply (relattn's draws): the box read back from the mixed batch
     and lam_out fed to the twin give the same batch (cutmix to the bit;
     mixup within one float32 rounding of (1 - lam), lam_out being lam
     rounded to a float);
  3. the soft cross-entropy's loss, probabilities and gradient against
     torch.sum(-t * log_softmax(x), -1).mean() and its autograd gradient.
Exit 77 (skipped) without PyTorch.
  python3 test_mixup.py PYTHON_PACKAGE_DIR"""
import ctypes
import math
import sys

from checks import check, done

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print("skipped: %s (scripts/deps.sh installs python3-torch with RELATTN_WITH_TORCH=1)" % e)
    sys.exit(77)
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "python")
from relattn._lib import lib  # noqa: E402

_P, _I, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float


class Rng(ctypes.Structure):
    """ra_rng."""
    _fields_ = [("s", ctypes.c_uint64 * 4)]


class Mixup(ctypes.Structure):
    """ra_mixup, field for field."""
    _fields_ = [(n, ctypes.c_float) for n in
                ("mixup_alpha", "cutmix_alpha", "prob", "switch_prob", "smoothing")]


lib.ra_mixup_with.restype = _I
lib.ra_mixup_with.argtypes = [_P, _P, _P] + [_I] * 5 + [_F, _F] + [_I] * 5
lib.ra_mixup_apply.restype = _I
lib.ra_mixup_apply.argtypes = [_P, _P, _P] + [_I] * 5 + [ctypes.POINTER(Mixup),
                                                          ctypes.POINTER(Rng), _P]
lib.ra_rng_seed.restype = None
lib.ra_rng_seed.argtypes = [ctypes.POINTER(Rng), ctypes.c_uint64]
lib.ra_cross_entropy_soft_forward.restype = _I
lib.ra_cross_entropy_soft_forward.argtypes = [_P, _P, _P, _P, _I, _I]
lib.ra_cross_entropy_soft_backward.restype = _I
lib.ra_cross_entropy_soft_backward.argtypes = [_P, _F, _P, _P, _I, _I]
lib.ra_last_error.restype = ctypes.c_char_p



def ptr(t):
    assert t.is_contiguous()
    return ctypes.c_void_p(t.data_ptr())


def f32(v):
    """v rounded to float32, as a Python float (what a C float argument holds)."""
    return torch.tensor(v, dtype=torch.float32).item()


# ---- the twin, from timm/data/mixup.py --------------------------------------

def one_hot(x, num_classes, on_value=1., off_value=0.):
    x = x.long().view(-1, 1)
    return torch.full((x.size()[0], num_classes), off_value).scatter_(1, x, on_value)


def mixup_target(target, num_classes, lam=1., smoothing=0.0):
    off_value = smoothing / num_classes
    on_value = 1. - smoothing + off_value
    y1 = one_hot(target, num_classes, on_value=on_value, off_value=off_value)
    y2 = one_hot(target.flip(0), num_classes, on_value=on_value, off_value=off_value)
    return y1 * lam + y2 * (1. - lam)


def rand_bbox_at(img_h, img_w, lam, cy, cx):
    """timm's rand_bbox (margin 0) for the centre (cy, cx) instead of a draw."""
    ratio = math.sqrt(1 - lam)
    cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
    yl = min(max(cy - cut_h // 2, 0), img_h)
    yh = min(max(cy + cut_h // 2, 0), img_h)
    xl = min(max(cx - cut_w // 2, 0), img_w)
    xh = min(max(cx + cut_w // 2, 0), img_w)
    return yl, yh, xl, xh


def mix_batch(x, lam, use_cutmix, box):
    """Mixup._mix_batch with its draws given (lam already corrected for a cutmix)."""
    if lam == 1. and not use_cutmix:
        return
    if use_cutmix:
        yl, yh, xl, xh = box
        x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
    else:
        x_flipped = x.flip(0).mul_(1. - lam)
        x.mul_(lam).add_(x_flipped)


def soft_target_ce(x, target):
    return torch.sum(-target * F.log_softmax(x, dim=-1), dim=-1).mean()


# ---- 1. ra_mixup_with ---------------------------------------------------------

gen = torch.Generator().manual_seed(0)
worst_x = worst_t = 0.0
cases = 0


def run_with(b, c, h, w, k, smoothing, lam, cutmix, box):
    global worst_x, worst_t, cases
    x = torch.randn(b, c, h, w, generator=gen) * 3
    labels = torch.randint(0, k, (b,), generator=gen, dtype=torch.int32)
    mine, targets = x.clone(), torch.full((b, k), -7.0)
    st = lib.ra_mixup_with(ptr(mine), ptr(targets), ptr(labels), b, c, h, w, k, smoothing, lam,
                           int(cutmix), *box)
    what = "B %d C %d %d x %d K %d lam %r %s box %r" % (b, c, h, w, k, lam,
                                                       "cutmix" if cutmix else "mixup", box)
    check(st == 0, "%s: %s" % (what, lib.ra_last_error()))
    twin = x.clone()
    mix_batch(twin, lam, cutmix, box)
    tt = mixup_target(labels, k, lam, smoothing)
    dx = (mine - twin).abs().max().item()
    dt = (targets - tt).abs().max().item()
    worst_x, worst_t = max(worst_x, dx), max(worst_t, dt)
    check(dx == 0.0, "%s: x differs by %g" % (what, dx))
    check(dt == 0.0, "%s: targets differ by %g" % (what, dt))
    cases += 1


sm = f32(0.1)
shapes = [(2, 1, 1, 1, 2), (2, 3, 7, 5, 10), (4, 3, 13, 17, 7), (6, 2, 32, 32, 1000),
          (8, 3, 9, 4, 3)]
for (b, c, h, w, k) in shapes:
    for lam in (f32(0.8), f32(0.3125), f32(0.01), 1.0, 0.0):
        run_with(b, c, h, w, k, sm, lam, False, (0, 0, 0, 0))
    run_with(b, c, h, w, k, 0.0, f32(0.37), False, (0, 0, 0, 0))
    run_with(b, c, h, w, k, 1.0, f32(0.37), False, (0, 0, 0, 0))
    # fixed boxes: whole image, empty, each corner, one row, one column
    boxes = [(0, h, 0, w), (h // 2, h // 2, 0, w), (0, (h + 1) // 2, 0, (w + 1) // 2),
             (h // 2, h, w // 2, w), (0, 1, 0, w), (0, h, w - 1, w), (h - 1, h, 0, 1)]
    # rand_bbox's boxes for a few lam at the edges and the middle
    for lam0 in (0.05, 0.5, 0.9, 0.999):
        for cy, cx in ((0, 0), (h - 1, w - 1), (0, w - 1), (h // 2, w // 2)):
            boxes.append(rand_bbox_at(h, w, lam0, cy, cx))
    for box in boxes:
        yl, yh, xl, xh = box
        lam = 1. - (yh - yl) * (xh - xl) / float(h * w)   # cutmix_bbox_and_lam, correct_lam
        run_with(b, c, h, w, k, sm, f32(lam), True, box)
print("ra_mixup_with: %d cases against the twin, max |x| diff %g, max |targets| diff %g" %
      (cases, worst_x, worst_t))

# ---- 2. ra_mixup_apply's batches through the twin ----------------------------

kinds = {"mixup": 0, "cutmix": 0, "none": 0}
worst_mix = worst_cut = worst_ct = 0.0
for seed in range(60):
    b, c, h, w, k = shapes[seed % len(shapes)]
    if h * w < 4:
        continue
    rng = Rng()
    lib.ra_rng_seed(ctypes.byref(rng), seed)
    mx = Mixup(0.8, 1.0, 0.9, 0.5, sm)
    x = torch.randn(b, c, h, w, generator=gen)
    labels = torch.randint(0, k, (b,), generator=gen, dtype=torch.int32)
    mine, targets, lam_out = x.clone(), torch.empty(b, k), ctypes.c_float(-1)
    st = lib.ra_mixup_apply(ptr(mine), ptr(targets), ptr(labels), b, c, h, w, k,
                            ctypes.byref(mx), ctypes.byref(rng), ctypes.byref(lam_out))
    check(st == 0, "apply seed %d: %s" % (seed, lib.ra_last_error()))
    lam = lam_out.value
    changed = (mine != x).any(0).any(0)   # (H, W): the pixels an image changed
    twin = x.clone()
    if lam == 1.0 and not changed.any():
        kinds["none"] += 1
        check(torch.equal(targets, mixup_target(labels, k, 1.0, sm)), "seed %d: targets" % seed)
        continue
    if bool((mine.eq(x) | mine.eq(x.flip(0))).all()):   # every pixel its own or its pair's
        kinds["cutmix"] += 1
        rows, cols = changed.any(dim=1).nonzero(), changed.any(dim=0).nonzero()
        box = (int(rows.min()), int(rows.max()) + 1, int(cols.min()), int(cols.max()) + 1)
        yl, yh, xl, xh = box
        check(int(changed.sum()) == (yh - yl) * (xh - xl), "seed %d: not a box" % seed)
        lam_t = 1. - (yh - yl) * (xh - xl) / float(h * w)
        check(abs(lam - lam_t) <= 1e-7, "seed %d: lam %r, the box says %r" % (seed, lam, lam_t))
        mix_batch(twin, lam_t, True, box)
        d = (mine - twin).abs().max().item()
        dt = (targets - mixup_target(labels, k, lam_t, sm)).abs().max().item()
        worst_cut, worst_ct = max(worst_cut, d), max(worst_ct, dt)
        check(d == 0.0 and dt == 0.0, "seed %d: cutmix differs by %g, targets %g" % (seed, d, dt))
    else:
        kinds["mixup"] += 1
        mix_batch(twin, lam, False, None)
        d = (mine - twin).abs().max().item()
        tol = 2.0 ** -24 * 2 * x.abs().max().item()   # (1 - lam) rounded from lam or lam_out
        dt = (targets - mixup_target(labels, k, lam, sm)).abs().max().item()
        worst_mix = max(worst_mix, d)
        check(d <= tol and dt <= 2e-7, "seed %d: mixup differs by %g, targets %g" % (seed, d, dt))
print("ra_mixup_apply: %r; cutmix max diff %g (targets %g), mixup max diff %g" %
      (kinds, worst_cut, worst_ct, worst_mix))
check(kinds["mixup"] > 5 and kinds["cutmix"] > 5, "kinds %r" % kinds)

# ---- 3. the soft cross-entropy ----------------------------------------------

worst_loss = worst_p = worst_g = 0.0
for (b, k, scale, kind) in ((2, 2, 1, "mixup"), (4, 10, 3, "mixup"), (8, 1000, 2, "mixup"),
                            (5, 7, 1, "random"), (3, 1, 1, "random"), (16, 100, 30, "random")):
    logits = (torch.randn(b, k, generator=gen) * scale).contiguous()
    if kind == "mixup":
        labels = torch.randint(0, k, (b,), generator=gen, dtype=torch.int32)
        targets = mixup_target(labels, k, f32(0.3), sm).contiguous()
    else:
        targets = torch.rand(b, k, generator=gen) * 2
    dloss = 0.75
    loss, probs = ctypes.c_float(-1), torch.empty(b, k)
    st = lib.ra_cross_entropy_soft_forward(ctypes.byref(loss), ptr(probs), ptr(logits),
                                           ptr(targets), b, k)
    check(st == 0, "soft ce forward: %s" % lib.ra_last_error())
    grad = torch.zeros(b, k)
    st = lib.ra_cross_entropy_soft_backward(ptr(grad), dloss, ptr(probs), ptr(targets), b, k)
    check(st == 0, "soft ce backward: %s" % lib.ra_last_error())
    xl = logits.clone().requires_grad_(True)
    lt = soft_target_ce(xl, targets)
    lt.backward(torch.tensor(dloss))
    el = abs(loss.value - lt.item()) / max(abs(lt.item()), 1e-30)
    ep = (probs - torch.softmax(logits, -1)).abs().max().item()
    # relative to the largest gradient (all 0 for K = 1)
    eg = ((grad - xl.grad).abs().max() / (xl.grad.abs().max() + 1e-12)).item()
    worst_loss, worst_p, worst_g = max(worst_loss, el), max(worst_p, ep), max(worst_g, eg)
    what = "soft ce B %d K %d %s" % (b, k, kind)
    check(el <= 2e-6, "%s: loss %r vs %r" % (what, loss.value, lt.item()))
    check(ep <= 1e-6, "%s: probs differ by %g" % (what, ep))
    check(eg <= 1e-5, "%s: gradient differs by %g of its largest" % (what, eg))
print("soft cross-entropy vs PyTorch: loss %.2g relative, probs %.2g, gradient %.2g relative" %
      (worst_loss, worst_p, worst_g))

done("test_mixup")
