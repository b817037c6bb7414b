#!/usr/bin/env bash
# gpu_bundle.sh [BUNDLE_DIR]: build dpbench here for the GPU machine (../shared/gpu/README.md: one
# H100/H200, sm_90, CUDA 13 nvcc, no Debian packages, cuDNN/NCCL/cuBLAS only as NVIDIA's Python
# wheels) and pack what it needs into one folder small enough for the device tool's `carry`
# (64 MiB): default build-gpu-bundle/ (ignored by git, like every build*/ folder).
#
#   scripts/gpu_bundle.sh                     # builds build-gpu/ (sm_90, Release, CUDA on), packs
#   scripts/gpu_bundle.sh --pack-only BUILD_DIR BUNDLE_DIR
#                                             # packs an existing build (no nvcc needed; CPU builds
#                                             # too: tests/bundle_test.sh runs such a bundle)
#   # then, with the device tool: carry ["build-gpu-bundle"], command e.g.
#   #   build-gpu-bundle/run_gpu.sh check     # the first-run check (scripts/gpu_check.sh), $OUT
#   #   build-gpu-bundle/run_gpu.sh env test  # versions + ldd check + every test, logs in $OUT
#   #   build-gpu-bundle/run_gpu.sh exec dpbench train --backend cuda --devices 1 --epochs 10
#
# The bundle: bin/ (dpbench, dpbench-micro, dpb_tests, the NVTX recorder), lib/ (the non-CUDA
# shared libraries the GPU machine lacks: oneDNN xz-compressed, libgomp, libOpenCL, Google
# Benchmark, zlib, libcudart; lib/fallback/ libstdc++ and libgcc_s, used only when the machine's
# own libstdc++ is older than this build needs), data/ (Fashion-MNIST .gz), the repository files
# in PACKED below at their repository paths (the test scripts and what they read, the first-run
# check), run_gpu.sh and MANIFEST.txt (commit, sizes, glibc needed). cuBLAS, cuDNN and NCCL are
# not bundled (hundreds of MB): run_gpu.sh finds them in the wheels.
# Needs: the CUDA toolkit in /usr/local/cuda (not with --pack-only), scripts/setup.sh's packages,
# xz-utils. DPB_BUNDLE_XZ_LEVEL: xz preset for oneDNN (default 6; the test uses 0, faster).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
PACK_ONLY=0
if [ "${1:-}" = --pack-only ]; then
  [ $# = 3 ] || { echo "gpu_bundle: usage: gpu_bundle.sh --pack-only BUILD_DIR BUNDLE_DIR"; exit 2; }
  PACK_ONLY=1
  BUILD=$(cd "$2" 2>/dev/null && pwd) || { echo "gpu_bundle: build folder '$2' not found"; exit 1; }
  BUNDLE=$3
else
  BUILD=$SRC/build-gpu
  BUNDLE=${1:-$SRC/build-gpu-bundle}
fi
DATA=${DPBENCH_DATA:-/usr/share/datasets/fashion-mnist}
LIMIT_MB=60  # the device tool carries 64 MiB in all; keep room for the repository itself
XZ_LEVEL=${DPB_BUNDLE_XZ_LEVEL:-6}
# Repository files the bundle carries, at the same relative paths, so that a script finds what it
# reads as it does in the checkout (tests/cli_test.sh reads ../scripts/train_csv_columns.json).
PACKED=(
  tests/cli_test.sh
  tests/nvtx/nvtx_test.sh
  scripts/train_csv_columns.json
  scripts/gpu_check.sh
  scripts/gpu_check_report.py
  scripts/check_trace.py
)

command -v xz >/dev/null || { echo "gpu_bundle: xz not found (apt-get install xz-utils)"; exit 1; }
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
  [ -f "$DATA/$f" ] || { echo "gpu_bundle: $DATA/$f missing (apt-get install dataset-fashion-mnist)"; exit 1; }
done

if [ $PACK_ONLY = 0 ]; then
  [ -x /usr/local/cuda/bin/nvcc ] || { echo "gpu_bundle: /usr/local/cuda/bin/nvcc not found"; exit 1; }
  echo "== configure + build $BUILD (sm_90, Release, CUDA on)"
  mkdir -p "$BUILD"
  cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPB_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 >"$BUILD/configure.log" 2>&1 \
    || { tail -30 "$BUILD/configure.log"; exit 1; }
  ninja -C "$BUILD" dpbench dpbench-micro dpb_tests dpb_nvtx_recorder
fi
for b in dpbench dpbench-micro dpb_tests; do
  [ -x "$BUILD/$b" ] || { echo "gpu_bundle: $BUILD/$b not built (ninja -C $BUILD $b)"; exit 1; }
done
cache() {  # cache VAR: a CMake cache entry of the build, empty when unset
  sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt" 2>/dev/null | head -1
}

echo "== pack $BUNDLE"
rm -rf "$BUNDLE.tmp"
mkdir -p "$BUNDLE.tmp"/{bin,lib/fallback,data}
cp "$BUILD"/dpbench "$BUILD"/dpbench-micro "$BUILD"/dpb_tests "$BUNDLE.tmp/bin/"
# The recorder is built where NVTX's headers are (always with CUDA); without it the NVTX test skips.
[ ! -f "$BUILD"/libdpb_nvtx_recorder.so ] || cp "$BUILD"/libdpb_nvtx_recorder.so "$BUNDLE.tmp/bin/"
for f in "${PACKED[@]}"; do
  mkdir -p "$BUNDLE.tmp/$(dirname "$f")"
  cp -p "$SRC/$f" "$BUNDLE.tmp/$f"
done
cp "$DATA"/*-ubyte.gz "$BUNDLE.tmp/data/"

# Every shared library the binaries load, and what those load in turn (libdnnl links libOpenCL),
# except the C library's own and what the GPU machine has (the CUDA math libraries come from its
# wheels; the driver's libcuda from the driver). libstdc++ and libgcc_s go to lib/fallback.
bundle_deps() {  # bundle_deps FILE...: copy the libraries FILE... load into the bundle
  local dep name dest
  for dep in $(ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
    name=$(basename "$dep")
    case "$name" in
      libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*) continue ;;  # glibc
      libcuda.so.*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) continue ;;   # driver/wheels
      libstdc++.so.*|libgcc_s.so.*) dest="$BUNDLE.tmp/lib/fallback/$name" ;;
      *) dest="$BUNDLE.tmp/lib/$name" ;;
    esac
    [ -f "$dest" ] || cp -L "$dep" "$dest"
  done
}
bundle_deps "$BUNDLE.tmp"/bin/*
bundle_deps "$BUNDLE.tmp"/lib/*.so*
strip --strip-unneeded "$BUNDLE.tmp"/lib/*.so* "$BUNDLE.tmp"/lib/fallback/*.so* 2>/dev/null || true
for big in "$BUNDLE.tmp"/lib/libdnnl.so*; do
  if [ -e "$big" ]; then xz -T0 "-$XZ_LEVEL" "$big"; fi  # 40 MB -> ~7 MB at preset 6
done

cp "$SRC/scripts/run_gpu.sh" "$BUNDLE.tmp/run_gpu.sh"
{
  echo "dpbench GPU bundle, built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "commit: $(git -C "$SRC" rev-parse HEAD 2>/dev/null)$(git -C "$SRC" diff --quiet 2>/dev/null || echo -dirty)"
  if ldd "$BUILD/dpbench" | grep -q libcudart; then
    nvcc=$(sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")$/\1/p' "$BUILD"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -1)
    echo "nvcc: $("${nvcc:-/usr/local/cuda/bin/nvcc}" --version 2>/dev/null | tail -1)"
  else
    echo "nvcc: none (a build without CUDA: the cpu backend only)"
  fi
  echo "CUDA architectures: $(cache CMAKE_CUDA_ARCHITECTURES); build type $(cache CMAKE_BUILD_TYPE); from $BUILD"
  echo "needs glibc >= $(objdump -T "$BUNDLE.tmp"/bin/* | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1 | cut -d_ -f2)," \
       "libstdc++ >= $(objdump -T "$BUNDLE.tmp"/bin/* | grep -o 'GLIBCXX_[0-9.]*' | sort -V | tail -1) (else lib/fallback)"
  echo "linked against here: cuDNN $(ldd "$BUILD/dpbench" | grep -o -m1 'libcudnn\.so\.[0-9]*' || echo none), NCCL $(ldd "$BUILD/dpbench" | grep -o -m1 'libnccl\.so\.[0-9]*' || echo none) (sonames must match the wheels')"
  echo "files:"
  (cd "$BUNDLE.tmp" && find . -type f -printf '  %p %s\n' | sort)
} >"$BUNDLE.tmp/MANIFEST.txt"

size_mb=$(du -sm "$BUNDLE.tmp" | cut -f1)
rm -rf "$BUNDLE"
mv "$BUNDLE.tmp" "$BUNDLE"
echo "gpu_bundle: $BUNDLE, ${size_mb} MB"
if [ "$size_mb" -gt "$LIMIT_MB" ]; then
  echo "gpu_bundle: WARNING: over ${LIMIT_MB} MB; the device tool carries 64 MiB in all"
  exit 1
fi
