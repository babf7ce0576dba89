"""test_video.py - a video's clips and their transform (docs/reference.md,
"Videos"), through the library (ctypes on the shared library).

  1. ra_clip_indices against the reference formulas written again here in
     NumPy: the official Video Swin test's SampleFrames (its mmaction 0.x,
     test_mode=True, out_of_bound_opt 'loop') and torchvision's VideoClips
     (frame_rate resampling, unfold) + UniformClipSampler (float32
     linspace); with PyTorch also against torchvision's own
     VideoClips.compute_clips_for_video and torch.linspace;
  2. (PyTorch) ra_video_frame_bytes against torchvision's F.resize on uint8
     tensors (bilinear, no antialias: torch's interpolate on the floats,
     rounded back) and F.center_crop, sizes up and down, odd, portrait; the
     three crops against slices of the same resize at mmcv's size;
  3. (PyTorch, ffmpeg) ra_video_clips of a generated H.264 video against
     torchvision's VideoClassification preset applied to the ffmpeg
     command's PNG frames at the reference indices: bit for bit;
  4. (PyTorch, ffmpeg, the relattn binary) `relattn classify MODEL VIDEO`
     with a small swin3d (tools/swin3d_net_twin.py, random weights, 400
     classes: Kinetics-400's names) prints the twin's probabilities
     averaged over the views (torchvision's sampler and transform; the
     official test's three crops), the same for a folder of the frames; a
     broken video is refused with one line and exit 65.
Exit 77 (skipped) without NumPy.
  python3 test_video.py PYTHON_PACKAGE_DIR [RELATTN_BINARY TOOLS_DIR]"""
import ctypes
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

from checks import check, done, need_torch, skip

try:
    import numpy as np
except ImportError as e:
    skip("%s (scripts/deps.sh installs python3-numpy)" % e)
sys.path.insert(0, sys.argv[1])
from relattn._lib import Transform, lib  # noqa: E402


class ClipSpec(ctypes.Structure):
    _fields_ = [("sampler", ctypes.c_int), ("clips", ctypes.c_int), ("clip_len", ctypes.c_int),
                ("frame_interval", ctypes.c_int), ("frame_rate", ctypes.c_double)]


class VideoTransform(ctypes.Structure):
    _fields_ = [("frame", Transform), ("size_round", ctypes.c_int), ("crops", ctypes.c_int)]


P = ctypes.c_void_p
lib.ra_clip_indices.argtypes = [P, ctypes.POINTER(ClipSpec), ctypes.c_int64, ctypes.c_double]
lib.ra_video_frame_bytes.argtypes = [P, ctypes.POINTER(VideoTransform), P, ctypes.c_int,
                                     ctypes.c_int]
lib.ra_video_open.argtypes = [ctypes.POINTER(P), ctypes.c_char_p, P]
lib.ra_video_clips.argtypes = [ctypes.POINTER(P), P, P, ctypes.POINTER(ClipSpec),
                               ctypes.POINTER(VideoTransform)]
lib.ra_video_free.argtypes = [P]
lib.ra_last_error.restype = ctypes.c_char_p
MMACTION, TORCHVISION = 0, 1


def indices(sampler, n, fps, clips, T, interval=1, rate=0.0):
    out = np.zeros((clips, T), np.int64)
    st = lib.ra_clip_indices(out.ctypes.data, ClipSpec(sampler, clips, T, interval, rate), n, fps)
    return out if st == 0 else None


# ---- 1. the samplers' index arithmetic -----------------------------------------------

def mmaction_ref(n, clips, T, interval):
    """Video-Swin-Transformer's mmaction SampleFrames, test_mode=True."""
    ori = T * interval
    avg = (n - ori + 1) / float(clips)
    if n > ori - 1:
        offsets = (np.arange(clips) * avg + avg / 2.0).astype(np.int64)
    else:
        offsets = np.zeros((clips,), np.int64)
    inds = offsets[:, None] + np.arange(T)[None, :] * interval
    return np.mod(inds, n)


def torchvision_ref(n, fps, clips, T, rate):
    """VideoClips.compute_clips_for_video (step 1) + UniformClipSampler, in NumPy."""
    pts = np.arange(n)
    if rate:
        total = len(pts) * (float(rate) / fps)
        step = float(fps) / rate
        if step.is_integer():
            kept = pts[::int(step)]
        else:
            kept = np.floor(np.arange(int(math.floor(total)), dtype=np.float32) *
                            np.float32(step)).astype(np.int64)
            kept = pts[kept]
    else:
        kept = pts
    count = len(kept) - T + 1
    if count < 1:
        return None
    end = np.float32(count - 1)
    if clips == 1:
        first = np.zeros(1, np.int64)
    else:
        stp = (end - np.float32(0)) / np.float32(clips - 1)
        first = np.array([np.float32(stp * np.float32(i)) if i < clips // 2 else
                          np.float32(end - stp * np.float32(clips - i - 1))
                          for i in range(clips)], np.float32)
        first = np.floor(first).astype(np.int64)
    return np.stack([kept[f:f + T] for f in first])


cases = 0
for n in [1, 2, 5, 16, 31, 32, 63, 64, 65, 100, 127, 250, 300, 301, 1000]:
    for clips, T, interval in [(4, 32, 2), (1, 32, 2), (4, 8, 1), (3, 16, 4), (10, 4, 3), (12, 32, 1)]:
        got = indices(MMACTION, n, 30.0, clips, T, interval)
        check(got is not None and np.array_equal(got, mmaction_ref(n, clips, T, interval)),
              "mmaction n=%d clips=%d T=%d interval=%d: %s" % (n, clips, T, interval, got))
        cases += 1
    for fps, rate in [(30.0, 15.0), (25.0, 15.0), (29.97002997002997, 15.0), (15.0, 15.0),
                      (60.0, 15.0), (24.0, 0.0), (10.0, 15.0)]:
        for clips, T in [(12, 32), (5, 16), (1, 8), (4, 4), (15, 2)]:
            ref = torchvision_ref(n, fps, clips, T, rate)
            got = indices(TORCHVISION, n, fps, clips, T, 1, rate)
            if ref is None:
                check(got is None, "torchvision n=%d fps=%g: a clip of %d where it has none"
                      % (n, fps, T))
            else:
                check(got is not None and np.array_equal(got, ref),
                      "torchvision n=%d fps=%g rate=%g clips=%d T=%d:\n%s\n%s"
                      % (n, fps, rate, clips, T, got, ref))
            cases += 1
print("samplers: %d cases against the formulas" % cases)

try:
    import torch
    import torchvision  # noqa: F401
    from torchvision.datasets.video_utils import VideoClips
    have_torch = True
except ImportError:
    have_torch = False
if have_torch:   # torchvision's own arithmetic, on frame numbers as timestamps
    warnings.simplefilter("ignore")   # its warning for a video with no clip
    tcases = 0
    for n in [16, 40, 100, 251, 300, 1000]:
        for fps, rate in [(30.0, 15), (25.0, 15), (29.97002997002997, 15), (15.0, 15), (12.0, 15)]:
            for clips, T in [(12, 32), (5, 16), (1, 8)]:
                pts = torch.arange(n)
                clip_pts, _ = VideoClips.compute_clips_for_video(pts, T, 1, fps, rate)
                if len(clip_pts) == 0:
                    check(indices(TORCHVISION, n, fps, clips, T, 1, rate) is None,
                          "torchvision n=%d: no clip" % n)
                    continue
                first = torch.linspace(0, len(clip_pts) - 1, steps=clips).floor().to(torch.int64)
                ref = clip_pts[first].numpy()
                got = indices(TORCHVISION, n, fps, clips, T, 1, rate)
                check(got is not None and np.array_equal(got, ref),
                      "torchvision's VideoClips n=%d fps=%g clips=%d T=%d" % (n, fps, clips, T))
                tcases += 1
    print("samplers: %d cases against torchvision's VideoClips" % tcases)
elif os.environ.get("RELATTN_REQUIRE_TORCH") == "1":
    need_torch("torch", "torchvision")

# ---- 2. the frame transform ------------------------------------------------------------
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def vt(resize, crop, crops=1, size_round=0, rescale=0.0, floor_crop=False,
       mean=IMAGENET[0], std=IMAGENET[1]):
    t = VideoTransform()
    f = t.frame
    f.resize, f.resize_h, f.resize_w = (1, resize, resize) if resize else (0, 0, 0)
    f.interp = 2
    f.crop, f.crop_h, f.crop_w = (2 if floor_crop else 1), crop, crop
    f.rescale, f.normalize = rescale, 1
    for i in range(3):
        f.mean[i], f.std[i] = mean[i], std[i]
    t.size_round, t.crops = size_round, crops
    return t


def frame_bytes(t, img, ncrop, crop):
    h, w, _ = img.shape
    out = np.zeros((ncrop, crop, crop, 3), np.uint8)
    img = np.ascontiguousarray(img)
    st = lib.ra_video_frame_bytes(out.ctypes.data, ctypes.byref(t), img.ctypes.data, w, h)
    check(st == 0, "frame bytes %dx%d: %s" % (w, h, lib.ra_last_error()))
    return out


if have_torch:
    import torchvision.transforms.functional as TF
    from torchvision.transforms import InterpolationMode
    rng = np.random.default_rng(7)
    fcases = differ = 0
    for (h, w) in [(240, 320), (360, 480), (97, 131), (131, 97), (256, 256), (224, 300),
                   (480, 270), (50, 60), (1080 // 4, 1920 // 4), (300, 257)]:
        # smooth content (real frames) and noise (every rounding exercised)
        yy, xx = np.mgrid[0:h, 0:w]
        smooth = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)),
                           ((xx + yy) * 7) % 256], -1).astype(np.uint8)
        for img in [smooth, rng.integers(0, 256, (h, w, 3), dtype=np.uint8)]:
            # frames as (N, C, H, W) contiguous tensors: torch's NCHW kernel, bit
            # for bit; permuted from (H, W, C) (channels last, as a decoded
            # video is) torch runs another kernel, whose floats differ in their
            # last bits: the bytes must stay within one unit of it
            ten = torch.from_numpy(img).permute(2, 0, 1)[None]
            got = frame_bytes(vt(256, 224), img, 1, 224)[0]
            for layout, t_in in [("contiguous", ten.contiguous()), ("channels last", ten)]:
                r = TF.resize(t_in, [256], interpolation=InterpolationMode.BILINEAR,
                              antialias=False)
                ref = TF.center_crop(r, [224])[0].permute(1, 2, 0).numpy()
                d = int(np.abs(got.astype(int) - ref.astype(int)).max())
                if layout == "contiguous":
                    check(np.array_equal(got, ref), "%dx%d: torchvision's resize + crop differ by "
                          "%d in %d bytes" % (w, h, d, int((got != ref).sum())))
                else:
                    differ += int((got != ref).sum())
                    check(d <= 1, "%dx%d: %d from the channels-last kernel" % (w, h, d))
            # mmaction: Resize(-1, 224) at mmcv's size, ThreeCrop(224)
            short, long_ = min(h, w), max(h, w)
            scale = 224 / short
            nw, nh = int(w * scale + 0.5), int(h * scale + 0.5)
            r3 = torch.nn.functional.interpolate(ten.float().contiguous(), size=(nh, nw), mode="bilinear",
                                                 align_corners=False).round().to(torch.uint8)
            r3 = r3[0].permute(1, 2, 0).numpy()
            got3 = frame_bytes(vt(224, 224, crops=3, size_round=1, floor_crop=True), img, 3, 224)
            if nh == 224:
                s = (nw - 224) // 2
                offs = [(0, 0), (0, 2 * s), (0, s)]
            else:
                s = (nh - 224) // 2
                offs = [(0, 0), (2 * s, 0), (s, 0)]
            for k, (y0, x0) in enumerate(offs):
                check(np.array_equal(got3[k], r3[y0:y0 + 224, x0:x0 + 224]),
                      "%dx%d: three crop %d differs" % (w, h, k))
            fcases += 1
    print("frame transform: %d frames against torchvision's resize and crops: exact on contiguous "
          "tensors; %d bytes differ by 1 from the channels-last kernel" % (fcases, differ))

# ---- 3. a whole video's clips ------------------------------------------------------------
if have_torch and shutil.which("ffmpeg"):
    from PIL import Image
    from torchvision.transforms._presets import VideoClassification
    tmp = tempfile.mkdtemp(prefix="relattn_video.")
    try:
        video = os.path.join(tmp, "v.mp4")
        subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", "-f", "lavfi", "-i",
                        "testsrc=size=200x150:rate=30:duration=2.2", "-c:v", "libx264",
                        "-pix_fmt", "yuv420p", video], check=True)
        os.mkdir(os.path.join(tmp, "f"))
        subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-i", video, "-pix_fmt", "rgb24",
                        os.path.join(tmp, "f", "%06d.png")], check=True)
        frames = np.stack([np.asarray(Image.open(os.path.join(tmp, "f", p)).convert("RGB"))
                           for p in sorted(os.listdir(os.path.join(tmp, "f")))])
        n = len(frames)
        for sampler, clips, T, interval, rate, crops in [(TORCHVISION, 3, 8, 1, 15.0, 1),
                                                           (MMACTION, 2, 8, 2, 0.0, 1),
                                                           (MMACTION, 2, 16, 4, 0.0, 3)]:
            v = P()
            st = lib.ra_video_open(ctypes.byref(v), video.encode(), None)
            check(st == 0, "open: %s" % lib.ra_last_error())
            if sampler == TORCHVISION:
                t = vt(128, 112)
                ref_idx = torchvision_ref(n, 30.0, clips, T, rate)
            elif crops == 1:   # mmaction's Resize(-1, 128) + CenterCrop(112), mmcv's sizes
                t = vt(128, 112, size_round=1, floor_crop=True, rescale=1.0,
                       mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375))
                ref_idx = mmaction_ref(n, clips, T, interval)
            else:
                t = vt(112, 112, crops=3, size_round=1, floor_crop=True)
                ref_idx = mmaction_ref(n, clips, T, interval)
            x = P()
            shape = (ctypes.c_int64 * 5)()
            st = lib.ra_video_clips(ctypes.byref(x), shape, v, ClipSpec(sampler, clips, T, interval,
                                                                         rate), ctypes.byref(t))
            check(st == 0, "clips: %s" % lib.ra_last_error())
            views = crops * clips
            got = np.ctypeslib.as_array(ctypes.cast(x, ctypes.POINTER(ctypes.c_float)),
                                        (views, 3, T, 112, 112)).copy()
            check(list(shape) == [views, 3, T, 112, 112], "shape %s" % list(shape))
            if sampler == TORCHVISION:
                vid = torch.from_numpy(frames[ref_idx.reshape(-1)]).permute(0, 3, 1, 2)
                vid = vid.contiguous().reshape(clips, T, 3, 150, 200)
                ref = VideoClassification(crop_size=(112, 112), resize_size=(128,),
                                          mean=IMAGENET[0], std=IMAGENET[1])(vid).numpy()
            else:
                out = []
                for k in range(crops):
                    for c in range(clips):
                        fr = [frame_bytes(t, frames[i], crops, 112)[k] for i in ref_idx[c]]
                        a = np.stack(fr).astype(np.float32)          # (T, h, w, 3)
                        if t.frame.rescale == 0:
                            a = a / np.float32(255)
                        m = np.array(t.frame.mean, np.float32)
                        s = np.array(t.frame.std, np.float32)
                        out.append(((a - m) / s).transpose(3, 0, 1, 2))
                ref = np.stack(out)
            d = float(np.abs(got - ref).max())
            check(d == 0.0, "clips (sampler %d, %d crops) differ from the twin by %g"
                  % (sampler, crops, d))
            print("clips: sampler %d, %d x %d views of %d frames: max |difference| %g"
                  % (sampler, crops, clips, T, d))
            lib.free(x) if hasattr(lib, "free") else None
            lib.ra_video_free(v)
    finally:
        shutil.rmtree(tmp)

# ---- 4. relattn classify on a video, against the twin ------------------------------------
if have_torch and shutil.which("ffmpeg") and len(sys.argv) > 3:
    import json
    from PIL import Image
    from torchvision.transforms._presets import VideoClassification
    relattn_bin, tools = sys.argv[2:4]
    sys.path.insert(0, tools)
    sys.dont_write_bytecode = True
    from swin3d_net_twin import Swin3d  # noqa: E402
    tmp = tempfile.mkdtemp(prefix="relattn_video_cli.")
    try:
        video = os.path.join(tmp, "clip.mp4")
        subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", "-f", "lavfi", "-i",
                        "testsrc=size=96x72:rate=30:duration=1.5", "-c:v", "libx264",
                        "-pix_fmt", "yuv420p", video], check=True)
        fdir = os.path.join(tmp, "frames")
        os.mkdir(fdir)
        subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-i", video, "-pix_fmt", "rgb24",
                        os.path.join(fdir, "%06d.png")], check=True)
        frames = np.stack([np.asarray(Image.open(os.path.join(fdir, p)).convert("RGB"))
                           for p in sorted(os.listdir(fdir))])
        n = len(frames)
        torch.manual_seed(5)
        m = Swin3d(patch=(2, 4, 4), embed=16, depths=(1, 1), heads=(2, 4), window=(2, 3, 3),
                   classes=400).randomize(3, scale=0.3).eval()
        model = os.path.join(tmp, "tiny.pth")
        torch.save(m.state_dict(), model)

        def classify(*args):
            r = subprocess.run([relattn_bin, "classify", model] + list(args) + ["--json", "--top", "3"],
                               capture_output=True, text=True)
            check(r.returncode == 0, "classify %s: exit %d: %s" % (args, r.returncode, r.stderr))
            return json.loads(r.stdout) if r.returncode == 0 else None

        def twin_probs(views):   # (V, 3, T, H, W) -> the mean of the softmaxes
            with torch.no_grad():
                return torch.softmax(m(torch.from_numpy(np.ascontiguousarray(views))), 1).mean(0)

        def compare(out, probs, what):
            if not out:
                return
            top = out[0]["top"]
            want = torch.topk(probs, 3)
            d = max(abs(t["probability"] - float(p)) for t, p in zip(top, want.values))
            check([t["class"] for t in top] == want.indices.tolist() and d <= 2e-6,
                  "%s: %s, the twin %s (%s)" % (what, top, want.indices.tolist(),
                                               want.values.tolist()))
            print("classify %s: top-3 %s, max |p - twin's| %.2g" % (what,
                  [t["label"] for t in top], d))

        # torchvision's Kinetics evaluation, scaled down
        idx = torchvision_ref(n, 30.0, 3, 8, 15.0)
        vid = torch.from_numpy(frames[idx.reshape(-1)]).permute(0, 3, 1, 2).contiguous()
        vid = vid.reshape(3, 8, 3, 72, 96)
        views = VideoClassification(crop_size=(56, 56), resize_size=(64,), mean=IMAGENET[0],
                                    std=IMAGENET[1])(vid).numpy()
        probs = twin_probs(views)
        args = ["--set", "video.sampler=torchvision", "--clips", "3", "--clip-len", "8",
                "--frame-rate", "15", "--resize", "64", "--crop", "56"]
        out = classify(video, *args)
        compare(out, probs, "torchvision's sampler")
        names = [l for l in open(os.path.join(os.path.dirname(os.path.abspath(tools)), "data",
                                              "kinetics400_classes.txt")).read().split("\n")
                 if l and not l.startswith("#")]
        check(out is not None and out[0]["video"] == video and
              all(t["label"] == names[t["class"]] for t in out[0]["top"]),
              "Kinetics-400's names: %s" % (out and out[0]["top"]))
        # the official test's sampler and three crops (frame bytes: part 2's)
        idx = mmaction_ref(n, 2, 8, 2)
        t3 = vt(56, 56, crops=3, size_round=1, floor_crop=True, rescale=1.0,
                mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375))
        views = []
        for k in range(3):
            for c in range(2):
                a = np.stack([frame_bytes(t3, frames[i], 3, 56)[k] for i in idx[c]])
                a = (a.astype(np.float32) - np.array(t3.frame.mean, np.float32)) / \
                    np.array(t3.frame.std, np.float32)
                views.append(a.transpose(3, 0, 1, 2))
        probs = twin_probs(np.stack(views))
        out = classify(video, "--clips", "2", "--clip-len", "8", "--frame-interval", "2",
                       "--resize", "56", "--crop", "56")
        compare(out, probs, "the official test's sampler, 3 crops")
        out = classify(fdir, "--clips", "2", "--clip-len", "8", "--frame-interval", "2",
                       "--resize", "56", "--crop", "56")
        compare(out, probs, "a folder of frames")
        # broken files: exit 65, one line on stderr
        broken = {"text.mp4": b"not a video\n", "garbage.mp4": bytes(range(256)) * 20,
                  "truncated.mp4": open(video, "rb").read()[:2000]}
        for name, data in broken.items():
            path = os.path.join(tmp, name)
            open(path, "wb").write(data)
            r = subprocess.run([relattn_bin, "classify", model, path], capture_output=True,
                               text=True)
            lines = r.stderr.strip().split("\n")
            check(r.returncode == 65 and len(lines) == 1 and lines[0].startswith("relattn"),
                  "%s: exit %d, stderr %r" % (name, r.returncode, r.stderr))
        r = subprocess.run([relattn_bin, "classify", model, os.path.join(tmp, "missing.mp4")],
                           capture_output=True, text=True)
        check(r.returncode == 66, "a missing video: exit %d" % r.returncode)
    finally:
        shutil.rmtree(tmp)
done("test_video.py")
