"""relattn.torch against the naive PyTorch expression, in one process:
the op (relattn.torch.attention on (B_, nH, N, hd) tensors) and the module
(relattn.torch.WindowAttention against the official WindowAttention of
tools/common.py), forward and forward + backward, on the layer rows
of bench/bench.c. Also the cost of the layout adapter alone: the op reads
q, k, v token-major, (B_, N, nH*hd), so attention() permutes each when the
heads differ (a bias table or a mask; its backward permutes the gradients
back); without, each head is a window and nothing is copied (no adapter
row); WindowAttention uses its qkv projection in place and needs none.

    OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/bench_torch_op.py
        [--threads 2] [--reps 9] [--rows TEXT] [--markdown FILE]

Both sides run on the same thread count (torch.set_num_threads and the
library's OpenMP pool); times are medians of --reps calls after a warm-up.
The naive side multiplies with PyTorch's BLAS, whose kernels depend on
OPENBLAS_CORETYPE (see README: OpenBLAS 0.3.21 does not know this CPU and
falls back to its SSE3 kernels without it); relattn's core does not use BLAS.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, os.pardir, "python"))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tools"))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests", "python"))

import torch  # noqa: E402

import relattn  # noqa: E402
import relattn.torch as rt  # noqa: E402
from test_torch import naive  # noqa: E402  (the expression the tests check against)

# name, B_, N, C, nH, Swin-T's shifted mask (nW = 64), Shaw k
ROWS = [
    ("window_attention 512x49x96 nH3 shifted", 512, 49, 96, 3, True, 0),
    ("window_attention 64x49x96 nH3 shifted", 64, 49, 96, 3, True, 0),
    ("window_attention 16x49x384 nH12", 16, 49, 384, 12, False, 0),
    ("vit_attention 8x197x768 nH12", 8, 197, 768, 12, False, 0),
    ("shaw_attention 4x512x512 nH8 k16", 4, 512, 512, 8, False, 16),
]


def timed(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def op_args(b_, n, c, nh, shifted, k):
    hd = c // nh
    g = torch.Generator().manual_seed(0)
    a = dict(q=torch.randn(b_, nh, n, hd, generator=g), k=torch.randn(b_, nh, n, hd, generator=g),
             v=torch.randn(b_, nh, n, hd, generator=g), scale=hd ** -0.5)
    if k:
        a["rel"] = torch.from_numpy(relattn.relpos_index(length=n, clip=k))
        a["rel_k"] = 0.02 * torch.randn(2 * k + 1, hd, generator=g)
        a["rel_v"] = 0.02 * torch.randn(2 * k + 1, hd, generator=g)
    elif n == 49:
        a["bias_table"] = 0.02 * torch.randn(169, nh, generator=g)
        a["index"] = torch.from_numpy(relattn.relpos_index(window=(7, 7)))
    if shifted:
        a["mask"] = torch.from_numpy(relattn.window_mask((56, 56), (7, 7), (3, 3)))
    return a


def grads(a):
    return {k: (v.clone().requires_grad_(True) if k in ("q", "k", "v", "bias_table", "rel_k",
                                                         "rel_v") else v) for k, v in a.items()}


def bench_row(row, reps):
    name, b_, n, c, nh, shifted, k = row
    a = op_args(b_, n, c, nh, shifted, k)
    if "index" in a:   # the naive side indexes with int64, as the official code does
        a["index"] = a["index"].long()
    res = {}
    with torch.no_grad():
        res["op fwd"] = (timed(lambda: rt.attention(**a), reps), timed(lambda: naive(**a), reps))
    ga, gn = grads(a), grads(a)
    dout = torch.randn(b_, nh, n, c // nh)

    def step(fn, t):
        for v in t.values():
            if isinstance(v, torch.Tensor) and v.grad is not None:
                v.grad = None
        fn(**t).backward(dout)
    res["op fwd+bwd"] = (timed(lambda: step(rt.attention, ga), reps),
                         timed(lambda: step(naive, gn), reps))
    # the layout adapter alone (q, k, v to token-major), which the op runs
    # only when heads differ (a bias table or a mask)
    if "bias_table" in a or "mask" in a:
        res["adapter"] = (timed(lambda: [t.transpose(1, 2).contiguous()
                                         for t in (a["q"], a["k"], a["v"])], reps), None)
    if n == 49 and not k:
        from make_fixtures import WindowAttention as Seed
        torch.manual_seed(0)
        seed = Seed(c, (7, 7), nh)
        mine = rt.WindowAttention.from_module(seed)
        x = torch.randn(b_, n, c)
        mask = a.get("mask")
        with torch.no_grad():
            res["module fwd"] = (timed(lambda: mine(x, mask=mask), reps),
                                 timed(lambda: seed(x, mask=mask)[0], reps))
        xg = x.clone().requires_grad_(True)
        dy = torch.randn(b_, n, c)

        def mstep(m, pick):
            m.zero_grad()
            xg.grad = None
            pick(m(xg, mask=mask)).backward(dy)
        res["module fwd+bwd"] = (timed(lambda: mstep(mine, lambda y: y), reps),
                                 timed(lambda: mstep(seed, lambda y: y[0]), reps))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--rows", default="")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    relattn._lib.lib.ra_threads_set(a.threads)
    head = ("%s; PyTorch %s, %d threads, OPENBLAS_CORETYPE=%s" %
            (relattn.version(), torch.__version__, a.threads,
             os.environ.get("OPENBLAS_CORETYPE", "unset")))
    lines = [head, "",
             "| row | measure | relattn.torch ms | naive PyTorch ms | speed-up |",
             "|---|---|---|---|---|"]
    print(head)
    for row in ROWS:
        if a.rows not in row[0]:
            continue
        for measure, (mine, ref) in bench_row(row, a.reps).items():
            ratio = "%.2fx" % (ref / mine) if ref else "-"
            line = "| %s | %s | %.2f | %s | %s |" % (row[0], measure, 1e3 * mine,
                                                    "%.2f" % (1e3 * ref) if ref else "-", ratio)
            print(line, flush=True)
            lines.append(line)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
