#!/usr/bin/env bash
# test_video_folder.sh - eval (and train) of a video model on a folder of
# videos per class (docs/reference.md, "relattn eval", "relattn train"):
# tiny videos made by the ffmpeg command, two classes (a red clip with
# noise, testsrc), one of them as a folder of frames; a small swin3d made
# by `test_video_folder model` (tests/test_video_folder.c).
#   - eval's top-1 equals the share of videos whose classify top-1 is
#     their folder's class (classify run on each video, the same options);
#     top-5, correct, images, the confusion matrix agree with those counts;
#   - a video that does not decode: 65 naming it, or with --skip-bad
#     counted in "skipped" and left out;
#   - --clips / --clip-len / --frame-interval / --crops reach the views;
#   - the training clip's first frame uniform over 0..n-L, a short video
#     looped (test_video_folder train-clips);
#   - train --init of the small model on a learnable 2-class split: the loss
#     of its 11th step (and the run's mean) below its first; eval of the
#     checkpoint counts what the run's last evaluation counted; --resume
#     ends with the tensors of an uninterrupted run; --arch swin3d_t from
#     scratch (small frames) writes a checkpoint eval reads; a broken
#     training video is 65 naming it, or with --skip-bad replaced and counted.
#   - with LIB and SRC (the shared library and the source tree; not under
#     the sanitizers) and a python3 with NumPy: the Python package's
#     Model.video_clips + Model.predict, softmax averaged over the views,
#     give classify's probabilities (a file, a folder of frames; 1 and
#     6 views).
#   bash tests/test_video_folder.sh RELATTN TEST_VIDEO_FOLDER_BINARY [LIB SRC]
# Exit 77 (skipped) without the ffmpeg command.
set -u
[ $# -eq 2 ] || [ $# -eq 4 ] ||
    { echo "usage: $0 RELATTN TEST_VIDEO_FOLDER_BINARY [LIB SRC]" >&2; exit 2; }
R=$1 TV=$2 LIB=${3:-} SRC=${4:-}
command -v ffmpeg >/dev/null 2>&1 || { echo "skipped: no ffmpeg command (scripts/deps.sh)"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/relattn_test_video_folder.XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=2
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); printf 'FAIL: %s\n' "$*" >&2; }
ff() { ffmpeg -v error -nostdin -y "$@" || bad "ffmpeg $*"; }

# two classes of 4 videos each, 1 s at 25 frames a second, 64 x 48
D=$T/videos
mkdir -p "$D/red" "$D/test"
for i in 1 2 3 4; do
    ff -f lavfi -i "color=c=red:size=64x48:rate=25:duration=1" -vf "noise=alls=$((i * 12)):allf=t" \
        -c:v mpeg4 "$D/red/r$i.mp4"
    ff -f lavfi -i "testsrc=size=64x48:rate=25:duration=1.$i" -c:v mpeg4 "$D/test/t$i.mkv"
done
mkdir -p "$D/test/t5_frames"   # a folder of frames is a video too
ff -i "$D/test/t1.mkv" -vf hflip "$D/test/t5_frames/%04d.png"
printf 'not a video\n' >"$D/test/notes.txt"   # not named as a video: not listed
# seed 1: a model that gets some videos wrong
"$TV" model "$T/m.safetensors" 1 >/dev/null || bad "test_video_folder model"

# eval against classify, video by video: OPTIONS...
check_eval() {
    local out json
    if ! json=$("$R" eval "$T/m.safetensors" --data "$D" --json "$@" 2>"$T/err"); then
        bad "eval $*: $(cat "$T/err")"
        return
    fi
    : >"$T/classify"
    for v in "$D"/red/* "$D"/test/*; do
        case $v in *.txt) continue ;; esac
        out=$("$R" classify "$T/m.safetensors" "$v" --json --top 5 "$@" 2>&1) ||
            { bad "classify $v: $out"; return; }
        printf '%s\t%s\n' "$(basename "$(dirname "$v")")" "$out" >>"$T/classify"
    done
    if out=$(python3 - "$T/classify" "$json" <<'PY'
import json, sys
rows = [l.split('\t', 1) for l in open(sys.argv[1]).read().splitlines()]
e = json.loads(sys.argv[2])
classes = sorted({r[0] for r in rows})
n = len(rows)
top1 = top5 = 0
conf = [[0, 0] for _ in classes]
for cls, out in rows:
    top = json.loads(out)[0]['top']
    want = classes.index(cls)            # no labels: the head's class is the folder's rank
    top1 += top[0]['class'] == want
    top5 += want in [t['class'] for t in top[:5]]
    conf[want][top[0]['class']] += 1
assert e['images'] == n and e['skipped'] == 0, (e['images'], n)
assert e['classes'] == classes, e['classes']
assert e['correct'] == top1, (e['correct'], top1)
assert abs(e['top1'] - top1 / n) < 1e-12, (e['top1'], top1 / n)
assert abs(e['top5'] - top5 / n) < 1e-12, (e['top5'], top5 / n)
assert e['confusion'] == conf, (e['confusion'], conf)
print(f"top-1 {e['top1']:.4f} = {top1}/{n} videos whose classify top-1 is their class")
PY
    ); then ok; echo "eval $*: $out"; else bad "eval $*: $out"; fi
}
check_eval
check_eval --clips 3 --clip-len 2 --frame-interval 3
check_eval --crops 3 --clips 1

# the Python package: what classify feeds the model and how it averages
if [ -n "$LIB" ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    for args in "" "--clips 2 --crops 3 --clip-len 3"; do
        for v in "$D/red/r2.mp4" "$D/test/t5_frames"; do
            # shellcheck disable=SC2086
            out=$("$R" classify "$T/m.safetensors" "$v" --json --top 2 $args 2>&1) ||
                { bad "classify $v $args: $out"; continue; }
            if py=$(RELATTN_LIBRARY=$LIB PYTHONPATH=$SRC/python PYTHONDONTWRITEBYTECODE=1 \
                    /usr/bin/python3 - "$T/m.safetensors" "$v" "$out" $args <<'PY'
import json, sys
import numpy as np
import relattn
model, video, out = sys.argv[1:4]
opts = dict(zip(sys.argv[4::2], sys.argv[5::2]))
kw = {k[2:].replace("-", "_"): int(v) for k, v in opts.items()}
m = relattn.Model(model)
x = m.video_clips(video, **kw)
views = x.shape[0]   # the model's own clips x crops without options
assert x.ndim == 5 and x.shape[1] == 3 and x.shape[2] == kw.get("clip_len", x.shape[2]), x.shape
assert "clips" not in kw or views == kw["clips"] * kw["crops"], (x.shape, kw)
y = m.predict(x).astype(np.float64)
p = np.exp(y - y.max(axis=1, keepdims=True))
p = (p / p.sum(axis=1, keepdims=True)).mean(axis=0)
top = json.loads(out)[0]["top"]
for t in top:
    assert abs(p[t["class"]] - t["probability"]) <= 1e-6, (t, p)
assert [t["class"] for t in top] == list(np.argsort(-p, kind="stable")[:len(top)]), (top, p)
try:
    m.video_clips(video, crops=2)
    raise SystemExit("crops=2 accepted")
except ValueError:
    pass
try:
    m.video_clips(video + ".missing")
    raise SystemExit("a missing video accepted")
except relattn.RelattnError:
    pass
print("%d views of %s: %s" % (views, video.split("/")[-1], [round(float(q), 6) for q in p]))
PY
            ); then ok; echo "python: $py"; else bad "python video_clips $v $args: $py"; fi
        done
    done
else
    echo "python: not checked (no LIB, or no python3 with NumPy)"
fi

# a broken video: 65 naming it; --skip-bad leaves it out and counts it
head -c 3000 /dev/urandom >"$D/red/broken.mp4"
out=$("$R" eval "$T/m.safetensors" --data "$D" 2>&1)
rc=$?
if [ $rc -eq 65 ] && echo "$out" | grep -q "broken.mp4" && [ "$(echo "$out" | wc -l)" -eq 1 ]; then ok
else bad "broken video: exit $rc, $out"; fi
if out=$("$R" eval "$T/m.safetensors" --data "$D" --json --skip-bad 2>"$T/err") &&
    python3 -c 'import json,sys; e=json.loads(sys.argv[1]); assert e["skipped"]==1 and e["images"]==9, e' "$out" &&
    grep -q "skipped 1 videos" "$T/err"; then ok
else bad "--skip-bad: $out $(cat "$T/err")"; fi
rm "$D/red/broken.mp4"

# refusals: video options on an image model, a class without videos
mkdir -p "$D/empty"
out=$("$R" eval "$T/m.safetensors" --data "$D" 2>&1)
if [ $? -eq 65 ] && echo "$out" | grep -q "holds no video"; then ok; else bad "empty class: $out"; fi
rmdir "$D/empty"

# ---- train ------------------------------------------------------------------
# the training clip's frames (ra_clip_indices_train)
if out=$("$TV" train-clips 2>&1); then ok; else bad "train-clips: $out"; fi
# DIR/train + DIR/val of the two classes; one step an epoch (batch 8), so
# that each --json line but the last holds its step's loss
V=$T/split
mkdir -p "$V/train/red" "$V/train/test" "$V/val/red" "$V/val/test"
for i in 1 2 3 4; do
    cp "$D/red/r$i.mp4" "$V/train/red/"
    cp "$D/test/t$i.mkv" "$V/train/test/"
done
cp -r "$D/test/t5_frames" "$V/val/test/"
ff -f lavfi -i "testsrc=size=64x48:rate=25:duration=0.8" -vf vflip -c:v mpeg4 "$V/val/test/t6.mp4"
for i in 5 6; do
    ff -f lavfi -i "color=c=red:size=64x48:rate=25:duration=1" -vf "noise=alls=$((i * 7)):allf=t" \
        -c:v mpeg4 "$V/val/red/r$i.mp4"
done
common=(--data "$V" --lr 1e-3 --precision fp32 --threads 2 --json)
if "$R" train --init "$T/m.safetensors" "${common[@]}" --batch 8 --epochs 12 -o "$T/ck.safetensors" \
    >"$T/train.json" 2>"$T/err"; then
    if out=$(python3 - "$T/train.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
loss = [l['train_loss'] for l in lines]
assert len(lines) == 12 and lines[-1]['steps'] == 12, lines[-1]
# each line but the last: that step's loss; the last: the mean of the 12
assert loss[-2] < loss[0] and loss[-1] < loss[0], loss
print(f"loss {loss[0]:.4f} at step 1, {loss[-2]:.4f} at step 11, mean {loss[-1]:.4f}")
PY
    ); then ok; echo "train --init: $out"; else bad "train --init: $out"; fi
    # the checkpoint opens in eval, which counts what the run's last evaluation counted
    if out=$("$R" eval "$T/ck.safetensors" --data "$V" --json 2>&1) &&
        python3 -c '
import json, sys
e = json.loads(sys.argv[1]); last = [json.loads(l) for l in open(sys.argv[2])][-1]
assert e["correct"] == last["test_correct"] and e["images"] == last["test_images"] == 4, (e, last)
assert e["class_to_head"] == "labels", e' "$out" "$T/train.json"; then ok
    else bad "eval of the trained checkpoint: $out"; fi
else
    bad "train --init: $(cat "$T/err")"
fi

# --resume: 3 steps, then the rest, to the tensors of an uninterrupted run
if "$R" train --init "$T/m.safetensors" "${common[@]}" --batch 8 --epochs 5 --max-steps 3 \
        -o "$T/a.safetensors" >/dev/null 2>"$T/err" &&
    "$R" train --resume "$T/a.safetensors" --data "$V" --threads 2 --json -o "$T/a.safetensors" \
        >/dev/null 2>>"$T/err" &&
    "$R" train --init "$T/m.safetensors" "${common[@]}" --batch 8 --epochs 5 -o "$T/b.safetensors" \
        >/dev/null 2>>"$T/err" &&
    python3 - "$T/a.safetensors" "$T/b.safetensors" <<'PY'
import json, struct, sys
def tensors(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]
            for k, v in h.items() if k != '__metadata__'}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), 'resumed run differs'
PY
then ok; else bad "train --resume: $(cat "$T/err")"; fi

# from scratch at a released size (swin3d_t, small frames and clips): runs,
# writes a checkpoint eval reads
if "$R" train --arch swin3d_t --img-size 32 --clip-len 4 --data "$V" --batch 2 --epochs 1 \
        --max-steps 2 --precision fp32 --threads 2 --json -o "$T/t.safetensors" >/dev/null 2>"$T/err" &&
    out=$("$R" eval "$T/t.safetensors" --data "$V" --json 2>&1) &&
    python3 -c 'import json,sys; e=json.loads(sys.argv[1]); assert e["images"]==4, e' "$out"; then ok
else bad "train --arch swin3d_t: $(cat "$T/err") $out"; fi

# a training video that does not decode: 65 naming it
head -c 3000 /dev/urandom >"$V/train/red/broken.mp4"
out=$("$R" train --init "$T/m.safetensors" "${common[@]}" --batch 9 --epochs 1 \
      -o "$T/c.safetensors" 2>&1 >/dev/null)
rc=$?
if [ $rc -eq 65 ] && echo "$out" | grep -q "broken.mp4"; then ok
else bad "broken training video: exit $rc, $out"; fi
# with --skip-bad it is replaced by the next video of the list, and counted
if out=$("$R" train --init "$T/m.safetensors" "${common[@]}" --batch 9 --epochs 1 --skip-bad \
        -o "$T/c.safetensors" 2>&1 >/dev/null) && echo "$out" | grep -q "skipped 1 videos"; then ok
else bad "--skip-bad in training: $out"; fi
# video options on images, image recipes on videos: usage errors
out=$("$R" train --init "$T/m.safetensors" --data "$V" --augment timm 2>&1)
if [ $? -eq 64 ]; then ok; else bad "--augment timm on videos: $out"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
