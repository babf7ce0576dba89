"""test_finetune.py - relattn train --init against PyTorch: fine-tuning
torchvision's swin_t, swin_v2_t and vit_b_16 (random weights, heads of 3
classes, written as .pth state dicts) on a folder of 224 x 224 PNGs.

relattn: --precision fp32 --augment none --no-shuffle --sched constant
--warmup-epochs 0 --clip 0 --label-smoothing 0 --wd 0.05 --lr 1e-4 --batch 8,
one step, then resumed to three (so that each step's loss is reported);
PyTorch: the same torchvision model (stochastic depth 0) in training mode,
torch.optim.AdamW (betas 0.9, 0.999, eps 1e-8) with relattn's parameter
groups (no decay on 1-D tensors, bias tables, the CPB MLP, logit scales,
the class token and position embedding), the same images in the same order
(each the model's evaluation transform of its file, as relattn's
Model.preprocess gives it: tests/test_transform.py holds that against
torchvision's own transforms), cross entropy. Checked: each step's loss
(relattn prints it to 6 decimals), and after the third step the weights:
at most 1e-4 of them further than 1e-4 of their tensor's largest value
from PyTorch's, none further than Adam's 2 lr a step (an element whose
gradient is at rounding level, such as the keys' bias, moves by up to lr a
step either way in either library).
Exit 77 (skipped) without PyTorch, torchvision, PIL or the photos.
  python3 test_finetune.py RELATTN_BINARY PYTHON_PACKAGE_DIR"""
import json
import os
import shutil
import subprocess
import sys

from checks import check, done, need_photos, need_torch, photo_crops
import tempfile

np, torch, torchvision, _ = need_torch("numpy", "torch", "torchvision", "PIL.Image")
NAMES = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png"]
need_photos(NAMES)
relattn_bin, package = sys.argv[1:3]
sys.path.insert(0, package)
import relattn  # noqa: E402



torch.set_num_threads(2)
tmp = tempfile.mkdtemp(prefix="relattn_finetune.")
K, B, STEPS, LR, WD = 3, 8, 3, 1e-4, 0.05
# 8 training images a class (24: three batches of 8), one for evaluation
data = os.path.join(tmp, "data")
train_files, labels = photo_crops(data, NAMES[:K], [("train", 8), ("val", 1)], seed=1)
labels = torch.tensor(labels)


def no_decay(name, p):   # relattn's rule (src/nn/optim.c), in torchvision's names
    keys = ("norm", "relative_position_bias_table", "cpb_mlp", "logit_scale", "class_token",
            "pos_embedding")
    return p.ndim <= 1 or name.endswith(".bias") or any(k in name for k in keys)


def run(builder):
    torch.manual_seed(0)
    model = getattr(torchvision.models, builder)(num_classes=K)
    for mod in model.modules():   # no stochastic depth (relattn's --drop-path 0)
        if isinstance(mod, torchvision.ops.StochasticDepth):
            mod.p = 0.0
    pth = os.path.join(tmp, builder + ".pth")
    torch.save(model.state_dict(), pth)
    ck = os.path.join(tmp, builder + ".st")
    losses = []
    common = ["--data", data, "--out", ck, "--max-steps", None, "--json", "--threads", "2"]
    for step in range(1, STEPS + 1):
        args = list(common)
        args[args.index(None)] = str(step)
        if step == 1:
            args = ["--init", pth, "--precision", "fp32", "--augment", "none", "--no-shuffle",
                    "--sched", "constant", "--warmup-epochs", "0", "--clip", "0",
                    "--label-smoothing", "0", "--wd", str(WD), "--lr", str(LR), "--batch", str(B),
                    "--epochs", "1"] + args
        else:
            args = ["--resume", ck] + args
        r = subprocess.run([relattn_bin, "train"] + args, capture_output=True, text=True)
        check(r.returncode == 0, "%s step %d: %d %s" % (builder, step, r.returncode, r.stderr[-400:]))
        if r.returncode:
            return
        losses.append(json.loads(r.stdout.strip().split("\n")[-1])["train_loss"])
    # PyTorch: the same steps
    m = relattn.Model(ck)
    x = torch.from_numpy(np.concatenate([m.preprocess(p) for p in train_files]))
    m.close()
    model.train()
    decay = [p for n, p in model.named_parameters() if not no_decay(n, p)]
    other = [p for n, p in model.named_parameters() if no_decay(n, p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": other, "weight_decay": 0.0}], lr=LR)
    worst_loss = 0.0
    for step in range(STEPS):
        xb, yb = x[step * B:(step + 1) * B], labels[step * B:(step + 1) * B]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        d = abs(losses[step] - loss.item())
        worst_loss = max(worst_loss, d)
        check(d < 2e-5 * max(1.0, abs(loss.item())),
              "%s step %d: loss %.6f, PyTorch's %.6f" % (builder, step + 1, losses[step],
                                                         loss.item()))
    got = relattn.load(ck)[0]
    worst, nfar, nall = 0.0, 0, 0
    for n, p in model.named_parameters():
        if n not in got:
            check(False, "%s: %s not in the checkpoint" % (builder, n))
            continue
        want = p.detach().numpy().copy()
        g = got[n].reshape(want.shape).copy()
        if n.endswith("qkv.bias") or n.endswith("in_proj_bias"):
            # the keys' bias shifts every logit of a query alike: the softmax
            # cancels it, its gradient is 0 but for rounding, which Adam's
            # first steps (m / sqrt(v)) scale up to +-lr in either library
            third = want.shape[0] // 3
            want[third:2 * third] = g[third:2 * third] = 0
        top = max(float(np.abs(want).max()), 1e-30)
        diff = np.abs(g - want)
        worst = max(worst, float(diff.max()) / top)
        # an element whose gradient is at rounding level moves by up to +-lr a
        # step in either library (Adam's m / sqrt(v)): such elements may be
        # off by up to 2 lr per step, the others within 1e-4 of the largest
        far = diff > 1e-4 * top
        nfar += int(far.sum())
        nall += diff.size
        check(float(diff.max()) <= 2 * LR * STEPS,
              "%s: %s differs by %.3g (more than Adam's 2 lr a step)" % (builder, n,
                                                                        float(diff.max())))
    share = nfar / nall
    check(share <= 1e-4, "%s: %d of %d weights (%.2g) differ by more than 1e-4 of their tensor's "
          "largest value" % (builder, nfar, nall, share))
    print("%s: losses %s, PyTorch's within %.2g; after %d steps %d of %d weights (%.2g) differ by "
          "more than 1e-4 of their tensor's largest value (the worst by %.3g of it)"
          % (builder, losses, worst_loss, STEPS, nfar, nall, share, worst))


# ---- another window, another grid: the tables and embeddings resampled as the references ----
fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
F = torch.nn.functional
for name, args in (("net_swin_timm", ["--window", "8"]), ("vit_grad_tv", ["--img-size", "32"])):
    src = os.path.join(fixtures, name + ".model.safetensors")
    ck = os.path.join(tmp, name + "_resized.st")
    # one step of lr 1e-9 (Adam moves each weight by about 1e-9): the derived model
    r = subprocess.run([relattn_bin, "train", "--init", src, "--data", data, "--out", ck,
                        "--epochs", "1", "--batch", "8", "--lr", "1e-9", "--max-steps", "1",
                        "--augment", "none"] + args, capture_output=True, text=True)
    check(r.returncode == 0, "%s %s: %s" % (name, args, r.stderr[-300:]))
    if r.returncode:
        continue
    a, b = relattn.load(src)[0], relattn.load(ck)[0]
    n = 0
    for k in a:
        if a[k].shape == b[k].shape or not (k.endswith("relative_position_bias_table") or
                                            "pos_embed" in k):
            continue   # (the head has the folder's 3 classes)
        t = torch.from_numpy(a[k])
        if k.endswith("relative_position_bias_table"):   # the Swin authors' resampling
            s1, s2 = round(t.shape[0] ** 0.5), round(b[k].shape[0] ** 0.5)
            want = F.interpolate(t.T.reshape(1, -1, s1, s1), size=(s2, s2), mode="bicubic",
                                 align_corners=False).reshape(-1, s2 * s2).T
        else:   # timm's resample_abs_pos_embed, the class token kept
            C, g1, g2 = t.shape[-1], round((t.shape[1] - 1) ** 0.5), round((b[k].shape[1] - 1) ** 0.5)
            grid = t[:, 1:].reshape(1, g1, g1, C).permute(0, 3, 1, 2)
            want = F.interpolate(grid, size=(g2, g2), mode="bicubic", align_corners=False)
            want = torch.cat([t[:, :1], want.permute(0, 2, 3, 1).reshape(1, -1, C)], 1)
        d = float(np.abs(want.numpy() - b[k]).max())
        n += 1
        check(d < 1e-5, "%s %s: %s resampled differs from PyTorch's by %g" % (name, args, k, d))
        print("%s %s: %s %s -> %s, PyTorch's bicubic within %.2g" % (name, args, k, a[k].shape,
                                                                     b[k].shape, d))
    check(n > 0, "%s %s: nothing was resampled" % (name, args))

run("swin_t")
run("swin_v2_t")
run("vit_b_16")
shutil.rmtree(tmp)
done("test_finetune")
