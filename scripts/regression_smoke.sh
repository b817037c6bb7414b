#!/usr/bin/env bash
# regression_smoke.sh BUILD_DIR [--update-baseline]: CI's regression check. Runs the smoke suite
# (scenarios/smoke.ini: small deterministic CPU runs and a few all-reduce microbenchmarks, about a
# minute on 2 cores) through `./run_all.sh --quick` (so CI exercises the quick mode, the plots and
# the summary) into a temporary folder, then scripts/check_regression against the committed
# baseline results/baseline/cpu-ci. scripts/test.sh calls it with its build folder.
#   scripts/regression_smoke.sh build
#   scripts/regression_smoke.sh build --update-baseline   # after an intended change: new baseline
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: scripts/regression_smoke.sh BUILD_DIR [--update-baseline]}
UPDATE=${2:-}
BASE=results/baseline/cpu-ci
case $UPDATE in ""|--update-baseline) ;; *) echo "regression_smoke: unknown option '$UPDATE'" >&2; exit 2 ;; esac
[ -x "$BUILD/dpbench" ] || { echo "regression_smoke: no $BUILD/dpbench (build first)" >&2; exit 2; }
if [ -z "$UPDATE" ] && [ ! -f "$BASE/smoke.csv" ]; then
  echo "regression_smoke: no baseline in $BASE; create it with: $0 $BUILD --update-baseline" >&2
  exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dpbench-smoke.XXXXXX")
t0=$SECONDS
DPB_BUILD_DIR="$BUILD" DPB_BACKEND=cpu ./run_all.sh --quick --suite smoke --devices 1,2,4 \
  --no-build --out "$tmp"
echo "regression_smoke: ./run_all.sh --quick --suite smoke took $((SECONDS - t0)) s"
if [ "$UPDATE" = --update-baseline ]; then
  scripts/check_regression --make-baseline "$tmp" "$BASE"
fi
if scripts/check_regression "$tmp" "$BASE"; then
  rm -rf "$tmp"
else
  echo "regression_smoke: the smoke results are kept in $tmp" >&2
  exit 1
fi
