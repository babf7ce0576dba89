#!/usr/bin/env bash
# The checkpoints people have, opened from the command line: PyTorch .pth,
# .bin and .pth.tar files (torchvision, official Swin and SwinV2, timm's
# train.py), plain safetensors state_dicts, transformers and timm model
# folders (tools/make_checkpoints.py writes them, with random weights, into a
# temporary directory; its docstring lists the cases). For every case:
#   forward   `relattn forward MODEL input -o y [ARGS]` gives the twin's
#             logits within the case's tolerance of their largest magnitude
#             (1e-5: docs/reference.md, section 6);
#   convert   `relattn convert MODEL -o f32 [ARGS]` writes a model file whose
#             forward gives the same bytes;
#   f16/bf16  `convert --dtype f16|bf16` stores its weights in that type, and
#             its forward is within 3e-3 / 3e-2 of the logits of the PyTorch
#             model with every parameter rounded the same way;
#   inspect   `inspect --json` reports the arch, the naming scheme and the
#             hyperparameters inferred from names, shapes and config.json,
#             and `inspect` names config.json where values come from it;
#   classify  the top class and its probability on image.png;
#   refuse    forward, inspect and convert exit 65 with exactly one line on
#             stderr (naming what the case says), write nothing, and the
#             pickle that calls os.system runs nothing.
# Each check prints one line (ok / FAIL, case, check, detail); the last line
# is "N passed, M failed". About 15 s on two cores.
# Exit 77 (skipped) when /usr/bin/python3 has no PyTorch and torchvision, or
# 1 with RELATTN_REQUIRE_TORCH=1 (CI's run with PyTorch). Under the
# sanitizers (RELATTN_SANITIZED set) the float16 / bfloat16 conversions and
# the conversion of the full-size swin_t are left out.
#   test_checkpoints.sh RELATTN ST_SAME SRC
set -u
relattn=$1 st_same=$2 src=$3
py=/usr/bin/python3
if ! "$py" -c 'import torch, torchvision' 2>/dev/null; then
  if [ "${RELATTN_REQUIRE_TORCH:-0}" = 1 ]; then
    echo "FAIL no PyTorch / torchvision under $py, and RELATTN_REQUIRE_TORCH=1"
    exit 1
  fi
  echo "skipped: no PyTorch / torchvision under $py (RELATTN_WITH_TORCH=1 scripts/deps.sh)"
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1
tmp=$(mktemp -d /tmp/test_checkpoints.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
ck=$tmp/ck out=$tmp/out
mkdir -p "$out"
passed=0 failed=0 failures=()

ok() { passed=$((passed + 1)); echo "ok   $1 $2${3:+: $3}"; }
fail() { failed=$((failed + 1)); failures+=("$1 $2"); echo "FAIL $1 $2${3:+: $3}"; }
# run CMD...: its exit status in rc, stdout and stderr in files
run() { "$@" </dev/null >"$tmp/stdout" 2>"$tmp/stderr"; rc=$?; }
why() { echo "exit $rc: $(head -c 300 "$tmp/stderr" | head -n 1)"; }

# The checks that read tensors and JSON (numpy, tools/st.py; no torch).
cat >"$tmp/check.py" <<'PY'
import json, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import st
import numpy as np

def close(got, want, tol):
    """largest |got - want| over the largest |want|, of tensor y"""
    g, w = st.read(got)[0].get("y"), st.read(want)[0]["y"]
    if g is None or g.shape != w.shape:
        return False, "y missing or of shape %s, want %s" % (
            None if g is None else g.shape, w.shape)
    r = float(np.abs(g - w).max()) / max(float(np.abs(w).max()), 1e-30)
    r = r if r == r else float("inf")
    return r <= float(tol), "worst %.3g of scale (tolerance %s)" % (r, tol)

def dtype(path, want):
    """most of the float tensors of a converted file are of type want"""
    d = st.dtypes(path)
    floats = [k for k, t in d.items() if t in ("F32", "F16", "BF16", "F64")]
    n = sum(1 for k in floats if d[k] == want)
    good = bool(floats) and 2 * n >= len(floats)
    return good, "%d of %d float tensors %s" % (n, len(floats), want)

def values(v):
    """a hyperparameter as a list of numbers: "2,2", [2, 2], "true", 7"""
    if isinstance(v, dict) and "value" in v:
        v = v["value"]
    if isinstance(v, str):
        v = [e.strip() for e in v.split(",")] if v not in ("true", "false") else [v == "true"]
    if not isinstance(v, list):
        v = [v]
    try:
        return [float(e) for e in v]
    except (TypeError, ValueError):
        return v

def same(a, b):
    a, b = values(a), values(b)
    if len(a) != len(b) and 1 in (len(a), len(b)):   # "56" and "56,56"
        a, b = (a * len(b), b) if len(a) == 1 else (a, b * len(a))
    return len(a) == len(b) and all(abs(x - y) <= 1e-6 * max(1.0, abs(y)) for x, y in zip(a, b))

def find(obj, key):
    """the value of key, searched breadth-first through the JSON"""
    todo = [obj]
    while todo:
        o = todo.pop(0)
        if isinstance(o, dict):
            if key in o:
                return o[key]
            todo += list(o.values())
        elif isinstance(o, list):
            todo += o
    return None

def inspect(got_json, want_json, text):
    got = json.load(open(got_json))
    want = json.load(open(want_json))
    bad = []
    for k in ("arch", "scheme"):
        if got.get(k) != want[k]:
            bad.append("%s %r, want %r" % (k, got.get(k), want[k]))
    meta = got.get("metadata", got.get("hyperparameters", got))
    for k, v in want["hp"].items():
        g = find(meta, k)
        if g is None or not same(g, v):
            bad.append("%s %r, want %r" % (k, g, v))
    shown = open(text, encoding="utf-8", errors="replace").read()
    for source in want.get("sources", {}):
        if source not in shown:
            bad.append("'inspect' does not name %s as a source" % source)
    return not bad, "; ".join(bad) or "%s, %s, %d hyperparameters" % (
        want["arch"], want["scheme"], len(want["hp"]))

def classify(got_json, want_json):
    want = json.load(open(want_json))
    got = json.load(open(got_json))
    top = got[0]["top"][0]
    good = (top["class"] == want["class"] and abs(top["probability"] - want["probability"]) < 1e-3
            and (want["label"] is None or top.get("label") == want["label"]))
    return good, "top class %s (%r) p=%.4f, want %d (%r) p=%.4f" % (
        top["class"], top.get("label"), top["probability"], want["class"], want["label"],
        want["probability"])

mode, args = sys.argv[2], sys.argv[3:]
try:
    good, detail = {"close": close, "dtype": dtype, "inspect": inspect,
                    "classify": classify}[mode](*args)
except Exception as e:   # an unreadable output is a failed check, said in one line
    good, detail = False, "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
print(detail)
sys.exit(0 if good else 1)
PY
check() { detail=$("$py" "$tmp/check.py" "$src/tools" "$@" </dev/null 2>&1); }

t0=$SECONDS
if ! "$py" "$src/tools/make_checkpoints.py" "$ck" >"$tmp/gen.log" 2>&1; then
  cat "$tmp/gen.log"
  echo "FAIL tools/make_checkpoints.py"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "generated: $(tail -n 1 "$tmp/gen.log") (+$((SECONDS - t0)) s)"

forward_case() {   # NAME MODEL TOL CHECKS ARGS...
  local name=$1 model=$2 tol=$3 checks=",$4," dir=$ck/$1
  shift 4
  run "$relattn" forward "$model" "$dir/input.safetensors" -o "$out/$name.y.safetensors" "$@"
  if [ $rc -ne 0 ]; then
    fail "$name" forward "$(why)"
  elif check close "$out/$name.y.safetensors" "$dir/expected.safetensors" "$tol"; then
    ok "$name" forward "$detail"
  else
    fail "$name" forward "$detail"
  fi
  [[ $checks == *,convert,* ]] && convert_f32 "$name" "$model" "$@"
  if [ -z "${RELATTN_SANITIZED:-}" ]; then
    [[ $checks == *,f16,* ]] && convert_low "$name" "$model" f16 F16 3e-3 "$@"
    [[ $checks == *,bf16,* ]] && convert_low "$name" "$model" bf16 BF16 3e-2 "$@"
  fi
  [[ $checks == *,inspect,* ]] && inspect_case "$name" "$model" "$@"
  [[ $checks == *,classify,* ]] && classify_case "$name" "$model" "$@"
  return 0
}

convert_f32() {   # NAME MODEL ARGS...: the converted file gives the same bytes
  local name=$1 model=$2 f=$out/$1.f32.safetensors
  shift 2
  [ -n "${RELATTN_SANITIZED:-}" ] && [ "$name" = swin_t_tv_pth ] && return 0
  run "$relattn" convert "$model" -o "$f" "$@"
  if [ $rc -ne 0 ]; then fail "$name" convert "$(why)"; return 0; fi
  run "$relattn" forward "$f" "$ck/$name/input.safetensors" -o "$out/$name.y32.safetensors"
  if [ $rc -ne 0 ]; then fail "$name" convert "forward of the converted file: $(why)"; return 0; fi
  if [ ! -s "$out/$name.y.safetensors" ]; then
    fail "$name" convert "no forward of the checkpoint to compare with"
  elif run "$st_same" "$out/$name.y.safetensors" "$out/$name.y32.safetensors" && [ $rc -eq 0 ]; then
    ok "$name" convert "the converted file's y is byte-identical"
  else
    fail "$name" convert "y differs: $(cat "$tmp/stdout" "$tmp/stderr" | head -n 1)"
  fi
  rm -f "$f"
}

convert_low() {   # NAME MODEL DTYPE ST_DTYPE TOL ARGS...
  local name=$1 model=$2 dt=$3 stdt=$4 tol=$5 f=$out/$1.$3.safetensors
  shift 5
  run "$relattn" convert "$model" -o "$f" --dtype "$dt" "$@"
  if [ $rc -ne 0 ]; then fail "$name" "$dt" "$(why)"; return 0; fi
  if ! check dtype "$f" "$stdt"; then fail "$name" "$dt" "$detail"; return 0; fi
  local stored=$detail
  run "$relattn" forward "$f" "$ck/$name/input.safetensors" -o "$out/$name.y$dt.safetensors"
  if [ $rc -ne 0 ]; then fail "$name" "$dt" "forward of the converted file: $(why)"; return 0; fi
  if check close "$out/$name.y$dt.safetensors" "$ck/$name/expected_$dt.safetensors" "$tol"; then
    ok "$name" "$dt" "$stored; $detail"
  else
    fail "$name" "$dt" "$stored; $detail"
  fi
  rm -f "$f"
}

inspect_case() {   # NAME MODEL ARGS...
  local name=$1 model=$2
  shift 2
  run "$relattn" inspect "$model" "$@"
  if [ $rc -ne 0 ]; then fail "$name" inspect "$(why)"; return 0; fi
  cp "$tmp/stdout" "$out/$name.inspect.txt"
  run "$relattn" inspect "$model" --json "$@"
  if [ $rc -ne 0 ]; then fail "$name" inspect "--json: $(why)"; return 0; fi
  if check inspect "$tmp/stdout" "$ck/$name/inspect.json" "$out/$name.inspect.txt"; then
    ok "$name" inspect "$detail"
  else
    fail "$name" inspect "$detail"
  fi
}

classify_case() {   # NAME MODEL ARGS...
  local name=$1 model=$2 dir=$ck/$1
  shift 2
  local opts
  read -r -a opts < <("$py" -c 'import json, sys; print(*json.load(open(sys.argv[1]))["args"])' \
                        "$dir/classify.json")
  run "$relattn" classify "$model" "$dir/image.png" --json --top 3 "${opts[@]}" "$@"
  if [ $rc -ne 0 ]; then fail "$name" classify "$(why)"; return 0; fi
  if check classify "$tmp/stdout" "$dir/classify.json"; then
    ok "$name" classify "$detail"
  else
    fail "$name" classify "$detail"
  fi
}

refuse_case() {   # NAME MODEL EXPECT: exit 65, one line naming EXPECT, no output
  local name=$1 model=$2 expect=$3 what lines msg
  for what in forward inspect convert; do
    rm -f "$out/refused.safetensors"
    case $what in
      forward) run "$relattn" forward "$model" "$ck/refusal_input.safetensors" \
                 -o "$out/refused.safetensors" ;;
      inspect) run "$relattn" inspect "$model" ;;
      convert) run "$relattn" convert "$model" -o "$out/refused.safetensors" ;;
    esac
    lines=$(wc -l <"$tmp/stderr")
    msg=$(head -c 300 "$tmp/stderr" | head -n 1)
    msg=${msg//"$model"/MODEL}   # EXPECT must be in the reason, not in the path
    if [ "$rc" -ne 65 ]; then
      fail "$name" "refuse ($what)" "$(why), want 65"
    elif [ "$lines" -ne 1 ]; then
      fail "$name" "refuse ($what)" \
        "$lines lines on stderr, want 1: $(head -n 3 "$tmp/stderr" | tr '\n' '|')"
    elif [ -n "$expect" ] && ! grep -qiF -- "$expect" <<<"$msg"; then
      fail "$name" "refuse ($what)" "the message does not name '$expect': $msg"
    elif [ -e "$out/refused.safetensors" ]; then
      fail "$name" "refuse ($what)" "an output file was written"
    else
      ok "$name" "refuse ($what)" "$msg"
    fi
  done
  if [ "$name" = refuse_pickle_global ] && [ -e "$ck/$name/EXECUTED" ]; then
    fail "$name" "refuse (no code run)" "the pickle's os.system ran"
  fi
}

while IFS=$'\t' read -r name kind model tol checks args expect; do
  case $name in ''|'#'*) continue ;; esac
  [ "$checks" = - ] && checks=
  [ "$args" = - ] && args=
  [ "$expect" = - ] && expect=
  read -r -a argv <<<"$args"
  case $kind in
    forward) forward_case "$name" "$ck/$model" "$tol" "$checks" "${argv[@]}" ;;
    refuse) refuse_case "$name" "$ck/$model" "$expect" ;;
    *) fail "$name" case "unknown kind '$kind' in cases.tsv" ;;
  esac
done <"$ck/cases.tsv"

echo "checkpoints: $((SECONDS - t0)) s"
if [ $failed -gt 0 ]; then
  echo "failed:"
  printf '  %s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
