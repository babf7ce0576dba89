"""test_features.py - the feature maps of swin, swinv2, swin3d and vit (a network as
a backbone: `relattn forward --features`, Python's Model.features, the C
API's ra_model_features through ra_run) against PyTorch, map by map:

  - the official-style twins of tools/ (swin_twin.py, swinv2_twin.py,
    vit_twin.py), files under the official and timm's names: each stage's
    output after its blocks, before the next patch merging (timm's
    layers.s output and forward_intermediates), the last one through the
    final norm with --norm final (timm's norm=True); the ViT's blocks as
    timm's forward_intermediates gives them (patch tokens, the prefix
    tokens apart, norm=True through the final norm);
  - torchvision 0.14's own SwinTransformer (v1 and v2 blocks) and
    VisionTransformer: the output of features[2s + 1], run child by child,
    and of encoder.layers[i];
  - the Video Swin network (swin3d) against tools/swin3d_net_twin.py,
    torchvision's SwinTransformer3d (>= 0.15, which Debian's 0.14 lacks):
    the output of features[2s], run child by child, (B, T, H, W, C) and
    (B, C, T, H, W), on clips whose T, H and W are no multiples of the
    patch or the window (the maps unpadded as torchvision's), a batch of 2;
  - NHWC, NCHW and NLC; an image that is no multiple of the window (the
    padded windows) or of the patch (torchvision's crop); a batch of 3 on 2
    threads (shards) and on 1.

The tolerance is that of the network tests: 1e-5 of each map's largest
magnitude. Exit 77 (skipped) without PyTorch and torchvision.
  python3 test_features.py RELATTN_BINARY PYTHON_PACKAGE_DIR"""
import os
import shutil
import subprocess
import sys
import tempfile

from checks import check, done, need_torch

np, torch, torchvision = need_torch("numpy", "torch", "torchvision")
relattn_bin, package = sys.argv[1:3]
sys.path.insert(0, package)
TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools")
sys.path.insert(0, TOOLS)
sys.dont_write_bytecode = True
import relattn  # noqa: E402
import export  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)
TOL = 1e-5
tmp = tempfile.mkdtemp(prefix="relattn_features.")
worst = {}


def compare(label, got, want):
    want = np.asarray(want, dtype=np.float32)
    if got is None or got.shape != want.shape:
        check(False, "%s: shape %s, expected %s" % (label, None if got is None else got.shape,
                                                     want.shape))
        return
    scale = float(np.abs(want).max()) or 1.0
    r = float(np.abs(got - want).max()) / scale
    worst[label.split(":")[0]] = max(worst.get(label.split(":")[0], 0.0), r)
    check(r <= TOL, "%s: max difference %.3g of the scale %.3g" % (label, r, scale))


def layout(t, fmt):
    """t channels last, (B, H, W, C) or (B, T, H, W, C), as fmt."""
    last = t.dim() - 1
    if fmt == "nchw":
        return t.permute(0, last, *range(1, last))
    if fmt == "nlc":
        return t.reshape(t.shape[0], -1, t.shape[last])
    return t


# ---- the maps PyTorch gives ---------------------------------------------

def twin_swin_stages(m, x):
    """tools/swin_twin.py (and swinv2_twin.py): each stage's output after its
    blocks, (B, H, W, C), and the final norm."""
    t, H, W = m.patch_embed(x)
    if m.ape:
        t = t + m.absolute_pos_embed
    out = []
    for layer in m.layers:
        for blk in layer.blocks:
            t = blk(t, H, W)
        out.append(t.reshape(t.shape[0], H, W, -1))
        if layer.downsample is not None:
            t = layer.downsample(t, H, W)
            H, W = (H + 1) // 2, (W + 1) // 2
    return out, m.norm


def torchvision_swin_stages(m, x):
    """torchvision's SwinTransformer: features[2s + 1]'s outputs, child by
    child (NHWC as its stages are)."""
    out = []
    for i, child in enumerate(m.features):
        x = child(x)
        if i % 2 == 1:
            out.append(x)
    return out, m.norm


def twin_swin3d_stages(m, x):
    """tools/swin3d_net_twin.py, torchvision's SwinTransformer3d: the
    outputs of features[2s] (the stages; features[2s + 1] the merging, the
    stem patch_embed apart), (B, T, H, W, C)."""
    return m.stages(x), m.norm


def twin_vit_blocks(m, x):
    """tools/vit_twin.py: every block's output (B, N, C), its final norm,
    the prefix length and the patch grid."""
    t, grid = m.patch_embed(x)
    t = m.norm_pre(m._pos_embed(t, grid))
    out = []
    for blk in m.blocks:
        t = blk(t)
        out.append(t)
    return out, m.norm, m.num_prefix_tokens, tuple(grid)


def torchvision_vit_blocks(m, x):
    """torchvision's VisionTransformer: encoder.layers[i]'s outputs."""
    t = m._process_input(x)
    t = torch.cat([m.class_token.expand(t.shape[0], -1, -1), t], dim=1)
    t = t + m.encoder.pos_embedding
    out = []
    for blk in m.encoder.layers:
        t = blk(t)
        out.append(t)
    n = x.shape[2] // m.patch_size
    return out, m.encoder.ln, 1, (n, x.shape[3] // m.patch_size)


# ---- relattn's ----------------------------------------------------------

def cli_features(model_path, x, args, threads):
    inp = os.path.join(tmp, "in.safetensors")
    outp = os.path.join(tmp, "out.safetensors")
    st.write(inp, {"x": x.numpy()})
    r = subprocess.run([relattn_bin, "forward", model_path, inp, "-o", outp, "--threads",
                        str(threads), "--features"] + args, capture_output=True, text=True)
    check(r.returncode == 0, "forward --features %s: %s" % (" ".join(args), r.stderr.strip()))
    return st.read(outp)[0] if r.returncode == 0 else {}


def run_swin(label, model_path, m, stages_of, x, y_want):
    with torch.no_grad():
        stages, norm = stages_of(m, x)
    S = len(stages)
    mod = relattn.Model(model_path)
    # the Python API: every stage in each layout, y beside them
    for fmt in ("nhwc", "nchw", "nlc"):
        got = mod.features(x.numpy(), layout=fmt)
        compare("%s y" % label, got.get("y"), y_want)
        for s in range(S):
            compare("%s: python %s stage %d" % (label, fmt, s), got.get("features.%d" % s),
                    layout(stages[s], fmt))
    # the command line: the default (every stage, NHWC) on 2 threads, a
    # list with a negative index in NCHW on 1, timm's norm=True
    got = cli_features(model_path, x, [], 2)
    for s in range(S):
        compare("%s: cli default stage %d" % (label, s), got.get("features.%d" % s), stages[s])
    got = cli_features(model_path, x, ["0,-1", "--layout", "nchw"], 1)
    check(sorted(k for k in got if k != "y") == ["features.0", "features.%d" % (S - 1)],
          "%s: --features 0,-1 gave %s" % (label, sorted(got)))
    compare("%s: cli nchw stage 0" % label, got.get("features.0"), layout(stages[0], "nchw"))
    got = cli_features(model_path, x, ["all", "--norm", "final", "--layout", "nchw"], 2)
    with torch.no_grad():
        last = norm(stages[-1])
    compare("%s: cli norm final, last stage" % label, got.get("features.%d" % (S - 1)),
            layout(last, "nchw"))
    if S > 1:
        compare("%s: cli norm final, stage 0 as it is" % label, got.get("features.0"),
                layout(stages[0], "nchw"))


def run_vit(label, model_path, m, blocks_of, x, y_want):
    with torch.no_grad():
        blocks, norm, prefix, (gh, gw) = blocks_of(m, x)
        normed = [norm(b) for b in blocks]
    D = len(blocks)
    mod = relattn.Model(model_path)

    def patch_map(t, fmt):   # (B, N, C) -> the patch tokens in fmt
        p = t[:, prefix:]
        return layout(p.reshape(p.shape[0], gh, gw, -1), fmt)

    got = mod.features(x.numpy())   # timm's features_only: the last 3 blocks, NCHW
    compare("%s y" % label, got.get("y"), y_want)
    for i in range(max(0, D - 3), D):
        compare("%s: python default block %d" % (label, i), got.get("features.%d" % i),
                patch_map(blocks[i], "nchw"))
    check(len([k for k in got if k.startswith("features.")]) == min(3, D),
          "%s: default maps %s" % (label, sorted(got)))
    got = mod.features(x.numpy(), indices="all", layout="nlc", prefix_tokens=True)
    for i in range(D):
        compare("%s: python nlc block %d" % (label, i), got.get("features.%d" % i),
                patch_map(blocks[i], "nlc"))
        compare("%s: python prefix block %d" % (label, i), got.get("features.%d.prefix" % i),
                blocks[i][:, :prefix])
    got = cli_features(model_path, x, ["0,-2", "--norm", "final", "--layout", "nhwc"], 2)
    compare("%s: cli norm final block 0" % label, got.get("features.0"),
            patch_map(normed[0], "nhwc"))
    compare("%s: cli norm final block %d" % (label, D - 2), got.get("features.%d" % (D - 2)),
            patch_map(normed[D - 2], "nhwc"))


def hf_backbone_case(v2):
    """A twin of transformers' SwinBackbone (modeling_swin.py) and
    Swinv2Backbone (modeling_swinv2.py): embeddings, the encoder's stages and
    each stage's output before its downsampling (hidden_states_before_
    downsampling), reshaped to NCHW; SwinBackbone then puts each map of its
    out_features through a LayerNorm of its own (hidden_states_norms) and runs
    its encoder with always_partition: every block keeps window_size and its
    shift whatever the map (a map smaller than the window is padded to one
    window, the shifted mask built on it), where SwinModel would clamp the
    window to the map. The swin twins' blocks do exactly that when they are
    built for a resolution that needs no clamp (img_size 256 here: stages of
    64, 32, 16 and 8 tokens a side with window 7) and then run on a smaller
    image (the padding and mask at run time). Swinv2Backbone has no norms of
    its own and clamps as Swinv2Model does (built at the size it runs). The
    folder is as save_pretrained writes it: config.json (architectures
    SwinBackbone, stage_names, out_features, out_indices) and
    model.safetensors under transformers' names, without the final
    layernorm and pooler the backbone does not have."""
    import json
    import make_checkpoints as mc
    hp = dict(img_size=256 if not v2 else 64, patch_size=4, in_chans=3, num_classes=0,
              embed_dim=16, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4],
              window_size=7 if not v2 else 8, mlp_ratio=4.0, qkv_bias=True, ape=False,
              patch_norm=True)
    torch.manual_seed(11)
    if v2:
        import swinv2_twin
        hp["pretrained_window_sizes"] = [0, 0, 0, 0]
        m = swinv2_twin.SwinTransformerV2(**hp)
        swinv2_twin.fixture_init(m, 11)
    else:
        from swin_twin import SwinTransformer
        m = SwinTransformer(**hp)
        export.fixture_init(m, 11)
    m.eval()
    out_idx = [2, 3, 4] if not v2 else [1, 4]
    norms = {}
    g = torch.Generator().manual_seed(12)
    for k in out_idx:
        ln = torch.nn.LayerNorm(hp["embed_dim"] * 2 ** (k - 1))   # transformers: eps 1e-5
        with torch.no_grad():
            ln.weight.copy_(1 + 0.2 * torch.randn(ln.weight.shape, generator=g))
            ln.bias.copy_(0.1 * torch.randn(ln.bias.shape, generator=g))
        norms["stage%d" % k] = ln
    x = torch.randn(2, 3, 60, 52, generator=g) if not v2 else torch.randn(2, 3, 64, 64,
                                                                           generator=g)
    with torch.no_grad():
        stages, _ = twin_swin_stages(m, x)
        want = {}
        for k in out_idx:
            t = stages[k - 1]
            if not v2:
                t = norms["stage%d" % k](t)
            want["features.%d" % (k - 1)] = t.permute(0, 3, 1, 2)
        y_want = stages[-1].mean(dim=(1, 2))   # the pooled last stage, no final norm
    sd = mc.hf_swin_names(export.common.state_dict_f32(m), v2=v2)
    top = "swinv2." if v2 else "swin."
    sd = {k[len(top):]: v for k, v in sd.items() if k.startswith(top)
          and not k.startswith(top + "layernorm.")}
    if not v2:
        for k, ln in norms.items():
            sd["hidden_states_norms.%s.weight" % k] = ln.weight.detach()
            sd["hidden_states_norms.%s.bias" % k] = ln.bias.detach()
    cfg = mc.hf_swin_config(dict(hp, img_size=224 if not v2 else 64), v2=v2)
    cfg.update(architectures=["Swinv2Backbone" if v2 else "SwinBackbone"],
               out_features=["stage%d" % k for k in out_idx], out_indices=out_idx)
    for key in ("id2label", "label2id"):
        cfg.pop(key, None)
    d = os.path.join(tmp, "hf_backbone_v2" if v2 else "hf_backbone")
    os.makedirs(d)
    st.write(os.path.join(d, "model.safetensors"), {k: v.numpy() for k, v in sd.items()})
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    label = "transformers %s" % ("Swinv2Backbone" if v2 else "SwinBackbone")
    got = cli_features(d, x, [], 2)   # the default: out_features, their norms, NCHW
    check(sorted(k for k in got if k != "y") == sorted(want), "%s: maps %s, expected %s"
          % (label, sorted(got), sorted(want)))
    for k, w in want.items():
        compare("%s: %s" % (label, k), got.get(k), w)
    compare("%s y" % label, got.get("y"), y_want)
    got = relattn.Model(d).features(x.numpy(), indices=[0, -1], norm="none", layout="nhwc")
    compare("%s: stage 0 without norms" % label, got.get("features.0"), stages[0])
    compare("%s: last stage without norms" % label, got.get("features.3"), stages[3])


def model_of(kind, name, sets, naming="official"):
    m, meta, hp, _ = export.make(kind, name, sets, seed=3, init="fixture", naming=naming)
    path = os.path.join(tmp, "%s_%s_%s.safetensors" % (kind, name, naming))
    export.export(m, meta, path, naming)
    return m, path


try:
    g = torch.Generator().manual_seed(5)
    small = ["embed_dim=16", "depths=2,2,2,2", "num_heads=1,2,2,4", "num_classes=5"]
    # Swin twins under both names; an image that is no multiple of the window
    x = torch.randn(3, 3, 60, 52, generator=g)
    for naming in ("official", "timm"):
        m, path = model_of("arch", "swin", small + ["img_size=56", "window_size=7"], naming)
        with torch.no_grad():
            y = m(x)
        run_swin("swin twin (%s)" % naming, path, m, twin_swin_stages, x, y)
    # SwinV2 twin
    m, path = model_of("arch", "swinv2", small + ["img_size=64", "window_size=8"])
    xv2 = torch.randn(3, 3, 64, 64, generator=g)
    with torch.no_grad():
        y = m(xv2)
    run_swin("swinv2 twin", path, m, twin_swin_stages, xv2, y)
    # torchvision's Swin and SwinV2 (an image its convolution crops)
    for name in ("swin", "swinv2"):
        sets = small + ["window_size=7" if name == "swin" else "window_size=8",
                        "img_size=56" if name == "swin" else "img_size=64"]
        m, path = model_of("torchvision", name, sets)
        xt = torch.randn(3, 3, 63, 58, generator=g)
        with torch.no_grad():
            y = m(xt)
        run_swin("torchvision %s" % name, path, m, torchvision_swin_stages, xt, y)
    # ViT twin with a class token and registers; torchvision's ViT
    m, path = model_of("arch", "vit", ["img_size=32", "patch_size=8", "embed_dim=32", "depth=5",
                                       "num_heads=2", "num_classes=4", "reg_tokens=2"])
    xi = torch.randn(3, 3, 32, 32, generator=g)
    with torch.no_grad():
        y = m(xi)
    run_vit("vit twin", path, m, twin_vit_blocks, xi, y)
    m, path = model_of("torchvision", "vit_b_16", ["img_size=32", "patch_size=8",
                                                   "embed_dim=32", "depth=4", "num_heads=2",
                                                   "num_classes=4"])
    with torch.no_grad():
        y = m(xi)
    run_vit("torchvision vit", path, m, torchvision_vit_blocks, xi, y)

    # Video Swin (swin3d): torchvision's SwinTransformer3d as the twin writes
    # it, its state_dict as a .pth; clips of 5 x 19 x 23 (patch 2 x 4 x 4:
    # a 3 x 5 x 6 grid, the window 2 x 3 x 3 padding T and H, clamped on the
    # last stages)
    from swin3d_net_twin import Swin3d
    m = Swin3d(patch=(2, 4, 4), embed=24, depths=(1, 1, 2, 1), heads=(2, 2, 4, 4),
               window=(2, 3, 3), classes=5).randomize(7).eval()
    path = os.path.join(tmp, "swin3d.pth")
    torch.save(m.state_dict(), path)
    xc = torch.randn(2, 3, 5, 19, 23, generator=g)
    with torch.no_grad():
        y = m(xc)
    run_swin("swin3d twin", path, m, twin_swin3d_stages, xc, y)

    # transformers' SwinBackbone (a folder: config.json with out_features,
    # hidden_states_norms.* in the weights) and Swinv2Backbone
    for v2 in (False, True):
        hf_backbone_case(v2)

    # refusals: an index out of range (64), options without --features
    m, path = model_of("arch", "swin", small + ["img_size=56", "window_size=7"])
    inp = os.path.join(tmp, "in.safetensors")
    st.write(inp, {"x": x.numpy()})
    r = subprocess.run([relattn_bin, "forward", path, inp, "-o", os.path.join(tmp, "o"),
                        "--features", "4"], capture_output=True, text=True)
    check(r.returncode == 64 and "no stage 4" in r.stderr, "stage 4 of 4: %d %s"
          % (r.returncode, r.stderr.strip()))
    r = subprocess.run([relattn_bin, "forward", path, inp, "-o", os.path.join(tmp, "o"),
                        "--layout", "nchw"], capture_output=True, text=True)
    check(r.returncode == 64, "--layout without --features: %d" % r.returncode)
    try:
        relattn.Model(path).features(x.numpy(), prefix_tokens=True)
        check(False, "swin prefix tokens accepted")
    except relattn.RelattnError:
        check(True, "")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
for k, v in worst.items():
    print("%-28s worst %.3g of scale" % (k, v))
done("test_features")
