"""Sets relattn's measurements beside PyTorch's and checks them against the
issue's targets (bench/README.md).

    python3 bench/summary.py RESULTS... [--markdown FILE]

RESULTS are the tab-separated files bench.c and bench_torch.py append to
(--results). For each row and measure it takes relattn's figures at its
default kernel and largest thread count, and PyTorch's best over every
setting it ran (kernel set, threads, split between its two pools), and
prints a table of every row, a table per network and batch of its forward
in each precision (relattn fp32, bf16 and int8 against PyTorch's best at
each precision and PyTorch's best overall, each side's share of the
precision's peak), then the summary of the targets; --markdown writes the
targets' summary and the networks' tables as Markdown, with a line about
the machine. Flops come from bench.c's lines (the same work for both sides
and every precision). A reduced precision's row is the fp32 row's name and
the precision ("swin_t B=8 int8"); its share of peak is over that
precision's peak (bench.c's peak lines: fp32 the FMA peak, bf16 the
VDPBF16PS peak where relattn's bf16 runs on it, else the FMA peak, int8
the int8 peak).
"""
import argparse
import datetime
import sys
from collections import defaultdict

# The targets: row, measure, kind, threshold. Kinds: "ratio"
# (relattn / PyTorch's best at the same work), "peak" (share of the FMA
# peak measured at the same thread count), "linear" (the relative terms'
# memory may grow at most threshold-fold when N doubles; 4 is quadratic).
TARGETS = [
    ("window_attention 512x49x96 nH3 shifted", "fwd", "ratio", 6.0),
    ("window_attention 512x49x96 nH3 shifted", "fwd+bwd", "ratio", 5.0),
    ("shaw_attention 4x512x512 nH8 k16", "fwd", "ratio", 10.0),
    ("shaw_attention 4x512x512 nH8 k16", "memory", "linear", 2.5),
    ("vit_attention 8x197x768 nH12", "fwd", "ratio", 3.0),
    ("swin_t B=8", "fwd", "ratio", 3.5),
    ("swin_t B=8", "fwd", "peak", 0.85),
    ("swin_t B=8", "fwd+bwd", "ratio", 4.0),
    ("vit_b_16 B=8", "fwd", "peak", 0.90),
]
LAYER_BWD_PEAK = 0.50   # every layer row's backward
SCALING = 1.7           # largest thread count over 1 thread, every row and kernel
MEMORY_FLOOR = 64 << 10  # bytes: less is no memory at all (page granularity)
NOTES = {"fwd+bwd": "training step; no stochastic depth on either side"}
PRECISIONS = ("fp32", "bf16", "int8")
# The video network's targets (issue 36, "as for swin_t"), on its row at
# whatever clip the run measured ("swin3d_t B=1 32x224x224"): relattn's bf16
# forward over its fp32 forward, and over PyTorch's best at any precision
# and setting; the classify path's decoding + sampling + transform of one
# clip at least as fast as the network's fastest forward (clips/s), so that
# the network never waits on the decoder.
VIDEO_NET = "swin3d_t B=1 "
VIDEO_BF16_OVER_FP32 = 1.7
VIDEO_BF16_OVER_TORCH = 1.5


def precision_of(row):
    """"swin_t B=8 int8" -> "int8"; a row without a precision is fp32."""
    last = row.rsplit(" ", 1)[-1]
    return last if last in PRECISIONS[1:] else "fp32"


def with_precision(row, precision):
    return row if precision == "fp32" else "%s %s" % (row, precision)


def read(paths):
    info = defaultdict(set)
    peak, mem = defaultdict(dict), defaultdict(dict)   # peak[precision][threads]
    times, fails = [], defaultdict(list)
    decode, rss = [], []   # bench_video.c's decode lines; both sides' rss lines
    for path in paths:
        with open(path) as f:
            for line in f:
                p = line.rstrip("\n").split("\t")
                if p[0] == "info":
                    info[(p[1], p[2])].add(p[3])
                elif p[0] == "peak":   # files of before have no precision: fp32
                    peak[p[4] if len(p) > 4 else "fp32"][int(p[1])] = (float(p[2]), p[3])
                elif p[0] == "memory":
                    mem[(p[1], p[2])][int(p[3])] = (float(p[4]), float(p[5]))
                elif p[0] == "time":
                    side, row, measure, kernel, threads, setting, s, flops, images = p[1:]
                    times.append(dict(side=side, row=row, measure=measure, kernel=kernel,
                                      threads=int(threads), setting=setting, s=float(s),
                                      flops=float(flops), images=int(images)))
                elif p[0] == "decode":
                    side, video, measure, threads, s, frames, clips = p[1:]
                    decode.append(dict(video=video, measure=measure, threads=int(threads),
                                       s=float(s), frames=int(frames), clips=int(clips)))
                elif p[0] == "rss":
                    side, row, setting, ready, top, life = p[1:]
                    rss.append(dict(side=side, row=row, setting=setting, ready=int(ready),
                                    peak=int(top), life=int(life)))
                elif p[0] == "fail":   # a setting that refused the row
                    side, row, measure, kernel, threads, setting, reason = p[1:]
                    fails[(row, measure)].append(dict(side=side, setting=setting, reason=reason))
    return info, peak, mem, times, fails, decode, rss


class Bench:
    def __init__(self, paths):
        self.info, self.peaks, self.mem, times, self.fails, self.decode, self.rss = read(paths)
        self.peak = self.peaks.get("fp32", {})   # {threads: (GFLOP/s, ISA)}
        self.rel = {(t["row"], t["measure"], t["kernel"], t["threads"]): t
                    for t in times if t["side"] == "relattn"}
        self.flops = {(t["row"], t["measure"]): t["flops"] for t in self.rel.values()}
        self.torch = {}   # (row, measure, form) -> PyTorch's fastest record
        for t in times:
            key = (t["row"], t["measure"], t["kernel"])
            if t["side"] == "torch" and (key not in self.torch or t["s"] < self.torch[key]["s"]):
                self.torch[key] = t
        counts = sorted(self.peak) or sorted({k[3] for k in self.rel})
        self.t1, self.tn = counts[0], counts[-1]
        self.kernel = next(iter(self.info.get(("relattn", "kernel"), {"?"})))
        rows = []
        for k in self.rel:
            if (k[0], k[1]) not in rows:
                rows.append((k[0], k[1]))
        self.rows = rows   # (row, measure) in bench.c's order

    def gflops(self, t):
        f = self.flops.get((t["row"], t["measure"]), 0)
        return f / t["s"] * 1e-9 if f else None

    def relattn(self, row, measure, kernel=None, threads=None):
        return self.rel.get((row, measure, kernel or self.kernel, threads or self.tn))

    def share(self, t):
        """Share of the peak of the record's precision at its thread count."""
        peak = self.peaks.get(precision_of(t["row"]), {})
        g, p = self.gflops(t), peak.get(t["threads"], (0, ""))[0]
        return g / p if g and p else None

    def scaling(self, row, measure, kernel=None):
        a, b = self.relattn(row, measure, kernel, self.t1), self.relattn(row, measure, kernel)
        return a["s"] / b["s"] if a and b and self.tn > self.t1 else None

    def ratio(self, row, measure, form="torch", kernel=None):
        r, t = self.relattn(row, measure, kernel), self.torch.get((row, measure, form))
        return t["s"] / r["s"] if r and t else None

    def label_scaling(self):
        return "%dT/%dT" % (self.tn, self.t1)


# ---- formatting -------------------------------------------------------------

def fx(v, fmt="%.2fx"):
    return fmt % v if v is not None else "-"


def fpct(v):
    return "%.1f%%" % (100 * v) if v is not None else "-"


def unit(row):
    """What a network's row counts: clips of a video network, else images."""
    return "clips/s" if row.startswith(VIDEO_NET) else "img/s"


def speed(b, t):
    """A record's speed: GFLOP/s, after images/s (clips/s) for a network."""
    if t is None:
        return "-"
    g = b.gflops(t)
    gs = "%.1f GFLOP/s" % g if g else "%.1f ms" % (1e3 * t["s"])
    return "%.2f %s, %s" % (t["images"] / t["s"], unit(t["row"]), gs) if t["images"] else gs


def mib(v):
    return "%.2f MiB" % (v / 2**20)


def memory_growth(m):
    """(text, growth) of the relative terms' bytes when N doubles, from
    {N: (bytes with the tables, bytes without)}: growth None if not measured
    (-1), inf from (almost) nothing to something."""
    if len(m) < 2 or min(min(v) for v in m.values()) < 0:
        return "-", None
    n0, n1 = sorted(m)[-2:]
    a, c = (max(m[n][0] - m[n][1], 0) for n in (n0, n1))
    if a >= MEMORY_FLOOR:
        grow = c / a
    else:
        grow = 1.0 if c < MEMORY_FLOOR else float("inf")
    return "+%s at N=%d, +%s at N=%d (x%.1f)" % (mib(a), n0, mib(c), n1, grow), grow


# ---- the tables ---------------------------------------------------------------

def print_all(b):
    kernels = sorted({k[2] for k in b.rel}, key=lambda k: k != b.kernel)
    sc = b.label_scaling()
    print("every row: relattn at %d threads against PyTorch's best (any setting); "
          "> 1x is relattn faster" % b.tn)
    print("%-40s %-8s %-6s %20s %7s %6s %18s %7s  %s" % (
        "row", "measure", "kernel", "relattn", "peak", sc, "PyTorch best", "ratio",
        "PyTorch's setting"))
    for row, measure in b.rows:
        for form in sorted({k[2] for k in b.torch if k[:2] == (row, measure)} or {"torch"}):
            t = b.torch.get((row, measure, form))
            for kernel in kernels if form == "torch" else [b.kernel]:
                r = b.relattn(row, measure, kernel)
                if r is None:
                    continue
                g = b.gflops(r)
                print("%-40s %-8s %-6s %20s %7s %6s %18s %7s  %s" % (
                    row, measure, kernel, "%.2f GFLOP/s" % g if g else "-", fpct(b.share(r)),
                    fx(b.scaling(row, measure, kernel)),
                    ("%.2f GFLOP/s" % b.gflops(t)) if t and g else "-",
                    fx(b.ratio(row, measure, form, kernel)),
                    (form + ": " if form != "torch" else "") + (t["setting"] if t else "-")))
    print()


def network_tables(b):
    """[(title, [cells of a line], [failure notes])] of every network and
    batch: its forward in each precision, relattn at N threads against
    PyTorch's best at that precision and PyTorch's best overall."""
    tables = []
    for row, measure in b.rows:
        fp32 = b.relattn(row, measure)
        if measure != "fwd" or precision_of(row) != "fp32" or not fp32 or not fp32["images"]:
            continue
        ways = [(p, with_precision(row, p)) for p in PRECISIONS]
        pt = [b.torch.get((r, measure, "torch")) for _, r in ways]   # PyTorch's best of each
        best = min((t for t in pt if t), key=lambda t: t["s"], default=None)
        lines, notes = [], []
        for (p, r), t in zip(ways, pt):
            rel = b.relattn(r, measure)
            failed = {}   # way -> reason, PyTorch's settings that refused this precision
            for f in b.fails.get((r, measure), []):
                failed.setdefault(f["setting"].split("; ")[0], f["reason"])
            if rel is None and t is None and not failed:
                continue
            lines.append([p, images(rel), fpct(b.share(rel)) if rel else "-",
                          images(t) if t else ("failed" if failed else "-"),
                          fpct(b.share(t)) if t else "-",
                          fx(t["s"] / rel["s"]) if rel and t else "-",
                          fx(best["s"] / rel["s"]) if rel and best else "-",
                          t["setting"] if t else "-"])
            notes += ["PyTorch %s: failed: %s" % (way, why) for way, why in failed.items()]
        if best:
            notes.append("PyTorch's best overall: %s, %s with %s" % (
                precision_of(best["row"]), images(best), best["setting"]))
        peaks = "; ".join("%s: %s" % (p, peak_text(b, p, b.tn)) for p in PRECISIONS
                          if b.peaks.get(p, {}).get(b.tn))
        tables.append(("%s, forward: relattn at %d thread%s (peaks: %s)" % (
            row, b.tn, "s" if b.tn > 1 else "", peaks), lines, notes))
    return tables


NETWORK_HEAD = ["precision", "relattn", "of peak", "PyTorch best", "of peak", "ratio",
                "over PyTorch's best overall", "PyTorch's setting"]


def images(t):
    return "%.2f %s" % (t["images"] / t["s"], unit(t["row"])) if t else "-"


def peak_text(b, precision, threads):
    g, isa = b.peaks[precision][threads]
    return "%.1f G%s/s (%s)" % (g, "OP" if precision == "int8" else "FLOP", isa)


def print_networks(b, tables):
    if not tables:
        return
    print("the networks' forward in every precision: images/s, share of the precision's peak, "
          "relattn over PyTorch's best at the precision (ratio) and overall; > 1x is relattn "
          "faster")
    fmt = "%-9s %14s %7s %14s %7s %7s %11s  %s"
    for title, lines, notes in tables:
        print(title)
        print(fmt % tuple(NETWORK_HEAD[:6] + ["over best", NETWORK_HEAD[7]]))
        for cells in lines:
            print(fmt % tuple(cells))
        for n in notes:
            print("  " + n)
        print()


def target_lines(b):
    """[(target, relattn, PyTorch best, ratio, peak, scaling, wanted, met)]"""
    lines = []
    targets = TARGETS + [(row, "bwd", "peak", LAYER_BWD_PEAK)
                         for row, measure in b.rows if measure == "bwd"]
    measured = {k[0] for k in b.rel} | {k[1] for k in b.mem}
    for row, measure, kind, want in targets:
        if row not in measured:   # a row this run left out (--what, --rows)
            continue
        name = "%s, %s" % (row, measure)
        if measure in NOTES and " B=" in row:   # the networks' training step
            name += " (%s)" % NOTES[measure]
        if kind == "linear":
            rt, rg = memory_growth(b.mem.get(("relattn", row), {}))
            tt, _ = memory_growth(b.mem.get(("torch", row), {}))
            lines.append((row + ", memory of the relative terms", rt, "naive form: " + tt,
                          "-", "-", "-", "linear: at most x%.1f per doubling of N" % want,
                          None if rg is None else rg <= want))
            continue
        r, t = b.relattn(row, measure), b.torch.get((row, measure, "torch"))
        ratio, share = b.ratio(row, measure), b.share(r) if r else None
        got = ratio if kind == "ratio" else share
        wanted = (">= %.1fx PyTorch" % want if kind == "ratio"
                  else ">= %d%% of peak" % (100 * want))
        lines.append((name, speed(b, r),
                      "%s with %s" % (speed(b, t), t["setting"]) if t else "-",
                      fx(ratio), fpct(share), fx(b.scaling(row, measure)), wanted,
                      None if got is None else got >= want))
    lines += video_target_lines(b)
    for kernel in sorted({k[2] for k in b.rel}, key=lambda k: k != b.kernel):
        if b.tn == b.t1:
            break
        s = [(b.scaling(row, m, kernel), row, m) for row, m in b.rows
             if b.scaling(row, m, kernel) is not None]
        if not s:
            continue
        worst = min(s)
        below = sum(v < SCALING for v, _, _ in s)
        lines.append(("every row and measure, kernel %s: %s" % (kernel, b.label_scaling()),
                      "worst %s (%s, %s); %d of %d below" % (fx(worst[0]), worst[1], worst[2],
                                                             below, len(s)),
                      "-", "-", "-", fx(worst[0]), "%s >= %.1fx" % (b.label_scaling(), SCALING),
                      below == 0))
    return lines


def video_rows(b):
    """The video network's fp32 forward rows the run measured."""
    return [row for row, measure in b.rows
            if row.startswith(VIDEO_NET) and measure == "fwd" and precision_of(row) == "fp32"]


def video_target_lines(b):
    """The video network's targets (VIDEO_*), as target_lines' tuples."""
    lines = []
    for row in video_rows(b):
        f32 = b.relattn(row, "fwd")
        bf = b.relattn(with_precision(row, "bf16"), "fwd")
        pt = [b.torch.get((with_precision(row, p), "fwd", "torch")) for p in PRECISIONS]
        best = min((t for t in pt if t), key=lambda t: t["s"], default=None)
        r1 = f32["s"] / bf["s"] if f32 and bf else None
        lines.append(("%s, fwd: bf16 over relattn's fp32" % row, speed(b, bf),
                      "-", fx(r1), fpct(b.share(bf)) if bf else "-",
                      fx(b.scaling(with_precision(row, "bf16"), "fwd")),
                      ">= %.1fx relattn fp32 (%s)" % (VIDEO_BF16_OVER_FP32, speed(b, f32)),
                      None if r1 is None else r1 >= VIDEO_BF16_OVER_FP32))
        r2 = best["s"] / bf["s"] if best and bf else None
        lines.append(("%s, fwd: bf16 over PyTorch's best (any precision)" % row, speed(b, bf),
                      "%s: %s with %s" % (precision_of(best["row"]), speed(b, best),
                                          best["setting"]) if best else "-",
                      fx(r2), fpct(b.share(bf)) if bf else "-", "-",
                      ">= %.1fx PyTorch's best" % VIDEO_BF16_OVER_TORCH,
                      None if r2 is None else r2 >= VIDEO_BF16_OVER_TORCH))
        # the network's fastest forward, relattn at N threads in any precision
        net = [t for t in (b.relattn(with_precision(row, p), "fwd") for p in PRECISIONS) if t]
        fast = min(net, key=lambda t: t["s"], default=None)
        for d in b.decode:
            if d["measure"] != "open+clips":
                continue
            cps = d["clips"] / d["s"]
            ratio = cps * fast["s"] / fast["images"] if fast else None
            lines.append(("%s: decoding + sampling + transform of one clip (%s), %d threads" % (
                row, d["video"], d["threads"]),
                "%.2f clips/s, %.1f frames/s" % (cps, d["frames"] / d["s"]), "-", fx(ratio),
                "-", "-", ">= the network's fastest (%s, %s)" % (
                    precision_of(fast["row"]), speed(b, fast)) if fast else ">= the network's",
                None if ratio is None else ratio >= 1.0))
    return lines


def video_tables(b):
    """[(title, head, [cells])]: the video network's memory, each side in a
    process per precision (PyTorch: per way), and the decoding of its
    clips beside its forward."""
    out = []
    if b.rss:
        lines = [[r["side"], precision_of(r["row"]), "%.0f" % (r["ready"] / 1024),
                  "%.0f" % (r["peak"] / 1024), "%.0f" % (max(r["life"], r["peak"]) / 1024),
                  r["setting"]] for r in b.rss]
        fails = [[f["side"], precision_of(row), "-", "-", "-",
                  "%s: failed: %s" % (f["setting"], f["reason"])]
                 for (row, measure), fs in b.fails.items() if measure == "rss" for f in fs]
        row = b.rss[0]["row"]
        if precision_of(row) != "fp32":
            row = row.rsplit(" ", 1)[0]
        out.append(("%s: resident memory of an inference (MiB), a process each: ready (the "
                    "model loaded and converted, the input made), the peak over two forwards, "
                    "the process's peak (loading included)" % row,
                    ["side", "precision", "ready", "forward peak", "process peak", "setting"],
                    lines + fails))
    if b.decode:
        lines = []
        for d in b.decode:
            lines.append([d["video"], d["measure"], "%.1f" % (1e3 * d["s"]),
                          "%.1f" % (d["frames"] / d["s"]),
                          "%.2f" % (d["clips"] / d["s"]) if d["clips"] else "-"])
        for row in video_rows(b):
            for p in PRECISIONS:
                for side, t in (("relattn", b.relattn(with_precision(row, p), "fwd")),
                                ("PyTorch best", b.torch.get((with_precision(row, p), "fwd",
                                                              "torch")))):
                    if t:
                        lines.append(["the network, %s %s" % (side, p), "forward",
                                      "%.1f" % (1e3 * t["s"]), "-",
                                      "%.2f" % (t["images"] / t["s"])])
        out.append(("decoding + sampling + transform of one clip (ra_video_open: the "
                    "packets counted, the first frame decoded; ra_video_clips: the stream "
                    "decoded up to the clip's last frame, its frames RGB, transformed), beside "
                    "the network's forward",
                    ["what", "measure", "ms", "frames/s", "clips/s"], lines))
    return out


def print_video(b, tables):
    for title, head, lines in tables:
        print(title)
        widths = [max(len(str(c)) for c in col) for col in zip(head, *lines)]
        for cells in [head] + lines:
            print("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip())
        print()


def yes_no(met):
    return "?" if met is None else ("yes" if met else "no")


def print_targets(b, lines):
    print("the issue's targets: relattn at %d threads, kernel %s; PyTorch at its best setting"
          % (b.tn, b.kernel))
    for ln in lines:
        print("- %s\n    relattn %s | PyTorch %s\n    ratio %s, share of peak %s, %s %s | "
              "target %s: %s" % (ln[0], ln[1], ln[2], ln[3], ln[4], b.label_scaling(), ln[5],
                                 ln[6], yes_no(ln[7]).upper()))
    met = sum(ln[7] is True for ln in lines)
    print("\n%d of %d targets met" % (met, len(lines)))


def busy_warning(b):
    """A sentence if other work shared the cores during the run, else ''."""
    load = b.info.get(("relattn", "load"))
    load = float(next(iter(load)).split()[0]) if load else 0.0
    p1, pn = b.peak.get(b.t1, (0,))[0], b.peak.get(b.tn, (0,))[0]
    if b.tn > b.t1 and p1 > 0 and pn < 0.9 * p1 * b.tn / b.t1:
        return ("Warning: the FMA peak at %d threads is %.2fx that at %d (load average %.2f at "
                "the start): other work shared the cores, so the %d-thread figures understate "
                "what the machine can do." % (b.tn, pn / p1, b.t1, load, b.tn))
    if load > 0.5:
        return ("Warning: load average %.2f at the start: other work may have shared the "
                "cores." % load)
    return ""


def machine_line(b):
    def one(side, key):
        return ", ".join(sorted(b.info.get((side, key), {"?"})))
    peaks = ", ".join("%.1f GFLOP/s at %d thread%s" % (p[0], n, "s" if n > 1 else "")
                      for n, p in sorted(b.peak.items()))
    i8 = b.peaks.get("int8", {})
    if i8:
        peaks += "; int8 peak (%s): %s" % (next(iter(i8.values()))[1], ", ".join(
            "%.1f GOP/s at %d thread%s" % (p[0], n, "s" if n > 1 else "")
            for n, p in sorted(i8.items())))
    isa = next(iter(b.peak.values()))[1] if b.peak else "?"
    return ("%s, %s cores, %s. BLAS: %s; relattn's OpenBLAS on kernel set %s (its own "
            "products on its kernel below), PyTorch %s at its best of kernel sets %s. FMA peak "
            "(%s, measured in the run): %s. relattn kernel %s; medians of %s runs; load average "
            "at the start %s." % (
                one("relattn", "cpu"), one("relattn", "cores"), datetime.date.today().isoformat(),
                one("relattn", "blas"), one("relattn", "blas_core"), one("torch", "torch"),
                one("torch", "blas_core"), isa, peaks, b.kernel, one("relattn", "reps"),
                one("relattn", "load").split(" ")[0] if b.info.get(("relattn", "load")) else "?"))


def write_markdown(path, b, lines, tables, vtables=()):
    head = ["target", "relattn (%d threads)" % b.tn, "PyTorch best (setting)", "ratio",
            "share of peak", b.label_scaling(), "target", "met"]
    with open(path, "w") as f:
        f.write("Machine: %s\n\n" % machine_line(b))
        if busy_warning(b):
            f.write(busy_warning(b) + "\n\n")
        f.write("| " + " | ".join(head) + " |\n")
        f.write("|" + "---|" * len(head) + "\n")
        for ln in lines:
            cells = list(ln[:7]) + [yes_no(ln[7])]
            f.write("| " + " | ".join(c.replace("|", "/") for c in cells) + " |\n")
        for title, rows, notes in tables:
            f.write("\n%s\n\n| %s |\n|%s\n" % (title, " | ".join(NETWORK_HEAD),
                                                "---|" * len(NETWORK_HEAD)))
            for cells in rows:
                f.write("| " + " | ".join(c.replace("|", "/") for c in cells) + " |\n")
            if notes:
                f.write("\n" + "".join("- %s\n" % n.replace("|", "/") for n in notes))
        for title, head, rows in vtables:
            f.write("\n%s\n\n| %s |\n|%s\n" % (title, " | ".join(head), "---|" * len(head)))
            for cells in rows:
                f.write("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--markdown", help="write the targets' summary here as Markdown")
    a = ap.parse_args()
    b = Bench(a.results)
    if not b.rel:
        sys.exit("summary: no relattn measurements in " + " ".join(a.results))
    print("machine: " + machine_line(b))
    print(busy_warning(b) + "\n")
    print_all(b)
    tables = network_tables(b)
    print_networks(b, tables)
    vtables = video_tables(b)
    print_video(b, vtables)
    lines = target_lines(b)
    print_targets(b, lines)
    if a.markdown:
        write_markdown(a.markdown, b, lines, tables, vtables)
        print("markdown summary: " + a.markdown)


if __name__ == "__main__":
    main()
