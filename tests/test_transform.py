"""test_transform.py - images in as each family reads them, against PIL.

  1. ra_image_resize_u8 equals PIL's Image.resize to the last unit: every
     filter (nearest, box, bilinear, hamming, bicubic, lanczos), down and
     up, each axis alone, on real photos (python3-skimage's data folder,
     the PNGs also as JPEG);
  2. the decoder gives PIL's pixels (Image.open(...).convert("RGB"));
  3. each family's evaluation transform, read from where the family records
     it (a timm config.json's pretrained_cfg: crop_pct, interpolation,
     crop_mode; a transformers preprocessor_config.json: size, resample,
     do_center_crop, crop_size, rescale_factor, image_mean, image_std), as
     Model.preprocess gives it, against the family's pipeline written in
     PIL and NumPy (float32, as torchvision's ToTensor + Normalize and
     transformers' rescale + normalize compute);
  4. `relattn classify --json` gives the softmax of the model's outputs for
     the PIL pipeline's tensor.
Exit 77 (skipped) without NumPy, PIL or the photos.
  python3 test_transform.py RELATTN_BINARY FIXTURES_DIR PYTHON_PACKAGE_DIR"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys

from checks import PHOTOS, check, done, need_photos, tinted_folder  # noqa: F401
import tempfile

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    print("skipped: %s (scripts/deps.sh installs python3-numpy and python3-pil)" % e)
    sys.exit(77)
NAMES = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "hubble_deep_field.jpg",
         "motorcycle_left.png", "camera.png"]
need_photos(NAMES)
relattn_bin, fixtures, package = sys.argv[1:4]
sys.path.insert(0, package)
import relattn  # noqa: E402
from relattn._lib import Dataset, ImageFolder, lib  # noqa: E402
import ctypes  # noqa: E402



tmp = tempfile.mkdtemp(prefix="relattn_transform.")
photos = [os.path.join(PHOTOS, n) for n in NAMES]
for n in NAMES:   # the PNGs as JPEG too (PIL's encoder, quality 90)
    if n.endswith(".png"):
        p = os.path.join(tmp, n[:-4] + ".jpg")
        Image.open(os.path.join(PHOTOS, n)).convert("RGB").save(p, quality=90)
        photos.append(p)

# ---- 1, 2: the decoder and the filters --------------------------------------------
FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
cases = 0
for path in photos:
    im = Image.open(path).convert("RGB")
    ref = np.asarray(im)
    h, w = ref.shape[:2]
    px, pw, ph = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
    relattn.check(lib.ra_image_load_u8(ctypes.byref(px), ctypes.byref(pw), ctypes.byref(ph),
                                       os.fsencode(path), 64 << 20))
    dec = np.ctypeslib.as_array(ctypes.cast(px, ctypes.POINTER(ctypes.c_uint8)),
                                shape=(h, w, 3)).copy()
    relattn._libc.free(px)
    check((pw.value, ph.value) == (w, h) and np.array_equal(dec, ref),
          "%s: decoded pixels differ from PIL's (%d)" % (path, int((dec != ref).sum())))
    a = np.ascontiguousarray(ref)
    for f, name in FILTERS.items():
        for ow, oh in [(224, 224), (232, int(232 * h / w)), (w * 2 // 3 + 1, h // 3),
                       (w + 17, h + 5), (37, 501), (w, h // 2 + 3), (w // 2, h), (1, 1)]:
            out = np.zeros((oh, ow, 3), np.uint8)
            st = lib.ra_image_resize_u8(out.ctypes.data, ow, oh, a.ctypes.data, w, h, 3, f)
            want = np.asarray(im.resize((ow, oh), f))
            cases += 1
            check(st == 0 and np.array_equal(out, want),
                  "%s %s %dx%d: %d pixels differ from PIL's (max %d)" % (
                      os.path.basename(path), name, ow, oh, int((out != want).sum()),
                      int(np.abs(out.astype(int) - want).max())))
print("resize: %d cases against PIL" % cases)


# ---- 3: the families' transforms ------------------------------------------------------
def safetensors_without_metadata(src, dst):
    b = open(src, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    head.pop("__metadata__", None)
    hb = json.dumps(head).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])


def folder(name, config, preprocessor=None):
    d = os.path.join(tmp, name)
    os.mkdir(d)
    safetensors_without_metadata(os.path.join(fixtures, "net_swin_timm.model.safetensors"),
                                 os.path.join(d, "model.safetensors"))
    json.dump(config, open(os.path.join(d, "config.json"), "w"))
    if preprocessor is not None:
        json.dump(preprocessor, open(os.path.join(d, "preprocessor_config.json"), "w"))
    return d


RES = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}


def tv_center_crop(a, ch, cw):   # torchvision's: offsets rounded half to even
    h, w = a.shape[:2]
    top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
    return a[top:top + ch, left:left + cw]


def hf_center_crop(a, ch, cw):   # transformers': offsets floored
    h, w = a.shape[:2]
    top, left = (h - ch) // 2, (w - cw) // 2
    return a[top:top + ch, left:left + cw]


def shorter(im, s, f):   # torchvision's Resize(int)
    w, h = im.size
    if w <= h:
        return im.resize((s, int(s * h / w)), f)
    return im.resize((int(s * w / h), s), f)


def keep_ratio(im, th, tw, longest, resample):   # timm's ResizeKeepRatio, written out
    ratio_h, ratio_w = im.size[1] / th, im.size[0] / tw
    ratio = max(ratio_h, ratio_w) * longest + min(ratio_h, ratio_w) * (1. - longest)
    return im.resize((round(im.size[0] * 1.0 / ratio), round(im.size[1] * 1.0 / ratio)), resample)


def center_crop_or_pad(a, ch, cw, fill):   # timm's center_crop_or_pad, written out
    h, w = a.shape[:2]
    if cw > w or ch > h:
        l, t = ((cw - w) // 2 if cw > w else 0), ((ch - h) // 2 if ch > h else 0)
        r, b = ((cw - w + 1) // 2 if cw > w else 0), ((ch - h + 1) // 2 if ch > h else 0)
        p = np.empty((h + t + b, w + l + r, 3), np.uint8)
        p[:] = np.array(fill, np.uint8)
        p[t:t + h, l:l + w] = a
        a = p
    h, w = a.shape[:2]
    top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
    return a[top:top + ch, left:left + cw]


def timm_pipeline(path, size, crop_pct, interp, mean, std, mode="center"):
    im = Image.open(path).convert("RGB")
    hw = size if isinstance(size, tuple) else (size, size)
    sh, sw = (math.floor(v / crop_pct) for v in hw)
    if mode == "squash":
        im = im.resize((sw, sh), RES[interp])
        a = tv_center_crop(np.asarray(im), *hw)
    elif mode == "border":
        im = keep_ratio(im, sh, sw, 1.0, RES[interp])
        a = center_crop_or_pad(np.asarray(im), *hw, [round(255 * v) for v in mean])
    elif sh != sw:   # timm's ResizeKeepRatio(scale_size): its own default, bilinear
        im = keep_ratio(im, sh, sw, 0.0, Image.BILINEAR)
        a = tv_center_crop(np.asarray(im), *hw)
    else:
        im = shorter(im, sh, RES[interp])
        a = tv_center_crop(np.asarray(im), *hw)
    x = a.astype(np.float32).transpose(2, 0, 1) / np.float32(255)   # ToTensor
    m, s = np.float32(mean).reshape(3, 1, 1), np.float32(std).reshape(3, 1, 1)
    return ((x - m) / s)[None]


def hf_pipeline(path, size, resample, mean, std, crop=None, shortest=False):
    im = Image.open(path).convert("RGB")
    im = shorter(im, size, resample) if shortest else im.resize((size, size), resample)
    a = np.asarray(im)
    if crop:
        a = hf_center_crop(a, crop, crop)
    x = (a.astype(np.float64) * (1 / 255)).astype(np.float32)   # rescale
    x = (x - np.float32(mean)) / np.float32(std)                  # normalize
    return x.transpose(2, 0, 1)[None]


mean_t, std_t = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
models = [
    ("timm center, bicubic, crop_pct 0.9",
     folder("timm", {"architecture": "swin_tiny_patch4_window7_224", "num_classes": 10,
                     "pretrained_cfg": {"input_size": [3, 32, 32], "crop_pct": 0.9,
                                        "interpolation": "bicubic", "mean": mean_t,
                                        "std": std_t}}),
     lambda p: timm_pipeline(p, 32, 0.9, "bicubic", mean_t, std_t)),
    ("timm squash, bilinear, crop_pct 0.95",
     folder("timm_squash", {"architecture": "swin_tiny_patch4_window7_224", "num_classes": 10,
                            "pretrained_cfg": {"input_size": [3, 32, 32], "crop_pct": 0.95,
                                               "crop_mode": "squash",
                                               "interpolation": "bilinear"}}),
     lambda p: timm_pipeline(p, 32, 0.95, "bilinear", mean_t, std_t, "squash")),
    ("timm border, bicubic, crop_pct 0.9",
     folder("timm_border", {"architecture": "swin_tiny_patch4_window7_224", "num_classes": 10,
                            "pretrained_cfg": {"input_size": [3, 32, 32], "crop_pct": 0.9,
                                               "crop_mode": "border",
                                               "interpolation": "bicubic", "mean": mean_t,
                                               "std": std_t}}),
     lambda p: timm_pipeline(p, 32, 0.9, "bicubic", mean_t, std_t, "border")),
    ("timm border, 32x48, crop_pct 1.0",
     folder("timm_border_rect", {"architecture": "swin_tiny_patch4_window7_224", "num_classes": 10,
                                 "pretrained_cfg": {"input_size": [3, 32, 48], "crop_pct": 1.0,
                                                    "crop_mode": "border",
                                                    "interpolation": "bicubic"}}),
     lambda p: timm_pipeline(p, (32, 48), 1.0, "bicubic", mean_t, std_t, "border")),
    ("timm center, 32x48 (ResizeKeepRatio, bilinear), crop_pct 0.9",
     folder("timm_rect", {"architecture": "swin_tiny_patch4_window7_224", "num_classes": 10,
                          "pretrained_cfg": {"input_size": [3, 32, 48], "crop_pct": 0.9,
                                             "interpolation": "bicubic"}}),
     lambda p: timm_pipeline(p, (32, 48), 0.9, "bicubic", mean_t, std_t)),
    ("transformers size {height, width}, resample 3, no crop",
     folder("hf", {"architecture": "swin_tiny_patch4_window7_224", "num_classes": 10,
                   "pretrained_cfg": {"input_size": [3, 32, 32]}},
            {"feature_extractor_type": "ViTFeatureExtractor", "do_resize": True,
             "size": {"height": 32, "width": 32}, "resample": 3,
             "do_normalize": True, "image_mean": mean_t, "image_std": std_t}),
     lambda p: hf_pipeline(p, 32, 3, mean_t, std_t)),
    ("transformers shortest_edge 37, lanczos, crop 32 (floored), default mean/std",
     folder("hf_crop", {"architecture": "swin_tiny_patch4_window7_224", "num_classes": 10,
                        "pretrained_cfg": {"input_size": [3, 32, 32]}},
            {"image_processor_type": "ViTImageProcessor", "size": {"shortest_edge": 37}, "resample": 1, "do_center_crop": True,
             "crop_size": {"height": 32, "width": 32}}),
     lambda p: hf_pipeline(p, 37, 1, [0.5] * 3, [0.5] * 3, crop=32, shortest=True)),
]
for what, path, pipeline in models:
    m = relattn.Model(path)
    desc, src = m.transform()
    worst = worst_p = 0.0
    for img in photos:
        got, want = m.preprocess(img), pipeline(img)
        err = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
        worst = max(worst, err)
        # the same float32 operations in the same order: equal, or one unit
        # of the last place where NumPy's vectorised division rounds alike
        check(err <= 2e-6 * max(1.0, float(np.abs(want).max())),
              "%s, %s: max |preprocess - PIL pipeline| = %g (%s; %s)" % (
                  what, os.path.basename(img), err, desc, src))
    # 4. classify = the softmax of the outputs for the PIL pipeline's tensor
    img = photos[0]
    r = subprocess.run([relattn_bin, "classify", path, img, "--top", "10", "--json"],
                       capture_output=True, text=True)
    check(r.returncode == 0, "%s: classify exit %d: %s" % (what, r.returncode, r.stderr))
    if r.returncode == 0:
        got = {t["class"]: t["probability"] for t in json.loads(r.stdout)[0]["top"]}
        y = m.predict(pipeline(img)).astype(np.float64)[0]
        p = np.exp(y - y.max())
        p /= p.sum()
        err = worst_p = max(abs(got[c] - p[c]) for c in got)
        check(len(got) == 10 and err < 2e-6, "%s: classify's probabilities differ from the "
              "PIL pipeline's by %g" % (what, err))
    print("%s: %s (%s); max |preprocess - PIL pipeline| %.3g over %d images, classify's "
          "max |dp| %.3g" % (what, desc, src, worst, len(photos), worst_p))
    m.close()

# ---- 5: relattn eval on an image folder -------------------------------------------------
def image_folder_order(root):   # torchvision's ImageFolder.make_dataset, written out
    exts = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for i, c in enumerate(classes):
        for r, _, fnames in sorted(os.walk(os.path.join(root, c), followlinks=True)):
            out += [(os.path.join(r, f), i) for f in sorted(fnames) if f.lower().endswith(exts)]
    return classes, out


ds = os.path.join(tmp, "ds")
names10 = ["b", "a", "é", "Z", "a b", "a.b", "c", "ß", "0", "_"]
for k, c in enumerate(names10):
    os.makedirs(os.path.join(ds, c, "sub"))
    shutil.copy(photos[k % len(photos)], os.path.join(ds, c, "x%d.PNG" % k))
    shutil.copy(photos[(k + 3) % len(photos)], os.path.join(ds, c, "sub", "y.jpeg"))
    open(os.path.join(ds, c, "notes.txt"), "w").write("not an image")
timm_dir = models[0][1]
classes, order = image_folder_order(ds)
r = subprocess.run([relattn_bin, "eval", timm_dir, "--data", ds, "--json", "--batch", "7"],
                   capture_output=True, text=True)
check(r.returncode == 0, "eval of a folder: exit %d: %s" % (r.returncode, r.stderr))
if r.returncode == 0:
    got = json.loads(r.stdout)
    check(got["classes"] == classes, "classes %s, ImageFolder's %s" % (got["classes"], classes))
    m = relattn.Model(timm_dir)
    conf = np.zeros((10, 10), int)
    top1 = top5 = 0
    for path, c in order:
        y = m.predict(models[0][2](path))[0]
        rank = np.argsort(-y, kind="stable")
        conf[c, rank[0]] += 1
        top1 += rank[0] == c
        top5 += c in rank[:5]
    check(got["images"] == len(order) == 20 and got["correct"] == top1 and
          abs(got["top5"] - top5 / len(order)) < 1e-12 and got["confusion"] == conf.tolist(),
          "eval of a folder: %s, want top-1 %d, top-5 %d, confusion %s" % (
              r.stdout[:300], top1, top5, conf.tolist()))
    m.close()
# hostile contents: a link loop (walked once), a corrupt, a 0-byte and a truncated image
os.symlink("..", os.path.join(ds, "a", "sub", "loop"))
r = subprocess.run([relattn_bin, "eval", timm_dir, "--data", ds, "--json"], capture_output=True,
                   text=True, timeout=120)
check(r.returncode == 0 and json.loads(r.stdout)["images"] == 20,
      "a link loop: exit %d, %s %s" % (r.returncode, r.stdout[:80], r.stderr))
jpeg = open(os.path.join(PHOTOS, "rocket.jpg"), "rb").read()
for name, data in [("zero.jpg", b""), ("cut.jpg", jpeg[:len(jpeg) // 2]),
                   ("text.png", b"not a png at all")]:
    bad = os.path.join(ds, "c", name)
    open(bad, "wb").write(data)
    r = subprocess.run([relattn_bin, "eval", timm_dir, "--data", ds], capture_output=True, text=True)
    check(r.returncode == 65 and name in r.stderr and r.stderr.count("\n") == 1,
          "%s: exit %d, %s" % (name, r.returncode, r.stderr))
    r = subprocess.run([relattn_bin, "eval", timm_dir, "--data", ds, "--skip-bad", "--json"],
                       capture_output=True, text=True)
    check(r.returncode == 0 and json.loads(r.stdout)["skipped"] == 1 and
          json.loads(r.stdout)["images"] == 20, "%s --skip-bad: %d %s" % (name, r.returncode,
                                                                         r.stderr))
    os.remove(bad)
os.makedirs(os.path.join(ds, "empty"))
r = subprocess.run([relattn_bin, "eval", timm_dir, "--data", ds], capture_output=True, text=True)
check(r.returncode == 65 and "empty" in r.stderr, "an empty class: %d %s" % (r.returncode,
                                                                           r.stderr))
# ---- 6: relattn train on an image folder (3 classes of tinted noise, sizes vary) ---------
tiny = ["--img-size", "16", "--embed-dim", "16", "--depths", "1,1", "--heads", "2,2",
        "--window", "4", "--patch", "2", "--epochs", "3", "--batch", "16", "--threads", "2"]
for grey in (False, True):
    root = os.path.join(tmp, "grey" if grey else "rgb")
    tinted_folder(root, [("train", 40), ("val", 12)], grey)
    ck = os.path.join(tmp, "ck%d.st" % grey)
    r = subprocess.run([relattn_bin, "train", "--data", root, "--out", ck, "--json"] + tiny,
                       capture_output=True, text=True)
    check(r.returncode == 0, "train on a folder: %d %s" % (r.returncode, r.stderr[-300:]))
    if r.returncode:
        continue
    last = json.loads(r.stdout.strip().split("\n")[-1])
    m = relattn.Model(ck)
    check(m.meta.get("in_chans") == ("1" if grey else "3") and
          json.loads(m.meta["labels"]) == ["blue", "green", "red"] and
          m.meta.get("transform.resize") == "shorter 16", "the checkpoint: %s" % m.meta)
    m.close()
    r = subprocess.run([relattn_bin, "eval", ck, "--data", root, "--json"], capture_output=True,
                       text=True)
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    check(got.get("correct") == last.get("test_correct") and got.get("images") == 36 and
          got.get("top1", 0) > 0.9, "eval of the checkpoint %s, train said %s" % (got, last))
# --val-split: the same seed, the same run, to the bit; a corrupt image; an output over an image
flat = os.path.join(tmp, "flat")
tinted_folder(flat, [("", 20)])
outs = []
for k in range(2):
    outs.append(os.path.join(tmp, "split%d.st" % k))
    r = subprocess.run([relattn_bin, "train", "--data", flat, "--val-split", "0.25", "--out",
                        outs[-1]] + tiny, capture_output=True, text=True)
    check(r.returncode == 0 and "/15)" in r.stderr,   # 15 of the 60 held out
          "--val-split 0.25 of 60: %s" % r.stderr[-200:])
# the same weights and optimiser state to the bit (the metadata holds the run's seconds)
t0, t1 = relattn.load(outs[0])[0], relattn.load(outs[1])[0]
check(t0.keys() == t1.keys() and all(np.array_equal(t0[k], t1[k]) for k in t0),
      "--val-split: two runs of the same seed differ")
open(os.path.join(flat, "red", "bad.png"), "wb").write(b"\x89PNG\r\n\x1a\n broken")
r = subprocess.run([relattn_bin, "train", "--data", flat, "--val-split", "0.25", "--out",
                    os.path.join(tmp, "x.st")] + tiny, capture_output=True, text=True)
check(r.returncode == 65 and "bad.png" in r.stderr and not os.path.exists(os.path.join(tmp, "x.st")),
      "a corrupt image: %d %s" % (r.returncode, r.stderr))
r = subprocess.run([relattn_bin, "train", "--data", flat, "--val-split", "0.25", "--skip-bad",
                    "--out", os.path.join(tmp, "x.st")] + tiny, capture_output=True, text=True)
check(r.returncode == 0 and "skipped 1" in r.stderr, "--skip-bad: %d %s" % (r.returncode, r.stderr))
# the loaded bytes do not depend on the threads; a PNG bomb is refused by its header
fo = ImageFolder()
relattn.check(lib.ra_image_folder_scan(ctypes.byref(fo), os.fsencode(os.path.join(root, "train"))))
loaded = []
for threads in (1, 2, 3):
    lib.ra_threads_set(threads)
    d = Dataset()
    relattn.check(lib.ra_dataset_from_folder(ctypes.byref(d), ctypes.byref(fo), None,
                                             fo.n, 24, 0, None))
    n = d.n * d.c * d.h * d.w
    loaded.append((d.n, d.c, ctypes.string_at(d.images, n), ctypes.string_at(d.labels, d.n)))
    lib.ra_dataset_free(ctypes.byref(d))
lib.ra_threads_set(0)
lib.ra_image_folder_free(ctypes.byref(fo))
check(loaded[0] == loaded[1] == loaded[2] and loaded[0][0] == 120,
      "ra_dataset_from_folder differs between 1, 2 and 3 threads")
bomb = os.path.join(flat, "green", "bomb.png")   # a header of 60000 x 60000, then nothing


def chunk(kind, data):
    import zlib
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


open(bomb, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 60000, 60000,
                                                                           8, 2, 0, 0, 0)))
r = subprocess.run([relattn_bin, "train", "--data", flat, "--val-split", "0.25", "--out",
                    os.path.join(tmp, "x.st")] + tiny, capture_output=True, text=True)
check(r.returncode == 65 and "bomb.png" in r.stderr and "limit" in r.stderr,
      "a PNG bomb: %d %s" % (r.returncode, r.stderr))
os.remove(bomb)
victim = os.path.join(flat, "blue", "1.png")
before = open(victim, "rb").read()
r = subprocess.run([relattn_bin, "train", "--data", flat, "--val-split", "0.25", "--skip-bad",
                    "--out", victim] + tiny, capture_output=True, text=True)
check(r.returncode == 73 and open(victim, "rb").read() == before,
      "--out an image of the data: %d %s" % (r.returncode, r.stderr))

# ---- 7: torchvision's own weights' transforms, end to end (with PyTorch) -----------------
try:
    import torch
    import torchvision
    from torchvision.models import Swin_T_Weights, ViT_B_16_Weights
except ImportError as e:
    torch = None
    check(os.environ.get("RELATTN_REQUIRE_TORCH") != "1", "PyTorch required, missing: %s" % e)
    print("torchvision's transforms: not compared (no PyTorch and torchvision)")
if torch is not None:
    torch.manual_seed(0)
    for builder, weights in [("swin_t", Swin_T_Weights.IMAGENET1K_V1),
                             ("vit_b_16", ViT_B_16_Weights.IMAGENET1K_V1)]:
        model = getattr(torchvision.models, builder)().eval()   # random weights, 1000 classes
        with torch.no_grad():   # (vit_b_16's head starts at zero: every class alike)
            for prm in model.parameters():
                if prm.ndim == 2 and prm.shape[0] == 1000:
                    prm.normal_(0, 0.05)
        pth = os.path.join(tmp, builder + ".pth")
        torch.save(model.state_dict(), pth)
        pipeline = weights.transforms()   # the weights' own transform, on PIL images
        for img in photos[:2] + photos[len(NAMES):len(NAMES) + 1]:
            x = pipeline(Image.open(img).convert("RGB")).unsqueeze(0)
            with torch.no_grad():
                p = torch.softmax(model(x)[0].double(), 0)
            r = subprocess.run([relattn_bin, "classify", pth, img, "--top", "1000", "--json"],
                               capture_output=True, text=True)
            if r.returncode:
                check(False, "%s classify: %s" % (builder, r.stderr))
                continue
            got = np.zeros(1000)
            for t in json.loads(r.stdout)[0]["top"]:
                got[t["class"]] = t["probability"]
            err = float(np.abs(got - p.numpy()).max())
            same5 = set(np.argsort(-got)[:5]) == set(torch.topk(p, 5).indices.tolist())
            # the JSON's 6 decimals: 5e-7; a wrong resize or filter moves p by 4e-5 and more
            check(err < 5e-6 and same5, "%s, %s: max |p - torchvision's| = %.3g, top-5 %s" % (
                builder, os.path.basename(img), err, "the same" if same5 else "differs"))
            print("%s %s: max |dp| %.2g over 1000 classes" % (builder, os.path.basename(img), err))
        os.remove(pth)

shutil.rmtree(tmp)
done("test_transform")
