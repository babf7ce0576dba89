"""The PyTorch twin of `relattn train`: a small Swin trained on Fashion-MNIST
with the same architecture and recipe, for the accuracy and speed comparison.

    OPENBLAS_NUM_THREADS=T /usr/bin/python3 tools/train_twin.py --threads T [--json]
        [--epochs 13] [--max-steps N] [--time-budget S] [--seed 0] [--data DIR]
        [--embed-dim 64] [--depths 2,2] [--heads 2,4] [--window 7] [--patch 4] [--patch-kernel K]
        [--pos none|abs|relbias|relbias+abs] [--lr 3e-3] [--batch 128] ...
    OPENBLAS_NUM_THREADS=T /usr/bin/python3 tools/train_twin.py --threads T \
        --bench-steps 30 [--bench-data real|random]

The model is tools/swin_twin.py's SwinTransformer (the twin of src/swin.c);
RECIPE below is the single source of every default, each one a command-line
option. Run with Debian's python3-torch (/usr/bin/python3).

Threads: torch.set_num_threads(T) sizes PyTorch's OpenMP pool only; the
products run in OpenBLAS's own pool, which reads OPENBLAS_NUM_THREADS when
torch is loaded. Set OPENBLAS_NUM_THREADS=T as well; if it is unset, this
script sets it from --threads before importing torch (as bench/bench_torch.py
does), and it warns if it is set to another number.

BLAS kernels: the JSON reports OpenBLAS's kernel set (blas_core, from
openblas_get_corename, as bench/bench.c prints it). OpenBLAS 0.3.21 does not
know every recent CPU and then falls back to its Prescott (SSE3) kernels,
which leave AVX-512 unused: set OPENBLAS_CORETYPE (SkylakeX there) and quote
the kernel set with every number. PyTorch's OpenMP pool and OpenBLAS's are
separate: as many threads in each as there are cores compete for them, and
fewer can be faster.

What the C side must do the same way (or knowingly differently):

  data      the idx files, pixel/255, then (x - 0.2860) / 0.3530. Training
            batches: every epoch a new permutation of the 60000 images
            (torch.randperm on the data generator), consecutive slices of
            --batch images, the last incomplete batch dropped (--last-batch
            drop: 468 steps per epoch at 128; 'keep' runs it as a short batch).
  augment   on the batch of [0, 1] pixels, before normalisation, per image:
            top, left uniform in {0..2*pad} (RandomCrop(28, padding=2) with
            zero fill: the crop of the zero-padded 32x32 image at (top, left)),
            then a horizontal flip with probability 0.5. The draws per batch,
            in this order: top[B], left[B] (torch.randint(0, 2*pad+1)), then
            flip[B] (torch.rand < 0.5), all on the data generator (seeded with
            --seed, separate from the model's initialisation RNG).
  model     SwinTransformer(img 28, patch 4, 1 channel, 10 classes, embed 64,
            depths (2,2), heads (2,4), window 7, mlp 4, qkv_bias, patch_norm,
            no dropout, exact GELU, LayerNorm eps 1e-5). Initialisation as the
            official Swin: Linear weights (qkv, proj, fc1, fc2, reduction,
            head) trunc_normal(std .02, bounds +-2 absolute) and zero biases;
            LayerNorm 1/0; relative_position_bias_table and absolute_pos_embed
            trunc_normal(std .02, +-2); the patch-embedding Conv2d keeps
            PyTorch's default (kaiming_uniform a=sqrt(5): U(+-1/sqrt(fan_in))
            for weight and bias). --pos none: the tables are zeroed and
            frozen (not in the optimiser), which is the same function as no
            bias term.
  loss      cross-entropy with label smoothing 0.1:
            (1 - 0.1) * nll + 0.1 * mean_c(-log p_c), mean over the batch.
  clip      torch.nn.utils.clip_grad_norm_(all parameters, 5.0): one global
            L2 norm; grads scaled by 5 / (norm + 1e-6) when that is < 1.
  optimiser AdamW (decoupled: p -= lr * wd * p, then the Adam step), betas
            (0.9, 0.999), eps 1e-8; weight decay 0.05 on every tensor with
            2+ dimensions except relative_position_bias_table and
            absolute_pos_embed (Swin's set_weight_decay); 0 on biases,
            LayerNorm weights and every other 1-D tensor.
  schedule  per step, t = 0-based index of the step (the lr used BY step t):
            warmup = --warmup-epochs (0.5) of steps, total = epochs * steps per epoch,
            t < warmup: warmup_lr + t * (lr - warmup_lr) / warmup,
            else min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * (t - warmup) /
            (total - warmup))). (The official Swin loop applies lr(t - 1) at
            step t because it calls step_update after the step; this twin
            uses lr(t).) --max-steps and --time-budget stop early without
            changing this schedule.
  evaluate  the 10000 test images, no augmentation (with --tta flip, the
            default when the run flips, the mean of the outputs for each image
            and its mirror, as relattn's), at the end of every
            epoch and at the end of training (once if the two coincide).
"""
import argparse
import json
import math
import os
import sys
import time

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree

# The single source of the twin's defaults (the recipe of `relattn train`).
RECIPE = {
    "data": "/usr/share/datasets/fashion-mnist",
    "mean": 0.2860, "std": 0.3530,
    "crop_padding": 0, "flip_p": 0.5,
    "img_size": 28, "patch": 4, "patch_kernel": None, "in_chans": 1, "num_classes": 10,
    "embed_dim": 64, "depths": (2, 2), "heads": (2, 4), "window": 7, "mlp_ratio": 4.0,
    "qkv_bias": True, "patch_norm": True, "pos": "relbias",
    "lr": 3e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.05,
    "batch": 128, "label_smoothing": 0.1, "clip_grad": 5.0,
    "warmup_epochs": 0.5, "warmup_lr": 1e-6, "min_lr": 1e-5,
    "epochs": 13, "last_batch": "drop",
    "seed": 0, "eval_batch": 1000, "ema": 0.0,
    "tta": None,   # relattn train's default: flip when the run flips its images
}


def _early_threads(argv):
    """--threads N from the command line, before torch is imported."""
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return None


_T = _early_threads(sys.argv[1:])
if _T and "OPENBLAS_NUM_THREADS" not in os.environ:
    os.environ["OPENBLAS_NUM_THREADS"] = _T

import gzip  # noqa: E402
import struct  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swin_twin import SwinTransformer  # noqa: E402


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# BLAS: the library torch runs its products on, as bench/bench.c prints it
# --------------------------------------------------------------------------

def openblas():
    """The OpenBLAS that this process has loaded (through torch), or None
    (bench/bench_torch.py resizes its thread pool through it)."""
    import ctypes
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if ("blas" in p.lower()) and p.startswith("/") and p not in paths:
                    paths.append(p)
    except OSError:
        pass
    for p in paths + ["libopenblas.so.0", "libblas.so.3"]:
        try:
            lib = ctypes.CDLL(p)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            return lib
        except (OSError, AttributeError):
            continue
    return None


def blas_info():
    lib = openblas()
    info = {"blas_coretype_env": os.environ.get("OPENBLAS_CORETYPE", "unset"),
            "openblas_num_threads_env": os.environ.get("OPENBLAS_NUM_THREADS", "unset")}
    if lib is None:
        info["blas"] = "unknown (no OpenBLAS found)"
        return info
    info["blas"] = lib.openblas_get_config().decode()
    info["blas_core"] = lib.openblas_get_corename().decode()
    try:
        info["blas_threads"] = int(lib.openblas_get_num_threads())
    except AttributeError:
        pass
    return info


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------

def read_idx(path, magic, ndim):
    """An idx file (gzip or plain) as a uint8 array, its header checked."""
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    if len(data) < 4 + 4 * ndim:
        raise ValueError("%s: %d bytes, too short for an idx header" % (path, len(data)))
    got = struct.unpack(">I", data[:4])[0]
    if got != magic:
        raise ValueError("%s: magic 0x%08x, expected 0x%08x" % (path, got, magic))
    dims = struct.unpack(">%dI" % ndim, data[4:4 + 4 * ndim])
    n = int(np.prod(dims))
    if len(data) != 4 + 4 * ndim + n:
        raise ValueError("%s: %d bytes of data, the header %s says %d"
                         % (path, len(data) - 4 - 4 * ndim, dims, n))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_split(data_dir, split, img_size, num_classes):
    def find(stem):
        for name in (stem + ".gz", stem):
            p = os.path.join(data_dir, name)
            if os.path.exists(p):
                return p
        raise FileNotFoundError("%s/%s(.gz) is missing" % (data_dir, stem))
    x = read_idx(find("%s-images-idx3-ubyte" % split), 0x00000803, 3)
    y = read_idx(find("%s-labels-idx1-ubyte" % split), 0x00000801, 1)
    if x.shape[0] != y.shape[0]:
        raise ValueError("%s: %d images but %d labels" % (split, x.shape[0], y.shape[0]))
    if x.shape[1:] != (img_size, img_size):
        raise ValueError("%s: images %dx%d, expected %dx%d" % (split, x.shape[1], x.shape[2],
                                                              img_size, img_size))
    if y.size and int(y.max()) >= num_classes:
        raise ValueError("%s: label %d >= %d classes" % (split, int(y.max()), num_classes))
    return torch.from_numpy(x.copy()), torch.from_numpy(y.astype(np.int64))


def normalise(x01, a):
    return (x01 - a.mean) / a.std


def augment(x01, gen, pad, flip_p):
    """RandomCrop(H, padding=pad, fill 0) then RandomHorizontalFlip(flip_p) on
    a batch (B, H, W) of [0, 1] pixels, one draw per image: top[B], left[B],
    flip[B] in this order on gen."""
    B, H, W = x01.shape
    top = torch.randint(0, 2 * pad + 1, (B,), generator=gen)
    left = torch.randint(0, 2 * pad + 1, (B,), generator=gen)
    flip = torch.rand(B, generator=gen) < flip_p
    xp = F.pad(x01, (pad, pad, pad, pad))                      # (B, H+2p, W+2p), zeros
    rows = top[:, None] + torch.arange(H)                      # (B, H)
    cols = left[:, None] + torch.arange(W)                     # (B, W)
    cols = torch.where(flip[:, None], cols.flip(1), cols)      # flip = read columns backwards
    b = torch.arange(B)[:, None, None]
    return xp[b, rows[:, :, None], cols[:, None, :]]


def train_batch(xs_u8, idx, gen, a):
    x01 = xs_u8[idx].float() / 255.0
    if a.crop_padding > 0 or a.flip_p > 0:
        x01 = augment(x01, gen, a.crop_padding, a.flip_p)
    return normalise(x01, a).unsqueeze(1)


# --------------------------------------------------------------------------
# Model, optimiser, schedule
# --------------------------------------------------------------------------

def build_model(a):
    use_rel = a.pos in ("relbias", "relbias+abs")
    use_abs = a.pos in ("abs", "relbias+abs")
    model = SwinTransformer(img_size=a.img_size, patch_size=a.patch, in_chans=a.in_chans,
                            num_classes=a.num_classes, embed_dim=a.embed_dim,
                            depths=tuple(a.depths), num_heads=tuple(a.heads),
                            window_size=a.window, mlp_ratio=a.mlp_ratio, qkv_bias=a.qkv_bias,
                            ape=use_abs, patch_norm=a.patch_norm, patch_kernel=a.patch_kernel)
    for name, p in model.named_parameters():
        if name.endswith("relative_position_bias_table"):
            with torch.no_grad():
                if use_rel:   # the official init (tools/common.py's WindowAttention bounds it at +-2 std)
                    nn.init.trunc_normal_(p, std=.02)
                else:         # no relative position bias: zero and frozen
                    p.zero_()
            p.requires_grad_(use_rel)
    return model


def param_groups(model, wd):
    """Swin's set_weight_decay: no decay for 1-D tensors, biases, the bias
    tables and the absolute position embedding."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if (p.ndim == 1 or name.endswith(".bias") or name == "absolute_pos_embed"
                or "relative_position_bias_table" in name):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def lr_at(t, a, warmup, total):
    """timm CosineLRScheduler with warmup_prefix, per step (t 0-based)."""
    if t < warmup:
        return a.warmup_lr + t * (a.lr - a.warmup_lr) / warmup
    span = max(total - warmup, 1)
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * min(t - warmup, span)
                                                               / span))


def make_average(model, a):
    """--ema D: avg += (1 - D) (w - avg) after every step, from avg = w (as
    src/train/train.c does); swap() exchanges it with the weights in place
    (evaluate between two swaps). None when D is 0."""
    if not a.ema:
        return None
    params = [p for p in model.parameters() if p.requires_grad]
    avg = [p.detach().clone() for p in params]
    alpha = float(torch.tensor(1.0 - a.ema, dtype=torch.float32))

    @torch.no_grad()
    def update():
        for q, p in zip(avg, params):
            q.add_(p - q, alpha=alpha)

    @torch.no_grad()
    def swap():
        for q, p in zip(avg, params):
            t = p.detach().clone()
            p.copy_(q)
            q.copy_(t)
    return update, swap


def make_step(model, opt, crit, a):
    params = [p for p in model.parameters() if p.requires_grad]

    def step(x, y, lr):
        for g in opt.param_groups:
            g["lr"] = lr
        out = model(x)
        loss = crit(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip_grad)
        opt.step()
        return loss.item()
    return step


@torch.no_grad()
def evaluate(model, xs_u8, ys, a):
    model.eval()
    correct = 0
    for i in range(0, xs_u8.shape[0], a.eval_batch):
        x = normalise(xs_u8[i:i + a.eval_batch].float() / 255.0, a).unsqueeze(1)
        y = model(x)
        if a.tta == "flip":   # relattn's tta = flip: the mean over the image and its mirror
            y = 0.5 * (y + model(x.flip(-1)))
        correct += int((y.argmax(-1) == ys[i:i + a.eval_batch]).sum())
    model.train()
    return correct / xs_u8.shape[0]


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def ints(s):
    v = tuple(int(t) for t in s.split(",") if t.strip())
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive integers: %r" % s)
    return v


def parse_args(argv=None):
    R = RECIPE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--data", default=R["data"], help="directory of the Fashion-MNIST idx files")
    ap.add_argument("--mean", type=float, default=R["mean"])
    ap.add_argument("--std", type=float, default=R["std"])
    ap.add_argument("--crop-padding", type=int, default=R["crop_padding"],
                    help="RandomCrop padding (0: no crop)")
    ap.add_argument("--flip-p", type=float, default=R["flip_p"], help="horizontal flip probability")
    ap.add_argument("--img-size", type=int, default=R["img_size"])
    ap.add_argument("--in-chans", type=int, default=R["in_chans"])
    ap.add_argument("--num-classes", type=int, default=R["num_classes"])
    ap.add_argument("--patch", type=int, default=R["patch"])
    ap.add_argument("--patch-kernel", type=int, default=R["patch_kernel"],
                    help="overlapping embedding: Conv2d(K, stride patch, padding (K - patch) / 2)")
    ap.add_argument("--embed-dim", type=int, default=R["embed_dim"])
    ap.add_argument("--depths", type=ints, default=R["depths"])
    ap.add_argument("--heads", type=ints, default=R["heads"])
    ap.add_argument("--window", type=int, default=R["window"])
    ap.add_argument("--mlp-ratio", type=float, default=R["mlp_ratio"])
    ap.add_argument("--no-qkv-bias", dest="qkv_bias", action="store_false")
    ap.add_argument("--no-patch-norm", dest="patch_norm", action="store_false")
    ap.add_argument("--pos", choices=("none", "abs", "relbias", "relbias+abs"), default=R["pos"])
    ap.add_argument("--lr", type=float, default=R["lr"])
    ap.add_argument("--betas", type=float, nargs=2, default=R["betas"])
    ap.add_argument("--eps", type=float, default=R["eps"])
    ap.add_argument("--weight-decay", type=float, default=R["weight_decay"])
    ap.add_argument("--batch", type=int, default=R["batch"])
    ap.add_argument("--label-smoothing", type=float, default=R["label_smoothing"])
    ap.add_argument("--clip-grad", type=float, default=R["clip_grad"], help="0: no clipping")
    ap.add_argument("--warmup-epochs", type=float, default=R["warmup_epochs"])
    ap.add_argument("--warmup-lr", type=float, default=R["warmup_lr"])
    ap.add_argument("--min-lr", type=float, default=R["min_lr"])
    ap.add_argument("--epochs", type=int, default=R["epochs"])
    ap.add_argument("--last-batch", choices=("drop", "keep"), default=R["last_batch"])
    ap.add_argument("--max-steps", type=int, default=0,
                    help="stop after N steps (the schedule stays that of --epochs)")
    ap.add_argument("--time-budget", type=float, default=0,
                    help="stop training after S training seconds (schedule of --epochs)")
    ap.add_argument("--seed", type=int, default=R["seed"])
    ap.add_argument("--ema", type=float, default=R["ema"],
                    help="evaluate an exponential moving average of the weights (0: off)")
    ap.add_argument("--tta", choices=("flip", "none"), default=R["tta"],
                    help="test-time flips as relattn train's --tta (default: flip when "
                         "the run flips its images)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads(T); also set OPENBLAS_NUM_THREADS=T")
    ap.add_argument("--eval-batch", type=int, default=R["eval_batch"])
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--json", action="store_true", help="JSON lines on stdout")
    ap.add_argument("--bench-steps", type=int, default=0,
                    help="speed only: time N training steps after 3 warm-up steps")
    ap.add_argument("--bench-data", choices=("real", "random"), default="real")
    a = ap.parse_args(argv)
    if len(a.heads) != len(a.depths):
        ap.error("--heads has %d stages, --depths %d" % (len(a.heads), len(a.depths)))
    if a.batch < 1 or a.epochs < 1 or a.eval_batch < 1:
        ap.error("--batch, --epochs and --eval-batch must be positive")
    if a.std <= 0:
        ap.error("--std must be positive")
    if a.tta is None:
        a.tta = "flip" if a.flip_p > 0 else "none"
    return a


def setup_threads(a):
    if a.threads is not None:
        if a.threads < 1:
            sys.exit("--threads must be positive")
        torch.set_num_threads(a.threads)
        env = os.environ.get("OPENBLAS_NUM_THREADS")
        if env != str(a.threads):
            log("warning: OPENBLAS_NUM_THREADS=%s but --threads %d: OpenBLAS's pool (where the "
                "products run) is not sized by torch.set_num_threads; set "
                "OPENBLAS_NUM_THREADS=%d" % (env, a.threads, a.threads))


def run_info(a):
    info = {"threads": torch.get_num_threads(), "torch": torch.__version__}
    info.update(blas_info())
    return info


def model_summary(model):
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return "%d trainable parameters" % n


def bench(a, model, step):
    B = a.batch
    gen = torch.Generator().manual_seed(a.seed)
    if a.bench_data == "real":
        xs, ys = load_split(a.data, "train", a.img_size, a.num_classes)
        perm = torch.randperm(xs.shape[0], generator=gen)
    else:
        x_rand = torch.randn(B, a.in_chans, a.img_size, a.img_size, generator=gen)
        y_rand = torch.randint(0, a.num_classes, (B,), generator=gen)

    def batch(i):
        if a.bench_data == "random":
            return x_rand, y_rand
        j = (i * B) % (xs.shape[0] - B + 1)
        idx = perm[j:j + B]
        return train_batch(xs, idx, gen, a), ys[idx]

    for i in range(3):
        x, y = batch(i)
        step(x, y, a.lr)
    times = []
    t_all = time.perf_counter()
    for i in range(a.bench_steps):
        t0 = time.perf_counter()
        x, y = batch(3 + i)   # the batch (and its augmentation) is part of the step
        step(x, y, a.lr)
        times.append(time.perf_counter() - t0)
    total = time.perf_counter() - t_all
    times.sort()
    med = times[len(times) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1]
                                                               + times[len(times) // 2])
    res = {"mode": "bench", "bench_steps": a.bench_steps, "batch": B, "data": a.bench_data,
           "images_per_second": a.bench_steps * B / total,
           "images_per_second_median_step": B / med,
           "seconds_per_step_median": med, "seconds": total}
    res.update(run_info(a))
    try:
        with open("/proc/loadavg") as f:
            res["loadavg"] = f.read().split()[0]
    except OSError:
        pass
    print(json.dumps(res), flush=True)
    log("bench: %d steps of %d images: %.1f images/s (median step %.1f ms: %.1f images/s), "
        "%d threads, BLAS core %s" % (a.bench_steps, B, res["images_per_second"], 1e3 * med,
                                      B / med, res["threads"], res.get("blas_core", "?")))


def main(argv=None):
    a = parse_args(argv)
    setup_threads(a)
    torch.manual_seed(a.seed)
    model = build_model(a)
    model.train()
    opt = torch.optim.AdamW(param_groups(model, a.weight_decay), lr=a.lr,
                            betas=tuple(a.betas), eps=a.eps)
    crit = nn.CrossEntropyLoss(label_smoothing=a.label_smoothing)
    step = make_step(model, opt, crit, a)
    average = make_average(model, a)
    info = run_info(a)
    log("train_twin: torch %s, %d threads, OpenBLAS core %s (OPENBLAS_CORETYPE=%s, "
        "OPENBLAS_NUM_THREADS=%s), %s, pos %s" % (
            info["torch"], info["threads"], info.get("blas_core", "?"),
            info["blas_coretype_env"], info["openblas_num_threads_env"], model_summary(model),
            a.pos))
    if a.bench_steps > 0:
        return bench(a, model, step)

    t_load = time.perf_counter()
    xs, ys = load_split(a.data, "train", a.img_size, a.num_classes)
    xt, yt = load_split(a.data, "t10k", a.img_size, a.num_classes)
    log("data: %d training, %d test images from %s (%.1f s)" % (
        xs.shape[0], xt.shape[0], a.data, time.perf_counter() - t_load))
    n = xs.shape[0]
    spe = n // a.batch if a.last_batch == "drop" else -(-n // a.batch)
    if spe < 1:
        sys.exit("fewer training images (%d) than one batch (%d)" % (n, a.batch))
    total = a.epochs * spe
    warmup = int(round(a.warmup_epochs * spe))
    gen = torch.Generator().manual_seed(a.seed)

    t_train = 0.0           # training seconds (evaluation excluded)
    images = 0
    t_step = 0
    loss_sum, loss_n = 0.0, 0      # since the last evaluation
    win_sum, win_n, win_t, win_img = 0.0, 0, 0.0, 0
    last_eval_step = -1
    acc = None
    stop = None

    def report(epoch_float):
        nonlocal loss_sum, loss_n, last_eval_step, acc
        t0 = time.perf_counter()
        if average:
            average[1]()
        acc = evaluate(model, xt, yt, a)
        if average:
            average[1]()
        t_eval = time.perf_counter() - t0
        rec = {"epoch": round(epoch_float, 4), "step": t_step,
               "train_loss": loss_sum / max(loss_n, 1), "test_accuracy": acc,
               "images_per_second": images / max(t_train, 1e-9), "train_seconds": t_train}
        log("eval epoch %.2f step %d: train loss %.4f, test accuracy %.4f (%.1f s), "
            "%.1f images/s over %.1f training s" % (epoch_float, t_step, rec["train_loss"], acc,
                                                    t_eval, rec["images_per_second"], t_train))
        if a.json:
            print(json.dumps(rec), flush=True)
        loss_sum, loss_n = 0.0, 0
        last_eval_step = t_step

    for epoch in range(a.epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(spe):
            if a.max_steps and t_step >= a.max_steps:
                stop = "max-steps"
                break
            if a.time_budget and t_train >= a.time_budget:
                stop = "time-budget"
                break
            t0 = time.perf_counter()
            idx = perm[i * a.batch:(i + 1) * a.batch]
            x = train_batch(xs, idx, gen, a)
            lr = lr_at(t_step, a, warmup, total)
            loss = step(x, ys[idx], lr)
            if average:
                average[0]()
            dt = time.perf_counter() - t0
            if not math.isfinite(loss):
                sys.exit("step %d: loss %r" % (t_step, loss))
            t_train += dt
            images += idx.numel()
            t_step += 1
            loss_sum += loss
            loss_n += 1
            win_sum += loss
            win_n += 1
            win_t += dt
            win_img += idx.numel()
            if a.log_every and t_step % a.log_every == 0:
                log("epoch %d step %d/%d: loss %.4f, lr %.3g, %.1f images/s" % (
                    epoch + 1, t_step, total, win_sum / win_n, lr, win_img / win_t))
                win_sum, win_n, win_t, win_img = 0.0, 0, 0.0, 0
        if stop:
            break
        report(epoch + 1.0)
    if last_eval_step != t_step:
        report(t_step / spe)
    final = {"final": True, "test_accuracy": acc, "train_seconds": t_train,
             "images_per_second": images / max(t_train, 1e-9), "epochs": t_step / spe,
             "steps": t_step, "steps_per_epoch": spe, "total_steps_of_schedule": total,
             "images": images, "stopped_by": stop or "epochs", "batch": a.batch, "pos": a.pos,
             "seed": a.seed}
    final.update(info)
    log("done: test accuracy %.4f after %d steps (%.3f epochs), %.1f training s, %.1f images/s"
        % (acc, t_step, final["epochs"], t_train, final["images_per_second"]))
    if a.json:
        print(json.dumps(final), flush=True)


if __name__ == "__main__":
    main()
