#!/usr/bin/env bash
# Two revisions of relattn side by side on the same machine in the same run:
# the networks' inference forward (relattn_bench --what nets) and the
# default training step (relattn_bench_train), revision A then B in turn,
# ROUNDS times, so that both see the same minutes of a shared machine.
# Prints every round and the median of each (and B over A).
#   bench/ab.sh REV_A REV_B [ROUNDS] [OUT.tsv]
# Builds each revision in a temporary worktree (Release). The networks are
# exported once by tools/export.py (PyTorch) into $RELATTN_BENCH_MODELS
# (default /tmp/relattn-bench-models), as bench/run.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bench/ab.sh REV_A REV_B [ROUNDS] [OUT.tsv]" >&2; exit 64; }
a=$1 b=$2 rounds=${3:-3} out=${4:-}
models=${RELATTN_BENCH_MODELS:-/tmp/relattn-bench-models}
threads=$(nproc)
work=$(mktemp -d /tmp/relattn-ab.XXXXXX)
cleanup() {
  for r in a b; do git worktree remove --force "$work/$r" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
for r in a b; do
  rev=$a; [ $r = b ] && rev=$b
  git worktree add --detach "$work/$r" "$rev" >/dev/null 2>&1
  cmake -S "$work/$r" -B "$work/$r/build" -DCMAKE_BUILD_TYPE=Release -DRELATTN_TESTS=OFF >/dev/null
  cmake --build "$work/$r/build" -j "$threads" --target relattn_bench relattn_bench_train >/dev/null
done
mkdir -p "$models"
for net in swin_t vit_b_16; do
  [ -s "$models/$net.safetensors" ] ||
    /usr/bin/python3 tools/export.py --torchvision "$net" --out "$models/$net.safetensors" >&2
done
tsv=$work/ab.tsv
printf 'round\trev\tmeasure\tthreads\tvalue\tunit\n' >"$tsv"
for i in $(seq 1 "$rounds"); do
  for r in a b; do
    rev=$a; [ $r = b ] && rev=$b
    # images/s of each network row at 1 and at every core
    "$work/$r/build/relattn_bench" --what nets --batches 8 --threads "1,$threads" --reps 3 \
        --models "$models" 2>/dev/null |
      awk -v i="$i" -v rev="$rev" '
        / B=8 / { net = $1 " " $2; meas = $3; t = $5; v = $6 }
        /^ +[0-9]+ +[0-9.]+ / { t = $1; v = $2 }
        (/ B=8 / || /^ +[0-9]+ +[0-9.]+ /) { print i "\t" rev "\t" net " " meas "\t" t "\t" v "\timg/s" }' >>"$tsv"
    for t in 1 "$threads"; do
      v=$("$work/$r/build/relattn_bench_train" --threads "$t" --steps 10 --reps 3 | tail -n 1 |
          sed -E 's/.*median ([0-9.]+) img\/s.*/\1/')
      printf '%s\t%s\ttrain step (default model, batch 128)\t%s\t%s\timg/s\n' "$i" "$rev" "$t" "$v" >>"$tsv"
    done
  done
done
[ -n "$out" ] && cp "$tsv" "$out"
/usr/bin/python3 - "$tsv" "$a" "$b" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
a, b = sys.argv[2], sys.argv[3]
keys = sorted({(r["measure"], r["threads"]) for r in rows})
print(f"{'measure':44} {'threads':>7} {'A img/s':>9} {'B img/s':>9} {'B/A':>6}   (medians of the rounds)")
for m, t in keys:
    va = [float(r["value"]) for r in rows if r["rev"] == a and (r["measure"], r["threads"]) == (m, t)]
    vb = [float(r["value"]) for r in rows if r["rev"] == b and (r["measure"], r["threads"]) == (m, t)]
    if va and vb:
        ma, mb = statistics.median(va), statistics.median(vb)
        print(f"{m:44} {t:>7} {ma:9.2f} {mb:9.2f} {mb / ma:6.2f}")
EOF
