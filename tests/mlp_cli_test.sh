#!/usr/bin/env bash
# mlp_cli_test.sh BUILD_DIR: `dpbench train --model mlp` and `--data synthetic` from the command
# line: the mlp entry in --help and `dpbench info`; a tiny MLP trains on the synthetic batch of
# ones (seconds) and on Fashion-MNIST (784 inputs) when it is installed; bad --mlp-* / --data
# values exit 2 with a message naming the option (both options for --mlp-input against
# --data fashion-mnist). Registered in CMakeLists.txt as ctest mlp_cli.
set -u
BIN="$1/dpbench"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect_exit2() {  # expect_exit2 "needle" "needle2" args...: exit 2 and both needles in the message
  local n1="$1" n2="$2" out rc
  shift 2
  out=$("$BIN" "$@" 2>&1); rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$n1" <<<"$out" || ! grep -qF -- "$n2" <<<"$out"; then
    fail "dpbench $* -> rc=$rc, expected 2 and '$n1', '$n2' in: $(head -3 <<<"$out")"
  else
    echo "ok: dpbench $* -> 2 ($(head -1 <<<"$out" | cut -c1-110))"
  fi
}
BASE=(train --backend cpu --model mlp --epochs 1 --batch 8 --train-limit 32 --test-limit 8 --quiet)
TINY=("${BASE[@]}" --mlp-layers 2 --mlp-hidden 16)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

help=$("$BIN" train --help)
for needle in "mlp " "--mlp-layers" "--mlp-hidden" "--mlp-input" "--data" "synthetic"; do
  grep -qF -- "$needle" <<<"$help" || fail "train --help lacks '$needle'"
done
python3 - "$BIN" <<'PY' || fail "dpbench info: no mlp model entry"
import json, subprocess, sys
models = json.loads(subprocess.check_output([sys.argv[1], "info"]))["models"]
assert any(m["name"] == "mlp" for m in models), models
PY

"$BIN" "${TINY[@]}" --data synthetic --mlp-input 100 --devices 2 --csv "$tmp/s.csv" ||
  fail "a tiny MLP on --data synthetic"
python3 - "$tmp/s.csv" <<'PY' || fail "synthetic run's CSV: one epoch, test accuracy 1 (one example, one label)"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 1 and rows[0]["model"] == "mlp", rows
assert float(rows[0]["test_acc"]) == 1.0, rows
PY
[ -d /usr/share/datasets/fashion-mnist ] && {
  "$BIN" "${TINY[@]}" || fail "a tiny MLP on Fashion-MNIST"
  "$BIN" "${TINY[@]}" --mlp-input 784 || fail "--mlp-input 784 on Fashion-MNIST"
  expect_exit2 "--mlp-input 1024" "--data fashion-mnist" "${TINY[@]}" --mlp-input 1024
}

expect_exit2 "--mlp-layers" "[1, 10000]" "${BASE[@]}" --mlp-layers 0
expect_exit2 "--mlp-layers" "10001" "${BASE[@]}" --mlp-layers 10001
expect_exit2 "--mlp-hidden" "[1, 1000000]" "${BASE[@]}" --mlp-hidden 1000001
expect_exit2 "--mlp-hidden" "abc" "${BASE[@]}" --mlp-hidden abc
expect_exit2 "--mlp-input" "[1, 10000000]" "${TINY[@]}" --mlp-input 0 --data synthetic
expect_exit2 "--data" "unknown data source 'imagenet'" "${TINY[@]}" --data imagenet
[ $fails -eq 0 ] && echo "mlp_cli_test: all passed"
exit $((fails > 0))
