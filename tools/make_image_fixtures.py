"""Writes the image fixtures: two small pictures (PNG, JPEG) and what
torchvision's ImageNet evaluation transform makes of them
(Resize(256) bilinear, CenterCrop(224), ToTensor, Normalize), as
tests/fixtures/img_NAME.{png,jpg} and img_NAME.expected.safetensors.

    /usr/bin/python3 tools/fixtures.py image [-o tests/fixtures]
"""
import os
import sys

import numpy as np
from PIL import Image
from torchvision import transforms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def picture(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    r = 127 + 120 * np.sin(x / 17.0) * np.cos(y / 23.0)
    g = 255 * x / w
    b = 255 * (1 - y / h)
    img = np.stack([r, g, b], -1) + rng.normal(0, 12, (h, w, 3))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def write_fixtures(out):
    """The image family of tools/fixtures.py."""
    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                             transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    for name, (w, h), ext in (("wide", (301, 203), "png"), ("tall", (180, 333), "jpg")):
        img = picture(w, h, len(name))
        path = os.path.join(out, "img_%s.%s" % (name, ext))
        img.save(path, quality=92) if ext == "jpg" else img.save(path)
        # what the file decodes to (JPEG is lossy): the transform sees that
        x = tf(Image.open(path).convert("RGB")).contiguous()
        # F16 halves the file; its rounding (< 1e-3) is far below the test tolerance
        st.write(os.path.join(out, "img_%s.expected.safetensors" % name), {"x": x.half()},
                 {"file": os.path.basename(path), "resize": "256", "crop": "224"})


if __name__ == "__main__":
    import fixtures
    fixtures.script_main({"image": ["image"]})
