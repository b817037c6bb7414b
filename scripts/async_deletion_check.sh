#!/usr/bin/env bash
# async_deletion_check.sh [BUILD_DIR]: proves that `ctest -R Async` catches missing ordering
# calls. For each entry of the table below it deletes one line (the N-th line of FILE matching
# PATTERN, a fixed string), rebuilds, runs `ctest -R Async --stop-on-failure`, records
# caught / NOT caught and the first failing test, and restores the file. Prints a Markdown table.
# Needs a configured build (default build/); takes a few minutes per entry on 2 cores.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$SRC/build}
# FILE | PATTERN (fixed string) | occurrence | what the call orders
TABLE=$(cat <<'T'
collectives/allreduce.cpp|if (ordered_) dev.comm_record();|1|CommGroup::barrier: record own comm position for peers
collectives/allreduce.cpp|if (!host_barrier_.arrive_and_wait()) throw_aborted(rank);|1|CommGroup::barrier: host barrier before waiting on peers' records
collectives/allreduce.cpp|if (p != rank) dev.comm_wait_peer(*devs_[p]);|1|CommGroup::barrier: comm stream waits for every peer's record
collectives/allreduce.cpp|if (!host_barrier_.arrive_and_wait()) throw_aborted(rank);|2|CommGroup::barrier: host barrier so no rank records again before peers waited
collectives/allreduce.cpp|  barrier(rank);|1|CommGroup::exchange: barrier after publishing the buffer pointer
collectives/naive.cpp|group_.barrier(rank);|1|naive: final barrier
collectives/ring.cpp|group_.barrier(rank);|1|ring: barrier after every tick
collectives/direct.cpp|group_.barrier(rank);|1|direct: barrier after the reduce phase
collectives/direct.cpp|group_.barrier(rank);|2|direct: final barrier after the gather
collectives/rhd.cpp|group_.barrier(rank);|1|rhd: barrier after each halving step
collectives/rhd.cpp|group_.barrier(rank);|2|rhd: barrier after each doubling step
collectives/grad_sync.cpp|dev_.comm_wait_mark(mark);|1|GradSync overlap: comm waits for the unit's compute mark
collectives/grad_sync.cpp|if (launched_ < U) dev_.comm_wait_compute();|1|GradSync no overlap: comm waits for backward
collectives/grad_sync.cpp|dev_.compute_wait_comm();|1|GradSync finish: compute (optimizer) waits for comm
src/train/step.cpp|group.barrier(r);|1|broadcast_params: barrier after the parameter broadcast
src/train/step.cpp|rep.dev->comm_synchronize();|1|broadcast_params: host waits for the broadcast before compute uses it
src/train/trainer.cpp|  rep.dev->synchronize();|2|trainer: end-of-epoch synchronize (before the epoch clock stops)
src/train/trainer.cpp|pool_.align(r);|3|trainer: align at epoch start (rank 0 wrote the permutation)
src/train/trainer.cpp|pool_.align(r);|4|trainer: align after the epoch (before the clock stops)
src/train/trainer.cpp|pool_.align(r);|1|trainer: align after the end-of-epoch downloads (rank 0 reads every replica)
src/train/trainer.cpp|pool_.align(r);|2|trainer: align after rank 0's report and evaluation
T
)
if [ -n "${DPB_DELETION_TABLE:-}" ]; then TABLE=$(cat "$DPB_DELETION_TABLE"); fi
echo "| # | file | deleted line | orders | result | first failing test | seconds |"
echo "|---|------|--------------|--------|--------|--------------------|---------|"
i=0
while IFS='|' read -r file pat occ what; do
  [ -n "$file" ] || continue
  i=$((i + 1))
  f=$SRC/$file
  line=$(grep -nF -- "$pat" "$f" | sed -n "${occ}p" | cut -d: -f1)
  if [ -z "$line" ]; then
    echo "| $i | $file | \`$pat\` (#$occ) | $what | pattern not found | | |"
    continue
  fi
  cp "$f" "$f.deletion-bak"
  sed -i "${line}d" "$f"
  t0=$(date +%s)
  if ! cmake --build "$BUILD" >"$BUILD/deletion-$i.build.log" 2>&1; then
    result="does not compile"; first=""
  else
    if ctest --test-dir "$BUILD" -R Async --stop-on-failure --output-on-failure --timeout 300 \
         >"$BUILD/deletion-$i.ctest.log" 2>&1; then
      result="NOT caught"; first=""
    else
      result="caught"
      first=$(grep -m1 -E "Test +#[0-9]+: .*(Failed|Timeout|Exception|SEGFAULT|Child aborted)" \
                "$BUILD/deletion-$i.ctest.log" | sed -E 's/.*Test +#[0-9]+: ([^ ]+).*/\1/')
    fi
  fi
  mv "$f.deletion-bak" "$f"
  touch "$f"  # newer than the object built from the edited copy, so it is rebuilt
  echo "| $i | $file:$line | \`$(echo "$pat" | sed 's/^ *//')\` | $what | $result | $first | $(( $(date +%s) - t0 )) |"
done <<<"$TABLE"
cmake --build "$BUILD" >/dev/null 2>&1 || echo "warning: rebuild after restore failed"
