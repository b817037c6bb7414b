#!/usr/bin/env bash
# mpi_test.sh BUILD_DIR: one rank per process (mpirun). LeNet trained by 2 and 3
# processes ends with the parameters of the 1-device run within 1e-5, over a covering set of
# {naive, ring, direct, rhd, mpi} x {per-param, fused, bucketed} x {overlap on, off}; only rank 0
# writes the CSV (launcher=mpi, processes=K) and --dump-params; --devices must equal the process
# count; --allreduce mpi is refused without mpirun; the emulated link paces the MPI transport; both
# of its paths (shared memory, DPB_SHM=1; messages, DPB_SHM=0) are exercised. Exit 77 (ctest: skipped) without mpirun, an
# MPI build or the dataset. About 70 s on 2 cores in ctest -j 2 (--oversubscribe; each mpirun
# start costs seconds, so the combinations are a covering set, not the product: see combos).
set -u
BIN="$1/dpbench"
DATA=${DPBENCH_DATA:-/usr/share/datasets/fashion-mnist}
command -v mpirun >/dev/null || { echo "mpi_test: SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
[ -d "$DATA" ] || { echo "mpi_test: SKIP: $DATA missing (apt-get install dataset-fashion-mnist)"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --oversubscribe --bind-to none)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
TINY=(train --batch 60 --epochs 2 --train-limit 360 --test-limit 64 --quiet)

out=$("${MPIRUN[@]}" -np 1 "$BIN" "${TINY[@]}" 2>&1)
if grep -q "built without MPI" <<<"$out"; then echo "mpi_test: SKIP: dpbench built without MPI"; exit 77; fi

# max |a - b| over two raw float32 files, or a message when their sizes differ.
maxdiff() {
  python3 - "$1" "$2" <<'PY'
import array, sys
a, b = array.array('f'), array.array('f')
a.frombytes(open(sys.argv[1], 'rb').read()); b.frombytes(open(sys.argv[2], 'rb').read())
print(max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) and a else f"sizes {len(a)} != {len(b)}")
PY
}

"$BIN" "${TINY[@]}" --devices 1 --dump-params "$tmp/ref.bin" || { fail "1-device reference run"; exit 1; }
# np allreduce grad-sync overlap [backend [shm]]. CPU ranks of one node move data through shared
# memory (DPB_SHM=1: required for every collective, or an error) unless shm is 0 (MPI messages).
# The async backend (CPU kernels run later on stream threads, with random delays) takes the MPI
# transport's host-staging path (download, MPI, upload, then the sum on the device): the path
# CUDA devices take, checked without a GPU.
# Which combinations run, and why they cover the rest: the schedules and sync modes are checked as
# threads by the GoogleTest suite (Train.DataParallelMatchesOneDevice: every algorithm at k = 2
# and 4, per-param and fused; GradSync.*, AllReduce.*); what processes add is the MPI transport
# under each algorithm's send/receive pattern, GradSync's comm thread calling it (overlap on),
# and the transport's paths. So every algorithm, granularity,
# overlap mode and process count runs at least once over shared memory; the message path
# (DPB_SHM=0) under two patterns (ring's neighbour exchange at 3 processes with overlap, direct's
# all-to-all without); the async device's host staging under one of ours (ring) and MPI's own.
# 2 ring fused off over shared memory is the emulated-link run below (same parameters checked).
combos=(
  "2 rhd per-param on"    "2 mpi bucketed on"     "3 direct bucketed off" "3 naive per-param on"
  "3 mpi fused off"
  "3 ring bucketed on cpu 0" "3 direct per-param off cpu 0"
  "2 ring bucketed on async" "3 mpi fused on async"
)
# Under a sanitizer (scripts/sanitize.sh sets DPB_SANITIZER) a smaller covering subset: every
# algorithm, granularity, overlap mode and process count, the message path and the async staging
# once (ring at 2 over shared memory: the emulated-link run).
if [ -n "${DPB_SANITIZER:-}" ]; then
  combos=("2 rhd per-param on" "3 direct bucketed off" "3 naive fused on cpu 0" "2 mpi bucketed off async")
fi
for c in "${combos[@]}"; do
  read -r np alg mode ov backend shm <<<"$c"
  backend=${backend:-cpu}
  shm=${shm:-$([ "$backend" = cpu ] && echo 1)}
  rm -f "$tmp/p.bin"
  if ! out=$(DPB_SHM=$shm "${MPIRUN[@]}" -x DPB_SHM -np "$np" "$BIN" "${TINY[@]}" --allreduce "$alg" \
             --grad-sync "$mode" --overlap "$ov" --bucket-mb 0.1 --backend "$backend" \
             --dump-params "$tmp/p.bin" 2>&1); then
    fail "np=$np $alg $mode overlap $ov $backend shm=$shm: exit non-zero"; echo "$out" | tail -5; continue
  fi
  d=$(maxdiff "$tmp/ref.bin" "$tmp/p.bin")
  if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-5 else 1)" "$d" 2>/dev/null; then
    echo "ok: np=$np $alg $mode overlap $ov $backend shm=$shm: max |diff| vs 1 device = $d"
  else
    fail "np=$np $alg $mode overlap $ov $backend shm=$shm: max |diff| vs 1 device = $d (want <= 1e-5)"
  fi
done
# DPB_SHM=1 where shared memory cannot serve (the async device's memory is not the host's) is an
# error naming the variable; a value other than 0 or 1 too.
for bad in "1 async" "yes cpu"; do
  read -r shm backend <<<"$bad"
  out=$(DPB_SHM=$shm timeout 120 "${MPIRUN[@]}" -x DPB_SHM -np 2 "$BIN" "${TINY[@]}" --backend "$backend" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "DPB_SHM" <<<"$out"; then
    echo "ok: DPB_SHM=$shm with --backend $backend refused (rc=$rc)"
  else
    fail "DPB_SHM=$shm with --backend $backend: rc=$rc"; echo "$out" | tail -5
  fi
done

# The emulated link paces the MPI transport's steps: same parameters, and the gradient all-reduce
# takes at least its alpha-beta time (ring, k = 2, fused: one call of 129068 floats per step, two
# transfers of half of it: 6 steps per epoch x 2 x (200 us + 258136 B x 8 / 0.1 Gb/s) = 0.25 s).
# The same run (not --quiet) checks that only rank 0 writes: one CSV row per epoch, launcher=mpi,
# processes=2, and rank 0 prints the epoch lines alone.
rm -f "$tmp/p.bin" "$tmp/link.csv"
LINKRUN=(train --batch 60 --epochs 2 --train-limit 360 --test-limit 64)
if out=$("${MPIRUN[@]}" -np 2 "$BIN" "${LINKRUN[@]}" --allreduce ring --grad-sync fused --overlap off \
     --link-gbps 0.1 --link-latency-us 200 --dump-params "$tmp/p.bin" --csv "$tmp/link.csv" 2>&1); then
  d=$(maxdiff "$tmp/ref.bin" "$tmp/p.bin")
  python3 - "$tmp/link.csv" "$d" <<'PY' || fail "emulated link across processes"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
model = 6 * 2 * (200e-6 + 129068 / 2 * 4 * 8 / 0.1e9)
assert float(sys.argv[2]) <= 1e-5, f"max |diff| {sys.argv[2]}"
for r in rows:
    assert float(r["comm_s"]) >= 0.9 * model, f"epoch {r['epoch']}: comm_s {r['comm_s']} < 0.9 x {model:.3f} s"
print(f"ok: np=2 ring fused overlap off cpu, emulated link: max |diff| vs 1 device {sys.argv[2]}, comm_s "
      f"{', '.join(r['comm_s'] for r in rows)} s >= 0.9 x model {model:.3f} s")
assert len(rows) == 2, rows
for r in rows:
    assert r["launcher"] == "mpi" and r["processes"] == "2" and r["devices"] == "2", r
    assert r["replicas_in_sync"] == "1", r
print("ok: CSV rows written once, launcher=mpi processes=2")
PY
  [ "$(grep -c '^epoch' <<<"$out")" = 2 ] || { fail "expected 2 epoch lines (rank 0 only), got:"; echo "$out"; }
else
  fail "emulated link across processes: exit non-zero"; echo "$out" | tail -5
fi

# --devices must equal the process count; the message names the rank and both counts.
out=$("${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --devices 3 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "rank [01]: error: --devices 3: this run has 2 processes" <<<"$out"; then
  echo "ok: --devices 3 under mpirun -np 2 refused (rc=$rc)"
else
  fail "--devices 3 under -np 2: rc=$rc"; echo "$out" | head -5
fi
# --allreduce mpi needs processes.
out=$("$BIN" "${TINY[@]}" --devices 2 --allreduce mpi 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "runs only with one process per rank" <<<"$out"; then
  echo "ok: --allreduce mpi refused in thread mode"
else
  fail "--allreduce mpi in thread mode: rc=$rc"; echo "$out" | head -3
fi
[ $fails -eq 0 ] && echo "mpi_test: all passed" || echo "mpi_test: $fails failure(s)"
exit $((fails > 0))
