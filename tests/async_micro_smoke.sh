#!/usr/bin/env bash
# async_micro_smoke.sh BUILD_DIR: the microbenchmark flows (all-reduce of every algorithm, gradient
# sync, overlap, the copy bound) on the asynchronous test device (--dpb_backends=async), so that a missing stream
# wait in the benchmark harness shows up as a wrong element or an error, as it would on a GPU.
# Checks only correctness (the harness's own checks, outside the timed loops); async timings mean
# nothing. Registered in CMake as AsyncMicroSmoke (ctest -R Async). DPB_ASYNC_SEED replays a run.
set -euo pipefail
BUILD=${1:?usage: async_micro_smoke.sh BUILD_DIR}
BIN="$BUILD/dpbench-micro"
[ -x "$BIN" ] || { echo "FAIL: $BIN not built (configure with -DDPB_BENCH=ON)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
FILTER='allreduce/async/[^/]+/ranks:(2|3|4)/bytes:(8|4096|516272)/'
FILTER+='|gradsync/async/lenet/(per-param|fused|bucket1MB)/ranks:(2|3)/'
FILTER+='|overlap/async/lenet/[^/]+/ranks:2/'
FILTER+='|membw/async/copy/threads:2/'
"$BIN" --dpb_backends=async --benchmark_filter="$FILTER" --benchmark_min_time=0.001 \
       --dpb_max_bytes=1M --dpb_ranks=2,3,4 --dpb_lenet_batch=32 --benchmark_out="$tmp/a.json" \
       --benchmark_format=console >"$tmp/log" 2>&1 \
  || { echo "FAIL: dpbench-micro exited non-zero"; tail -30 "$tmp/log"; exit 1; }
/usr/bin/python3 - "$tmp/a.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
families = {r["run_name"].split("/")[0] for r in runs}
assert families == {"membw", "allreduce", "gradsync", "overlap"}, "missing families: %s" % families
errors = [r["name"] + ": " + r.get("error_message", "") for r in runs if r.get("error_occurred")]
assert not errors, "benchmarks failed on the async device:\n" + "\n".join(errors)
checked = [r for r in runs if "wrong" in r]
bad = [(r["name"], r["wrong"]) for r in checked if r["wrong"] != 0]
assert not bad, "wrong elements on the async device: %s" % bad
algs = {r["run_name"].split("/")[2] for r in runs if r["run_name"].startswith("allreduce/")}
print("ok: %d runs on the async device (all-reduce: %s), %d checked, all wrong == 0"
      % (len(runs), ", ".join(sorted(algs)), len(checked)))
PY
