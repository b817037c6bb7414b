#!/usr/bin/env bash
# memory_cli_test.sh BUILD_DIR: --device-mem. A run's measured peak (the CSV's peak_mem_bytes,
# equal to the sum of its category columns) is its capacity floor: at one byte less the run ends
# with exit 3 and one out-of-memory message (device, what was allocated and its size, the
# breakdown, the capacity, the batch per device), and the other rank does not hang; at the peak
# itself it passes. A bad SIZE is refused naming it. Exit 77 (ctest: skipped) without the dataset.
set -u
BIN="$1/dpbench"
DATA=/usr/share/datasets/fashion-mnist
[ -d "$DATA" ] || { echo "memory_cli_test: $DATA missing"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
RUN=(train --backend cpu --model lenet --devices 2 --batch 64 --epochs 1 --train-limit 128
     --test-limit 64 --quiet)

col() {  # col FILE NAME: the last row's value of column NAME
  python3 - "$1" "$2" <<'PY'
import csv, sys
print(list(csv.DictReader(open(sys.argv[1])))[-1][sys.argv[2]])
PY
}

"$BIN" "${RUN[@]}" --csv "$tmp/free.csv" || fail "run without a capacity"
peak=$(col "$tmp/free.csv" peak_mem_bytes)
sum=$(python3 - "$tmp/free.csv" <<'PY'
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[-1]
print(sum(int(v) for k, v in r.items() if k.startswith("peak_mem_") and k != "peak_mem_bytes"))
PY
)
[ "$peak" -gt 0 ] 2>/dev/null || fail "peak_mem_bytes '$peak' not positive"
[ "$peak" = "$sum" ] || fail "peak_mem_bytes $peak != sum of the category columns $sum"
echo "measured peak: $peak bytes"

out=$(timeout 120 "$BIN" "${RUN[@]}" --device-mem $((peak - 1)) 2>&1); rc=$?
[ $rc -eq 3 ] || fail "capacity peak-1: exit $rc, expected 3: $out"
for needle in "out of memory on cpu:" "allocating " " bytes) with " "parameters " \
              "of a capacity of" "($((peak - 1)) bytes)" "batch per device 32 (global batch 64 on 2 devices)"; do
  grep -qF -- "$needle" <<<"$out" || fail "OOM message lacks '$needle': $out"
done
[ "$(grep -c "out of memory" <<<"$out")" = 1 ] || fail "not one OOM message: $out"
echo "ok: at $((peak - 1)) bytes: $(grep "out of memory" <<<"$out" | cut -c1-160)"

"$BIN" "${RUN[@]}" --device-mem "$peak" --csv "$tmp/fit.csv" || fail "capacity = peak: refused"
[ "$(col "$tmp/fit.csv" device_mem_bytes)" = "$peak" ] || fail "device_mem_bytes column"
[ "$(col "$tmp/fit.csv" peak_mem_bytes)" = "$peak" ] || fail "peak differs under a capacity"

out=$("$BIN" "${RUN[@]}" --device-mem 12parsecs 2>&1); rc=$?
{ [ $rc -ne 0 ] && [ $rc -ne 3 ] && grep -qF "12parsecs" <<<"$out"; } ||
  fail "bad --device-mem: exit $rc: $out"
[ $fails -eq 0 ] && echo "memory_cli_test: all passed"
exit $((fails > 0))
