#!/usr/bin/env bash
# test_train.sh - relattn train / eval from outside, on a tiny Swin and the
# real Fashion-MNIST (Debian's dataset-fashion-mnist):
#   1. a few steps train; the loss is finite; the checkpoint loads as a
#      swin model (inspect, forward); eval gives exactly the accuracy train
#      reported (the same correct count);
#   2. a run killed with SIGKILL after a checkpoint and resumed from it ends
#      with the same weights and AdamW moments, to the bit, as a straight
#      run; so does a run stopped by --max-steps and resumed;
#   3. refusals: bad options (64), a missing or malformed data directory
#      (66 / 65), resuming with a changed recipe (64);
#   4. the same seed and threads give the same run; another seed does not;
#   5. --precision bf16: a float32 checkpoint that records it, resumed to
#      the bits of a straight bf16 run; the default (auto) is the bf16 run
#      where the CPU has AVX512_BF16, else the fp32 run;
#   6. --ema: train reports the average's accuracy and eval of the
#      checkpoint gives the same count; the checkpoint holds the trained
#      weights as state; a run resumed equals the straight one; bad decays
#      are usage errors.
#   7. test-time flips: a run that flips its images records tta = flip and
#      evaluates so, one that does not records none; --tta overrides; eval
#      with --set tta=none is the single view, and bad values are refused.
#   test_train.sh RELATTN ST_SAME
set -u
bin=$1 same=$2
data=/usr/share/datasets/fashion-mnist
pass=0 failed=0
ok() { pass=$((pass + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*" >&2; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }
if [ ! -f $data/train-images-idx3-ubyte.gz ]; then
  echo "test_train: $data missing (scripts/deps.sh installs dataset-fashion-mnist)" >&2
  exit 1
fi
tmp=$(mktemp -d /tmp/relattn_test_train.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# a small copy of the data (2000 training and 500 test images)
. "$(dirname "$0")/small_data.sh"
small_data "$data" "$tmp/fm" 2000 500
tiny=(--data "$tmp/fm" --embed-dim 12 --depths 1,1 --heads 2,2 --window 7 --batch 32 --epochs 1 --seed 3 --threads 2)

# 1. a short run, then eval
"$bin" train "${tiny[@]}" --max-steps 12 --ckpt-every 4 --json --out "$tmp/a.st" > "$tmp/a.json" 2> "$tmp/a.err"
check '[ $? = 0 ]' "train exits 0: $(cat "$tmp/a.err")"
last=$(tail -n 1 "$tmp/a.json")
check 'echo "$last" | grep -q "\"test_accuracy\": 0\.[0-9]*"' "final JSON has test_accuracy: $last"
for k in train_seconds images_per_second epochs test_correct; do
  check 'echo "$last" | grep -q "\"$k\": "' "final JSON has $k"
done
correct=$(echo "$last" | sed 's/.*"test_correct": \([0-9]*\).*/\1/')
ev=$("$bin" eval "$tmp/a.st" --data "$tmp/fm" --json 2> "$tmp/e.err")
check '[ $? = 0 ]' "eval exits 0: $(cat "$tmp/e.err")"
check 'echo "$ev" | grep -q "\"correct\": $correct,"' "eval's correct count equals train's $correct: $ev"
check 'echo "$ev" | grep -q "\"confusion\": \[\["' "eval prints the confusion matrix"
check '"$bin" inspect "$tmp/a.st" | grep -q swin' "the checkpoint inspects as a swin model"
check '[ -z "$(ls "$tmp" | grep tmp)" ]' "no temporary files left"
check '"$bin" eval "$tmp/a.st" --data "$tmp/fm" | grep -q "^test accuracy 0\.[0-9]* ([0-9]*/500)"' "eval prints the accuracy"
# --compare: the same model in another precision, side by side; fp32 with
# itself agrees on every image, int8 on most of them
cmp=$("$bin" eval "$tmp/a.st" --data "$tmp/fm" --json --compare fp32 2> /dev/null)
check 'echo "$cmp" | grep -q "\"compare\": {\"precision\": \"fp32\", \"test_accuracy\": [0-9.]*, \"agreement\": 1.0000, \"same\": 500}"' \
  "eval --compare fp32 agrees with itself: $cmp"
cmp=$("$bin" eval "$tmp/a.st" --data "$tmp/fm" --json --compare int8 2> /dev/null)
agree=$(echo "$cmp" | sed 's/.*"same": \([0-9]*\).*/\1/')
check '[ "$agree" -ge 400 ] && [ "$agree" -le 500 ]' "eval --compare int8 agrees on most images: $agree of 500"
check '"$bin" eval "$tmp/a.st" --data "$tmp/fm" --precision bf16 --compare fp32 | grep -q "^fp32: test accuracy 0\.[0-9]* ([0-9]*/500), top-1 agreement with bf16 [01]\.[0-9]* ([0-9]*/500)"' \
  "eval --compare prints the other precision's accuracy and the agreement"
"$bin" eval "$tmp/a.st" --data "$tmp/fm" --compare fp16 2> /dev/null
check '[ $? = 64 ]' "eval --compare of an unknown precision exits 64"

# pictures of the checkpoint: PNG files (their pixels are tests/test_plot.c's)
png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }
"$bin" plot bias "$tmp/a.st" -o "$tmp/bias.png" 2> /dev/null
check 'png "$tmp/bias.png"' "plot bias writes a PNG"
"$bin" plot attention "$tmp/a.st" --data "$tmp/fm" --index 3 --query 1,2 -o "$tmp/att.png" 2> /dev/null
check 'png "$tmp/att.png"' "plot attention writes a PNG"
"$bin" plot curves "$tmp/a.st" "$tmp/a.st" --label one --label two -o "$tmp/cur.png" 2> /dev/null
check 'png "$tmp/cur.png"' "plot curves writes a PNG"
"$bin" plot sample --data "$tmp/fm" --index 7 -o "$tmp/s.png" 2> /dev/null
check 'png "$tmp/s.png"' "plot sample writes a PNG"
check '"$bin" classify "$tmp/a.st" "$tmp/s.png" --top 1 | grep -q "class "' "classify reads the sample"
"$bin" plot attention "$tmp/a.st" --data "$tmp/fm" --query 9,9 -o "$tmp/q.png" 2> /dev/null
check '[ $? = 65 ] && [ ! -e "$tmp/q.png" ]' "a query outside the grid exits 65, no file"
"$bin" plot colours "$tmp/a.st" -o "$tmp/q.png" 2> /dev/null; check '[ $? = 64 ]' "an unknown picture is a usage error"
"$bin" plot bias "$tmp/a.st" 2> /dev/null; check '[ $? = 64 ]' "plot without -o is a usage error"
"$bin" plot curves "$tmp/fm/train-images-idx3-ubyte" -o "$tmp/q.png" 2> /dev/null
check '[ $? = 65 ]' "curves of a file that is not a checkpoint exit 65"

# 2. kill -9 after a checkpoint, resume: the same weights
"$bin" train "${tiny[@]}" --max-steps 12 --ckpt-every 4 --out "$tmp/s.st" 2> /dev/null
"$bin" train "${tiny[@]}" --max-steps 12 --ckpt-every 2 --out "$tmp/k.st" 2> /dev/null &
pid=$!
for i in $(seq 1 600); do [ -f "$tmp/k.st" ] && break; sleep 0.05; done
kill -9 $pid 2> /dev/null
wait $pid 2> /dev/null
check '[ -f "$tmp/k.st" ]' "a checkpoint exists before the kill"
"$bin" train --resume "$tmp/k.st" --data "$tmp/fm" --max-steps 12 --threads 2 --out "$tmp/k.st" 2> "$tmp/k.err"
check '[ $? = 0 ]' "resume exits 0: $(cat "$tmp/k.err")"
check '"$same" "$tmp/s.st" "$tmp/k.st" > /dev/null' "killed and resumed run equals the straight run"
# stopped by --max-steps, resumed twice
"$bin" train "${tiny[@]}" --max-steps 5 --out "$tmp/m.st" 2> /dev/null
"$bin" train --resume "$tmp/m.st" --data "$tmp/fm" --max-steps 9 --threads 2 --out "$tmp/m.st" 2> /dev/null
"$bin" train --resume "$tmp/m.st" --data "$tmp/fm" --max-steps 12 --threads 2 --out "$tmp/m.st" 2> /dev/null
check '"$same" "$tmp/s.st" "$tmp/m.st" > /dev/null' "a run resumed twice equals the straight run"

# 3. refusals
"$bin" train --epochs 0 --out "$tmp/r.st" 2> /dev/null; check '[ $? = 64 ]' "--epochs 0 is a usage error"
"$bin" train --pos sideways --out "$tmp/r.st" 2> /dev/null; check '[ $? = 64 ]' "--pos sideways is a usage error"
"$bin" train --data "$tmp/nowhere" --out "$tmp/r.st" 2> /dev/null; check '[ $? = 66 ]' "a missing data dir exits 66"
mkdir -p "$tmp/bad"; head -c 100 $data/train-images-idx3-ubyte.gz > "$tmp/bad/train-images-idx3-ubyte.gz"
cp $data/train-labels-idx1-ubyte.gz $data/t10k-* "$tmp/bad/"
"$bin" train --data "$tmp/bad" --out "$tmp/r.st" 2> "$tmp/r.err"; code=$?
check '[ $code = 65 ]' "a truncated data file exits 65 (got $code: $(cat "$tmp/r.err"))"
"$bin" train --resume "$tmp/s.st" --lr 0.1 --out "$tmp/r.st" 2> /dev/null; check '[ $? = 64 ]' "a resumed run cannot change its recipe"
"$bin" train --resume "$tmp/nowhere.st" --out "$tmp/r.st" 2> /dev/null; check '[ $? = 66 ]' "resuming a missing checkpoint exits 66"
"$bin" train --resume "$tmp/s.st" --out "$tmp/r.st" 2> /dev/null; check '[ $? = 65 ]' "resuming on other data (the full set) exits 65"
check '[ ! -e "$tmp/r.st" ]' "failed runs leave no checkpoint"
# an output over a file the run read: refused before the first step (issue 33)
cp "$tmp/fm/t10k-labels-idx1-ubyte" "$tmp/labels.keep"
"$bin" train "${tiny[@]}" --out "$tmp/fm/t10k-labels-idx1-ubyte" 2> "$tmp/r.err"; code=$?
check '[ $code = 73 ] && [ $(wc -l < "$tmp/r.err") = 1 ] && grep -q "an input" "$tmp/r.err" && ! grep -q "step" "$tmp/r.err"' \
  "--out a dataset file exits 73 before training (got $code: $(cat "$tmp/r.err"))"
check 'cmp -s "$tmp/labels.keep" "$tmp/fm/t10k-labels-idx1-ubyte"' "the dataset file is kept"
ln "$tmp/fm/t10k-labels-idx1-ubyte" "$tmp/labels.hard"
"$bin" train --resume "$tmp/m.st" --data "$tmp/fm" --max-steps 12 --out "$tmp/labels.hard" 2> "$tmp/r.err"; code=$?
check '[ $code = 73 ] && cmp -s "$tmp/labels.keep" "$tmp/fm/t10k-labels-idx1-ubyte"' \
  "a resumed run's --out a hard link of a dataset file exits 73 (got $code: $(cat "$tmp/r.err"))"
"$bin" eval "$tmp/nowhere.st" 2> /dev/null; check '[ $? = 66 ]' "eval of a missing model exits 66"

# 4. determinism
"$bin" train "${tiny[@]}" --max-steps 4 --out "$tmp/d1.st" 2> /dev/null
"$bin" train "${tiny[@]}" --max-steps 4 --out "$tmp/d2.st" 2> /dev/null
check '"$same" "$tmp/d1.st" "$tmp/d2.st" > /dev/null' "the same seed gives the same weights"
"$bin" train "${tiny[@]}" --max-steps 4 --seed 4 --out "$tmp/d3.st" 2> /dev/null
check '! "$same" "$tmp/d1.st" "$tmp/d3.st" > /dev/null 2>&1' "another seed gives other weights"

# 5. bf16: the checkpoint is float32 and records the precision; a run
# stopped and resumed (in bf16, from the checkpoint) equals the straight
# one; it is not the fp32 run; int8 does not train
"$bin" train "${tiny[@]}" --max-steps 6 --precision bf16 --json --out "$tmp/b.st" > "$tmp/b.json" 2> "$tmp/b.err"
check '[ $? = 0 ]' "train --precision bf16 exits 0: $(cat "$tmp/b.err")"
check 'tail -n 1 "$tmp/b.json" | grep -q "\"test_accuracy\": 0\.[0-9]*"' "bf16: final JSON has test_accuracy"
check '"$bin" inspect "$tmp/b.st" --json | grep -q "\"precision\": \"fp32\""' "the bf16 checkpoint loads as a float32 model"
check 'grep -aq "\"train.precision\":\"bf16\"" "$tmp/b.st"' "the checkpoint records train.precision bf16"
"$bin" train "${tiny[@]}" --max-steps 3 --precision bf16 --out "$tmp/b2.st" 2> /dev/null
"$bin" train --resume "$tmp/b2.st" --data "$tmp/fm" --max-steps 6 --threads 2 --out "$tmp/b2.st" 2> /dev/null
check '"$same" "$tmp/b.st" "$tmp/b2.st" > /dev/null' "a bf16 run resumed equals the straight bf16 run"
# train evaluates the checkpoint as eval loads it (float32), not in bf16
correct=$(tail -n 1 "$tmp/b.json" | sed 's/.*"test_correct": \([0-9]*\).*/\1/')
ev=$("$bin" eval "$tmp/b.st" --data "$tmp/fm" --json 2> /dev/null)
check 'echo "$ev" | grep -q "\"correct\": $correct,"' "bf16: eval's count equals train's $correct: $ev"
"$bin" train "${tiny[@]}" --max-steps 6 --precision fp32 --out "$tmp/f.st" 2> /dev/null
check '! "$same" "$tmp/b.st" "$tmp/f.st" > /dev/null 2>&1' "bf16 is not fp32"
# the default precision (auto): bf16 where the CPU has VDPBF16PS and the
# AVX-512 kernels run, else fp32; the run is the explicit one, to the bit
want=fp32
if grep -qw avx512_bf16 /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo &&
   grep -qw avx512vl /proc/cpuinfo && [ "${RELATTN_KERNEL:-avx512}" = avx512 ]; then want=bf16; fi
"$bin" train "${tiny[@]}" --max-steps 6 --out "$tmp/au.st" 2> "$tmp/au.err"
if [ $want = bf16 ]; then ref=b; else ref=f; fi
check '"$same" "$tmp/au.st" "$tmp/$ref.st" > /dev/null' "the default precision is $want on this CPU: the $want run"
check '[ $want = fp32 ] || grep -q "products in bf16" "$tmp/au.err"' "train says it runs in bf16"
"$bin" train "${tiny[@]}" --max-steps 6 --precision auto --out "$tmp/au2.st" 2> /dev/null
check '"$same" "$tmp/au.st" "$tmp/au2.st" > /dev/null' "--precision auto is the default"
RELATTN_KERNEL=avx2 "$bin" train "${tiny[@]}" --max-steps 6 --out "$tmp/a2.st" 2> /dev/null
RELATTN_KERNEL=avx2 "$bin" train "${tiny[@]}" --max-steps 6 --precision fp32 --out "$tmp/f2.st" 2> /dev/null
check '"$same" "$tmp/a2.st" "$tmp/f2.st" > /dev/null' "auto with the AVX2 kernels (no VDPBF16PS) trains in fp32"
"$bin" train "${tiny[@]}" --precision int8 --out "$tmp/r.st" 2> /dev/null; check '[ $? = 64 ]' "--precision int8 does not train"
"$bin" train --resume "$tmp/b2.st" --precision fp32 --out "$tmp/r.st" 2> /dev/null; check '[ $? = 64 ]' "a resumed run keeps its precision"

# 6. the average of the weights
"$bin" train "${tiny[@]}" --max-steps 8 --ema 0.9 --json --out "$tmp/v.st" > "$tmp/v.json" 2> "$tmp/v.err"
check '[ $? = 0 ]' "train --ema exits 0: $(cat "$tmp/v.err")"
correct=$(tail -n 1 "$tmp/v.json" | sed 's/.*"test_correct": \([0-9]*\).*/\1/')
ev=$("$bin" eval "$tmp/v.st" --data "$tmp/fm" --json 2> /dev/null)
check 'echo "$ev" | grep -q "\"correct\": $correct,"' "--ema: eval's count equals train's $correct: $ev"
check 'grep -aq "__optim__.weights.head.weight" "$tmp/v.st"' "--ema: the trained weights are in the checkpoint"
"$bin" train "${tiny[@]}" --max-steps 8 --out "$tmp/v0.st" 2> /dev/null
check '! "$same" "$tmp/v.st" "$tmp/v0.st" > /dev/null 2>&1' "--ema: the checkpoint's model is the average, not the weights"
"$bin" train "${tiny[@]}" --max-steps 3 --ema 0.9 --out "$tmp/v2.st" 2> /dev/null
"$bin" train --resume "$tmp/v2.st" --data "$tmp/fm" --max-steps 8 --threads 2 --out "$tmp/v2.st" 2> /dev/null
check '"$same" "$tmp/v.st" "$tmp/v2.st" > /dev/null' "--ema: a run resumed equals the straight run"
for d in 1 0.2 -1 x; do
  "$bin" train "${tiny[@]}" --ema $d --out "$tmp/r.st" 2> /dev/null; check '[ $? = 64 ]' "--ema $d is a usage error"
done
"$bin" train --resume "$tmp/v2.st" --ema 0.99 --out "$tmp/r.st" 2> /dev/null; check '[ $? = 64 ]' "a resumed run keeps its average"

# 7. test-time flips (the runs above flip their images: tta = flip)
meta() { "$bin" inspect "$1" --json | grep -o '"tta": "[a-z]*"'; }
check '[ "$(meta "$tmp/a.st")" = "\"tta\": \"flip\"" ]' "a flipping run records tta = flip: $(meta "$tmp/a.st")"
"$bin" train "${tiny[@]}" --max-steps 12 --augment none --json --out "$tmp/n.st" > "$tmp/n.json" 2> /dev/null
check '[ "$(meta "$tmp/n.st")" = "\"tta\": \"none\"" ]' "a run without flips records tta = none: $(meta "$tmp/n.st")"
"$bin" train "${tiny[@]}" --max-steps 12 --tta none --json --out "$tmp/t.st" > "$tmp/t.json" 2> /dev/null
check '[ "$(meta "$tmp/t.st")" = "\"tta\": \"none\"" ]' "--tta none is recorded: $(meta "$tmp/t.st")"
check '"$same" "$tmp/a.st" "$tmp/t.st" > /dev/null' "--tta changes what the run evaluates, not what it trains"
one=$(tail -n 1 "$tmp/t.json" | sed 's/.*"test_correct": \([0-9]*\).*/\1/')
ev=$("$bin" eval "$tmp/a.st" --data "$tmp/fm" --set tta=none --json 2> /dev/null)
check 'echo "$ev" | grep -q "\"correct\": $one,"' "eval --set tta=none of the flip run equals the --tta none run's count $one: $ev"
ev=$("$bin" eval "$tmp/t.st" --data "$tmp/fm" --json 2> /dev/null)
check 'echo "$ev" | grep -q "\"correct\": $one,"' "eval of the --tta none run equals its train count $one: $ev"
"$bin" train "${tiny[@]}" --tta sideways --out "$tmp/r.st" 2> /dev/null; check '[ $? = 64 ]' "--tta sideways is a usage error"
"$bin" eval "$tmp/a.st" --data "$tmp/fm" --set tta=sideways > /dev/null 2>&1; check '[ $? = 65 ]' "eval refuses metadata tta = sideways (65)"
"$bin" train --resume "$tmp/v2.st" --tta none --out "$tmp/r.st" 2> /dev/null; check '[ $? = 64 ]' "a resumed run keeps its tta"

echo "$pass passed, $failed failed"
[ $failed = 0 ]
