"""The image-folder loader against PIL: images/s of decoding a JPEG and
bringing it to S x S (Resize(S) bilinear + CenterCrop(S)), relattn's
ra_dataset_from_folder at 1 and 2 threads and PIL in one Python thread,
medians of 3 runs, on a folder of 200 JPEGs written from python3-skimage's
photos (quality 90; 300x451 to 600x400 pixels).
  RELATTN_LIBRARY=build/librelattn.so /usr/bin/python3 bench/loader.py [DIR]"""
import ctypes
import glob
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from PIL import Image  # noqa: E402
from relattn._lib import Dataset, ImageFolder, lib  # noqa: E402

PHOTOS = "/usr/lib/python3/dist-packages/skimage/data/"
root = sys.argv[1] if len(sys.argv) > 1 else "/tmp/relattn-loader-bench"
if not os.path.exists(root):
    names = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png",
             "hubble_deep_field.jpg"]
    for c in range(4):
        os.makedirs(f"{root}/c{c}")
        for i in range(50):
            Image.open(PHOTOS + names[(i + c) % len(names)]).convert("RGB").save(
                f"{root}/c{c}/{i}.jpg", quality=90)


def median_of(run, k=3):
    ts = []
    for _ in range(k):
        t0 = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


f = ImageFolder()
assert lib.ra_image_folder_scan(ctypes.byref(f), root.encode()) == 0
files = sorted(glob.glob(f"{root}/*/*.jpg"))
print("what,size,threads,images,median_s,images_per_s")
for size in (224, 64):
    for threads in (1, 2):
        lib.ra_threads_set(threads)

        def load():
            d = Dataset()
            assert lib.ra_dataset_from_folder(ctypes.byref(d), ctypes.byref(f), None,
                                              f.n, size, 0, None) == 0
            lib.ra_dataset_free(ctypes.byref(d))
        m = median_of(load)
        print(f"relattn,{size},{threads},{f.n},{m:.3f},{f.n / m:.0f}")

    def pil():
        for p in files:
            im = Image.open(p).convert("RGB")
            w, h = im.size
            im = im.resize((size, int(size * h / w)) if w <= h else (int(size * w / h), size),
                           Image.BILINEAR)
            w, h = im.size
            left, top = int(round((w - size) / 2)), int(round((h - size) / 2))
            im.crop((left, top, left + size, top + size)).tobytes()
    m = median_of(pil)
    print(f"PIL,{size},1,{len(files)},{m:.3f},{len(files) / m:.0f}")

# ---- the training loader (ra_loader): timm's training transform at 224 ----------------
# images/s of fetching every image once (4 batches of 50) from a fresh loader, medians
# of 3; against torchvision's transforms in one Python thread (what each of PyTorch's
# DataLoader workers runs), decoding with PIL as relattn decodes with libjpeg-turbo.
from relattn._lib import LoaderConfig  # noqa: E402,F401
try:
    import torch  # noqa: F401
    import torchvision.transforms as T
except ImportError:
    T = None
lib.ra_threads_set(2)
for recipe in ("rrc+flip", "timm"):
    for workers in (1, 2):
        def run():
            c = lib.ra_loader_config_default()
            c.size, c.batch, c.seed, c.workers = 224, 50, 1, workers
            if recipe == "timm":
                c.randaugment, c.reprob = 1, 0.25
                assert lib.ra_randaugment_parse(ctypes.byref(c.ra), b"rand-m9-mstd0.5-inc1") == 0
            h = ctypes.c_void_p()
            assert lib.ra_loader_create(ctypes.byref(h), ctypes.byref(f), None, f.n,
                                        ctypes.byref(c)) == 0
            x = (ctypes.c_float * (50 * 3 * 224 * 224))()
            lab = (ctypes.c_int32 * 50)()
            for step in range(4):
                assert lib.ra_loader_batch(h, step, x, lab, None, None) == 0
            lib.ra_loader_free(h)
        m = median_of(run)
        print(f"relattn loader {recipe},224,{workers},{f.n},{m:.3f},{f.n / m:.0f}")
    if T is None:
        continue
    ops = [T.RandomResizedCrop(224, interpolation=T.InterpolationMode.BICUBIC),
           T.RandomHorizontalFlip()]
    if recipe == "timm":   # torchvision's RandAugment (timm is not packaged): 2 ops, m 9
        ops.append(T.RandAugment(2, 9, interpolation=T.InterpolationMode.BICUBIC))
    ops += [T.ToTensor(), T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]
    if recipe == "timm":
        ops.append(T.RandomErasing(0.25, value="random"))
    tf = T.Compose(ops)
    torch.set_num_threads(1)

    def tv():
        for p in files:
            tf(Image.open(p).convert("RGB"))
    m = median_of(tv)
    print(f"torchvision {recipe},224,1,{len(files)},{m:.3f},{len(files) / m:.0f}")
lib.ra_image_folder_free(ctypes.byref(f))
