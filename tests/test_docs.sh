#!/usr/bin/env bash
# test_docs.sh BIN SRC - docs/ describes what the binary knows: every arch of
# the model loader (relattn --list-archs, as `arch`), every subcommand
# (relattn --list-commands, as "relattn CMD") and every option of every
# subcommand's --help appear in SRC/docs/*.md; the exit codes of the
# command's help are in docs/reference.md; README points to docs/, not to a
# steering repository's SPEC.
set -u
BIN=$1 SRC=$2
fails=0 passes=0
bad() { fails=$((fails + 1)); echo "FAIL $1"; }
ok() { passes=$((passes + 1)); }
DOCS=("$SRC"/docs/*.md)
[ -e "${DOCS[0]}" ] || { echo "FAIL no docs/*.md"; exit 1; }
has() { grep -qF -- "$1" "${DOCS[@]}"; }

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
grep -q "SPEC.md" "$SRC/README.md" && bad "README.md still points to SPEC.md" || ok
grep -q "docs/reference.md" "$SRC/README.md" && ok || bad "README.md does not point to docs/reference.md"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
