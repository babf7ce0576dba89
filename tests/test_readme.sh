#!/usr/bin/env bash
# test_readme.sh SRC BUILD - the README's ```bash blocks ("Use it from C",
# "Use it from Python/PyTorch") work as written: each runs from the source
# root, with /tmp/ replaced by a temporary directory and `build` by BUILD;
# a block that imports torch is skipped (with a message) when PyTorch is
# not installed. Debian's /usr/bin/python3 comes first in PATH.
set -u
SRC=$1 BUILD=$2
T=$(mktemp -d /tmp/relattn-readme.XXXXXX)
trap 'rm -rf "$T"' EXIT
export PATH=/usr/bin:$PATH PYTHONDONTWRITEBYTECODE=1
[ "$BUILD" = "$SRC/build" ] || export RELATTN_LIBRARY=$BUILD/librelattn.so
awk -v dir="$T" '/^```bash$/ {n++; f = dir "/block" n ".sh"; inb = 1; next}
                 /^```$/ && inb {inb = 0; next}
                 inb {print > f}' "$SRC/README.md"
fails=0 n=0
for b in "$T"/block*.sh; do
  [ -e "$b" ] || { echo "FAIL no \`\`\`bash blocks in README.md"; exit 1; }
  n=$((n + 1))
  sed -i -e "s|/tmp/|$T/|g" -e "s|--install build |--install $BUILD |" "$b"
  if grep -q "import torch" "$b" && ! python3 -c 'import torch' 2>/dev/null; then
    echo "skipped: README block $n (PyTorch is not installed)"
    continue
  fi
  if (cd "$SRC" && bash -e "$b") >"$T/out" 2>&1; then
    echo "ok   README block $n: $(tail -1 "$T/out")"
  else
    echo "FAIL README block $n:"; sed 's/^/    /' "$b"; tail -5 "$T/out"
    fails=$((fails + 1))
  fi
done
[ $n -ge 4 ] || { echo "FAIL only $n bash blocks in README.md"; fails=$((fails + 1)); }
[ $fails = 0 ]
