#!/usr/bin/env python3
"""Seeds of fuzz_infer (fuzz/corpus/infer/): the names and shapes of real
state dicts in fuzz_infer.c's encoding, no data (the harness fills it).
From the fixtures' network models (their metadata dropped, so that
everything is inferred) and the transformers files of fuzz/corpus/hf.
Names are matched against the harness's list (read from fuzz_infer.c)
and written as their index; others as names of their own. Standard
library only.
    python3 fuzz/infer_seeds.py"""
import json
import os
import re
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus", "infer")
DTYPES = {"F32": 0, "F16": 1, "BF16": 2, "I64": 3}


def harness_list(what):
    src = open(os.path.join(ROOT, "fuzz", "fuzz_infer.c")).read()
    body = src[src.index("/* %s: begin" % what):src.index("/* %s: end" % what)]
    body = re.sub(r"/\*.*?\*/", "", body[body.index("{"):], flags=re.S)
    return re.findall(r'"([^"]*)"', body)


# what the weights cannot tell, given as metadata keys (as --set would)
GIVEN = {"vit": ["num_heads"], "swin_block": ["input_resolution", "shift_size"],
         "swin_block_3d": ["window_size", "shift_size", "num_frames_q", "num_frames_kv"],
         "swinv2": ["img_size"]}


def dim(v):
    return bytes([v]) if v < 0xF0 else b"\xff" + struct.pack("<Q", v)


def encode_meta(meta, keys):
    out = b""
    for k in GIVEN.get(meta.get("arch"), []):
        if k not in meta or k not in keys:
            continue
        v = meta[k]
        if v in ("true", "false"):
            out += bytes([0xF0 + keys.index(k), 3]) + dim(1 if v == "true" else 0)
            continue
        vals = [int(x) for x in v.split(",")]
        out += bytes([0xF0 + keys.index(k), len(vals) - 1]) + b"".join(dim(x) for x in vals)
    return out


def encode(tensors, names):
    pats = [re.compile("^" + re.escape(n).replace("%d", "([0-9]+)") + "$") for n in names]
    out = b""
    for name, dtype, shape in tensors:
        for i, p in enumerate(pats):
            m = p.match(name)
            if m and all(int(g) < 32 for g in m.groups()):
                out += bytes([i] + [int(g) for g in m.groups()])
                break
        else:
            raw = name.encode()[:127]
            out += bytes([len(names), len(raw)]) + raw
        out += bytes([DTYPES.get(dtype, 0) << 2, len(shape)])
        out += b"".join(dim(d) for d in shape)
    return out


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    meta = h.pop("__metadata__", {})
    return meta, [(k, v["dtype"], v["shape"]) for k, v in h.items()]


def main():
    names, keys = harness_list("names"), harness_list("keys")
    os.makedirs(OUT, exist_ok=True)
    fx = os.path.join(ROOT, "tests", "fixtures")
    srcs = [os.path.join(fx, f) for f in sorted(os.listdir(fx))
            if re.match(r"(net_swin|net_block|v2_net|vit_net|net3d)_.*\.model\.safetensors$", f)]
    hf = os.path.join(ROOT, "fuzz", "corpus", "hf")
    srcs += [os.path.join(hf, f) for f in sorted(os.listdir(hf))]
    for s in srcs:
        meta, tensors = header(s)
        seed = encode_meta(meta, keys) + encode(tensors, names)
        name = os.path.basename(s).replace(".model.safetensors", "").replace(".safetensors", "")
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(seed)
    # the findings of issue 33 (zero channels, squares near 2^63)
    M = 2 ** 63 - 1
    extra = {
        "vit_embed0": [("patch_embed.proj.weight", "F32", [0, 3, 8, 8]),
                       ("blocks.0.norm1.weight", "F32", [16]),
                       ("blocks.0.attn.qkv.weight", "F32", [48, 16]),
                       ("blocks.0.mlp.fc1.weight", "F32", [32, 16])],
        "block_table_huge": [("norm1.weight", "F32", [16]),
                             ("attn.relative_position_bias_table", "F32", [M, 0])],
        "block_mask_int": [("norm1.weight", "F32", [16]),
                           ("attn.relative_position_bias_table", "F32", [3037000497 ** 2, 0]),
                           ("attn_mask", "F32", [4, 0, 0])],
        "v2_coords_huge": [("patch_embed.proj.weight", "F32", [16, 3, 4, 4]),
                           ("layers.0.blocks.0.norm1.weight", "F32", [16]),
                           ("layers.0.blocks.0.attn.cpb_mlp.0.weight", "F32", [512, 2]),
                           ("layers.0.blocks.0.attn.cpb_mlp.2.weight", "F32", [2, 512]),
                           ("layers.0.blocks.0.attn.relative_coords_table", "F32", [0, M, M, 2])],
        "vit_pos_huge": [("patch_embed.proj.weight", "F32", [16, 3, 8, 8]),
                         ("blocks.0.norm1.weight", "F32", [16]),
                         ("blocks.0.attn.qkv.weight", "F32", [48, 16]),
                         ("pos_embed", "F32", [1, M, 0])],
    }
    # swin3d (torchvision's names, the official Video Swin names): embed 16,
    # depths 1,2, heads 2,4, window 2,3,3, patch 2,4,4, 5 classes
    def swin3d(official):
        t = [("patch_embed.proj.weight", "F32", [16, 3, 2, 4, 4]),
             ("patch_embed.norm.weight", "F32", [16])]
        for s_, (d, c, h) in enumerate([(1, 16, 2), (2, 32, 4)]):
            for j in range(d):
                blk = ("layers.%d.blocks.%d." % (s_, j) if official
                       else "features.%d.%d." % (2 * s_, j))
                t += [(blk + "norm1.weight", "F32", [c]),
                      (blk + "attn.relative_position_bias_table", "F32", [75, h]),
                      (blk + "attn.relative_position_index", "I64", [18, 18]),
                      (blk + ("mlp.fc1.weight" if official else "mlp.0.weight"), "F32", [4 * c, c])]
            if s_ == 0:
                t.append(("layers.0.downsample.reduction.weight" if official
                          else "features.1.reduction.weight", "F32", [32, 64]))
        t.append(("cls_head.fc_cls.weight" if official else "head.weight", "F32", [5, 32]))
        if official:
            t = [(n if n.startswith("cls_head") else "backbone." + n, d, sh) for n, d, sh in t]
        return t
    extra["swin3d_tv"] = swin3d(False)
    extra["swin3d_official"] = swin3d(True)
    for k, v in extra.items():
        with open(os.path.join(OUT, k + ".bin"), "wb") as f:
            f.write(encode(v, names))


if __name__ == "__main__":
    main()
