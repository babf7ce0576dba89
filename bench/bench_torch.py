"""The PyTorch side of bench/bench.c: the same shapes, the same flop counts,
the seeds' modules (tools/make_fixtures.py), float32 on the CPU.

    /usr/bin/python3 bench/bench_torch.py [--threads N] [--reps R]
"""
import argparse
import os
import sys
import time

import torch

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print("torch %s: %d threads, median of %d runs" % (torch.__version__, a.threads, a.reps))
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
