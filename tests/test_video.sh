#!/usr/bin/env bash
# test_video.sh - videos in (docs/reference.md, "Videos"): tiny videos made by
# the ffmpeg command (testsrc in H.264, VP9 and MJPEG, where the build has the
# encoder; odd sizes; fewer frames than a clip), each decoded by relattn
# (tests/test_video.c) and compared byte for byte with the frames `ffmpeg
# -pix_fmt rgb24` writes as PNG; a folder of those PNGs read as a video; broken
# files (truncated, garbage, a text file named .mp4, huge declared sizes,
# corrupt data, a FIFO) refused by the library with one line (the command's
# exit 65 needs a video model: tests/test_video.py, with PyTorch's twin).
#   bash tests/test_video.sh TEST_VIDEO_BINARY
# Exit 77 (skipped) without the ffmpeg command (scripts/deps.sh installs it).
set -u
[ $# -eq 1 ] || { echo "usage: $0 TEST_VIDEO_BINARY" >&2; exit 2; }
TV=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
command -v ffmpeg >/dev/null 2>&1 || { echo "skipped: no ffmpeg command (scripts/deps.sh)"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/relattn_test_video.XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); printf 'FAIL: %s\n' "$*" >&2; }
has_encoder() { ffmpeg -hide_banner -encoders 2>/dev/null | grep -q " $1 "; }
make() {   # NAME SIZE RATE SECONDS ENCODER-ARGS...
    local name=$1 size=$2 rate=$3 secs=$4
    shift 4
    ffmpeg -v error -nostdin -y -f lavfi -i "testsrc=size=$size:rate=$rate:duration=$secs" "$@" \
        "$T/$name" || { bad "ffmpeg could not make $name"; return 1; }
}

videos=()
if has_encoder libx264; then
    make h264.mp4 64x48 25 1.2 -c:v libx264 -pix_fmt yuv420p && videos+=(h264.mp4)
    make h264_444.mkv 34x30 30 0.5 -c:v libx264 -pix_fmt yuv444p && videos+=(h264_444.mkv)
    make h264_short.mp4 48x36 25 0.2 -c:v libx264 -pix_fmt yuv420p && videos+=(h264_short.mp4)
else
    echo "(no libx264 encoder: H.264 not tested)"
fi
if has_encoder libvpx-vp9; then
    make vp9.webm 63x47 25 1 -c:v libvpx-vp9 -pix_fmt yuv420p && videos+=(vp9.webm)
else
    echo "(no libvpx-vp9 encoder: VP9 not tested)"
fi
make mjpeg.avi 65x49 10 1 -c:v mjpeg -pix_fmt yuvj422p && videos+=(mjpeg.avi)
make mpeg4.mp4 40x30 12 0.5 -c:v mpeg4 && videos+=(mpeg4.mp4)

for v in "${videos[@]}"; do
    mkdir -p "$T/f_$v"
    ffmpeg -v error -nostdin -i "$T/$v" -pix_fmt rgb24 "$T/f_$v/%06d.png" ||
        { bad "ffmpeg could not extract $v"; continue; }
    n=$(ls "$T/f_$v" | wc -l)
    if out=$("$TV" compare "$T/$v" "$T/f_$v" "$n" 2>&1); then ok; echo "$out" | head -1
    else bad "$v: $out"; fi
    if out=$("$TV" subset "$T/$v" "$T/f_$v" 2>&1); then ok; else bad "$v subset: $out"; fi
done
# a folder of frames: the PNGs above (and one JPEG folder), in name order
if out=$("$TV" compare "$T/f_mjpeg.avi" "$T/f_mjpeg.avi" 10 2>&1); then ok; echo "$out" | head -1
else bad "frame folder: $out"; fi

# refusals: the library (test_video refuse) and the command (65, one line)
head -c 1500 "$T/${videos[0]}" >"$T/truncated.mp4"
# the index (moov) first, then half of the frames' data
ffmpeg -v error -nostdin -y -f lavfi -i testsrc=size=64x48:rate=25:duration=2 -c:v mpeg4 \
    -movflags +faststart "$T/faststart.mp4" &&
    head -c $(($(stat -c %s "$T/faststart.mp4") / 2)) "$T/faststart.mp4" >"$T/truncated_half.mp4"
head -c 4000 /dev/urandom >"$T/garbage.mp4"
printf 'this is not a video\n' >"$T/text.mp4"
printf 'YUV4MPEG2 W40000 H40000 F25:1 C420jpeg\nFRAME\n0123456789' >"$T/huge.y4m"
printf 'YUV4MPEG2 W9000 H9000 F25:1 C420jpeg\nFRAME\n0123456789' >"$T/huge2.y4m"
printf 'YUV4MPEG2 W70000 H2 F25:1 C420jpeg\nFRAME\n0123456789' >"$T/wide.y4m"
: >"$T/empty.mp4"
mkdir -p "$T/nofolder"
mkfifo "$T/fifo.mp4" 2>/dev/null || : >"$T/fifo.mp4"   # not a regular file: refused, no wait
python3 - "$T/mjpeg.avi" "$T/corrupt.avi" <<'PY'
import sys
d = bytearray(open(sys.argv[1], 'rb').read())
# scribble over the middle of the first frames' entropy-coded data
for o in range(3000, min(len(d) - 100, 20000), 7):
    d[o] = (d[o] * 31 + 17) & 0xFF
open(sys.argv[2], 'wb').write(bytes(d))
PY
# the last third of an MJPEG's frames scribbled over: it opens (the packets are
# counted, not decoded), its first frames decode, and all of them are refused
ffmpeg -v error -nostdin -y -f lavfi -i testsrc=size=64x48:rate=10:duration=3 -c:v mjpeg \
    -pix_fmt yuvj420p "$T/tail.avi" &&
python3 - "$T/tail.avi" "$T/tail_corrupt.avi" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], 'rb').read())
# the frames' chunks ('00dc', size, JPEG) of the movi list, in order: the
# entropy-coded data of the last third scribbled over, the chunks kept whole
o, chunks = d.find(b'movi') + 4, []
while o + 8 <= len(d) and d[o:o + 2] == b'00':
    n = struct.unpack('<I', d[o + 4:o + 8])[0]
    chunks.append((o + 8, n))
    o += 8 + n + (n & 1)
for start, n in chunks[len(chunks) * 2 // 3:]:
    sos = d.find(b'\xff\xda', start, start + n)   # after the scan header
    for k in range(sos + 20, start + n - 4, 3):
        d[k] = (d[k] * 31 + 17) & 0x7F
open(sys.argv[2], 'wb').write(bytes(d))
PY
if out=$("$TV" head "$T/tail_corrupt.avi" 10 2>&1); then ok; echo "$out" | head -1
else bad "tail_corrupt.avi: $out"; fi

for f in truncated.mp4 truncated_half.mp4 garbage.mp4 text.mp4 huge.y4m huge2.y4m wide.y4m empty.mp4 nofolder corrupt.avi fifo.mp4; do
    if out=$("$TV" refuse "$T/$f" 2>&1); then ok; echo "$out" | head -1
    else bad "$f: $out"; fi
done

# FFmpeg's libraries are opened at the first video: with a broken libavutil
# first on the search path, a video is refused with one line naming the
# libraries (65 in the command), and images need none of them
mkdir -p "$T/nolibs"
major=$(pkg-config --modversion libavutil 2>/dev/null | cut -d. -f1)
if [ -n "$major" ]; then
    printf 'not a library\n' >"$T/nolibs/libavutil.so.$major"
    out=$(LD_LIBRARY_PATH="$T/nolibs" "$TV" refuse "$T/${videos[0]}" 2>&1)
    if [ $? -eq 0 ] && echo "$out" | grep -q "FFmpeg's libraries cannot be loaded"; then ok
    else bad "broken libavutil: $out"; fi
    # a folder of frames is read without FFmpeg
    if out=$(LD_LIBRARY_PATH="$T/nolibs" "$TV" compare "$T/f_mjpeg.avi" "$T/f_mjpeg.avi" 10 2>&1)
    then ok; else bad "frame folder without FFmpeg: $out"; fi
else
    echo "(no pkg-config for libavutil: the missing-library case not tested)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
