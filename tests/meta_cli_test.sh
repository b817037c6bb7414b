#!/usr/bin/env bash
# meta_cli_test.sh BUILD_DIR: `dpbench train --backend meta` (the planning backend, kernels/meta).
# The same run on cpu and on meta writes the same memory columns (peak and every category within
# 1%); meta's loss, accuracy and time columns are empty and it prints that it planned, with no
# loss or accuracy figures; under --device-mem one byte below the CPU's peak meta ends with exit 3
# and the out-of-memory message, at the peak it passes; --dump-params is refused. Exit 77 (ctest:
# skipped) without the dataset.
set -u
BIN="$1/dpbench"
DATA=/usr/share/datasets/fashion-mnist
[ -d "$DATA" ] || { echo "meta_cli_test: $DATA missing"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
RUN=(train --model lenet --devices 2 --batch 64 --epochs 2 --train-limit 128 --test-limit 64)

"$BIN" "${RUN[@]}" --backend cpu --quiet --csv "$tmp/cpu.csv" || fail "cpu run"
out=$("$BIN" "${RUN[@]}" --backend meta --csv "$tmp/meta.csv" 2>&1) || fail "meta run: $out"
echo "$out"
grep -q "^epoch  2  planned: peak " <<<"$out" || fail "no 'planned' epoch line: $out"
grep -q "^planned on meta:0" <<<"$out" || fail "no 'planned on' line: $out"
grep -Eq "loss [0-9]|test acc [0-9]" <<<"$out" && fail "meta printed loss/accuracy figures: $out"
grep -q "^peak memory rank 1: " <<<"$out" || fail "no peak memory lines: $out"

python3 - "$tmp/cpu.csv" "$tmp/meta.csv" <<'PY' || fail "CSV columns differ (above)"
import csv, sys
cpu, meta = (list(csv.DictReader(open(p))) for p in sys.argv[1:])
bad = 0
assert len(cpu) == len(meta) == 2, (len(cpu), len(meta))
for c, m in zip(cpu, meta):
    for k in c:
        if k.startswith("peak_mem_"):
            if abs(int(m[k]) - int(c[k])) > 0.01 * int(c["peak_mem_bytes"]):
                print(f"{k}: cpu {c[k]} meta {m[k]}"); bad += 1
    for k in ("train_loss", "train_acc", "test_acc", "epoch_s", "images_per_s", "comm_s",
              "replicas_in_sync"):
        if m[k] != "" or c[k] == "":
            print(f"{k}: cpu '{c[k]}' meta '{m[k]}'"); bad += 1
    if m["backend"] != "meta" or m["epoch"] != c["epoch"]:
        print("backend/epoch", m["backend"], m["epoch"]); bad += 1
print(f"cpu peak {cpu[-1]['peak_mem_bytes']} meta peak {meta[-1]['peak_mem_bytes']}")
sys.exit(bad > 0)
PY

peak=$(python3 -c 'import csv,sys; print(list(csv.DictReader(open(sys.argv[1])))[-1]["peak_mem_bytes"])' "$tmp/meta.csv")
out=$(timeout 60 "$BIN" "${RUN[@]}" --backend meta --quiet --device-mem $((peak - 1)) 2>&1); rc=$?
[ $rc -eq 3 ] || fail "meta at peak-1: exit $rc, expected 3: $out"
grep -qF "out of memory on meta:" <<<"$out" || fail "no OOM message naming meta: $out"
"$BIN" "${RUN[@]}" --backend meta --quiet --device-mem "$peak" || fail "meta at its peak: refused"

out=$("$BIN" "${RUN[@]}" --backend meta --quiet --dump-params "$tmp/p.bin" 2>&1); rc=$?
{ [ $rc -eq 2 ] && grep -qF -- "--dump-params" <<<"$out"; } || fail "--dump-params on meta: exit $rc: $out"
[ $fails -eq 0 ] && echo "meta_cli_test: all passed"
exit $((fails > 0))
