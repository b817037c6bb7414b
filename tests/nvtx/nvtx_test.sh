#!/usr/bin/env bash
# nvtx_test.sh BUILD_DIR: run a short 2-rank training under the NVTX recorder injection library and
# check that the "dpbench" domain's ranges are emitted on every rank's thread and nested as intended.
set -u
B="$1"
[ -f "$B/libdpb_nvtx_recorder.so" ] || { echo "nvtx recorder not built (no NVTX headers): skipped"; exit 0; }
DATA=${DPBENCH_DATA:-/usr/share/datasets/fashion-mnist}  # dpbench reads $DPBENCH_DATA too
[ -d "$DATA" ] || { echo "no Fashion-MNIST in $DATA: skipped"; exit 0; }
log=$(mktemp); trap 'rm -f "$log"' EXIT
NVTX_INJECTION64_PATH="$B/libdpb_nvtx_recorder.so" DPB_NVTX_LOG="$log" \
  "$B/dpbench" train --devices 2 --batch 32 --epochs 1 --train-limit 128 --test-limit 32 \
  --grad-sync bucketed --overlap on --bucket-mb 0.2 --quiet || { echo "FAIL: training run"; exit 1; }
fails=0
need() {  # need DESCRIPTION AWK-CONDITION [MIN_COUNT]
  local n; n=$(awk -F'\t' "$2" "$log" | wc -l)
  if [ "$n" -ge "${3:-1}" ]; then echo "ok: $1 ($n)"; else echo "FAIL: $1 ($n)"; fails=$((fails+1)); fi
}
need "ranges in the dpbench domain" '$2=="dpbench"' 10
[ "$(awk -F'\t' '$2!="dpbench" && NF==5' "$log" | wc -l)" = 0 ] || { echo "FAIL: foreign ranges"; fails=$((fails+1)); }
need "epoch 1 at the top of a rank thread" '$3==0 && $5=="epoch 1"' 2
need "data inside the epoch" '$4=="epoch 1" && $5=="data"' 2
need "forward inside the epoch" '$4=="epoch 1" && $5=="forward"' 2
need "backward inside the epoch" '$4=="epoch 1" && $5=="backward"' 2
need "optimizer step inside the epoch" '$4=="epoch 1" && $5=="optimizer step"' 2
need "gradient sync wait inside the epoch" '$4=="epoch 1" && $5=="gradient sync wait"' 2
need "evaluate inside the epoch on rank 0" '$4=="epoch 1" && $5=="evaluate"' 1
need "allreduce ranges named with algorithm and size" '$5 ~ /^allreduce ring [0-9.]+ [KMG]?B/' 4
n_threads=$(awk -F'\t' '$5 ~ /^allreduce ring/ {print $1}' "$log" | sort -u | wc -l)
[ "$n_threads" -ge 2 ] && echo "ok: allreduce on $n_threads threads" || { echo "FAIL: allreduce on $n_threads thread(s)"; fails=$((fails+1)); }
grep -q '^unbalanced 0$' "$log" && echo "ok: pushes and pops balanced" || { echo "FAIL: unbalanced ranges"; tail -1 "$log"; fails=$((fails+1)); }
[ $fails -eq 0 ] && echo "nvtx_test: all passed" || { echo "--- log head:"; head -30 "$log"; exit 1; }
