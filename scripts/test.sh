#!/usr/bin/env bash
# test.sh: the test command (CI's .ci/run calls it). Sets up and builds, runs the GoogleTest suite
# and the CLI checks under ctest, then a small deterministic scenario run and the regression check
# against the committed baseline for this machine class.
set -euo pipefail
cd "$(dirname "$0")/.."
# GoogleTest as 4 ctest shards (one process each, CMakeLists.txt: DPB_GTEST_SHARDS) rather than a
# process per test; DPB_GTEST_SHARDS=0 for one ctest per test (then ctest -R names single tests)
export DPB_GTEST_SHARDS=${DPB_GTEST_SHARDS:-4}
scripts/setup.sh
# Python: Debian's /usr/bin/python3, which setup.sh provisions (matplotlib, SciPy, torch), ahead of
# a shim earlier on PATH: a pyenv shim lacks those packages and costs about 1.3 s a start on a
# loaded 2-core machine (0.13 s for /usr/bin/python3; load 7), and the test scripts start Python
# at most of their checks.
if [ -x /usr/bin/python3 ] && [ "$(command -v python3)" != /usr/bin/python3 ]; then
  echo "test.sh: python3 on PATH is $(command -v python3); CI runs /usr/bin/python3"
  export PATH="/usr/bin:$PATH"
fi
BUILD=${DPB_BUILD_DIR:-build}
echo "== ctest"
ctest --test-dir "$BUILD" --output-on-failure -j 2 --timeout 900
if [ -x scripts/regression_smoke.sh ]; then
  echo "== regression check"
  scripts/regression_smoke.sh "$BUILD"
fi
# ./run_all.sh in full and --peers mode on the smoke suite, and check_regression's tests
# (planted regressions); the quick mode ran in regression_smoke.sh above
echo "== run_all modes"
scripts/run_all_modes_test.sh "$BUILD"
# ---- the first-run GPU check in its dry run, and the GPU bundle packed from this build and run
# from a clean copy outside the checkout (README: Running on a GPU machine ...)
echo "== GPU check (dry run) and GPU bundle"
tests/gpu_check_test.sh "$BUILD"
tests/bundle_test.sh "$BUILD"
# ---- sanitizers and fuzzing (scripts/sanitize.sh): ASan+UBSan ctest, TSan on the
# concurrency tests, 60 s of libFuzzer on the IDX reader. DPB_SANITIZE_CI=0 skips them locally.
if [ "${DPB_SANITIZE_CI:-1}" != 0 ]; then
  echo "== sanitizers and fuzzing"
  scripts/sanitize.sh
fi
# ---- end of sanitizers and fuzzing
echo "test.sh: all checks passed"
