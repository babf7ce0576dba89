"""relattn: transformer attention with relative position encodings, from Python.

A thin layer over the C library (librelattn, through ctypes; see _lib.py for
where it is found). NumPy arrays go in and come out; C-contiguous float32
arrays are passed without a copy.

  relpos_index(window=(wh, ww), frames=None, kv_frames=None)
  relpos_index(length=n, clip=k)      the relative position index (int64)
  Model(path)                         a model file: .arch, .meta,
                                      .forward(**inputs), .backward(**inputs),
                                      .predict(x) (a classifier's outputs)
  relattn.torch                       the attention core as a PyTorch op and
                                      Swin's WindowAttention on it

Errors of the library are raised as RelattnError, whose text is the
library's one-line reason.
"""

import ctypes
import os

from ._lib import (ClipSpec, FeaturesOptions, LoadOptions, RelattnError, Tensor, Transform,
                   VideoTransform, check, lib, path as library_path)

__all__ = ["relpos_index", "window_mask", "load", "Model", "RelattnError", "archs", "version",
           "set_threads", "library_path"]

__version__ = lib.ra_version().decode()

RUN_FORWARD, RUN_FORWARD_ATTN, RUN_BACKWARD, RUN_FEATURES = 0, 1, 2, 3

_libc = ctypes.CDLL(None)   # frees what the library allocates with malloc
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def _np():
    try:
        import numpy
    except ImportError as e:  # import relattn works without it; arrays need it
        raise ImportError("relattn: NumPy is needed for arrays (Debian: python3-numpy)") from e
    return numpy


def version():
    """The library's version, kernel in use and BLAS, as `relattn --version`."""
    return "relattn %s (kernel %s; %s)" % (__version__,
                                            lib.ra_kernel_name(lib.ra_kernel_current()).decode(),
                                            lib.ra_blas_info().decode())


def set_threads(n):
    """Threads of the library's kernels (OpenMP and OpenBLAS), process-wide;
    n <= 0 restores the default (all cores, or OMP_NUM_THREADS)."""
    lib.ra_threads_set(int(n))


def archs():
    """The architectures the library's model loader knows (model files' "arch")."""
    return [lib.ra_model_arch_name(i).decode() for i in range(lib.ra_model_arch_count())]


def _pair(v, what):
    if isinstance(v, int):
        return v, v
    v = tuple(v)
    if len(v) != 2:
        raise ValueError("relpos_index: %s must be an int or a pair, not %r" % (what, v))
    return int(v[0]), int(v[1])


def relpos_index(window=None, frames=None, kv_frames=None, *, length=None, clip=None):
    """The relative position index, as `relattn index` prints it, int64 (N1, N2):
    Swin 2-D for window=(wh, ww) (or an int), RSTT 3-D with frames=D1 and
    kv_frames=D2 too, Shaw's clip(j - i, -k, k) + k for length=n, clip=k."""
    np = _np()
    if (window is None) == (length is None):
        raise ValueError("relpos_index: give either window or length")
    if length is not None and (frames is not None or kv_frames is not None):
        raise ValueError("relpos_index: frames go with window, not length")
    if (frames is None) != (kv_frames is None):
        raise ValueError("relpos_index: frames and kv_frames go together")
    if (length is None) != (clip is None):
        raise ValueError("relpos_index: length and clip go together")
    rows = ctypes.c_int64()
    if length is not None:
        n, k = int(length), int(clip)
        check(lib.ra_relpos_index_clip(None, n, k))
        n1 = n2 = n
        fill = lambda p: lib.ra_relpos_index_clip(p, n, k)  # noqa: E731
    else:
        wh, ww = _pair(window, "window")
        if frames is not None:
            d1, d2 = int(frames), int(kv_frames)
            check(lib.ra_relpos_index_3d(None, d1, d2, wh, ww, ctypes.byref(rows)))
            n1, n2 = d1 * wh * ww, d2 * wh * ww
            fill = lambda p: lib.ra_relpos_index_3d(p, d1, d2, wh, ww, None)  # noqa: E731
        else:
            check(lib.ra_relpos_index_2d(None, wh, ww, ctypes.byref(rows)))
            n1 = n2 = wh * ww
            fill = lambda p: lib.ra_relpos_index_2d(p, wh, ww, None)  # noqa: E731
    idx = np.empty((n1, n2), dtype=np.int32)
    check(fill(idx.ctypes.data))
    return idx.astype(np.int64)


def window_mask(size, window, shift):
    """Swin's shifted-window attention mask over an (H, W) map (a multiple of
    the window): float32 (nW, N, N), 0 within a region, -100 across."""
    np = _np()
    from ._lib import WindowGeom
    (h, w), (wh, ww), (sh, sw) = _pair(size, "size"), _pair(window, "window"), _pair(shift, "shift")
    g = WindowGeom(d=1, h=h, w=w, wd=1, wh=wh, ww=ww, sd=0, sh=sh, sw=sw)
    nw, n = lib.ra_window_count(ctypes.byref(g)), lib.ra_window_tokens(ctypes.byref(g))
    if nw < 1 or n < 1:
        check(lib.ra_window_mask(None, ctypes.byref(g)))
    mask = np.empty((nw, n, n), dtype=np.float32)
    check(lib.ra_window_mask(mask.ctypes.data, ctypes.byref(g)))
    return mask


_FLOAT_DTYPES = (1, 2, 3, 4)   # RA_DTYPE_F32, F16, BF16, F64


def load(path):
    """A safetensors file, read and validated by the library: ({name: array},
    {metadata}). Float tensors come as float32, integer ones as int64."""
    np = _np()
    f = ctypes.c_void_p()
    check(lib.ra_st_open(ctypes.byref(f), os.fsencode(path)))
    try:
        tensors = {}
        for i in range(lib.ra_st_count(f)):
            tp = lib.ra_st_at(f, i)
            t = tp.contents
            shape = tuple(t.shape[d] for d in range(t.ndim))
            if t.dtype in _FLOAT_DTYPES:
                a = np.empty(shape, dtype=np.float32)
                check(lib.ra_st_read_f32(a.ctypes.data, f, tp))
            else:
                a = np.empty(shape, dtype=np.int64)
                check(lib.ra_st_read_i64(a.ctypes.data, f, tp))
            tensors[t.name.decode()] = a
        meta = {}
        for i in range(lib.ra_st_meta_count(f)):
            k = lib.ra_st_meta_key(f, i)
            meta[k.decode()] = lib.ra_st_meta(f, k).decode()
        return tensors, meta
    finally:
        lib.ra_st_close(f)


def _as_f32(name, a):
    """A C-contiguous float32 array for the library (the same array when it is one)."""
    np = _np()
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.ndim > 8:
        raise ValueError("input '%s' has %d dims (8 at most)" % (name, a.ndim))
    return a


class _Run:
    """An ra_run; freed when the last array of its outputs is gone."""

    def __init__(self, handle, model):
        self.handle, self.model = handle, model

    def __del__(self):
        if self.handle:
            lib.ra_run_free(self.handle)
            self.handle = None


class Model:
    """A model file (docs/reference.md, section 2), any arch the library knows.

    .arch       the "arch" of its metadata
    .meta       its __metadata__ as a dict
    .scheme     the naming scheme its tensors were found in
    .forward(**inputs) -> {"y": ..., ["attn": ...]}
    .backward(**inputs) -> {"y", "grad.x", ..., "grad.NAME", ...}
    .features(x, indices=None, layout=None, norm=None, prefix_tokens=False)
                -> {"y", "features.I", ...}: a network as a backbone
    .predict(x), .preprocess(image), .video_clips(video): a classifier's
                outputs and the inputs classify feeds it
    Inputs are named as in an INPUT file of `relattn forward`: x (or q and kv),
    mask, dy. Outputs are named as `relattn forward/backward` writes them.
    """

    def __init__(self, path, key=None, set=None, precision="fp32"):
        """path: a relattn model file, a safetensors state_dict, a PyTorch
        checkpoint (.pth, .bin, .pth.tar) or a timm / Hugging Face model
        folder. key: the state dict inside a checkpoint ("model",
        "state_dict/ema"); set: {KEY: VALUE} set over the file's or the
        inferred metadata (`relattn --set`); precision: "fp32", "bf16" or
        "int8", the arithmetic of a network's products."""
        h = ctypes.c_void_p()
        sets = [f"{k}={v}".encode() for k, v in (set or {}).items()]
        arr = (ctypes.c_char_p * max(1, len(sets)))(*sets)
        prec = lib.ra_precision_parse(str(precision).encode())
        if prec < 0:
            raise ValueError("precision %r: fp32, bf16 or int8" % (precision,))
        o = LoadOptions(key=key.encode() if key else None, set=arr, nset=len(sets),
                        precision=prec)
        check(lib.ra_model_open(ctypes.byref(h), os.fsencode(path), ctypes.byref(o)))
        self._h = h
        self.path = path
        n = lib.ra_model_meta_count(h)
        self.meta = {}
        for i in range(n):
            k = lib.ra_model_meta_key(h, i)
            self.meta[k.decode()] = lib.ra_model_meta(h, k).decode()
        self.arch = self.meta.get("arch")
        self.scheme = lib.ra_model_scheme(h).decode()
        self.precision = lib.ra_precision_name(lib.ra_model_precision(h)).decode()

    def close(self):
        if getattr(self, "_h", None):
            lib.ra_model_free(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def __repr__(self):
        return "relattn.Model(%r, arch=%r)" % (self.path, self.arch)

    def features(self, x, indices=None, layout=None, norm=None, prefix_tokens=False):
        """The feature maps of images x (B, C, H, W) (swin, swinv2, vit) or
        clips x (B, C, T, H, W) (swin3d), from the forward that also gives y:
        {"y", "features.I", ...} as `relattn forward --features` writes them
        (docs/reference.md, section 3). indices: stages (swin, swin3d) or
        blocks (vit) from 0, negative from the end, "all", or None for the
        model's default (every stage of a Swin, a SwinBackbone's
        out_indices, a ViT's last 3 blocks); layout: "nhwc", "nchw", "nlc"
        or None (NHWC for swin and swin3d, NCHW for vit and a SwinBackbone;
        a swin3d map is (B, T, H, W, C) channels last, (B, C, T, H, W)
        channels first); norm: None (the model's: a SwinBackbone's own
        norms), "none" or "final" (timm's norm=True); prefix_tokens: a ViT's
        class and register tokens too, as "features.I.prefix"."""
        o = FeaturesOptions()
        if indices == "all":
            o.all = 1
        elif indices is not None:
            idx = [indices] if isinstance(indices, int) else list(indices)
            if not 0 < len(idx) <= len(o.index):
                raise ValueError("indices: 1 to %d of them" % len(o.index))
            o.count = len(idx)
            for i, v in enumerate(idx):
                o.index[i] = int(v)
        layouts = {None: 0, "nhwc": 1, "nchw": 2, "nlc": 3}
        norms = {None: 0, "default": 0, "none": 1, "final": 2}
        if layout not in layouts:
            raise ValueError("layout %r: nhwc, nchw or nlc" % (layout,))
        if norm not in norms:
            raise ValueError("norm %r: none or final" % (norm,))
        o.layout, o.norm, o.prefix_tokens = layouts[layout], norms[norm], int(bool(prefix_tokens))
        return self._run(RUN_FEATURES, {"x": x}, o)

    def _run(self, mode, inputs, features=None):
        np = _np()
        if not self._h:
            raise ValueError("relattn.Model: closed")
        arrays = {k: _as_f32(k, v) for k, v in inputs.items()}
        names = {k: k.encode() for k in arrays}
        tensors = (Tensor * max(len(arrays), 1))()
        for i, (k, a) in enumerate(arrays.items()):
            t = tensors[i]
            t.name = names[k]
            t.ndim = a.ndim
            for d, s in enumerate(a.shape):
                t.shape[d] = s
            t.data = a.ctypes.data
        h = ctypes.c_void_p()
        if features is not None:
            check(lib.ra_run_create_features(ctypes.byref(h), self._h, ctypes.byref(features),
                                             tensors, len(arrays)))
        else:
            check(lib.ra_run_create(ctypes.byref(h), self._h, mode, tensors, len(arrays)))
        run = _Run(h, self)
        check(lib.ra_run_exec(h))
        out = {}
        for i in range(lib.ra_run_output_count(h)):
            t = lib.ra_run_output(h, i).contents
            shape = tuple(t.shape[d] for d in range(t.ndim))
            n = 1
            for s in shape:
                n *= s
            buf = (ctypes.c_float * n).from_address(t.data)
            buf._relattn_run = run  # the outputs keep the run's memory alive
            out[t.name.decode()] = np.frombuffer(buf, dtype=np.float32).reshape(shape)
        return out

    def forward(self, attn=False, **inputs):
        """Run the model: {"y"} and, with attn=True (attention layers), {"attn"}."""
        return self._run(RUN_FORWARD_ATTN if attn else RUN_FORWARD, inputs)

    def predict(self, x):
        """A classifier's outputs for images x (B, C, H, W), as relattn eval and
        classify predict: the forward's, or with metadata tta = "flip" the mean
        of the outputs for x and for x mirrored left to right."""
        np = _np()
        if not self._h:
            raise ValueError("relattn.Model: closed")
        a = _as_f32("x", x)
        y = ctypes.POINTER(ctypes.c_float)()
        nd = ctypes.c_int()
        ys = (ctypes.c_int64 * 4)()
        xs = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        check(lib.ra_model_predict(self._h, ctypes.byref(y), ctypes.byref(nd), ys, a.ctypes.data,
                                   a.ndim, xs))
        shape = tuple(ys[d] for d in range(nd.value))
        try:
            return np.ctypeslib.as_array(y, shape=shape).copy()
        finally:
            _libc.free(y)

    def transform(self):
        """The image transform `relattn classify` applies for this model: a
        one-line description and where it came from (its family's config,
        torchvision's builder, or the default)."""
        t, src = Transform(), ctypes.c_char_p()
        check(lib.ra_model_transform(ctypes.byref(t), ctypes.byref(src), self._h))
        buf = ctypes.create_string_buffer(512)
        lib.ra_transform_describe(buf, len(buf), ctypes.byref(t))
        return buf.value.decode(), src.value.decode()

    def preprocess(self, image_path):
        """The input `relattn classify` feeds the model for an image file (PNG
        or JPEG, at most 64 megapixels): (1, C, H, W) float32, through the
        family's transform (Model.transform()), grey models given the luma."""
        np = _np()
        t = Transform()
        check(lib.ra_model_transform(ctypes.byref(t), None, self._h))
        px, w, h, ow, oh = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), \
            ctypes.c_int()
        check(lib.ra_image_load_u8(ctypes.byref(px), ctypes.byref(w), ctypes.byref(h),
                                   os.fsencode(image_path), 64 << 20))
        try:
            check(lib.ra_transform_size(ctypes.byref(t), w, h, ctypes.byref(ow), ctypes.byref(oh)))
            out = np.empty((1 if t.grey else 3, oh.value, ow.value), dtype=np.float32)
            check(lib.ra_transform_apply(out.ctypes.data, ctypes.byref(t), px, w, h))
        finally:
            _libc.free(px)
        return out[None]

    def video_clips(self, video_path, clips=None, crops=None, clip_len=None,
                    frame_interval=None):
        """The input `relattn classify` feeds a video model (swin3d) for a
        video file or a folder of frames: (views, 3, T, S, S) float32, views =
        crops x clips, crop-major (view = crop * clips + clip), each clip
        sampled and its frames transformed as the family's test pipeline
        (the official Video Swin test's or torchvision's Kinetics-400
        evaluation: docs/reference.md, "Videos"); clips, crops (1 or 3),
        clip_len and frame_interval as classify's --clips, --crops,
        --clip-len, --frame-interval. classify's probabilities are the mean
        over the views of the softmax of Model.predict(x)."""
        np = _np()
        if not self._h:
            raise ValueError("relattn.Model: closed")
        cs, vt = ClipSpec(), VideoTransform()
        check(lib.ra_model_video_transform(ctypes.byref(cs), ctypes.byref(vt), None, self._h))
        for name, value, lo, hi in (("clips", clips, 1, 1024), ("clip_len", clip_len, 1, 4096),
                                    ("frame_interval", frame_interval, 1, 4096),
                                    ("crops", crops, 1, 3)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi \
                    or (name == "crops" and value == 2):
                raise ValueError("%s=%r: need %s" % (name, value, "1 or 3" if name == "crops"
                                                      else "an integer in %d..%d" % (lo, hi)))
            if name == "crops":
                vt.crops = value
            else:
                setattr(cs, name, value)
        v = ctypes.c_void_p()
        check(lib.ra_video_open(ctypes.byref(v), os.fsencode(video_path), None))
        x = ctypes.POINTER(ctypes.c_float)()
        shape = (ctypes.c_int64 * 5)()
        try:
            check(lib.ra_video_clips(ctypes.byref(x), shape, v, ctypes.byref(cs),
                                     ctypes.byref(vt)))
        finally:
            lib.ra_video_free(v)
        try:
            return np.ctypeslib.as_array(x, shape=tuple(shape)).copy()
        finally:
            _libc.free(x)

    def backward(self, **inputs):
        """The gradients for dy: {"y", "grad.x" (or "grad.q", "grad.kv"), "grad.NAME"...}."""
        return self._run(RUN_BACKWARD, inputs)

