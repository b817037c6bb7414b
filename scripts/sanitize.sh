#!/usr/bin/env bash
# sanitize.sh: CI's sanitizer and fuzzing checks; scripts/test.sh calls it. CPU-only
# builds without the benchmarks, each in its own build directory:
#   asan  build-asan/  ASan + UBSan + LeakSanitizer (GCC): the ctest suite (GoogleTest, the CLI
#                      and CSV scripts, the fuzz corpus replay) but the tests of asan_skip_table
#                      (each with its reason); DPB_SANITIZER=asan makes the mpirun scripts run
#                      a covering subset of their combinations (mpi_test.sh, mpi_shard_train_test.sh)
#                      and divergence_cli_test.sh its mpirun part only (Divergence.* has the rest);
#                      the mpirun tests (ctest label mpi) without LeakSanitizer.
#                      allocator_may_return_null=1: a CpuOps test allocates 2^60 bytes on
#                      purpose and expects a clear error.
#   tsan  build-tsan/  ThreadSanitizer (GCC): the concurrency tests of dpb_tests (collectives,
#                      barriers, GradSync, training, the asynchronous test device's Async* tests,
#                      the loader's second thread in DataSynthetic*) but those of tsan_skip_table.
#                      OMP_NUM_THREADS=1 and scripts/tsan.supp: libgomp and oneDNN are not
#                      instrumented, so TSan cannot see their synchronization.
#   fuzz  build-fuzz/  libFuzzer + ASan + UBSan (clang, fuzz/CMakeLists.txt): the IDX reader for
#                      DPB_FUZZ_SECONDS (default 60) from the seed corpus fuzz/corpus/idx/.
#   scripts/sanitize.sh [asan] [tsan] [fuzz]     # default: all three
# A failure in any step fails the script. A crash input found by the fuzzer is left in
# build-fuzz/ (crash-*); add it to fuzz/corpus/idx/ with the fix, and ctest then replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=("$@")
((${#steps[@]})) || steps=(asan tsan fuzz)
jobs=$(nproc)
launcher=()
if command -v ccache >/dev/null; then  # paths relative to the clone: fresh clones share the cache
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

# -O1 (the sanitizers' own advice): half the compile time of RelWithDebInfo's -O2 (a test file
# under ASan: 14 s against 34 s on the 2-core EPYC), and the build is most of the ASan stage.
san_opt=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g -DNDEBUG")

configure() {  # configure DIR SANITIZERS [-DOPTION=VALUE...]: the options also on an existing DIR
  local dir=$1 san=$2; shift 2
  if [ -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" "${san_opt[@]}" "$@" >/dev/null
    return 0
  fi
  cmake -S . -B "$dir" -G Ninja "${san_opt[@]}" -DDPB_CUDA=OFF -DDPB_BENCH=OFF \
        -DDPB_SANITIZE="$san" "${launcher[@]}" "$@" >/dev/null
}

# The ctest tests the ASan step leaves out, one a line with the reason: each is slow under ASan and
# adds no code path to what ASan runs in the others (the plain ctest run still runs every one).
asan_skip_table='
Models.ResNet18GradientMatchesFiniteDifferences minutes even unsanitized; its layers run in CpuOps.*, its forward and backward in Models.ReadyCalledOnce*
MetaTrain.PeakMatchesCpuResnet18    ResNet-18 at k = 1, 2, 3 (30 s unsanitized); the meta workspaces call by call in MetaDevice.*, its training in the LeNet and MLP cases
MemoryTrain.EveryAllocationOfAStepIsInTheLedgerResnet18 ResNet-18 steps run in AsyncTrain.ResNet18TwoRanksFewSteps (the same CPU kernels), the ledger in the LeNet case
Train.ShortRunLearns                an accuracy check (12k examples); its k = 2 ring bucketed overlap step runs in Train.DataParallelMatchesOneDevice
TrainAdam.MlpReaches80PercentInTwoEpochs an accuracy check (10k examples); Adam + MSE on the MLP at k = 2 runs in TrainAdam.MlpDataParallelMatchesOneDevice
TrainAdam.MseLossLearns             a loss-falls check; Adam + MSE at k = 2 bucketed overlap runs in TrainAdam.MlpDataParallelMatchesOneDevice and AsyncBackendMatchesCpuWithMse
cmake_configure                     configure-only projects: no sanitized binary runs
include_rules                       reads the sources only
memory_suite                        Python against a stand-in dpbench: no sanitized binary runs
gpu_plan                            Python planning with fake GPU counts (--dry-run); dpbench info runs in cli
sharding_suite                      Python report; its real --shard runs at k = 2 are the ShardTrain.* and mpi_shard_train runs
breakdown_suite                     Python on hand-made CSVs: no sanitized binary runs
run_all_launcher                    Python launcher planning; one tiny run as threads and processes, which mpi_train covers
straggler                           timing assertions on injected sleeps (45 s); the breakdown code runs sanitized in Breakdown*.* and BreakdownTrain.*
mpi_agree                           argument mismatches under mpirun (26 s); check_ranks_agree runs sanitized in Agree.*
chaos                               faults under mpirun with time limits (45 s); the same paths run sanitized in mpi_kill, divergence_cli, Agree.*, Divergence.*, Files*
watchdog                            stalls with time limits under mpirun (60 s); the slots, the verdict and the message run sanitized in Watchdog.*
hier_micro                          timing bounds (hier against the ring on a paced link); hier runs sanitized in Hier.* and mpi_hier
link_study                          projection against timed runs (error bounds); the projection runs sanitized in Projection.* and TwoLevelCost.*
cluster_suite                       Python report and planning, plus quick runs whose hier training runs sanitized in HierTrain.*
'
asan_skip="^($(awk 'NF {print $1}' <<<"$asan_skip_table" | paste -sd'|'))\$"
# The GoogleTest ones (names with a dot) as a filter: build-asan runs GoogleTest in 4 ctest shards
# (DPB_GTEST_SHARDS; a process per test costs more than most tests), which read GTEST_FILTER.
asan_gtest_skip="-$(awk 'NF && $1 ~ /[.]/ {print $1}' <<<"$asan_skip_table" | paste -sd:)"

# Tests that run dpbench under mpirun carry the ctest label mpi: OpenMPI leaks at exit
# (allocations of libmpi and its dlclosed plugins, which LeakSanitizer cannot name for a
# suppression), so they run without leak detection; every other ASan and UBSan check stays on.

step_asan() {
  configure build-asan address,undefined -DDPB_GTEST_SHARDS=4
  cmake --build build-asan -j "$jobs"
  local -x GTEST_FILTER=$asan_gtest_skip
  local asan=allocator_may_return_null=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  local -x DPB_SANITIZER=asan  # mpi_test.sh, mpi_shard_train_test.sh, divergence_cli_test.sh: subsets
  ASAN_OPTIONS=$asan:detect_leaks=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 -E "$asan_skip" -LE mpi
  ASAN_OPTIONS=$asan:detect_leaks=0 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 -L mpi \
      -E "$asan_skip" --no-tests=ignore
}

step_tsan() {
  configure build-tsan thread
  cmake --build build-tsan -j "$jobs" --target dpb_tests
  local filter='AllReduce*:CommGroup*:HostBarrier*:GradSync*:Train*:Async*:DataSynthetic*:ShardTrain.EveryMode*:ShardFailure*'
  # Left out, one a line with the reason (each adds no synchronization to the others' steps; the
  # plain and ASan runs keep them): minutes under TSan between them.
  local tsan_skip_table='
Train.ShortRunLearns                an accuracy check (12k examples); its k = 2 bucketed overlap step is in Train.DataParallelMatchesOneDevice
TrainAdam.MlpReaches80PercentInTwoEpochs an accuracy check (10k examples x 2); Adam + MSE on the MLP at k = 2 is in TrainAdam.MlpDataParallelMatchesOneDevice
TrainAdam.MseLossLearns             a loss-falls check; the same Adam + MSE steps as TrainAdam.MlpDataParallelMatchesOneDevice
TrainAdam.DataParallelMatchesOneDevice Adam runs on each rank after the sync, as SGD does in Train.DataParallelMatchesOneDevice; Adam + sync in TrainAdam.Mlp*
AsyncTrain.ResNet18TwoRanksFewSteps ResNet-18 kernels add no synchronization; the async streams, events and peer waits of training are in AsyncTrain.LeNetMatchesCpuBackend
'
  filter+="-$(awk 'NF {print $1}' <<<"$tsan_skip_table" | paste -sd:)"
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp" \
  OMP_NUM_THREADS=1 \
    build-tsan/dpb_tests --gtest_filter="$filter" --gtest_brief=1
}

step_fuzz() {
  command -v clang++ >/dev/null || { echo "sanitize: no clang++ (scripts/setup.sh)" >&2; return 1; }
  [ -f build-fuzz/build.ninja ] ||
    cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" >/dev/null
  cmake --build build-fuzz
  mkdir -p build-fuzz/corpus  # new inputs go here; the committed seeds stay as they are
  local rc=0
  (cd build-fuzz && ./idx_fuzz -max_total_time="${DPB_FUZZ_SECONDS:-60}" -malloc_limit_mb=512 \
       -timeout=10 -print_final_stats=1 corpus ../fuzz/corpus/idx) >build-fuzz/fuzz.log 2>&1 ||
    rc=$?
  grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|Done|stat::(number_of_executed|average_exec|new_units|peak_rss))' \
    build-fuzz/fuzz.log || true
  echo "fuzz corpus: $(ls fuzz/corpus/idx | wc -l) seeds + $(ls build-fuzz/corpus | wc -l) found"
  if [ "$rc" != 0 ]; then
    tail -60 build-fuzz/fuzz.log
    echo "sanitize: the fuzzer found a failing input (build-fuzz/crash-* or leak-*/timeout-*/oom-*)"
    return 1
  fi
}

for s in "${steps[@]}"; do
  case "$s" in
    asan | tsan | fuzz) ;;
    *) echo "sanitize.sh: unknown step '$s' (asan | tsan | fuzz)" >&2; exit 2 ;;
  esac
  echo "== sanitize: $s"
  start=$SECONDS
  "step_$s"
  echo "== sanitize: $s passed in $((SECONDS - start)) s"
done
