#!/usr/bin/env bash
# test_readme.sh SRC BUILD - the ```bash blocks of README.md and docs/*.md
# (the command line, "From C", "From Python and PyTorch") work as written:
# each runs from the source root, with /tmp/ replaced by a temporary
# directory and `build` (`--install build`, `build/relattn`) by BUILD; a
# block that imports torch is skipped (with a message) when PyTorch is not
# installed. Debian's /usr/bin/python3 comes first in PATH. The commands the
# README gives to run as they are (a line of another fenced block that starts
# with ./scripts/) name executable scripts.
set -u
SRC=$1 BUILD=$2
T=$(mktemp -d /tmp/relattn-readme.XXXXXX)
trap 'rm -rf "$T"' EXIT
export PATH=/usr/bin:$PATH PYTHONDONTWRITEBYTECODE=1
[ "$BUILD" = "$SRC/build" ] || export RELATTN_LIBRARY=$BUILD/librelattn.so
fails=0
for page in "$SRC/README.md" "$SRC"/docs/*.md; do
  name=${page#"$SRC"/}
  rm -f "$T"/block*.sh
  awk -v dir="$T" '/^```bash$/ {n++; f = sprintf("%s/block%03d.sh", dir, n); inb = 1; next}
                   /^```$/ && inb {inb = 0; next}
                   inb {print > f}' "$page"
  n=0
  for b in "$T"/block*.sh; do
    [ -e "$b" ] || break
    n=$((n + 1))
    sed -i -e "s|/tmp/|$T/|g" -e "s|--install build |--install $BUILD |" \
           -e "s#\(^\|[ (]\)build/relattn#\1$BUILD/relattn#g" "$b"
    if grep -q "import torch" "$b" && ! python3 -c 'import torch' 2>/dev/null; then
      echo "skipped: $name block $n (PyTorch is not installed)"
      continue
    fi
    if (cd "$SRC" && bash -e "$b") >"$T/out" 2>&1; then
      echo "ok   $name block $n: $(tail -1 "$T/out")"
    else
      echo "FAIL $name block $n:"; sed 's/^/    /' "$b"; tail -5 "$T/out"
      fails=$((fails + 1))
    fi
  done
  if [ "$name" = README.md ] && [ $n -lt 5 ]; then
    echo "FAIL only $n \`\`\`bash blocks in README.md (the command line, C, Python)"
    fails=$((fails + 1))
  fi
done
scripts=$(awk '/^```/ {inb = !inb; bash = ($0 == "```bash"); next}
               inb && !bash && /^\.\/scripts\// {print $1}' "$SRC/README.md")
[ -n "$scripts" ] || { echo "FAIL README.md gives no ./scripts/ command"; fails=$((fails + 1)); }
for s in $scripts; do
  if [ -x "$SRC/$s" ]; then echo "ok   README.md command $s"
  else echo "FAIL README.md command $s is not an executable script"; fails=$((fails + 1)); fi
done
[ $fails = 0 ]
