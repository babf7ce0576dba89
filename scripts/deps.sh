#!/usr/bin/env bash
# Installs what relattn needs to build and test on Debian 12 (as root).
# Safe to run again: does nothing when everything is there.
set -euo pipefail
# python3-numpy: tests/test_cli.sh compares the command's outputs with the
# fixtures through tools/st.py, and the Python package (tests/test_python.sh)
# needs it; python3-pip for the test of `pip install ./python`.
# libminizip-dev: the zip container of PyTorch checkpoints (src/io/torch.c).
# libopenblas0-openmp: OpenBLAS on OpenMP threads, which relattn links when
# it is there (CMakeLists.txt says why); the system's default stays as it is.
pkgs=(build-essential cmake pkg-config libjansson-dev libopenblas-dev libopenblas0-openmp
      libomp-dev zlib1g-dev libminizip-dev
      libspng-dev libjpeg62-turbo-dev dataset-fashion-mnist python3 python3-numpy python3-pip
      libavformat-dev libavcodec-dev libswscale-dev libavutil-dev   # videos (src/io/video.c)
      ffmpeg                               # the videos of tests/test_video.sh, and their frames
      clang libclang-rt-14-dev valgrind    # scripts/fuzz.sh, scripts/valgrind.sh
      openmpi-bin libopenmpi-dev           # relattn train under mpirun (tests/test_mpi.sh)
      python3-pil python3-skimage)         # PIL, the reference of the image transforms, and
                                           # real photos (tests/test_transform.py)
# PyTorch: the fixtures' twins, and the tests of relattn.torch (skipped without
# it); torchvision for the test that swaps relattn into its Swin.
[ "${RELATTN_WITH_TORCH:-0}" = 1 ] && pkgs+=(python3-torch python3-torchvision python3-numpy)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
