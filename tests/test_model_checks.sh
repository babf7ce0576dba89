#!/usr/bin/env bash
# test_model_checks.sh - what docs/reference.md promises about model
# sources and checkpoints, where the code once said otherwise (issue 33,
# "Also seen"), through the command line:
#   1. a state dict two keys deep under two 1000-byte keys is found (the
#      walk is 4 keys deep whatever the keys' length);
#   2. an error in a folder's preprocessor_config.json names that file,
#      not config.json;
#   3. a resumed checkpoint whose tta is neither none nor flip is refused
#      (65) before its first step, not at its first evaluation;
#   4. labels (id2label, --set labels) of another length than the head are
#      refused (65) at open; an int8 tensor with scales that is not a
#      Linear weight is refused; scales beside a float weight are refused.
#
#   bash tests/test_model_checks.sh RELATTN_BINARY FIXTURES_DIR
# The last line is "N passed, N failed"; the exit status is 1 if any failed.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/harness.sh" relattn_model_checks "$@" || exit 2
SWIN=$FIX/net_swin_tv.model.safetensors

# refused WANT_TEXT ARGS...: exit 65, one line on stderr holding WANT_TEXT, nothing on stdout
refused() {
    local want=$1 rc
    shift
    "$BIN" "$@" </dev/null >"$T/out" 2>"$T/err"
    rc=$?
    if [ $rc -eq 65 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -qF -- "$want" "$T/err" &&
        [ ! -s "$T/out" ]; then ok; else
        bad "relattn $*: exit $rc (expected 65, one line with '$want'): $(head -c 300 "$T/err")"
    fi
}

# ---- 1. a deep state dict under long keys -----------------------------------
k1=$(printf 'k%.0s' $(seq 1000)) k2=$(printf 'd%.0s' $(seq 1000))
"${H[@]}" pth "$SWIN" "$T/deep.pth" "$k1" "$k2" || bad "cannot write deep.pth"
"$BIN" inspect "$T/deep.pth" --set img_size=32 >"$T/out" 2>"$T/err"
rc=$?
if [ $rc -eq 0 ] && grep -q "^state dict:     $k1/$k2\$" "$T/out"; then ok; else
    bad "a state dict under two 1000-byte keys: exit $rc: $(head -c 200 "$T/err")"
fi
if "$BIN" inspect "$T/deep.pth" --set img_size=32 --key "$k1/$k2" >/dev/null 2>"$T/err"; then ok; else
    bad "--key of two 1000-byte keys: $(head -c 200 "$T/err")"
fi

# ---- 2. preprocessor_config.json named in its errors ------------------------
labels10='["a","b","c","d","e","f","g","h","i","j"]'
"${H[@]}" hf "$SWIN" "$T/pre" "$labels10" '{"image_mean": "dark", "image_std": [0.5]}'
refused "preprocessor_config.json image_mean must be" inspect "$T/pre"
if grep -q "relattn inspect: config.json" "$T/err"; then bad "the error names config.json"; else ok; fi
"${H[@]}" hf "$SWIN" "$T/pre2" "$labels10" '{"image_mean": [0.5], "image_std": [0.5, 0.5, 0.5]}'
"$BIN" inspect "$T/pre2" >"$T/out" 2>"$T/err"
if grep -q "mean .*(preprocessor_config.json image_mean)" "$T/out"; then ok; else
    bad "a good preprocessor_config.json: $(head -c 300 "$T/err")"
fi

# ---- 3. a resumed checkpoint's tta, before any step ---------------------------
data=/usr/share/datasets/fashion-mnist
if [ -f $data/train-images-idx3-ubyte.gz ]; then
    . "$HERE/small_data.sh"
    small_data "$data" "$T/fm" 256 64
    "$BIN" train --data "$T/fm" --embed-dim 8 --depths 1,1 --heads 1,1 --window 7 --batch 32 \
        --epochs 1 --seed 1 --threads 2 --max-steps 2 --out "$T/c.st" 2>"$T/err" ||
        bad "train: $(head -c 200 "$T/err")"
    "${H[@]}" meta "$T/c.st" "$T/bogus.st" tta bogus
    refused 'tta = "bogus"' train --resume "$T/bogus.st" --data "$T/fm" --max-steps 6 \
        --ckpt-every 1 --threads 2 --out "$T/r.st"
    if [ -e "$T/r.st" ]; then bad "the resumed run with tta=bogus trained and saved steps"; else ok; fi
    "$BIN" train --resume "$T/c.st" --data "$T/fm" --max-steps 3 --threads 2 --out "$T/r2.st" \
        2>"$T/err" && ok || bad "a good checkpoint resumes: $(head -c 200 "$T/err")"
else
    bad "$data missing (scripts/deps.sh installs dataset-fashion-mnist)"
fi

# ---- 4. labels of the head's length; int8 only on Linear weights ---------------
"${H[@]}" hf "$SWIN" "$T/three" '["a","b","c"]'
refused "names 3 classes, the head has 10" inspect "$T/three"
refused "config.json id2label" classify "$T/three" "$FIX/img_wide.png"
refused "names 1 classes, the head has 10" inspect "$SWIN" --set 'labels=["a"]'
refused "not a JSON array" inspect "$SWIN" --set 'labels=["a"], "injected": true, "x": ["b"]'
refused "not a string" inspect "$SWIN" --set 'labels=["a","b","c","d","e","f","g","h","i",7]'
"${H[@]}" hf "$SWIN" "$T/ten" "$labels10"
"$BIN" inspect "$T/ten" >/dev/null 2>"$T/err" && ok || bad "ten labels for ten classes: $(cat "$T/err")"
"$BIN" inspect "$SWIN" --set "labels=[\"a\",null,\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\"]" \
    >/dev/null 2>"$T/err" && ok || bad "a null label (a class without a name): $(cat "$T/err")"
"${H[@]}" int8 "$SWIN" "$T/table8.st" table
refused "is not a Linear weight" inspect "$T/table8.st"
"${H[@]}" int8 "$SWIN" "$T/float8.st" float
refused "which is not int8" inspect "$T/float8.st"
# the int8 files convert writes still load, and give what --precision int8 gives
"$BIN" convert "$SWIN" --dtype int8 -o "$T/q.st" 2>"$T/err" || bad "convert --dtype int8: $(cat "$T/err")"
"$BIN" inspect "$T/q.st" >/dev/null 2>"$T/err" && ok || bad "an int8 file: $(cat "$T/err")"

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
