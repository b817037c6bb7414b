#!/usr/bin/env bash
# gpu_check.sh: dpbench's first-run check on a GPU machine. Steps in order of importance, each
# with its own timeout (a hang costs that step, not the machine) under a total budget; one
# PASS / FAIL / WARN / SKIP line per step with its key figures.
#
#   scripts/gpu_check.sh [BUILD_DIR]        a source build with CUDA (default: build/)
#   build-gpu-bundle/run_gpu.sh check       the GPU bundle (scripts/gpu_bundle.sh packs this file)
#   scripts/gpu_check.sh --dry-run build    no GPU: cpu backend, tiny runs, GPU-only steps SKIP
#                                           (CI runs this: tests/gpu_check_test.sh)
# Options: --out DIR (default $OUT, else ./gpucheck-out), --only STEP,STEP (these steps only),
#   --dry-run (or DPB_GPU_CHECK_DRYRUN=1), --list (the steps). Environment:
#   DPB_GPU_CHECK_BUDGET_S  total seconds (default 450: under 8 minutes with the start; later steps
#                           SKIP when it is spent)
#   DPB_GPU_CHECK_SANITIZER=1  adds a compute-sanitizer memcheck of a short 2-rank run (~2 min)
#   DPB_PYTHON              the python3 that reads the results (scripts/gpu_check_report.py)
# Steps (--list): libraries (ldd; in the bundle run_gpu.sh env), info (versions, GPUs; without a
# GPU the rest SKIP), selftest, lenet (1 rank; 2 ranks ring + buckets + overlap: in sync, comm_s
# > 0, shared_gpu on one GPU; 3 epochs, test accuracy >= 0.5), allreduce (2 ranks, 8 B - 64 MiB,
# exact sums), nvtx, nccl (1 rank; 2 ranks run, or on one GPU are refused without a hang), params
# (CUDA vs CPU parameters after the same training), shard (--shard optimizer|gradients|parameters
# at 2 ranks against 1 replicated), resnet, gtest (the Cuda* unit tests),
# cuda_sync (DPB_CUDA_SYNC=1), sanitizer (only with DPB_GPU_CHECK_SANITIZER=1).
# Writes to the output folder: summary.txt (the verdicts, appended as each step ends, so a check
# cut short keeps what it finished), gpucheck/ (every log, CSV, JSON, XML; env.txt in the bundle)
# and gpucheck.tgz (both, to copy back in one file). Exit 1 when any step FAILed, 2 on bad usage.
# Takes about 1-2 minutes on one H100/H200 (most of it the all-reduce sweep); the dry run about
# 40 s on 2 CPU cores.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ARGS=("$@")
DRY=${DPB_GPU_CHECK_DRYRUN:-0}
OUTDIR=${OUT:-$PWD/gpucheck-out}
ONLY="" BUNDLE="" BUILD="" LIST=0
STEPS=(libraries info selftest lenet allreduce nvtx nccl params shard resnet gtest cuda_sync sanitizer)

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --out|--only|--bundle)
      [ $# -ge 2 ] || { echo "gpu_check: $1 needs a value"; exit 2; }
      case "$1" in --out) OUTDIR=$2 ;; --only) ONLY=$2 ;; --bundle) BUNDLE=$2 ;; esac
      shift ;;
    --out=*) OUTDIR=${1#*=} ;;
    --only=*) ONLY=${1#*=} ;;
    --list) LIST=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "gpu_check: unknown option '$1' (see --help)"; exit 2 ;;
    *) [ -z "$BUILD" ] || { echo "gpu_check: one BUILD_DIR only, got '$BUILD' and '$1'"; exit 2; }
       BUILD=$1 ;;
  esac
  shift
done
if [ "$LIST" = 1 ]; then printf '%s\n' "${STEPS[@]}"; exit 0; fi
for s in ${ONLY//,/ }; do
  [[ " ${STEPS[*]} " == *" $s "* ]] || { echo "gpu_check: --only: unknown step '$s' (${STEPS[*]})"; exit 2; }
done

# Started from inside a bundle without run_gpu.sh: let run_gpu.sh set the environment up.
if [ -z "$BUNDLE" ] && [ -z "$BUILD" ] && [ -x "$HERE/../run_gpu.sh" ] && [ -d "$HERE/../bin" ]; then
  exec "$HERE/../run_gpu.sh" check "${ARGS[@]}"
fi
if [ -n "$BUNDLE" ]; then
  MODE=bundle
  BUNDLE=$(cd "$BUNDLE" && pwd) || exit 2
  BIN=$BUNDLE/bin
  NVTX_TEST=$BUNDLE/tests/nvtx/nvtx_test.sh
else
  MODE=build
  BUILD=${BUILD:-$HERE/../build}
  BIN=$(cd "$BUILD" 2>/dev/null && pwd) || { echo "gpu_check: build folder '$BUILD' not found"; exit 2; }
  NVTX_TEST=$HERE/../tests/nvtx/nvtx_test.sh
fi
[ -x "$BIN/dpbench" ] || { echo "gpu_check: $BIN/dpbench not found (build it, or name the build folder)"; exit 2; }
PY=${DPB_PYTHON:-python3}
REPORT=$HERE/gpu_check_report.py
"$PY" -c 'import json, csv, xml.etree.ElementTree' 2>/dev/null \
  || { echo "gpu_check: no usable python3 ('$PY'; set DPB_PYTHON)"; exit 2; }
[ -f "$REPORT" ] || { echo "gpu_check: $REPORT missing"; exit 2; }
export PATH="$BIN:$PATH"

mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
LOGS=$OUTDIR/gpucheck
SUMMARY=$OUTDIR/summary.txt
rm -rf "$LOGS" "$OUTDIR/gpucheck.tgz"
mkdir -p "$LOGS"
: >"$SUMMARY"
BUDGET=${DPB_GPU_CHECK_BUDGET_S:-450}
[[ "$BUDGET" =~ ^[0-9]+$ ]] || { echo "gpu_check: DPB_GPU_CHECK_BUDGET_S must be whole seconds, got '$BUDGET'"; exit 2; }
T0=$(date +%s)

note() { echo "$*" | tee -a "$SUMMARY"; }
# verdict STATUS NAME FIGURES: one summary line; the step's time since it began.
verdict() {
  local figures=${3//$'\n'/ }
  [ ${#figures} -le 600 ] || figures="${figures:0:600}..."
  note "$(printf '%-5s %-22s %4ss  %s' "$1" "$2" "$(($(date +%s) - STEP_T0))" "$figures")"
  VERDICTS=$((VERDICTS + 1))
}
# run NAME TIMEOUT CMD...: CMD's stdout and stderr to $LOGS/NAME.log, killed (its whole process
# group) after TIMEOUT seconds or when the budget ends. Returns CMD's status; 124 = timed out.
run() {
  local name=$1 t=$2 left rc
  shift 2
  left=$((BUDGET - ($(date +%s) - T0) - 5))
  [ "$t" -le "$left" ] || t=$left
  [ "$t" -ge 1 ] || { echo "gpu_check: no time left in the budget" >"$LOGS/$name.log"; return 124; }
  # In the background, so that an interrupt reaches the trap at once (which ends the group).
  timeout -k 10 "$t" "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  CHILD=$!
  wait "$CHILD"
  rc=$?
  while kill -0 "$CHILD" 2>/dev/null; do wait "$CHILD"; rc=$?; done
  CHILD=""
  if [ "$INTERRUPTED" = 1 ]; then
    echo "gpu_check: interrupted" >>"$LOGS/$name.log"
    return 130
  fi
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    echo "gpu_check: TIMED OUT after ${t}s (a hang?)" >>"$LOGS/$name.log"
    rc=124
  fi
  return $rc
}
# why RC NAME: a failed run in a few words (its error line, else its last lines).
why() {
  if [ "$1" = 124 ]; then echo "TIMED OUT (a hang?): see gpucheck/$2.log"; return; fi
  local err
  err=$(grep -m2 -iE 'error|fail|abort|what\(\)' "$LOGS/$2.log" | cut -c1-300 | tr '\n' ' ')
  echo "rc=$1: ${err:-$(tail -2 "$LOGS/$2.log" | cut -c1-300 | tr '\n' ' ')}"
}
# report NAME CMD ARGS...: the reader's figures, kept in $LOGS/NAME.report; returns its status.
report() {
  local name=$1 rc
  shift
  "$PY" "$REPORT" "$@" >"$LOGS/$name.report" 2>&1
  rc=$?
  tr '\n' ' ' <"$LOGS/$name.report" | sed 's/  */ /g'
  return $rc
}
# train_step NAME VERDICT_NAME TIMEOUT "REQS" TRAIN-ARGS...: a training run and its CSV's checks.
train_step() {
  local name=$1 vname=$2 t=$3 reqs=$4 rc m mrc
  shift 4
  run "$name" "$t" dpbench train --seed 1 --quiet "$@" --csv "$LOGS/$name.csv"
  rc=$?
  if [ $rc != 0 ]; then verdict FAIL "$vname" "$(why $rc "$name")"; return; fi
  # shellcheck disable=SC2086  # reqs is a word list
  m=$(report "$name" csv "$LOGS/$name.csv" $reqs)
  mrc=$?
  [ $mrc = 0 ] && verdict PASS "$vname" "$m" || verdict FAIL "$vname" "$m"
}

# ---------------------------------------------------------------- sizes: GPU, or the dry run
if [ "$DRY" = 1 ]; then
  BE=cpu
  LENET=(--model lenet --epochs 1 --batch 64 --train-limit 256 --test-limit 64)
  LEARN=""
  RESNET=(--model resnet18 --batch 8 --lr 0.05 --epochs 1 --train-limit 16 --test-limit 8)
  CMP=(--model lenet --epochs 1 --batch 64 --train-limit 256 --test-limit 64)
  CMP_BE=async  # the CPU kernels on asynchronous streams stand in for the GPU
  MICRO=(--dpb_backends=cpu --benchmark_filter='^allreduce/cpu/' --dpb_max_bytes=64K --benchmark_min_time=0.01)
  GTEST_FILTER='OpTableShape.*:OpTable/*cpu__*'
else
  BE=cuda
  # 3 full epochs: past d2l's initialization's loss plateau (CPU: 0.74 test accuracy after 3)
  LENET=(--model lenet --epochs 3 --batch 256 --lr 0.2 --test-limit 2000)
  LEARN="acc=0.5"
  RESNET=(--model resnet18 --batch 128 --lr 0.05 --epochs 1 --train-limit 4096 --test-limit 1000)
  CMP=(--model lenet --epochs 1 --batch 256 --train-limit 8192 --test-limit 500)
  CMP_BE=cuda
  MICRO=(--dpb_backends=cuda --benchmark_filter='^allreduce/cuda/' --dpb_max_bytes=64M --benchmark_min_time=0.05)
  GTEST_FILTER='Cuda*:EveryAlgorithm/Cuda*:OpTable/*cuda__*'
fi
NGPU=0
SHARED=""  # "shared" when the multi-rank runs share one GPU (their CSV must say so)

# ---------------------------------------------------------------- the steps
# libraries: every binary's shared libraries resolve (bundle: run_gpu.sh env, which also dlopens
# cuDNN's sub-libraries and NVRTC, loaded only at run time).
step_libraries() {
  local rc missing figs
  if [ "$MODE" = bundle ]; then
    OUT=$LOGS run libraries 90 "$BUNDLE/run_gpu.sh" env
    rc=$?
    missing=$(grep -hE 'MISSING|not found' "$LOGS/env.txt" 2>/dev/null | head -4 | tr '\n' ' ')
    figs="dlopen ok: $(grep -c '^  ok ' "$LOGS/env.txt" 2>/dev/null); libstdc++ $(grep -m1 -o 'fallback [a-z ]*' "$LOGS/env.txt" 2>/dev/null);"
  else
    run libraries 60 bash -c 'for b in "$@"; do [ -e "$b" ] && { echo "== $b"; ldd "$b"; }; done' _ \
      "$BIN/dpbench" "$BIN/dpbench-micro" "$BIN/dpb_tests"
    rc=$?
    missing=$(grep -h 'not found' "$LOGS/libraries.log" | head -4 | tr '\n' ' ')
    [ -z "$missing" ] || rc=1
    figs="$(grep -c '^== ' "$LOGS/libraries.log") binaries, every library found;"
  fi
  # where the CUDA libraries came from (what a version mismatch would be traced to)
  figs+=" $(awk '/=> \// && /lib(cudart|cudnn|nccl|cublas)\.so/ && !seen[$1]++ {sub(/\/[^\/]*$/, "", $3); printf "%s=%s ", $1, $3}' \
              "$LOGS/libraries.log" "$LOGS/env.txt" 2>/dev/null)"
  [ $rc = 0 ] && verdict PASS libraries "$figs" || verdict FAIL libraries "${missing:-$(why $rc libraries)}"
}

# info: versions and the GPUs dpbench sees; without one (or without CUDA) nothing below can run.
step_info() {
  local rc m mrc
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv >"$LOGS/nvidia-smi.txt" 2>&1
  run info 60 bash -c 'dpbench info >"$1"' _ "$LOGS/info.json"
  rc=$?
  if [ $rc != 0 ]; then verdict FAIL info "$(why $rc info)"; STOP="dpbench info failed"; return; fi
  # shellcheck disable=SC2046  # an empty word list on purpose
  m=$(report info info "$LOGS/info.json" $([ "$DRY" = 1 ] || echo need-gpu))
  mrc=$?
  NGPU=$("$PY" -c 'import json, sys; print(int(json.load(open(sys.argv[1])).get("cuda_devices") or 0))' "$LOGS/info.json" 2>/dev/null || echo 0)
  [ "$NGPU" = 1 ] && SHARED=shared
  if [ $mrc = 0 ]; then verdict PASS info "$m"
  else verdict FAIL info "$m"; STOP="no usable GPU (see the info step)"; fi
}

# selftest: one case per op against the CPU reference and a 2-rank all-reduce per algorithm.
step_selftest() {
  local rc m mrc
  run selftest 180 bash -c 'dpbench selftest --json >"$1"' _ "$LOGS/selftest.json"
  rc=$?
  m=$(report selftest selftest "$LOGS/selftest.json")
  mrc=$?
  if [ "$DRY" != 1 ] && ! grep -q '"backend": "cuda"' "$LOGS/selftest.json"; then
    verdict FAIL selftest "no cuda case ran: $m"
  elif [ $rc = 0 ] && [ $mrc = 0 ]; then verdict PASS selftest "$m"
  else verdict FAIL selftest "$([ $rc = 0 ] || why $rc selftest) $m"; fi
}

# lenet: 1 rank, then 2 ranks (ring, buckets overlapped with backward; on one GPU they share it).
step_lenet() {
  train_step lenet_k1 lenet_k1 240 "$LEARN" --backend $BE "${LENET[@]}" --devices 1
  train_step lenet_k2 lenet_k2_ring_overlap 300 "sync comm $SHARED $LEARN" --backend $BE \
    "${LENET[@]}" --devices 2 --allreduce ring --grad-sync bucketed --bucket-mb 0.1 --overlap on \
    --steps-csv "$LOGS/lenet_k2.steps.csv" --trace "$LOGS/lenet_k2.trace.json"
  # timeline: the per-rank breakdown on the device's clock (CUDA events against an anchor): the
  # trace has both ranks' host, compute and comm tracks, and every step a positive time.
  local m rc
  m=$("$PY" "$HERE/check_trace.py" "$LOGS/lenet_k2.trace.json" --ranks 2 --expect-name backward \
        --expect-name all-reduce 2>&1)
  rc=$?
  m=$(echo "$m" | tail -1)
  if [ $rc = 0 ] && awk -F, 'NR > 1 && !($5 > 0) { bad = 1 } END { exit (bad || NR < 3) }' \
       "$LOGS/lenet_k2.steps.csv" 2>/dev/null; then
    verdict PASS timeline "$m; $(($(wc -l <"$LOGS/lenet_k2.steps.csv") - 1)) rank-steps"
  else
    verdict FAIL timeline "${m:-no trace}; steps CSV: $LOGS/lenet_k2.steps.csv"
  fi
}

# allreduce: 2 ranks, every algorithm, 8 B .. 64 MiB, the sums checked exactly (wrong = 0).
step_allreduce() {
  local rc m mrc
  [ -x "$BIN/dpbench-micro" ] || { verdict FAIL allreduce_sweep_k2 "$BIN/dpbench-micro not built"; return; }
  run allreduce 240 dpbench-micro "${MICRO[@]}" --dpb_ranks=2 \
    --benchmark_out="$LOGS/allreduce.json" --benchmark_out_format=json
  rc=$?
  m=$(report allreduce micro "$LOGS/allreduce.json" 5)
  mrc=$?
  [ $rc = 0 ] && [ $mrc = 0 ] && verdict PASS allreduce_sweep_k2 "$m" \
    || verdict FAIL allreduce_sweep_k2 "$([ $rc = 0 ] || why $rc allreduce) $m"
}

# nvtx: the "dpbench" domain's ranges on every rank's thread, nested as intended (injection
# library; works where Nsight Systems cannot write a report).
step_nvtx() {
  local rc picked oks
  [ -f "$NVTX_TEST" ] || { verdict FAIL nvtx_ranges "$NVTX_TEST missing"; return; }
  run nvtx 120 bash "$NVTX_TEST" "$BIN"
  rc=$?
  picked=$(grep -o -m1 'picked [a-z]*' "$LOGS/nvtx.log")
  oks=$(grep -c '^ok:' "$LOGS/nvtx.log")
  if [ $rc != 0 ]; then
    verdict FAIL nvtx_ranges "$(grep -m3 '^FAIL' "$LOGS/nvtx.log" | tr '\n' ' ') $(why $rc nvtx)"
  elif grep -q 'skipped' "$LOGS/nvtx.log"; then
    verdict "$([ "$DRY" = 1 ] && echo SKIP || echo WARN)" nvtx_ranges "$(grep -m1 skipped "$LOGS/nvtx.log")"
  elif [ "$DRY" != 1 ] && [ "$picked" != "picked cuda" ]; then
    verdict FAIL nvtx_ranges "ranges checked on '${picked:-?}', not on the cuda backend"
  else
    verdict PASS nvtx_ranges "$oks checks ok; backend ${picked:-default}"
  fi
}

# nccl: 1 rank trains; 2 ranks train on 2+ GPUs (ResNet-18 bucketed with overlap: cuDNN searches
# while NCCL kernels are in flight) or, sharing one GPU, are refused with a clear message, fast.
step_nccl() {
  if [ "$DRY" = 1 ]; then  # the refusal path only: the cpu backend has no NCCL
    run nccl_k2 60 dpbench train --backend cpu --allreduce nccl --devices 2 --train-limit 64 --test-limit 16
    nccl_refusal $? "cpu backend"
    return
  fi
  train_step nccl_k1 nccl_k1 150 "" --backend cuda --model lenet --devices 1 --epochs 1 \
    --train-limit 4096 --test-limit 500 --allreduce nccl
  if [ "$NGPU" -ge 2 ]; then
    train_step nccl_k2 nccl_k2 200 "sync comm" --backend cuda "${RESNET[@]}" --devices 2 \
      --allreduce nccl --grad-sync bucketed --overlap on
    return
  fi
  run nccl_k2 120 dpbench train --backend cuda --seed 1 --quiet "${RESNET[@]}" --devices 2 \
    --allreduce nccl --grad-sync bucketed --overlap on --csv "$LOGS/nccl_k2.csv"
  local rc=$? m
  if [ $rc = 0 ]; then  # NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 runs 2 ranks on one GPU
    m=$(report nccl_k2 csv "$LOGS/nccl_k2.csv" sync comm shared) && verdict PASS nccl_k2_shared_gpu "ran: $m" \
      || verdict FAIL nccl_k2_shared_gpu "$m"
  else
    nccl_refusal $rc "one GPU"
  fi
}
nccl_refusal() {  # nccl_refusal RC WHERE: nccl_k2 was expected to be refused
  local msg
  msg=$(grep -m1 'error:' "$LOGS/nccl_k2.log" | cut -c1-240)
  if [ "$1" = 124 ]; then verdict FAIL nccl_k2_refused "$(why 124 nccl_k2) instead of a refusal"
  elif [ "$1" != 0 ] && grep -qi 'nccl' <<<"$msg"; then verdict PASS nccl_k2_refused "$2: $msg"
  else verdict FAIL nccl_k2_refused "expected a refusal naming NCCL on $2: $(why "$1" nccl_k2)"; fi
}

# params: the same 1-epoch LeNet on the device (1 rank, and 2 ranks ring + overlap) and on the
# cpu backend; their parameters' difference against the update from the shared initialization
# (itself dumped by one step at lr 1e-30). Thresholds: warn 1e-3, fail 1e-2 of the update.
step_params() {
  local rc=0 a arc b brc v
  run params_init 90 dpbench train --backend cpu --seed 1 --quiet --model lenet --epochs 1 \
    --batch 256 --train-limit 256 --test-limit 16 --lr 1e-30 --dump-params "$LOGS/p_init.bin" || rc=$?
  [ $rc = 0 ] && { run params_dev1 90 dpbench train --backend $CMP_BE --seed 1 --quiet "${CMP[@]}" \
    --devices 1 --dump-params "$LOGS/p_dev1.bin" || rc=$?; }
  [ $rc = 0 ] && { run params_dev2 120 dpbench train --backend $CMP_BE --seed 1 --quiet "${CMP[@]}" \
    --devices 2 --allreduce ring --grad-sync bucketed --bucket-mb 0.1 --overlap on \
    --dump-params "$LOGS/p_dev2.bin" || rc=$?; }
  [ $rc = 0 ] && { run params_cpu1 150 dpbench train --backend cpu --seed 1 --quiet "${CMP[@]}" \
    --devices 1 --dump-params "$LOGS/p_cpu1.bin" || rc=$?; }
  if [ $rc != 0 ]; then
    local last; last=$(ls -t "$LOGS"/params_*.log | head -1)
    verdict FAIL params_match "$(why $rc "$(basename "$last" .log)")"
    return
  fi
  a=$(report params_k1_k2 compare "$LOGS/p_dev1.bin" "$LOGS/p_dev2.bin" "$LOGS/p_init.bin" 1e-3 1e-2)
  arc=$?
  b=$(report params_dev_cpu compare "$LOGS/p_cpu1.bin" "$LOGS/p_dev1.bin" "$LOGS/p_init.bin" 1e-3 1e-2)
  brc=$?
  v=PASS
  { [ $arc = 2 ] || [ $brc = 2 ]; } && v=WARN
  { [ $arc = 1 ] || [ $brc = 1 ]; } && v=FAIL
  verdict $v params_match "$CMP_BE k1 vs k2: $a| cpu vs $CMP_BE: $b"
}

# shard: --shard on the device: LeNet with Adam, 1 rank replicated against 2 ranks in each
# sharded mode (ring's reduce-scatter and all-gather, two units per step overlapped, ranks sharing
# the GPU on one), parameters compared as in params (warn 1e-3, fail 1e-2 of the update).
step_shard() {
  local rc=0 m out="" v=PASS r rrc
  local S=("${CMP[@]}" --optimizer adam --lr 1e-3 --allreduce ring --grad-sync bucketed \
           --bucket-mb 0.1 --overlap on)
  run shard_init 90 dpbench train --backend cpu --seed 1 --quiet --model lenet --epochs 1 \
    --batch 256 --train-limit 256 --test-limit 16 --lr 1e-30 --dump-params "$LOGS/s_init.bin" || rc=$?
  [ $rc = 0 ] && { run shard_k1 120 dpbench train --backend $CMP_BE --seed 1 --quiet "${S[@]}" \
    --devices 1 --dump-params "$LOGS/s_k1.bin" || rc=$?; }
  for m in optimizer gradients parameters; do
    [ $rc = 0 ] || break
    run "shard_$m" 150 dpbench train --backend $CMP_BE --seed 1 --quiet "${S[@]}" --devices 2 \
      --shard $m --csv "$LOGS/shard_$m.csv" --dump-params "$LOGS/s_$m.bin" || { rc=$?; break; }
    r=$(report "shard_$m" compare "$LOGS/s_k1.bin" "$LOGS/s_$m.bin" "$LOGS/s_init.bin" 1e-3 1e-2)
    rrc=$?
    out+="$m: $r| "
    [ $rrc = 2 ] && [ $v = PASS ] && v=WARN
    [ $rrc = 1 ] && v=FAIL
  done
  if [ $rc != 0 ]; then
    local last; last=$(ls -t "$LOGS"/shard_*.log | head -1)
    verdict FAIL shard_match "$(why $rc "$(basename "$last" .log)")"
    return
  fi
  verdict $v shard_match "$CMP_BE k1 replicated vs k2 --shard ${out% | }"
}

# resnet: ResNet-18 (cuDNN batch norm, 1x1 / stride-2 convolutions): 1 rank, then 2 overlapped.
step_resnet() {
  train_step resnet_k1 resnet18_k1 200 "" --backend $BE "${RESNET[@]}" --devices 1
  train_step resnet_k2 resnet18_k2_overlap 240 "sync comm $SHARED" --backend $BE "${RESNET[@]}" \
    --devices 2 --allreduce ring --grad-sync bucketed --overlap on
}

# gtest: the CUDA unit tests (op table against the CPU reference, stream ordering, collectives).
step_gtest() {
  local rc m mrc
  [ -x "$BIN/dpb_tests" ] || { verdict FAIL gtest_cuda "$BIN/dpb_tests not built"; return; }
  run gtest 240 dpb_tests --gtest_filter="$GTEST_FILTER" --gtest_output="xml:$LOGS/gtest.xml"
  rc=$?
  m=$(report gtest gtest "$LOGS/gtest.xml")
  mrc=$?
  m="$m filter=$GTEST_FILTER"
  [ $rc = 0 ] && [ $mrc = 0 ] && verdict PASS gtest_cuda "$m" || verdict FAIL gtest_cuda "$([ $rc = 0 ] || why $rc gtest) $m"
}

# cuda_sync: DPB_CUDA_SYNC=1 synchronizes after every CUDA op, so a kernel fault names its op.
step_cuda_sync() {
  [ "$DRY" != 1 ] || { verdict SKIP cuda_sync "dry run: GPU only"; return; }
  DPB_CUDA_SYNC=1 train_step cuda_sync cuda_sync_naive 150 "sync $SHARED" --backend cuda \
    --model lenet --devices 2 --epochs 1 --batch 128 --train-limit 4096 --test-limit 500 \
    --allreduce naive --grad-sync per-param --overlap off
}

# sanitizer (DPB_GPU_CHECK_SANITIZER=1): compute-sanitizer memcheck of a short 2-rank run.
step_sanitizer() {
  [ "${DPB_GPU_CHECK_SANITIZER:-0}" = 1 ] || return 0
  [ "$DRY" != 1 ] || { verdict SKIP memcheck "dry run: GPU only"; return; }
  command -v compute-sanitizer >/dev/null || { verdict SKIP memcheck "compute-sanitizer not on PATH"; return; }
  run sanitizer 200 compute-sanitizer --tool memcheck --error-exitcode 9 dpbench train --backend cuda \
    --seed 1 --quiet --model lenet --devices 2 --epochs 1 --batch 64 --train-limit 256 --test-limit 64
  local rc=$?
  [ $rc = 0 ] && verdict PASS memcheck "$(grep -m1 'ERROR SUMMARY' "$LOGS/sanitizer.log")" \
    || verdict FAIL memcheck "$(grep -m1 'ERROR SUMMARY' "$LOGS/sanitizer.log") $(why $rc sanitizer)"
}

# ---------------------------------------------------------------- main
CHILD="" STOP="" INTERRUPTED=0
trap 'INTERRUPTED=1; [ -z "$CHILD" ] || kill -TERM -- -"$CHILD" 2>/dev/null' INT TERM
note "dpbench gpu_check: $MODE $BIN$([ "$DRY" = 1 ] && echo ' DRY RUN (cpu backend, tiny runs)'); $(hostname); $(date -u +%FT%TZ); budget ${BUDGET}s"
for step in "${STEPS[@]}"; do
  [ -z "$ONLY" ] || [[ ",$ONLY," == *",$step,"* ]] || continue
  STEP_T0=$(date +%s)
  VERDICTS=0
  if [ "$INTERRUPTED" = 1 ]; then verdict SKIP "$step" "interrupted"; continue; fi
  if [ -n "$STOP" ]; then verdict SKIP "$step" "$STOP"; continue; fi
  if [ $((BUDGET - (STEP_T0 - T0))) -lt 10 ]; then
    verdict SKIP "$step" "time budget (DPB_GPU_CHECK_BUDGET_S=${BUDGET}) spent"; continue
  fi
  "step_$step"
  [ "$VERDICTS" -gt 0 ] || [ "$step" = sanitizer ] || verdict FAIL "$step" "gave no verdict (a bug in gpu_check.sh)"
done
nvidia-smi >"$LOGS/nvidia-smi-end.txt" 2>&1
fails=$(grep -c '^FAIL' "$SUMMARY")
note "total $(($(date +%s) - T0)) s of ${BUDGET} s: $(grep -c '^PASS' "$SUMMARY") PASS, $fails FAIL, $(grep -c '^WARN' "$SUMMARY") WARN, $(grep -c '^SKIP' "$SUMMARY") SKIP"
cp "$SUMMARY" "$LOGS/summary.txt"
tar czf "$OUTDIR/gpucheck.tgz" -C "$OUTDIR" gpucheck || echo "gpu_check: could not write $OUTDIR/gpucheck.tgz"
echo "gpu_check: $SUMMARY; logs in $LOGS and $OUTDIR/gpucheck.tgz"
[ "$fails" = 0 ] && [ "$INTERRUPTED" = 0 ] || exit 1
exit 0
