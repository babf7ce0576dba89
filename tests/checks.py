"""checks.py - what the Python tests share: counting their checks, and
skipping (exit 77, as ctest's SKIP_RETURN_CODE) without what they need.

    from checks import check, done, need_photos
    need_photos(["astronaut.png", ...])   # python3-skimage's data folder
    check(ok, "what went wrong")          # counted; a failure printed
    done("test_x")                        # the counts; exit 1 on a failure"""
import os
import sys

PHOTOS = "/usr/lib/python3/dist-packages/skimage/data"
passed = failed = 0


def check(ok, what):
    global failed, passed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, file=sys.stderr)


def skip(why):
    print("skipped: %s" % why)
    sys.exit(77)


def need_torch(*names):
    """The modules names (numpy, torch, torchvision, PIL.Image, ...), or exit
    77 (skipped) without one; a failure when RELATTN_REQUIRE_TORCH=1 (CI's
    stage with PyTorch)."""
    import importlib
    try:
        return [importlib.import_module(n) for n in names]
    except ImportError as e:
        if os.environ.get("RELATTN_REQUIRE_TORCH") == "1":
            print("FAIL: PyTorch required, missing: %s" % e)
            sys.exit(1)
        skip("%s (RELATTN_WITH_TORCH=1 scripts/deps.sh installs python3-torch)" % e)


def need_photos(names):
    if not all(os.path.exists(os.path.join(PHOTOS, n)) for n in names):
        skip("no photos in %s (Debian's python3-skimage)" % PHOTOS)


def tinted_folder(root, splits, grey=False, seed=0, sides=(12, 60)):
    """An image folder of 3 classes, red, green and blue, of tinted noise
    (the class in one channel; grey: in the brightness), sides in
    [sides[0], sides[1]), PNG and JPEG alternately: splits is a list of
    (subfolder, images per class)."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    for split, n in splits:
        for c, name in enumerate(["red", "green", "blue"]):
            d = os.path.join(root, split, name)
            os.makedirs(d)
            for i in range(n):
                w, h = (int(v) for v in rng.integers(sides[0], sides[1], 2))
                a = rng.integers(0, 120, (h, w, 3)).astype(np.uint8)
                a[..., c] += 100
                im = Image.fromarray(a)
                if grey:
                    im = Image.fromarray((rng.integers(0, 90, (h, w)) + 80 * c).astype(np.uint8))
                im.save(os.path.join(d, "%d.%s" % (i, "png" if i % 2 else "jpg")))


def photo_crops(root, names, splits, side=224, seed=1):
    """An image folder of len(names) classes, class c square crops of the
    photo names[c] (random place and size, then bicubic to side x side),
    as PNGs: splits is a list of (subfolder, images per class). The files
    and the labels in ImageFolder's order of the first split are returned."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    for split, n in splits:
        for c, name in enumerate(names):
            d = os.path.join(root, split, "class%d" % c)
            os.makedirs(d)
            im = Image.open(os.path.join(PHOTOS, name)).convert("RGB")
            for i in range(n):
                w, h = im.size
                s = int(rng.integers(min(w, h) // 3, min(w, h)))
                x, y = int(rng.integers(0, w - s + 1)), int(rng.integers(0, h - s + 1))
                im.crop((x, y, x + s, y + s)).resize((side, side), Image.BICUBIC).save(
                    os.path.join(d, "%d.png" % i))
    first, n = splits[0]
    files = [os.path.join(root, first, "class%d" % c, "%d.png" % i)
             for c in range(len(names)) for i in range(n)]
    return files, [c for c in range(len(names)) for _ in range(n)]


def done(name):
    print("%s: %d checks passed, %d failed" % (name, passed, failed))
    sys.exit(1 if failed else 0)
