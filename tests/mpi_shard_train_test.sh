#!/usr/bin/env bash
# mpi_shard_train_test.sh BUILD_DIR: dpbench train --shard {optimizer,gradients,parameters} with one
# rank per process (mpirun -np 2 and 3) ends with the parameters of the same run as threads
# (--devices K) within 1e-5, and of the 1-device replicated run within 1e-5: a tiny MLP (3 x 37 on
# 29 features, units uneven over 2 and 3 ranks) with Adam on --data synthetic, 4 steps per epoch
# (the last of 2 examples: a rank without any at K = 3), 2 epochs (rank 0's evaluation between
# them: the others take part in its gathers). Covers ring, naive, direct, rhd (K = 2) and mpi's
# reduce-scatter / all-gather, per-param / fused / bucketed, overlap on and off, shared memory
# and messages (DPB_SHM=0), and the async device (the MPI transport's host staging). Only rank 0
# writes --dump-params. Exit 77 (ctest: skipped) without mpirun or an MPI build. About 45 s on
# 2 cores in ctest -j 2 (--oversubscribe).
set -u
BIN="$1/dpbench"
command -v mpirun >/dev/null || { echo "mpi_shard_train_test: SKIP: mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
TINY=(train --model mlp --mlp-layers 3 --mlp-hidden 37 --mlp-input 29 --data synthetic
      --train-limit 152 --test-limit 20 --batch 50 --epochs 2 --optimizer adam --lr 0.001
      --loss mse --bucket-mb 0.005 --quiet)

out=$("${MPIRUN[@]}" -np 1 "$BIN" "${TINY[@]}" 2>&1)
if grep -q "built without MPI" <<<"$out"; then echo "mpi_shard_train_test: SKIP: dpbench built without MPI"; exit 77; fi

# max |a - b| over two raw float32 files, or a message when their sizes differ (od and awk:
# a Python start per comparison would be most of this test's time).
maxdiff() {
  [ -s "$1" ] && [ "$(stat -c %s "$1")" = "$(stat -c %s "$2" 2>/dev/null)" ] ||
    { echo "sizes $(stat -c %s "$1" 2>/dev/null) != $(stat -c %s "$2" 2>/dev/null)"; return; }
  paste <(od -An -v -f -w4 "$1") <(od -An -v -f -w4 "$2") |
    awk '$1 !~ /^-?[0-9]/ || $2 !~ /^-?[0-9]/ {bad = $1 " vs " $2}
         {d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d}
         END {if (bad) print "not finite: " bad; else printf "%.3g\n", m + 0}'
}
within() { awk -v d="$1" 'BEGIN {exit !(d ~ /^[0-9.e+-]+$/ && d + 0 <= 1e-5)}'; }

"$BIN" "${TINY[@]}" --devices 1 --dump-params "$tmp/ref.bin" || { fail "1-device reference run"; exit 1; }
# np shard allreduce grad-sync overlap [backend [shm]]. Which combinations run, and why they
# cover the rest: ShardTrain.EveryModeMatchesOneDevice (GoogleTest) runs every mode over
# granularities, overlap, k = 2..4 and both backends as threads; what processes add is the MPI
# transport under each algorithm's reduce-scatter / all-gather pattern and its paths. So every
# shard mode, algorithm, granularity, overlap mode and process count runs at least once, the
# message path (DPB_SHM=0) and the async device's host staging once (each mpirun start costs
# seconds on 2 cores: ctest time, not coverage).
combos=(
  "2 parameters rhd bucketed on"     "2 parameters ring fused off async"
  "3 optimizer naive fused off"      "3 parameters direct bucketed off"
  "3 parameters mpi per-param on"    "3 gradients naive bucketed on cpu 0"
)
# Under a sanitizer (scripts/sanitize.sh sets DPB_SANITIZER) the same cover in five runs: every
# shard mode, algorithm, granularity, overlap mode, process count, the message path and the async
# device once.
if [ -n "${DPB_SANITIZER:-}" ]; then
  combos=("2 parameters rhd bucketed on" "2 parameters ring fused off async"
          "3 optimizer naive fused off" "3 gradients direct bucketed on cpu 0"
          "3 parameters mpi per-param on")
fi
for c in "${combos[@]}"; do
  read -r np shard alg mode ov backend shm <<<"$c"
  backend=${backend:-cpu}
  shm=${shm:-$([ "$backend" = cpu ] && echo 1)}
  what="np=$np --shard $shard --allreduce $alg --grad-sync $mode --overlap $ov --backend $backend shm=$shm"
  args=("${TINY[@]}" --shard "$shard" --grad-sync "$mode" --overlap "$ov" --backend "$backend")
  # The threads run: the same ranks as threads (mpi exists only across processes: ring instead).
  talg=$alg; [ "$alg" = mpi ] && talg=ring
  rm -f "$tmp/t.bin" "$tmp/p.bin"
  if ! out=$("$BIN" "${args[@]}" --devices "$np" --allreduce "$talg" --dump-params "$tmp/t.bin" 2>&1); then
    fail "$what: threads run ($talg) exit non-zero"; echo "$out" | tail -5; continue
  fi
  if ! out=$(DPB_SHM=$shm "${MPIRUN[@]}" -x DPB_SHM -np "$np" "$BIN" "${args[@]}" --allreduce "$alg" \
             --dump-params "$tmp/p.bin" 2>&1); then
    fail "$what: exit non-zero"; echo "$out" | tail -5; continue
  fi
  dt=$(maxdiff "$tmp/t.bin" "$tmp/p.bin")
  d1=$(maxdiff "$tmp/ref.bin" "$tmp/p.bin")
  if within "$dt" && within "$d1"; then
    echo "ok: $what: max |diff| vs threads ($talg) = $dt, vs 1 device = $d1"
  else
    fail "$what: max |diff| vs threads ($talg) = $dt, vs 1 device = $d1 (want <= 1e-5)"
  fi
done
exit $((fails > 0))
