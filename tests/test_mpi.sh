#!/usr/bin/env bash
# test_mpi.sh - relattn train under mpirun, on a tiny Swin and a
# small copy of Fashion-MNIST:
#   1. 2 processes of 1 thread end with the very weights and AdamW moments
#      of 1 process of 2 threads (the same slices, summed in the same
#      order), with and without --zero (ZeRO-1); 4 processes end within
#      1e-6 of 4 threads (MPI's sum of 4 reassociates);
#   2. only process 0 prints; the evaluation split across the processes
#      gives the count `relattn eval` gives for the checkpoint;
#   3. --resume across process counts: 2 processes (ZeRO-1) for 4 steps,
#      then 1 process, gives the straight run; 1 process, then 2;
#   4. a failure in the processes ends all of them with its exit code.
#   test_mpi.sh RELATTN ST_SAME MPI_FOUND      (exit 77: skipped)
set -u
bin=$1 same=$2 mpi=$3
data=/usr/share/datasets/fashion-mnist
if [ "$mpi" != 1 ] || ! command -v mpirun > /dev/null; then
  echo "test_mpi: skipped: relattn was built without MPI, or mpirun is missing" \
       "(scripts/deps.sh installs openmpi-bin and libopenmpi-dev)" >&2
  exit 77
fi
[ -f $data/train-images-idx3-ubyte.gz ] || { echo "test_mpi: $data missing" >&2; exit 1; }
pass=0 failed=0
ok() { pass=$((pass + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*" >&2; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }
tmp=$(mktemp -d /tmp/relattn_test_mpi.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/small_data.sh"
small_data "$data" "$tmp/fm" 1024 200
fm=(--data "$tmp/fm")
tiny=(--embed-dim 12 --depths 1,1 --heads 2,2 --window 7 --batch 32 --epochs 2
      --seed 5 --ckpt-every 1000)
# as root Open MPI wants to be told; a CI machine of 2 cores runs 4
# processes only when allowed more than one per core
mpi() { local n=$1; shift; timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$n" "$bin" "$@"; }

# 1. the same run on 1 and on several processes
"$bin" train "${fm[@]}" "${tiny[@]}" --max-steps 8 --threads 2 --json --out "$tmp/t2.st" > "$tmp/t2.json" 2> "$tmp/t2.err"
check '[ $? = 0 ]' "1 process of 2 threads: $(tail -n 3 "$tmp/t2.err")"
mpi 2 train "${fm[@]}" "${tiny[@]}" --max-steps 8 --threads 1 --json --out "$tmp/p2.st" > "$tmp/p2.json" 2> "$tmp/p2.err"
check '[ $? = 0 ]' "2 processes: $(tail -n 3 "$tmp/p2.err")"
check '"$same" "$tmp/t2.st" "$tmp/p2.st" > /dev/null' "2 processes = 2 threads, weights and moments"
mpi 2 train "${fm[@]}" "${tiny[@]}" --max-steps 8 --threads 1 --zero --out "$tmp/z2.st" 2> "$tmp/z2.err"
check '[ $? = 0 ]' "2 processes, ZeRO-1: $(tail -n 3 "$tmp/z2.err")"
check '"$same" "$tmp/t2.st" "$tmp/z2.st" > /dev/null' "2 processes with ZeRO-1 = 2 threads"
check 'grep -q "optimiser state .* MiB per process (ZeRO-1)" "$tmp/z2.err"' \
      "ZeRO-1 reports the optimiser state per process"
"$bin" train "${fm[@]}" "${tiny[@]}" --max-steps 8 --threads 4 --out "$tmp/t4.st" 2> /dev/null
mpi 4 train "${fm[@]}" "${tiny[@]}" --max-steps 8 --threads 1 --out "$tmp/p4.st" 2> "$tmp/p4.err"
check '[ $? = 0 ]' "4 processes: $(tail -n 3 "$tmp/p4.err")"
check '"$same" "$tmp/t4.st" "$tmp/p4.st" "" 1e-6 > /dev/null' "4 processes within 1e-6 of 4 threads"

# 2. one voice; the split evaluation counts what eval counts
check '[ "$(grep -c "test accuracy" "$tmp/p4.err")" = 1 ]' "one evaluation line from 4 processes"
check '[ "$(wc -l < "$tmp/p2.json")" = 1 ]' "one JSON line from 2 processes"
check 'grep -q "\"processes\": 2" "$tmp/p2.json"' "the JSON names the processes"
correct=$(sed 's/.*"test_correct": \([0-9]*\).*/\1/' "$tmp/p2.json")
ev=$("$bin" eval "$tmp/p2.st" --data "$tmp/fm" --json 2> /dev/null)
check 'echo "$ev" | grep -q "\"correct\": $correct,"' "eval's count = the 2 processes' $correct: $ev"
correct1=$(sed 's/.*"test_correct": \([0-9]*\).*/\1/' "$tmp/t2.json")
check '[ "$correct1" = "$correct" ]' "1 and 2 processes count the same: $correct1 and $correct"

# 3. resume across process counts
mpi 2 train "${fm[@]}" "${tiny[@]}" --max-steps 4 --threads 1 --zero --out "$tmp/r.st" 2> /dev/null
"$bin" train --resume "$tmp/r.st" "${fm[@]}" --max-steps 8 --threads 2 --out "$tmp/r1.st" 2> "$tmp/r1.err"
check '[ $? = 0 ]' "resume on 1 process: $(tail -n 3 "$tmp/r1.err")"
check '"$same" "$tmp/t2.st" "$tmp/r1.st" > /dev/null' "2 processes (ZeRO-1), then 1 = straight run"
"$bin" train "${fm[@]}" "${tiny[@]}" --max-steps 4 --threads 2 --out "$tmp/s.st" 2> /dev/null
mpi 2 train --resume "$tmp/s.st" "${fm[@]}" --max-steps 8 --threads 1 --out "$tmp/s2.st" 2> "$tmp/s2.err"
check '[ $? = 0 ]' "resume on 2 processes: $(tail -n 3 "$tmp/s2.err")"
check '"$same" "$tmp/t2.st" "$tmp/s2.st" > /dev/null' "1 process, then 2 = straight run"

# 4. a failure ends every process, with its code
mpi 2 train "${tiny[@]}" --max-steps 2 --data "$tmp/none" --out "$tmp/f.st" > /dev/null 2> "$tmp/f.err"
rc=$?
check '[ $rc = 66 ]' "a missing data directory: exit 66 from mpirun, got $rc"
check '[ ! -e "$tmp/f.st" ]' "no checkpoint after a failure"
mpi 2 train "${fm[@]}" --embed-dim 12 --depths 1,1 --heads 2,2 --batch 1 --max-steps 2 --out "$tmp/g.st" > /dev/null 2> "$tmp/g.err"
rc=$?
check '[ $rc = 64 ] || [ $rc = 65 ]' "a batch of 1 on 2 processes is refused, got $rc"
check 'grep -q "cannot be shared by 2 processes" "$tmp/g.err"' "and says why: $(head -n 1 "$tmp/g.err")"

echo "test_mpi: $pass passed, $failed failed"
[ $failed = 0 ]
