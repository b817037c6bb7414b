#!/usr/bin/env bash
# setup.sh: install what dpbench needs (Debian 12) when missing, then configure and build into
# build/. Idempotent: a second run installs nothing and rebuilds only what changed.
#   scripts/setup.sh            # packages + Release build in build/
#   DPB_CUDA=OFF scripts/setup.sh   # force a CPU-only build (default AUTO: CUDA when nvcc is found)
#   DPB_PEERS=1 scripts/setup.sh    # also python3-torch (+ OpenBLAS) for the PyTorch peers (peers/)
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake ninja-build git zlib1g-dev libdnnl-dev ocl-icd-opencl-dev libbenchmark-dev
      libbenchmark-tools libgtest-dev libcli11-dev nlohmann-json3-dev dataset-fashion-mnist
      python3 python3-matplotlib python3-numpy python3-scipy openmpi-bin libopenmpi-dev  # scipy: compare.py
      clang libclang-rt-dev  # clang + its libFuzzer/sanitizer runtimes: scripts/sanitize.sh fuzz
      ccache  # compiler cache: a rebuild of an unchanged file, in any clone, is a cache hit
      xz-utils)  # scripts/gpu_bundle.sh compresses oneDNN (tests/bundle_test.sh)

# DPB_PEERS=1: also PyTorch for the peers (./run_all.sh --peers; peers/README.md); a large download.
# With it OpenBLAS: Debian's torch does its CPU matmuls through libblas.so.3, which is the
# reference BLAS (about 10x slower) unless an optimized one is installed; a peer runs at its best.
if [ "${DPB_PEERS:-0}" = 1 ]; then PKGS+=(python3-torch libopenblas0-pthread); fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

BUILD=${DPB_BUILD_DIR:-build}
CUDA_OPT=${DPB_CUDA:-AUTO}
# ccache keyed on paths relative to this clone, so CI's fresh clones share the cache
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# DPB_GTEST_SHARDS=N (scripts/test.sh): GoogleTest as N ctest shards (CMakeLists.txt), kept in the cache
shards=()
[ -n "${DPB_GTEST_SHARDS:-}" ] && shards=(-DDPB_GTEST_SHARDS="$DPB_GTEST_SHARDS")
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPB_CUDA="$CUDA_OPT" "${launcher[@]}" \
        "${shards[@]}"
elif ((${#shards[@]})) && ! grep -qx "DPB_GTEST_SHARDS:STRING=$DPB_GTEST_SHARDS" "$BUILD/CMakeCache.txt"; then
  cmake -S . -B "$BUILD" "${shards[@]}" >/dev/null
fi
cmake --build "$BUILD" -j "$(nproc)"
echo "setup: built $BUILD/dpbench"
