#!/usr/bin/env bash
# launcher_test.sh BUILD_DIR: CI's check of run_all.sh/run_suite.py --launcher (ranks as processes):
# a dry run plans the -mpi twins of the k > 1 runs (sync and scaling by default, the --suite ones
# when named; only the twins with --launcher mpi; refused twins left out with a note), then one tiny
# real run of smoke's lenet-k2 as threads and as `mpirun -np 2` processes: rows launcher=threads and
# launcher=mpi (processes 2), the summary's threads-vs-processes table and plots/launcher.png. About
# 30 s on 2 cores. Exit 77 (ctest: skipped) without mpirun or an MPI build of dpbench.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: scripts/launcher_test.sh BUILD_DIR}
fails=0
need() {  # need DESCRIPTION COMMAND...
  if "${@:2}" >/dev/null 2>&1; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dpbench-launcher.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
RS=(python3 scripts/run_suite.py run --bin "$BUILD/dpbench" --devices 1,2 --dry-run --out "$tmp/dry")
"${RS[@]}" --launcher both >"$tmp/default.txt" 2>&1
need "default suites: sync twins planned" grep -q '^\[.*\] sync/lenet-ring-fused-off-mpi: mpirun -np 2 ' "$tmp/default.txt"
need "default suites: scaling twins planned" grep -q 'scaling/lenet-global-linear-k2-mpi: mpirun' "$tmp/default.txt"
need "default suites: d2l-lenet has no twins" bash -c '! grep -q "d2l-lenet/.*-mpi" "$1"' _ "$tmp/default.txt"
need "no twin of a 1-device run" bash -c '! grep -q "k1-mpi" "$1"' _ "$tmp/default.txt"
"${RS[@]}" --launcher mpi --suite smoke >"$tmp/mpi.txt" 2>&1
need "--suite smoke --launcher mpi: twins" grep -q 'smoke/lenet-k2-mpi: mpirun -np 2' "$tmp/mpi.txt"
need "--launcher mpi: thread k>1 runs left out with a note" grep -q 'left out, thread mode (--launcher mpi)' "$tmp/mpi.txt"
need "--launcher mpi: 1-device runs kept" grep -q 'smoke/lenet-k1: ' "$tmp/mpi.txt"
"${RS[@]}" --suite smoke --launcher both --set "--allreduce mpi --link-gbps 1" >"$tmp/refused.txt" 2>&1
need "twins process mode refuses: left out with a note" grep -q \
  'left out, process mode refuses --allreduce mpi with the emulated link' "$tmp/refused.txt"
"${RS[@]}" --suite smoke >"$tmp/threads.txt" 2>&1
need "run_all.sh --launcher: a bad value is refused (exit 2)" bash -c \
  './run_all.sh --launcher bogus --no-build 2>&1 | grep -q "launcher wants threads, mpi or both"'
need "run_all.sh --help names --launcher" bash -c './run_all.sh --help | grep -q -- "--launcher L"'
need "default launcher threads: no twins" bash -c '! grep -q -- "-mpi" "$1"' _ "$tmp/threads.txt"

command -v mpirun >/dev/null || { echo "launcher_test: SKIP (real run): mpirun not found"; exit $((fails ? 1 : 77)); }
grep -q OMPI_COMM_WORLD "$BUILD/dpbench" ||
  { echo "launcher_test: SKIP (real run): $BUILD/dpbench built without MPI"; exit $((fails ? 1 : 77)); }
python3 scripts/run_suite.py run --bin "$BUILD/dpbench" --devices 2 --suite smoke --no-micro \
  --launcher both --runs lenet-k2 --out "$tmp/real" \
  --set "--epochs 2 --train-limit 128 --test-limit 32 --batch 32" >"$tmp/real.txt" 2>&1
rc=$?
need "tiny real run: exit 0" test "$rc" = 0
need "tiny real run: lenet-k2-mpi under mpirun -np 2" grep -q 'lenet-k2-mpi: mpirun -np 2' "$tmp/real.txt"
csv=$tmp/real/smoke.csv
launcher_of() {  # launcher_of SCENARIO: the launcher,processes columns of its rows (unique)
  python3 - "$csv" "$1" <<'PY'
import csv, sys
print(sorted({(r["launcher"], r["processes"]) for r in csv.DictReader(open(sys.argv[1]))
              if r["scenario"] == sys.argv[2]}))
PY
}
need "lenet-k2-mpi rows: launcher mpi, 2 processes" test "$(launcher_of lenet-k2-mpi)" = "[('mpi', '2')]"
need "lenet-k2 rows: launcher threads" test "$(launcher_of lenet-k2)" = "[('threads', '1')]"
need "one row per epoch (rank 0 only)" test "$(grep -c ',lenet-k2-mpi,' "$csv")" = 2
python3 scripts/run_suite.py summary "$tmp/real" >/dev/null
need "summary: threads vs processes table" grep -q 'threads vs processes' "$tmp/real/summary.txt"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  /usr/bin/python3 plots/make_plots.py "$tmp/real" >"$tmp/plots.txt" 2>&1
  need "plots/launcher.png and .svg" test -s "$tmp/real/plots/launcher.png" -a -s "$tmp/real/plots/launcher.svg"
fi
if ((fails)); then
  echo "launcher_test: $fails failure(s)"; cat "$tmp/real.txt"; exit 1
fi
echo "launcher_test: all passed"
