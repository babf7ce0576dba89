"""test_loader.py - the training loader (ra_loader) against PIL and timm's draws.

  1. the training pipeline's bytes: with the crop forced to the whole image
     (scale 1..1, the images' own aspect ratio) and every image flipped,
     each sample equals PIL's resize (bicubic and bilinear) + mirror +
     ToTensor + Normalize of one file, every file once an epoch;
  2. evaluation batches in the folder's order, the last one partial, equal
     to PIL's pipeline;
  3. the same bits at 0, 1 and 3 workers, and after the queue restarts at
     another step (RandAugment and erasing on);
  4. RandomResizedCrop's and RandomErasing's draws against twins of timm's
     get_params (Python's random) over 20000 draws each: two-sample
     Kolmogorov-Smirnov distances of the area share and the aspect ratio,
     and the erasing's probability;
  5. a truncated JPEG: the batch fails naming it; with skip_bad it is
     counted and replaced;
  7. relattn train --init of a torchvision Swin, a timm Swin and a
     torchvision ViT: the checkpoint keeps the source's naming, has a head
     for the folder's classes and their names, eval of it counts what the
     run counted, an interrupted run resumes to the same weights; refusals;
  6. relattn train --augment timm on a folder: the checkpoint records the
     recipe and the evaluation transform (eval of it counts what the run's
     last evaluation counted), the same weights at 0 and 3 workers and
     after an interrupted run is resumed; mixup on IDX-like in-memory data;
     the refusals (an odd batch with mixup, the streamed options without
     --augment timm, a corrupt image: 65 naming it, nothing written).
Exit 77 (skipped) without NumPy, PIL or the photos.
  python3 test_loader.py PYTHON_PACKAGE_DIR RELATTN_BINARY"""
import ctypes
import math
import os
import random
import json
import shutil
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
NAMES = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png"]
need_photos(NAMES)
sys.path.insert(0, sys.argv[1])
import relattn  # noqa: E402
from relattn._lib import ImageFolder, LoaderConfig, Rng, lib  # noqa: E402

# the C struct is 392 bytes (tests/test_loader.c checks sizeof): the ctypes
# mirror must be too, or ra_loader_config_default writes past it
check(ctypes.sizeof(LoaderConfig) == 392,
      "ctypes LoaderConfig is %d bytes, the C struct 392" % ctypes.sizeof(LoaderConfig))

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
BILINEAR, BICUBIC = 2, 3
PIL_FILTER = {BILINEAR: Image.BILINEAR, BICUBIC: Image.BICUBIC}

tmp = tempfile.mkdtemp(prefix="relattn_loader.")
W, H = 90, 60   # every image 3:2, so that the whole image is the crop
files = []
for c, name in enumerate(NAMES[:3]):
    d = os.path.join(tmp, "fold", "class%d" % c)
    os.makedirs(d)
    im = Image.open(os.path.join(PHOTOS, name)).convert("RGB")
    for k in range(5):
        w0, h0 = im.size
        box = (k * 17, k * 11, k * 17 + w0 * 2 // 3, k * 11 + h0 * 2 // 3)
        p = os.path.join(d, "%d.%s" % (k, "jpg" if k % 2 else "png"))
        im.crop(box).resize((W, H), Image.LANCZOS).save(p, quality=90)
        files.append(p)


def tensor(img):
    """ToTensor + Normalize of a PIL image, float32 as torchvision computes it."""
    a = np.asarray(img, np.float32) / np.float32(255)
    return ((a - MEAN) / STD).transpose(2, 0, 1)


def scan(d):
    f = ImageFolder()
    relattn.check(lib.ra_image_folder_scan(ctypes.byref(f), os.fsencode(d)))
    return f


def loader(f, n, setup=None, **kw):
    c = lib.ra_loader_config_default()
    for k, v in kw.items():
        if k in ("scale", "ratio"):
            getattr(c, k)[0], getattr(c, k)[1] = v
        else:
            setattr(c, k, v)
    if setup:
        setup(c)
    h = ctypes.c_void_p()
    relattn.check(lib.ra_loader_create(ctypes.byref(h), ctypes.byref(f), None, n, ctypes.byref(c)))
    return h, c


def batch(h, c, step):
    x = np.zeros((c.batch, 3, c.size, c.size), np.float32)
    lab = np.zeros(c.batch, np.int32)
    bad = np.zeros(c.batch, np.uint8)
    b = ctypes.c_int()
    relattn.check(lib.ra_loader_batch(h, step, x.ctypes.data, lab.ctypes.data, bad.ctypes.data,
                                      ctypes.byref(b)))
    return x[:b.value], lab[:b.value], bad[:b.value]


fold = scan(os.path.join(tmp, "fold"))
N = fold.n
check(N == 15, "15 images listed (%d)" % N)

# ---- 1. the training pipeline against PIL -----------------------------------------------
for interp in (BICUBIC, BILINEAR):
    S = 40
    want = [tensor(Image.open(p).convert("RGB").resize((S, S), PIL_FILTER[interp])
                   .transpose(Image.FLIP_LEFT_RIGHT)) for p in files]
    h, c = loader(fold, N, size=S, batch=5, seed=11, interp=interp, scale=(1.0, 1.0),
                  ratio=(W / H, W / H), hflip=1.0, workers=2)
    for epoch in range(2):
        seen = []
        for step in range(epoch * 3, epoch * 3 + 3):
            x, lab, _ = batch(h, c, step)
            for s in range(len(x)):
                match = [i for i, t in enumerate(want) if np.array_equal(t, x[s])]
                check(len(match) == 1, "interp %d step %d sample %d equals PIL's pipeline of one "
                      "file (max |d| to the nearest %.3g)" % (interp, step, s,
                                                               min(float(np.abs(t - x[s]).max())
                                                                   for t in want)))
                if match:
                    seen.append(match[0])
                    check(lab[s] == match[0] // 5, "its label is its class")
        check(sorted(seen) == list(range(N)), "epoch %d holds every image once" % epoch)
    lib.ra_loader_free(h)

# crops inside the image: a quarter of each 20 x 14 image (10 x 7, its aspect), at any of
# the 88 places; each sample equals PIL's crop + resize of one of them
small = os.path.join(tmp, "small", "only")
os.makedirs(small)
cands = []
for k in range(4):
    im = Image.open(files[3 * k]).convert("RGB").resize((20, 14), Image.BILINEAR)
    im.save(os.path.join(small, "%d.png" % k))
    for y in range(8):
        for x in range(11):
            cands.append(tensor(im.crop((x, y, x + 10, y + 7)).resize((12, 12), Image.BICUBIC)))
sf = scan(os.path.join(tmp, "small"))
h, c = loader(sf, 4, size=12, batch=4, seed=2, scale=(0.25, 0.25), ratio=(10 / 7, 10 / 7),
              hflip=0.0, workers=1)
for step in range(6):
    x, _, _ = batch(h, c, step)
    for s in range(4):
        check(any(np.array_equal(t, x[s]) for t in cands),
              "step %d sample %d: a crop equal to PIL's crop + resize of the image" % (step, s))
lib.ra_loader_free(h)
lib.ra_image_folder_free(ctypes.byref(sf))

# ---- 2. evaluation batches, in order --------------------------------------------------
S = 32


def squash(c):   # Resize((S, S)) bilinear + ToTensor + Normalize
    c.eval.resize, c.eval.resize_h, c.eval.resize_w, c.eval.interp = 2, S, S, BILINEAR
    c.eval.normalize = 1
    c.eval.mean[:] = MEAN.tolist()
    c.eval.std[:] = STD.tolist()


h, c2 = loader(fold, N, squash, train=0, size=S, batch=4, workers=1)
check(lib.ra_loader_batches(h) == 4, "15 images in batches of 4: 4 batches")
got = []
for step in range(4):
    x, lab, bad = batch(h, c2, step)
    got += list(x)
    check(len(x) == (3 if step == 3 else 4), "batch %d holds %d images" % (step, len(x)))
check(all(np.array_equal(tensor(Image.open(p).convert("RGB").resize((S, S), Image.BILINEAR)), g)
          for p, g in zip(files, got)), "evaluation batches: PIL's pipeline, in the folder's order")
lib.ra_loader_free(h)

# ---- 3. the same bits at any worker count, and after a restart --------------------------
full = dict(size=36, batch=6, seed=5, randaugment=1, reprob=0.5)
runs = {}
for workers in (0, 1, 3):
    h, c = loader(fold, N, lambda c: relattn.check(lib.ra_randaugment_parse(
        ctypes.byref(c.ra), b"rand-m9-mstd0.5-inc1")), workers=workers, **full)
    order = [0, 1, 2, 3, 4, 5] if workers != 3 else [4, 5, 0, 1, 2, 3]   # 3 restarts at 4, 0
    runs[workers] = {s: batch(h, c, s)[0] for s in order}
    lib.ra_loader_free(h)
for workers in (1, 3):
    check(all(np.array_equal(runs[0][s], runs[workers][s]) for s in range(6)),
          "%d workers give the bits of none" % workers)
check(not np.array_equal(runs[0][0], runs[0][2]), "two epochs' batches differ")

# ---- 4. the draws against twins of timm's ---------------------------------------------


def timm_rrc(w, h, scale, ratio, rnd):
    area = w * h
    for _ in range(10):
        target = rnd.uniform(*scale) * area
        aspect = math.exp(rnd.uniform(math.log(ratio[0]), math.log(ratio[1])))
        cw, ch = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if cw <= w and ch <= h:
            return cw, ch
    r = w / h
    if r < min(ratio):
        return w, int(round(w / min(ratio)))
    if r > max(ratio):
        return int(round(h * max(ratio))), h
    return w, h


def timm_erase(hh, ww, p, rnd):
    if rnd.random() > p:
        return None
    area = hh * ww
    for _ in range(10):
        target = rnd.uniform(0.02, 1 / 3) * area
        aspect = math.exp(rnd.uniform(math.log(0.3), math.log(1 / 0.3)))
        h = int(round(math.sqrt(target * aspect)))
        w = int(round(math.sqrt(target / aspect)))
        if w < ww and h < hh:
            return w, h
    return None


def ks(a, b):
    """Two-sample Kolmogorov-Smirnov distance."""
    a, b = np.sort(a), np.sort(b)
    v = np.concatenate([a, b])
    return float(np.abs(np.searchsorted(a, v, "right") / len(a) -
                        np.searchsorted(b, v, "right") / len(b)).max())


n = 20000
bound = 1.95 * math.sqrt(2 / n)   # alpha 0.001
rnd = random.Random(3)
g = Rng()
lib.ra_rng_seed(ctypes.byref(g), 9)
box = (ctypes.c_int * 4)()
for (w, h) in ((400, 300), (1000, 60), (64, 64)):
    sc = (ctypes.c_double * 2)(0.08, 1.0)
    ra = (ctypes.c_double * 2)(3 / 4, 4 / 3)
    ours, twin = [], []
    inside = True
    for _ in range(n):
        lib.ra_random_resized_crop(w, h, sc, ra, ctypes.byref(g), box)
        inside &= 0 <= box[0] and 0 <= box[1] and box[0] + box[2] <= w and box[1] + box[3] <= h
        ours.append((box[2] * box[3] / (w * h), box[2] / box[3]))
        cw, ch = timm_rrc(w, h, (0.08, 1.0), (3 / 4, 4 / 3), rnd)
        twin.append((cw * ch / (w * h), cw / ch))
    ours, twin = np.array(ours), np.array(twin)
    check(inside, "%dx%d: every crop inside the image" % (w, h))
    for k, what in ((0, "area share"), (1, "aspect ratio")):
        d = ks(ours[:, k], twin[:, k])
        print("%dx%d RandomResizedCrop %s: KS %.4f (bound %.4f)" % (w, h, what, d, bound))
        check(d < bound, "%dx%d RandomResizedCrop %s: KS distance %.4f to timm's (bound %.4f)"
              % (w, h, what, d, bound))
x = np.zeros((3, 50, 70), np.float32)
ours, twin, hits = [], [], 0
for _ in range(n):
    if lib.ra_random_erasing(x.ctypes.data, 3, 50, 70, 0.4, ctypes.byref(g), box):
        hits += 1
        ours.append((box[2] * box[3] / 3500, box[2] / box[3]))
    t = timm_erase(50, 70, 0.4, rnd)
    if t:
        twin.append((t[0] * t[1] / 3500, t[0] / t[1]))
ours, twin = np.array(ours), np.array(twin)
check(abs(hits / n - len(twin) / n) < 4 * math.sqrt(0.4 * 0.6 / n) * 1.5,
      "erasing probability %.4f (timm's twin %.4f)" % (hits / n, len(twin) / n))
for k, what in ((0, "area share"), (1, "aspect ratio")):
    d = ks(ours[:, k], twin[:, k])
    print("RandomErasing %s: KS %.4f over %d and %d boxes" % (what, d, len(ours), len(twin)))
    check(d < 1.95 * math.sqrt(1 / len(ours) + 1 / len(twin)),
          "RandomErasing %s: KS distance %.4f to timm's" % (what, d))

# ---- 5. a truncated JPEG ---------------------------------------------------------------
bad_dir = os.path.join(tmp, "bad")
shutil.copytree(os.path.join(tmp, "fold"), bad_dir)
victim = os.path.join(bad_dir, "class1", "1.jpg")
with open(victim, "r+b") as fh:
    fh.truncate(300)
bf = scan(bad_dir)
h, c = loader(bf, N, size=24, batch=15, seed=1, workers=2)
xb = np.zeros((15, 3, 24, 24), np.float32)
lb = np.zeros(15, np.int32)
st = lib.ra_loader_batch(h, 0, xb.ctypes.data, lb.ctypes.data, None, None)
why = lib.ra_last_error().decode()
check(st != 0 and "1.jpg" in why, "a truncated JPEG fails the batch naming it: %r" % why)
lib.ra_loader_free(h)
h, c = loader(bf, N, size=24, batch=15, seed=1, workers=2, skip_bad=1)
x, lab, _ = batch(h, c, 0)
check(lib.ra_loader_skipped(h) == 1 and np.isfinite(x).all(),
      "skip_bad: one image skipped (%d), the batch full" % lib.ra_loader_skipped(h))
lib.ra_loader_free(h)

# ---- 6. relattn train --augment timm ------------------------------------------------------
relattn_bin = sys.argv[2]
root = os.path.join(tmp, "tv")
tinted_folder(root, [("train", 24), ("val", 8)], sides=(20, 70))
tiny = ["--img-size", "16", "--embed-dim", "16", "--depths", "1,1", "--heads", "2,2",
        "--window", "4", "--patch", "2", "--epochs", "2", "--batch", "12", "--threads", "2"]


def train(*args):
    return subprocess.run([relattn_bin, "train", "--data", root] + list(args), capture_output=True,
                          text=True)


cks = [os.path.join(tmp, "w%d.st" % k) for k in range(4)]
r = train("--augment", "timm", "--out", cks[0], "--json", *tiny)
check(r.returncode == 0, "train --augment timm: %d %s" % (r.returncode, r.stderr[-300:]))
last = json.loads(r.stdout.strip().split("\n")[-1]) if r.returncode == 0 else {}
if r.returncode == 0:
    m = relattn.Model(cks[0])
    want = {"in_chans": "3", "mean": "0.485,0.456,0.406", "std": "0.229,0.224,0.225",
            "transform.resize": "shorter 18", "transform.crop": "16x16",
            "transform.interpolation": "bicubic", "train.augment": "timm",
            "train.rand_augment": "rand-m9-mstd0.5-inc1", "train.mixup": "0.800000012",
            "train.cutmix": "1", "train.reprob": "0.25", "tta": "none"}
    check(all(m.meta.get(k) == v for k, v in want.items()),
          "the checkpoint records the recipe: %s" % {k: m.meta.get(k) for k in want})
    m.close()
    r = subprocess.run([relattn_bin, "eval", cks[0], "--data", root, "--json"],
                       capture_output=True, text=True)
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    check(got.get("correct") == last.get("test_correct") and got.get("images") == 24,
          "eval of the checkpoint %s, train said %s" % (got, last))
r = train("--augment", "timm", "--out", cks[1], "--workers", "0", *tiny)
r2 = train("--augment", "timm", "--out", cks[2], "--workers", "3", "--max-steps", "5", *tiny)
r3 = subprocess.run([relattn_bin, "train", "--resume", cks[2], "--data", root, "--out", cks[2],
                     "--workers", "1"], capture_output=True, text=True)
check(r.returncode == r2.returncode == r3.returncode == 0,
      "the runs: %s %s %s" % (r.stderr[-200:], r2.stderr[-200:], r3.stderr[-200:]))
ws = [relattn.load(p)[0] if os.path.exists(p) else {} for p in cks[:3]]
for k, what in ((1, "0 workers"), (2, "3 workers, interrupted at step 5 and resumed on 1")):
    check(ws[0].keys() == ws[k].keys() and all(np.array_equal(ws[0][t], ws[k][t]) for t in ws[0]),
          "--augment timm: %s gives other weights" % what)
r = train("--mixup", "0.8", "--cutmix", "1.0", "--out", cks[3], *tiny)
check(r.returncode == 0 and relattn.Model(cks[3]).meta.get("train.cutmix") == "1",
      "mixup and cutmix on data in memory: %s" % r.stderr[-200:])
odd = [v if v != "12" else "13" for v in tiny]   # --batch 13
for args, code, words in ((odd + ["--mixup", "0.8"], 64, "even"),
                          (["--rand-augment", "rand-m9"], 64, "--augment timm"),
                          (["--augment", "timm", "--rand-augment", "rand-x9"], 64, "rand-x9"),
                          (["--augment", "timm", "--workers", "999"], 64, "--workers")):
    r = train(*((args if args[0] == "--img-size" else tiny + args) +
                ["--out", os.path.join(tmp, "no.st")]))
    check(r.returncode == code and words in r.stderr and not os.path.exists(os.path.join(tmp, "no.st")),
          "%s: %d %s" % (args, r.returncode, r.stderr[-200:]))
open(os.path.join(root, "train", "red", "bad.png"), "wb").write(b"\x89PNG\r\n\x1a\n broken")
r = train("--augment", "timm", "--out", os.path.join(tmp, "no.st"), *tiny)
check(r.returncode == 65 and "bad.png" in r.stderr and not os.path.exists(os.path.join(tmp, "no.st")),
      "a corrupt image: %d %s" % (r.returncode, r.stderr[-200:]))
r = train("--augment", "timm", "--skip-bad", "--out", os.path.join(tmp, "sk.st"), *tiny)
check(r.returncode == 0 and "skipped" in r.stderr, "--skip-bad: %d %s" % (r.returncode, r.stderr[-200:]))

# ---- 7. relattn train --init: fine-tuning a model of each family's naming ------------------
fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
os.remove(os.path.join(root, "train", "red", "bad.png"))
small = ["--epochs", "2", "--batch", "12", "--threads", "2", "--augment", "timm"]
for name, scheme in (("net_swin_tv", "torchvision"), ("net_swin_timm", "timm"),
                     ("vit_grad_tv", "torchvision")):
    src = os.path.join(fixtures, name + ".model.safetensors")
    ck, ck2 = os.path.join(tmp, name + ".st"), os.path.join(tmp, name + "_r.st")
    r = train("--init", src, "--out", ck, "--json", *small)
    check(r.returncode == 0, "--init %s: %d %s" % (name, r.returncode, r.stderr[-300:]))
    if r.returncode:
        continue
    last = json.loads(r.stdout.strip().split("\n")[-1])
    m = relattn.Model(ck)
    check(m.meta.get("num_classes") == "3" and json.loads(m.meta["labels"]) == ["blue", "green", "red"]
          and m.scheme == scheme, "--init %s: the checkpoint %s, scheme %s" % (name, m.meta, m.scheme))
    m.close()
    r = subprocess.run([relattn_bin, "eval", ck, "--data", root, "--json"], capture_output=True,
                       text=True)
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    check(got.get("correct") == last.get("test_correct"),
          "--init %s: eval %s, train said %s" % (name, got, last))
    r = train("--init", src, "--out", ck2, "--max-steps", "3", *small)
    r2 = subprocess.run([relattn_bin, "train", "--resume", ck2, "--data", root, "--out", ck2],
                        capture_output=True, text=True)
    a_, b_ = relattn.load(ck)[0], relattn.load(ck2)[0] if r2.returncode == 0 else {}
    check(a_.keys() == b_.keys() and all(np.array_equal(a_[t], b_[t]) for t in a_),
          "--init %s: interrupted and resumed, other weights (%s)" % (name, r2.stderr[-200:]))
src = os.path.join(fixtures, "net_swin_tv.model.safetensors")
# --freeze: a linear probe, every weight but the head's as it was
r = train("--init", src, "--freeze", "--out", os.path.join(tmp, "probe.st"), *small)
a_, b_ = relattn.load(src)[0], relattn.load(os.path.join(tmp, "probe.st"))[0] if r.returncode == 0 else {}
body = [k for k in b_ if not k.startswith("head.") and not k.startswith("__")]
check(r.returncode == 0 and len(body) > 50 and all(np.array_equal(a_[k], b_[k]) for k in body),
      "--freeze: %s" % r.stderr[-200:])
for args, code, words in ((["--num-classes", "2"], 64, "--num-classes"),
                          (["--augment", "crop"], 64, "--augment crop")):
    r = train("--init", src, "--out", os.path.join(tmp, "no.st"), *(args + small[:6]))
    check(r.returncode == code and words in r.stderr and not os.path.exists(os.path.join(tmp, "no.st")),
          "--init %s: %d %s" % (args, r.returncode, r.stderr[-200:]))
r = subprocess.run([relattn_bin, "train", "--init", src, "--data", os.path.join(tmp, "nowhere"),
                    "--out", os.path.join(tmp, "no.st")], capture_output=True, text=True)
check(r.returncode == 64 and "image folder" in r.stderr, "--init on IDX data: %d %s"
      % (r.returncode, r.stderr[-200:]))

shutil.rmtree(tmp)
done("test_loader")
