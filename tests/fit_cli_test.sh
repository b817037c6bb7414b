#!/usr/bin/env bash
# fit_cli_test.sh BUILD_DIR: `dpbench fit` (src/cli/fit_cmd.cpp) on the CPU, in seconds.
#  - batch: at a capacity equal to the measured peak of `dpbench train` at batch 100 per device
#    (LeNet, 2 devices, the CPU backend), fit names 100 and --check confirms it for real: 100
#    fits, 101 does not (exit 0); --json and --out carry the answer and the breakdown.
#  - layers: likewise the deepest small MLP (Adam, MSE, synthetic data) at a capacity equal to a
#    20-layer run's peak: 20 (--vary layers --check).
#  - below batch 1's peak: exit 3 with the breakdown at 1; the batch limit: said, exit 0;
#    missing --device-mem, --batch without --vary layers, --vary layers on LeNet: exit 2 naming it.
set -u
BIN="$1/dpbench"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

jget() {  # jget FILE EXPR: a value of the JSON file (EXPR in Python over j)
  python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
peak_of_train() {  # the peak_mem_bytes of one training step: peak_of_train ARGS...
  "$BIN" train --backend cpu --threads 1 --epochs 1 --quiet --csv "$tmp/peak.csv" "$@" >/dev/null ||
    { echo "FAIL: train $*" >&2; return 1; }
  python3 -c 'import csv, sys; print(list(csv.DictReader(open(sys.argv[1])))[-1]["peak_mem_bytes"])' \
      "$tmp/peak.csv"
  rm -f "$tmp/peak.csv"
}
expect_rc() {  # expect_rc RC NEEDLE ARGS...: exit status RC and NEEDLE in stdout+stderr
  local want="$1" needle="$2"; shift 2
  out=$("$BIN" fit "$@" 2>&1); rc=$?
  if [ $rc -ne "$want" ] || ! grep -qF -- "$needle" <<<"$out"; then
    fail "fit $* -> rc=$rc, expected $want and '$needle' in:"; echo "$out" | head -20
  else
    echo "ok: fit $* -> rc=$rc ($(grep -F -- "$needle" <<<"$out" | head -1 | cut -c1-110))"
  fi
}

"$BIN" fit --help | grep -q -- "--vary" || fail "fit --help"

# Bad input: exit 2, naming the option.
expect_rc 2 "--device-mem" --model lenet --devices 2
expect_rc 2 "--device-mem" --model lenet --device-mem 0
expect_rc 2 "--batch" --model lenet --device-mem 1GiB --batch 64
expect_rc 2 "--vary layers" --model lenet --device-mem 1GiB --vary layers
expect_rc 2 "--vary" --model mlp --device-mem 1GiB --vary width
expect_rc 2 "--mlp-layers" --model mlp --device-mem 1GiB --vary layers --mlp-layers 4

# The batch: the capacity is the real peak at 100 per device, so 100 fits and 101 does not.
LENET=(--model lenet --devices 2 --data synthetic)
peak=$(peak_of_train "${LENET[@]}" --batch 200 --train-limit 200 --test-limit 100) || exit 1
echo "LeNet, 2 devices, batch 100 per device: peak $peak bytes"
expect_rc 0 "largest batch per device that fits: 100 (global batch 200 on 2 devices)" \
    "${LENET[@]}" --threads 1 --device-mem "$peak" --check --backend cpu --json "$tmp/b.json" \
    --out "$tmp/fit.csv"
grep -q "check on cpu: batch per device 100: fits (as planned)" <<<"$out" || fail "check 100: $out"
grep -q "check on cpu: batch per device 101: out of memory (as planned)" <<<"$out" ||
  fail "check 101: $out"
[ "$(jget "$tmp/b.json" '(j["fits"], j["answer"], j["global_batch"], j["check"]["ok"])')" = \
  "(True, 100, 200, True)" ] || fail "fit JSON: $(cat "$tmp/b.json")"
[ "$(jget "$tmp/b.json" 'j["peak_mem_bytes"] == sum(j["peak_mem"].values())')" = True ] ||
  fail "JSON breakdown does not sum to the peak"
[ "$(jget "$tmp/b.json" 'j["peak_mem_bytes"]')" -le "$peak" ] || fail "planned peak above capacity"

# Below batch 1's peak: exit 3, the breakdown at 1, the JSON says nothing fits.
expect_rc 3 "not even batch per device 1 fits a device of 1 MiB" "${LENET[@]}" --device-mem 1MiB \
    --json "$tmp/none.json" --out "$tmp/fit.csv"
grep -q "nothing fits: batch per device 1" <<<"$out" && grep -q "activations" <<<"$out" ||
  fail "no breakdown at 1: $out"
[ "$(jget "$tmp/none.json" '(j["fits"], j["answer"], j["peak_mem_bytes"] > 2**20)')" = \
  "(False, 0, True)" ] || fail "no-fit JSON: $(cat "$tmp/none.json")"
# --out: one header, a row per fit, no temporary file left.
[ "$(grep -c '^impl,model,' "$tmp/fit.csv")" = 1 ] && [ "$(wc -l < "$tmp/fit.csv")" = 3 ] ||
  { fail "--out CSV shape"; cat "$tmp/fit.csv"; }
ls "$tmp" | grep -q '\.tmp\.' && fail "temporary file left"

# The depth: an MLP whose 20-layer run's peak is the capacity (Adam, MSE, synthetic data).
MLP=(--model mlp --mlp-hidden 64 --mlp-input 32 --data synthetic --optimizer adam --loss mse
     --devices 2)
peak=$(peak_of_train "${MLP[@]}" --mlp-layers 20 --batch 96 --train-limit 96 --test-limit 64) ||
  exit 1
echo "MLP 20 x 64, 2 devices, batch 96: peak $peak bytes"
expect_rc 0 "largest depth (hidden layers) that fits: 20 (global batch 96 on 2 devices)" \
    "${MLP[@]}" --threads 1 --batch 96 --vary layers --device-mem "$peak" --check --backend cpu \
    --json "$tmp/l.json"
grep -q "depth (hidden layers) 21: out of memory (as planned)" <<<"$out" || fail "check 21: $out"
[ "$(jget "$tmp/l.json" '(j["vary"], j["answer"], j["batch_per_device"], j["check"]["ok"])')" = \
  "('layers', 20, 48, True)" ] || fail "layers JSON: $(cat "$tmp/l.json")"

# The batch limit (60000 / 4 per device): said, exit 0.
expect_rc 0 "the search hit its limit: 15000" --model mlp --mlp-layers 1 --mlp-hidden 4 \
    --mlp-input 4 --data synthetic --devices 4 --device-mem 1GiB --json "$tmp/lim.json"
[ "$(jget "$tmp/lim.json" '(j["limit_hit"], j["global_batch"])')" = "(True, 60000)" ] ||
  fail "limit JSON: $(cat "$tmp/lim.json")"

[ $fails -eq 0 ] && echo "fit_cli_test: all passed"
exit $((fails > 0))
