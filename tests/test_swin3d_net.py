"""test_swin3d_net.py - relattn's swin3d network (torchvision's
SwinTransformer3d, Video Swin) against its PyTorch twin
(tools/swin3d_net_twin.py), through the CLI, on small configurations made
here (random weights, norms included), in a temporary directory:

  1. `relattn forward` gives the twin's logits within 1e-5 of their largest
     magnitude, and `relattn backward` y, grad.x and every parameter's
     gradient within 1e-4 of each tensor's largest magnitude, for each
     configuration (T, H, W not multiples of the patch or the window;
     windows clamped to the input; shifts on) and each file form: the
     twin's state_dict under torchvision's names (.pth, safetensors) and
     under the official Video Swin names (.pth nested under 'state_dict'
     with backbone. / cls_head.fc_cls, safetensors); the hyperparameters
     are read off the weights (no metadata);
  2. `relattn inspect` shows the arch and the inferred values; `relattn
     convert` writes a model file under the file's own names, which runs
     as the original;
  3. bf16 and int8 (--precision): the products of the Linear layers as
     relattn's scalar reference path computes them, against the twin with
     the same roundings (tools/precision_twin.py's): the logits, and each
     stage's feature map (forward --features) against the twin's stages;
  4. inconsistent files are refused with one line and exit 65.
Exit 77 (skipped) without PyTorch, or a failure with RELATTN_REQUIRE_TORCH=1.
  5. `relattn convert --inflate swin3d` of a 2-D Swin (a fixture) against
     the official Video Swin's inflate_weights written again here.
  python3 test_swin3d_net.py RELATTN_BINARY TOOLS_DIR FIXTURES_DIR"""
import os
import subprocess
import sys
import tempfile

from checks import check, done, need_torch

np, torch = need_torch("numpy", "torch")
relattn, tools, fixtures = sys.argv[1:4]
sys.path.insert(0, tools)
sys.dont_write_bytecode = True
import st  # noqa: E402
from swin3d_net_twin import Swin3d, to_official  # noqa: E402
import precision_twin  # noqa: E402

# (constructor arguments, input (B, C_in, T, H, W))
CONFIGS = [
    (dict(patch=(2, 4, 4), embed=16, depths=(1, 2), heads=(2, 4), window=(2, 3, 3), classes=5),
     (2, 3, 5, 19, 23)),
    (dict(patch=(2, 4, 4), embed=24, depths=(2, 2), heads=(3, 6), window=(8, 7, 7), classes=7),
     (1, 3, 7, 30, 33)),
    (dict(patch=(1, 2, 2), embed=12, depths=(3,), heads=(3,), window=(3, 2, 2), classes=4,
          mlp_ratio=2.5, in_chans=2), (2, 2, 4, 7, 6)),
]


def run(*args, expect=0, env=None):
    r = subprocess.run([relattn] + [str(a) for a in args], capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})))
    if r.returncode != expect:
        print("FAIL: relattn %s: exit %d (want %d): %s" % (" ".join(map(str, args)), r.returncode,
                                                           expect, r.stderr.strip()))
    return r


def worst_of(got, want):
    """The largest difference of each tensor of want, of its scale; the
    worst name."""
    worst, name = 0.0, ""
    for k, e in want.items():
        if k not in got or got[k].shape != e.shape:
            return float("inf"), k + " (missing or misshapen)"
        s = float(np.abs(e).max()) or 1.0
        r = float(np.abs(got[k] - e).max()) / s
        if not r <= worst:
            worst, name = (r, k) if r == r else (float("inf"), k)
    return worst, name


def files(tmp, m, depths):
    """The twin's weights in each form: name -> (path, naming scheme)."""
    tv = m.state_dict()
    off = to_official(tv, depths)
    out = {}
    p = os.path.join(tmp, "tv.pth")
    torch.save(tv, p)
    out["torchvision .pth"] = (p, "torchvision")
    p = os.path.join(tmp, "official.pth")
    torch.save({"meta": {"epoch": 30}, "state_dict": off}, p)
    out["official .pth"] = (p, "video_swin")
    p = os.path.join(tmp, "tv.safetensors")
    st.write(p, {k: v.numpy() for k, v in tv.items()})
    out["torchvision safetensors"] = (p, "torchvision")
    p = os.path.join(tmp, "official.safetensors")
    st.write(p, {k: v.numpy() for k, v in off.items()})
    out["official safetensors"] = (p, "video_swin")
    return out


def twin_run(m, x, dy, depths, official):
    x = x.clone().requires_grad_(True)
    m.zero_grad()
    y = m(x)
    (y * dy).sum().backward()
    grads = {n: p.grad for n, p in m.named_parameters()}
    if official:
        grads = to_official(grads, depths)
    out = {"y": y.detach().numpy(), "grad.x": x.grad.numpy()}
    out.update(("grad." + k, v.numpy()) for k, v in grads.items())
    return out


def test_exact(tmp):
    for ci, (cfg, shape) in enumerate(CONFIGS):
        torch.manual_seed(10 + ci)
        m = Swin3d(**cfg).randomize(ci).eval()
        x = torch.randn(*shape)
        dy = torch.randn(shape[0], cfg["classes"])
        inp = os.path.join(tmp, "in%d.safetensors" % ci)
        st.write(inp, {"x": x.numpy(), "dy": dy.numpy()})
        with torch.no_grad():
            y = m(x).numpy()
        for form, (path, scheme) in files(tmp, m, cfg["depths"]).items():
            out = os.path.join(tmp, "y.safetensors")
            if run("forward", path, inp, "-o", out).returncode == 0:
                w, _ = worst_of(st.read(out)[0], {"y": y})
                print("config %d %s forward: worst %.3g of scale" % (ci, form, w))
                check(w <= 1e-5, "config %d %s: forward off by %.3g" % (ci, form, w))
            want = twin_run(m, x, dy, cfg["depths"], scheme == "video_swin")
            if run("backward", path, inp, "-o", out).returncode == 0:
                w, name = worst_of(st.read(out)[0], want)
                print("config %d %s backward: %d tensors, worst %.3g of scale (%s)"
                      % (ci, form, len(want), w, name))
                check(w <= 1e-4, "config %d %s: backward off by %.3g (%s)" % (ci, form, w, name))
            else:
                check(False, "config %d %s: backward failed" % (ci, form))


def moved_as_twin(label, r, f, tw):
    """relattn's r in a reduced precision against fp32's f and the twin's
    tw in that precision: r moves from f by what the twin does (0.5x to
    2x) and stays as close to the twin (test_precision.sh's criterion: a
    reduced precision turns on values at rounding boundaries, which the
    last bit of a float32 sum moves). The three distances (relative)."""
    n2 = np.linalg.norm
    r, f, tw = (np.asarray(a, dtype=np.float64) for a in (r, f, tw))
    if r.shape != f.shape:
        check(False, "%s: shape %s, fp32's %s" % (label, r.shape, f.shape))
        return 0.0, 0.0, 0.0
    et, er, d = n2(tw - f) / n2(f), n2(r - f) / n2(f), n2(r - tw) / n2(tw)
    check(0.5 * et <= er <= 2 * et and d <= 2 * et,
          "%s: relattn %.2e, twin %.2e, apart %.2e" % (label, er, et, d))
    return er, et, d


def test_precisions(tmp):
    """--precision bf16 / int8 against the twin with the same rounding
    points (tools/precision_twin.py), moved_as_twin's criterion: the logits,
    and each stage's feature map (forward --features all)."""
    n2 = np.linalg.norm
    for ci, (cfg, shape) in enumerate(CONFIGS[:2]):
        torch.manual_seed(20 + ci)
        m = Swin3d(**cfg).randomize(ci).eval()
        x = torch.randn(*shape)
        path = os.path.join(tmp, "p.pth")
        torch.save(m.state_dict(), path)
        inp = os.path.join(tmp, "px.safetensors")
        st.write(inp, {"x": x.numpy()})
        with torch.no_grad():
            f = m(x).double().numpy()
        for p in ("bf16", "int8"):
            t = Swin3d(**cfg).eval()
            t.load_state_dict(m.state_dict())
            precision_twin.put_precision(t, p)
            with torch.no_grad():
                tw = t(x).double().numpy()
            out = os.path.join(tmp, "py.safetensors")
            if run("forward", path, inp, "-o", out, "--precision", p).returncode:
                check(False, "config %d %s: forward failed" % (ci, p))
                continue
            r = st.read(out)[0]["y"].astype(np.float64)
            er, et, d = moved_as_twin("config %d %s" % (ci, p), r, f, tw)
            print("config %d %s: relattn moves the logits by %.2e, the twin by %.2e; they differ "
                  "by %.2e" % (ci, p, er, et, d))
            # the scalar reference kernels (RELATTN_KERNEL=ref): the same rounding
            # points, the sums in another order
            ref = os.path.join(tmp, "pr.safetensors")
            if run("forward", path, inp, "-o", ref, "--precision", p,
                   env={"RELATTN_KERNEL": "ref"}).returncode == 0:
                rr = st.read(ref)[0]["y"].astype(np.float64)
                dr = n2(rr - r) / n2(r)
                print("config %d %s: the reference path is %.2e from the default kernels"
                      % (ci, p, dr))
                check(dr <= 2 * et, "config %d %s: reference path %.2e apart" % (ci, p, dr))
            # the feature maps from the forward in that precision, on 2 threads
            if run("forward", path, inp, "-o", out, "--precision", p, "--features", "all",
                   "--threads", 2).returncode == 0:
                maps = st.read(out)[0]
                with torch.no_grad():
                    fs, ts = m.stages(x), t.stages(x)
                for s, (fm, tm) in enumerate(zip(fs, ts)):
                    got = maps.get("features.%d" % s, np.zeros(0))
                    ms = moved_as_twin("config %d %s stage %d" % (ci, p, s), got, fm, tm)
                    print("config %d %s stage %d: relattn moves the map by %.2e, the twin by "
                          "%.2e; they differ by %.2e" % ((ci, p, s) + ms))
            else:
                check(False, "config %d %s: forward --features failed" % (ci, p))
        # training in bf16: the gradient moves from fp32's by the precision's step,
        # on the default kernels and on the reference path alike
        inb = os.path.join(tmp, "pb.safetensors")
        st.write(inb, {"x": x.numpy(), "dy": torch.randn(shape[0], cfg["classes"]).numpy()})
        g = {}
        for name, opts, env in (("fp32", [], None), ("bf16", ["--precision", "bf16"], None),
                                ("bf16 ref", ["--precision", "bf16"], {"RELATTN_KERNEL": "ref"})):
            out = os.path.join(tmp, "pg.safetensors")
            if run("backward", path, inb, "-o", out, *opts, env=env).returncode == 0:
                t = st.read(out)[0]
                g[name] = np.concatenate([t[k].astype(np.float64).ravel() for k in sorted(t)
                                          if k.startswith("grad.")])
        if len(g) == 3:
            e1 = n2(g["bf16"] - g["fp32"]) / n2(g["fp32"])
            e2 = n2(g["bf16 ref"] - g["bf16"]) / n2(g["fp32"])
            print("config %d bf16 training: gradient %.2e from fp32's, reference path %.2e from "
                  "the default kernels" % (ci, e1, e2))
            check(1e-5 <= e1 <= 5e-2 and e2 <= 1e-3,
                  "config %d bf16 training: %.2e from fp32, %.2e between paths" % (ci, e1, e2))
        else:
            check(False, "config %d: a bf16 backward failed" % ci)


def test_cli(tmp):
    """inspect, convert, and the refusals of inconsistent files."""
    cfg, shape = CONFIGS[0]
    m = Swin3d(**cfg).randomize(5).eval()
    x = torch.randn(*shape)
    inp = os.path.join(tmp, "cx.safetensors")
    st.write(inp, {"x": x.numpy()})
    forms = files(tmp, m, cfg["depths"])
    for form, (path, scheme) in forms.items():
        r = run("inspect", path)
        check(r.returncode == 0 and "arch:           swin3d" in r.stdout and
              "naming scheme:  %s" % scheme in r.stdout and "window_size          2,3,3" in r.stdout
              and "depths               1,2" in r.stdout,
              "inspect %s: %s" % (form, r.stdout[:400]))
        conv = os.path.join(tmp, "conv.safetensors")
        y0, y1 = os.path.join(tmp, "y0.safetensors"), os.path.join(tmp, "y1.safetensors")
        ok = (run("convert", path, "-o", conv).returncode == 0 and
              run("forward", path, inp, "-o", y0).returncode == 0 and
              run("forward", conv, inp, "-o", y1).returncode == 0)
        t, meta = st.read(conv)
        want = m.state_dict() if scheme == "torchvision" else to_official(m.state_dict(),
                                                                          cfg["depths"])
        names = sorted(k for k in want if not k.endswith("relative_position_index"))
        check(ok and sorted(t) == names and meta.get("arch") == "swin3d" and
              np.array_equal(st.read(y0)[0]["y"], st.read(y1)[0]["y"]),
              "convert %s: the names, metadata or outputs differ" % form)
    print("inspect and convert: the four forms")
    # inconsistent files: one line, exit 65
    tv = {k: v.clone() for k, v in m.state_dict().items()}
    bad = []
    b1 = dict(tv)
    b1["features.0.0.attn.relative_position_bias_table"] = torch.zeros(7, 2)
    bad.append(("a bias table of 7 rows", b1))
    b2 = dict(tv)
    b2["features.2.1.attn.relative_position_index"] = tv["features.2.1.attn.relative_position_index"].flip(0)
    bad.append(("a wrong relative_position_index", b2))
    b3 = dict(tv)
    b3["features.2.1.attn.q_bias"] = torch.zeros(32)
    bad.append(("an unexpected tensor", b3))
    b4 = dict(tv)
    del b4["features.2.0.attn.proj.bias"]
    bad.append(("a missing tensor", b4))
    b5 = dict(tv)
    b5["features.1.reduction.weight"] = torch.zeros(32, 60)
    bad.append(("a merge of the wrong width", b5))
    b6 = dict(tv)
    b6["features.9.0.norm1.weight"] = torch.ones(16)
    bad.append(("a block of no stage", b6))
    off = to_official(tv, cfg["depths"])
    off["backbone.layers.1.downsample.reduction.weight"] = torch.zeros(64, 128)
    bad.append(("a merge after the last stage (official names)", off))
    for what, sd in bad:
        path = os.path.join(tmp, "bad.pth")
        torch.save(sd, path)
        r = run("forward", path, inp, "-o", os.path.join(tmp, "b.safetensors"), expect=65)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 65 and len(lines) == 1, "%s: exit %d, %r" % (what, r.returncode,
                                                                         r.stderr))
        print("refused, %s: %s" % (what, lines[0] if lines else ""))
    # a clip of the wrong channels
    p0 = forms["torchvision .pth"][0]
    st.write(inp, {"x": torch.randn(1, 2, 4, 8, 8).numpy()})
    r = run("forward", p0, inp, "-o", os.path.join(tmp, "b.safetensors"), expect=65)
    check(r.returncode == 65 and len(r.stderr.strip().splitlines()) == 1, "2 channels: %r" % r.stderr)


def test_torchvision_size(tmp):
    """swin3d_t's own configuration (window (8, 7, 7), clamped on a small
    clip) as a torchvision state dict: the builder's transform is recorded
    and the logits are the twin's."""
    torch.manual_seed(3)
    m = Swin3d().eval()
    path = os.path.join(tmp, "swin3d_t.pth")
    torch.save(m.state_dict(), path)
    x = torch.randn(1, 3, 3, 40, 36)
    inp = os.path.join(tmp, "tx.safetensors")
    st.write(inp, {"x": x.numpy()})
    r = run("inspect", path)
    for line in ("transform.resize     shorter 256", "mean                 0.485,0.456,0.406",
                 "num_frames           32", "window_size          8,7,7"):
        check(line in r.stdout, "swin3d_t inspect lacks %r" % line)
    out = os.path.join(tmp, "ty.safetensors")
    if run("forward", path, inp, "-o", out).returncode == 0:
        with torch.no_grad():
            y = m(x).numpy()
        w, _ = worst_of(st.read(out)[0], {"y": y})
        print("swin3d_t (torchvision's sizes) forward: worst %.3g of scale" % w)
        check(w <= 1e-5, "swin3d_t forward off by %.3g" % w)


def inflate_reference(sd2, pt, window, w2):
    """The official Video Swin's inflate_weights, written again: the 2-D
    state dict (official names) -> the 3-D tensors under torchvision's names."""
    F = torch.nn.functional
    out = {}
    for k, v in sd2.items():
        if "relative_position_index" in k or "attn_mask" in k:   # recomputed, not loaded
            continue
        v = torch.from_numpy(v)
        if k == "patch_embed.proj.weight":
            v = v.unsqueeze(2).repeat(1, 1, pt, 1, 1) / pt
        elif k.endswith("relative_position_bias_table"):
            L1, nh = v.shape
            L2 = (2 * window[1] - 1) * (2 * window[2] - 1)
            if L1 != L2:
                s1 = int(L1 ** 0.5)
                v = F.interpolate(v.permute(1, 0).view(1, nh, s1, s1),
                                  size=(2 * window[1] - 1, 2 * window[2] - 1), mode="bicubic")
                v = v.view(nh, L2).permute(1, 0)
            v = v.repeat(2 * window[0] - 1, 1)
        p = k.split(".")
        if p[0] == "layers" and p[2] == "blocks":
            rest = ".".join(p[4:]).replace("mlp.fc1.", "mlp.0.").replace("mlp.fc2.", "mlp.3.")
            k = "features.%d.%s.%s" % (2 * int(p[1]), p[3], rest)
        elif p[0] == "layers":
            k = "features.%d.%s" % (2 * int(p[1]) + 1, ".".join(p[3:]))
        out[k] = v.numpy()
    return out


def test_inflate(tmp, fixtures):
    """convert --inflate swin3d of a 2-D Swin against inflate_reference."""
    src = os.path.join(fixtures, "net_swin_official.model.safetensors")
    sd2, meta = st.read(src)
    w2 = int(round((sd2["layers.0.blocks.0.attn.relative_position_bias_table"].shape[0]) ** 0.5
                   + 1) // 2)
    for pt, window in ((2, (4, w2, w2)), (3, (3, 5, 4))):
        out = os.path.join(tmp, "inflated.safetensors")
        r = run("convert", src, "--inflate", "swin3d", "--patch-frames", pt, "--window3d",
                "%d,%d,%d" % window, "-o", out)
        if r.returncode:
            check(False, "inflate %s: %s" % (window, r.stderr))
            continue
        got, gm = st.read(out)
        want = inflate_reference(sd2, pt, window, w2)
        w, name = worst_of(got, want)
        print("inflate patch %d, window %s: %d tensors, worst %.3g of scale (%s)"
              % (pt, window, len(want), w, name))
        check(w <= 1e-6 and len(got) == len(want) and gm.get("arch") == "swin3d" and
              gm.get("window_size") == "%d,%d,%d" % window,
              "inflate %s: %.3g (%s), %d tensors for %d" % (window, w, name, len(got), len(want)))
        # the inflated model runs
        inp = os.path.join(tmp, "ix.safetensors")
        st.write(inp, {"x": np.random.default_rng(0).standard_normal((1, 3, 5, 20, 20))
                       .astype(np.float32)})
        check(run("forward", out, inp, "-o", os.path.join(tmp, "iy.safetensors")).returncode == 0,
              "the inflated model does not run")
    r = run("convert", os.path.join(tmp, "tv.pth"), "--inflate", "swin3d", "-o",
            os.path.join(tmp, "no.safetensors"), expect=65)
    check(r.returncode == 65 and len(r.stderr.strip().splitlines()) == 1,
          "inflating a swin3d: %r" % r.stderr)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="test_swin3d_net.") as tmp:
        test_exact(tmp)
        test_precisions(tmp)
        test_cli(tmp)
        test_torchvision_size(tmp)
        test_inflate(tmp, fixtures)
    done("test_swin3d_net")
