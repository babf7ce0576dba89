# blas.sh - sourced by bench/run.sh and bench/train.sh: the OpenBLAS kernel
# sets PyTorch is measured with. OpenBLAS reads OPENBLAS_CORETYPE once, when
# it is loaded; Debian's 0.3.21 does not know recent CPUs and, with the
# variable unset, falls back to its SSE3 (Prescott) kernels on them.

# The kernel sets, one a line: OPENBLAS_CORETYPE as the environment has it
# ("unset" if it is not set), then the best set for this CPU if that is
# another one: SkylakeX with AVX-512F, Haswell with AVX2.
blas_coretypes() {
  local env=${OPENBLAS_CORETYPE:-unset} best=
  if grep -qw avx512f /proc/cpuinfo; then best=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then best=Haswell
  fi
  echo "$env"
  if [ -n "$best" ] && [ "$best" != "$env" ]; then echo "$best"; fi
}

# blas_run CORETYPE THREADS COMMAND...: COMMAND with that kernel set ("unset"
# takes the variable away) and OpenBLAS's pool of THREADS threads.
blas_run() {
  local ct=$1 t=$2
  shift 2
  if [ "$ct" = unset ]; then
    env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS="$t" "$@"
  else
    env OPENBLAS_CORETYPE="$ct" OPENBLAS_NUM_THREADS="$t" "$@"
  fi
}
