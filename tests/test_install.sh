#!/usr/bin/env bash
# test_install.sh BUILD SRC - `cmake --install` into a temporary prefix, then
# the example of examples/c built against it three ways and run: through
# pkg-config (shared, then --static) and through find_package(relattn)
# (relattn::relattn and relattn::relattn_static). Checks what a user gets:
# the header needs nothing of the private dependencies, the soname is
# versioned, only ra_ names are exported, the installed tool runs.
set -u
BUILD=$1 SRC=$2
T=$(mktemp -d /tmp/relattn-install.XXXXXX)
trap 'rm -rf "$T"' EXIT
P=$T/prefix
fails=0 passes=0
ok() { passes=$((passes + 1)); echo "ok   $1"; }
bad() { fails=$((fails + 1)); echo "FAIL $1"; }
want_output() {   # what the example prints
  grep -q '^index row 0: 84 83 82 81 80 79 78 71 ' "$1" &&
  grep -q '^table rows: 169$' "$1" &&
  grep -qE '^y \(4, 49, 96\), sum -?[0-9.]+; attention rows sum to 1\.0000 each$' "$1"
}

cmake --install "$BUILD" --prefix "$P" >"$T/install.log" 2>&1 || { bad "cmake --install: $(tail -3 "$T/install.log")"; }
LIB=$(ls -d "$P"/lib* | head -1)
for f in "$P/include/relattn.h" "$P/bin/relattn" "$LIB/librelattn.a" "$LIB/pkgconfig/relattn.pc" \
         "$LIB/cmake/relattn/relattnConfig.cmake" "$LIB/cmake/relattn/relattnConfigVersion.cmake"; do
  [ -e "$f" ] && ok "installed $(basename "$f")" || bad "missing $f"
done
so=$(ls "$LIB"/librelattn.so.*.*.* 2>/dev/null | head -1)
[ -n "$so" ] && [ -L "$LIB/librelattn.so" ] && ok "shared library $(basename "$so")" || bad "no versioned shared library"
soname=$(objdump -p "$so" 2>/dev/null | awk '/SONAME/ {print $2}')
[[ "$soname" =~ ^librelattn\.so\.[0-9]+$ ]] && ok "soname $soname" || bad "soname '$soname'"
# only the ra_ names are exported
others=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^ra_' | grep -v '^_' | head -5)
[ -z "$others" ] && ok "exports only ra_ names" || bad "exports $others"
# the header includes nothing but the C library's
incs=$(grep -E '^#include' "$P/include/relattn.h" | grep -vE '<(stddef|stdint)\.h>')
[ -z "$incs" ] && ok "relattn.h includes only stddef.h, stdint.h" || bad "relattn.h includes $incs"
"$P/bin/relattn" --version >"$T/v" 2>&1 && grep -q '^relattn [0-9]' "$T/v" && ok "installed relattn --version" || bad "relattn --version: $(cat "$T/v")"

# pkg-config, shared
export PKG_CONFIG_PATH=$LIB/pkgconfig
v=$(pkg-config --modversion relattn)
grep -q "\"$v\"" "$P/include/relattn.h" && ok "pkg-config version $v" || bad "pkg-config version '$v'"
if cc "$SRC/examples/c/swin_window.c" $(pkg-config --cflags --libs relattn) -o "$T/ex_pc" 2>"$T/cc.log"; then
  if LD_LIBRARY_PATH=$LIB "$T/ex_pc" >"$T/out_pc" 2>&1 && want_output "$T/out_pc"; then
    ok "example through pkg-config (shared)"
  else bad "example through pkg-config: $(head -5 "$T/out_pc")"; fi
  LD_LIBRARY_PATH=$LIB ldd "$T/ex_pc" | grep -q "$LIB/librelattn.so" && ok "it runs on the installed shared library" || bad "ldd: $(LD_LIBRARY_PATH=$LIB ldd "$T/ex_pc" | grep relattn)"
else bad "cc with pkg-config: $(head -5 "$T/cc.log")"; fi
# pkg-config, static
if cc "$SRC/examples/c/swin_window.c" $(pkg-config --cflags relattn) -o "$T/ex_st" \
      $(pkg-config --static --libs relattn | sed 's/-lrelattn/-l:librelattn.a/') 2>"$T/cc.log"; then
  "$T/ex_st" >"$T/out_st" 2>&1 && want_output "$T/out_st" && ok "example through pkg-config --static" ||
    bad "static example: $(head -5 "$T/out_st")"
  cmp -s <(grep -v sum "$T/out_pc") <(grep -v sum "$T/out_st") && ok "static and shared print the same" || bad "static and shared differ"
else bad "cc with pkg-config --static: $(head -5 "$T/cc.log")"; fi

# find_package
if cmake -S "$SRC/examples/c" -B "$T/b" -DCMAKE_PREFIX_PATH="$P" >"$T/cm.log" 2>&1 &&
   cmake --build "$T/b" >>"$T/cm.log" 2>&1; then
  "$T/b/swin_window" >"$T/out_cm" 2>&1 && want_output "$T/out_cm" && ok "example through find_package (shared)" ||
    bad "find_package example: $(head -5 "$T/out_cm")"
  "$T/b/swin_window_static" >"$T/out_cs" 2>&1 && want_output "$T/out_cs" && ok "example through find_package (static)" ||
    bad "find_package static example: $(head -5 "$T/out_cs")"
  cmp -s "$T/out_pc" "$T/out_cm" && ok "pkg-config and find_package builds print the same" || bad "outputs differ"
else bad "find_package build: $(tail -8 "$T/cm.log")"; fi
# a version the package is not
mkdir -p "$T/v2" && printf 'cmake_minimum_required(VERSION 3.18)\nproject(v LANGUAGES C)\nfind_package(relattn 9.0 REQUIRED)\n' >"$T/v2/CMakeLists.txt"
cmake -S "$T/v2" -B "$T/v2b" -DCMAKE_PREFIX_PATH="$P" >/dev/null 2>&1 && bad "find_package(relattn 9.0) succeeded" || ok "find_package(relattn 9.0) refused"

echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
