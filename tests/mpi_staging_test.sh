#!/usr/bin/env bash
# mpi_staging_test.sh BUILD_DIR: the MPI transport's host staging (the path CUDA devices take)
# under overlap, on the asynchronous test device, with 2 processes: runs tests/test_mpi_staging.cpp
# as `mpirun -np 2 dpb_tests --gtest_filter='MpiStaging.*'` (same parameters as the threads run
# and as k = 1; staging on the comm stream, never on the compute stream; host staging allocated
# at setup only). Exit 77 (ctest: skipped) without mpirun, an MPI build or the dataset. A few
# seconds on 2 cores (--oversubscribe).
set -u
BIN="$1/dpb_tests"
command -v mpirun >/dev/null || { echo "mpi_staging_test: SKIP: mpirun not found"; exit 77; }
[ -x "$BIN" ] || { echo "FAIL: $BIN not built"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# ranks NP TEST [ENV...]: MpiStaging.TEST under mpirun -np NP (ENV exported to every rank); sets
# out; fails the script unless every rank passed.
ranks() {
  local np=$1 test=$2 xs=() e; shift 2
  for e in "$@"; do xs+=(-x "${e%%=*}"); done
  out=$(env "$@" timeout 150 mpirun --oversubscribe --bind-to none "${xs[@]}" -np "$np" "$BIN" \
        --gtest_filter="MpiStaging.$test" --gtest_color=no 2>&1)
  local rc=$?
  if [ $rc -eq 0 ] && grep -q '^\[  SKIPPED \]' <<<"$out"; then
    echo "mpi_staging_test: SKIP: $(grep -m1 -A0 'Skipped' <<<"$out" || grep -m1 SKIPPED <<<"$out")"
    exit 77
  fi
  local passed
  passed=$(grep -c '^\[  PASSED  \] 1 test' <<<"$out")
  if [ $rc -ne 0 ] || [ "$passed" != "$np" ]; then
    grep -A8 ': Failure' <<<"$out" | head -100
    echo "$out" | tail -12
    echo "FAIL: $* mpirun -np $np dpb_tests --gtest_filter='MpiStaging.$test': rc=$rc, $passed of $np ranks passed"
    exit 1
  fi
}
ranks 2 OverlapStagesOnCommStreamWithBuffersFromSetup
echo "ok: 2 processes on the async device, overlap, bucketed (ring, naive, mpi): parameters as" \
     "threads and k = 1, staging on the comm stream, host staging from setup only"
# Two levels: 2 x 2 emulated nodes, hier (its cross-node groups move their shards by messages).
ranks 4 HierCrossNodeStagingFromSetup DPB_NODES=2
echo "ok: 4 processes on 2 x 2 emulated nodes, hier, async device: parameters as k = 1, host" \
     "staging from setup only"
