#!/usr/bin/env bash
# run_gpu.sh STEP... : runs dpbench from a bundle made by scripts/gpu_bundle.sh (this file is
# copied into the bundle as run_gpu.sh) on a machine without Debian's packages, e.g. the GPU
# machine of ../shared/gpu/README.md. Steps, in the order given:
#   env           versions (GPU, driver, CUDA libraries found, dpbench info), an ldd check of
#                 every binary and a dlopen check of the libraries loaded only at run time
#                 (cuDNN's sub-libraries, NVRTC) -> $OUT/env.txt; fails when a library is missing
#   test          every GoogleTest test (the CUDA ones run when a GPU is present; DPB_TEST_FILTER
#                 narrows them, a --gtest_filter pattern) and the CLI and NVTX checks
#                 -> $OUT/test.log, $OUT/gtest.xml
#   check [ARGS]  the first-run check (scripts/gpu_check.sh --help; must be the last step): ~1-2
#                 min on one H100/H200 -> $OUT/summary.txt, $OUT/gpucheck/, $OUT/gpucheck.tgz
#   exec CMD ...  runs CMD in the same environment (must be the last step), e.g.
#                 exec dpbench train --backend cuda --devices 1 --epochs 10 --csv $OUT/lenet.csv
# Environment it sets: LD_LIBRARY_PATH (bundle lib/, the NVIDIA wheels' lib folders, the CUDA
# toolkit's, lib/fallback only when the machine's libstdc++ is too old), DPBENCH_DATA (bundle
# data/), PATH (bundle bin/ first). OUT defaults to BUNDLE/out. The wheels (nvidia-cudnn-cu13,
# nvidia-nccl-cu13, ...) are looked for in every site-packages of DPB_PYTHON, of each python3 /
# python on PATH, of $VIRTUAL_ENV and $CONDA_PREFIX, and of the usual system folders.
# Exit status: the first failing step's, else 0.
set -uo pipefail
B=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$B/out}
mkdir -p "$OUT"
[ $# -gt 0 ] || { sed -n '2,20p' "$0"; exit 2; }

# oneDNN travels xz-compressed; python's lzma stands in where xz is missing.
for z in "$B"/lib/*.xz; do
  [ -e "$z" ] || continue
  [ -f "${z%.xz}" ] && continue
  if command -v xz >/dev/null; then xz -dkf "$z"
  else "${DPB_PYTHON:-python3}" -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$z" "${z%.xz}"
  fi || { echo "run_gpu: cannot decompress $z"; exit 1; }
done

# Every python we can find: DPB_PYTHON first, then PATH's, the active environments', system's.
pythons=()
for py in "${DPB_PYTHON:-}" $(type -ap python3 python 2>/dev/null) "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}" \
          "${CONDA_PREFIX:+$CONDA_PREFIX/bin/python}" /usr/bin/python3 /usr/local/bin/python3; do
  [ -n "$py" ] && [ -x "$py" ] && pythons+=("$py")
done
PY=${pythons[0]:-}  # for the dlopen check and lzma
# nvidia/<package>/lib folders under every site-packages those pythons know, and under the usual
# install prefixes (for a python we did not find), deduplicated in that order.
wheels=$(
  {
    for py in "${pythons[@]}"; do
      "$py" -c 'import site, sys
dirs = list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()] + sys.path
print("\n".join(d for d in dirs if d))' 2>/dev/null
    done
    ls -d /usr/local/lib/python3*/{site,dist}-packages /usr/lib/python3/dist-packages \
          "$HOME"/.local/lib/python3*/site-packages 2>/dev/null
  } | while read -r sp; do
    for lib in "$sp"/nvidia/*/lib; do [ -d "$lib" ] && readlink -f "$lib"; done
  done | awk '!seen[$0]++' | paste -sd: -
)
cudalib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && cudalib+=":$d"
done
need=$(grep -m1 -o 'libstdc++ >= GLIBCXX_[0-9.]*' "$B/MANIFEST.txt" 2>/dev/null | awk '{print $3}')
sys_stdcxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
fallback=""
if [ -n "$need" ] && { [ -z "$sys_stdcxx" ] || ! grep -qa "$need" "$sys_stdcxx"; }; then
  fallback=":$B/lib/fallback"
fi
export LD_LIBRARY_PATH="$B/lib${wheels:+:$wheels}$cudalib$fallback${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DPBENCH_DATA="$B/data"
export PATH="$B/bin:$PATH"

step_env() {
  {
    echo "== run_gpu env $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    sed -n '1,6p' "$B/MANIFEST.txt" 2>/dev/null
    echo "== machine"; uname -srm; ldd --version 2>&1 | head -1
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || true
    echo "== library path"; tr ':' '\n' <<<"$LD_LIBRARY_PATH"
    echo "== libstdc++: system ${sys_stdcxx:-none}, needed ${need:-?}, fallback ${fallback:+used}${fallback:-not used}"
    echo "== python wheels"
    "${PY:-python3}" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'nccl', torch.cuda.nccl.version())" 2>&1 | tail -1
    echo "== ldd"
  } >"$OUT/env.txt"
  local missing=0
  for b in "$B"/bin/*; do
    if ldd "$b" | grep -q "not found"; then
      echo "MISSING for $(basename "$b"):" >>"$OUT/env.txt"; ldd "$b" | grep "not found" >>"$OUT/env.txt"
      missing=1
    fi
  done
  ldd "$B/bin/dpbench" | grep -E "dnnl|cudnn|nccl|cublas|cudart|gomp|stdc" >>"$OUT/env.txt"
  echo "== dlopen (libraries loaded at run time, not visible to ldd)" >>"$OUT/env.txt"
  check_dlopen >>"$OUT/env.txt" 2>&1 || missing=1
  echo "== dpbench info" >>"$OUT/env.txt"
  dpbench info >>"$OUT/env.txt" 2>&1 || missing=1
  cat "$OUT/env.txt"
  [ $missing -eq 0 ] || { echo "run_gpu env: FAILED (see above)"; return 1; }
}

# cuDNN 9 loads its sub-libraries (graph, ops, cnn, engines, heuristic) with dlopen when first
# used, and its runtime-compiled engines load NVRTC: ldd cannot see them, so dlopen each one.
check_dlopen() {
  local cudart major_cuda major_dnn
  cudart=$(ldd "$B/bin/dpbench" | awk '/libcudart\.so/ {print $1; exit}')
  [ -n "$cudart" ] || { echo "  none: this dpbench was built without CUDA (cpu backend only)"; return 0; }
  major_cuda=${cudart##*.so.}
  major_dnn=$(ldd "$B/bin/dpbench" | awk '/libcudnn\.so/ {print $1; exit}'); major_dnn=${major_dnn##*.so.}
  [ -n "$PY" ] || { echo "no python found: dlopen check skipped (set DPB_PYTHON)"; return 1; }
  "$PY" - "$major_cuda" "$major_dnn" <<'PYEOF'
import ctypes, sys
cuda, dnn = sys.argv[1] or "13", sys.argv[2] or "9"
libs = [f"libcudart.so.{cuda}", f"libcublas.so.{cuda}", f"libcublasLt.so.{cuda}",
        f"libnvrtc.so.{cuda}", "libnccl.so.2", f"libcudnn.so.{dnn}"] + \
       [f"libcudnn_{s}.so.{dnn}" for s in ("graph", "ops", "cnn", "engines_precompiled",
                                          "engines_runtime_compiled", "heuristic")]
bad = 0
for name in libs:
    try:
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        print(f"  ok      {name}")
    except OSError as e:
        print(f"  MISSING {name}: {e}")
        bad += 1
sys.exit(1 if bad else 0)
PYEOF
}

step_test() {
  local rc=0
  {
    echo "== dpb_tests"
    dpb_tests --gtest_filter="${DPB_TEST_FILTER:-*}" --gtest_output="xml:$OUT/gtest.xml" || rc=1
    echo "== cli_test"; "$B/tests/cli_test.sh" "$B/bin" || rc=1
    echo "== nvtx_test"; "$B/tests/nvtx/nvtx_test.sh" "$B/bin" || rc=1
  } >"$OUT/test.log" 2>&1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|cli_test:|nvtx|FAIL|on the GPU|GPU rank" "$OUT/test.log" | tail -40
  echo "run_gpu test: $([ $rc -eq 0 ] && echo passed || echo FAILED) (log: $OUT/test.log)"
  return $rc
}

status=0
while [ $# -gt 0 ]; do
  step=$1; shift
  case "$step" in
    env) step_env || { [ $status -ne 0 ] || status=1; } ;;
    test) step_test || { [ $status -ne 0 ] || status=1; } ;;
    check) "$B/scripts/gpu_check.sh" --bundle "$B" --out "$OUT" "$@"; rc=$?
           [ $status -ne 0 ] || status=$rc; break ;;
    exec) [ $# -gt 0 ] || { echo "run_gpu: exec needs a command"; exit 2; }
          "$@"; rc=$?; [ $status -ne 0 ] || status=$rc; break ;;
    *) echo "run_gpu: unknown step '$step' (env, test, check [ARGS], exec CMD...)"; exit 2 ;;
  esac
done
exit $status
