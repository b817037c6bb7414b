#!/usr/bin/env bash
# profile_nsys.sh SUITE [run_suite options] | COMMAND...: Nsight Systems timelines of dpbench runs,
# with the NVTX ranges of domain "dpbench" (see results/README.md, "Reading a profile").
#   scripts/profile_nsys.sh sync                         # every run of a suite, one report each
#   scripts/profile_nsys.sh sync --full --devices 2      # options go to scripts/run_suite.py run
#   scripts/profile_nsys.sh build/dpbench train --model resnet18 --devices 2 --epochs 1 \
#       --train-limit 2048 --test-limit 256 --grad-sync bucketed --overlap on
# Reports go to results/profiles/<UTC time>/ (DPB_PROFILE_DIR overrides), one <name>.nsys-rep per
# process, with an NVTX summary beside each (<name>_nvtx_sum.csv) when `nsys stats` can make it.
# Traces: cuda, nvtx, osrt (nsys profile -t cuda,nvtx,osrt). Suites run in quick mode unless
# --full is given; the backend is detected as in ./run_all.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -eq 0 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -eq 0 ] && exit 2 || exit 0
fi

NSYS=""
for c in nsys /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
         /usr/local/cuda/nsight-systems-*/bin/nsys; do
  if command -v "$c" >/dev/null 2>&1; then NSYS=$(command -v "$c"); break; fi
done
if [ -z "$NSYS" ]; then
  cat >&2 <<'EOF'
profile_nsys.sh: Nsight Systems (nsys) is not installed or not on PATH.
  Get it with the CUDA toolkit (runfile/deb installs put it under /usr/local/cuda/bin or
  /opt/nvidia/nsight-systems/<version>/bin), or on its own from
  https://developer.nvidia.com/nsight-systems (NVIDIA's apt repository: apt-get install
  nsight-systems-cli). Then put its bin folder on PATH and run this again.
  Without nsys: ./run_all.sh still reports data / compute / exposed-communication times per epoch
  (CSV columns data_s, compute_s, comm_s, exposed_comm_s).
EOF
  exit 3
fi

OUT=${DPB_PROFILE_DIR:-results/profiles/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
TRACE=(profile -t cuda,nvtx,osrt --force-overwrite true)
rc=0
echo "profile_nsys.sh: $("$NSYS" --version 2>/dev/null | head -1) -> $OUT"

summarize() {  # summarize REPORT: NVTX range summary beside the report (report name differs by version)
  local rep=$1 base=${1%.nsys-rep}
  for r in nvtx_sum nvtxsum; do
    if "$NSYS" stats --report "$r" --format csv --output "$base" "$rep" >/dev/null 2>&1; then
      echo "  NVTX summary: $(ls "$base"_"$r"*.csv 2>/dev/null | head -1)"
      return 0
    fi
  done
  echo "  (nsys stats could not summarize $rep; open it in the Nsight Systems GUI)"
}

if [ -f "scenarios/$1.ini" ]; then
  suite=$1
  shift
  BUILD=${DPB_BUILD_DIR:-build}
  [ -x "$BUILD/dpbench" ] || { echo "profile_nsys.sh: no $BUILD/dpbench; run scripts/setup.sh" >&2; exit 2; }
  backend=$("$BUILD/dpbench" info | python3 -c 'import json,sys; print(json.load(sys.stdin)["default_backend"])')
  python3 scripts/run_suite.py run --suite "$suite" --backend "$backend" --bin "$BUILD/dpbench" \
    --out "$OUT/results" --wrap "$NSYS ${TRACE[*]} -o $OUT/{suite}-{scenario}" "$@" || rc=$?
else
  command -v "$1" >/dev/null 2>&1 || [ -x "$1" ] ||
    { echo "profile_nsys.sh: '$1' is neither a suite (scenarios/*.ini) nor a command" >&2; exit 2; }
  "$NSYS" "${TRACE[@]}" -o "$OUT/$(basename "$1")" "$@" || rc=$?
fi

shopt -s nullglob
reports=("$OUT"/*.nsys-rep)
if ((${#reports[@]} == 0)); then
  echo "profile_nsys.sh: nsys ran but wrote no report in $OUT (on some machines nsys cannot write" \
    "reports, e.g. in containers without the permissions its collection service needs)" >&2
  exit 1
fi
for rep in "${reports[@]}"; do
  echo "report: $rep"
  summarize "$rep"
done
echo "open with: nsys-ui <report>   or: nsys stats --report nvtx_sum <report>"
((rc == 0)) || echo "profile_nsys.sh: the profiled command failed (rc $rc)" >&2
exit $rc
