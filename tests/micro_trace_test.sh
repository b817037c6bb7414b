#!/usr/bin/env bash
# micro_trace_test.sh BUILD_DIR: dpbench-micro --dpb_trace=FILE on a tiny filter (2 ranks, small
# messages, all-reduce, reduce-scatter, all-gather and a gradsync) writes a Chrome trace that
# scripts/check_trace.py accepts (both ranks, a comm track each, the collectives by name, algorithm
# and bytes in the args); a bad --dpb_trace path is refused before any run; check_trace.py itself
# fails on an unmatched B, a missing rank, a negative dur and a missing track, and exits 2 on a
# file that is not JSON. Seconds. Registered in CMakeLists.txt as micro_trace.
set -euo pipefail
BUILD=${1:?usage: micro_trace_test.sh BUILD_DIR}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN="$(cd "$BUILD" && pwd)/dpbench-micro"
CHECK="$SRC/scripts/check_trace.py"
[ -x "$BIN" ] || { echo "FAIL: $BIN not built (configure with -DDPB_BENCH=ON)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# --- check_trace.py on hand-made traces: what it must refuse, and with which exit code.
meta='{"ph":"M","name":"process_name","pid":1,"tid":11,"args":{"name":"rank 0: cpu:0"}},
      {"ph":"M","name":"thread_name","pid":1,"tid":13,"args":{"name":"comm stream"}}'
meta1='{"ph":"M","name":"process_name","pid":2,"tid":21,"args":{"name":"rank 1: cpu:1"}},
       {"ph":"M","name":"thread_name","pid":2,"tid":23,"args":{"name":"comm stream"}}'
x0='{"ph":"X","name":"all-reduce","pid":1,"tid":13,"ts":0,"dur":5}'
x1='{"ph":"X","name":"all-reduce","pid":2,"tid":23,"ts":1,"dur":5}'
expect() {  # expect RC NAME JSON ARGS... : check_trace.py exits RC (and says why when 1)
  local rc=$1 name=$2 text=$3; shift 3
  printf '%s' "$text" >"$tmp/$name.json"
  set +e
  python3 "$CHECK" "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>&1
  local got=$?
  set -e
  [ "$got" = "$rc" ] || { cat "$tmp/$name.out"; fail "check_trace.py on $name: exit $got, expected $rc"; }
  echo "ok: $name: exit $got: $(head -1 "$tmp/$name.out")"
}
expect 0 good "{\"traceEvents\":[$meta,$meta1,$x0,$x1]}" --ranks 2 --tracks comm --expect-name all-reduce
expect 0 be_pairs "{\"traceEvents\":[$meta,$meta1,$x0,$x1,
  {\"ph\":\"B\",\"name\":\"a\",\"pid\":1,\"tid\":13,\"ts\":6},{\"ph\":\"E\",\"pid\":1,\"tid\":13,\"ts\":9}]}" \
  --ranks 2 --tracks comm
expect 1 unmatched_b "{\"traceEvents\":[$meta,$meta1,$x0,$x1,
  {\"ph\":\"B\",\"name\":\"open\",\"pid\":1,\"tid\":13,\"ts\":6}]}" --ranks 2 --tracks comm
grep -q "'open'.*has no E" "$tmp/unmatched_b.out" || fail "unmatched B: message does not name it"
expect 1 e_without_b "{\"traceEvents\":[$meta,$meta1,$x0,$x1,{\"ph\":\"E\",\"pid\":2,\"tid\":23,\"ts\":9}]}" \
  --ranks 2 --tracks comm
expect 1 missing_rank "{\"traceEvents\":[$meta,$x0]}" --ranks 2 --tracks comm
grep -q "rank 1 has no process" "$tmp/missing_rank.out" || fail "missing rank: message does not name rank 1"
expect 1 extra_rank "{\"traceEvents\":[$meta,$meta1,$x0,$x1]}" --ranks 1 --tracks comm
expect 1 negative_dur "{\"traceEvents\":[$meta,$meta1,$x0,{\"ph\":\"X\",\"name\":\"all-reduce\",\"pid\":2,\"tid\":23,\"ts\":1,\"dur\":-1}]}" \
  --ranks 2 --tracks comm
expect 1 missing_track "{\"traceEvents\":[$meta,$meta1,$x0,$x1]}" --ranks 2  # host, compute absent
grep -q "rank 0 has no host track" "$tmp/missing_track.out" || fail "missing track: message does not name it"
expect 1 missing_name "{\"traceEvents\":[$meta,$meta1,$x0,$x1]}" --ranks 2 --tracks comm --expect-name backward
expect 2 not_json '{"traceEvents": [' --ranks 2
set +e; python3 "$CHECK" "$tmp/no_such_file.json" >/dev/null 2>&1; rc=$?; set -e
[ "$rc" = 2 ] || fail "check_trace.py on a missing file: exit $rc, expected 2"

# --- dpbench-micro --dpb_trace.
if "$BIN" --dpb_trace="$tmp/no/such/dir/t.json" --benchmark_filter='allreduce/cpu/ring/ranks:2/bytes:8/' \
     >"$tmp/bad.log" 2>&1; then
  fail "--dpb_trace into a missing directory accepted"
fi
grep -q "no/such/dir" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "the refusal does not name the path"; }

FILTER='(allreduce|reducescatter|allgather)/cpu/ring/ranks:2/bytes:(4096|65536)/'
FILTER+='|allreduce/cpu/naive/ranks:2/bytes:4096/|gradsync/cpu/lenet/bucket1MB/ranks:2/'
start=$SECONDS
"$BIN" --benchmark_filter="$FILTER" --benchmark_min_time=0.01 --dpb_ranks=2 --dpb_max_bytes=64K \
       --dpb_trace="$tmp/micro.json" --benchmark_out="$tmp/micro-bench.json" \
       --benchmark_format=console >"$tmp/micro.log" 2>&1 \
  || { tail -20 "$tmp/micro.log"; fail "dpbench-micro --dpb_trace exited non-zero"; }
echo "ok: dpbench-micro --dpb_trace in $((SECONDS - start)) s: $(grep 'wrote .*micro.json' "$tmp/micro.log")"
python3 "$CHECK" "$tmp/micro.json" --ranks 2 --tracks comm --expect-name all-reduce \
  --expect-name reduce-scatter --expect-name all-gather \
  || fail "check_trace.py refused dpbench-micro's trace"
ls "$tmp" | grep -q '\.tmp\.' && fail "a temporary file was left: $(ls "$tmp")"

# The spans: one per timed call with algorithm and bytes; every benchmark named in otherData;
# as many spans per benchmark and rank as the benchmark's iterations (Google Benchmark's count
# covers the reported run only, so at least that many).
python3 - "$tmp/micro.json" "$tmp/micro-bench.json" <<'EOF'
import json, sys
trace = json.load(open(sys.argv[1]))
bench = json.load(open(sys.argv[2]))
other = trace["otherData"]
assert "--dpb_trace" in other["command"], other["command"]
names = {int(k.split("_")[1]): v for k, v in other.items() if k.startswith("benchmark_")}
spans = {}  # (benchmark, pid) -> count
for e in trace["traceEvents"]:
    if e["ph"] != "X":
        continue
    a = e["args"]
    assert e["cat"] == "comm" and a["algorithm"] in ("ring", "naive"), e
    bname = names[a["epoch"]]
    if not bname.startswith("gradsync/"):
        want = int(bname.split("bytes:")[1])
        assert a["bytes"] == want and a["bucket"] == -1, (e, bname)
        assert a["algorithm"] == bname.split("/")[2], (e, bname)
    spans[(bname, e["pid"])] = spans.get((bname, e["pid"]), 0) + 1
runs = {r["run_name"].replace("/manual_time", ""): r for r in bench["benchmarks"]}
assert set(names.values()) == set(runs), (sorted(names.values()), sorted(runs))
for name, run in runs.items():
    for pid in (1, 2):
        got = spans.get((name, pid), 0)
        calls = 1 if not name.startswith("gradsync/") else run["calls"]
        assert got >= run["iterations"] * calls, (name, pid, got, run["iterations"], calls)
print("ok: %d benchmarks, %d spans, every timed call of each rank" % (len(runs), sum(spans.values())))
EOF

# No --dpb_trace: no trace file, nothing said about one.
"$BIN" --benchmark_filter='allreduce/cpu/ring/ranks:2/bytes:4096/' --benchmark_min_time=0.01 \
       --dpb_ranks=2 --benchmark_out="$tmp/plain.json" >"$tmp/plain.log" 2>&1 || fail "plain run failed"
if grep -q "spans" "$tmp/plain.log"; then fail "a run without --dpb_trace wrote a trace"; fi
echo "PASS: micro_trace"
