#!/usr/bin/env bash
# mpi_hier_test.sh BUILD_DIR: two levels with one rank per process (issue 26): emulated nodes under
# mpirun, 2 x 2 (mpirun -np 4, DPB_NODES=2) and 3 x 2 (-np 6, DPB_NODES=3), --oversubscribe:
#   1. `dpb_tests --gtest_filter='MpiHier.*'` (tests/test_hier_procs.cpp): the MPI transport's node
#      and cross-node sub-groups (shared memory inside a node, messages across), hier's all-reduce,
#      reduce-scatter and all-gather exact on every rank at odd sizes, on the CPU and the async
#      device, paced by an emulated link with a slower inter-node spec, bytes sent equal to the
#      schedule's count; at 2 x 2 also with DPB_SHM=1 (shared memory required inside the nodes);
#   2. dpbench-micro's hier families under mpirun: allreduce/, reducescatter/, allgather/cpu/hier/
#      registered, wrong = 0, sent_bytes = sent_bytes_schedule (the node split's count);
#   3. `dpbench train --allreduce hier` at 2 x 2 (LeNet, and the MLP with --shard parameters and
#      --nodes 2 given as a flag) ends with the parameters of the 1-device run within 1e-5;
#   4. DPB_NODES=3 with -np 4 (and --nodes 3) is exit 2 with a message naming the value.
# Exit 77 (ctest: skipped) without mpirun, an MPI build or the dataset. About 40 s on 2 cores.
set -u
BUILD="$(cd "$1" && pwd)"
BIN="$BUILD/dpbench"
DATA=${DPBENCH_DATA:-/usr/share/datasets/fashion-mnist}
command -v mpirun >/dev/null || { echo "mpi_hier_test: SKIP: mpirun not found"; exit 77; }
[ -d "$DATA" ] || { echo "mpi_hier_test: SKIP: $DATA missing (apt-get install dataset-fashion-mnist)"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(timeout 150 mpirun --oversubscribe --bind-to none -x DPB_NODES -x DPB_SHM)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export DPB_SHM=  # empty: the default (shared memory where it can serve)

out=$(DPB_NODES=1 "${MPIRUN[@]}" -np 2 "$BUILD/dpb_tests" --gtest_filter='MpiHier.*' 2>&1)
if grep -q "built without MPI" <<<"$out"; then echo "mpi_hier_test: SKIP: built without MPI"; exit 77; fi

# Under a sanitizer (scripts/sanitize.sh sets DPB_SANITIZER; ASan is 2-3x slower) a covering
# subset: no DPB_SHM=1 repeat, the micro at 2 x 2 only, no paced training run.
SAN=${DPB_SANITIZER:-}
GTEST_RUNS=("4 2" "6 3" "4 2 1"); MICRO_RUNS=("4 2" "6 3")
[ -n "$SAN" ] && { GTEST_RUNS=("4 2" "6 3"); MICRO_RUNS=("4 2"); }

# 1. gtest under mpirun (above: 2 processes on one node, 1 x 2).
for run in "${GTEST_RUNS[@]}"; do
  read -r np nodes shm <<<"$run"
  out=$(DPB_NODES=$nodes DPB_SHM=${shm:-} "${MPIRUN[@]}" -np "$np" "$BUILD/dpb_tests" \
        --gtest_filter='MpiHier.*' --gtest_color=no 2>&1)
  rc=$?
  passed=$(grep -c '^\[  PASSED  \] 1 test' <<<"$out")
  if [ $rc -ne 0 ] || [ "$passed" != "$np" ]; then
    grep -A8 ': Failure' <<<"$out" | head -40; echo "$out" | tail -8
    fail "MpiHier.* at $nodes x $((np / nodes)) DPB_SHM=${shm:-}: rc=$rc, $passed of $np ranks passed"
  else
    echo "ok: MpiHier.* at $nodes x $((np / nodes)) (-np $np, DPB_NODES=$nodes${shm:+, DPB_SHM=$shm}): exact on every rank"
  fi
done

# 2. dpbench-micro's hier families.
for run in "${MICRO_RUNS[@]}"; do
  read -r np nodes <<<"$run"
  (cd "$tmp" && DPB_NODES=$nodes "${MPIRUN[@]}" -np "$np" "$BUILD/dpbench-micro" \
     --benchmark_filter="^(allreduce|reducescatter|allgather)/cpu/hier/procs:$np/bytes:(8|4096|1048576)/" \
     --benchmark_min_time=0.01 --benchmark_color=false --benchmark_out="$tmp/np$np.json" \
     > "$tmp/out.txt" 2>&1)
  rc=$?
  [ $rc -eq 0 ] || { fail "dpbench-micro hier -np $np DPB_NODES=$nodes: rc=$rc"; tail -20 "$tmp/out.txt"; continue; }
  python3 - "$tmp/np$np.json" "$np" "$nodes" <<'PY' || fail "dpbench-micro hier -np $np"
import json, sys
path, np, nodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runs = json.load(open(path))["benchmarks"]
fams = {r["name"].split("/")[0] for r in runs}
assert fams == {"allreduce", "reducescatter", "allgather"}, fams
assert len(runs) == 9, [r["name"] for r in runs]
bad = [r["name"] for r in runs if r.get("wrong") != 0 or "error_occurred" in r]
assert not bad, f"wrong != 0 or errors: {bad}"
for r in runs:
    assert r["sent_bytes"] == r["sent_bytes_schedule"] > 0, r
print(f"ok: dpbench-micro -np {np} DPB_NODES={nodes}: {len(runs)} hier benchmarks, wrong = 0, "
      "bytes sent = the schedule's")
PY
done

# 3. Training with hier at 2 x 2 equals 1 device.
maxdiff() {
  python3 - "$1" "$2" <<'PY'
import array, sys
a, b = array.array('f'), array.array('f')
a.frombytes(open(sys.argv[1], 'rb').read()); b.frombytes(open(sys.argv[2], 'rb').read())
print(max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) and a else f"sizes {len(a)} != {len(b)}")
PY
}
within() { python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-5 else 1)" "$1" 2>/dev/null; }
LENET=(train --batch 60 --epochs 2 --train-limit 360 --test-limit 64 --quiet)
MLP=(train --model mlp --mlp-layers 3 --mlp-hidden 37 --mlp-input 29 --data synthetic
     --train-limit 152 --test-limit 20 --batch 50 --epochs 2 --optimizer adam --lr 0.001
     --loss mse --bucket-mb 0.005 --quiet)
"$BIN" "${LENET[@]}" --devices 1 --dump-params "$tmp/lenet1.bin" >/dev/null || fail "LeNet 1-device reference"
"$BIN" "${MLP[@]}" --devices 1 --dump-params "$tmp/mlp1.bin" >/dev/null || fail "MLP 1-device reference"
# name reference env... args
for c in "lenet1 DPB_NODES=2 ${LENET[*]} --allreduce hier --grad-sync bucketed --bucket-mb 0.1 --overlap on" \
         "lenet1 DPB_NODES=2 ${LENET[*]} --allreduce hier --grad-sync fused --overlap off --link-gbps 100 --node-link-gbps 10" \
         "mlp1 DPB_NODES=1 ${MLP[*]} --allreduce hier --shard parameters --nodes 2 --overlap on"; do
  read -r ref envset args <<<"$c"
  [ -n "$SAN" ] && [[ $args == *--link-gbps* ]] && continue
  rm -f "$tmp/p.bin"
  # shellcheck disable=SC2086
  if ! out=$(env "$envset" "${MPIRUN[@]}" -np 4 "$BIN" $args --dump-params "$tmp/p.bin" 2>&1); then
    fail "-np 4 $envset $args: exit non-zero"; echo "$out" | tail -5; continue
  fi
  d=$(maxdiff "$tmp/$ref.bin" "$tmp/p.bin")
  if within "$d"; then echo "ok: -np 4 $envset ${args#train }: max |diff| vs 1 device = $d"
  else fail "-np 4 $envset $args: max |diff| vs 1 device = $d (want <= 1e-5)"; fi
done

# 4. Nodes that do not divide the processes: exit 2 naming the value (environment and flag).
for bad in "DPB_NODES=3|" "DPB_NODES=1|--nodes 3"; do
  envset=${bad%%|*}; flag=${bad#*|}
  # shellcheck disable=SC2086
  out=$(env "$envset" "${MPIRUN[@]}" -np 4 "$BIN" "${LENET[@]}" --allreduce hier $flag 2>&1); rc=$?
  if [ $rc -eq 2 ] && grep -q "nodes (DPB_NODES) 3" <<<"$out"; then
    echo "ok: -np 4 $envset $flag refused with exit 2: $(grep -m1 -o 'error: .*' <<<"$out" | cut -c1-120)"
  else
    fail "-np 4 $envset $flag: rc=$rc (want 2 and a message naming 3)"; echo "$out" | tail -5
  fi
done
exit $((fails > 0))
