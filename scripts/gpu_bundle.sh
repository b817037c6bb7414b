#!/usr/bin/env bash
# gpu_bundle.sh [BUNDLE_DIR]: build dpbench here for the GPU machine (../shared/gpu/README.md: one
# H100/H200, sm_90, CUDA 13 nvcc, no Debian packages, cuDNN/NCCL/cuBLAS only as NVIDIA's Python
# wheels) and pack what it needs into one folder small enough for the device tool's `carry`
# (64 MiB): default build-gpu-bundle/ (ignored by git, like every build*/ folder).
#
#   scripts/gpu_bundle.sh                     # builds build-gpu/ (sm_90, Release, CUDA on), packs
#   # then, with the device tool: carry ["build-gpu-bundle"], command e.g.
#   #   build-gpu-bundle/run_gpu.sh env test  # versions + ldd check + every test, logs in $OUT
#   #   build-gpu-bundle/run_gpu.sh exec dpbench train --backend cuda --devices 1 --epochs 10
#
# The bundle: bin/ (dpbench, dpbench-micro, dpb_tests, the NVTX recorder), lib/ (the non-CUDA
# shared libraries the GPU machine lacks: oneDNN xz-compressed, libgomp, libOpenCL, Google
# Benchmark, zlib, libcudart; lib/fallback/ libstdc++ and libgcc_s, used only when the machine's
# own libstdc++ is older than this build needs), data/ (Fashion-MNIST .gz), tests/ (the CLI and
# NVTX test scripts), run_gpu.sh and MANIFEST.txt (commit, sizes, glibc needed). cuBLAS, cuDNN
# and NCCL are not bundled (hundreds of MB): run_gpu.sh finds them in the wheels.
# Needs: the CUDA toolkit in /usr/local/cuda, scripts/setup.sh's packages, xz-utils.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${1:-$SRC/build-gpu-bundle}
BUILD=$SRC/build-gpu
DATA=${DPBENCH_DATA:-/usr/share/datasets/fashion-mnist}
LIMIT_MB=60  # the device tool carries 64 MiB in all; keep room for the repository itself

command -v xz >/dev/null || { echo "gpu_bundle: xz not found (apt-get install xz-utils)"; exit 1; }
[ -x /usr/local/cuda/bin/nvcc ] || { echo "gpu_bundle: /usr/local/cuda/bin/nvcc not found"; exit 1; }
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
  [ -f "$DATA/$f" ] || { echo "gpu_bundle: $DATA/$f missing (apt-get install dataset-fashion-mnist)"; exit 1; }
done

echo "== configure + build $BUILD (sm_90, Release, CUDA on)"
mkdir -p "$BUILD"
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPB_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 >"$BUILD/configure.log" 2>&1 \
  || { tail -30 "$BUILD/configure.log"; exit 1; }
ninja -C "$BUILD" dpbench dpbench-micro dpb_tests dpb_nvtx_recorder

echo "== pack $BUNDLE"
rm -rf "$BUNDLE.tmp"
mkdir -p "$BUNDLE.tmp"/{bin,lib/fallback,data,tests/nvtx}
cp "$BUILD"/dpbench "$BUILD"/dpbench-micro "$BUILD"/dpb_tests "$BUILD"/libdpb_nvtx_recorder.so \
   "$BUNDLE.tmp/bin/"
cp "$SRC"/tests/cli_test.sh "$BUNDLE.tmp/tests/"
cp "$SRC"/tests/nvtx/nvtx_test.sh "$BUNDLE.tmp/tests/nvtx/"
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
for big in "$BUNDLE.tmp"/lib/libdnnl.so*; do xz -T0 -6 "$big"; done  # 40 MB -> ~7 MB

cp "$SRC/scripts/run_gpu.sh" "$BUNDLE.tmp/run_gpu.sh"
{
  echo "dpbench GPU bundle, built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "commit: $(git -C "$SRC" rev-parse HEAD 2>/dev/null)$(git -C "$SRC" diff --quiet 2>/dev/null || echo -dirty)"
  echo "nvcc: $(/usr/local/cuda/bin/nvcc --version | tail -1)"
  echo "CUDA architectures: 90; build type Release"
  echo "needs glibc >= $(objdump -T "$BUNDLE.tmp"/bin/* | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1 | cut -d_ -f2)," \
       "libstdc++ >= $(objdump -T "$BUNDLE.tmp"/bin/* | grep -o 'GLIBCXX_[0-9.]*' | sort -V | tail -1) (else lib/fallback)"
  echo "linked against here: cuDNN $(grep -m1 -o 'CUDNN_MAJOR [0-9]*' /usr/local/cuda/include/cudnn_version.h 2>/dev/null | awk '{print $2}'), NCCL $(grep -m1 -o 'NCCL_MAJOR [0-9]*' /usr/local/cuda/include/nccl.h 2>/dev/null | awk '{print $2}') (sonames must match the wheels')"
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
