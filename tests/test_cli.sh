#!/usr/bin/env bash
# test_cli.sh - the relattn command from outside (docs/reference.md, sections 2
# to 5).
#
#   bash tests/test_cli.sh RELATTN_BINARY FIXTURES_DIR
#
# 1. Every case of tests/corpus/manifest.txt (written by
#    tools/make_corpus.py): the exit code is the expected one; no run is
#    killed by a signal; stderr never holds a sanitizer report; on failure
#    stderr is exactly one non-empty line starting with "relattn" and no
#    output file (nor a leftover OUT.tmp.*) exists; on success the output
#    exists if one was asked for.
# 2. End to end: `index --window 2x2` prints the index docs/reference.md
#    prints (section 1.2), --json is JSON, and `forward` on every fixture
#    case of cases.txt writes y (and
#    attn with --attn) equal to PyTorch's within rtol 1e-4, with the default
#    and the reference kernel; `backward` writes y and every gradient of the
#    fixture; the networks of nets.txt (if any) write y (compared with
#    tools/st.py, which needs a python3 with numpy: without one the
#    comparisons cannot run, and that is a failure, not a skip; deps.sh
#    installs python3-numpy). Every output of a successful manifest case
#    must be readable by tools/st.py and finite.
# The last line is "N passed, N failed"; the exit status is 1 if any failed.
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 RELATTN_BINARY FIXTURES_DIR" >&2
    exit 2
fi
abspath() { (cd "$(dirname "$1")" && printf '%s/%s\n' "$(pwd -P)" "$(basename "$1")"); }
BIN=$(abspath "$1")
FIXTURES=$(cd "$2" && pwd -P) || { echo "no fixtures dir $2" >&2; exit 2; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
CORPUS=$HERE/corpus
TOOLS=$(cd "$HERE/../tools" && pwd -P)
[ -x "$BIN" ] || { echo "not executable: $BIN" >&2; exit 2; }
[ -f "$CORPUS/manifest.txt" ] || { echo "no $CORPUS/manifest.txt (run tools/make_corpus.py)" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/relattn_test_cli.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT
# A sanitizer build must report, not hang or leak silently; harmless otherwise.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# Every run is bounded: a hang is a failure (exit 124), not a stuck test.
TO=()
command -v timeout >/dev/null 2>&1 && TO=(timeout 120)

passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() {
    failed=$((failed + 1))
    printf 'FAIL: %s\n' "$*" >&2
}

# The stderr of a run must hold no sanitizer report, whatever the exit code.
clean_stderr() {   # file what
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error|UndefinedBehaviorSanitizer' "$1"; then
        bad "$2: sanitizer report:"
        sed 's/^/    /' "$1" | head -20 >&2
        return 1
    fi
    return 0
}

# The comparison runs once at the end over a list of
#   what<TAB>OUT<TAB>EXPECTED<TAB>names
# (names: "y", "y attn", or "grads" for y and every gradient of the fixture;
# "grads-of-scale": the same within 1e-4 of each tensor's largest magnitude)
# and prints "ok" or "FAIL: reason" per line.
compare_all() {   # list
    "$PY" - "$TOOLS" "$1" <<'EOF'
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import numpy as np
import st


def check(out_path, exp_path, names):
    out, _ = st.read(out_path)
    if names == ["finite"]:   # a manifest output: readable, y present, all finite
        bad = [n for n, v in out.items() if not np.all(np.isfinite(v))]
        return ("not finite: %s" % bad if bad else
                None if "y" in out else "no y in %s" % sorted(out))
    exp, _ = st.read(exp_path)
    atol = 1e-5
    if names == ["net"]:   # a whole network: y, with its longer chain of roundings
        names, atol = ["y"], 1e-4
    of_scale = names == ["grads-of-scale"]
    if names in (["grads"], ["grads-of-scale"]):
        names = sorted(n for n in exp if n != "attn")
        atol = 1e-4
    if sorted(out) != sorted(names):
        return "output holds %s, expected %s" % (sorted(out), sorted(names))
    for n in names:
        a, b = out[n], exp[n].astype(np.float32)
        if a.dtype != np.float32 or a.shape != b.shape:
            return "%s: %s %s, expected float32 %s" % (n, a.dtype, a.shape, b.shape)
        if not np.all(np.isfinite(a)):
            return "%s: not finite" % n
        if of_scale:
            err = np.abs(a - b) / (1e-4 * max(float(np.abs(b).max()), 1e-30))
        else:
            err = np.abs(a - b) / (atol + 1e-4 * np.abs(b))
        if err.max() > 1:
            i = np.unravel_index(err.argmax(), err.shape)
            return "%s: at %s got %.7g expected %.7g" % (n, i, a[i], b[i])
    return None


for line in open(sys.argv[2]):
    what, out_path, exp_path, names = line.rstrip("\n").split("\t")
    try:
        why = check(out_path, exp_path, names.split())
    except Exception as e:  # a file the reader refuses is a failure too
        why = "%s: %s" % (type(e).__name__, e)
    print("ok" if why is None else "FAIL: %s: %s" % (what, why))
EOF
}

# ---- 1. the manifest ------------------------------------------------------

# Outputs to check with python at the end (see compare_all), one a line.
: >"$WORK/compare.txt"

n=0
while IFS= read -r line || [ -n "$line" ]; do
    case $line in '#'* | '') continue ;; esac
    want=${line%%$'\t'*}
    args=${line#*$'\t'}
    [ "$want" = "$line" ] && args=""
    n=$((n + 1))
    dir=$WORK/case$n
    mkdir "$dir"
    out=$dir/out.safetensors
    # placeholders, shell-quoted, then split as a shell would
    a=${args//'{corpus}'/$(printf '%q' "$CORPUS")}
    a=${a//'{fixtures}'/$(printf '%q' "$FIXTURES")}
    a=${a//'{out}'/$(printf '%q' "$out")}
    a=${a//'{tmp}'/$(printf '%q' "$dir")}
    eval "set -- $a"
    ${TO[@]+"${TO[@]}"} "$BIN" "$@" </dev/null >"$WORK/stdout" 2>"$WORK/stderr"
    got=$?
    [ "$got" -eq 124 ] && [ ${#TO[@]} -gt 0 ] && { bad "case $n [relattn $args]: timed out"; continue; }
    what="case $n [relattn $args]"
    clean_stderr "$WORK/stderr" "$what" || continue
    if [ "$got" -ge 128 ]; then
        bad "$what: killed by signal $((got - 128))"
        sed 's/^/    /' "$WORK/stderr" | head -5 >&2
        continue
    fi
    if [ "$got" != "$want" ]; then
        bad "$what: exit $got, expected $want"
        sed 's/^/    /' "$WORK/stderr" | head -3 >&2
        continue
    fi
    # what is left in the case's directory
    left=$(cd "$dir" && ls -A)
    if [ "$got" -ne 0 ]; then
        lines=$(wc -l <"$WORK/stderr")
        first=$(head -n 1 "$WORK/stderr")
        if [ "$lines" -ne 1 ] || [ -z "${first#relattn}" ] || [ "${first#relattn}" = "$first" ]; then
            bad "$what: stderr is not one line starting with 'relattn':"
            sed 's/^/    /' "$WORK/stderr" | head -5 >&2
            continue
        fi
        if [ -n "$left" ]; then
            bad "$what: failed but left files: $left"
            continue
        fi
    else
        case $args in
        *'{out}'*)
            if [ "$left" != "out.safetensors" ]; then
                bad "$what: succeeded but left '$left' (expected out.safetensors)"
                continue
            fi
            printf '%s\t%s\t-\tfinite\n' "$what" "$out" >>"$WORK/compare.txt" ;;
        *)
            if [ -n "$left" ]; then
                bad "$what: succeeded but left files: $left"
                continue
            fi ;;
        esac
    fi
    ok
done <"$CORPUS/manifest.txt"
echo "manifest: $n cases"

# ---- 2. end to end -----------------------------------------------------------

# index of a 2x2 window (docs/reference.md, section 1.2), and only that on stdout
expect_2x2=$'4 3 1 0\n5 4 2 1\n7 6 4 3\n8 7 5 4'
got=$("$BIN" index --window 2x2 2>"$WORK/stderr")
rc=$?
clean_stderr "$WORK/stderr" "index --window 2x2" &&
    if [ $rc -eq 0 ] && [ "$got" = "$expect_2x2" ] &&
        [ "$("$BIN" index --window 2x2 2>/dev/null | wc -l)" -eq 4 ]; then ok; else
        bad "index --window 2x2: exit $rc, output:"$'\n'"$got"
    fi

# --json is JSON with the same numbers
PY=""
for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then PY=$p; break; fi
done
JSONPY=$PY
[ -z "$JSONPY" ] && command -v python3 >/dev/null 2>&1 && JSONPY=python3
for cfg in "--window 2x2" "--window 3x5" "--window 2x2 --frames 7 --kv-frames 4" "--length 5 --clip 2"; do
    # shellcheck disable=SC2086
    "$BIN" index $cfg --json >"$WORK/json" 2>"$WORK/stderr"
    rc=$?
    clean_stderr "$WORK/stderr" "index $cfg --json" || continue
    if [ $rc -ne 0 ]; then bad "index $cfg --json: exit $rc"; continue; fi
    if [ -n "$JSONPY" ]; then
        # shellcheck disable=SC2086
        "$BIN" index $cfg >"$WORK/plain" 2>/dev/null
        if "$JSONPY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
rows = [[int(v) for v in l.split()] for l in open(sys.argv[2])]
assert set(d) == {"index", "table_rows"}, d.keys()
assert d["index"] == rows, "json and plain index differ"
assert isinstance(d["table_rows"], int) and d["table_rows"] > max(max(r) for r in rows)
' "$WORK/json" "$WORK/plain" 2>"$WORK/pyerr"; then ok; else
            bad "index $cfg --json: $(tail -1 "$WORK/pyerr")"
        fi
    elif grep -qE '^\{"index": \[\[[0-9, ]+\](, \[[0-9, ]+\])*\], "table_rows": [0-9]+\}$' "$WORK/json"; then
        ok
    else
        bad "index $cfg --json: not the expected JSON: $(head -c 200 "$WORK/json")"
    fi
done
if [ "$("$BIN" index --window 2x2 --json 2>/dev/null)" = \
     '{"index": [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]], "table_rows": 9}' ]; then ok; else
    bad "index --window 2x2 --json: $("$BIN" index --window 2x2 --json 2>&1)"
fi

# A run that must fail with `want` and one line on stderr, whatever else:
# expect_fail WANT STDOUT_FILE ARGS...
expect_fail() {
    local want=$1 to=$2 rc
    shift 2
    ${TO[@]+"${TO[@]}"} "$BIN" "$@" </dev/null >"$to" 2>"$WORK/stderr"
    rc=$?
    clean_stderr "$WORK/stderr" "relattn $* >$to" || return
    if [ $rc -eq "$want" ] && [ "$(wc -l <"$WORK/stderr")" -eq 1 ] &&
        grep -q '^relattn' "$WORK/stderr"; then ok; else
        bad "relattn $* >$to: exit $rc (expected $want; 124: it hung), stderr: $(head -c 300 "$WORK/stderr")"
    fi
}

# stdout that cannot be written (a full disk): 73 and one line, never 0
if [ -c /dev/full ]; then
    expect_fail 73 /dev/full index --window 7x7
    expect_fail 73 /dev/full index --length 9 --clip 2 --json
    expect_fail 73 /dev/full --help
    expect_fail 73 /dev/full index --help
    expect_fail 73 /dev/full show "$CORPUS/ok_vit.model.safetensors"
fi

# a FIFO is not a file: refused at once (66), never waited on
if command -v mkfifo >/dev/null 2>&1 && mkfifo "$WORK/fifo" 2>/dev/null; then
    expect_fail 66 /dev/null show "$WORK/fifo"
    expect_fail 66 /dev/null forward "$WORK/fifo" "$CORPUS/ok_vit.input.safetensors" \
        -o "$WORK/fifo.out"
    expect_fail 66 /dev/null forward "$CORPUS/ok_vit.model.safetensors" "$WORK/fifo" \
        -o "$WORK/fifo.out"
    if [ -e "$WORK/fifo.out" ]; then bad "an output was written from a FIFO"; else ok; fi
    rm -f "$WORK/fifo"
fi

# forward and backward on every fixture case: exit 0, the outputs written and
# (with python) equal to PyTorch's
[ -z "$PY" ] && bad "no python3 with numpy: the outputs cannot be compared with the fixtures (scripts/deps.sh installs python3-numpy)"
mkdir "$WORK/e2e"
ncase=0
while IFS= read -r c || [ -n "$c" ]; do
    c=${c%%[[:space:]]*}
    case $c in '#'* | '') continue ;; esac
    ncase=$((ncase + 1))
    # forward (y; y and attn) with the default kernel and the reference one,
    # and backward (y and every gradient of the fixture)
    for run in "forward default" "forward-attn default" "forward ref" "forward-attn ref" \
               "backward default"; do
        read -r mode kernel <<<"$run"
        sub=${mode%-attn} attn=""
        [ "$mode" = forward-attn ] && attn="--attn"
        out=$WORK/e2e/$c.$mode.$kernel.safetensors
        what="$sub $c $attn (kernel $kernel)"
        if [ "$kernel" = default ]; then
            "$BIN" "$sub" "$FIXTURES/$c.model.safetensors" "$FIXTURES/$c.input.safetensors" \
                -o "$out" $attn 2>"$WORK/stderr"
        else
            RELATTN_KERNEL=ref "$BIN" "$sub" "$FIXTURES/$c.model.safetensors" \
                "$FIXTURES/$c.input.safetensors" -o "$out" $attn --threads 2 2>"$WORK/stderr"
        fi
        rc=$?
        clean_stderr "$WORK/stderr" "$what" || continue
        if [ $rc -ne 0 ] || [ ! -s "$out" ]; then
            bad "$what: exit $rc: $(head -1 "$WORK/stderr")"
            continue
        fi
        if [ -n "$PY" ]; then
            names="y"
            [ -n "$attn" ] && names="y attn"
            [ "$sub" = backward ] && names="grads"
            printf '%s\t%s\t%s\t%s\n' "$what" "$out" "$FIXTURES/$c.expected.safetensors" \
                "$names" >>"$WORK/compare.txt"
        else
            ok
        fi
    done
done <"$FIXTURES/cases.txt"
[ $ncase -ge 1 ] || bad "no cases in $FIXTURES/cases.txt"
# whole networks (swin_block, swin, vit), when the fixtures have them
if [ -f "$FIXTURES/nets.txt" ]; then
    while IFS= read -r c || [ -n "$c" ]; do
        c=${c%%[[:space:]]*}
        case $c in '#'* | '') continue ;; esac
        out=$WORK/e2e/$c.net.safetensors
        what="forward $c (network)"
        ${TO[@]+"${TO[@]}"} "$BIN" forward "$FIXTURES/$c.model.safetensors" \
            "$FIXTURES/$c.input.safetensors" -o "$out" 2>"$WORK/stderr"
        rc=$?
        clean_stderr "$WORK/stderr" "$what" || continue
        if [ $rc -ne 0 ] || [ ! -s "$out" ]; then
            bad "$what: exit $rc: $(head -1 "$WORK/stderr")"
        elif [ -n "$PY" ]; then
            printf '%s\t%s\t%s\tnet\n' "$what" "$out" "$FIXTURES/$c.expected.safetensors" \
                >>"$WORK/compare.txt"
        else
            ok
        fi
    done <"$FIXTURES/nets.txt"
fi
# --repeat R --json (docs/reference.md, section 4): one JSON line with positive times (and
# gflops a positive number, or null where no count exists), the output
# byte-identical to a plain run's; --repeat alone: one line on stderr and
# nothing on stdout; --json alone: --repeat 1; a bad R: 64, no output.
mkdir "$WORK/rep"
check_json() {   # file what want_gflops(number|null)
    if [ -n "$JSONPY" ]; then
        "$JSONPY" -c '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, "%d lines on stdout" % len(lines)
d = json.loads(lines[0])
assert set(d) == {"median_ms", "min_ms", "gflops"}, sorted(d)
for k in ("median_ms", "min_ms"):
    assert type(d[k]) in (int, float) and d[k] > 0, "%s = %r" % (k, d[k])
assert d["min_ms"] <= d["median_ms"], d
g = d["gflops"]
if sys.argv[2] == "null":
    assert g is None, "gflops = %r, expected null" % g
else:
    assert type(g) in (int, float) and g > 0, "gflops = %r" % g
' "$1" "$3" 2>"$WORK/pyerr" || { bad "$2: $(tail -1 "$WORK/pyerr")"; return 1; }
    else
        local num='[0-9.]+(e[-+]?[0-9]+)?' g='[0-9.]+(e[-+]?[0-9]+)?'
        [ "$3" = null ] && g=null
        if ! grep -qE "^\{\"median_ms\": $num, \"min_ms\": $num, \"gflops\": $g\}$" "$1" ||
            [ "$(wc -l <"$1")" -ne 1 ]; then
            bad "$2: not the expected JSON: $(head -c 200 "$1")"
            return 1
        fi
    fi
    return 0
}
# same_timed SUB MODEL INPUT GFLOPS: a plain run, then --repeat 3 --json
same_timed() {
    local sub=$1 model=$2 input=$3 want=$4 rc
    local what="$sub $(basename "$model") --repeat 3 --json"
    "$BIN" "$sub" "$model" "$input" -o "$WORK/rep/plain.st" 2>"$WORK/stderr"
    rc=$?
    clean_stderr "$WORK/stderr" "$sub $(basename "$model")" || return
    [ $rc -eq 0 ] || { bad "$sub $(basename "$model"): exit $rc: $(head -1 "$WORK/stderr")"; return; }
    "$BIN" "$sub" "$model" "$input" -o "$WORK/rep/timed.st" --repeat 3 --json \
        >"$WORK/rep/json" 2>"$WORK/stderr"
    rc=$?
    clean_stderr "$WORK/stderr" "$what" || return
    [ $rc -eq 0 ] || { bad "$what: exit $rc: $(head -1 "$WORK/stderr")"; return; }
    [ -s "$WORK/stderr" ] && { bad "$what: wrote to stderr: $(head -1 "$WORK/stderr")"; return; }
    check_json "$WORK/rep/json" "$what" "$want" || return
    if cmp -s "$WORK/rep/plain.st" "$WORK/rep/timed.st"; then ok; else
        bad "$what: the output differs from a plain run's"
    fi
}
for c in swin_4x4_shiftmask w3d_d2d2_kv shaw_both_k2 vit_n17_h4; do
    for sub in forward backward; do
        same_timed $sub "$FIXTURES/$c.model.safetensors" "$FIXTURES/$c.input.safetensors" number
    done
done
# SwinV2's layer (tools/swinv2_twin.py): backward writes y and every gradient
if [ -n "$PY" ] && [ -f "$FIXTURES/swinv2_layers.txt" ]; then
    while IFS= read -r c || [ -n "$c" ]; do
        [ -n "$c" ] || continue
        out=$WORK/e2e/$c.swinv2.safetensors
        "$BIN" backward "$FIXTURES/$c.model.safetensors" "$FIXTURES/$c.input.safetensors" \
            -o "$out" 2>"$WORK/stderr"
        rc=$?
        clean_stderr "$WORK/stderr" "backward $c" || continue
        if [ $rc -ne 0 ] || [ ! -s "$out" ]; then
            bad "backward $c: exit $rc: $(head -1 "$WORK/stderr")"
        else
            printf '%s\t%s\t%s\tgrads-of-scale\n' "backward $c" "$out" \
                "$FIXTURES/$c.grad.safetensors" \
                >>"$WORK/compare.txt"
        fi
    done <"$FIXTURES/swinv2_layers.txt"
fi
for c in net_block_w4_shift net_block_4d_10x6 net_swin_tv vit_net_tv net3d_cross_d3d2; do
    same_timed forward "$FIXTURES/$c.model.safetensors" "$FIXTURES/$c.input.safetensors" number
done
# a self 3-D block over 3 frames in windows of 2 frames: no count (null)
same_timed forward "$FIXTURES/net3d_self_pad.model.safetensors" \
    "$FIXTURES/net3d_self_pad.input.safetensors" null
# a network's backward: x from the fixture's input, dy from its gradients
if [ -n "$PY" ]; then
    for c in net_block_w4_shift net_swin_tv; do
        "$PY" -c '
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import st
x, _ = st.read(sys.argv[2] + ".input.safetensors")
g, _ = st.read(sys.argv[2] + ".grad.safetensors")
st.write(sys.argv[3], {"x": x["x"], "dy": g["dy"]})
' "$TOOLS" "$FIXTURES/$c" "$WORK/rep/$c.bwd.safetensors"
        same_timed backward "$FIXTURES/$c.model.safetensors" "$WORK/rep/$c.bwd.safetensors" number
    done
    # a dy of the wrong shape is found in the warm-up run: 65, no output
    rm -f "$WORK/rep/timed.st"
    expect_fail 65 /dev/null backward "$FIXTURES/net_block_w4.model.safetensors" \
        "$WORK/rep/net_swin_tv.bwd.safetensors" -o "$WORK/rep/timed.st" --repeat 2 --json
    [ -e "$WORK/rep/timed.st" ] && bad "backward with a bad dy left an output"
fi
# --repeat alone: nothing on stdout, one line on stderr
"$BIN" forward "$FIXTURES/swin_7x7.model.safetensors" "$FIXTURES/swin_7x7.input.safetensors" \
    -o "$WORK/rep/r.st" --repeat 2 >"$WORK/rep/stdout" 2>"$WORK/stderr"
rc=$?
if [ $rc -eq 0 ] && [ ! -s "$WORK/rep/stdout" ] && [ "$(wc -l <"$WORK/stderr")" -eq 1 ] &&
    grep -qE '^relattn forward: 2 runs after a warm-up: median [0-9.]+ ms, min [0-9.]+ ms, [0-9.]+ GFLOP/s$' \
        "$WORK/stderr"; then ok; else
    bad "forward --repeat 2: exit $rc, stdout '$(head -c 100 "$WORK/rep/stdout")', stderr $(head -c 200 "$WORK/stderr")"
fi
# --json alone: one timed run
"$BIN" backward "$FIXTURES/shaw_both_k2.model.safetensors" "$FIXTURES/shaw_both_k2.input.safetensors" \
    -o "$WORK/rep/j.st" --json >"$WORK/rep/json" 2>"$WORK/stderr"
rc=$?
if [ $rc -eq 0 ] && [ ! -s "$WORK/stderr" ]; then
    check_json "$WORK/rep/json" "backward --json" number && ok
else
    bad "backward --json: exit $rc: $(head -1 "$WORK/stderr")"
fi
# a bad R: 64 and one line, nothing on stdout, no output
for r in 0 -1 x 1.5 '' 1000001 99999999999 ' 3'; do
    for sub in forward backward; do
        expect_fail 64 "$WORK/rep/stdout" "$sub" "$FIXTURES/swin_7x7.model.safetensors" \
            "$FIXTURES/swin_7x7.input.safetensors" -o "$WORK/rep/bad.st" --repeat "$r" --json
        [ -s "$WORK/rep/stdout" ] && bad "$sub --repeat '$r': wrote to stdout"
        [ -e "$WORK/rep/bad.st" ] && { bad "$sub --repeat '$r': wrote an output"; rm -f "$WORK/rep/bad.st"; }
    done
done
expect_fail 64 /dev/null forward "$FIXTURES/swin_7x7.model.safetensors" \
    "$FIXTURES/swin_7x7.input.safetensors" -o "$WORK/rep/bad.st" --repeat
expect_fail 64 /dev/null backward "$FIXTURES/swin_7x7.model.safetensors" \
    "$FIXTURES/swin_7x7.input.safetensors" -o "$WORK/rep/bad.st" --json=1

# zero-width weights in PyTorch checkpoints (issue 33): a channel count of
# 0 was a division by zero (SIGFPE); now 65 and one line naming the tensor.
# The checkpoints are torch.save's zip, written by the standard library
# (pickle with persistent ids, stand-in modules for the globals it names).
mkdir -p "$WORK/pth"
if [ -n "$JSONPY" ] && "$JSONPY" - "$WORK/pth" <<'EOF'
import collections, io, os, pickle, struct, sys, types, zipfile
torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")
def _rebuild_tensor_v2(*a): pass
_rebuild_tensor_v2.__module__ = "torch._utils"
class FloatStorage: pass
FloatStorage.__module__ = "torch"
utils._rebuild_tensor_v2, torch.FloatStorage, torch._utils = _rebuild_tensor_v2, FloatStorage, utils
sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
def numel(s):
    n = 1
    for d in s: n *= d
    return n
class Tensor:
    def __init__(self, key, shape): self.key, self.shape = key, shape
    def __reduce__(self):
        stride = [numel(self.shape[i + 1:]) for i in range(len(self.shape))]
        return (_rebuild_tensor_v2, (("storage", self.key, numel(self.shape)), 0, tuple(self.shape),
                                     tuple(stride), False, collections.OrderedDict()))
class Pickler(pickle.Pickler):
    def persistent_id(self, o):
        if isinstance(o, tuple) and len(o) == 3 and o[0] == "storage":
            return ("storage", FloatStorage, o[1], "cpu", o[2])
        return None
def save(name, tensors):
    b = io.BytesIO()
    Pickler(b, protocol=2).dump(collections.OrderedDict(
        (n, Tensor(str(i), s)) for i, (n, s) in enumerate(tensors)))
    with zipfile.ZipFile(os.path.join(sys.argv[1], name), "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b.getvalue())
        z.writestr("archive/byteorder", "little")
        for i, (_, s) in enumerate(tensors):
            z.writestr("archive/data/%d" % i, struct.pack("<%df" % numel(s), *[1.0] * numel(s)))
        z.writestr("archive/version", "3\n")
save("vit0.pth", [("patch_embed.proj.weight", [0, 3, 8, 8]), ("blocks.0.norm1.weight", [16]),
                  ("blocks.0.attn.qkv.weight", [48, 16]), ("blocks.0.mlp.fc1.weight", [32, 16])])
save("swin0.pth", [("patch_embed.proj.weight", [0, 3, 4, 4]), ("layers.0.blocks.0.norm1.weight", [16]),
                   ("layers.0.blocks.0.attn.relative_position_bias_table", [169, 2]),
                   ("layers.0.blocks.0.mlp.fc1.weight", [64, 16])])
save("block0.pth", [("norm1.weight", [0]), ("attn.relative_position_bias_table", [169, 2]),
                    ("mlp.fc1.weight", [64, 16])])
EOF
then
    for c in vit0:patch_embed.proj.weight swin0:patch_embed.proj.weight block0:norm1.weight; do
        expect_fail 65 /dev/null inspect "$WORK/pth/${c%%:*}.pth"
        grep -qF "'${c#*:}'" "$WORK/stderr" ||
            bad "inspect ${c%%:*}.pth does not name ${c#*:}: $(head -c 300 "$WORK/stderr")"
    done
else
    bad "no python3 to write the zero-width checkpoints"
fi

if [ -n "$PY" ]; then
    ncmp=$(wc -l <"$WORK/compare.txt")
    nres=0
    while IFS= read -r r; do
        nres=$((nres + 1))
        if [ "$r" = ok ]; then ok; else bad "${r#FAIL: }"; fi
    done < <(compare_all "$WORK/compare.txt" 2>&1)
    [ "$nres" -eq "$ncmp" ] || bad "the comparison gave $nres results for $ncmp outputs"
fi
leftover=$(find "$WORK" -name '*.tmp.*' | head -5)
if [ -z "$leftover" ]; then ok; else bad "temporary files left behind: $leftover"; fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
