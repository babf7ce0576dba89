"""Regenerate relattn's test fixtures, or check that a regeneration
reproduces the committed ones.

Run with Debian's python3-torch and python3-torchvision (/usr/bin/python3):

    tools/fixtures.py --list                   the families, what they write
    tools/fixtures.py all [-o DIR]             regenerate every fixture family
    tools/fixtures.py FAMILY... [-o DIR]       regenerate some
    tools/fixtures.py check [all|FAMILY...]    regenerate into a temporary
                                               directory and compare
        [--rtol R] [--ref DIR] [--keep DIR]

Families write into their home directory (tests/fixtures; examples/ and
tests/corpus for the two families that are not test fixtures) or into -o DIR.
`all` is every family whose home is tests/fixtures; `check all` also reports
the files of tests/fixtures that no family writes.

check compares every file a family writes with the committed one: a
safetensors file must hold the same tensor names, dtypes, shapes and
__metadata__, integer and bool tensors equal, float tensors within --rtol
(default 5e-5) of the tensor's scale, max |committed| (the measure of the C
tests, which ask 1e-4); a tensor under a millionth of the file's largest
(a sum that cancels to 0: its terms' rounding) on the file's scale. Float32 results of another PyTorch build or CPU
(other GEMM kernels, other summation orders) are not bit-identical: against
a float64 run of the same case, the committed and a regenerated SwinV2
network gradient (v2_net_tv_pad) are each off by up to 1.1e-5 of the scale,
and differ from each other by as much; forward values differ by under 1e-6.
A changed seed, case or formula moves values by far more than 5e-5. F16 and
BF16 tensors get one unit in the last place of their own precision on top
(a value near a rounding boundary may round the other way). Other files
(case lists, pictures) must be byte-identical; a picture that is not is
compared by its decoded pixels. The exit status is 0 only if every family
reproduces.
"""

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no tools/__pycache__ in the tree
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import st  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "fixtures")

# name, home directory, module, function(out_dir), families it reads from
# out_dir, what it writes
FAMILIES = [
    ("attention", FIXTURES, "make_fixtures", "write_attention", (),
     "the reference attention modules (ViT, Swin, RSTT 3-D) and Shaw: cases.txt"),
    ("windows", FIXTURES, "make_fixtures", "write_windows", (),
     "padding, roll, partition and shifted-window masks: windows.txt"),
    ("index", FIXTURES, "make_fixtures", "write_indices", (),
     "relative position indices (2-D, 3-D, clipped): indices.txt"),
    ("relpos", FIXTURES, "relpos_twin", "write_fixtures", (),
     "T5, ALiBi, decomposed and RoPE attention: relpos_cases.txt"),
    ("nn", FIXTURES, "make_nn_fixtures", "write_fixtures", (),
     "layers, loss, AdamW with its schedule, the RNG: nn_*"),
    ("swin", FIXTURES, "make_model_fixtures", "write_fixtures", (),
     "Swin blocks and networks (official, timm, torchvision): nets.txt"),
    ("swin_grad", FIXTURES, "make_grad_fixtures", "write_fixtures", ("swin",),
     "autograd of some swin cases: grads.txt"),
    ("swinv2", FIXTURES, "swinv2_twin", "write_fixtures", (),
     "SwinV2 layer and networks with gradients: swinv2_layers.txt, "
     "swinv2_grads.txt"),
    ("swin3d", FIXTURES, "make_swin3d_fixtures", "write_fixtures", (),
     "3-D window blocks (Video Swin self, RSTT cross): nets3d.txt"),
    ("swin3d_grad", FIXTURES, "swin3d_twin", "write_grad_fixtures", (),
     "autograd of 3-D window blocks: grads3d.txt"),
    ("vit", FIXTURES, "make_vit_fixtures", "write_fixtures", (),
     "ViT networks (timm twin, torchvision): vit_nets.txt"),
    ("vit_grad", FIXTURES, "make_vit_grad_fixtures", "write_fixtures", (),
     "autograd of ViT networks: vit_grads.txt"),
    ("image", FIXTURES, "make_image_fixtures", "write_fixtures", (),
     "two pictures and torchvision's evaluation transform of them: img_*"),
    ("table", FIXTURES, "make_table_fixtures", "write_fixtures", (),
     "bias tables resized bicubically: table_resize.txt"),
    ("torch", FIXTURES, "make_torch_fixtures", "write_fixtures", (),
     "PyTorch checkpoints (torch.save, and hand-made refusals), what they hold: pt_*"),
    ("torch_seeds", os.path.join(ROOT, "fuzz", "corpus", "pickle"), "make_torch_fixtures",
     "write_seeds", (), "the pickles that seed fuzz/fuzz_pickle.c (fuzz/corpus/pickle)"),
    ("example", os.path.join(ROOT, "examples"), "make_example", "write_fixtures", (),
     "the README's example model and input (examples/)"),
    ("corpus", os.path.join(ROOT, "tests", "corpus"), "make_corpus", "build", (),
     "the command-line corpus, numpy only (tests/corpus)"),
]
BY_NAME = {f[0]: f for f in FAMILIES}
ALL = [f[0] for f in FAMILIES if f[1] == FIXTURES]


def generate(name, out_dir, log=print):
    """Run one family's generator into out_dir (created if absent) and
    return the names of the files it wrote."""
    _, _, module, func, requires, _ = BY_NAME[name]
    os.makedirs(out_dir, exist_ok=True)
    for r in requires:  # e.g. swin_grad reads swin's models and inputs
        if not os.path.exists(os.path.join(out_dir, _list_file(r))):
            generate(r, out_dir, log)
    before = _stamps(out_dir)
    t0 = time.time()
    getattr(importlib.import_module(module), func)(out_dir)
    after = _stamps(out_dir)
    written = sorted(f for f, s in after.items() if before.get(f) != s)
    log("%-12s %3d files  %5.1f s  %s" % (name, len(written), time.time() - t0, out_dir))
    return written


def _list_file(name):
    return {"swin": "nets.txt"}[name]


def _stamps(d):
    out = {}
    for f in os.listdir(d):
        s = os.stat(os.path.join(d, f))
        out[f] = (s.st_ino, s.st_mtime_ns, s.st_size)
    return out


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------

ULP = {"F16": 2.0 ** -10, "BF16": 2.0 ** -7}


def compare_safetensors(new_path, ref_path, rtol):
    """-> (list of problems, worst relative error, where)."""
    import numpy as np
    new, new_meta = st.read(new_path)
    ref, ref_meta = st.read(ref_path)
    new_dt, ref_dt = st.dtypes(new_path), st.dtypes(ref_path)
    problems = []
    if new_meta != ref_meta:
        problems.append("metadata %r != committed %r" % (new_meta, ref_meta))
    if set(new) != set(ref):
        problems.append("tensors: extra %s, missing %s"
                        % (sorted(set(new) - set(ref)), sorted(set(ref) - set(new))))
    worst, where = 0.0, ""
    # A tensor under a millionth of the file's largest is 0 in exact
    # arithmetic, the rounding of a sum that cancels (shaw_k0's
    # relative_keys gradient: with one relative position, sums of rows of
    # softmax's gradient): it is measured on the file's scale.
    floats = [np.abs(v.astype(np.float64)).max() for v in ref.values()
              if v.dtype.kind == "f" and v.size and np.isfinite(v.astype(np.float64)).all()]
    file_scale = float(max(floats)) if floats else 0.0
    for k in sorted(set(new) & set(ref)):
        a, b = new[k], ref[k]
        if new_dt[k] != ref_dt[k] or a.shape != b.shape:
            problems.append("%s: %s%s != committed %s%s"
                            % (k, new_dt[k], list(a.shape), ref_dt[k], list(b.shape)))
            continue
        if a.dtype.kind != "f":
            if not np.array_equal(a, b):
                problems.append("%s: %d of %d values differ"
                                % (k, int((a != b).sum()), a.size))
            continue
        if a.size == 0:
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        if not np.isfinite(a64).all() or not np.isfinite(b64).all():
            if not np.array_equal(a64, b64, equal_nan=True):
                problems.append("%s: non-finite values differ" % k)
            continue
        diff = float(np.abs(a64 - b64).max())
        scale = float(np.abs(b64).max())
        scale = file_scale if scale < 1e-6 * file_scale else scale
        err = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
        if err > worst:
            worst, where = err, k
        if err > rtol + ULP.get(ref_dt[k], 0.0):
            problems.append("%s: max |diff| %.3g, %.3g of the scale %.3g" % (k, diff, err, scale))
    return problems, worst, where


def _count_tensors(path):
    try:
        return len(st.dtypes(path))
    except Exception:  # the corpus's malformed files (even deep JSON nesting)
        return 0


def compare_file(new_path, ref_path, rtol):
    """None if the bytes are equal; else a safetensors file's
    (problems, worst, where), or another file's problems."""
    with open(new_path, "rb") as f:
        a = f.read()
    with open(ref_path, "rb") as f:
        b = f.read()
    if a == b:
        return None
    if new_path.endswith(".safetensors"):
        try:
            return compare_safetensors(new_path, ref_path, rtol)
        except Exception as e:  # a malformed file of the corpus
            return ["bytes differ, and a file is not valid safetensors (%s)" % e]
    if new_path.endswith((".png", ".jpg")):
        import numpy as np
        from PIL import Image
        pa = np.asarray(Image.open(new_path).convert("RGB"), dtype=np.int16)
        pb = np.asarray(Image.open(ref_path).convert("RGB"), dtype=np.int16)
        if pa.shape == pb.shape and (pa == pb).all():
            return []  # another encoder's bytes, the same pixels
        return ["pixels differ (%s vs %s)" % (pa.shape, pb.shape)]
    return ["bytes differ (%d vs %d bytes)" % (len(a), len(b))]


def check(names, rtol, keep=None, ref=None, log=print):
    """Regenerate the families into a temporary directory and compare with
    ref (default: each family's home); -> ok."""
    tmp = keep or tempfile.mkdtemp(prefix="relattn-fixtures.")
    ok = True
    produced = {}
    try:
        for name in names:
            d = os.path.join(tmp, name)  # one directory a family: clean inputs
            written = generate(name, d, log=lambda *_: None)
            ref_dir = ref or BY_NAME[name][1]
            bad, worst, where, nt, same = [], 0.0, "", 0, 0
            for f in written:
                produced.setdefault(ref_dir, set()).add(f)
                ref_path = os.path.join(ref_dir, f)
                if not os.path.exists(ref_path):
                    bad.append("%s: not committed" % f)
                    continue
                p = compare_file(os.path.join(d, f), ref_path, rtol)
                if p is None:
                    p = []
                    same += 1
                    nt += _count_tensors(ref_path)
                elif isinstance(p, tuple):
                    p, w, k = p
                    nt += _count_tensors(ref_path)
                    if w > worst:
                        worst, where = w, "%s:%s" % (f, k)
                bad += ["%s: %s" % (f, e) for e in p]
            status = "reproduces" if not bad else "DIFFERS"
            log("%-12s %-10s %3d files (%3d byte-identical) %4d tensors, max rel err %.2g%s"
                % (name, status, len(written), same, nt, worst, "  (%s)" % where if where else ""))
            for e in bad:
                log("    " + e)
            ok = ok and not bad
        if set(ALL) <= set(names):
            fx = ref or FIXTURES
            orphans = sorted(set(os.listdir(fx)) - produced.get(fx, set()))
            log("files of %s no family writes: %s"
                % (os.path.relpath(fx), " ".join(orphans) if orphans else "none"))
    finally:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="families: " + ", ".join(f[0] for f in FAMILIES) + " (all: " + ", ".join(ALL) + ")")
    ap.add_argument("what", nargs="*", metavar="all|check|FAMILY")
    ap.add_argument("--list", action="store_true", help="list the families")
    ap.add_argument("-o", "--out", metavar="DIR",
                    help="output directory (default: each family's home, tests/fixtures)")
    ap.add_argument("--rtol", type=float, default=5e-5,
                    help="check: tolerance relative to each tensor's max |value|")
    ap.add_argument("--keep", metavar="DIR", help="check: regenerate into DIR and keep it")
    ap.add_argument("--ref", metavar="DIR",
                    help="check: compare with DIR (default: each family's home, tests/fixtures)")
    args = ap.parse_args(argv)
    if args.list:
        for name, home, _, _, req, desc in FAMILIES:
            extra = "" if home == FIXTURES else "  [not in all; home %s]" % os.path.relpath(home, ROOT)
            print("%-12s %s%s%s" % (name, desc, "  (reads %s)" % ",".join(req) if req else "",
                                    extra))
        return 0
    what = list(args.what)
    checking = bool(what) and what[0] == "check"
    if checking:
        what = what[1:] or ["all"]
    if not what:
        ap.error("say all, check or a family (see --list)")
    names = []
    for w in what:
        for n in (ALL if w == "all" else [w]):
            if n not in BY_NAME:
                ap.error("unknown family %r (see --list)" % n)
            if n not in names:
                names.append(n)
    _setup_torch(names)
    if checking:
        if args.out:
            ap.error("check writes into a temporary directory (--keep DIR to keep it)")
        return 0 if check(names, args.rtol, args.keep, args.ref) else 1
    for n in names:
        generate(n, _out_dir(n, args.out))
    return 0


def _out_dir(name, out):
    """-o DIR, or the family's home; a family whose home is not
    tests/fixtures writes into DIR/FAMILY (the corpus clears its directory
    of earlier .safetensors files)."""
    home = BY_NAME[name][1]
    if out is None:
        return home
    return os.path.normpath(out if home == FIXTURES else os.path.join(out, name))


def _setup_torch(names=None):
    if all(BY_NAME[n][2] == "make_corpus" for n in (names or [])):
        return  # numpy only
    try:
        import torch
    except ImportError:
        sys.exit("fixtures.py needs PyTorch: /usr/bin/python3 with python3-torch")
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)


def script_main(groups, argv=None):
    """The command line of a generator script run by itself: --out DIR
    (default tests/fixtures) and, with several groups of families,
    --family GROUP|all (default all)."""
    ap = argparse.ArgumentParser(
        description="regenerate the families %s (as tools/fixtures.py does)"
        % ", ".join(n for g in groups.values() for n in g))
    ap.add_argument("--out", help="output directory (default: the family's home, tests/fixtures)")
    if len(groups) > 1:
        ap.add_argument("--family", choices=["all"] + list(groups), default="all")
    args = ap.parse_args(argv)
    family = getattr(args, "family", "all")
    names = [n for g, ns in groups.items() if family in ("all", g) for n in ns]
    _setup_torch(names)
    for n in names:
        generate(n, _out_dir(n, args.out))


if __name__ == "__main__":
    sys.exit(main())
