#!/usr/bin/env bash
# cli_test.sh BUILD_DIR: the dpbench command line refuses bad input before any work, with a message
# naming the argument and a non-zero exit; --help works; results are written whole.
set -u
BIN="$1/dpbench"
SRC=$(cd "$(dirname "$0")/.." && pwd)
DATA=${DPBENCH_DATA:-/usr/share/datasets/fashion-mnist}  # dpbench reads $DPBENCH_DATA too
fails=0
expect_fail() {  # expect_fail "needle" args...
  local needle="$1"; shift
  out=$("$BIN" "$@" 2>&1); rc=$?  # the caller's environment (e.g. DPB_SPIN_US=x expect_fail ...) applies
  if [ $rc -eq 0 ] || ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL: dpbench $* -> rc=$rc, expected non-zero and '$needle' in:"; echo "$out" | head -5
    fails=$((fails + 1))
  else
    echo "ok: dpbench $* -> rc=$rc ($(head -1 <<<"$out" | cut -c1-100))"
  fi
}
# The training CSV's column table (src/train/train_csv.cpp) and its copy for the Python scripts.
if ! "$BIN" info --csv-columns | cmp -s - "$SRC/scripts/train_csv_columns.json"; then
  echo "FAIL: scripts/train_csv_columns.json differs from the CSV column table; regenerate it:"
  echo "  $BIN info --csv-columns > scripts/train_csv_columns.json"
  fails=$((fails + 1))
fi
"$BIN" --help >/dev/null || { echo "FAIL: --help"; fails=$((fails + 1)); }
"$BIN" train --help | grep -q -- "--grad-sync" || { echo "FAIL: train --help"; fails=$((fails + 1)); }
expect_fail "--devices" train --devices 0
expect_fail "--devices" train --devices -2
expect_fail "--batch" train --devices 4 --batch 2 --train-limit 100 --test-limit 10
expect_fail "--model" train --model vgg
expect_fail "--optimizer: unknown optimizer 'adamw' (valid: sgd, adam)" train --optimizer adamw
expect_fail "--loss: unknown loss 'hinge' (valid: xent, mse)" train --loss hinge
expect_fail "--allreduce" train --allreduce no-such-algorithm
expect_fail "--lr" train --lr abc
expect_fail "--epochs" train --epochs 1.5x
expect_fail "--bogus" train --bogus 3
# A bad command line is exit 2 like other bad input (not CLI11's 109 / 114).
for args in "train --bogus 3" "train --seed 0 --seed 1" "train --lr abc"; do
  # shellcheck disable=SC2086
  "$BIN" $args >/dev/null 2>&1; rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL: dpbench $args -> rc=$rc, expected 2"; fails=$((fails + 1)); fi
done
expect_fail "--grad-sync" train --grad-sync sometimes
expect_fail "--allreduce nccl" train --backend cpu --allreduce nccl --train-limit 100 --test-limit 10
expect_fail "power-of-two rank count, got k = 3" train --allreduce rhd --devices 3 --train-limit 100 --test-limit 10
expect_fail "--tune-file /nonexistent/t.json" train --allreduce auto --tune-file /nonexistent/t.json --train-limit 100 --test-limit 10
expect_fail "does not exist" train --data-dir /nonexistent/dpbench-data
# selftest: exit 0 when every check passes, also without a GPU (then saying why none was found).
"$BIN" selftest --help | grep -q -- "--json" || { echo "FAIL: selftest --help"; fails=$((fails + 1)); }
st=$("$BIN" selftest 2>&1); rc=$?
if [ $rc -ne 0 ] || ! grep -q " 0 failed" <<<"$st" || ! grep -q "allreduce ring" <<<"$st" \
   || { ! grep -q "^cuda " <<<"$st" && ! grep -q "No GPU found: ." <<<"$st"; }; then
  echo "FAIL: selftest -> rc=$rc:"; echo "$st" | tail -20; fails=$((fails + 1))
else
  echo "ok: selftest -> rc=0 ($(tail -1 <<<"$st"))"
fi
"$BIN" selftest --json | grep -q '"failed": 0' || { echo "FAIL: selftest --json"; fails=$((fails + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bad"
[ -d "$DATA" ] && cp "$DATA"/*.gz "$tmp/bad/"
printf 'garbage' > "$tmp/bad/train-images-idx3-ubyte.gz"
expect_fail "train-images-idx3-ubyte" train --data-dir "$tmp/bad"
DPB_SPIN_US=soon expect_fail "DPB_SPIN_US" train --devices 2 --train-limit 64 --test-limit 16
# A valid tiny run writes a complete CSV with one header and leaves no temporary files behind.
if [ -d "$DATA" ]; then
  "$BIN" train --devices 2 --batch 32 --epochs 1 --train-limit 256 --test-limit 64 --quiet \
      --csv "$tmp/out.csv" --dump-params "$tmp/p.bin" || { echo "FAIL: tiny run"; fails=$((fails + 1)); }
  "$BIN" train --devices 3 --batch 32 --epochs 1 --train-limit 256 --test-limit 64 --quiet \
      --csv "$tmp/out.csv" || { echo "FAIL: tiny run 2"; fails=$((fails + 1)); }
  [ "$(grep -c '^impl,model,' "$tmp/out.csv")" = 1 ] && [ "$(wc -l < "$tmp/out.csv")" = 3 ] \
      || { echo "FAIL: csv shape"; cat "$tmp/out.csv"; fails=$((fails + 1)); }
  [ "$(stat -c %s "$tmp/p.bin")" = $((4 * 129068)) ] || { echo "FAIL: dump size"; fails=$((fails + 1)); }
  # The header is the column table's, as the Python scripts read it.
  cols=$(python3 -c 'import json, sys; print(",".join(c["name"] for c in json.load(open(sys.argv[1]))["columns"]))' \
         "$SRC/scripts/train_csv_columns.json")
  [ "$(head -1 "$tmp/out.csv")" = "$cols" ] || { echo "FAIL: csv header is not scripts/train_csv_columns.json's"; fails=$((fails + 1)); }
  ls "$tmp" | grep -q '\.tmp\.' && { echo "FAIL: temporary file left"; fails=$((fails + 1)); }
fi
# The model's size in the CSV: model_params for every model, the MLP's shape (mlp_layers,
# mlp_hidden, mlp_input) for the MLP only, right after the model column. Synthetic data: no dataset.
"$BIN" train --model mlp --mlp-layers 3 --mlp-hidden 32 --mlp-input 16 --data synthetic \
    --devices 2 --batch 32 --epochs 1 --train-limit 64 --test-limit 16 --quiet --csv "$tmp/mlp.csv" \
  || { echo "FAIL: tiny MLP run"; fails=$((fails + 1)); }
"$BIN" train --backend meta --model lenet --devices 1 --batch 32 --epochs 1 --train-limit 64 \
    --test-limit 16 --data synthetic --quiet --csv "$tmp/lenet.csv" \
  || { echo "FAIL: tiny LeNet plan"; fails=$((fails + 1)); }
python3 - "$tmp/mlp.csv" "$tmp/lenet.csv" <<'PY' || { echo "FAIL: model size columns"; fails=$((fails + 1)); }
import csv, sys
mlp, lenet = (list(csv.DictReader(open(f)))[-1] for f in sys.argv[1:])
head = next(csv.reader(open(sys.argv[1])))
assert head[1:6] == ["model", "model_params", "mlp_layers", "mlp_hidden", "mlp_input"], head
# 16x32 + 32, 2 x (32x32 + 32), 32x10 + 10
assert (mlp["model_params"], mlp["mlp_layers"], mlp["mlp_hidden"], mlp["mlp_input"]) == \
    ("2986", "3", "32", "16"), mlp
assert (lenet["model_params"], lenet["mlp_layers"], lenet["mlp_hidden"], lenet["mlp_input"]) == \
    ("129068", "", "", ""), lenet
print("ok: model_params and the MLP's shape in the CSV")
PY
# With a GPU: LeNet really trains on it, on 1 and 2 ranks, past the loss plateau (3 full epochs:
# about 0.7 test accuracy on the CPU backend), with its replicas in sync. Skipped without one.
ngpu=$("$BIN" info 2>/dev/null | sed -n 's/.*"cuda_devices": *\([0-9]*\).*/\1/p')
if [ -d "$DATA" ] && [ "${ngpu:-0}" -gt 0 ]; then
  for k in 1 2; do
    if "$BIN" train --backend cuda --model lenet --devices $k --batch 256 --lr 0.2 --epochs 3 \
        --test-limit 2000 --quiet --csv "$tmp/gpu$k.csv" >"$tmp/gpu$k.log" 2>&1 &&
        awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i; next} END{a=$c["test_acc"]; s=$c["replicas_in_sync"];
                 printf "LeNet on %s GPU rank(s): final test acc %s, in sync %s\n", $c["devices"], a, s;
                 exit !(a >= 0.5 && s == 1)}' "$tmp/gpu$k.csv"; then
      echo "ok: LeNet trained on the GPU with $k rank(s)"
    else
      echo "FAIL: LeNet on the GPU with $k rank(s):"; tail -5 "$tmp/gpu$k.log"; fails=$((fails + 1))
    fi
  done
else
  echo "skipped: LeNet on a GPU (no CUDA GPU, or no data in $DATA)"
fi
[ $fails -eq 0 ] && echo "cli_test: all passed" || { echo "cli_test: $fails failure(s)"; exit 1; }
