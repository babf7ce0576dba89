"""Writes the PyTorch checkpoint fixtures of tests/test_torch.c: small files
written by torch.save itself, what relattn must read from each (a
safetensors file of the same tensors, made contiguous), and hand-made
checkpoints it must refuse.

    /usr/bin/python3 tools/fixtures.py torch [-o tests/fixtures]
    /usr/bin/python3 tools/fixtures.py torch_seeds      (fuzz/corpus/pickle)

tests/fixtures gets

  pt_NAME.pth                     a checkpoint (torch.save, or hand-made)
  pt_NAME.expected.safetensors    the tensors of its state dict
  pt_cases.txt                    FILE<TAB>KEY<TAB>FOUND<TAB>EXPECTED a line:
                                  opening FILE with KEY ("-": automatic)
                                  finds the state dict at FOUND ("-": the
                                  root) holding EXPECTED's tensors
  pt_refusals.txt                 FILE<TAB>KEY<TAB>TEXT a line: opening FILE
                                  with KEY is refused (RA_ERR_FORMAT) with a
                                  reason that contains TEXT
  pt_values_pN.pkl                one object pickled with protocol N = 1..5
                                  (test_torch.c checks every value of it)

torch_seeds writes the pickles of those files (their data.pkl) and a few
hand-made ones into fuzz/corpus/pickle, the seeds of fuzz/fuzz_pickle.c.
Everything is deterministic: the same PyTorch writes the same bytes.
"""
import collections
import io
import json
import os
import pickle
import struct
import sys
import warnings
import zipfile
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

DATE = (1980, 1, 1, 0, 0, 0)


# --------------------------------------------------------------------------
# Checkpoints as torch.save writes them
# --------------------------------------------------------------------------

def small_net():
    """A real module's state_dict: an OrderedDict with _metadata, Linear,
    LayerNorm and BatchNorm (whose num_batches_tracked is a 0-d int64)."""
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.BatchNorm1d(3))
    net.train()
    net(torch.randn(5, 4))  # running statistics that are not the defaults
    return net


def dtypes_dict(g):
    f = torch.tensor([0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), 1e-40, 3.4e38])
    return {
        "f32": torch.randn(2, 3, generator=g),
        "f32_special": f,
        "f16": torch.tensor([0.0, -0.0, 1.0, 65504.0, 6e-8, -3.5, float("inf")]).half(),
        "bf16": torch.randn(5, generator=g).bfloat16(),
        "f64": torch.randn(3, generator=g).double() * 1e100,
        "i64": torch.tensor([0, 1, -1, 2 ** 62, -2 ** 63]),
        "i32": torch.tensor([7, -2 ** 31, 2 ** 31 - 1], dtype=torch.int32),
        "i16": torch.tensor([-32768, 32767, 5], dtype=torch.int16),
        "i8": torch.tensor([-128, 127, 0], dtype=torch.int8),
        "u8": torch.tensor([0, 255, 17], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
    }


def views_dict(g):
    base = torch.arange(20, dtype=torch.float32)
    grid = torch.randn(4, 5, generator=g)
    shared = torch.randn(10, generator=g)
    cube = torch.randn(2, 3, 4, generator=g)
    return {
        "transposed": grid.t(),               # strides (1, 5): gathered
        "slice": base[2:5],                   # an offset into a shared storage
        "row": grid[1],                       # offset, contiguous
        "column": grid[:, 1],                 # stride 5
        "step": base[::3],                    # stride 3
        "shared_a": shared[0:4].view(2, 2),   # two views of one storage
        "shared_b": shared[4:10],
        "scalar": torch.tensor(3.5),          # 0-d
        "empty": torch.zeros(0, 3),
        "expanded": torch.randn(1, 4, generator=g).expand(3, 4),   # stride 0
        "permuted": cube.permute(2, 0, 1),
        "unit_dims": grid[1:2, :].unsqueeze(0),   # size-1 dims with any stride
    }


def nested_checkpoint():
    import argparse as ap
    net = small_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.randn(5, 4)).sum().backward()
    opt.step()
    sd = net.state_dict()
    return {"model": sd, "epoch": 3, "args": ap.Namespace(lr=0.1, model="swin_t", drop=None),
            "optimizer": opt.state_dict(), "metric": np.float64(0.25), "best": 0.75,
            "version": torch.__version__, "names": ["a", "b"]}, sd


def write_expected(path, sd):
    """The tensors of state dict sd as a safetensors file, shapes as they
    are (st.write makes a 0-d tensor 1-d, through numpy)."""
    header, raw, off = {}, [], 0
    for k in sorted(sd):
        t = sd[k]
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach().contiguous()
        name, _, b = st._encode(t.reshape(-1))
        header[k] = {"dtype": name, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        raw.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(raw))


def save(out, name, obj, **kw):
    torch.save(obj, os.path.join(out, name), **kw)


def write_cases(out):
    """The checkpoints relattn reads; -> the lines of pt_cases.txt."""
    g = torch.Generator().manual_seed(7)
    lines = []

    def case(pth, key, found, tensors, exp=None):
        exp = exp or pth.replace(".pth", ".expected.safetensors")
        if tensors is not None:
            write_expected(os.path.join(out, exp), tensors)
        lines.append("\t".join([pth, key, found, exp]))

    basic = {"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g)}
    save(out, "pt_basic.pth", basic)
    case("pt_basic.pth", "-", "-", basic)

    d = dtypes_dict(g)
    save(out, "pt_dtypes.pth", d)
    case("pt_dtypes.pth", "-", "-", d)

    v = views_dict(g)
    save(out, "pt_views.pth", v)
    case("pt_views.pth", "-", "-", v)

    params = {"p": torch.nn.Parameter(torch.randn(2, 3, generator=g)),
              "frozen": torch.nn.Parameter(torch.randn(3, generator=g), requires_grad=False)}
    save(out, "pt_param.pth", params)
    case("pt_param.pth", "-", "-", params)

    ckpt, sd = nested_checkpoint()
    save(out, "pt_nested.pth", ckpt)
    case("pt_nested.pth", "-", "model", sd)
    case("pt_nested.pth", "model", "model", None, "pt_nested.expected.safetensors")
    save(out, "pt_proto4.pth", ckpt, pickle_protocol=4)
    case("pt_proto4.pth", "-", "model", None, "pt_nested.expected.safetensors")
    save(out, "pt_proto5.pth", ckpt, pickle_protocol=5)
    case("pt_proto5.pth", "-", "model", None, "pt_nested.expected.safetensors")

    net = torch.nn.DataParallel(torch.nn.Linear(3, 2))  # module.-prefixed names
    save(out, "pt_module.pth", {"state_dict": net.state_dict(), "epoch": 1})
    case("pt_module.pth", "-", "state_dict", net.state_dict())

    small = {"x": torch.randn(2, 2, generator=g)}
    save(out, "pt_deep.pth", {"a": {"b": {"c": small}}, "info": "three keys down"})
    case("pt_deep.pth", "-", "a/b/c", small)
    case("pt_deep.pth", "a/b/c", "a/b/c", None, "pt_deep.expected.safetensors")
    case("pt_deep.pth", "a.b.c", "a.b.c", None, "pt_deep.expected.safetensors")

    student = {"w": torch.randn(2, generator=g)}
    teacher = {"w": torch.randn(3, generator=g), "v": torch.randn(1, generator=g)}
    save(out, "pt_two.pth", {"student": student, "teacher": teacher})
    case("pt_two.pth", "teacher", "teacher", teacher, "pt_two_teacher.expected.safetensors")
    case("pt_two.pth", "student", "student", student, "pt_two_student.expected.safetensors")

    dotted = {"k": torch.randn(3, generator=g)}
    save(out, "pt_dotted.pth", {"model.ema": dotted, "model": {"other": 1}})
    case("pt_dotted.pth", "model.ema", "model.ema", dotted)

    listed = {"y": torch.arange(4, dtype=torch.int64)}
    save(out, "pt_list.pth", {"models": [listed], "n": 1})
    case("pt_list.pth", "-", "models/0", listed)

    # torch 2.x's layout (archive/, byteorder, .data/version, .format_version,
    # .storage_alignment, .data/serialization_id), as zip64
    write_torch2(out, "pt_torch2_zip64.pth", os.path.join(out, "pt_basic.pth"))
    case("pt_torch2_zip64.pth", "-", "-", None, "pt_basic.expected.safetensors")
    return lines


def write_torch2(out, name, src):
    """src's records rewritten as torch 2.x writes them, as zip64."""
    with zipfile.ZipFile(src) as z:
        recs = {n.split("/", 1)[1]: z.read(n) for n in z.namelist()}
    recs.pop("version")
    recs.update({"byteorder": b"little", ".data/version": b"3\n", ".format_version": b"1",
                 ".storage_alignment": b"64", ".data/serialization_id": b"0123456789"})
    order = ["data.pkl", "byteorder"] + sorted(k for k in recs if k.startswith("data/")) + \
        [".data/version", ".format_version", ".storage_alignment", ".data/serialization_id"]
    write_zip64(os.path.join(out, name), [("archive/" + k, recs[k]) for k in order])


def write_zip(path, entries, compress=zipfile.ZIP_STORED):
    """A zip of (name, bytes) entries, deterministic (fixed dates)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, DATE)
            zi.compress_type = compress
            z.writestr(zi, data)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def write_zip64(path, entries):
    """A zip of stored (name, bytes) entries, every size and offset in
    zip64 extra fields, the zip64 end records, and each entry's data
    64-byte aligned by a padding field as torch.save's writer does."""
    out, central = b"", b""
    for name, data in entries:
        n = name.encode()
        crc, size, off = zlib.crc32(data), len(data), len(out)
        z64 = struct.pack("<HHQQ", 1, 16, size, size)
        pad = -(off + 30 + len(n) + len(z64) + 4) % 64
        extra = z64 + struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        out += struct.pack("<IHHHHHIIIHH", 0x04034b50, 45, 0, 0, 0, 0x21, crc,
                           0xFFFFFFFF, 0xFFFFFFFF, len(n), len(extra)) + n + extra + data
        cx = struct.pack("<HHQQQ", 1, 24, size, size, off)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 45, 45, 0, 0, 0, 0x21, crc,
                               0xFFFFFFFF, 0xFFFFFFFF, len(n), len(cx), 0, 0, 0, 0,
                               0xFFFFFFFF) + n + cx
    cd_off, k = len(out), len(entries)
    out += central
    z64_end = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, k, k, len(central), cd_off)
    out += struct.pack("<IIQI", 0x07064b50, 0, z64_end, 1)
    out += struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(path, "wb") as f:
        f.write(out)


# --------------------------------------------------------------------------
# Hand-made checkpoints: a pickle written here, storages as given
# --------------------------------------------------------------------------

class Storage:
    """A storage the pickler below writes as torch.save's persistent id."""

    def __init__(self, cls, key, numel):
        self.cls, self.key, self.numel = cls, key, numel


class Tensor:
    """Pickles as torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)."""

    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args)


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", getattr(torch, obj.cls), obj.key, "cpu", obj.numel)
        return None


def dumps(obj, protocol=2):
    b = io.BytesIO()
    Pickler(b, protocol=protocol).dump(obj)
    return b.getvalue()


def write_handmade(out, name, pkl, storages=(), records=None):
    """A checkpoint of pickle bytes pkl and storages (key, bytes)."""
    d = name[:-4]
    recs = [(d + "/data.pkl", pkl)] + [(d + "/data/" + k, b) for k, b in storages]
    recs += [(d + "/" + k, v) for k, v in (records or {"version": b"3\n"}).items()]
    write_zip(os.path.join(out, name), recs)


def rewrite(out, name, src, change=None, compress=zipfile.ZIP_STORED, extra=()):
    """src's entries under name's directory, change(short name, bytes) ->
    bytes or None (dropped), more records appended."""
    d = name[:-4]
    with zipfile.ZipFile(src) as z:
        recs = [(n.split("/", 1)[1], z.read(n)) for n in z.namelist()]
    entries = []
    for k, b in list(recs) + list(extra):
        b = change(k, b) if change else b
        if b is not None:
            entries.append((d + "/" + k, b))
    write_zip(os.path.join(out, name), entries, compress)


F32 = np.arange(6, dtype="<f4").tobytes()


def write_refusals(out):
    """The checkpoints relattn refuses; -> the lines of pt_refusals.txt."""
    lines = []
    basic = os.path.join(out, "pt_basic.pth")

    def refuse(pth, key, text):
        lines.append("\t".join([pth, key, text]))

    # a pickle that would run os.system("echo pwned") in Python
    write_handmade(out, "pt_bad_global.pth",
                   b"\x80\x02cos\nsystem\nq\x00X\x0b\x00\x00\x00echo pwnedq\x01\x85q\x02Rq\x03.")
    refuse("pt_bad_global.pth", "-", "refusing to load global 'os.system'")
    with open(basic, "rb") as f:
        whole = f.read()
    # the same with protocol 4's STACK_GLOBAL
    write_handmade(out, "pt_bad_stack_global.pth",
                   b"\x80\x04\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x02id\x94\x85\x94R\x94.")
    refuse("pt_bad_stack_global.pth", "-", "refusing to load global 'posix.system'")
    with open(os.path.join(out, "pt_bad_truncated.pth"), "wb") as f:
        f.write(whole[:len(whole) // 2])
    refuse("pt_bad_truncated.pth", "-", "not a readable zip archive")
    rewrite(out, "pt_bad_deflated.pth", basic, compress=zipfile.ZIP_DEFLATED)
    refuse("pt_bad_deflated.pth", "-", "is compressed")
    rewrite(out, "pt_bad_big_endian.pth", basic, extra=[("byteorder", b"big")])
    refuse("pt_bad_big_endian.pth", "-", "big-endian")
    rewrite(out, "pt_bad_byteorder.pth", basic, extra=[("byteorder", b"middle")])
    refuse("pt_bad_byteorder.pth", "-", "byteorder record 'middle'")
    rewrite(out, "pt_bad_version.pth", basic, lambda k, b: b"99\n" if k == "version" else b)
    refuse("pt_bad_version.pth", "-", "format version '99")
    rewrite(out, "pt_bad_no_version.pth", basic, lambda k, b: None if k == "version" else b)
    refuse("pt_bad_no_version.pth", "-", "no version record")
    with zipfile.ZipFile(basic) as z:   # one bit of data.pkl's data, its CRC kept
        n = z.getinfo("pt_basic/data.pkl").file_size
    crc = bytearray(whole)
    crc[64 + n - 2] ^= 1
    with open(os.path.join(out, "pt_bad_crc.pth"), "wb") as f:
        f.write(bytes(crc))
    refuse("pt_bad_crc.pth", "-", "CRC mismatch")
    rewrite(out, "pt_bad_missing.pth", basic, lambda k, b: None if k == "data/0" else b)
    refuse("pt_bad_missing.pth", "-", "data/0 is missing")

    s = Storage("FloatStorage", "0", 6)
    write_handmade(out, "pt_bad_short_storage.pth", dumps({"w": Tensor(s, 0, [2, 3], [3, 1])}),
                   [("0", F32[:20])])
    refuse("pt_bad_short_storage.pth", "-", "holds 20 bytes, its 6 elements")
    write_handmade(out, "pt_bad_view.pth", dumps({"w": Tensor(s, 1, [2, 3], [3, 1])}), [("0", F32)])
    refuse("pt_bad_view.pth", "-", "runs past its storage")
    write_handmade(out, "pt_bad_stride_view.pth", dumps({"w": Tensor(s, 0, [3, 2], [1, 4])}),
                   [("0", F32)])
    refuse("pt_bad_stride_view.pth", "-", "runs past its storage")
    h = Storage("HalfStorage", "0", 12)
    write_handmade(out, "pt_bad_two_types.pth",
                   dumps({"a": Tensor(s, 0, [6], [1]), "b": Tensor(h, 0, [12], [1])}), [("0", F32)])
    refuse("pt_bad_two_types.pth", "-", "is used as torch.FloatStorage of 6 and as torch.HalfStorage")
    write_handmade(out, "pt_bad_huge_view.pth",
                   dumps({"w": Tensor(s, 0, [2 ** 20, 2 ** 20], [0, 0])}), [("0", F32)])
    refuse("pt_bad_huge_view.pth", "-", "gathering its strided view")
    write_handmade(out, "pt_bad_numel.pth",
                   dumps({"w": Tensor(s, 0, [2 ** 40, 2 ** 40], [0, 0])}), [("0", F32)])
    refuse("pt_bad_numel.pth", "-", "more elements than int64 holds")
    write_handmade(out, "pt_bad_dims.pth", dumps({"w": Tensor(s, 0, [1] * 9, [1] * 9)}), [("0", F32)])
    refuse("pt_bad_dims.pth", "-", "9 dimensions (at most 8)")
    write_handmade(out, "pt_bad_pid.pth", dumps({"w": Tensor(Storage("FloatStorage", 0, 6), 0, [6], [1])}),
                   [("0", F32)])
    refuse("pt_bad_pid.pth", "-", "persistent id is not ('storage', class, key, location, size)")
    write_handmade(out, "pt_bad_int_key.pth", dumps({3: Tensor(s, 0, [6], [1])}), [("0", F32)])
    refuse("pt_bad_int_key.pth", "-", "a tensor under a key that is not a name: int 3")
    with warnings.catch_warnings():   # zipfile warns of the very duplicate wanted
        warnings.simplefilter("ignore")
        rewrite(out, "pt_bad_duplicate.pth", basic, extra=[("data/0", F32)])
    refuse("pt_bad_duplicate.pth", "-", "appears twice")
    torch.save({"c": torch.zeros(2, dtype=torch.complex64)}, os.path.join(out, "pt_bad_complex.pth"))
    refuse("pt_bad_complex.pth", "-", "torch.ComplexFloatStorage, a dtype relattn does not read")
    # the legacy format starts with pickles of its magic number, protocol
    # version and system information (then storage ids, which change from
    # run to run: not written here)
    with open(os.path.join(out, "pt_bad_legacy.pth"), "wb") as f:
        for x in (0x1950a86a20f9469cfc6c, 1001, {"protocol_version": 1001, "little_endian": True}):
            f.write(pickle.dumps(x, protocol=2))
    refuse("pt_bad_legacy.pth", "-", "legacy format")
    torch.save(torch.zeros(2), os.path.join(out, "pt_bad_root_tensor.pth"))
    refuse("pt_bad_root_tensor.pth", "-", "no state dict")
    refuse("pt_two.pth", "-", "2 state dicts in the checkpoint ('student', 'teacher'): pass --key")
    refuse("pt_nested.pth", "nope", "no entry 'nope' in the checkpoint (its keys: 'model', 'epoch'")
    refuse("pt_nested.pth", "epoch", "entry 'epoch' holds int 3, not a dict of tensors")
    # the memo: an index far past what was stored, one never set
    write_handmade(out, "pt_bad_memo.pth", b"\x80\x02}r\x00\xff\xff\xffr.")
    refuse("pt_bad_memo.pth", "-", "memo index 4294967040")
    write_handmade(out, "pt_bad_memo_get.pth", b"\x80\x02}q\x01h\x02.")
    refuse("pt_bad_memo_get.pth", "-", "memo index 2 was never set")
    # nesting: 300 lists each in the one before; 300 marks
    write_handmade(out, "pt_bad_deep.pth", b"\x80\x02" + b"]" * 300 + b"a" * 299 + b".")
    refuse("pt_bad_deep.pth", "-", "nested deeper than 256")
    write_handmade(out, "pt_bad_marks.pth", b"\x80\x02" + b"(" * 300 + b"N.")
    refuse("pt_bad_marks.pth", "-", "marks nested deeper than 256")
    # torch.jit.save's records (its own output is not the same from run to run)
    write_handmade(out, "pt_bad_torchscript.pth", dumps({}), records={
        "version": b"3\n", "constants.pkl": b"\x80\x02).", "code/__torch__.py": b"class M: pass\n"})
    refuse("pt_bad_torchscript.pth", "-", "TorchScript archive")
    return lines


# --------------------------------------------------------------------------
# Plain values, every opcode torch.save's protocols write
# --------------------------------------------------------------------------

def values():
    shared = [7]
    return {
        "ints": [0, 1, -1, 255, 256, 65535, 65536, -2 ** 31, 2 ** 31 - 1, 2 ** 31,
                 2 ** 63 - 1, -2 ** 63],
        "big": 2 ** 70,
        "floats": [0.1, -2.5, float("inf"), 1e-310],
        "str": "h\u00e9llo \u2713",
        "empty": "",
        "bytes": b"\x00\x01\xff",
        "tuple": (1, (2, 3), ()),
        "none": None,
        "bools": [True, False],
        "set": {1},
        "frozenset": frozenset({2}),
        "od": collections.OrderedDict(a=1),
        "nested": {"k": [[1]]},
        "shared": [shared, shared],
        5: "an int key",
        (1, 2): "a tuple key",
    }


def write_fixtures(out):
    """The torch family of tools/fixtures.py."""
    torch.manual_seed(0)
    cases = write_cases(out)
    refusals = write_refusals(out)
    with open(os.path.join(out, "pt_cases.txt"), "w") as f:
        f.write("\n".join(cases) + "\n")
    with open(os.path.join(out, "pt_refusals.txt"), "w") as f:
        f.write("\n".join(refusals) + "\n")
    for p in (1, 2, 3, 4, 5):
        with open(os.path.join(out, "pt_values_p%d.pkl" % p), "wb") as f:
            f.write(pickle.dumps(values(), protocol=p))


def write_seeds(out):
    """The torch_seeds family: pickles for fuzz/fuzz_pickle.c."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        write_cases(tmp)
        write_refusals(tmp)
        for name in sorted(os.listdir(tmp)):
            if not name.endswith(".pth") or not zipfile.is_zipfile(os.path.join(tmp, name)):
                continue
            with zipfile.ZipFile(os.path.join(tmp, name)) as z:
                for n in z.namelist():
                    if n.endswith("/data.pkl") and z.getinfo(n).compress_type == 0:
                        try:
                            data = z.read(n)
                        except zipfile.BadZipFile:  # pt_bad_crc
                            continue
                        with open(os.path.join(out, name[:-4] + ".pkl"), "wb") as f:
                            f.write(data)
    for p in (1, 2, 3, 4, 5):
        with open(os.path.join(out, "values_p%d.pkl" % p), "wb") as f:
            f.write(pickle.dumps(values(), protocol=p))


if __name__ == "__main__":
    import fixtures
    fixtures.script_main({"torch": ["torch"], "torch_seeds": ["torch_seeds"]})
