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
lib.ra_image_folder_free(ctypes.byref(f))
