#!/usr/bin/env bash
# bundle_test.sh BUILD_DIR: the GPU bundle works from a clean copy, away from the checkout.
# Packs BUILD_DIR with `scripts/gpu_bundle.sh --pack-only` (no CUDA build: seconds; a CPU build
# gives a CPU bundle), copies the bundle to a temporary folder outside the repository, removes the
# packed original, and there runs what a GPU machine runs first: `run_gpu.sh env` (libraries
# resolve), `run_gpu.sh test` (a few GoogleTest cases, the CLI checks, which read
# scripts/train_csv_columns.json, and the NVTX check; the CUDA parts skip without a GPU) and
# `run_gpu.sh check --dry-run` on its first steps, so a file the bundle's tests read but the
# bundle does not pack fails here. scripts/test.sh runs it.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bundle_test.sh BUILD_DIR}" && pwd) || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

s=$(date +%s)
DPB_BUNDLE_XZ_LEVEL=0 "$SRC/scripts/gpu_bundle.sh" --pack-only "$B" "$tmp/packed" >"$tmp/pack.log" 2>&1 \
  || { cat "$tmp/pack.log"; echo "FAIL: gpu_bundle.sh --pack-only"; exit 1; }
mkdir "$tmp/elsewhere"
cp -a "$tmp/packed" "$tmp/elsewhere/bundle"
rm -rf "$tmp/packed"
BUNDLE=$tmp/elsewhere/bundle
echo "packed and copied in $(($(date +%s) - s)) s: $(tail -1 "$tmp/pack.log")"

# Run there with nothing of the checkout or its builds on the paths.
cd "$tmp/elsewhere" || exit 1
clean_env=(env -u DPBENCH_DATA -u LD_LIBRARY_PATH PATH=/usr/local/bin:/usr/bin:/bin)

"${clean_env[@]}" OUT="$tmp/out_env" "$BUNDLE/run_gpu.sh" env >"$tmp/env.log" 2>&1 \
  && echo "ok: run_gpu.sh env" || { fail "run_gpu.sh env"; tail -20 "$tmp/env.log"; }

"${clean_env[@]}" OUT="$tmp/out_test" DPB_TEST_FILTER='OpTableShape.*' "$BUNDLE/run_gpu.sh" test \
  >"$tmp/test.log" 2>&1
if [ $? = 0 ] && grep -q 'cli_test: all passed' "$tmp/out_test/test.log"; then
  echo "ok: run_gpu.sh test ($(grep -c '^ok:' "$tmp/out_test/test.log") ok lines)"
else
  fail "run_gpu.sh test:"; grep -E 'FAIL|error' "$tmp/out_test/test.log" | head -10
fi

"${clean_env[@]}" OUT="$tmp/out_check" "$BUNDLE/run_gpu.sh" check --dry-run \
  --only libraries,info,selftest >"$tmp/check.log" 2>&1
rc=$?
S=$tmp/out_check/summary.txt
if [ $rc = 0 ] && grep -q 'gpu_check: bundle' "$S" \
   && [ "$(grep -cE '^PASS  (libraries|info|selftest) ' "$S")" = 3 ]; then
  echo "ok: run_gpu.sh check --dry-run"
else
  fail "run_gpu.sh check --dry-run: rc=$rc"; cat "$S" 2>/dev/null || tail -20 "$tmp/check.log"
fi
# the same script, started from inside the bundle, goes through run_gpu.sh
"${clean_env[@]}" OUT="$tmp/out_check2" "$BUNDLE/scripts/gpu_check.sh" --dry-run --only info \
  >"$tmp/check2.log" 2>&1 && grep -q 'gpu_check: bundle' "$tmp/out_check2/summary.txt" \
  && echo "ok: scripts/gpu_check.sh inside the bundle" || fail "scripts/gpu_check.sh inside the bundle"

[ $fails = 0 ] && echo "bundle_test: all passed ($(($(date +%s) - s)) s)" \
  || { echo "bundle_test: $fails failure(s)"; exit 1; }
