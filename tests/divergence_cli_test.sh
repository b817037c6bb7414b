#!/usr/bin/env bash
# divergence_cli_test.sh BUILD_DIR: a run whose loss goes non-finite ends as a result (issue 25
# item 3; src/train/divergence.h). dpbench train at lr 1e8 (LeNet, 600 examples, 2 ranks: NaN in
# the first epoch) exits 4 naming the epoch, step and rank, its CSV row marked diverged = 1; with
# --allow-divergence it stops after that epoch with exit 0, the row marked; a finite run writes
# diverged = 0. The same under mpirun -np 2 (every process stops, no hang; skipped without mpirun
# or an MPI build). A results folder holding the diverged run: summary.txt says "diverged",
# check_regression reports it (exit 1), and scaling_grid.svg writes "diverged" (when
# /usr/bin/python3 has matplotlib). Exit 77 (ctest: skipped) without the dataset. About 15 s.
# Under a sanitizer (scripts/sanitize.sh sets DPB_SANITIZER) the mpirun part only: the threads
# runs' paths run sanitized in Divergence.* (GoogleTest: exit verdict, message, marked rows) and
# the results-folder part runs no sanitized binary; the verdict agreed across processes and the
# CLI's exit 4 run nowhere else sanitized.
set -u
BIN="$1/dpbench"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
DATA=${DPBENCH_DATA:-/usr/share/datasets/fashion-mnist}
[ -d "$DATA" ] || { echo "divergence_cli: SKIP: $DATA missing"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d); trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
RUN=(train --model lenet --backend cpu --train-limit 600 --test-limit 100 --batch 50 --threads 1
     --seed 0 --quiet)  # and --epochs

# The CSV's diverged column (the last) of every row, space-separated.
diverged_col() {
  python3 - "$1" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(" ".join(r["diverged"] for r in rows))
PY
}

# expect NAME RC WANT_TEXT CSV WANT_DIVERGED [command...]
expect() {
  local name=$1 want_rc=$2 text=$3 csvf=$4 want_div=$5
  shift 5
  rm -f "$csvf"
  local out rc
  out=$(timeout 120 "$@" --csv "$csvf" 2>&1); rc=$?
  last_out=$out
  if [ "$rc" != "$want_rc" ]; then fail "$name: exit $rc, want $want_rc"; echo "$out" | tail -5; return; fi
  grep -qF -- "$text" <<<"$out" || { fail "$name: no '$text' in:"; echo "$out" | tail -5; }
  local got; got=$(diverged_col "$csvf")
  [ "$got" = "$want_div" ] || fail "$name: CSV diverged column '$got', want '$want_div'"
  echo "ok   $name (exit $rc)"
}

if [ -z "${DPB_SANITIZER:-}" ]; then
  expect "threads: lr 1e8 stops with exit 4" 4 "training diverged in epoch 1 at step" \
    "$tmp/t.csv" "1" "$BIN" "${RUN[@]}" --epochs 3 --devices 2 --lr 1e8
  grep -qE "at step [0-9]+/12 \(rank [01]'s loss first not finite" <<<"$last_out" ||
    fail "the message names no step and rank: $last_out"
  expect "threads: --allow-divergence records it, exit 0" 0 "stopped after it (--allow-divergence)" \
    "$tmp/ta.csv" "1" "$BIN" "${RUN[@]}" --epochs 3 --devices 2 --lr 1e8 --allow-divergence
  expect "threads: a finite run writes diverged 0" 0 "" "$tmp/fine.csv" "0" \
    "$BIN" "${RUN[@]}" --devices 2 --lr 0.2 --epochs 1
fi

# Processes: every rank sees the same verdict and stops after the same epoch.
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  MPIRUN=(mpirun --oversubscribe --bind-to none -np 2)
  if "${MPIRUN[@]}" "$BIN" train --epochs 1 --train-limit 100 --test-limit 10 --batch 50 --quiet 2>&1 | grep -q "built without MPI"; then
    echo "skip mpirun: dpbench built without MPI"
  else
    expect "mpirun -np 2: lr 1e8 stops every process with exit 4" 4 \
      "training diverged in epoch 1 at step" "$tmp/m.csv" "1" \
      "${MPIRUN[@]}" "$BIN" "${RUN[@]}" --epochs 3 --lr 1e8
    expect "mpirun -np 2: --allow-divergence, exit 0" 0 "stopped after it (--allow-divergence)" \
      "$tmp/ma.csv" "1" "${MPIRUN[@]}" "$BIN" "${RUN[@]}" --epochs 3 --lr 1e8 --allow-divergence
  fi
else
  echo "skip mpirun: not found"
fi

if [ -n "${DPB_SANITIZER:-}" ]; then
  [ "$fails" = 0 ] && echo "divergence_cli: all passed (mpirun part: DPB_SANITIZER)" || echo "divergence_cli: $fails FAILED"
  [ "$fails" = 0 ]; exit
fi
# A results folder with the diverged run as the scaling grid's: summary, check_regression, plot.
res="$tmp/results"
mkdir -p "$res"
python3 - "$SRC" "$res" "$tmp/fine.csv" "$tmp/ta.csv" <<'PY' || fail "building the results folder"
import os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "scripts"))
import suite_results
out = os.path.join(sys.argv[2], "scaling.csv")
suite_results.append_suite_csv(out, "scaling", "lenet-k1", sys.argv[3])
suite_results.append_suite_csv(out, "scaling", "lenet-global-linear-k2", sys.argv[4])
PY
python3 "$SRC/scripts/run_suite.py" summary "$res" >/dev/null 2>&1 || fail "run_suite.py summary"
grep -q "lenet-global-linear-k2 (diverged, epoch 1)" "$res/summary.txt" ||
  { fail "summary.txt does not say diverged"; cat "$res/summary.txt"; }
out=$(python3 "$SRC/scripts/check_regression" "$res" "$res" 2>&1); rc=$?
[ "$rc" = 1 ] && grep -q "scaling/lenet-global-linear-k2 diverged .*REGRESSION: diverged in epoch 1" <<<"$out" ||
  { fail "check_regression on a diverged run: exit $rc"; echo "$out" | tail -8; }
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 "$SRC/plots/make_plots.py" "$res" >"$tmp/plots.txt" 2>&1 || fail "make_plots.py"
  grep -q ">diverged" "$res/plots/scaling_grid.svg" 2>/dev/null ||
    { fail "scaling_grid.svg does not say diverged"; tail -5 "$tmp/plots.txt"; }
else
  echo "skip plots: /usr/bin/python3 has no matplotlib"
fi
echo "ok   summary, check_regression and plots of a diverged run"

[ "$fails" = 0 ] && echo "divergence_cli: all passed" || echo "divergence_cli: $fails FAILED"
[ "$fails" = 0 ]
