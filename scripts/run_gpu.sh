#!/usr/bin/env bash
# run_gpu.sh STEP... : runs dpbench from a bundle made by scripts/gpu_bundle.sh (this file is
# copied into the bundle as run_gpu.sh) on a machine without Debian's packages, e.g. the GPU
# machine of ../shared/gpu/README.md. Steps, in the order given:
#   env           versions (GPU, driver, CUDA libraries found, dpbench info) and an ldd check of
#                 every binary -> $OUT/env.txt; fails when a library is missing
#   test          every GoogleTest test (the CUDA ones run when a GPU is present) and the CLI and
#                 NVTX checks -> $OUT/test.log, $OUT/gtest.xml
#   exec CMD ...  runs CMD in the same environment (must be the last step), e.g.
#                 exec dpbench train --backend cuda --devices 1 --epochs 10 --csv $OUT/lenet.csv
# Environment it sets: LD_LIBRARY_PATH (bundle lib/, the NVIDIA wheels' lib folders, the CUDA
# toolkit's, lib/fallback only when the machine's libstdc++ is too old), DPBENCH_DATA (bundle
# data/), PATH (bundle bin/ first). OUT defaults to BUNDLE/out. Exit status: the first failing
# step's, else 0.
set -uo pipefail
B=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$B/out}
mkdir -p "$OUT"
[ $# -gt 0 ] || { sed -n '2,16p' "$0"; exit 2; }

# oneDNN travels xz-compressed; python's lzma stands in where xz is missing.
for z in "$B"/lib/*.xz; do
  [ -e "$z" ] || continue
  [ -f "${z%.xz}" ] && continue
  if command -v xz >/dev/null; then xz -dkf "$z"
  else python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$z" "${z%.xz}"
  fi || { echo "run_gpu: cannot decompress $z"; exit 1; }
done

wheels=$(python3 - <<'EOF' 2>/dev/null
import os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
dirs = []
for p in nvidia.__path__:
    for d in sorted(os.listdir(p)):
        lib = os.path.join(p, d, "lib")
        if os.path.isdir(lib):
            dirs.append(lib)
print(":".join(dirs))
EOF
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
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'nccl', torch.cuda.nccl.version())" 2>&1 | tail -1
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
  echo "== dpbench info" >>"$OUT/env.txt"
  dpbench info >>"$OUT/env.txt" 2>&1 || missing=1
  cat "$OUT/env.txt"
  [ $missing -eq 0 ] || { echo "run_gpu env: FAILED (see above)"; return 1; }
}

step_test() {
  local rc=0
  {
    echo "== dpb_tests"; dpb_tests --gtest_output="xml:$OUT/gtest.xml" || rc=1
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
    exec) [ $# -gt 0 ] || { echo "run_gpu: exec needs a command"; exit 2; }
          "$@"; rc=$?; [ $status -ne 0 ] || status=$rc; break ;;
    *) echo "run_gpu: unknown step '$step' (env, test, exec CMD...)"; exit 2 ;;
  esac
done
exit $status
