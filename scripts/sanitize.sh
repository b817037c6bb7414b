#!/usr/bin/env bash
# sanitize.sh: CI's sanitizer and fuzzing checks; scripts/test.sh calls it. CPU-only
# builds without the benchmarks, each in its own build directory:
#   asan  build-asan/  ASan + UBSan + LeakSanitizer (GCC): the ctest suite (GoogleTest, the CLI
#                      and CSV scripts, the fuzz corpus replay) but one slow test (asan_skip);
#                      the mpirun tests (ctest label mpi) without LeakSanitizer.
#                      allocator_may_return_null=1: a CpuOps test allocates 2^60 bytes on
#                      purpose and expects a clear error.
#   tsan  build-tsan/  ThreadSanitizer (GCC): the concurrency tests of dpb_tests (collectives,
#                      barriers, GradSync, training, the asynchronous test device's Async* tests,
#                      the loader's second thread in DataSynthetic*).
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

configure() {  # configure DIR SANITIZERS
  [ -f "$1/build.ninja" ] && return
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDPB_CUDA=OFF -DDPB_BENCH=OFF \
        -DDPB_SANITIZE="$2" "${launcher[@]}" >/dev/null
}

# ResNet-18's finite-difference check takes minutes even unsanitized. Under ASan its layers still
# run in the per-op CpuOps tests and ResNet-18's forward and backward in Models.ReadyCalledOnce*.
# MetaTrain's ResNet-18 case trains it for real at k = 1, 2, 3 (30 s unsanitized); under ASan the
# meta device's ResNet-18 workspaces are checked call by call by MetaDevice.*, its training by the
# LeNet and MLP cases.
asan_skip='^(Models.ResNet18GradientMatchesFiniteDifferences|MetaTrain.PeakMatchesCpuResnet18)$'

# Tests that run dpbench under mpirun carry the ctest label mpi: OpenMPI leaks at exit
# (allocations of libmpi and its dlclosed plugins, which LeakSanitizer cannot name for a
# suppression), so they run without leak detection; every other ASan and UBSan check stays on.

step_asan() {
  configure build-asan address,undefined
  cmake --build build-asan -j "$jobs"
  local asan=allocator_may_return_null=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ASAN_OPTIONS=$asan:detect_leaks=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 -E "$asan_skip" -LE mpi
  ASAN_OPTIONS=$asan:detect_leaks=0 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 -L mpi \
      --no-tests=ignore
}

step_tsan() {
  configure build-tsan thread
  cmake --build build-tsan -j "$jobs" --target dpb_tests
  local filter='AllReduce*:CommGroup*:HostBarrier*:GradSync*:Train*:Async*:DataSynthetic*:ShardTrain.EveryMode*:ShardFailure*'
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
