# blas.sh - sourced by bench/run.sh and bench/train.sh: the OpenBLAS builds
# and kernel sets PyTorch is measured with. OpenBLAS reads OPENBLAS_CORETYPE
# once, when it is loaded; Debian's 0.3.21 does not know recent CPUs and,
# with the variable unset, falls back on them (recent Intel Xeons: its SSE3
# Prescott kernels; AMD Zen 4: Cooperlake's).

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

# The OpenBLAS builds, one a line: "pthread" (the system's libopenblas.so.0
# and libblas.so.3, Debian's default) and, when Debian's libopenblas0-openmp
# is there, "openmp" (the build relattn links: on OpenMP threads, which
# PyTorch shares; measured on swin_t it is PyTorch's best too).
RA_OPENBLAS_OPENMP_DIR=/usr/lib/$(gcc -print-multiarch 2>/dev/null)/openblas-openmp
blas_builds() {
  echo pthread
  if [ -e "$RA_OPENBLAS_OPENMP_DIR/libblas.so.3" ]; then echo openmp; fi
}

# blas_run BUILD CORETYPE THREADS COMMAND...: COMMAND on that OpenBLAS build
# (its directory first on LD_LIBRARY_PATH for "openmp"), with that kernel
# set ("unset" takes the variable away) and OpenBLAS's pool of THREADS
# threads.
blas_run() {
  local build=$1 ct=$2 t=$3
  shift 3
  local lib=()
  if [ "$build" = openmp ]; then
    lib=(LD_LIBRARY_PATH="$RA_OPENBLAS_OPENMP_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  fi
  if [ "$ct" = unset ]; then
    env -u OPENBLAS_CORETYPE "${lib[@]}" OPENBLAS_NUM_THREADS="$t" "$@"
  else
    env OPENBLAS_CORETYPE="$ct" "${lib[@]}" OPENBLAS_NUM_THREADS="$t" "$@"
  fi
}
