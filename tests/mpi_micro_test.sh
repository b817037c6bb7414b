#!/usr/bin/env bash
# mpi_micro_test.sh BUILD_DIR: dpbench-micro under mpirun: with 2 and 3 processes every
# algorithm that runs across processes (naive, ring, direct, rhd, auto, mpi) reports wrong = 0,
# names itself allreduce/cpu/<alg>/procs:<K>/bytes:<n> with the rank_min/avg/max_us counters, and
# only rank 0 writes the JSON (one file, no temporary left); over shared memory and over messages.
# Exit 77 (ctest: skipped) without
# mpirun or an MPI build. About 30 s on 2 cores.
set -u
MICRO="$(cd "$1" && pwd)/dpbench-micro"
command -v mpirun >/dev/null || { echo "mpi_micro_test: SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
# Both paths of the MPI transport: shared memory (required) and messages, each at 2 and 3.
for run in "2 1" "3 1" "2 0" "3 0"; do
  read -r np shm <<<"$run"
  (cd "$tmp" && DPB_SHM=$shm mpirun --oversubscribe --bind-to none -x DPB_SHM -np "$np" "$MICRO" \
     --benchmark_filter="allreduce/cpu/.*/procs:$np/bytes:(8|4096|1048576)/" --benchmark_color=false \
     --benchmark_min_time=0.01 --benchmark_out="$tmp/np$np.json" > "$tmp/out.txt" 2>&1)
  rc=$?
  out=$(tr -d '\000' < "$tmp/out.txt"); rm -f "$tmp/out.txt"
  if grep -q "built without MPI" <<<"$out"; then echo "mpi_micro_test: SKIP: built without MPI"; exit 77; fi
  [ $rc -eq 0 ] || { echo "FAIL: np=$np DPB_SHM=$shm rc=$rc"; echo "$out" | tail -20; fails=$((fails + 1)); continue; }
  python3 - "$tmp/np$np.json" "$np" "$shm" <<'PY' || fails=$((fails + 1))
import json, sys
path, np, shm = sys.argv[1], int(sys.argv[2]), sys.argv[3]
runs = json.load(open(path))["benchmarks"]
algs = {r["name"].split("/")[2] for r in runs}
want = {"naive", "ring", "direct", "auto", "mpi"} | ({"rhd"} if np == 2 else set())
bad = [r["name"] for r in runs if r.get("wrong") != 0 or "error_occurred" in r]
assert not bad, f"wrong != 0 or errors: {bad}"
assert want <= algs, f"missing algorithms: {want - algs}"
for r in runs:
    assert f"/procs:{np}/" in r["name"], r["name"]
    assert r["rank_min_us"] <= r["rank_avg_us"] <= r["rank_max_us"], r
assert len(runs) == 3 * len(algs), (len(runs), algs)
print(f"ok: np={np} DPB_SHM={shm}: {len(runs)} benchmarks over {sorted(algs)}, wrong = 0 everywhere")
PY
  ls "$tmp" | grep -q '\.tmp\.' && { echo "FAIL: np=$np left a temporary file"; fails=$((fails + 1)); }
done
# Random interleaving would shuffle each process differently (a hang): refused on every rank.
out=$(cd "$tmp" && timeout 60 mpirun --oversubscribe --bind-to none -np 2 "$MICRO" \
        --benchmark_filter='allreduce/cpu/ring/procs:2/bytes:8/' --benchmark_enable_random_interleaving \
        --benchmark_out="$tmp/interleaved.json" 2>&1)
rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -q "random_interleaving: not under mpirun" <<<"$out"; then
  echo "FAIL: --benchmark_enable_random_interleaving under mpirun: rc=$rc"; echo "$out" | tail -5
  fails=$((fails + 1))
else
  echo "ok: --benchmark_enable_random_interleaving under mpirun refused (rc $rc)"
fi
[ "$(ls "$tmp"/*.json | wc -l)" = 2 ] || { echo "FAIL: expected exactly 2 JSON files"; ls "$tmp"; fails=$((fails + 1)); }
exit $((fails > 0))
