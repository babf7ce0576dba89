"""test_finetune_opts.py - relattn train's fine-tuning options against
PyTorch, on a small torchvision Swin (patch 4, embed 32, depths 2,2, heads
2,4, window 7, 3 classes; random weights written as a .pth state dict) and
a folder of 224 x 224 PNGs:

  --drop-path 0.3 --layer-decay 0.75 --accum 2 (with --precision fp32
  --augment none --no-shuffle --sched constant --warmup-epochs 0 --clip 0
  --label-smoothing 0 --wd 0.05 --lr 1e-4 --batch 8 --threads 1), three
  steps, against the torchvision model in training mode whose
  StochasticDepth modules multiply by the masks relattn draws (its
  generator rewritten here: xoshiro256** seeded by splitmix64, the
  trainer's (seed, step, process) and the model's per-call draw, see
  ra_model_forward_train), torch.optim.AdamW with one parameter group per
  layer (lr x 0.75^(L + 1 - l), the Swin authors' get_swin_layer rewritten
  for torchvision's names), the batch as two micro-batches of 4 whose
  gradients add up. Checked: each step's loss, and the weights after the
  third step (as tests/test_finetune.py checks them).

  --table-resize timm: a Swin fixture at window 8, its bias tables against
  timm's resize_rel_pos_bias_table (rewritten here from timm's
  layers/pos_embed_rel.py and layers/interpolate.py, without SciPy: timm's
  default).

  --arch: the released sizes' parameter shapes against torchvision's
  builders (swin_t, swin_v2_t, vit_b_16, and vit_ti_16 / vit_s_16 as
  torchvision's VisionTransformer of timm's widths).

Exit 77 (skipped) without PyTorch, torchvision, PIL or the photos.
  python3 test_finetune_opts.py RELATTN_BINARY PYTHON_PACKAGE_DIR"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from checks import check, done, need_photos, need_torch, photo_crops

np, torch, torchvision, _ = need_torch("numpy", "torch", "torchvision", "PIL.Image")
NAMES = ["astronaut.png", "chelsea.png", "coffee.png"]
need_photos(NAMES)
relattn_bin, package = sys.argv[1:3]
sys.path.insert(0, package)
import relattn  # noqa: E402

torch.set_num_threads(1)
tmp = tempfile.mkdtemp(prefix="relattn_finetune_opts.")
K, B, STEPS, LR, WD, DP, LD, ACCUM = 3, 8, 3, 1e-4, 0.05, 0.3, 0.75, 2
data = os.path.join(tmp, "data")
train_files, labels = photo_crops(data, NAMES, [("train", 8), ("val", 1)], seed=2)
labels = torch.tensor(labels)
TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
sys.path.insert(0, TOOLS)
sys.dont_write_bytecode = True
from common import Rng, mix64  # noqa: E402  relattn's generator, for the masks


# ---- the Swin authors' get_swin_layer, in torchvision's names ----
def layer_of(name, depths):
    L = sum(depths)
    parts = name.split(".")
    if parts[0] != "features":
        return L + 1   # norm, head
    f = int(parts[1])
    if f == 0:
        return 0       # the patch embedding
    stage = (f - 1) // 2
    if f % 2 == 1:     # features.(2i+1).j: block j of stage i
        return sum(depths[:stage]) + int(parts[2]) + 1
    return sum(depths[:stage + 1])   # features.(2i+2): the merging after stage i


def no_decay(name, p):   # relattn's rule (src/nn/optim.c), in torchvision's names
    keys = ("norm", "relative_position_bias_table", "cpb_mlp", "logit_scale", "class_token",
            "pos_embedding")
    return p.ndim <= 1 or name.endswith(".bias") or any(k in name for k in keys)


def train_relattn(pth, ck, extra, threads="1"):
    losses = []
    for step in range(1, STEPS + 1):
        args = ["--data", data, "--out", ck, "--max-steps", str(step), "--json",
                "--threads", threads]
        if step == 1:
            args = ["--init", pth, "--precision", "fp32", "--augment", "none", "--no-shuffle",
                    "--sched", "constant", "--warmup-epochs", "0", "--clip", "0",
                    "--label-smoothing", "0", "--wd", str(WD), "--lr", str(LR), "--batch", str(B),
                    "--epochs", "1"] + extra + args
        else:
            args = ["--resume", ck] + args
        r = subprocess.run([relattn_bin, "train"] + args, capture_output=True, text=True)
        check(r.returncode == 0, "step %d: %d %s" % (step, r.returncode, r.stderr[-400:]))
        if r.returncode:
            return None
        losses.append(json.loads(r.stdout.strip().split("\n")[-1])["train_loss"])
    return losses


def derive(src, name, extra):
    """The model relattn train --init derives from src with extra options, after
    one step of lr 1e-9 (Adam moves each weight by about 1e-9): (path, run)."""
    ck = os.path.join(tmp, name + ".st")
    r = subprocess.run([relattn_bin, "train", "--init", src, "--data", data, "--out", ck,
                        "--epochs", "1", "--batch", "8", "--lr", "1e-9", "--max-steps", "1",
                        "--augment", "none"] + extra, capture_output=True, text=True)
    return ck, r


def compare_weights(what, model, ck):
    got = relattn.load(ck)[0]
    nfar, nall, worst = 0, 0, 0.0
    for n, p in model.named_parameters():
        want = p.detach().numpy().copy()
        if n not in got:
            check(False, "%s: %s not in the checkpoint" % (what, n))
            continue
        g = got[n].reshape(want.shape).copy()
        if n.endswith("qkv.bias"):   # the keys' bias: rounding-level gradients (test_finetune.py)
            third = want.shape[0] // 3
            want[third:2 * third] = g[third:2 * third] = 0
        top = max(float(np.abs(want).max()), 1e-30)
        diff = np.abs(g - want)
        worst = max(worst, float(diff.max()) / top)
        nfar += int((diff > 1e-4 * top).sum())
        nall += diff.size
        check(float(diff.max()) <= 2 * LR * STEPS, "%s: %s differs by %.3g" % (what, n,
                                                                              float(diff.max())))
    check(nfar <= 1e-4 * nall, "%s: %d of %d weights differ by more than 1e-4 of their tensor's "
          "largest value" % (what, nfar, nall))
    return nfar, nall, worst


# ---- drop path, layer decay, accumulation ----
def regularised():
    depths = [2, 2]
    torch.manual_seed(0)
    model = torchvision.models.swin_transformer.SwinTransformer(
        patch_size=[4, 4], embed_dim=32, depths=depths, num_heads=[2, 4], window_size=[7, 7],
        stochastic_depth_prob=DP, num_classes=K)
    pth = os.path.join(tmp, "small_swin.pth")
    torch.save(model.state_dict(), pth)
    ck = os.path.join(tmp, "small_swin.st")
    losses = train_relattn(pth, ck, ["--drop-path", str(DP), "--layer-decay", str(LD),
                                     "--accum", str(ACCUM)])
    if losses is None:
        return
    m = relattn.Model(ck)
    x = torch.from_numpy(np.concatenate([m.preprocess(p) for p in train_files]))
    m.close()
    # the masks: each StochasticDepth call takes the next one relattn drew
    L = sum(depths)
    sds = [mod for mod in model.modules() if isinstance(mod, torchvision.ops.StochasticDepth)]
    check(len(sds) == L, "%d StochasticDepth modules for %d blocks" % (len(sds), L))
    queue = []

    def apply_mask(mod, inp, out):
        keep, scale = queue.pop(0)
        return inp[0] * (keep.view(-1, *([1] * (inp[0].ndim - 1))) * scale)
    for mod in sds:
        mod.register_forward_hook(apply_mask)
    model.train()
    L = sum(depths)
    groups = {}
    for n, p in model.named_parameters():
        lid, dec = layer_of(n, depths), not no_decay(n, p)
        g = groups.setdefault((lid, dec), {"params": [], "lr": LR * LD ** (L + 1 - lid),
                                           "weight_decay": WD if dec else 0.0})
        g["params"].append(p)
    opt = torch.optim.AdamW(list(groups.values()), lr=LR)
    worst_loss, dropped = 0.0, 0
    mb = B // ACCUM
    for step in range(STEPS):
        r = Rng(mix64(mix64(0 ^ 0x64726F7070617468, step), 0))   # (seed 0, step, process 0)
        opt.zero_grad()
        total = 0.0
        for a in range(ACCUM):
            own = Rng(mix64(r.u64(), 0))   # the model's draw, one shard (--threads 1)
            queue.clear()
            for i in range(L):   # block i: both branches, a draw per sample each
                p = float(np.float32(DP * i / (L - 1)))
                for _ in range(2):
                    if p > 0:
                        keep = torch.tensor([own.uniform() < 1.0 - p for _ in range(mb)],
                                            dtype=torch.float32)
                        dropped += int((keep == 0).sum())
                    else:
                        keep = torch.ones(mb)
                    queue.append((keep, float(np.float32(1.0) / np.float32(1.0 - p))))
            lo = step * B + a * mb
            xb, yb = x[lo:lo + mb], labels[lo:lo + mb]
            loss = torch.nn.functional.cross_entropy(model(xb), yb) * (mb / B)
            loss.backward()
            total += loss.item()
            check(not queue, "masks left over: %d" % len(queue))
        opt.step()
        d = abs(losses[step] - total)
        worst_loss = max(worst_loss, d)
        check(d < 2e-5 * max(1.0, abs(total)),
              "step %d: loss %.6f, PyTorch's %.6f" % (step + 1, losses[step], total))
    check(dropped > 0, "no branch was dropped: the masks test nothing")
    nfar, nall, worst = compare_weights("drop path + layer decay + accumulation", model, ck)
    print("--drop-path %g --layer-decay %g --accum %d: losses %s, PyTorch's within %.2g (%d "
          "branches of samples dropped); after %d steps %d of %d weights differ by more than "
          "1e-4 of their tensor's largest value (the worst by %.3g of it)"
          % (DP, LD, ACCUM, losses, worst_loss, dropped, STEPS, nfar, nall, worst))


# ---- timm's resize_rel_pos_bias_table (no SciPy: timm's default) ----
def timm_offsets(src, dst):   # BEiT's _calc
    left, right = 1.01, 1.5
    while right - left > 1e-6:
        q = (left + right) / 2.0
        gp = 1.0 * (1.0 - q ** (src // 2)) / (1.0 - q)
        if gp > dst // 2:
            right = q
        else:
            left = q
    dis, cur = [], 1
    for i in range(src // 2):
        dis.append(cur)
        cur += q ** (i + 1)
    return [-d for d in reversed(dis)] + [0] + dis


def timm_interpolate(points, values, targets):   # RegularGridInterpolator, two axes
    idxs, dists, overalls = [], [], []
    for p, x in zip(points, targets):
        right = torch.bucketize(x.contiguous(), p)
        right[right >= p.shape[0]] = p.shape[0] - 1
        left = (right - 1).clamp(0, p.shape[0] - 1)
        dl, dr = x - p[left], p[right] - x
        dl[dl < 0] = 0.
        dr[dr < 0] = 0.
        both = (dl == 0) & (dr == 0)
        dl[both] = dr[both] = 1.
        idxs.append((left, right))
        dists.append((dl, dr))
        overalls.append(dl + dr)
    num = 0.
    for oy in (0, 1):
        for ox in (0, 1):
            num += values[idxs[0][oy], idxs[1][ox]] * torch.prod(
                torch.stack([dists[0][1 - oy], dists[1][1 - ox]]), dim=0)
    return num / torch.prod(torch.stack(overalls), dim=0)


def timm_resize(table, new_window):
    s1 = int(table.shape[0] ** 0.5)
    s2 = 2 * new_window - 1
    if s1 == s2:
        return table
    pos = torch.tensor(timm_offsets(s1, s2))
    t = s2 // 2.0
    d = torch.arange(-t, t + 0.1, 1.0)
    dyx = torch.meshgrid(d, d, indexing="ij")
    out = [timm_interpolate([pos, pos], table[:, h].view(s1, s1).float(), dyx).reshape(-1, 1)
           for h in range(table.shape[1])]
    return torch.cat(out, dim=-1)


def table_resize():
    src = os.path.join(FIXTURES, "net_swin_timm.model.safetensors")
    ck, r = derive(src, "timm_resized", ["--window", "8", "--table-resize", "timm"])
    check(r.returncode == 0, "--table-resize timm: %s" % r.stderr[-300:])
    if r.returncode:
        return
    a, b = relattn.load(src)[0], relattn.load(ck)[0]
    n = 0
    for k in a:
        if not k.endswith("relative_position_bias_table") or a[k].shape == b[k].shape:
            continue
        want = timm_resize(torch.from_numpy(a[k]), (round(b[k].shape[0] ** 0.5) + 1) // 2)
        d = float(np.abs(want.numpy() - b[k]).max())
        top = float(np.abs(want.numpy()).max())
        n += 1
        # one step of lr 1e-9 moved each value by about 1e-9
        check(d < 1e-7 + 1e-6 * top, "--table-resize timm: %s differs from timm's by %g" % (k, d))
        print("--table-resize timm: %s %s -> %s, timm's resize within %.2g" % (k, a[k].shape,
                                                                              b[k].shape, d))
    check(n > 0, "--table-resize timm: nothing was resized")


# ---- SwinV2 at another window: the windows it was trained at recorded ----
def swinv2_window():
    from swinv2_twin import SwinTransformerV2
    src = os.path.join(FIXTURES, "v2_net_official.model.safetensors")   # window 4 at 16 x 16
    ck, r = derive(src, "v2_window8", ["--window", "8", "--img-size", "32"])
    check(r.returncode == 0, "swinv2 --window 8: %s" % r.stderr[-300:])
    if r.returncode:
        return
    m = relattn.Model(ck)
    pws = [int(v) for v in relattn.load(ck)[1]["pretrained_window_sizes"].split(",")]
    check(pws == [4, 4], "swinv2 --window 8: pretrained_window_sizes %s, not 4,4" % pws)
    twin = SwinTransformerV2(img_size=32, patch_size=2, num_classes=K, embed_dim=8,
                             depths=[2, 1], num_heads=[2, 4], window_size=8, ape=True,
                             pretrained_window_sizes=pws)
    weights = {k: torch.from_numpy(v.copy()) for k, v in relattn.load(ck)[0].items()
               if not k.startswith("__optim__.")}
    missing, unexpected = twin.load_state_dict(weights, strict=False)
    check(not unexpected and all("relative_" in k or "attn_mask" in k for k in missing),
          "swinv2 --window 8: the twin's names: missing %s, unexpected %s" % (missing, unexpected))
    x = np.random.default_rng(5).standard_normal((2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        want = twin(torch.from_numpy(x)).numpy()
    got = m.forward(x=x)["y"]
    m.close()
    d = float(np.abs(got - want).max())
    check(d < 1e-4 * max(1.0, float(np.abs(want).max())),
          "swinv2 --window 8: logits differ from the official twin's by %g" % d)
    print("swinv2 window 4 at 16x16 -> window 8 at 32x32: pretrained_window_sizes %s recorded; "
          "the logits equal the official twin's within %.2g" % (pws, d))


# ---- --in-chans: timm's adapt_input_conv ----
def adapt_input_conv(in_chans, w):   # timm.models._manipulate, for RGB weights
    w = w.float()
    if in_chans == 1:
        return w.sum(dim=1, keepdim=True)
    repeat = -(-in_chans // 3)
    w = w.repeat(1, repeat, 1, 1)[:, :in_chans, :, :]
    w *= (3 / float(in_chans))
    return w


def in_chans():
    src = os.path.join(FIXTURES, "vit_grad_tv.model.safetensors")
    a = relattn.load(src)[0]
    name = "conv_proj.weight"
    for n in (1, 2, 5):
        ck, r = derive(src, "chans%d" % n, ["--in-chans", str(n)])
        if n != 1:   # the folder's images are RGB or grey: 2 or 5 planes cannot train on them
            check(r.returncode != 0 and "in_chans" in r.stderr,
                  "--in-chans %d on RGB images: %d %s" % (n, r.returncode, r.stderr[-200:]))
            continue
        check(r.returncode == 0, "--in-chans %d: %s" % (n, r.stderr[-300:]))
        if r.returncode:
            continue
        got = relattn.load(ck)[0][name]
        want = adapt_input_conv(n, torch.from_numpy(a[name])).numpy()
        d = float(np.abs(got - want).max())
        check(got.shape == want.shape and d < 1e-7 + 1e-6 * float(np.abs(want).max()),
              "--in-chans %d: %s %s differs from adapt_input_conv's by %g" % (n, name, got.shape, d))
        print("--in-chans %d: %s %s -> %s, timm's adapt_input_conv within %.2g"
              % (n, name, a[name].shape, got.shape, d))


# ---- --arch: the released sizes against torchvision's builders ----
def presets():
    from torchvision.models.vision_transformer import VisionTransformer
    builders = {
        "swin_t": lambda: torchvision.models.swin_t(num_classes=K),
        "swin_v2_t": lambda: torchvision.models.swin_v2_t(num_classes=K),
        "vit_b_16": lambda: torchvision.models.vit_b_16(num_classes=K),
        "vit_ti_16": lambda: VisionTransformer(224, 16, 12, 3, 192, 768, num_classes=K),
        "vit_s_16": lambda: VisionTransformer(224, 16, 12, 6, 384, 1536, num_classes=K)}
    for name, make in builders.items():
        ck = os.path.join(tmp, name + ".st")
        r = subprocess.run([relattn_bin, "train", "--arch", name, "--data", data, "--out", ck,
                            "--epochs", "1", "--batch", "2", "--max-steps", "1", "--augment",
                            "none", "--lr", "1e-9"], capture_output=True, text=True)
        check(r.returncode == 0, "--arch %s: %s" % (name, r.stderr[-300:]))
        if r.returncode:
            continue
        ours = sorted(tuple(int(v) for v in t.shape) for n, t in relattn.load(ck)[0].items()
                      if not n.startswith("__optim__."))
        tv = make()
        theirs = []
        for n, p in tv.named_parameters():
            shape = tuple(p.shape)
            if name.startswith("swin_v2") and n.endswith("attn.qkv.bias"):
                shape = ()   # torchvision's one qkv.bias (its keys' third held at 0) ...
                c = p.shape[0] // 3
                theirs += [(c,), (c,)]   # ... is the official q_bias and v_bias
            if shape:
                theirs.append(shape)
        theirs = sorted(theirs)
        nours, ntheirs = sum(int(np.prod(s)) for s in ours), sum(int(np.prod(s)) for s in theirs)
        check(ours == theirs, "--arch %s: %d tensors of %d values, torchvision's %d of %d"
              % (name, len(ours), nours, len(theirs), ntheirs))
        print("--arch %s: %d parameter tensors, %d values, as torchvision's builder"
              % (name, len(ours), nours))


regularised()
table_resize()
swinv2_window()
in_chans()
presets()
shutil.rmtree(tmp)
done("test_finetune_opts")
