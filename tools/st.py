"""Minimal safetensors reader and writer (no `safetensors` package needed).

Format (https://github.com/huggingface/safetensors, as docs/reference.md,
section 2, describes it):
    u64 little-endian N | N bytes of JSON header | data
The header maps each tensor name to {"dtype", "shape", "data_offsets":
[begin, end]} (offsets relative to the start of the data section) and may
hold "__metadata__": {str: str}. This writer lays the tensors out
consecutively from offset 0 in name-sorted order and pads the header with
spaces to a multiple of 8 bytes. Data is raw little-endian, row-major.

    import st
    st.write(path, {"x": tensor_or_ndarray, ...}, {"arch": "vit_attention"})
    tensors, meta = st.read(path)      # numpy arrays (BF16 -> float32)

Tensors may be numpy arrays or torch tensors (torch is imported only when a
torch tensor is passed; BF16 needs torch). The write is atomic: a temporary
file in the same directory, then a rename.
"""

import json
import os
import struct
import tempfile

import numpy as np

# dtype name -> (numpy dtype or None for BF16, bytes per element)
DTYPES = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (None, 2),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
    "BOOL": (np.dtype("?"), 1),
}

_NP_TO_ST = {
    np.dtype("float64"): "F64",
    np.dtype("float32"): "F32",
    np.dtype("float16"): "F16",
    np.dtype("int64"): "I64",
    np.dtype("int32"): "I32",
    np.dtype("int16"): "I16",
    np.dtype("int8"): "I8",
    np.dtype("uint8"): "U8",
    np.dtype("bool"): "BOOL",
}

MAX_HEADER = 100 * 1000 * 1000


def _encode(value):
    """-> (dtype name, shape list, raw little-endian bytes)."""
    if isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        if arr.dtype.newbyteorder("=") not in _NP_TO_ST:
            raise TypeError("unsupported numpy dtype %s" % arr.dtype)
        name = _NP_TO_ST[arr.dtype.newbyteorder("=")]
        arr = arr.astype(DTYPES[name][0], copy=False)
        return name, list(arr.shape), arr.tobytes(order="C")
    import torch  # only when torch tensors are passed

    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().astype("<i2").tobytes(order="C")
            return "BF16", list(t.shape), raw
        return _encode(t.numpy())
    raise TypeError("tensor must be a numpy array or a torch tensor, got %r"
                    % type(value))


def dumps(tensors, metadata=None):
    """The bytes of a safetensors file holding tensors (name -> array)."""
    header = {}
    if metadata is not None:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("metadata must map str to str (%r: %r)" % (k, v))
        header["__metadata__"] = dict(metadata)
    chunks = []
    offset = 0
    for name in sorted(tensors):
        if name == "__metadata__":
            raise ValueError("reserved tensor name")
        dtype, shape, raw = _encode(tensors[name])
        n = 1
        for s in shape:
            n *= s
        assert len(raw) == n * DTYPES[dtype][1]
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    return struct.pack("<Q", len(hjson)) + hjson + b"".join(chunks)


def write(path, tensors, metadata=None):
    """Write tensors (dict name -> numpy array / torch tensor) atomically."""
    blob = dumps(tensors, metadata)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(blob)


def loads_header(blob):
    """Parse and validate the header of a file's bytes.

    Returns (entries, metadata, data_start) where entries is a list of
    (name, dtype, shape, begin, end) in file (offset) order. Raises
    ValueError on any inconsistency (bounds, overlap, gap, sizes).
    """
    if len(blob) < 8:
        raise ValueError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER or 8 + n > len(blob):
        raise ValueError("bad header length %d" % n)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("header is not an object")
    metadata = header.pop("__metadata__", None) or {}
    for k, v in metadata.items():
        if not isinstance(v, str):
            raise ValueError("metadata value for %r is not a string" % k)
    entries = []
    for name, info in header.items():
        dtype = info["dtype"]
        if dtype not in DTYPES:
            raise ValueError("unknown dtype %r" % dtype)
        shape = [int(s) for s in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
        count = 1
        for s in shape:
            if s < 0:
                raise ValueError("negative dimension in %r" % name)
            count *= s
        if end < begin or end - begin != count * DTYPES[dtype][1]:
            raise ValueError("byte count mismatch for %r" % name)
        entries.append((name, dtype, shape, begin, end))
    entries.sort(key=lambda e: (e[3], e[4]))
    data_len = len(blob) - 8 - n
    pos = 0
    for name, _, _, begin, end in entries:
        if begin != pos:
            raise ValueError("gap or overlap before %r" % name)
        pos = end
    if pos != data_len:
        raise ValueError("data section is %d bytes, tensors cover %d"
                         % (data_len, pos))
    return entries, metadata, 8 + n


def read(path, raw_bf16=False):
    """Read a file: -> (dict name -> numpy array, metadata dict).

    BF16 tensors are returned as float32 (exact), or as their raw uint16
    bits with raw_bf16=True.
    """
    with open(path, "rb") as f:
        blob = f.read()
    entries, metadata, start = loads_header(blob)
    out = {}
    for name, dtype, shape, begin, end in entries:
        buf = blob[start + begin:start + end]
        if dtype == "BF16":
            bits = np.frombuffer(buf, dtype="<u2").reshape(shape)
            if raw_bf16:
                arr = bits.copy()
            else:
                arr = (bits.astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(buf, dtype=DTYPES[dtype][0]).reshape(shape).copy()
        out[name] = arr
    return out, dict(metadata)


def dtypes(path):
    """dict name -> dtype name of the tensors in a file."""
    with open(path, "rb") as f:
        blob = f.read()
    entries, _, _ = loads_header(blob)
    return {e[0]: e[1] for e in entries}
