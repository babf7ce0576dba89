"""Writes tests/corpus: the files and command lines that attack relattn from
outside, and the exit code each must give (docs/reference.md, section 5).

    /usr/bin/python3 tools/make_corpus.py [--out tests/corpus]

No torch; numpy only (through tools/st.py, which writes the valid files).
Broken files are written byte by byte here. Everything is deterministic:
running it twice gives the same bytes.

The output directory holds

  ok_ARCH.model.safetensors / ok_ARCH.input.safetensors
                         small valid models and inputs of each arch
  bad_NAME.safetensors   malformed safetensors files, each used as MODEL
                         and as INPUT
  meta_NAME.model.safetensors
                         well-formed files that are not valid models (bad
                         metadata, missing / extra / misshapen tensors)
  in_NAME.input.safetensors
                         well-formed inputs of the wrong shape or dtype for
                         one of the ok models (and a few odd but valid ones)
  manifest.txt           one case a line: EXPECTED_EXIT<TAB>ARGS

ARGS are the arguments of relattn, split like a shell would ("" is an empty
argument), with placeholders the test driver (tests/test_cli.sh)
substitutes: {corpus} this directory, {fixtures} tests/fixtures, {out} a
fresh output path that does not exist yet, {tmp} the (empty) directory that
{out} would be created in. Lines starting with '#' are comments.
"""

import argparse
import json
import os
import random
import struct
import sys

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import st
except ImportError as e:  # pragma: no cover
    sys.exit("make_corpus.py needs numpy (try /usr/bin/python3): %s" % e)


# --------------------------------------------------------------------------
# Valid models and inputs (written with st.py)
# --------------------------------------------------------------------------

def relpos_index(q_axes, k_axes, extents):
    """docs/reference.md, section 1.2, over A axes: q_axes / k_axes are per-axis coordinate lists."""
    strides = [1] * len(extents)
    for a in range(len(extents) - 2, -1, -1):
        strides[a] = strides[a + 1] * (2 * extents[a + 1] - 1)

    def tokens(axes):
        out = [[]]
        for coords in axes:
            out = [t + [c] for t in out for c in coords]
        return out

    qs, ks = tokens(q_axes), tokens(k_axes)
    return np.array([[sum((cq[a] - ck[a] + extents[a] - 1) * strides[a]
                           for a in range(len(extents))) for ck in ks] for cq in qs],
                    dtype=np.int64)


def weights(rng, *shape):
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def model_vit(rng):
    c = 8
    t = {"qkv.weight": weights(rng, 3 * c, c), "proj.weight": weights(rng, c, c),
         "proj.bias": weights(rng, c)}
    return t, {"arch": "vit_attention", "dim": "8", "num_heads": "2", "qkv_bias": "false"}


def model_swin(rng):
    c, nh = 8, 2
    t = {"qkv.weight": weights(rng, 3 * c, c), "qkv.bias": weights(rng, 3 * c),
         "proj.weight": weights(rng, c, c), "proj.bias": weights(rng, c),
         "relative_position_bias_table": weights(rng, 9, nh),
         "relative_position_index": relpos_index([[0, 1], [0, 1]], [[0, 1], [0, 1]], [2, 2])}
    return t, {"arch": "window_attention", "dim": "8", "num_heads": "2",
               "window_size": "2,2", "qkv_bias": "true"}


def model_w3d(rng):
    # D1 = 3 query frames, D2 = 2 key/value frames 0, 2 (stride (3+1)//2)
    c, nh = 8, 2
    t = {"q.weight": weights(rng, c, c), "q.bias": weights(rng, c),
         "kv.weight": weights(rng, 2 * c, c), "kv.bias": weights(rng, 2 * c),
         "proj.weight": weights(rng, c, c), "proj.bias": weights(rng, c),
         "relative_position_bias_table": weights(rng, 5 * 3 * 3, nh),
         "relative_position_index": relpos_index([[0, 1, 2], [0, 1], [0, 1]],
                                                 [[0, 2], [0, 1], [0, 1]], [3, 2, 2])}
    return t, {"arch": "window_attention_3d", "dim": "8", "num_heads": "2",
               "window_size": "2,2", "num_frames_q": "3", "num_frames_kv": "2",
               "qkv_bias": "true"}


def model_shaw(rng):
    c, k, hd = 8, 2, 4
    t = {"qkv.weight": weights(rng, 3 * c, c), "qkv.bias": weights(rng, 3 * c),
         "proj.weight": weights(rng, c, c), "proj.bias": weights(rng, c),
         "relative_keys": weights(rng, 2 * k + 1, hd),
         "relative_values": weights(rng, 2 * k + 1, hd)}
    return t, {"arch": "shaw_attention", "dim": "8", "num_heads": "2",
               "max_relative_position": "2", "qkv_bias": "true"}


def x_of(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------
# Broken bytes
# --------------------------------------------------------------------------

def raw(header, data=b"", n=None):
    """u64 n (default: the header's length) | header | data."""
    if isinstance(header, str):
        header = header.encode("utf-8")
    return struct.pack("<Q", len(header) if n is None else n) + header + data


def ent(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def hdr(obj):
    return json.dumps(obj, separators=(",", ":"))


X16 = bytes(range(16))                  # 16 bytes of data: 4 F32
F4 = '{"dtype":"F32","shape":[4],"data_offsets":[0,16]}'


def malformed(rnd):
    """name -> bytes of a file the reader must refuse (RA_ERR_FORMAT)."""
    valid = st.dumps({"x": np.zeros((4, 4, 8), np.float32)})
    b = {}
    b["empty"] = b""
    b["len_truncated"] = b"\x10\x00\x00\x00\x00"
    b["len_only"] = struct.pack("<Q", 0)
    b["len_zero_with_data"] = raw("", X16, n=0)
    b["len_huge"] = raw("{}", n=(1 << 63) + 2)
    b["len_max"] = raw("{}", n=(1 << 64) - 1)
    b["len_over_limit"] = raw("{}", n=100000001)
    b["len_beyond_eof"] = raw('{"x":' + F4 + "}", X16, n=4096)
    b["len_one_short"] = raw('{"x":' + F4 + "}", X16, n=len('{"x":' + F4 + "}") - 1)
    b["not_json"] = raw("{not json at all}", X16)
    b["json_array"] = raw("[1,2,3]")
    b["json_string"] = raw('"hello"')
    b["json_number"] = raw("12345678")
    b["leading_space"] = raw(' {"x":' + F4 + "}", X16)
    b["utf8_bom"] = raw(b"\xef\xbb\xbf{}")
    b["trailing_garbage"] = raw('{"x":' + F4 + "} x", X16)
    b["duplicate_keys"] = raw('{"x":' + F4 + ',"x":' + F4 + "}", X16)
    b["duplicate_entry_keys"] = raw('{"x":{"dtype":"F32","dtype":"F32","shape":[4],'
                                    '"data_offsets":[0,16]}}', X16)
    b["entry_not_object"] = raw('{"x":[1,2]}')
    b["entry_missing_dtype"] = raw('{"x":{"shape":[4],"data_offsets":[0,16]}}', X16)
    b["entry_missing_offsets"] = raw('{"x":{"dtype":"F32","shape":[4]}}', X16)
    b["entry_extra_key"] = raw('{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16],'
                               '"stride":[1]}}', X16)
    b["unknown_dtype"] = raw(hdr({"x": ent("Q4", [4], 0, 16)}), X16)
    b["dtype_lowercase"] = raw(hdr({"x": ent("f32", [4], 0, 16)}), X16)
    b["dtype_not_string"] = raw(hdr({"x": ent(4, [4], 0, 16)}), X16)
    b["shape_negative"] = raw(hdr({"x": ent("F32", [-1, 4], 0, 16)}), X16)
    b["shape_float"] = raw('{"x":{"dtype":"F32","shape":[2.0,2],"data_offsets":[0,16]}}', X16)
    b["shape_string"] = raw(hdr({"x": ent("F32", ["4"], 0, 16)}), X16)
    b["shape_not_array"] = raw(hdr({"x": ent("F32", 4, 0, 16)}), X16)
    b["shape_too_many_dims"] = raw(hdr({"x": ent("F32", [1] * 9 + [4], 0, 16)}), X16)
    b["shape_overflow"] = raw(hdr({"x": ent("F32", [1 << 32, 1 << 32, 1 << 32, 0], 0, 0)}))
    b["shape_bytes_overflow"] = raw(hdr({"x": ent("F32", [1 << 62], 0, 16)}), X16)
    b["shape_huge_int"] = raw('{"x":{"dtype":"F32","shape":[99999999999999999999999],'
                              '"data_offsets":[0,16]}}', X16)
    b["offsets_outside"] = raw(hdr({"x": ent("F32", [250000], 0, 1000000)}), X16)
    b["offsets_reversed"] = raw(hdr({"x": ent("F32", [4], 16, 0)}), X16)
    b["offsets_negative"] = raw(hdr({"x": ent("F32", [4], -16, 0)}), X16)
    b["offsets_float"] = raw('{"x":{"dtype":"F32","shape":[4],"data_offsets":[0.0,16.0]}}', X16)
    b["offsets_three"] = raw(hdr({"x": {"dtype": "F32", "shape": [4],
                                        "data_offsets": [0, 16, 32]}}), X16)
    b["offsets_u64_max"] = raw('{"x":{"dtype":"F32","shape":[4],'
                               '"data_offsets":[18446744073709551600,18446744073709551615]}}', X16)
    b["offsets_count_mismatch"] = raw(hdr({"x": ent("F32", [4], 0, 12)}), X16[:12])
    b["offsets_overlap"] = raw(hdr({"x": ent("F32", [4], 0, 16), "y": ent("F32", [4], 8, 24)}),
                               X16 + X16[:8])
    b["offsets_gap"] = raw(hdr({"x": ent("F32", [4], 0, 16), "y": ent("F32", [4], 24, 40)}),
                           X16 + X16 + X16[:8])
    b["offsets_not_from_zero"] = raw(hdr({"x": ent("F32", [4], 8, 24)}), X16 + X16[:8])
    b["offsets_same_range"] = raw(hdr({"x": ent("F32", [4], 0, 16), "y": ent("F32", [4], 0, 16)}),
                                  X16)
    b["trailing_bytes"] = valid + b"\x00\x00\x00\x00"
    b["truncated_data"] = valid[:-100]
    b["data_missing"] = raw(hdr({"x": ent("F32", [4], 0, 16)}))
    b["metadata_non_string"] = raw(hdr({"__metadata__": {"arch": 5}, "x": ent("F32", [4], 0, 16)}),
                                   X16)
    b["metadata_nested"] = raw(hdr({"__metadata__": {"arch": {"a": "b"}},
                                    "x": ent("F32", [4], 0, 16)}), X16)
    b["metadata_null"] = raw(hdr({"__metadata__": {"arch": None}, "x": ent("F32", [4], 0, 16)}),
                             X16)
    b["metadata_not_object"] = raw(hdr({"__metadata__": "arch", "x": ent("F32", [4], 0, 16)}),
                                   X16)
    b["metadata_array"] = raw(hdr({"__metadata__": ["arch", "vit"], "x": ent("F32", [4], 0, 16)}),
                              X16)
    b["invalid_utf8_name"] = raw(b'{"x\xff":' + F4.encode() + b"}", X16)
    b["invalid_utf8_meta"] = raw(b'{"__metadata__":{"arch":"vit\xc0\xaf"},"x":' + F4.encode()
                                 + b"}", X16)
    b["surrogate_escape"] = raw('{"x\\ud800":' + F4 + "}", X16)
    b["nul_in_name"] = raw('{"x\\u0000y":' + F4 + "}", X16)
    b["raw_nul_in_header"] = raw(b'{"x":' + F4.encode() + b"}\x00", X16)
    b["empty_name"] = raw('{"":' + F4 + "}", X16)
    b["nan_literal"] = raw('{"x":{"dtype":"F32","shape":[NaN],"data_offsets":[0,16]}}', X16)
    b["deep_nesting"] = raw('{"x":' + "[" * 3000 + "]" * 3000 + "}")
    b["unterminated"] = raw('{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]', X16)
    b["random_bytes"] = bytes(rnd.randrange(256) for _ in range(512))
    b["random_after_len"] = struct.pack("<Q", 64) + bytes(rnd.randrange(256) for _ in range(96))
    return b


# --------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------

class Corpus:
    def __init__(self, out):
        self.out = out
        self.files = {}
        self.cases = []          # (code, args, comment)

    def file(self, name, blob):
        assert name not in self.files, name
        self.files[name] = blob
        return "{corpus}/" + name

    def st(self, name, tensors, meta=None):
        return self.file(name, st.dumps(tensors, meta))

    def case(self, code, args):
        self.cases.append((code, args))

    def section(self, text):
        self.cases.append((None, text))

    def write(self):
        os.makedirs(self.out, exist_ok=True)
        for f in os.listdir(self.out):   # stale files of an earlier run
            if f.endswith(".safetensors") or f == "manifest.txt":
                os.unlink(os.path.join(self.out, f))
        for name, blob in sorted(self.files.items()):
            with open(os.path.join(self.out, name), "wb") as f:
                f.write(blob)
        lines = ["# relattn corpus manifest, written by tools/make_corpus.py: do not edit.",
                 "# EXPECTED_EXIT<TAB>ARGS; placeholders {corpus} {fixtures} {out} {tmp}."]
        for code, args in self.cases:
            lines.append("# " + args if code is None else "%d\t%s" % (code, args))
        with open(os.path.join(self.out, "manifest.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        size = sum(len(b) for b in self.files.values())
        n = sum(1 for c, _ in self.cases if c is not None)
        print("%s: %d files, %d bytes, %d cases" % (self.out, len(self.files), size, n))


def fwd(model, inp, extra="", cmd="forward"):
    return ("%s %s %s -o {out}%s" % (cmd, model, inp, " " + extra if extra else "")).rstrip()


def bwd(model, inp, extra=""):
    return fwd(model, inp, extra, "backward")


def build(out):
    c = Corpus(out)
    rng = np.random.default_rng(20240601)
    rnd = random.Random(1234)

    # ---- valid models and inputs -----------------------------------------
    c.section("valid models and inputs: exit 0")
    models = {}
    for name, make in (("vit", model_vit), ("swin", model_swin), ("w3d", model_w3d),
                       ("shaw", model_shaw)):
        t, m = make(rng)
        models[name] = (t, m)
        c.st("ok_%s.model.safetensors" % name, t, m)
    M = {k: "{corpus}/ok_%s.model.safetensors" % k for k in models}
    # every ok input also holds dy, for backward (forward ignores it)
    I = {
        "vit": c.st("ok_vit.input.safetensors", {"x": x_of(rng, 2, 5, 8),
                                                 "dy": x_of(rng, 2, 5, 8)}),
        "swin": c.st("ok_swin.input.safetensors",
                     {"x": x_of(rng, 4, 4, 8), "dy": x_of(rng, 4, 4, 8),
                      "mask": np.where(rng.random((2, 4, 4)) < 0.3, -100.0, 0.0)
                      .astype(np.float32)}),
        "w3d": c.st("ok_w3d.input.safetensors", {"q": x_of(rng, 2, 12, 8),
                                                 "kv": x_of(rng, 2, 8, 8),
                                                 "dy": x_of(rng, 2, 12, 8)}),
        "shaw": c.st("ok_shaw.input.safetensors", {"x": x_of(rng, 2, 6, 8),
                                                   "dy": x_of(rng, 2, 6, 8)}),
    }
    for k in models:
        c.case(0, fwd(M[k], I[k]))
        c.case(0, fwd(M[k], I[k], "--attn"))
        c.case(0, bwd(M[k], I[k]))
    c.case(0, bwd(M["swin"], I["swin"], "--threads 1"))
    c.case(0, "backward --output={out} %s %s --threads=2" % (M["w3d"], I["w3d"]))
    c.case(0, fwd(M["swin"], I["swin"], "--attn --threads 1"))
    c.case(0, fwd(M["swin"], I["swin"], "--threads 3"))
    c.case(0, fwd(M["shaw"], I["shaw"], "--threads=2 --attn"))
    c.case(0, fwd(M["w3d"], I["w3d"], "--threads 1024"))
    c.case(0, "forward --output={out} %s %s" % (M["vit"], I["vit"]))
    c.case(0, "forward -o {out} %s %s --attn" % (M["vit"], I["vit"]))
    c.case(0, fwd("{fixtures}/swin_7x7.model.safetensors",
                  "{fixtures}/swin_7x7.input.safetensors", "--attn"))
    # the same input file as model and input is simply not a model
    c.case(65, fwd(I["vit"], I["vit"]))
    c.case(65, fwd(M["vit"], M["vit"]))

    # ---- malformed files, as MODEL and as INPUT ---------------------------
    c.section("malformed safetensors files: forward MODEL, forward INPUT, backward INPUT, "
              "show: exit 65")
    for name, blob in malformed(rnd).items():
        path = c.file("bad_%s.safetensors" % name, blob)
        c.case(65, fwd(path, I["swin"]))
        c.case(65, fwd(M["swin"], path))
        c.case(65, bwd(M["swin"], path))
        c.case(65, "show " + path)
    c.section("a directory, a missing file: exit 66")
    c.case(66, fwd("{corpus}", I["swin"]))
    c.case(66, fwd(M["swin"], "{corpus}"))
    c.case(66, fwd("{tmp}", I["swin"]))
    c.case(66, fwd("{corpus}/no_such_model.safetensors", I["swin"]))
    c.case(66, fwd(M["swin"], "{corpus}/no_such_input.safetensors"))
    c.case(66, fwd("{corpus}/no_such_dir/m.safetensors", "{corpus}/no_such_input.safetensors"))
    c.case(66, fwd("''", I["swin"]))
    c.case(66, fwd(M["swin"], "''"))
    c.case(66, bwd("{corpus}/no_such_model.safetensors", I["swin"]))
    c.case(66, bwd(M["swin"], "{tmp}"))
    c.case(66, "show {corpus}/no_such_file.safetensors")
    c.case(66, "show {corpus}")
    c.case(66, "show ''")

    # ---- well-formed files that are not valid models ----------------------
    c.section("well-formed files, invalid models: exit 65")

    def variant(name, base, meta=None, drop=(), put=None):
        t, m = models[base]
        t = dict(t)
        m = dict(m)
        for k, v in (meta or {}).items():
            if v is None:
                m.pop(k, None)
            else:
                m[k] = v
        for k in drop:
            t.pop(k)
        t.update(put or {})
        path = c.st("meta_%s.model.safetensors" % name, t, m)
        c.case(65, fwd(path, I[base]))
        c.case(0, "show " + path)   # well-formed: show lists it

    variant("no_arch", "swin", {"arch": None})
    variant("unknown_arch", "swin", {"arch": "swin_transformer_v9"})
    variant("no_metadata_at_all", "vit", {"arch": None, "dim": None, "num_heads": None,
                                          "qkv_bias": None})
    variant("no_dim", "vit", {"dim": None})
    variant("no_num_heads", "shaw", {"num_heads": None})
    variant("no_window_size", "swin", {"window_size": None})
    variant("no_num_frames_q", "w3d", {"num_frames_q": None})
    variant("no_num_frames_kv", "w3d", {"num_frames_kv": None})
    variant("no_max_relative_position", "shaw", {"max_relative_position": None})
    variant("dim_not_divisible", "swin", {"num_heads": "3"})
    variant("dim_abc", "swin", {"dim": "abc"})
    variant("dim_12x", "swin", {"dim": "12x"})
    variant("dim_negative", "swin", {"dim": "-4"})
    variant("dim_zero", "swin", {"dim": "0"})
    variant("dim_huge", "swin", {"dim": "99999999999"})
    variant("dim_float", "vit", {"dim": "8.0"})
    variant("heads_zero", "vit", {"num_heads": "0"})
    variant("qkv_bias_yes", "swin", {"qkv_bias": "yes"})
    variant("qk_scale_nan", "swin", {"qk_scale": "nan"})
    variant("qk_scale_inf", "vit", {"qk_scale": "inf"})
    variant("qk_scale_x", "w3d", {"qk_scale": "x"})
    variant("window_trailing_comma", "swin", {"window_size": "2,"})
    variant("window_zero", "swin", {"window_size": "0,2"})
    variant("window_three", "swin", {"window_size": "2,2,2"})
    variant("window_empty", "swin", {"window_size": ""})
    variant("window_huge", "swin", {"window_size": "4096,4096"})
    variant("window_mismatch", "swin", {"window_size": "2,3"})
    variant("frames_7_5", "w3d", {"num_frames_q": "7", "num_frames_kv": "5"})
    variant("frames_2_5", "w3d", {"num_frames_q": "2", "num_frames_kv": "5"})
    variant("frames_mismatch", "w3d", {"num_frames_q": "5", "num_frames_kv": "3"})
    variant("max_rel_negative", "shaw", {"max_relative_position": "-1"})
    variant("max_rel_mismatch", "shaw", {"max_relative_position": "3"})
    variant("missing_proj_bias", "swin", drop=["proj.bias"])
    variant("missing_table", "swin", drop=["relative_position_bias_table"])
    variant("missing_kv_weight", "w3d", drop=["kv.weight"])
    variant("extra_tensor", "vit", put={"extra": np.zeros(4, np.float32)})
    variant("qkv_bias_false_with_bias", "swin", {"qkv_bias": "false"})
    variant("qkv_bias_true_without_bias", "vit", {"qkv_bias": "true"})
    variant("qkv_weight_shape", "swin", put={"qkv.weight": np.zeros((24, 7), np.float32)})
    variant("qkv_weight_1d", "vit", put={"qkv.weight": np.zeros(24 * 8, np.float32)})
    variant("table_shape", "swin", put={"relative_position_bias_table":
                                        np.zeros((8, 2), np.float32)})
    variant("w3d_2d_table", "w3d", put={"relative_position_bias_table":
                                        np.zeros((9, 2), np.float32)})
    variant("relative_keys_shape", "shaw", put={"relative_keys": np.zeros((5, 8), np.float32)})
    variant("weight_i64", "swin", put={"proj.weight": np.zeros((8, 8), np.int64)})
    variant("weight_bool", "vit", put={"proj.bias": np.zeros(8, np.bool_)})
    idx = models["swin"][0]["relative_position_index"].copy()
    idx[1, 2] += 1
    variant("index_differs", "swin", put={"relative_position_index": idx})
    variant("index_shape", "swin", put={"relative_position_index": np.zeros((4, 3), np.int64)})
    variant("index_f32", "swin", put={"relative_position_index":
                                      models["swin"][0]["relative_position_index"]
                                      .astype(np.float32)})
    idx3 = models["w3d"][0]["relative_position_index"].copy()
    idx3[-1, -1] = -1
    variant("w3d_index_differs", "w3d", put={"relative_position_index": idx3})
    variant("vit_with_index", "vit", put={"relative_position_index":
                                          np.zeros((5, 5), np.int64)})
    variant("shaw_no_tables", "shaw", drop=["relative_keys", "relative_values"])
    variant("empty_weight", "vit", put={"proj.weight": np.zeros((0, 8), np.float32)})

    c.section("odd but valid models: exit 0")
    t, m = models["swin"]
    p = c.st("okvar_swin_square_window.model.safetensors", t, dict(m, window_size="2"))
    c.case(0, fwd(p, I["swin"]))
    p = c.st("okvar_swin_window_space.model.safetensors", t, dict(m, window_size="2, 2"))
    c.case(0, fwd(p, I["swin"]))
    m2 = dict(m)
    del m2["qkv_bias"]
    t2 = dict(t)
    del t2["relative_position_index"]
    p = c.st("okvar_swin_defaults_noindex.model.safetensors", t2, m2)
    c.case(0, fwd(p, I["swin"], "--attn"))
    t2 = {k: (v.astype(np.float64) if v.dtype == np.float32 else v.astype(np.int32))
          for k, v in t.items()}
    p = c.st("okvar_swin_f64_i32.model.safetensors", t2, m)
    c.case(0, fwd(p, I["swin"]))
    t, m = models["shaw"]
    t2 = dict(t)
    del t2["relative_values"]
    p = c.st("okvar_shaw_keys_only.model.safetensors", t2, dict(m, comment="extra keys ignored"))
    c.case(0, fwd(p, I["shaw"], "--attn"))

    # ---- inputs of the wrong shape or dtype ---------------------------------
    c.section("inputs of the wrong shape or dtype: exit 65 (odd but valid: exit 0)")

    def inp(code, name, base, tensors, extra=""):
        path = c.st("in_%s.input.safetensors" % name, tensors)
        c.case(code, fwd(M[base], path, extra))

    inp(65, "swin_wrong_c", "swin", {"x": x_of(rng, 4, 4, 7)})
    inp(65, "swin_wrong_n", "swin", {"x": x_of(rng, 4, 5, 8)})
    inp(65, "swin_x_2d", "swin", {"x": x_of(rng, 4, 8)})
    inp(65, "swin_x_4d", "swin", {"x": x_of(rng, 1, 4, 4, 8)})
    inp(65, "swin_x_1d", "swin", {"x": x_of(rng, 8)})
    # st.py writes a 0-d array as shape [1]: a true scalar by hand
    c.case(65, fwd(M["swin"], c.file("in_swin_x_scalar.input.safetensors",
                                      raw(hdr({"x": ent("F32", [], 0, 4)}), X16[:4]))))
    inp(65, "swin_mask_nw", "swin", {"x": x_of(rng, 4, 4, 8), "mask": np.zeros((3, 4, 4),
                                                                              np.float32)})
    inp(65, "swin_mask_nw_bigger", "swin", {"x": x_of(rng, 2, 4, 8),
                                            "mask": np.zeros((4, 4, 4), np.float32)})
    inp(65, "swin_mask_zero_windows", "swin", {"x": x_of(rng, 4, 4, 8),
                                               "mask": np.zeros((0, 4, 4), np.float32)})
    inp(65, "swin_mask_wrong_n", "swin", {"x": x_of(rng, 4, 4, 8),
                                          "mask": np.zeros((2, 5, 5), np.float32)})
    inp(65, "swin_mask_2d", "swin", {"x": x_of(rng, 4, 4, 8), "mask": np.zeros((4, 4),
                                                                              np.float32)})
    inp(65, "swin_mask_i64", "swin", {"x": x_of(rng, 4, 4, 8), "mask": np.zeros((2, 4, 4),
                                                                              np.int64)})
    inp(65, "swin_x_i32", "swin", {"x": np.zeros((4, 4, 8), np.int32)})
    inp(65, "swin_x_bool", "swin", {"x": np.zeros((4, 4, 8), np.bool_)})
    inp(65, "swin_unexpected", "swin", {"x": x_of(rng, 4, 4, 8), "y": x_of(rng, 4, 4, 8)})
    inp(65, "swin_kv", "swin", {"x": x_of(rng, 4, 4, 8), "kv": x_of(rng, 4, 4, 8)})
    inp(65, "swin_missing_x", "swin", {"dy": x_of(rng, 4, 4, 8)})
    inp(65, "swin_only_mask", "swin", {"mask": np.zeros((2, 4, 4), np.float32)})
    inp(65, "swin_no_tensors", "swin", {})
    inp(65, "swin_empty_b", "swin", {"x": np.zeros((0, 4, 8), np.float32)})
    inp(65, "vit_empty_n", "vit", {"x": np.zeros((2, 0, 8), np.float32)})
    inp(65, "vit_empty_c", "vit", {"x": np.zeros((2, 5, 0), np.float32)})
    inp(65, "vit_mask", "vit", {"x": x_of(rng, 2, 5, 8), "mask": np.zeros((3, 5, 5),
                                                                          np.float32)})
    inp(65, "vit_q", "vit", {"q": x_of(rng, 2, 5, 8)})
    inp(65, "w3d_kv_batch", "w3d", {"q": x_of(rng, 2, 12, 8), "kv": x_of(rng, 3, 8, 8)})
    inp(65, "w3d_kv_wrong_n2", "w3d", {"q": x_of(rng, 2, 12, 8), "kv": x_of(rng, 2, 12, 8)})
    inp(65, "w3d_kv_wrong_c", "w3d", {"q": x_of(rng, 2, 12, 8), "kv": x_of(rng, 2, 8, 4)})
    inp(65, "w3d_q_wrong_n1", "w3d", {"q": x_of(rng, 2, 8, 8), "kv": x_of(rng, 2, 8, 8)})
    inp(65, "w3d_self_d1_ne_d2", "w3d", {"q": x_of(rng, 2, 12, 8)})
    inp(65, "w3d_x_and_q", "w3d", {"x": x_of(rng, 2, 12, 8), "q": x_of(rng, 2, 12, 8),
                                   "kv": x_of(rng, 2, 8, 8)})
    inp(65, "w3d_mask_n2", "w3d", {"q": x_of(rng, 2, 12, 8), "kv": x_of(rng, 2, 8, 8),
                                   "mask": np.zeros((2, 12, 12), np.float32)})
    inp(65, "w3d_kv_i8", "w3d", {"q": x_of(rng, 2, 12, 8), "kv": np.zeros((2, 8, 8), np.int8)})
    inp(65, "shaw_wrong_c", "shaw", {"x": x_of(rng, 2, 6, 16)})
    inp(65, "shaw_kv", "shaw", {"x": x_of(rng, 2, 6, 8), "kv": x_of(rng, 2, 6, 8)})
    # accepted
    inp(0, "swin_x_f64", "swin", {"x": x_of(rng, 4, 4, 8).astype(np.float64)})
    inp(0, "swin_x_f16_mask_f64", "swin", {"x": x_of(rng, 4, 4, 8).astype(np.float16),
                                           "mask": np.zeros((4, 4, 4), np.float64)})
    inp(0, "swin_mask_neg_inf", "swin", {"x": x_of(rng, 4, 4, 8),
                                         "mask": np.full((2, 4, 4), -np.inf, np.float32)},
        "--attn")
    inp(0, "swin_dy_ignored", "swin", {"x": x_of(rng, 4, 4, 8), "dy": x_of(rng, 3)})
    inp(0, "w3d_x_name", "w3d", {"x": x_of(rng, 1, 12, 8), "kv": x_of(rng, 1, 8, 8)})
    inp(0, "shaw_n1", "shaw", {"x": x_of(rng, 3, 1, 8)}, "--attn")
    inp(0, "shaw_long", "shaw", {"x": x_of(rng, 1, 100, 8)})
    inp(0, "vit_b1_n1", "vit", {"x": x_of(rng, 1, 1, 8)}, "--attn")

    c.section("networks (fixture models): misshapen images and tokens: exit 65")
    BLOCK = "{fixtures}/net_block_w4.model.safetensors"    # dim 16, 8x8 tokens
    SWIN = "{fixtures}/net_swin_official.model.safetensors"  # 3x32x32 images
    c.case(0, fwd(BLOCK, "{fixtures}/net_block_w4.input.safetensors"))
    c.case(0, fwd(SWIN, "{fixtures}/net_swin_official.input.safetensors"))
    for name, model, t in (
            ("block_wrong_c", BLOCK, {"x": x_of(rng, 1, 64, 15)}),
            ("block_wrong_l", BLOCK, {"x": x_of(rng, 1, 63, 16)}),
            ("block_1d", BLOCK, {"x": x_of(rng, 16)}),
            ("block_5d", BLOCK, {"x": x_of(rng, 1, 1, 8, 8, 16)}),
            ("block_i32", BLOCK, {"x": np.zeros((1, 64, 16), np.int32)}),
            ("block_extra", BLOCK, {"x": x_of(rng, 1, 64, 16), "mask": x_of(rng, 1, 2, 2)}),
            ("block_no_x", BLOCK, {"q": x_of(rng, 1, 64, 16)}),
            ("block_empty", BLOCK, {"x": np.zeros((0, 64, 16), np.float32)}),
            ("swin_wrong_chans", SWIN, {"x": x_of(rng, 1, 4, 8, 8)}),
            ("swin_i8", SWIN, {"x": np.zeros((1, 3, 32, 32), np.int8)}),
            ("swin_empty", SWIN, {"x": np.zeros((1, 3, 0, 32), np.float32)}),
            ("swin_5d", SWIN, {"x": x_of(rng, 1, 1, 3, 8, 8)})):
        c.case(65, fwd(model, c.st("in_net_%s.input.safetensors" % name, t)))
    for arch, meta in (("swin_block", {}), ("swin", {}), ("vit", {}),
                       ("swin_block", {"dim": "abc", "input_resolution": "8,8"}),
                       ("swin", {"img_size": "0", "depths": "2,,2"}),
                       ("vit", {"img_size": "x", "depth": "-1"})):
        name = "meta_net_%s_%s.model.safetensors" % (arch, "bad" if meta else "arch_only")
        c.case(65, fwd(c.st(name, {"w": np.zeros(3, np.float32)}, dict(meta, arch=arch)),
                       I["vit"]))

    c.section("backward: dy missing or misshapen: exit 65 (valid: 0)")

    def binp(code, name, base, tensors, extra=""):
        path = c.st("in_bwd_%s.input.safetensors" % name, tensors)
        c.case(code, bwd(M[base], path, extra))

    binp(65, "no_dy", "vit", {"x": x_of(rng, 2, 5, 8)})
    binp(65, "dy_wrong_n", "vit", {"x": x_of(rng, 2, 5, 8), "dy": x_of(rng, 2, 4, 8)})
    binp(65, "dy_wrong_b", "swin", {"x": x_of(rng, 4, 4, 8), "dy": x_of(rng, 2, 4, 8)})
    binp(65, "dy_wrong_c", "shaw", {"x": x_of(rng, 2, 6, 8), "dy": x_of(rng, 2, 6, 4)})
    binp(65, "dy_2d", "vit", {"x": x_of(rng, 2, 5, 8), "dy": x_of(rng, 10, 8)})
    binp(65, "dy_i32", "vit", {"x": x_of(rng, 2, 5, 8), "dy": np.zeros((2, 5, 8), np.int32)})
    binp(65, "dy_empty", "vit", {"x": np.zeros((0, 5, 8), np.float32),
                                 "dy": np.zeros((0, 5, 8), np.float32)})
    binp(65, "w3d_dy_kv_shape", "w3d", {"q": x_of(rng, 2, 12, 8), "kv": x_of(rng, 2, 8, 8),
                                        "dy": x_of(rng, 2, 8, 8)})
    binp(65, "only_dy", "swin", {"dy": x_of(rng, 4, 4, 8)})
    binp(65, "swin_mask_nw", "swin", {"x": x_of(rng, 4, 4, 8), "dy": x_of(rng, 4, 4, 8),
                                      "mask": np.zeros((3, 4, 4), np.float32)})
    binp(0, "dy_f64", "vit", {"x": x_of(rng, 2, 5, 8), "dy": x_of(rng, 2, 5, 8)
                              .astype(np.float64)})
    binp(0, "mask_neg_inf", "swin", {"x": x_of(rng, 4, 4, 8), "dy": x_of(rng, 4, 4, 8),
                                     "mask": np.full((2, 4, 4), -np.inf, np.float32)})
    binp(0, "shaw_n1", "shaw", {"x": x_of(rng, 3, 1, 8), "dy": x_of(rng, 3, 1, 8)})
    c.case(65, bwd("{corpus}/meta_index_differs.model.safetensors", I["swin"]))
    c.case(65, bwd("{corpus}/meta_shaw_no_tables.model.safetensors", I["shaw"]))

    c.section("relattn show: any well-formed file lists (exit 0)")
    for k in models:
        c.case(0, "show " + M[k])
        c.case(0, "show " + I[k])
    c.case(0, "show {fixtures}/swin_7x7.expected.safetensors")
    for name, t in (("attn_zero_keys", {"attn": np.zeros((1, 2, 3, 0), np.float32)}),
                    ("attn_nan", {"attn": np.full((1, 1, 2, 2), np.nan, np.float32)}),
                    ("attn_negative", {"attn": -np.ones((2, 1, 2, 3), np.float32)}),
                    ("attn_3d", {"attn": np.ones((2, 3, 4), np.float32)}),
                    ("attn_i32", {"attn": np.ones((1, 1, 2, 2), np.int32)}),
                    ("attn_f16", {"attn": np.full((1, 2, 2, 2), 0.5, np.float16)}),
                    ("all_dtypes", {"f64": np.ones(2), "i64": np.ones(2, np.int64),
                                    "u8": np.ones(3, np.uint8), "b": np.ones(1, np.bool_),
                                    "i8": -np.ones(3, np.int8), "i16": np.ones(2, np.int16),
                                    "e": np.zeros((0,), np.float32),
                                    "s": np.zeros((1,) * 8, np.float32)}),
                    ("no_tensors", {})):
        c.case(0, "show " + c.st("show_%s.safetensors" % name, t,
                                 {"note": "line one\nline two", "arch": "not an arch"}))

    # ---- the command line ---------------------------------------------------
    c.section("command-line usage: exit 64")
    V = "%s %s" % (M["vit"], I["vit"])
    for args in ["", "bogus", "Forward", "--bogus", "-x", "''", "index --bogus",
                 "forward --bogus %s -o {out}" % V,
                 "forward %s" % V,                                   # no -o
                 "forward %s -o" % V,                                # -o without value
                 "forward %s -o ''" % V,
                 "forward %s -o {out}" % M["vit"],                   # no INPUT
                 "forward -o {out}",
                 "forward %s extra -o {out}" % V,
                 "forward %s -o {out} -o {out}" % V,
                 "forward %s -o {out} --attn=1" % V,
                 "forward %s -o {out} --attn --attn" % V,
                 "forward %s -o {out} --threads 0" % V,
                 "forward %s -o {out} --threads -1" % V,
                 "forward %s -o {out} --threads abc" % V,
                 "forward %s -o {out} --threads 1.5" % V,
                 "forward %s -o {out} --threads 1025" % V,
                 "forward %s -o {out} --threads ''" % V,
                 "forward %s -o {out} --threads 99999999999999999999" % V,
                 "forward %s -o {out} --threads" % V,
                 "forward %s -o {out} --window 2x2" % V,
                 "index",
                 "index --window 3x", "index --window x3", "index --window ''",
                 "index --window 3x3x3", "index --window abc", "index --window 3.0",
                 "index --window 99999999999x2", "index --window",
                 "index --window 2x2 --window 3x3",
                 "index --window 2x2 extra",
                 "index --window 2x2 --json=1",
                 "index --length 5", "index --clip 2", "index --length 5 --clip",
                 "index --length x --clip 2",
                 "index --frames 3", "index --window 2x2 --frames 3",
                 "index --window 2x2 --kv-frames 2", "index --frames 3 --kv-frames 2",
                 "index --window 2x2 --frames x --kv-frames 2",
                 "index --window 2x2 --length 3 --clip 1",
                 "index --length 3 --clip 1 --frames 3 --kv-frames 2",
                 "index -o {out} --window 2x2",
                 "backward %s" % V, "backward %s -o {out} --attn" % V,
                 "backward %s -o {out} --threads 0" % V, "backward %s -o {out}" % M["vit"],
                 "backward %s extra -o {out}" % V, "backward -o",
                 "show", "show %s" % V, "show --bogus %s" % M["vit"], "show -o {out}"]:
        c.case(64, args)

    c.section("help and version: exit 0")
    for args in ["--help", "-h", "help", "--version", "index --help", "index -h",
                 "forward --help", "forward -h", "index --window 2x2 --help",
                 "backward --help", "backward -h", "show --help", "show -h"]:
        c.case(0, args)

    c.section("relattn index: valid configurations exit 0, invalid ones 65")
    for args in ["--window 2x2", "--window 7", "--window 3x5", "--window 3,5", "--window 1x1",
                 "--window=2x2", "--window 2X3 --json", "--window 7x7 --json",
                 "--window 2x2 --frames 7 --kv-frames 4", "--window 2x3 --frames 3 --kv-frames 2",
                 "--window 1x1 --frames 1 --kv-frames 1 --json",
                 "--window 2x2 --frames 5 --kv-frames 3",
                 "--length 5 --clip 2", "--length 1 --clip 0", "--length 4 --clip 100 --json",
                 "--clip 2 --length 3"]:
        c.case(0, "index " + args)
    for args in ["--window 0x3", "--window 3x0", "--window -1x3", "--window 0",
                 "--window 4097x1", "--window 100000x100000", "--window 2147483647x2147483647",
                 "--window 1x16385",
                 "--window 2x2 --frames 7 --kv-frames 5", "--window 2x2 --frames 3 --kv-frames 5",
                 "--window 2x2 --frames 0 --kv-frames 1", "--window 2x2 --frames 4 --kv-frames 0",
                 "--window 2x2 --frames -3 --kv-frames 2",
                 "--window 64x64 --frames 64 --kv-frames 64",
                 "--length 0 --clip 1", "--length 5 --clip -1", "--length -5 --clip 1",
                 "--length 16385 --clip 2", "--length 100000 --clip 1",
                 "--length 3 --clip 2147483647"]:
        c.case(65, "index " + args)

    c.section("outputs that cannot be created: exit 73")
    c.case(73, "forward %s -o {tmp}/no_such_dir/out.safetensors" % V)
    c.case(73, "forward %s -o /proc/relattn.out" % V)
    c.case(73, "forward %s -o {tmp}" % V)
    c.case(73, "forward %s -o {out}/" % V)
    c.case(73, "forward %s -o {corpus}/ok_vit.input.safetensors/out" % V)
    c.case(73, "forward %s -o {tmp}/%s" % (V, "n" * 300))   # name too long
    c.case(73, "backward %s -o {tmp}/no_such_dir/out.safetensors" % V)
    c.case(73, "backward %s -o /proc/relattn.out" % V)
    c.case(73, "backward %s -o {tmp}" % V)
    c.section("bad data wins over a bad output (the model is read first)")
    c.case(65, fwd("{corpus}/bad_not_json.safetensors", I["vit"]).replace(
        "{out}", "/proc/relattn.out"))
    c.case(66, fwd("{corpus}/no_such_model.safetensors", I["vit"]).replace(
        "{out}", "{tmp}/no_such_dir/out.safetensors"))
    c.write()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "corpus"))
    build(os.path.normpath(ap.parse_args().out))


if __name__ == "__main__":
    main()
