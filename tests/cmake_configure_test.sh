#!/usr/bin/env bash
# cmake_configure_test.sh [CMAKE]: how the configure decides on the CUDA backend (cmake/cuda.cmake,
# cmake/cuda_deps.cmake), run as configure-only projects in a temporary folder: with nvcc but no
# cuDNN, DPB_CUDA=AUTO builds the CPU backend and says what is missing and how to get it, while
# DPB_CUDA=ON fails with that message; without NCCL, AUTO builds the CUDA backend without it and
# ON fails; a cuDNN header of one install and a library of another are refused; the library is
# taken from the header's own install; and the real project configures CPU-only without cuDNN.
# Most cases include cmake/cuda.cmake from a small project (a second or two each, no oneDNN or
# GTest to find). Exit 77 (skipped) when there is no nvcc, after the checks that need none.
set -u
CMAKE="${1:-cmake}"
SRC=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
n=0
# configure WANT_RC "needle|needle..." [env VAR=value ...] -- cmake args: a fresh configure of the
# small project; every needle (fixed strings) must be in its output.
configure() {
  local want="$1" needles="$2"; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  n=$((n + 1))
  local out rc
  out=$(env "${envs[@]}" "$CMAKE" -S "$tmp/proj" -B "$tmp/b$n" "$@" 2>&1); rc=$?
  rm -rf "$tmp/b$n"
  local ok=1
  if [ "$want" = 0 ] && [ $rc -ne 0 ]; then ok=0; fi
  if [ "$want" != 0 ] && [ $rc -eq 0 ]; then ok=0; fi
  local list needle
  IFS='|' read -ra list <<<"$needles"
  for needle in "${list[@]}"; do grep -qF -- "$needle" <<<"$out" || ok=0; done
  if [ $ok = 1 ]; then
    echo "ok: ${envs[*]} $* -> rc=$rc"
  else
    fail "${envs[*]} $* -> rc=$rc, want $([ "$want" = 0 ] && echo 0 || echo non-zero) and '$needles' in:"
    echo "$out" | grep -v "^-- \(Check\|Detecting\|Looking\|Performing\)" | tail -25
  fi
}

mkdir -p "$tmp/proj" "$tmp/empty"
cat > "$tmp/proj/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.22...3.31)
project(dpb_configure_test LANGUAGES CXX)
set(DPB_CUDA AUTO CACHE STRING "AUTO, ON or OFF")
include("$SRC/cmake/cuda.cmake")
EOF
# A fake install: include/cudnn.h + cudnn_version.h saying MAJOR.MINOR.PATCH, lib/LIBNAME (empty:
# the configure only reads names).
fake_cudnn() {  # fake_cudnn DIR MAJOR MINOR PATCH LIBNAME
  mkdir -p "$1/include" "$1/lib"
  echo '#include "cudnn_version.h"' > "$1/include/cudnn.h"
  printf '#define CUDNN_MAJOR %s\n#define CUDNN_MINOR %s\n#define CUDNN_PATCHLEVEL %s\n' "$2" "$3" "$4" \
    > "$1/include/cudnn_version.h"
  : > "$1/lib/$5"
}
fake_cudnn "$tmp/cudnn8" 8 9 7 libcudnn.so.9  # an 8.x header beside a 9 library: two installs
fake_cudnn "$tmp/cudnn9" 9 19 0 libcudnn.so.9

nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ]; then
  configure 0 "backends: cpu" -- -DDPB_CUDA=AUTO
  configure 1 "DPB_CUDA=ON but no CUDA compiler (nvcc) was found" -- -DDPB_CUDA=ON
  echo "$fails failure(s); no nvcc here: the cuDNN and NCCL cases were skipped"
  [ $fails -eq 0 ] && exit 77 || exit 1
fi

# No cuDNN (CUDNN_ROOT names an empty folder, and only it is searched).
configure 0 "backends: cpu|cuDNN not found|CUDNN_ROOT|libcudnn9-dev-cuda-|nvidia-cudnn-cu" \
  -- -DDPB_CUDA=AUTO -DCUDNN_ROOT="$tmp/empty"
configure 1 "DPB_CUDA=ON but cuDNN not found|CUDNN_ROOT=$tmp/empty|libcudnn9-dev-cuda-" \
  CUDNN_ROOT="$tmp/empty" -- -DDPB_CUDA=ON  # the environment variable too
# No NCCL: ON refuses; AUTO builds the CUDA backend without it (checked with the cuDNN below).
configure 1 "DPB_CUDA=ON but NCCL not found|NCCL_ROOT|libnccl-dev|DPB_CUDA=AUTO builds the CUDA backend without NCCL" \
  -- -DDPB_CUDA=ON -DNCCL_ROOT="$tmp/empty"
# A cuDNN 8 header with a cuDNN 9 library: two installs, refused (AUTO: CPU only, ON: error).
configure 0 "two installs|cuDNN 8.9.7|libcudnn.so.9|backends: cpu" \
  -- -DDPB_CUDA=AUTO -DCUDNN_ROOT="$tmp/cudnn8"
configure 1 "DPB_CUDA=ON but cuDNN's header and library come from two installs" \
  -- -DDPB_CUDA=ON -DCUDNN_ROOT="$tmp/cudnn8"
# A header chosen by hand: its own install's library, not the first one the search meets.
configure 0 "cuDNN 9.19.0: $tmp/cudnn9/include, $tmp/cudnn9/lib/libcudnn.so.9|backends: cpu, cuda (cuDNN 9.19.0, no NCCL)|built without NCCL" \
  -- -DDPB_CUDA=AUTO -DDPB_CUDNN_INCLUDE="$tmp/cudnn9/include" -DNCCL_ROOT="$tmp/empty" \
     -DCMAKE_CUDA_ARCHITECTURES=90

# The real project: nvcc but no cuDNN still configures, CPU only.
out=$("$CMAKE" -S "$SRC" -B "$tmp/real" -DDPB_CUDA=AUTO -DCUDNN_ROOT="$tmp/empty" -DDPB_TESTS=OFF \
      -DDPB_BENCH=OFF 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF "backends: cpu" <<<"$out" && ! grep -qF "backends: cpu, cuda" <<<"$out"; then
  echo "ok: the project without cuDNN configures CPU-only"
else
  fail "the project without cuDNN: rc=$rc"; echo "$out" | tail -20
fi

echo "$fails failure(s)"
[ $fails -eq 0 ]
