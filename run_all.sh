#!/usr/bin/env bash
# run_all.sh: the whole benchmark in one command. Builds when needed (scripts/setup.sh), detects the
# hardware (`dpbench info`), runs the microbenchmarks and the scenario suites (scenarios/*.ini)
# through scripts/run_suite.py, writes results/<run-id>/ (one CSV per suite, benchmark JSON/CSV,
# manifest.json, logs/, plots/, summary.txt) and prints a summary table.
#   ./run_all.sh                              # quick without a GPU (sized for ~15 min on 2 cores), else full
#   ./run_all.sh --full --suite d2l-lenet --devices 1,2
#   ./run_all.sh --quick --suite d2l-lenet --peers   # PyTorch, DDP, JAX, OpenMPI beside dpbench
#   ./run_all.sh --launcher both             # sync + scaling k > 1 also as mpirun processes
#   ./run_all.sh --out results/20260101T000000Z-abc1234    # continue an interrupted run
#   ./run_all.sh --dry-run                    # the plan: every run, every run left out and why
set -euo pipefail
cd "$(dirname "$0")"
T0=$SECONDS
INVOCATION="./run_all.sh${*:+ $*}"

usage() {
  cat <<'EOF'
usage: ./run_all.sh [--quick | --full] [--suite NAME]... [--devices LIST] [--peers] [--out DIR]
                   [--launcher threads|mpi|both] [--no-build] [--dry-run]

  --quick         fewer epochs and data subsets, sized for ~15 min on 2 cores with LeNet past its
                  loss plateau (default without a GPU); every output says quick
  --full          the suites' full settings (default with a GPU; hours on a CPU)
  --suite NAME    a suite from scenarios/ (repeatable or comma list; default: every suite marked
                  default = yes: micro, d2l-lenet, d2l-resnet18, memory, scaling, sharding,
                  sync). `smoke` is CI's. memory: peak memory per device and what fits in 24 GiB
                  beside the sharding notebook (plans on the meta backend, `dpbench fit`; its
                  table in summary.txt, plots memory_memory and fit_memory). sharding: --shard
                  none|optimizer|gradients|parameters (replicated, ZeRO-1/2/3) at k = 1, 2, 4 on
                  the notebook's MLP (quick: an 8 x 512 one; full: ResNet-18 too), the emulated
                  link, what fits per mode; PyTorch's ZeroRedundancyOptimizer with --peers (its
                  table in summary.txt and summary-sharding.md/.csv, plots sharding_*)
  --devices LIST  device counts to run, e.g. 1,2 (default 1,2,4; `--devices max` runs use the
                  largest)
  --peers         also run the peers (peers/: PyTorch on 1 device, PyTorch DDP and JAX on k,
                  OpenMPI's MPI_Allreduce) whose framework is installed, on the same data and
                  recipe as the runs their suites name; rows in the same CSVs (column impl),
                  side by side in summary.txt and the plots. Says which are missing and how to
                  install them (PyTorch: apt-get install python3-torch; jax: see peers/README.md)
  --launcher L    threads (default): ranks are threads of one process; mpi: the sync and scaling
                  suites' runs with k > 1 devices (with --suite: the named suites') run as
                  `mpirun -np K dpbench train ...`, one rank per process, instead; both: each
                  twice, the process runs named <scenario>-mpi (CSV column launcher = mpi),
                  compared with their thread twins in summary.txt and plots/launcher.*. Needs
                  mpirun (Open MPI: run with --oversubscribe --bind-to none); without it those
                  runs are skipped with a note. DPB_MPIRUN overrides the prefix, e.g.
                  DPB_MPIRUN="srun -n {np} --mpi=pmix"
  --out DIR       results folder (default results/<UTC time>-<commit>[-quick]); an existing one is
                  continued: runs already in its CSVs are skipped
  --no-build      use the build as it is, even when sources are newer
  --dry-run       print the plan (every run it would do, every run it leaves out and why: e.g.
                  those this machine's GPUs would refuse) and exit 0; builds nothing, runs nothing
  -h, --help      this text

Environment: DPB_BUILD_DIR (default build), DPB_BACKEND=cpu|cuda to override the detection (cpu:
also when nvidia-smi lists GPUs that dpbench cannot use, which otherwise stops the run),
DPB_PEER_PYTHON (default /usr/bin/python3: Debian's, which sees python3-torch), DPB_FAKE_GPUS=N
(with --dry-run: plan as on a CUDA machine with N GPUs; for tests).
At the end the run is compared with the committed baselines of its backend that share suites with
it (results/baseline/<backend>-*; scripts/check_regression; informational: the exit status is
that of the runs).
Suites and their runs: scripts/run_suite.py list
EOF
}

mode="" devices="1,2,4" devices_given=0 out="" out_given=0 build_ok=1 peers="" launcher=threads
dry_run=0
suites=()
while (($#)); do
  case $1 in
    --quick) mode=quick ;;
    --full) mode=full ;;
    --suite) [ $# -ge 2 ] || { echo "run_all.sh: --suite needs a name" >&2; exit 2; }
             suites+=("$2"); shift ;;
    --suite=*) suites+=("${1#*=}") ;;
    --devices) [ $# -ge 2 ] || { echo "run_all.sh: --devices needs a list" >&2; exit 2; }
               devices=$2; devices_given=1; shift ;;
    --devices=*) devices=${1#*=}; devices_given=1 ;;
    --out) [ $# -ge 2 ] || { echo "run_all.sh: --out needs a folder" >&2; exit 2; }
           out=$2; out_given=1; shift ;;
    --out=*) out=${1#*=}; out_given=1 ;;
    --launcher) [ $# -ge 2 ] || { echo "run_all.sh: --launcher needs threads, mpi or both" >&2; exit 2; }
                launcher=$2; shift ;;
    --launcher=*) launcher=${1#*=} ;;
    --no-build) build_ok=0 ;;
    --dry-run) dry_run=1 ;;
    --peers) peers=--peers ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_all.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[[ $devices =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
  { echo "run_all.sh: --devices wants counts like 1,2,4, got '$devices'" >&2; exit 2; }
case $launcher in threads|mpi|both) ;; *) echo "run_all.sh: --launcher wants threads, mpi or" \
  "both, got '$launcher'" >&2; exit 2 ;; esac
if [ -n "${DPB_FAKE_GPUS:-}" ] && ((dry_run == 0)); then
  echo "run_all.sh: DPB_FAKE_GPUS plans for a machine that is not this one; it works with" \
    "--dry-run only" >&2
  exit 2
fi
if [ "$launcher" != threads ] && ! command -v mpirun >/dev/null && [ -z "${DPB_MPIRUN:-}" ]; then
  echo "run_all.sh: note: --launcher $launcher but no mpirun (apt-get install openmpi-bin): the" \
    "process-mode runs are skipped"
fi
# --out: a folder that will take files, checked before any stage (a read-only one would otherwise
# fail after the build, at the first write of the suites).
out_made=0  # this run made the --out folder: removed again if a refusal leaves it empty
if ((out_given && dry_run == 0)); then
  [ -d "$out" ] || out_made=1
  probe="$out/.write-probe.$$"
  if ! mkdir -p "$out" 2>/dev/null || ! : 2>/dev/null >"$probe"; then
    echo "run_all.sh: --out $out: cannot write there ($( [ -d "$out" ] && echo "the folder" \
      "refuses new files" || echo "cannot make the folder"))" >&2
    exit 2
  fi
  rm -f "$probe"
fi
suite_list=$(IFS=,; echo "${suites[*]:-}")
for s in ${suite_list//,/ }; do
  [ -f "scenarios/$s.ini" ] || { echo "run_all.sh: no suite '$s' (scenarios/: $(cd scenarios &&
    ls *.ini | sed 's/\.ini$//' | tr '\n' ' '))" >&2; exit 2; }
done

elapsed() { local s=$((SECONDS - T0)); printf '%d:%02d:%02d' $((s / 3600)) $((s / 60 % 60)) $((s % 60)); }
step() { echo; echo "== [$(elapsed)] $*"; }
child=""  # run_suite.py while it runs: a signal to run_all.sh is passed on to it
interrupted() {
  trap '' INT TERM HUP
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null  # run_suite.py stops its run and removes its temp files
    wait "$child" 2>/dev/null || true
  fi
  echo
  echo "run_all.sh: interrupted after $(elapsed)."
  if [ -n "$out" ] && [ -d "$out" ]; then
    echo "  Complete files so far are in $out (every CSV holds whole runs only)."
    echo "  Continue with: $INVOCATION$([ "$out_given" = 1 ] || echo " --out $out")"
  fi
  exit 130
}
trap interrupted INT TERM HUP

# ---- 1. build when missing or stale
BUILD=${DPB_BUILD_DIR:-build}
step "build ($BUILD)"
why=""
if [ ! -x "$BUILD/dpbench" ]; then
  why="$BUILD/dpbench is missing"
else
  newer=$(find src kernels collectives bench CMakeLists.txt -type f -newer "$BUILD/dpbench" \
            2>/dev/null | head -1)
  [ -n "$newer" ] && why="sources are newer than $BUILD/dpbench (e.g. $newer)"
  if [ -z "$why" ] && [ -f bench/main.cpp ] && [ ! -x "$BUILD/dpbench-micro" ]; then
    why="$BUILD/dpbench-micro is missing"
  fi
fi
if [ -z "$why" ]; then
  echo "up to date: $BUILD/dpbench"
elif ((dry_run)); then
  echo "not building (--dry-run) although $why"
  [ -x "$BUILD/dpbench" ] || { echo "run_all.sh: --dry-run asks $BUILD/dpbench about this" \
    "machine, and there is none: build first (scripts/setup.sh)" >&2; exit 1; }
elif ((build_ok == 0)); then
  echo "not building (--no-build) although $why"
  [ -x "$BUILD/dpbench" ] || { echo "run_all.sh: no $BUILD/dpbench to run" >&2; exit 1; }
else
  echo "running scripts/setup.sh: $why"
  # A failed setup (packages, data, build) stops here: results from a stale build or without
  # the data would be mislabelled. --no-build runs the existing build knowingly.
  if ! DPB_BUILD_DIR="$BUILD" scripts/setup.sh; then
    echo "run_all.sh: scripts/setup.sh failed (see the messages above); nothing was run." \
      "$([ -x "$BUILD/dpbench" ] && echo "To run the existing $BUILD/dpbench as it is: --no-build")" >&2
    exit 1
  fi
fi

# ---- 2. hardware
step "hardware"
info_raw=$("$BUILD/dpbench" info) || { echo "run_all.sh: $BUILD/dpbench info failed (exit $?);" \
  "nothing was run" >&2; exit 1; }
# (DPB_FAKE_GPUS, --dry-run only: the planner's view of a CUDA machine with that many GPUs)
info=$(python3 -c '
import json, sys
sys.path.insert(0, "scripts")
import suitelib
print(json.dumps(suitelib.effective_info(json.loads(sys.argv[1]))))' "$info_raw")
read -r cpu cores cuda_built ngpu backend < <(python3 -c '
import json, sys
i = json.loads(sys.argv[1])
print(i["cpu"].replace(" ", "_"), i["cores"], str(i["cuda_built"]).lower(), i["cuda_devices"],
      i["default_backend"])' "$info")
cuda_error=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get("cuda_error", ""))' \
  "$info")
echo "CPU: ${cpu//_/ }, $cores cores"
smi_gpus=$( (command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null) | grep -c '^GPU ' || true)
if [ -n "${DPB_FAKE_GPUS:-}" ]; then
  echo "CUDA backend: FAKE (DPB_FAKE_GPUS=$DPB_FAKE_GPUS, --dry-run): planning as on $ngpu GPU(s)"
elif [ "$cuda_built" = true ]; then
  echo "CUDA backend: built (cuDNN, cuBLAS, NCCL); GPUs found: $ngpu${cuda_error:+ ($cuda_error)}"
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | sed 's/^/  /' || true
else
  echo "CUDA backend: not built (no nvcc at build time)"
fi
# GPUs that nvidia-smi lists but dpbench cannot use (an old driver, a build without CUDA): stop
# rather than run quick mode on the CPU as if the machine had none.
if [ -z "${DPB_BACKEND:-}" ] && [ -z "${DPB_FAKE_GPUS:-}" ] && ((ngpu == 0 && smi_gpus > 0)); then
  {
    echo "run_all.sh: nvidia-smi lists $smi_gpus GPU(s), but $BUILD/dpbench cannot use them:"
    echo "  ${cuda_error:-dpbench info reports no GPU}"
    nvidia-smi -L 2>/dev/null | sed 's/^/  nvidia-smi: /'
    echo "Fix that (dpbench selftest says more), or run on the CPU anyway: DPB_BACKEND=cpu $INVOCATION"
  } >&2
  exit 1
fi
backend=${DPB_BACKEND:-$backend}
if [ "$backend" = cuda ]; then
  why="a CUDA build and $ngpu GPU(s)"
  [ -z "${DPB_FAKE_GPUS:-}" ] || why="$ngpu fake GPU(s): DPB_FAKE_GPUS, a plan only"
  maxdev=$(tr , '\n' <<<"$devices" | sort -n | tail -1)
  if ((ngpu < maxdev)); then
    echo "note: runs with more devices than GPUs put several ranks on one GPU; they are marked" \
      "shared_gpu (not scaling figures)"
  fi
else
  why=$([ "$cuda_built" = true ] && echo "${cuda_error:-no GPU found}" || echo "no CUDA build")
  echo "note: k devices are k threads sharing the $cores cores (cores/k math threads each): a" \
    "speedup here compares k ranks with one rank using every core, synchronization included;" \
    "it is not multi-device scaling"
fi
[ -n "$mode" ] || mode=$([ "$backend" = cuda ] && echo full || echo quick)
echo "=> backend $backend ($why); mode $mode$([ "$mode" = quick ] &&
  echo " (data subsets, fewer epochs; every output is marked quick)")"
if [ "$mode" = full ] && [ "$backend" = cpu ]; then
  echo "WARNING: full mode on a CPU takes many hours (ResNet-18 costs ~2.7 GFLOP per training" \
    "image); Ctrl-C keeps every finished run"
fi

# ---- 3. microbenchmarks and suites
commit=$(git rev-parse --short HEAD 2>/dev/null || echo nogit)
suffix=""
[ "$mode" = full ] || suffix=-$mode  # (an `&& echo` here failed the assignment in full mode)
run_id="$(date -u +%Y%m%dT%H%M%SZ)-$commit$suffix"
out=${out:-results/$run_id}
if ((dry_run)); then
  step "plan (--dry-run: nothing runs, $out is not written)"
  devices_arg=()
  ((devices_given)) && devices_arg=(--devices "$devices")
  python3 scripts/run_suite.py run --dry-run --out "$out" --"$mode" --backend "$backend" \
    "${devices_arg[@]}" --bin "$BUILD/dpbench" ${suite_list:+--suite "$suite_list"} \
    --info "$info" --invocation "$INVOCATION" --launcher "$launcher" $peers
  exit $?
fi
[ -d "$out" ] || out_made=1
mkdir -p "$out"
step "microbenchmarks and suites -> $out"
devices_arg=()
((devices_given)) && devices_arg=(--devices "$devices")  # given: micro ranks may pass the GPUs
set +e
python3 scripts/run_suite.py run --out "$out" --"$mode" --backend "$backend" "${devices_arg[@]}" \
  --bin "$BUILD/dpbench" ${suite_list:+--suite "$suite_list"} --info "$info" \
  --invocation "$INVOCATION" --launcher "$launcher" $peers &
child=$!
wait "$child"
rc=$?
child=""
set -e
((rc == 130)) && interrupted
# 0: every run passed, 1: some failed (the rest are results): go on to plots and summary. 2 (bad
# arguments, nothing ran), 3 (the results folder refused a write: a full disk) or a crash: stop.
if ((rc != 0 && rc != 1)); then
  ((rc == 2 && out_made)) && { rmdir "$out" 2>/dev/null || true; }  # refused: no empty folder
  echo "run_all.sh: scripts/run_suite.py stopped (exit $rc, see above); no plots or summary" >&2
  exit "$rc"
fi

# ---- 4. plots (matplotlib: Debian's python3, not a pyenv without it)
step "plots -> $out/plots"
PLOTPY=""
for py in /usr/bin/python3 python3; do
  if "$py" -c 'import matplotlib' 2>/dev/null; then PLOTPY=$py; break; fi
done
if [ -z "$PLOTPY" ]; then
  echo "skipped: no python3 with matplotlib (Debian: apt-get install python3-matplotlib)"
else
  t=$SECONDS
  set +e
  "$PLOTPY" plots/make_plots.py "$out"
  prc=$?
  set -e
  python3 scripts/run_suite.py record --rc $prc --wall $((SECONDS - t)) "$out" -- \
    "$PLOTPY" plots/make_plots.py "$out"
  ((prc == 0)) || echo "run_all.sh: WARNING: plots/make_plots.py failed (rc $prc)" >&2
  # Projection: predicted speedup vs devices on named links from a one-device profile
  # of this backend; the sync suite's emulated-link runs (CPU runs) vs bucket size.
  for what in figure $([ -f "$out/sync.csv" ] && echo plot-suite); do
    t=$SECONDS
    set +e
    "$PLOTPY" scripts/link_study.py "$what" --out "$out" --bin "$BUILD/dpbench" --backend "$backend"
    lrc=$?
    set -e
    python3 scripts/run_suite.py record --rc $lrc --wall $((SECONDS - t)) "$out" -- \
      "$PLOTPY" scripts/link_study.py "$what" --out "$out" --backend "$backend"
    ((lrc == 0)) || echo "run_all.sh: WARNING: scripts/link_study.py $what failed (rc $lrc)" >&2
  done
fi

# ---- 5. summary
step "summary"
python3 scripts/run_suite.py summary "$out"
case $out in results/*) ln -sfn "$(basename "$out")" results/latest ;; esac
echo
echo "run_all.sh: done in $(elapsed) ($mode mode, backend $backend). Results: $out/"
echo "  suite CSVs: $(cd "$out" && ls *.csv 2>/dev/null | grep -v '^summary\|^micro-' | tr '\n' ' ')"
echo "  plots: $out/plots/   summary: $out/summary.txt   manifest: $out/manifest.json"

# ---- 6. regression check against the committed baselines of this backend (what they share)
step "regression check (scripts/check_regression against results/baseline/$backend-*)"
checked=0
for base in results/baseline/"$backend"-*/; do
  [ -d "$base" ] || continue
  base=${base%/}
  report="$out/regression-$(basename "$base").txt"
  set +e
  scripts/check_regression "$out" "$base" >"$report" 2>&1
  crc=$?
  set -e
  if ((crc == 2)); then
    echo "  $base: nothing in common with this run ($(tail -1 "$report"))"
    continue
  fi
  checked=1
  { scripts/check_regression --quiet "$out" "$base" 2>&1 || true; } | sed 's/^/  /'
  echo "  (full table: $report)"
  ((crc == 0)) || echo "run_all.sh: WARNING: check_regression found regressions against $base;" \
    "informational: the exit status is that of the runs" >&2
done
((checked)) || echo "  no baseline shares suites with this run; compare two runs with" \
  "scripts/check_regression RUN BASELINE"
((rc == 0)) || echo "run_all.sh: some runs failed (see above and $out/manifest.json)" >&2
exit $rc
