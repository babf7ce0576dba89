"""The PyTorch side of bench/bench.c: the same shapes, the same flop counts,
the seeds' modules (tools/make_fixtures.py), float32 on the CPU; and the
same networks (torchvision swin_t and vit_b_16 with the weights of the files
in --models DIR, as tools/export.py writes them) in images/s.

    /usr/bin/python3 bench/bench_torch.py [--threads N] [--reps R]
        [--what all|layers|nets] [--models DIR] [--batches 1,8]
"""
import argparse
import os
import sys
import time


def _early_threads(argv):
    """--threads N from the command line, before torch is imported."""
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return None


# torch.set_num_threads sizes PyTorch's OpenMP pool but not OpenBLAS's own
# pthread pool, which PyTorch's products run on: without this, "1 thread"
# would still multiply on every core. relattn's bench tells OpenBLAS the
# same number (ra_threads_set).
if _early_threads(sys.argv[1:]) and "OPENBLAS_NUM_THREADS" not in os.environ:
    os.environ["OPENBLAS_NUM_THREADS"] = _early_threads(sys.argv[1:])

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from make_fixtures import Attention, WindowAttention, shift_mask_2d  # noqa: E402

SHAPES = [  # name, window (0: ViT), B_, N, C, nH, mask
    ("swin-t stage1 (B_=64 N=49 C=96 nH=3)", 7, 64, 49, 96, 3, True),
    ("swin-t stage3 (B_=16 N=49 C=384 nH=12)", 7, 16, 49, 384, 12, False),
    ("vit-b/16 (B=4 N=197 C=768 nH=12)", 0, 4, 197, 768, 12, False),
]


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def timed(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return median(ts)


NETS = ["swin_t", "vit_b_16"]


def net_flops(name, model):
    """Multiply-adds of one 224x224 image, counted as relattn's
    ra_model_flops (SwinTransformer.flops() of the Swin authors)."""
    if name == "vit_b_16":
        C, P, n_p = 768, 16, (224 // 16) ** 2
        n, depth, hidden = n_p + 1, 12, 3072
        return (n_p * C * 3 * P * P + depth * (n * C * 3 * C + 2 * n * n * C + n * C * C
                                               + 2 * n * C * hidden) + C * 1000)
    # swin_t: patch embedding + norm, blocks, patch merging, final norm, head
    E, P, depths, win = 96, 4, [2, 2, 6, 2], 7
    g = 224 // P
    L0 = g * g
    f = L0 * E * 3 * P * P + L0 * E
    C = E
    for s, d in enumerate(depths):
        L = g * g
        wg = -(-g // win) * win
        nw, N = (wg // win) ** 2, win * win
        attn = N * C * 3 * C + 2 * N * N * C + N * C * C
        f += d * (2 * C * L + nw * attn + 2 * L * C * 4 * C)
        if s < len(depths) - 1:
            f += g * g * C + ((g + 1) // 2) ** 2 * 4 * C * 2 * C
            g, C = (g + 1) // 2, C * 2
    return f + (C * L0 >> len(depths)) + C * 1000


def openblas_threads(n):
    """Resize the pool of the OpenBLAS that torch has loaded (its products
    run there, outside torch.set_num_threads); False if there is none."""
    import ctypes
    for lib in ("libopenblas.so.0", "libopenblasp-r0.3.21.so", "libblas.so.3"):
        try:
            fn = ctypes.CDLL(lib).openblas_set_num_threads
        except (OSError, AttributeError):
            continue
        fn(int(n))
        return True
    return False


def thread_configs(n):
    """(OpenMP threads, OpenBLAS threads) for at most n cores: PyTorch's own
    loops and the products share them, and with both pools on every core
    they fight (on 2 cores that is slower than 1 thread), so every split is
    tried and the fastest is reported."""
    if n <= 1:
        return [(1, 1)]
    return [(1, n), (n, 1), (n, n)]


def bench_nets(a):
    import torchvision
    import st
    print("%-40s %-6s %10s %10s %10s" % ("network", "kernel", "images/s", "ms", "GFLOP/s"))
    if not a.models:
        print("(no --models DIR or RELATTN_BENCH_MODELS: networks skipped)")
        return
    can_split = openblas_threads(a.threads)
    configs = thread_configs(a.threads) if can_split else [(a.threads, a.threads)]
    for name in NETS:
        path = os.path.join(a.models, name + ".safetensors")
        if not os.path.exists(path):
            print("%-40s skipped: %s is missing" % (name, path))
            continue
        tensors, _ = st.read(path)
        model = getattr(torchvision.models, name)()
        model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()})
        model.eval()
        for b in a.batches:
            x = torch.randn(b, 3, 224, 224)
            best = None
            for omp, blas in configs:
                torch.set_num_threads(omp)
                if can_split:
                    openblas_threads(blas)
                with torch.no_grad():
                    model(x)   # settle the pools after a change (timed warms up once more)
                    t = timed(lambda: model(x), a.reps)
                if best is None or t < best[0]:
                    best = (t, omp, blas)
            t, omp, blas = best
            label = "net %s (B=%d 224x224)" % (name, b)
            print("%-40s %-6s %10.2f %10.1f %10.2f   images/s ms GFLOP/s (best: %d OpenMP, "
                  "%d OpenBLAS threads)" % (label, "torch", b / t, 1e3 * t,
                                            b / t * 2 * net_flops(name, model) * 1e-9, omp, blas))
    torch.set_num_threads(a.threads)
    if can_split:
        openblas_threads(a.threads)
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--what", choices=("all", "layers", "nets"), default="all")
    ap.add_argument("--models", default=os.environ.get("RELATTN_BENCH_MODELS"))
    ap.add_argument("--batches", default="1,8")
    a = ap.parse_args()
    a.batches = [int(v) for v in a.batches.split(",") if v]
    torch.set_num_threads(a.threads)
    print("torch %s: %d threads, median of %d runs" % (torch.__version__, a.threads, a.reps))
    try:
        with open("/proc/loadavg") as f:
            print("load average: " + f.read().strip())
    except OSError:
        pass
    if a.what != "layers":
        bench_nets(a)
    if a.what == "nets":
        return
    print("%-40s %-6s %10s %10s %10s %10s" % ("shape", "kernel", "core fwd", "core bwd",
                                               "layer fwd", "layer bwd"))
    torch.manual_seed(0)
    for name, ws, b_, n, c, nh, use_mask in SHAPES:
        hd = c // nh
        m = WindowAttention(c, (ws, ws), nh) if ws else Attention(c, nh)
        x = torch.randn(b_, n, c, requires_grad=True)
        dy = torch.randn(b_, n, c)
        mask = shift_mask_2d(56, 56, 7, 7, 3, 3) if use_mask else None
        q, k, v = (torch.randn(b_, nh, n, hd, requires_grad=True) for _ in range(3))
        dout = torch.randn(b_, nh, n, hd)
        if ws:
            bias = m.relative_position_bias_table[m.relative_position_index.view(-1)].view(
                n, n, -1).permute(2, 0, 1).contiguous().detach().requires_grad_(True)
        else:
            bias = None

        def core():
            s = (q * hd ** -0.5) @ k.transpose(-2, -1)
            if bias is not None:
                s = s + bias.unsqueeze(0)
            if mask is not None:
                nw = mask.shape[0]
                s = (s.view(b_ // nw, nw, nh, n, n) + mask.unsqueeze(1).unsqueeze(0)).view(-1, nh, n, n)
            return s.softmax(-1) @ v

        def layer():
            return (m(x, mask) if ws else m(x))[0]

        with torch.no_grad():
            t_cf = timed(core, a.reps)
            t_lf = timed(layer, a.reps)
        t_cb = timed(lambda: core().backward(dout), a.reps) - t_cf
        t_lb = timed(lambda: layer().backward(dy), a.reps) - t_lf
        fc = 4.0 * b_ * nh * n * n * hd
        fl = 2.0 * b_ * n * c * 4 * c
        print("%-40s %-6s %10.2f %10.2f %10.2f %10.2f   GFLOP/s" % (
            name, "torch", fc / t_cf * 1e-9, 2 * fc / max(t_cb, 1e-9) * 1e-9,
            (fc + fl) / t_lf * 1e-9, (3 * fc + 2 * fl) / max(t_lb, 1e-9) * 1e-9))


if __name__ == "__main__":
    main()
