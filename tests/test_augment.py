"""test_augment.py - timm's RandAugment (ra_augment_op, ra_randaugment_*) against
PIL and timm.

  1. every operation equals PIL 9.4's bytes (ImageOps, ImageEnhance,
     Image.rotate, Image.transform AFFINE, timm's solarize_add) on real
     photos (python3-skimage's data folder), RGB and L, a small image and
     odd sizes, several arguments each: both signs for the geometric ops,
     each of nearest, bilinear and bicubic, several fill colours;
  2. ra_randaugment_parse reads timm's strings as timm's
     rand_augment_transform does, and refuses bad ones;
  3. ra_randaugment_draw's distribution over many draws: the ops uniform
     (chi-square), the applied share = p, the magnitude N(m, mstd) clipped
     (or uniform), the negations 1/2, each argument timm's level function of
     its magnitude; ra_randaugment_apply = the draw then ra_augment_op.
Exit 77 (skipped) without NumPy, PIL or the photos.
  python3 test_augment.py PYTHON_PACKAGE_DIR   (RELATTN_LIBRARY: the library)"""
import ctypes
import math
import os
import sys

from checks import PHOTOS, check, done, need_photos  # noqa: F401

try:
    import numpy as np
    from PIL import Image, ImageEnhance, ImageOps
except ImportError as e:
    print("skipped: %s (scripts/deps.sh installs python3-numpy and python3-pil)" % e)
    sys.exit(77)
NAMES = ["astronaut.png", "chelsea.png", "coffee.png", "camera.png"]
need_photos(NAMES)
sys.path.insert(0, sys.argv[1])
import relattn  # noqa: E402
from relattn._lib import AugStep, RandAugment, Rng, lib  # noqa: E402



OPS = ["AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd",
       "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel",
       "TranslateYRel"]
OP = {n: i for i, n in enumerate(OPS)}
NEAREST, BILINEAR, BICUBIC = 0, 2, 3
RESAMPLE = {NEAREST: Image.NEAREST, BILINEAR: Image.BILINEAR, BICUBIC: Image.BICUBIC}


def solarize_add(img, add, thresh=128):   # timm's
    lut = [min(255, i + add) if i < thresh else i for i in range(256)]
    return img.point(lut * (3 if img.mode == "RGB" else 1))


def pil_op(img, op, arg, interp, fill):
    """timm's NAME_TO_OP functions with their PIL argument."""
    kw = dict(resample=RESAMPLE[interp], fillcolor=fill)
    if op == "AutoContrast":
        return ImageOps.autocontrast(img)
    if op == "Equalize":
        return ImageOps.equalize(img)
    if op == "Invert":
        return ImageOps.invert(img)
    if op == "Rotate":
        return img.rotate(arg, **kw)
    if op == "Posterize":
        return img if arg >= 8 else ImageOps.posterize(img, int(arg))
    if op == "Solarize":
        return ImageOps.solarize(img, arg)
    if op == "SolarizeAdd":
        return solarize_add(img, arg)   # a fraction: Image.point rounds it half to even
    if op in ("Color", "Contrast", "Brightness", "Sharpness"):
        return getattr(ImageEnhance, op)(img).enhance(arg)
    m = {"ShearX": (1, arg, 0, 0, 1, 0), "ShearY": (1, 0, 0, arg, 1, 0),
         "TranslateXRel": (1, 0, arg, 0, 1, 0), "TranslateYRel": (1, 0, 0, 0, 1, arg)}[op]
    return img.transform(img.size, Image.AFFINE, m, **kw)


def ra_op(a, op, arg, interp=BICUBIC, fill=(128, 128, 128)):
    a = np.ascontiguousarray(a)
    h, w = a.shape[:2]
    c = 1 if a.ndim == 2 else a.shape[2]
    out = np.empty_like(a)
    fb = (ctypes.c_uint8 * 3)(*(list(fill) + [0, 0])[:3])
    relattn.check(lib.ra_augment_op(out.ctypes.data, a.ctypes.data, w, h, c, OP[op], arg, interp,
                                    ctypes.cast(fb, ctypes.c_void_p)))
    return out


# ---- 1. each operation against PIL --------------------------------------------------
rgb_photos = [np.asarray(Image.open(os.path.join(PHOTOS, n)).convert("RGB"))
              for n in NAMES[:3]]
grey = np.asarray(Image.open(os.path.join(PHOTOS, "camera.png")).convert("L"))
rng = np.random.default_rng(7)
images = [("astronaut", rgb_photos[0]), ("chelsea", rgb_photos[1]), ("coffee", rgb_photos[2]),
          ("camera L", grey), ("astronaut L", np.asarray(Image.fromarray(rgb_photos[0])
                                                         .convert("L"))),
          ("coffee 101x67", rgb_photos[2][50:117, 77:178]),
          ("camera 63x95 L", grey[200:295, 301:364]),
          ("noise 7x5", rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)),
          ("noise 2x3 L", rng.integers(0, 256, (3, 2), dtype=np.uint8)),
          ("flat 4x4", np.full((4, 4, 3), 77, np.uint8)),
          ("dark 9x11 L", rng.integers(0, 3, (11, 9), dtype=np.uint8))]
ARGS = {
    "AutoContrast": [0], "Equalize": [0], "Invert": [0],
    "Rotate": [0, 9.0, -13.5, 27.3, -30, 90, 180, 270, -90, 400.5, 1e-14, 179.99999999],
    "Posterize": [0, 1, 2, 3, 4, 7, 8, 9, -2],
    "Solarize": [0, 26, 128, 128.5, 230, 256, 300, -5],
    "SolarizeAdd": [0, 1, 50, 99, 110, 128, 300, -40, 2.5, 3.5, -7.5],
    "Color": [0, 0.1, 0.37, 1, 1.81, 1.9, 5, -0.5],
    "Contrast": [0, 0.1, 0.55, 1, 1.3, 1.9, 4, -1],
    "Brightness": [0, 0.1, 0.6, 1, 1.19, 1.9, 3.5, -0.2],
    "Sharpness": [0, 0.1, 0.73, 1, 1.45, 1.9, 6, -2],
    "ShearX": [0, 0.27, -0.3, 0.0837, -1.7],
    "ShearY": [0, 0.27, -0.3, 0.0837, -1.7],
    "TranslateXRel": [0, 3, -17.25, 0.5, 100.9, -0.49999, 0.4999999, -2.4999999],
    "TranslateYRel": [0, 3, -17.25, 0.5, 100.9, -0.49999, 0.4999999, -2.4999999],
}
GEOMETRIC = {"Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"}
worst = {}   # op -> (max |difference|, pixels different, pixels compared)
for name, a in images:
    mode = "L" if a.ndim == 2 else "RGB"
    img = Image.fromarray(a, mode)
    small = a.shape[0] * a.shape[1] < 5000
    for op in OPS:
        cases = []
        for arg in ARGS[op]:
            if op not in GEOMETRIC:
                cases.append((arg, BICUBIC, (128, 128, 128)))
                continue
            if op.startswith("Translate") and not small and abs(arg) > 50:
                arg = arg * a.shape[1 if op == "TranslateXRel" else 0] / 100.0
            fills = [(124, 116, 104), (0, 0, 0), (255, 3, 77)] if small else [(124, 116, 104)]
            for interp in (NEAREST, BILINEAR, BICUBIC):
                for f in fills:
                    cases.append((arg, interp, f))
        for arg, interp, f in cases:
            fill = f if mode == "RGB" else f[0]
            ref = np.asarray(pil_op(img, op, arg, interp, fill))
            got = ra_op(a, op, arg, interp, f)
            d = np.abs(got.astype(int) - ref.astype(int))
            w0 = worst.get(op, (0, 0, 0))
            worst[op] = (max(w0[0], int(d.max())), w0[1] + int((d > 0).sum()), w0[2] + d.size)
            check(d.max() == 0, "%s %s(%r, %s, fill %s): %d bytes differ from PIL's, "
                  "by up to %d" % (name, op, arg, interp, f, int((d > 0).sum()), int(d.max())))
print("each op against PIL 9.4 (largest difference, bytes differing / compared):")
for op in OPS:
    m, n, t = worst[op]
    print("  %-13s %d  %d / %d" % (op, m, n, t))

# the refusals
a = rgb_photos[1][:8, :8].copy()
o = np.empty_like(a)
fb = (ctypes.c_uint8 * 3)(1, 2, 3)
for what, args in [("c = 2", (o.ctypes.data, a.ctypes.data, 8, 4, 2, 0, 0.0, 3, fb)),
                   ("w = 0", (o.ctypes.data, a.ctypes.data, 0, 8, 3, 0, 0.0, 3, fb)),
                   ("NULL src", (o.ctypes.data, None, 8, 8, 3, 0, 0.0, 3, fb)),
                   ("op 15", (o.ctypes.data, a.ctypes.data, 8, 8, 3, 15, 0.0, 3, fb)),
                   ("NaN", (o.ctypes.data, a.ctypes.data, 8, 8, 3, 7, math.nan, 3, fb)),
                   ("inf", (o.ctypes.data, a.ctypes.data, 8, 8, 3, 3, math.inf, 3, fb)),
                   ("lanczos", (o.ctypes.data, a.ctypes.data, 8, 8, 3, 3, 10.0, 1, fb)),
                   ("box", (o.ctypes.data, a.ctypes.data, 8, 8, 3, 11, 0.1, 4, fb)),
                   ("no fill", (o.ctypes.data, a.ctypes.data, 8, 8, 3, 13, 2.0, 3, None)),
                   ("posterize 2.5", (o.ctypes.data, a.ctypes.data, 8, 8, 3, 4, 2.5, 3, fb))]:
    st = lib.ra_augment_op(*[ctypes.cast(x, ctypes.c_void_p) if isinstance(x, ctypes.Array)
                             else x for x in args])
    check(st != 0 and lib.ra_last_error(), "ra_augment_op accepted %s" % what)
check([lib.ra_aug_op_name(i).decode() for i in range(15)] == OPS and
      lib.ra_aug_op_name(15) is None, "ra_aug_op_name")

# ---- 2. parsing timm's strings ------------------------------------------------------


def parse(spec):
    r = RandAugment()
    st = lib.ra_randaugment_parse(ctypes.byref(r), spec.encode())
    return r if st == 0 else None


def fields(r):
    return (r.layers, r.magnitude, r.magnitude_std, r.magnitude_max, r.prob, r.increasing)


INF = math.inf
for spec, want in [("rand-m9-mstd0.5-inc1", (2, 9, 0.5, 10, 0.5, 1)),
                   ("rand-m9-n3-mstd0.5", (3, 9, 0.5, 10, 0.5, 0)),
                   ("rand-m7-mstd0.5-p0.8", (2, 7, 0.5, 10, 0.8, 0)),
                   ("rand-m10-mstd101", (2, 10, INF, 10, 0.5, 0)),
                   ("rand-m10-mstd100", (2, 10, 100, 10, 0.5, 0)),
                   ("rand-m15-mmax20-n1", (1, 15, 0, 20, 0.5, 0)),
                   ("rand-mmax0", (2, 10, 0, 10, 0.5, 0)),
                   ("rand", (2, 10, 0, 10, 0.5, 0)),
                   ("rand-inc0", (2, 10, 0, 10, 0.5, 1)),        # timm: bool("0") is True
                   ("rand-mstd1-mstd2-m3-m4", (2, 4, 1, 10, 0.5, 0)),   # setdefault / last
                   ("rand-m9-foo", (2, 9, 0, 10, 0.5, 0)),       # no digit: skipped
                   ("rand-n0-p1e-1", None),                      # '-' splits 1e-1
                   ("rand-p1e2", (2, 10, 0, 10, 100, 0)),
                   ("rand-m9--n1", (1, 9, 0, 10, 0.5, 0))]:
    r = parse(spec)
    check(r is not None and fields(r) == want if want else r is None,
          "parse %s: %s, not %s" % (spec, fields(r) if r else lib.ra_last_error(), want))
r = parse("rand-m9-mstd0.5-inc1")
check(r and abs(r.translate_pct - 0.45) < 1e-15 and r.interp == BICUBIC and
      list(r.fill) == [128, 128, 128], "parse: the defaults of the hparams")
for bad in ["", "ra", "rand9", "auto-m9", "Rand-m9", "rand-m9.5", "rand-m9x", "rand-x9",
            "rand-mstd0.5.1", "rand-p0.5x", "rand-tweights", "rand-n65", "rand-m99999999999",
            "rand-mstd0x1p3", "rand-mmax1.5", "rand-n3-k2"]:
    r = parse(bad)
    check(r is None and lib.ra_last_error(), "parse accepted %r" % bad)

# ---- 3. the draws ---------------------------------------------------------------------
NEGATED = {"Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"}
ENHANCE = {"Color", "Contrast", "Brightness", "Sharpness"}


def level_to_arg(op, m, inc, w, h, pct=0.45):
    """timm's level functions, without the negation (the magnitude of the arg)."""
    lv = m / 10.0
    return {"Rotate": lv * 30.0, "ShearX": lv * 0.3, "ShearY": lv * 0.3,
            "TranslateXRel": lv * pct * w, "TranslateYRel": lv * pct * h,
            "Posterize": (4 - int(lv * 4)) if inc else int(lv * 4),
            "Solarize": (256 - min(256, int(lv * 256))) if inc else min(256, int(lv * 256)),
            "SolarizeAdd": min(128, int(lv * 110))}.get(op, 0.0)


def draws(spec, n, w=32, h=24, seed=1):
    r = parse(spec)
    g = Rng()
    lib.ra_rng_seed(ctypes.byref(g), seed)
    steps = (AugStep * max(r.layers, 1))()
    out = []
    for _ in range(n):
        relattn.check(lib.ra_randaugment_draw(steps, w, h, ctypes.byref(r), ctypes.byref(g)))
        out.extend((OPS[s.op], s.applied, s.magnitude, s.arg) for s in steps[:r.layers])
    return r, out


def chi2_ok(counts, expect):
    """Pearson's chi-square under its 0.9999 quantile (Wilson-Hilferty)."""
    k = len(counts) - 1
    x = sum((c - expect) ** 2 / expect for c in counts)
    q = k * (1 - 2 / (9 * k) + 3.719 * math.sqrt(2 / (9 * k))) ** 3
    return x < q, x, q


N = 20000
for spec, m, mstd, p, inc in [("rand-m9-mstd0.5-inc1", 9, 0.5, 0.5, 1),
                              ("rand-m7-mstd0.5-p0.8", 7, 0.5, 0.8, 0),
                              ("rand-m10-mstd101-n3", 10, INF, 0.5, 0),
                              ("rand-m12-mmax15-p1-inc1", 12, 0, 1.0, 1)]:
    r, d = draws(spec, N)
    ok, x, q = chi2_ok([sum(1 for s in d if s[0] == op) for op in OPS], len(d) / 15)
    check(ok, "%s: the ops are not uniform (chi-square %.1f > %.1f)" % (spec, x, q))
    applied = [s for s in d if s[1]]
    share = len(applied) / len(d)
    check(abs(share - p) < 4.5 * math.sqrt(p * (1 - p) / len(d)) + 1e-12,
          "%s: applied share %.4f, not %.2f" % (spec, share, p))
    mags = np.array([s[2] for s in applied])
    mmax = r.magnitude_max
    if mstd == INF:   # uniform in [0, m]
        want_mean, want_sd = m / 2, m / math.sqrt(12)
    elif mstd == 0:
        want_mean, want_sd = min(m, mmax), 0.0
    else:   # N(m, mstd) clipped to [0, mmax]: its moments by quadrature
        xs = np.linspace(m - 12 * mstd, m + 12 * mstd, 200001)
        pdf = np.exp(-0.5 * ((xs - m) / mstd) ** 2)
        pdf /= pdf.sum()
        cl = np.clip(xs, 0, mmax)
        want_mean = float((cl * pdf).sum())
        want_sd = float(math.sqrt(((cl - want_mean) ** 2 * pdf).sum()))
    se = max(want_sd, 1e-9) / math.sqrt(len(mags))
    check(abs(mags.mean() - want_mean) < 5 * se + 1e-12 and mags.min() >= 0 and
          mags.max() <= mmax and abs(mags.std() - want_sd) < 0.025 * want_sd + 1e-12,
          "%s: magnitudes mean %.4f std %.4f in [%.3f, %.3f], not %.3f, %.3f" % (
              spec, mags.mean(), mags.std(), mags.min(), mags.max(), want_mean, want_sd))
    neg = [s for s in applied if s[0] in NEGATED or (inc and s[0] in ENHANCE)]
    share = sum(1 for s in neg if (s[3] < 1 if s[0] in ENHANCE else math.copysign(1, s[3]) < 0))
    share /= len(neg)
    check(abs(share - 0.5) < 4.5 * math.sqrt(0.25 / len(neg)),
          "%s: negated share %.4f, not 1/2" % (spec, share))
    bad = 0
    for op, _, mag, arg in applied:   # each argument its magnitude's level
        if op in ENHANCE:
            lv = mag / 10.0
            want = {max(0.1, 1.0 + lv * 0.9), max(0.1, 1.0 - lv * 0.9)} if inc else \
                {lv * 1.8 + 0.1}
            bad += arg not in want
        else:
            bad += abs(arg) != level_to_arg(op, mag, inc, 32, 24)
    check(bad == 0, "%s: %d arguments are not timm's level of their magnitude" % (spec, bad))
    print("%s: %d layers drawn, applied %.4f, magnitude mean %.3f std %.3f (%.3f, %.3f), "
          "chi-square %.1f" % (spec, len(d), len(applied) / len(d), mags.mean(), mags.std(),
                               want_mean, want_sd, x))

# a draw fails cleanly on a bad policy; the same seed gives the same draws
r = parse("rand-m9-mstd0.5-inc1")
g = Rng()
steps = (AugStep * 2)()
r.interp = 1
check(lib.ra_randaugment_draw(steps, 8, 8, ctypes.byref(r), ctypes.byref(g)) != 0,
      "draw accepted lanczos")
r.interp, r.prob = BICUBIC, math.nan
check(lib.ra_randaugment_draw(steps, 8, 8, ctypes.byref(r), ctypes.byref(g)) != 0,
      "draw accepted p = NaN")
check(draws("rand-m9-mstd0.5-inc1", 50, seed=5)[1] == draws("rand-m9-mstd0.5-inc1", 50, seed=5)[1],
      "the same seed gave other draws")

# apply = draw, then ra_augment_op for each applied layer
for spec, a in [("rand-m9-mstd0.5-inc1", rgb_photos[0][::4, ::4]),
                ("rand-m9-n3-mstd0.5", rgb_photos[1][::3, ::3]),
                ("rand-m10-mstd101-n4-p0.9", grey[::4, ::4])]:
    r = parse(spec)
    r.fill[:] = [124, 116, 104]
    for seed in range(12):
        a = np.ascontiguousarray(a)
        h, w = a.shape[:2]
        c = 1 if a.ndim == 2 else 3
        g = Rng()
        lib.ra_rng_seed(ctypes.byref(g), seed)
        steps = (AugStep * r.layers)()
        relattn.check(lib.ra_randaugment_draw(steps, w, h, ctypes.byref(r), ctypes.byref(g)))
        want = a
        img = Image.fromarray(a, "L" if c == 1 else "RGB")
        for s in steps:
            if s.applied:
                want = ra_op(want, OPS[s.op], s.arg, r.interp, list(r.fill))
                f = tuple(r.fill) if c == 3 else r.fill[0]
                img = pil_op(img, OPS[s.op], s.arg, r.interp, f)
        got = a.copy()
        scratch = np.empty_like(a)
        lib.ra_rng_seed(ctypes.byref(g), seed)
        relattn.check(lib.ra_randaugment_apply(got.ctypes.data, scratch.ctypes.data, w, h, c,
                                               ctypes.byref(r), ctypes.byref(g)))
        check(np.array_equal(got, want), "%s seed %d: apply differs from draw + ops" % (spec, seed))
        check(np.array_equal(got, np.asarray(img)), "%s seed %d: apply differs from PIL's ops"
              % (spec, seed))

done("test_augment")
