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
     the same roundings (tools/precision_twin.py's);
  4. inconsistent files are refused with one line and exit 65.
Exit 77 (skipped) without PyTorch, or a failure with RELATTN_REQUIRE_TORCH=1.
  python3 test_swin3d_net.py RELATTN_BINARY TOOLS_DIR"""
import os
import subprocess
import sys
import tempfile

from checks import check, done, need_torch

np, torch = need_torch("numpy", "torch")
relattn, tools = sys.argv[1:3]
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


def test_precisions(tmp):
    """--precision bf16 / int8 against the twin with the same rounding
    points (tools/precision_twin.py): relattn must move the logits from
    fp32 by what the twin does (0.5x to 2x) and stay as close to the twin
    (test_precision.sh's criterion: a reduced precision turns on values at
    rounding boundaries, which the last bit of a float32 sum moves)."""
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
            et, er, d = n2(tw - f) / n2(f), n2(r - f) / n2(f), n2(r - tw) / n2(tw)
            print("config %d %s: relattn moves the logits by %.2e, the twin by %.2e; they differ "
                  "by %.2e" % (ci, p, er, et, d))
            check(0.5 * et <= er <= 2 * et and d <= 2 * et,
                  "config %d %s: relattn %.2e, twin %.2e, apart %.2e" % (ci, p, er, et, d))
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


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="test_swin3d_net.") as tmp:
        test_exact(tmp)
        test_precisions(tmp)
    done("test_swin3d_net")
