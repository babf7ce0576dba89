#!/usr/bin/env bash
# test_docs.sh BIN SRC - docs/ describes what the binary knows: every arch of
# the model loader (relattn --list-archs, as `arch`), every subcommand
# (relattn --list-commands, as "relattn CMD") and every option of every
# subcommand's --help appear in SRC/docs/*.md; the exit codes of the
# command's help are in docs/reference.md; README points to docs/, not to a
# steering repository's SPEC. And the other way: every option README.md and
# docs/*.md name after "relattn CMD" in code (a fenced block, with the
# indented lines that continue it, or an inline code span) is an option of
# CMD's --help, and every other option they name is one of relattn's or of
# a program listed below (whose source, when it is in the tree, has it).
set -u
BIN=$1 SRC=$2
fails=0 passes=0
bad() { fails=$((fails + 1)); echo "FAIL $1"; }
ok() { passes=$((passes + 1)); }
DOCS=("$SRC"/docs/*.md)
[ -e "${DOCS[0]}" ] || { echo "FAIL no docs/*.md"; exit 1; }
has() { grep -qF -- "$1" "${DOCS[@]}"; }
# For every option that follows "relattn CMD" in code in Markdown, print
# CMD, the option and FILE:LINE, tab-separated. In a fenced block a command
# runs to the end of its line (a comment after " #" left out) and on over
# the indented lines that follow it (a synopsis's continuation); in an
# inline code span (paragraphs joined, so a span may break a line), to the
# span's end; either way to the next "relattn CMD".
EXTRACT=$(cat <<'AWK'
function emit(text, where,    rest, seg, cmd, nxt) {
  rest = " " text
  while (match(rest, /[ \/(]relattn [a-z]+/)) {
    seg = substr(rest, RSTART, RLENGTH); sub(/.*relattn /, "", seg); cmd = seg
    rest = substr(rest, RSTART + RLENGTH)
    nxt = match(rest, /[ \/(]relattn [a-z]+/) ? RSTART : length(rest) + 1
    seg = substr(rest, 1, nxt - 1)
    while (match(seg, /--[a-z][a-z0-9-]*/)) {
      print cmd "\t" substr(seg, RSTART, RLENGTH) "\t" where
      seg = substr(seg, RSTART + RLENGTH)
    }
    last = cmd
  }
}
function spans(text, where,    s) {
  while (match(text, /`[^`]*`/)) {
    s = substr(text, RSTART + 1, RLENGTH - 2)
    text = substr(text, RSTART + RLENGTH)
    emit(s, where)
  }
}
function flush() { if (para != "") spans(para, FILENAME ":" pline); para = "" }
FNR == 1 { flush(); fence = 0; cur = "" }
/^```/ { flush(); fence = !fence; cur = ""; next }
fence {
  line = $0; sub(/[ \t]#.*/, "", line)
  last = ""
  if (match(" " line, /[ \/(]relattn [a-z]+/)) { emit(line, FILENAME ":" FNR); cur = last }
  else if (cur != "" && line ~ /^[ \t]/) emit("relattn " cur " " line, FILENAME ":" FNR)
  else cur = ""
  next
}
/^[ \t]*$/ { flush(); next }
{ if (para == "") pline = FNR; para = para " " $0 }
END { flush() }
AWK
)

archs=$("$BIN" --list-archs) || bad "relattn --list-archs failed"
[ -n "$archs" ] || bad "relattn --list-archs printed nothing"
for a in $archs; do
  has "\`$a\`" && ok || bad "arch $a is not described in docs/*.md (as \`$a\`)"
done
cmds=$("$BIN" --list-commands) || bad "relattn --list-commands failed"
for c in $cmds; do
  has "relattn $c" && ok || bad "subcommand $c is not described in docs/*.md (as 'relattn $c')"
  for o in $("$BIN" "$c" --help 2>/dev/null | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u); do
    has "$o" && ok || bad "option $o of relattn $c is not in docs/*.md"
  done
done
for g in --version --list-archs --list-commands --help; do
  has "relattn $g" && ok || bad "relattn $g is not in docs/*.md"
done
for code in 0 64 65 66 70 73; do
  grep -qE "^\| $code \|" "$SRC/docs/reference.md" && ok || bad "exit code $code is not in docs/reference.md"
done
for env in RELATTN_KERNEL RELATTN_GEMM RELATTN_LIBRARY; do
  has "$env" && ok || bad "environment variable $env is not in docs/*.md"
done

# The other way: what the pages name, the binary (or the named program) has.
PAGES=("$SRC/README.md" "${DOCS[@]}")
declare -A cmdopts
known=" --help --version --list-archs --list-commands "
for c in $cmds; do
  cmdopts[$c]=" $("$BIN" "$c" --help 2>/dev/null | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u | tr '\n' ' ')"
  known+="${cmdopts[$c]} "
done
known+="$("$BIN" --help 2>/dev/null | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u | tr '\n' ' ') "
# -o's long form, which no --help names: it must work.
if "$BIN" forward "$SRC/examples/swin_window_7x7.safetensors" \
     "$SRC/examples/swin_windows_input.safetensors" --output /dev/null 2>/dev/null; then
  known+=" --output "; ok
else bad "relattn forward --output (the long form of -o) failed"; fi
# Options of other programs that the pages name: PROGRAM OPTION.
others=("cmake --install" "cmake --prefix" "cmake --build"
        "pkg-config --cflags" "pkg-config --libs" "pkg-config --static"
        "mpirun --allow-run-as-root"
        "bench/mpi_model.py --params" "bench/mpi_model.py --rate"
        "tools/export.py --torchvision" "tools/export.py --arch"
        "tools/fixtures.py --list" "tools/swin3d_twin.py --grad-fixtures"
        "tools/fmnist_folder.py --classes" "tools/fmnist_folder.py --train"
        "tools/imagenet1k_classes.py --kinetics400")
for po in "${others[@]}"; do
  prog=${po% *} o=${po#* }
  if [ -f "$SRC/$prog" ]; then
    grep -qF -- "\"$o\"" "$SRC/$prog" && ok || bad "$prog has no option $o (named in the docs)"
  fi
  known+=" $o "
done
# "relattn CMD ... --opt" in code: an option of CMD.
while IFS=$'\t' read -r c o where; do
  [ -n "${cmdopts[$c]+set}" ] || continue          # "relattn extensions", ...
  case "${cmdopts[$c]}" in *" $o "*) ok ;;
    *) bad "$where names relattn $c $o: not an option of relattn $c --help" ;; esac
done < <(awk "$EXTRACT" "${PAGES[@]}")
# Any other option named anywhere in the pages.
while IFS=: read -r f l o; do
  case "$known" in *" $o "*) ok ;;
    *) bad "${f#"$SRC"/}:$l names $o: neither an option of relattn nor of a program the test lists" ;; esac
done < <(grep -noE -- '--[a-z][a-z0-9-]*' "${PAGES[@]}" | sort -u)

grep -q "SPEC.md" "$SRC/README.md" && bad "README.md still points to SPEC.md" || ok
grep -q "docs/reference.md" "$SRC/README.md" && ok || bad "README.md does not point to docs/reference.md"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
