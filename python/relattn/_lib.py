"""The shared library librelattn through ctypes: where it is found, and the
signatures of the calls the package makes.

The library is looked for, in this order:
  1. the file named by the environment variable RELATTN_LIBRARY;
  2. the build tree this package sits in (python/../build/librelattn.so,
     where the README's build puts it);
  3. the library `pip install ./python` recorded when it installed the
     package (relattn/_built_with.py), if that file still exists;
  4. an installed prefix: the dynamic linker's search (ldconfig, as
     ctypes.util.find_library sees it), then sys.prefix/lib and /usr/local/lib.
"""

import ctypes
import ctypes.util
import os
import sys

MAX_DIMS = 8  # RA_ST_MAX_DIMS


class Tensor(ctypes.Structure):
    """ra_tensor: a name, a shape and float32 data."""
    _fields_ = [("name", ctypes.c_char_p), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("data", ctypes.c_void_p)]


class StTensor(ctypes.Structure):
    """ra_st_tensor: a tensor of a safetensors file."""
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("numel", ctypes.c_int64),
                ("data", ctypes.c_void_p), ("nbytes", ctypes.c_size_t)]


class WindowGeom(ctypes.Structure):
    """ra_window_spec."""
    _fields_ = [(n, ctypes.c_int) for n in ("d", "h", "w", "wd", "wh", "ww", "sd", "sh", "sw")]


class AttnDesc(ctypes.Structure):
    """ra_attn_desc, field for field (relattn.h, section 3)."""
    _fields_ = [("b_", ctypes.c_int), ("nh", ctypes.c_int), ("n1", ctypes.c_int),
                ("n2", ctypes.c_int), ("hd", ctypes.c_int), ("scale", ctypes.c_float),
                ("table", ctypes.c_void_p), ("idx", ctypes.c_void_p),
                ("table_rows", ctypes.c_int64), ("mask", ctypes.c_void_p),
                ("nw", ctypes.c_int), ("w0", ctypes.c_int),
                ("rel_k", ctypes.c_void_p), ("rel_v", ctypes.c_void_p),
                ("rel", ctypes.c_void_p), ("rel_ld", ctypes.c_int64), ("r", ctypes.c_int),
                ("rel2", ctypes.c_void_p), ("precision", ctypes.c_int),
                ("regions", ctypes.c_void_p)]


def _candidates():
    env = os.environ.get("RELATTN_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.join(here, os.pardir, os.pardir, "build", "librelattn.so")]
    try:
        from ._built_with import LIBRARY
        found.append(LIBRARY)
    except ImportError:
        pass
    name = ctypes.util.find_library("relattn")
    if name:
        found.append(name)
    for prefix in (sys.prefix, "/usr/local"):
        found.append(os.path.join(prefix, "lib", "librelattn.so"))
    return found


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("relattn: cannot find the shared library librelattn.so; build it "
                      "(README: cmake -S . -B build && cmake --build build) or set "
                      "RELATTN_LIBRARY to its path. Tried: " + ", ".join(tried))


lib, path = _load()

_P = ctypes.c_void_p
_I = ctypes.c_int
_I64 = ctypes.c_int64
_S = ctypes.c_char_p


def _sig(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)


_sig("ra_status_str", _S, _I)
_sig("ra_last_error", _S)
_sig("ra_version", _S)
_sig("ra_blas_info", _S)
_sig("ra_kernel_current", _I)
_sig("ra_kernel_name", _S, _I)
_sig("ra_threads_get", _I)
_sig("ra_threads_set", None, _I)
_sig("ra_relpos_index_2d", _I, _P, _I, _I, ctypes.POINTER(_I64))
_sig("ra_relpos_index_3d", _I, _P, _I, _I, _I, _I, ctypes.POINTER(_I64))
_sig("ra_relpos_index_clip", _I, _P, _I, _I)
_sig("ra_window_count", _I64, ctypes.POINTER(WindowGeom))
_sig("ra_window_tokens", _I64, ctypes.POINTER(WindowGeom))
_sig("ra_window_mask", _I, _P, ctypes.POINTER(WindowGeom))
_sig("ra_st_open", _I, ctypes.POINTER(_P), _S)
_sig("ra_st_close", None, _P)
_sig("ra_st_count", _I, _P)
_sig("ra_st_at", ctypes.POINTER(StTensor), _P, _I)
_sig("ra_st_meta_count", _I, _P)
_sig("ra_st_meta_key", _S, _P, _I)
_sig("ra_st_meta", _S, _P, _S)
_sig("ra_st_read_f32", _I, _P, _P, ctypes.POINTER(StTensor))
_sig("ra_st_read_i64", _I, _P, _P, ctypes.POINTER(StTensor))
_sig("ra_model_load", _I, ctypes.POINTER(_P), _S)


class LoadOptions(ctypes.Structure):
    """ra_load_options: how ra_model_open reads a model path."""
    _fields_ = [("key", ctypes.c_char_p), ("set", ctypes.POINTER(ctypes.c_char_p)),
                ("nset", ctypes.c_int), ("precision", ctypes.c_int),
                ("reserved", ctypes.c_int * 7)]


_sig("ra_model_open", _I, ctypes.POINTER(_P), _S, ctypes.POINTER(LoadOptions))
_sig("ra_precision_parse", _I, _S)
_sig("ra_precision_name", _S, _I)
_sig("ra_model_precision", _I, _P)
_sig("ra_model_free", None, _P)
_sig("ra_model_meta_count", _I, _P)
_sig("ra_model_meta_key", _S, _P, _I)
_sig("ra_model_meta", _S, _P, _S)
_sig("ra_model_scheme", _S, _P)
_sig("ra_model_arch_count", _I)
_sig("ra_model_arch_name", _S, _I)
_sig("ra_model_predict", _I, _P, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
     ctypes.POINTER(_I), ctypes.POINTER(_I64), _P, _I, ctypes.POINTER(_I64))


class Transform(ctypes.Structure):
    """ra_transform: an image's evaluation transform (relattn.h, section 14)."""
    _fields_ = [("resize", ctypes.c_int), ("resize_h", ctypes.c_int), ("resize_w", ctypes.c_int),
                ("interp", ctypes.c_int), ("crop", ctypes.c_int), ("crop_h", ctypes.c_int),
                ("crop_w", ctypes.c_int), ("rescale", ctypes.c_double),
                ("normalize", ctypes.c_int), ("mean", ctypes.c_float * 3),
                ("std", ctypes.c_float * 3), ("grey", ctypes.c_int), ("fill", ctypes.c_uint8 * 3)]


_sig("ra_model_transform", _I, ctypes.POINTER(Transform), ctypes.POINTER(ctypes.c_char_p), _P)
_sig("ra_transform_describe", _I, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(Transform))
_sig("ra_transform_size", _I, ctypes.POINTER(Transform), _I, _I, ctypes.POINTER(_I),
     ctypes.POINTER(_I))
_sig("ra_transform_apply", _I, _P, ctypes.POINTER(Transform), _P, _I, _I)


class ImageFolder(ctypes.Structure):
    """ra_image_folder: an image folder's listing (relattn.h, section 15)."""
    _fields_ = [("n", ctypes.c_int64), ("classes", ctypes.c_int), ("paths", ctypes.c_void_p),
                ("labels", ctypes.c_void_p), ("class_names", ctypes.c_void_p)]


class Dataset(ctypes.Structure):
    """ra_dataset: labelled images held in memory (relattn.h, section 15)."""
    _fields_ = [("n", ctypes.c_int64), ("h", ctypes.c_int), ("w", ctypes.c_int),
                ("classes", ctypes.c_int), ("images", ctypes.c_void_p),
                ("labels", ctypes.c_void_p), ("c", ctypes.c_int)]


_sig("ra_image_folder_scan", _I, ctypes.POINTER(ImageFolder), _S)
_sig("ra_image_folder_free", None, ctypes.POINTER(ImageFolder))
_sig("ra_dataset_from_folder", _I, ctypes.POINTER(Dataset), ctypes.POINTER(ImageFolder), _P,
     _I64, _I, _I, _P)
_sig("ra_dataset_free", None, ctypes.POINTER(Dataset))
_sig("ra_image_resize_u8", _I, _P, _I, _I, _P, _I, _I, _I, _I)
_sig("ra_image_load_u8", _I, ctypes.POINTER(_P), ctypes.POINTER(_I), ctypes.POINTER(_I), _S,
     _I64)


class Rng(ctypes.Structure):
    """ra_rng: the seeded generator (relattn.h, section 8)."""
    _fields_ = [("s", ctypes.c_uint64 * 4)]


class RandAugment(ctypes.Structure):
    """ra_randaugment: timm's RandAugment policy (relattn.h, section 14)."""
    _fields_ = [("layers", ctypes.c_int), ("magnitude", ctypes.c_double),
                ("magnitude_std", ctypes.c_double), ("magnitude_max", ctypes.c_double),
                ("prob", ctypes.c_double), ("increasing", ctypes.c_int),
                ("translate_pct", ctypes.c_double), ("interp", ctypes.c_int),
                ("fill", ctypes.c_uint8 * 3)]


class AugStep(ctypes.Structure):
    """ra_aug_step: one layer of a RandAugment draw."""
    _fields_ = [("op", ctypes.c_int), ("applied", ctypes.c_int),
                ("magnitude", ctypes.c_double), ("arg", ctypes.c_double)]


_sig("ra_rng_seed", None, ctypes.POINTER(Rng), ctypes.c_uint64)
_sig("ra_aug_op_name", _S, _I)
_sig("ra_augment_op", _I, _P, _P, _I, _I, _I, _I, ctypes.c_double, _I, _P)
_sig("ra_randaugment_parse", _I, ctypes.POINTER(RandAugment), _S)
_sig("ra_randaugment_draw", _I, ctypes.POINTER(AugStep), _I, _I, ctypes.POINTER(RandAugment),
     ctypes.POINTER(Rng))
_sig("ra_randaugment_apply", _I, _P, _P, _I, _I, _I, ctypes.POINTER(RandAugment),
     ctypes.POINTER(Rng))
_sig("ra_run_create", _I, ctypes.POINTER(_P), _P, _I, ctypes.POINTER(Tensor), _I)


class FeaturesOptions(ctypes.Structure):
    """ra_features_options."""
    _fields_ = [("all", ctypes.c_int), ("count", ctypes.c_int), ("index", ctypes.c_int * 64),
                ("layout", ctypes.c_int), ("norm", ctypes.c_int), ("prefix_tokens", ctypes.c_int)]


_sig("ra_run_create_features", _I, ctypes.POINTER(_P), _P, ctypes.POINTER(FeaturesOptions),
     ctypes.POINTER(Tensor), _I)
_sig("ra_run_exec", _I, _P)
_sig("ra_run_output_count", _I, _P)
_sig("ra_run_output", ctypes.POINTER(Tensor), _P, _I)
_sig("ra_run_free", None, _P)
_sig("ra_attention_workspace_size", ctypes.c_size_t, ctypes.POINTER(AttnDesc), _I)
_sig("ra_attention_backward_workspace_size", ctypes.c_size_t, ctypes.POINTER(AttnDesc), _I)
_sig("ra_attention_forward", _I, _P, _I, _P, _P, _I, _P, _I, _P, _I,
     ctypes.POINTER(AttnDesc), _P, ctypes.c_size_t)
_sig("ra_attention_backward", _I, _P, _I, _P, _I, _P, _I, _P, _P, _P, _P, _I, _P, _I, _P, _I,
     _P, _I, ctypes.POINTER(AttnDesc), _P, ctypes.c_size_t)


class RelattnError(Exception):
    """A failure of the library: str() is its one-line reason (ra_last_error),
    .status the ra_status code and .status_text its name."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.status_text = lib.ra_status_str(status).decode()


def check(status):
    """Raise RelattnError for a failing ra_status (< 0), with the reason."""
    if status != 0:
        why = lib.ra_last_error().decode("utf-8", "replace")
        raise RelattnError(status, why or lib.ra_status_str(status).decode())


class VideoTransform(ctypes.Structure):
    """ra_video_transform: a video's frames (relattn.h, section 14)."""
    _fields_ = [("frame", Transform), ("size_round", _I), ("crops", _I)]


class ClipSpec(ctypes.Structure):
    """ra_clip_spec: the clips of a video (relattn.h, section 14)."""
    _fields_ = [("sampler", _I), ("clips", _I), ("clip_len", _I), ("frame_interval", _I),
                ("frame_rate", ctypes.c_double)]


_sig("ra_model_video_transform", _I, ctypes.POINTER(ClipSpec), ctypes.POINTER(VideoTransform),
     ctypes.POINTER(ctypes.c_char_p), _P)
_sig("ra_video_open", _I, ctypes.POINTER(_P), _S, _P)
_sig("ra_video_clips", _I, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
     ctypes.POINTER(_I64), _P, ctypes.POINTER(ClipSpec), ctypes.POINTER(VideoTransform))
_sig("ra_video_free", None, _P)


class LoaderConfig(ctypes.Structure):
    """ra_loader_config: an image folder's batches (relattn.h, section 15)."""
    _fields_ = [("train", _I), ("random_crop", _I), ("shuffle", _I), ("size", _I),
                ("batch", _I), ("seed", ctypes.c_uint64),
                ("scale", ctypes.c_double * 2), ("ratio", ctypes.c_double * 2), ("interp", _I),
                ("hflip", ctypes.c_double), ("randaugment", _I), ("ra", RandAugment),
                ("reprob", ctypes.c_double), ("mean", ctypes.c_float * 3),
                ("std", ctypes.c_float * 3), ("eval", Transform), ("workers", _I),
                ("depth", _I), ("skip_bad", _I), ("max_pixels", _I64),
                ("clip_len", _I), ("frame_interval", _I), ("short_side", _I),
                ("video_eval", VideoTransform)]


_sig("ra_loader_config_default", LoaderConfig)
_sig("ra_loader_create", _I, ctypes.POINTER(_P), ctypes.POINTER(ImageFolder), _P, _I64,
     ctypes.POINTER(LoaderConfig))
_sig("ra_loader_free", None, _P)
_sig("ra_loader_batch", _I, _P, _I64, _P, _P, _P, ctypes.POINTER(_I))
_sig("ra_loader_batches", _I64, _P)
_sig("ra_loader_skipped", _I64, _P)
_sig("ra_random_resized_crop", None, _I, _I, ctypes.POINTER(ctypes.c_double),
     ctypes.POINTER(ctypes.c_double), ctypes.POINTER(Rng), ctypes.POINTER(_I))
_sig("ra_random_erasing", _I, _P, _I, _I, _I, ctypes.c_double, ctypes.POINTER(Rng),
     ctypes.POINTER(_I))
