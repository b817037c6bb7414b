#!/usr/bin/env bash
# async_micro_smoke.sh BUILD_DIR: the microbenchmark flows (all-reduce of every algorithm, gradient
# sync, overlap, the copy bound) on the asynchronous test device (--dpb_backends=async), so that a missing stream
# wait in the benchmark harness shows up as a wrong element or an error, as it would on a GPU.
# Checks only correctness (the harness's own checks, outside the timed loops); async timings mean
# nothing; and rank 0's bytes sent (sent_bytes) equal to the schedule's count. Registered in CMake
# as AsyncMicroSmoke (ctest -R Async). DPB_ASYNC_SEED replays a run.
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
missing = [r["name"] for r in runs
           if r["run_name"].split("/")[0] in ("allreduce", "gradsync") and "alloc_bytes" not in r]
assert not missing, "no alloc_bytes counter: %s" % missing[:3]
# Bytes sent (collectives/comm_volume.h): rank 0's measured count equals the schedule's.
sent = [r for r in runs if r["run_name"].startswith("allreduce/")]
bad = [(r["name"], r.get("sent_bytes"), r.get("sent_bytes_schedule")) for r in sent
       if "sent_bytes" not in r or r["sent_bytes"] != r["sent_bytes_schedule"] or r["sent_bytes"] <= 0]
assert sent and not bad, "sent_bytes != the schedule's count: %s" % bad[:3]
checked = [r for r in runs if "wrong" in r]
bad = [(r["name"], r["wrong"]) for r in checked if r["wrong"] != 0]
assert not bad, "wrong elements on the async device: %s" % bad
algs = {r["run_name"].split("/")[2] for r in runs if r["run_name"].startswith("allreduce/")}
print("ok: %d runs on the async device (all-reduce: %s), %d checked, all wrong == 0"
      % (len(runs), ", ".join(sorted(algs)), len(checked)))
PY
# --dpb_device_mem: a capacity below the buffer fails that benchmark with the one out-of-memory
# message (the run goes on and exits 0, as Google Benchmark does for a benchmark's error).
"$BIN" --dpb_backends=async --benchmark_filter='allreduce/async/ring/ranks:2/bytes:4194304/' \
       --benchmark_min_time=0.001 --dpb_ranks=2 --dpb_device_mem=1MiB \
       --benchmark_out="$tmp/oom.json" >"$tmp/oom.log" 2>&1 \
  || { echo "FAIL: dpbench-micro --dpb_device_mem exited non-zero"; tail -20 "$tmp/oom.log"; exit 1; }
grep -q "out of memory on async:0: allocating all-reduce buffer (gradients, 4 MiB" "$tmp/oom.log" \
  || { echo "FAIL: --dpb_device_mem=1MiB did not fail the 4 MiB all-reduce with the OOM message"; \
       tail -20 "$tmp/oom.log"; exit 1; }
echo "ok: --dpb_device_mem=1MiB refuses a 4 MiB buffer with the out-of-memory message"
