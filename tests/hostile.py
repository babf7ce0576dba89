"""hostile.py - hostile model sources for the command-line tests
(tests/test_untrusted_text.sh, tests/test_model_checks.sh), written with
the standard library alone (no PyTorch, no NumPy):

  hostile.py hf FIXTURE DIR LABELS_JSON [PREPROCESSOR_JSON]
      a transformers folder: FIXTURE's tensors (a swin model file) without
      metadata as DIR/model.safetensors, DIR/config.json (model_type swin,
      SwinForImageClassification, FIXTURE's hyperparameters, id2label from
      the list LABELS_JSON) and, if given, DIR/preprocessor_config.json
  hostile.py pth FIXTURE OUT KEY1 KEY2
      a PyTorch zip checkpoint (as torch.save writes it) whose state dict,
      FIXTURE's tensors, is at root[KEY1][KEY2]
  hostile.py int8 FIXTURE OUT CASE
      FIXTURE with an int8 (I8) tensor and scales where the loader must
      refuse them: CASE table (a relative position bias table in int8 with
      its scales) or float (scales beside a float weight)
  hostile.py meta FILE OUT KEY VALUE
      FILE with metadata KEY = VALUE (tensors as they are)
"""
import collections
import io
import json
import os
import pickle
import struct
import sys
import types
import zipfile


def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    data = b[8 + n:]
    t = collections.OrderedDict()
    for k, v in h.items():
        s, e = v["data_offsets"]
        t[k] = (v["dtype"], v["shape"], data[s:e])
    return t, meta


def write(path, t, meta=None):
    h, off, blobs = {}, 0, []
    if meta:
        h["__metadata__"] = meta
    for k, (dt, shape, raw) in t.items():
        h[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    hb = json.dumps(h).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def hf(fixture, d, labels, pre=None):
    t, meta = read(fixture)
    os.makedirs(d, exist_ok=True)
    write(os.path.join(d, "model.safetensors"), t)
    ints = lambda s: [int(x) for x in s.split(",")]
    cfg = {"model_type": "swin", "architectures": ["SwinForImageClassification"],
           "image_size": int(meta["img_size"]), "patch_size": int(meta["patch_size"]),
           "num_channels": int(meta["in_chans"]), "embed_dim": int(meta["embed_dim"]),
           "depths": ints(meta["depths"]), "num_heads": ints(meta["num_heads"]),
           "window_size": int(meta["window_size"]), "mlp_ratio": float(meta["mlp_ratio"]),
           "id2label": {str(i): name for i, name in enumerate(json.loads(labels))}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    if pre is not None:
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            f.write(pre)


def pth(fixture, out, key1, key2):
    # torch's globals as the pickler names them, without torch
    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*a):
        pass

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    FloatStorage = type("FloatStorage", (), {"__module__": "torch"})
    LongStorage = type("LongStorage", (), {"__module__": "torch"})
    torch.FloatStorage, torch.LongStorage, torch._utils = FloatStorage, LongStorage, utils
    sys.modules["torch"], sys.modules["torch._utils"] = torch, utils

    class Storage:
        def __init__(self, cls, key, numel):
            self.cls, self.key, self.numel = cls, key, numel

    class Tensor:
        def __init__(self, st, shape):
            stride, s = [], 1
            for d in reversed(shape):
                stride.insert(0, s)
                s *= d
            self.args = (st, 0, tuple(shape), tuple(stride), False, collections.OrderedDict())

        def __reduce__(self):
            return (_rebuild_tensor_v2, self.args)

    class Pickler(pickle.Pickler):
        def persistent_id(self, o):
            return ("storage", o.cls, o.key, "cpu", o.numel) if isinstance(o, Storage) else None

    t, _ = read(fixture)
    sd, recs = collections.OrderedDict(), []
    for i, (k, (dt, shape, raw)) in enumerate(t.items()):
        cls, size = {"F32": (FloatStorage, 4), "I64": (LongStorage, 8)}[dt]
        sd[k] = Tensor(Storage(cls, str(i), len(raw) // size), shape)
        recs.append(("archive/data/%d" % i, raw))
    b = io.BytesIO()
    Pickler(b, protocol=2).dump({key1: {key2: sd}})
    with zipfile.ZipFile(out, "w") as z:
        for name, data in [("archive/data.pkl", b.getvalue())] + recs + [("archive/version", b"3\n")]:
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)


def int8(fixture, out, case):
    t, meta = read(fixture)
    new = collections.OrderedDict()
    for k, (dt, shape, raw) in t.items():
        if case == "table" and k.endswith("relative_position_bias_table") and not any(
                n.startswith("__scale__.") for n in new):
            new[k] = ("I8", shape, bytes(shape[0] * shape[1]))
            new["__scale__." + k] = ("F32", [shape[0]], struct.pack("<%df" % shape[0], *[0.01] * shape[0]))
            continue
        new[k] = (dt, shape, raw)
        if case == "float" and k.endswith("head.weight"):
            new["__scale__." + k] = ("F32", [shape[0]], struct.pack("<%df" % shape[0], *[1.0] * shape[0]))
    write(out, new, meta)


def set_meta(path, out, key, value):
    t, meta = read(path)
    meta[key] = value
    write(out, t, meta)


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "hf":
        hf(a[1], a[2], a[3], a[4] if len(a) > 4 else None)
    elif a[0] == "pth":
        pth(*a[1:5])
    elif a[0] == "int8":
        int8(*a[1:4])
    elif a[0] == "meta":
        set_meta(*a[1:5])
    else:
        sys.exit("unknown command %s" % a[0])
