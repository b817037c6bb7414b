#!/usr/bin/env bash
# gpu_check_test.sh BUILD_DIR: the first-run GPU check (scripts/gpu_check.sh) cannot rot on a
# machine without a GPU. Runs it in its dry-run mode (cpu backend, tiny runs, GPU-only steps SKIP)
# against BUILD_DIR and checks every step's verdict; then that a missing GPU FAILs the check and
# stops it, and that a hanging command costs only its step (a fake dpbench that sleeps is killed
# at the budget, with its process group, and the check goes on to its summary). scripts/test.sh
# runs it (about 40 s on 2 cores).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: gpu_check_test.sh BUILD_DIR}" && pwd) || exit 1
CHECK=$SRC/scripts/gpu_check.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# verdict_is FILE STEP STATUS...: the summary's line for STEP has one of STATUS
verdict_is() {
  local file=$1 step=$2 line
  shift 2
  line=$(awk -v s="$step" '$2 == s' "$file")
  for st in "$@"; do
    [ "${line%% *}" = "$st" ] && { echo "ok: $step $st"; return 0; }
  done
  fail "$step: expected $*, got '${line:-no line}'"
}

# 1. The dry run: every step that can run on a CPU passes, the GPU-only ones skip.
s=$(date +%s)
OUT=$tmp/ignored "$CHECK" --dry-run --out "$tmp/dry" "$B" >"$tmp/dry.log" 2>&1
rc=$?
echo "dry run: rc=$rc in $(($(date +%s) - s)) s"
S=$tmp/dry/summary.txt
if [ ! -f "$S" ]; then
  fail "no summary.txt"; cat "$tmp/dry.log"
else
  [ $rc = 0 ] || fail "dry run exit status $rc"
  for step in libraries info selftest lenet_k1 lenet_k2_ring_overlap timeline allreduce_sweep_k2 \
              nccl_k2_refused params_match shard_match resnet18_k1 resnet18_k2_overlap gtest_cuda; do
    verdict_is "$S" "$step" PASS
  done
  # the recorder is built only where NVTX's headers are; without it the step says why it skipped
  # shellcheck disable=SC2046  # an empty word list on purpose
  verdict_is "$S" nvtx_ranges PASS $([ -f "$B/libdpb_nvtx_recorder.so" ] || echo SKIP)
  verdict_is "$S" cuda_sync SKIP
  ! grep -q '^FAIL' "$S" || fail "FAIL lines in the dry run"
  grep -q 'DRY RUN' "$S" || fail "the summary does not say it is a dry run"
  grep -q 'lenet_k2_ring_overlap.*replicas_in_sync=1' "$S" || fail "lenet_k2 figures missing"
  grep -q 'allreduce_sweep_k2.*wrong=0' "$S" || fail "all-reduce figures missing"
  tar tzf "$tmp/dry/gpucheck.tgz" 2>/dev/null | grep -q 'gpucheck/summary.txt' || fail "gpucheck.tgz lacks the summary"
  [ -f "$tmp/dry/gpucheck/lenet_k2.csv" ] || fail "logs folder lacks lenet_k2.csv"
  [ ! -e "$tmp/ignored" ] || fail "--out did not take precedence over \$OUT"
  [ $fails = 0 ] || { echo "--- summary:"; cat "$S"; }
fi

# 2. Without a GPU, the real check FAILs at info, SKIPs what needs one, and exits 1.
if "$B/dpbench" info 2>/dev/null | grep -q '"cuda_devices": 0'; then
  "$CHECK" --only info,selftest --out "$tmp/nogpu" "$B" >"$tmp/nogpu.log" 2>&1
  rc=$?
  [ $rc = 1 ] || fail "no GPU: exit status $rc, expected 1"
  verdict_is "$tmp/nogpu/summary.txt" info FAIL
  verdict_is "$tmp/nogpu/summary.txt" selftest SKIP
else
  echo "skipped: the no-GPU case (this machine has a GPU)"
fi

# 3. A hang costs its step: a fake dpbench that never returns is killed when the budget ends.
mkdir -p "$tmp/fake"
cat >"$tmp/fake/dpbench" <<EOF
#!/usr/bin/env bash
[ "\$1" = info ] && { echo '{"cuda_built": false, "cuda_devices": 0, "gpus": []}'; exit 0; }
echo \$\$ >>"$tmp/fake/pids"
exec sleep 300
EOF
chmod +x "$tmp/fake/dpbench"
s=$(date +%s)
DPB_GPU_CHECK_BUDGET_S=20 "$CHECK" --dry-run --only info,selftest,lenet --out "$tmp/hang" "$tmp/fake" \
  >"$tmp/hang.log" 2>&1
rc=$?
took=$(($(date +%s) - s))
[ $rc = 1 ] || fail "hang: exit status $rc, expected 1"
[ $took -le 35 ] || fail "hang: the check took ${took}s with a 20 s budget"
verdict_is "$tmp/hang/summary.txt" info PASS
grep -q '^FAIL  selftest .*TIMED OUT' "$tmp/hang/summary.txt" && echo "ok: selftest TIMED OUT" \
  || fail "hang: selftest not reported as timed out: $(grep selftest "$tmp/hang/summary.txt")"
verdict_is "$tmp/hang/summary.txt" lenet SKIP
sleep 1
[ -s "$tmp/fake/pids" ] || fail "hang: the fake dpbench never ran"
while read -r pid; do  # gone, or a zombie (dead; reaped whenever this machine's init gets to it)
  st=$(ps -o stat= -p "$pid" 2>/dev/null)
  [ -z "$st" ] || [ "${st:0:1}" = Z ] || { fail "hang: the hung process $pid survived ($st)"; kill "$pid"; }
done < <(cat "$tmp/fake/pids" 2>/dev/null)

[ $fails = 0 ] && echo "gpu_check_test: all passed" || { echo "gpu_check_test: $fails failure(s)"; exit 1; }
