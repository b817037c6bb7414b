#!/usr/bin/env bash
# mpi_shard_test.sh BUILD_DIR: reduce-scatter and all-gather (collectives/shard.h) with one rank per
# process, 2 and 3 processes:
#   1. `mpirun -np K dpb_tests --gtest_filter='MpiShard.*'` (tests/test_shard_collectives.cpp):
#      every algorithm that runs across processes (naive, ring, direct, rhd at K = 2, mpi), odd and
#      tiny sizes (n < K included), exact on every rank, on group memory (shared memory) and plain
#      memory (messages), on the CPU and the async device (host staging); every rank's bytes sent
#      (CommGroup::sent_bytes) equal to the schedule's count (collectives/comm_volume.h);
#   2. dpbench-micro's reducescatter/ and allgather/ families under mpirun: every such algorithm
#      registered as <family>/cpu/<alg>/procs:K/bytes:<n>, wrong = 0, busbw = algbw (K-1)/K,
#      sent_bytes = sent_bytes_schedule.
# Exit 77 (ctest: skipped) without mpirun or an MPI build. About 20 s on 2 cores.
set -u
BUILD="$(cd "$1" && pwd)"
command -v mpirun >/dev/null || { echo "mpi_shard_test: SKIP: mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
for np in 2 3; do
  out=$(timeout 150 mpirun --oversubscribe --bind-to none -np $np "$BUILD/dpb_tests" \
        --gtest_filter='MpiShard.*' --gtest_color=no 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -q '^\[  SKIPPED \]' <<<"$out"; then
    echo "mpi_shard_test: SKIP: $(grep -m1 'Skipped\|SKIPPED' <<<"$out")"; exit 77
  fi
  passed=$(grep -c '^\[  PASSED  \] 1 test' <<<"$out")
  if [ $rc -ne 0 ] || [ "$passed" != $np ]; then
    grep -A8 ': Failure' <<<"$out" | head -60; echo "$out" | tail -8
    echo "FAIL: mpirun -np $np dpb_tests --gtest_filter='MpiShard.*': rc=$rc, $passed of $np ranks passed"
    fails=$((fails + 1))
  else
    echo "ok: $np processes: every reduce-scatter and all-gather exact (shared memory, messages, cpu, async)"
  fi
  if [ -x "$BUILD/dpbench-micro" ]; then
    (cd "$tmp" && timeout 150 mpirun --oversubscribe --bind-to none -np $np "$BUILD/dpbench-micro" \
       --benchmark_filter="^(reducescatter|allgather)/cpu/.*/procs:$np/bytes:(8|4096|1048576)/" \
       --benchmark_min_time=0.01 --benchmark_color=false --benchmark_out="$tmp/np$np.json" \
       > "$tmp/out.txt" 2>&1)
    rc=$?
    [ $rc -eq 0 ] || { echo "FAIL: dpbench-micro -np $np: rc=$rc"; tail -20 "$tmp/out.txt"; fails=$((fails + 1)); continue; }
    python3 - "$tmp/np$np.json" "$np" "$BUILD/dpbench" <<'PY' || fails=$((fails + 1))
import json, subprocess, sys
path, np, dpbench = sys.argv[1], int(sys.argv[2]), sys.argv[3]
runs = json.load(open(path))["benchmarks"]
info = json.loads(subprocess.run([dpbench, "info"], check=True, capture_output=True, text=True).stdout)
for fam in ("reducescatter", "allgather"):
    want = {e["name"] for e in info[f"{fam}_algorithms"]
            if "cpu" in e["runs_on"] and "processes" in e["launchers"]
            and (e["name"] != "rhd" or np & (np - 1) == 0)}
    got = {r["name"].split("/")[2] for r in runs if r["name"].startswith(fam + "/")}
    assert got == want, f"{fam}: registered {sorted(got)}, want {sorted(want)}"
bad = [r["name"] for r in runs if r.get("wrong") != 0 or "error_occurred" in r]
assert not bad, f"wrong != 0 or errors: {bad}"
for r in runs:
    assert abs(r["busbw_GBps"] - r["algbw_GBps"] * (np - 1) / np) <= 1e-9 * max(1, r["algbw_GBps"]), r
    assert r["sent_bytes"] == r["sent_bytes_schedule"] > 0, r  # rank 0's bytes sent (comm_volume.h)
print(f"ok: dpbench-micro -np {np}: {len(runs)} reducescatter/allgather benchmarks, wrong = 0")
PY
  fi
done
exit $((fails > 0))
