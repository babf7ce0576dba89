"""fmnist_folder.py - Fashion-MNIST's IDX files as an image folder of PNGs
(DIR/train/<class>/N.png, DIR/val/<class>/N.png): the data of the transfer
figures in docs/training.md.

  python3 tools/fmnist_folder.py OUT [--classes 0-4] [--train N] [--val N]
                                 [--data /usr/share/datasets/fashion-mnist]

--classes: a range A-B or a list 5,6,7 of class numbers (default all ten);
--train / --val: at most N images per class from the training / test file
(default all), the first ones in the file's order. The class folders are
named "<number>_<name>" so that ImageFolder's order is the classes' order.
Needs PIL (Debian's python3-pil)."""
import argparse
import gzip
import os
import struct
import sys

from PIL import Image

NAMES = ["T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
         "Bag", "Ankle_boot"]


def read_idx(path, kind):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    if kind == "images":
        if magic != 2051:
            sys.exit("%s: not an IDX image file" % path)
        h, w = struct.unpack(">II", raw[8:16])
        return [raw[16 + i * h * w:16 + (i + 1) * h * w] for i in range(n)], (w, h)
    if magic != 2049:
        sys.exit("%s: not an IDX label file" % path)
    return list(raw[8:8 + n]), None


def classes_of(spec):
    if "-" in spec:
        a, b = spec.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(v) for v in spec.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--classes", default="0-9")
    ap.add_argument("--train", type=int, default=0)
    ap.add_argument("--val", type=int, default=0)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    want = classes_of(a.classes)
    if not want or any(c < 0 or c > 9 for c in want):
        sys.exit("--classes %s: class numbers 0..9" % a.classes)
    if os.path.exists(a.out):
        sys.exit("%s exists: give a new folder" % a.out)
    for split, prefix, limit in (("train", "train", a.train), ("val", "t10k", a.val)):
        images, size = read_idx(os.path.join(a.data, prefix + "-images-idx3-ubyte.gz"), "images")
        labels, _ = read_idx(os.path.join(a.data, prefix + "-labels-idx1-ubyte.gz"), "labels")
        count = {c: 0 for c in want}
        for c in want:
            os.makedirs(os.path.join(a.out, split, "%d_%s" % (c, NAMES[c])))
        for img, lab in zip(images, labels):
            if lab not in count or (limit and count[lab] >= limit):
                continue
            Image.frombytes("L", size, img).save(
                os.path.join(a.out, split, "%d_%s" % (lab, NAMES[lab]), "%05d.png" % count[lab]))
            count[lab] += 1
        print("%s: %s" % (split, ", ".join("%d: %d" % kv for kv in sorted(count.items()))))


if __name__ == "__main__":
    main()
