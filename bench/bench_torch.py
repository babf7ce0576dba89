"""The PyTorch side of bench/bench.c: the same layer rows (the project's
reference modules of tools/make_fixtures.py, the authors' code) and the same
networks (torchvision swin_t and vit_b_16 with the weights of the files in
--models DIR, as tools/export.py writes them) on the CPU, float32 and (the
networks' forward) every reduced precision PyTorch offers there, timed the
same way: one warm-up call, then the median of R calls.

    OPENBLAS_CORETYPE=... OPENBLAS_NUM_THREADS=T /usr/bin/python3 bench/bench_torch.py
        --threads T [--reps R] [--what all|layers|nets|video3d] [--models DIR]
        [--batches 1,8] [--rows TEXT] [--precisions fp32,bf16,int8] [--memory]
        [--clip T,S] [--rss WAY | --list-ways] [--results FILE]

One process measures one BLAS setting: OpenBLAS reads OPENBLAS_CORETYPE
(its kernel set) when it is loaded, and the size of its thread pool from
OPENBLAS_NUM_THREADS, so bench/run.sh starts a process for each kernel set
and thread count. Inside it every split of T threads between PyTorch's
OpenMP pool (torch.set_num_threads) and OpenBLAS's pool is tried: with both
pools on every core they fight, so each split is a setting of its own, and
bench/summary.py takes PyTorch's best per row.

Layer rows: the core (q·k^T, softmax, p·v with the row's relative terms, on
q, k, v given) and the layer (the module's forward from x): the forward
under no_grad, the backward alone (from the graph of an untimed forward:
dL/dx and every parameter gradient, the bias table included) and forward +
backward (a training step: the forward recording its graph). Shaw rows
time the layer's forward only, in two forms: "torch" is the naive
form (tools/make_fixtures.py ShawAttention: a^K and a^V gathered into
(N, N, hd) tensors and broadcast against q and p, as Shaw's formulas read)
and "torch matmul" the same gathered tensors taken into batched products
over the query index (Shaw et al. 2018, section 3.3), for reference.
--memory also measures the peak memory one Shaw forward adds, with and
without the tables, at N/2 and N (as bench.c does).

Networks: the inference forward (eval, no_grad) and, for swin_t, a training
step (train mode, stochastic depth off as relattn's swin has none, dropout
0 in torchvision's defaults): forward, then backward of a random dL/dy.
--precisions (default all three; may be empty: no network) chooses the
forward's precisions, each in every way PyTorch offers on the CPU, one
setting each (precision_ways); the training step is fp32's:
    fp32  the float32 model, as the training step;
    bf16  "bf16 weights": model.to(torch.bfloat16), input bfloat16;
          "bf16 autocast": torch.autocast("cpu", dtype=torch.bfloat16)
          around the float32 model;
    int8  "int8 dynamic, engine E": quantize_dynamic(model, {nn.Linear},
          dtype=torch.qint8) under each quantized engine PyTorch has
          (torch.backends.quantized.engine: fbgemm, qnnpack, onednn, x86),
          the count of Linear modules it quantized in the setting's name.
A reduced precision's row is the fp32 row's name and the precision
("swin_t B=8 int8", as bench.c's); it runs at one split of the threads,
every thread to PyTorch's pool and OpenBLAS's (T+T: its products are not
OpenBLAS's). A way that fails (torchvision's swin_t calls F.linear on the
.weight of its attention's Linear modules, a method in a dynamic quantized
Linear) is a "fail" line with the error's first line, not a crash.

--what video3d: the video network swin3d_t alone, tools/swin3d_net_twin.py's
Swin3d (torchvision >= 0.15's SwinTransformer3d; Debian's torchvision 0.14
has none) with the weights of --models' swin3d_t.safetensors (tools/export.py
--torchvision swin3d_t), the inference forward of one random clip (1, 3, T,
S, S) of --clip T,S (default 32,224) in every way of --precisions, as the
image networks' (row "swin3d_t B=1 32x224x224"). --rss WAY measures,
instead, the memory of that one way's inference in this process (one
process per way: resident memory once the model is ready, the peak over
two forwards, the process's peak), as bench_video.c's rss measures
relattn's; --list-ways prints the ways of --precisions.

Flops are not counted here: bench/summary.py takes them from bench.c's
lines, the same work for both. --results FILE appends tab-separated lines:
    info    torch KEY VALUE
    time    torch ROW MEASURE KERNEL THREADS SETTING SECONDS 0 IMAGES
    fail    torch ROW MEASURE KERNEL THREADS SETTING REASON
    memory  torch ROW N BYTES_WITH_TABLES BYTES_WITHOUT
    rss     torch ROW SETTING READY_KB FORWARD_PEAK_KB PROCESS_PEAK_KB
"""
import argparse
import contextlib
import copy
import ctypes
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

import torch  # noqa: E402

from make_fixtures import (Attention, ShawAttention, WindowAttention, clip_index,  # noqa: E402
                           shift_mask_2d)
from train_twin import blas_info, openblas  # noqa: E402
from swinv2_twin import LOGIT_MAX, WindowAttentionV2  # noqa: E402

# name (as bench.c's), kind, B_, N, C, nH, the shifted mask of a map of 8x8
# windows (Swin-T stage 1: 56x56, windows 7x7, shift 3), Shaw k
LAYERS = [
    ("window_attention 512x49x96 nH3 shifted", "window", 512, 49, 96, 3, True, 0),
    ("shaw_attention 4x512x512 nH8 k16", "shaw", 4, 512, 512, 8, False, 16),
    ("vit_attention 8x197x768 nH12", "vit", 8, 197, 768, 12, False, 0),
    ("window_attention 64x49x96 nH3 shifted", "window", 64, 49, 96, 3, True, 0),
    ("window_attention 16x49x384 nH12", "window", 16, 49, 384, 12, False, 0),
    ("vit_attention 4x197x768 nH12", "vit", 4, 197, 768, 12, False, 0),
    ("rope_attention 8x197x768 nH12", "rope", 8, 197, 768, 12, False, 0),
    ("rope_attention 4x197x768 nH12", "rope", 4, 197, 768, 12, False, 0),
    # SwinV2-T stage 1 at batch 8 (tools/swinv2_twin.py's official design)
    ("swinv2_window_attn 512x64x96 nH3 shifted", "swinv2", 512, 64, 96, 3, True, 0),
]
MEASURES = ["core fwd", "core bwd", "fwd", "bwd", "fwd+bwd"]

# name, also time a training step, image side, video (--what video3d: clips
# of --clip's T x S x S, S in place of the side)
NETS = [("swin_t", True, 224, False), ("vit_b_16", False, 224, False),
        ("swin_v2_t", True, 256, False), ("swin3d_t", False, 224, True)]
PRECISION_NAMES = ("fp32", "bf16", "int8")
# the quantized engines tried for int8, those of them PyTorch has
INT8_ENGINES = ("fbgemm", "qnnpack", "onednn", "x86")


# --------------------------------------------------------------------------
# Timing, memory, results
# --------------------------------------------------------------------------

def timed(fn, reps, setup=None):
    """Seconds of one call of fn, or of fn(setup()) with setup untimed (a
    backward from the graph of an untimed forward): one warm-up call, then
    the median of reps."""
    def once():
        arg = setup() if setup else None
        t0 = time.perf_counter()
        fn(arg) if setup else fn()
        return time.perf_counter() - t0
    once()
    ts = sorted(once() for _ in range(reps))
    n = len(ts)
    return ts[n // 2] if n % 2 else 0.5 * (ts[n // 2 - 1] + ts[n // 2])


def _status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def peak_extra_bytes(fn):
    """Bytes the peak resident memory of the process rises by during one call
    of fn (as bench.c measures it: freed heap pages handed back, then the
    peak reset through /proc/self/clear_refs), or -1 where it cannot be told."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        rss = _status_kb("VmRSS")
    except OSError:
        return -1
    fn()
    return 1024 * (_status_kb("VmHWM") - rss)


class Results:
    """--results FILE: the lines bench/summary.py reads."""

    def __init__(self, path):
        self.f = open(path, "a") if path else None

    def line(self, *fields):
        if self.f:
            print("\t".join(str(v) for v in fields), file=self.f, flush=True)


# --------------------------------------------------------------------------
# Threads: splits of T between PyTorch's OpenMP pool and OpenBLAS's pool
# --------------------------------------------------------------------------

class Threads:
    def __init__(self, n):
        self.lib = openblas()
        info = blas_info()
        self.core = info.get("blas_core", "unknown")
        env = os.environ.get("OPENBLAS_CORETYPE")
        self.coretype = "OPENBLAS_CORETYPE=" + env if env else "OPENBLAS_CORETYPE unset"
        self.build = ("OpenBLAS OpenMP build" if "USE_OPENMP" in info.get("blas", "")
                      else "OpenBLAS pthread build")
        # OpenBLAS's pool can only be resized if we found the library
        if n <= 1:
            self.splits = [(1, 1)]
        elif self.lib is None:
            self.splits = [(n, n)]
        else:
            self.splits = [(1, n), (n, 1), (n, n)]

    def use(self, omp, blas):
        torch.set_num_threads(omp)
        if self.lib is not None:
            self.lib.openblas_set_num_threads(blas)

    def setting(self, omp, blas):
        return "%s, %s (%s kernels), %d OpenMP + %d OpenBLAS threads" % (
            self.build, self.coretype, self.core, omp, blas)


def split_label(omp, blas):
    return "%d+%d" % (omp, blas)


# --------------------------------------------------------------------------
# Layer rows
# --------------------------------------------------------------------------

def shaw_key_term(q, a_k, form):
    """sum_d q[b,h,i,d] a_k[i,j,d]: q (B_, nH, N, hd), a_k (N, N, hd) ->
    (B_, nH, N, N)."""
    if form == "torch":   # the naive broadcast (tools/make_fixtures.py)
        return (q.unsqueeze(3) * a_k).sum(-1)
    b, h, n, d = q.shape   # per query i: (B_ nH, hd) @ (hd, N)
    t = q.permute(2, 0, 1, 3).reshape(n, b * h, d) @ a_k.transpose(1, 2)
    return t.view(n, b, h, n).permute(1, 2, 0, 3)


def shaw_value_term(p, a_v, form):
    """sum_j p[b,h,i,j] a_v[i,j,d]: p (B_, nH, N, N), a_v (N, N, hd) ->
    (B_, nH, N, hd)."""
    if form == "torch":
        return (p.unsqueeze(-1) * a_v).sum(3)
    b, h, n, _ = p.shape   # per query i: (B_ nH, N) @ (N, hd)
    t = p.permute(2, 0, 1, 3).reshape(n, b * h, n) @ a_v
    return t.view(n, b, h, -1).permute(1, 2, 0, 3)


def core(m, kind, form, q, k, v, mask):
    """The attention of module m from q, k, v (B_, nH, N, hd) on, as its
    forward computes it; out (B_, nH, N, hd)."""
    n = q.shape[2]
    if kind == "window":   # Swin scales q, the others the logits
        q = q * m.scale
    if kind == "swinv2":   # cosine attention, the scale per head, the CPB bias
        q, k = torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1)
    s = q @ k.transpose(-2, -1)
    if kind == "swinv2":
        s = s * torch.clamp(m.logit_scale, max=LOGIT_MAX).exp()
        bias = m.bias_table()[m.relative_position_index.view(-1)]
        s = s + bias.view(n, n, -1).permute(2, 0, 1).unsqueeze(0)
    if kind == "shaw":
        rel = clip_index(n, m.max_relative_position)
        s = s + shaw_key_term(q, m.relative_keys[rel], form)
    if kind in ("vit", "shaw"):
        s = s * m.scale
    if kind == "window":
        bias = m.relative_position_bias_table[m.relative_position_index.view(-1)]
        s = s + bias.view(n, n, -1).permute(2, 0, 1).unsqueeze(0)
    if mask is not None:
        nw = mask.shape[0]
        s = (s.view(-1, nw, *s.shape[1:]) + mask.unsqueeze(1).unsqueeze(0)).view(s.shape)
    p = s.softmax(-1)
    out = p @ v
    if kind == "shaw":
        out = out + shaw_value_term(p, m.relative_values[rel], form)
    return out


class ShawMatmul(ShawAttention):
    """The naive Shaw module (tools/make_fixtures.py) with its relative
    terms as batched products (the "torch matmul" form)."""

    def forward(self, x, mask=None):
        B_, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B_, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        out = core(self, "shaw", "torch matmul", q, k, v, mask)
        return self.proj(out.transpose(1, 2).reshape(B_, N, C)), None


def make_layer(kind, form, c, nh, k):
    if kind == "window":
        m = WindowAttention(c, (7, 7), nh)
    elif kind == "swinv2":
        m = WindowAttentionV2(c, (8, 8), nh)
    elif kind == "vit":
        m = Attention(c, nh)
    elif kind == "rope":   # rope-vit's RoPE-Axial, a 14x14 map and a class token
        from relpos_twin import RoPEAttention
        m = RoPEAttention(c, nh, grid_size=(14, 14))
    else:
        m = (ShawAttention if form == "torch" else ShawMatmul)(c, nh, k)
    with torch.no_grad():   # every parameter non-trivial, as bench.c's
        for p in m.parameters():
            p.uniform_(-0.05, 0.05)
    return m


def uniform(*shape):
    return torch.rand(*shape) * 2 - 1


def bench_layer(a, th, res, row):
    name, kind, b_, n, c, nh, shifted, k = row
    hd = c // nh
    full = kind != "shaw"   # the naive Shaw terms make the rest minutes long
    w = int(round(n ** 0.5))
    mask = shift_mask_2d(8 * w, 8 * w, w, w, w // 2, w // 2) if shifted else None
    x = uniform(b_, n, c).requires_grad_()
    dy = uniform(b_, n, c)
    q, k_, v = (uniform(b_, nh, n, hd).requires_grad_() for _ in range(3))
    dout = uniform(b_, nh, n, hd)
    for form in (["torch", "torch matmul"] if kind == "shaw" else ["torch"]):
        m = make_layer(kind, form, c, nh, k)

        def core_fwd():
            return core(m, kind, form, q, k_, v, mask)

        def layer_fwd():
            if kind == "swinv2":
                return m(x, mask)
            return m(x, mask)[0] if kind == "window" else m(x)[0]

        for omp, blas in th.splits:
            th.use(omp, blas)
            t = {}
            with torch.no_grad():
                t["fwd"] = timed(layer_fwd, a.reps)
                if full:
                    t["core fwd"] = timed(core_fwd, a.reps)
            if full:
                t["core bwd"] = timed(lambda o: o.backward(dout), a.reps, core_fwd)
                t["bwd"] = timed(lambda y: y.backward(dy), a.reps, layer_fwd)
                t["fwd+bwd"] = timed(lambda: layer_fwd().backward(dy), a.reps)
            print("%-40s %-12s %-7s" % (name, form, split_label(omp, blas)) +
                  "".join(" %9.2f" % (1e3 * t[ms]) if ms in t else " %9s" % "-"
                          for ms in MEASURES))
            for ms in MEASURES:
                if ms in t:
                    res.line("time", "torch", name, ms, form, max(omp, blas),
                             th.setting(omp, blas), "%.6g" % t[ms], 0, 0)
    if a.memory and kind == "shaw":
        shaw_memory(res, row)


def shaw_memory(res, row):
    """Peak memory one forward of the naive Shaw module adds, with and
    without its tables, at N/2 and N tokens."""
    name, _, b_, n, c, nh, _, k = row
    line = "%-40s memory one forward adds (MiB):" % name
    for nt in (n // 2, n):
        x = torch.rand(b_, nt, c)
        got = []
        for tables in (True, False):
            m = ShawAttention(c, nh, k, use_keys=tables, use_values=tables)
            with torch.no_grad():
                m(x)
                got.append(peak_extra_bytes(lambda: m(x)))
        line += " N=%d %.2f with tables, %.2f without;" % (nt, got[0] / 2**20, got[1] / 2**20)
        res.line("memory", "torch", name, nt, got[0], got[1])
    print(line)


# --------------------------------------------------------------------------
# Networks
# --------------------------------------------------------------------------

def one_line(e):
    """An exception as one line of the results file."""
    text = (str(e).strip().splitlines() or [""])[0]
    return ("%s: %s" % (type(e).__name__, text))[:300].replace("\t", " ")


def quantized_linear_count(model):
    """(Linear modules quantized, Linear modules in all) of a model after
    quantize_dynamic."""
    import torch.ao.nn.quantized.dynamic as nnqd
    q = sum(isinstance(m, nnqd.Linear) for m in model.modules())
    return q, q + sum(isinstance(m, torch.nn.Linear) for m in model.modules())


@contextlib.contextmanager
def stderr_to_null(on):
    """File descriptor 2 to /dev/null while on: qnnpack's dynamic Linear
    logs (through glog, not Python's warnings) on every call that it
    ignores reduce_range, which torch's dynamic Linear always passes."""
    if not on:
        yield
        return
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def precision_ways(model, precisions):
    """The ways of running the float32 model's forward PyTorch offers in
    each precision: [(precision, name, make)], make() -> (model, input
    dtype, context) or an exception (a way PyTorch refuses, reported)."""
    ways = []
    if "fp32" in precisions:
        ways.append(("fp32", "fp32", lambda: (model, torch.float32, None)))
    if "bf16" in precisions:
        ways.append(("bf16", "bf16 weights",
                     lambda: (copy.deepcopy(model).to(torch.bfloat16), torch.bfloat16, None)))
        ways.append(("bf16", "bf16 autocast",
                     lambda: (model, torch.float32,
                              lambda: torch.autocast("cpu", dtype=torch.bfloat16))))
    for engine in INT8_ENGINES if "int8" in precisions else ():
        if engine not in torch.backends.quantized.supported_engines:
            continue

        def make(engine=engine):
            torch.backends.quantized.engine = engine   # the packing follows the engine
            q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear},
                                                       dtype=torch.qint8)
            return q, torch.float32, None
        ways.append(("int8", "int8 dynamic, engine %s" % engine, make))
    return ways


def load_net(a, name):
    """The float32 model in eval mode with the weights of --models' file,
    or None if the file is missing. swin3d_t: tools/swin3d_net_twin.py's
    Swin3d (torchvision >= 0.15's SwinTransformer3d written again: Debian's
    torchvision 0.14 has none), swin3d_t's widths by default."""
    import torchvision
    import st
    path = os.path.join(a.models, name + ".safetensors")
    if not os.path.exists(path):
        print("%-40s skipped: %s is missing" % (name, path))
        return None
    tensors, _ = st.read(path)
    if name == "swin3d_t":
        from swin3d_net_twin import Swin3d
        model = Swin3d()
    else:
        model = getattr(torchvision.models, name)()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()})
    del tensors
    for mod in model.modules():   # no stochastic depth in training: relattn's swin has none
        if isinstance(mod, torchvision.ops.StochasticDepth):
            mod.p = 0.0
    return model.eval()


def net_input(a, name, b, size, video):
    """(row name without the precision, input shape): images (b, 3, S, S),
    or one clip of --clip T,S (b is 1), named as bench.c names them."""
    if video:
        t, s = a.clip
        return "%s B=%d %dx%dx%d" % (name, b, t, s, s), (b, 3, t, s, s)
    return "%s B=%d" % (name, b), (b, 3, size, size)


def bench_net(a, th, res, name, train, size, video):
    model = load_net(a, name)
    if model is None:
        return
    for precision, way, make in precision_ways(model, a.precisions):
        m, dtype, context, failed, setting = None, torch.float32, None, None, way
        try:
            m, dtype, context = make()
            if precision == "int8":
                setting += " (%d of %d Linear modules quantized)" % quantized_linear_count(m)
        except Exception as e:   # noqa: BLE001 (a way PyTorch refuses is a result)
            failed = one_line(e)
        splits = th.splits if precision == "fp32" else [th.splits[-1]]
        for b in [1] if video else a.batches:
            row, shape = net_input(a, name, b, size, video)
            row += "" if precision == "fp32" else " " + precision
            x = torch.randn(*shape).to(dtype)
            dy = torch.randn(b, 1000)

            def fwd():
                with torch.no_grad():
                    if context:
                        with context():
                            m(x)
                    else:
                        m(x)

            def step():
                m.zero_grad(set_to_none=True)
                m(x).backward(dy)

            measures = [("fwd", fwd, False)]
            if train and precision == "fp32":
                measures.append(("fwd+bwd", step, True))
            for measure, fn, mode in measures:
                if m is not None:
                    m.train(mode)
                for omp, blas in splits:
                    th.use(omp, blas)
                    full = th.setting(omp, blas)
                    if precision != "fp32":
                        full = setting + "; " + full
                    reason = failed
                    if not reason:
                        try:
                            with stderr_to_null(way.endswith("engine qnnpack")):
                                t = timed(fn, a.reps)
                        except Exception as e:   # noqa: BLE001 (the call refused: a result)
                            reason = one_line(e)
                    if reason:
                        print("%-40s %-8s %-7s %10s %10s  %s: failed: %s" % (
                            row, measure, split_label(omp, blas), "-", "-", way, reason))
                        res.line("fail", "torch", row, measure, "torch", max(omp, blas), full,
                                 reason)
                        continue
                    print("%-40s %-8s %-7s %10.2f %10.1f  %s" % (
                        row, measure, split_label(omp, blas), b / t, 1e3 * t, way))
                    res.line("time", "torch", row, measure, "torch", max(omp, blas), full,
                             "%.6g" % t, 0, b)
        del m
        model.zero_grad(set_to_none=True)   # no gradients in the next way's copy


def rss_net(a, th, res, name, size, video, way_name):
    """The memory of one way's inference in this process (run alone, one
    process per way, as bench_video.c's rss): resident memory once the
    model is ready (loaded, converted, the input made), the peak during two
    forwards (VmHWM reset through /proc/self/clear_refs), the process's
    peak over its life (ru_maxrss: loading included), in kB."""
    import resource
    model = load_net(a, name)
    if model is None:
        return
    ways = [w for w in precision_ways(model, PRECISION_NAMES) if w[1] == way_name]
    if not ways:
        sys.exit("bench_torch.py: --rss %r is not a way of %s (--list-ways)" % (way_name, name))
    precision, way, make = ways[0]
    omp, blas = th.splits[-1]
    th.use(omp, blas)
    row, shape = net_input(a, name, 1, size, video)
    row += "" if precision == "fp32" else " " + precision
    setting = way + "; " + th.setting(omp, blas)
    try:
        t0 = time.perf_counter()
        m, dtype, context = make()
        x = torch.randn(*shape).to(dtype)
        del model
        t1 = time.perf_counter()
        ready = _status_kb("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        sec = []
        with torch.no_grad(), stderr_to_null(way.endswith("engine qnnpack")):
            for _ in range(2):
                t = time.perf_counter()
                if context:
                    with context():
                        m(x)
                else:
                    m(x)
                sec.append(time.perf_counter() - t)
    except Exception as e:   # noqa: BLE001 (a way PyTorch refuses is a result)
        print("%-40s %s: failed: %s" % (row, way, one_line(e)))
        res.line("fail", "torch", row, "rss", "torch", max(omp, blas), setting, one_line(e))
        return
    peak = _status_kb("VmHWM")
    life = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("%-32s %-40s ready %8.1f MiB, forward peak %8.1f MiB, process peak %8.1f MiB "
          "(made in %.1f s; forwards %.2f s, %.2f s)" % (row, way, ready / 1024, peak / 1024,
                                                       life / 1024, t1 - t0, sec[0], sec[1]))
    res.line("rss", "torch", row, setting, ready, peak, life)


# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--what", choices=("all", "layers", "nets", "video3d"), default="all",
                    help="video3d: swin3d_t alone (one clip of --clip)")
    ap.add_argument("--clip", default="32,224", help="video3d: T,S, clips (1, 3, T, S, S)")
    ap.add_argument("--rss", metavar="WAY",
                    help="only the memory of one way's inference (--list-ways) of the "
                         "networks of --what, in this process")
    ap.add_argument("--list-ways", action="store_true",
                    help="print the ways of --precisions, one a line, and stop")
    ap.add_argument("--models", default=os.environ.get("RELATTN_BENCH_MODELS"))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rows", default="", help="only the rows whose name contains this")
    ap.add_argument("--precisions", default=",".join(PRECISION_NAMES),
                    help="the networks' forward in these (fp32,bf16,int8; may be empty)")
    ap.add_argument("--memory", action="store_true", help="measure the Shaw rows' memory")
    ap.add_argument("--results", help="append tab-separated results to this file")
    a = ap.parse_args()
    a.batches = [int(v) for v in a.batches.split(",") if v]
    a.reps = max(1, a.reps)
    a.precisions = [v for v in a.precisions.split(",") if v]
    for v in a.precisions:
        if v not in PRECISION_NAMES:
            ap.error("--precisions: %s is not one of %s" % (v, ",".join(PRECISION_NAMES)))
    try:
        a.clip = [int(v) for v in a.clip.split(",")]
        if len(a.clip) != 2 or min(a.clip) < 1:
            raise ValueError
    except ValueError:
        ap.error("--clip T,S: two positive integers")
    if a.list_ways:
        print("\n".join(w[1] for w in precision_ways(None, a.precisions)))
        return
    torch.manual_seed(0)
    th = Threads(a.threads)
    res = Results(a.results)
    res.line("info", "torch", "torch", torch.__version__)
    res.line("info", "torch", "blas_core", th.core)
    res.line("info", "torch", "quantized_engines",
             ",".join(torch.backends.quantized.supported_engines))
    print("torch %s: %s, %s, OPENBLAS_NUM_THREADS %s, kernel set %s; thread splits "
          "(OpenMP+OpenBLAS) %s; median of %d runs" % (torch.__version__, th.build, th.coretype,
                                      os.environ.get("OPENBLAS_NUM_THREADS", "unset"), th.core,
                                      ", ".join(split_label(*s) for s in th.splits), a.reps))
    try:
        with open("/proc/loadavg") as f:
            print("load average: " + f.read().strip())
    except OSError:
        pass
    video = a.what == "video3d"
    if a.rss:
        for name, train, size, v in NETS if a.models else []:
            if a.rows in name and v == video:
                rss_net(a, th, res, name, size, v, a.rss)
        return
    if a.what != "layers":
        print("%-40s %-8s %-7s %10s %10s  %s" % ("network", "measure", "threads", "images/s",
                                                 "ms", "precision"))
        if not a.models:
            print("(no --models DIR or RELATTN_BENCH_MODELS: networks skipped)")
        for name, train, size, v in NETS if a.models and a.precisions else []:
            if a.rows in name and v == video:
                bench_net(a, th, res, name, train, size, v)
        print()
    if a.what in ("all", "layers"):
        print("%-40s %-12s %-7s" % ("layer (ms)", "form", "threads") +
              "".join(" %9s" % ms for ms in MEASURES))
        for row in LAYERS:
            if a.rows in row[0]:
                bench_layer(a, th, res, row)


if __name__ == "__main__":
    main()
