#!/usr/bin/env bash
# link_study_test.sh BUILD_DIR: every mode of scripts/link_study.py on tiny settings (seconds):
# micro (every registry algorithm on a fast emulated link), overlap (LeNet), check (LeNet, k = 1
# and 2, one epoch of 256 examples), plot-suite (from a sync.csv made of the check's runs),
# shard-check (a small MLP at k = 2, --shard none and parameters, within a loose bound),
# nodes-check (the MLP on 2 x 2 and 3 x 2 emulated nodes, ring vs hier: 16 points). The
# figure mode runs in ./run_all.sh (regression_smoke.sh). Plots need matplotlib: the script runs
# under /usr/bin/python3 (Debian's), as run_all.sh does. Exit 77 (skipped) without matplotlib.
set -u
BUILD="$1"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY=/usr/bin/python3
"$PY" -c "import matplotlib" 2>/dev/null || { echo "link_study_test: no matplotlib for $PY: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
study() { "$PY" "$ROOT/scripts/link_study.py" "$@" --bin "$BUILD/dpbench" --micro-bin "$BUILD/dpbench-micro"; }

study micro --out "$tmp" --gbps 10 --latencies 50 --sizes 65536 --ranks 2 --min-time 0.01 \
    --reps 1 >"$tmp/micro.log" 2>&1 || { fail "micro"; tail -5 "$tmp/micro.log"; }
"$PY" - "$tmp/link-micro-10gbps.csv" "$BUILD/dpbench" <<'PY' || fail "micro CSV"
import csv, json, subprocess, sys
rows = list(csv.DictReader(open(sys.argv[1])))
algs = {r["alg"] for r in rows}
# Every algorithm of the registry that runs on the CPU as threads (`dpbench info`): all have a cost.
info = json.loads(subprocess.run([sys.argv[2], "info"], check=True, capture_output=True, text=True).stdout)
want = {e["name"] for e in info["allreduce_algorithms"]
        if "cpu" in e["runs_on"] and "threads" in e["launchers"]}
assert want and algs == want, (algs, want)
for r in rows:
    assert float(r["model_ms"]) > 0 and float(r["measured_ms"]) > 0 and r["wrong"] in ("0", "0.0"), r
PY

study overlap --out "$tmp" --model lenet --batch 16 --gbps 1 --latencies 50 --quick \
    --min-time 0.02 >"$tmp/overlap.log" 2>&1 || { fail "overlap"; tail -5 "$tmp/overlap.log"; }
[ -s "$tmp/plots/link-overlap.png" ] || fail "overlap plot"
grep -q "bucket25MB-overlap" "$tmp/link-overlap.csv" 2>/dev/null || fail "overlap CSV"

if [ -d /usr/share/datasets/fashion-mnist ]; then
  study check --out "$tmp" --models lenet --ks 1,2 --train-limit 256 --epochs 1 --profile-steps 1 \
      >"$tmp/check.log" 2>&1 || { fail "check"; tail -5 "$tmp/check.log"; }
  "$PY" - "$tmp" <<'PY' || fail "check CSV / sync.csv for plot-suite"
import csv, os, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "link-check.csv"))))
assert len(rows) == 5 and all(float(r["predicted_s"]) > 0 for r in rows), rows
# The check's training runs as a sync suite CSV (plot-suite reads the emulated-link rows).
train = list(csv.DictReader(open(os.path.join(out, "link-check-train.csv"))))
with open(os.path.join(out, "sync.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["suite", "scenario"] + list(train[0].keys()))
    w.writeheader()
    for i, r in enumerate(train):
        w.writerow({"suite": "sync", "scenario": f"run{i}", **r})
PY
  study plot-suite --out "$tmp" >"$tmp/plot.log" 2>&1 || { fail "plot-suite"; tail -5 "$tmp/plot.log"; }
  [ -s "$tmp/plots/link-suite-exposed.png" ] || fail "plot-suite plot"
fi
# shard-check: ZeRO-3 and the replicated step of a small MLP (synthetic data) at k = 2, emulated
# and projected. The bound is loose (a shared CI machine; the study's own target is 15%): it
# catches a projection that leaves out or doubles a mode's collectives.
study shard-check --out "$tmp" --models mlp --ks 2 --shards none,parameters --epochs 2 \
    --train-limit 1024 --profile-steps 3 >"$tmp/shard.log" 2>&1 || { fail "shard-check"; tail -5 "$tmp/shard.log"; }
"$PY" "$ROOT/tests/link_study_checks.py" shard "$tmp/link-shard-check.csv" || { fail "shard-check CSV"; tail -12 "$tmp/shard.log"; }
# nodes-check (issue 26): projection vs emulated runs on 16 points: the MLP on 2 x 2 and 3 x 2
# emulated nodes, a network 10x slower, the flat ring and hier, overlap off and on, --shard none
# and gradients; at least 8 within 15% (tests/link_study_checks.py). A neighbour stretches a run
# but not its profile (beside the dpb_tests shards: 4 of 8 within 15%, max 41.6%), so ctest runs
# this test alone (RUN_SERIAL); with the rows' load above the CPUs no bound is asserted.
study nodes-check --out "$tmp" --models mlp --shapes 2x2,3x2 --shards none,gradients --epochs 2 \
    --train-limit 1024 --profile-steps 5 >"$tmp/nodes.log" 2>&1 || { fail "nodes-check"; tail -5 "$tmp/nodes.log"; }
"$PY" "$ROOT/tests/link_study_checks.py" nodes "$tmp/link-nodes-check.csv" || { fail "nodes-check CSV"; tail -12 "$tmp/nodes.log"; }
[ $fails -eq 0 ] && echo "link_study_test: all passed" || { echo "link_study_test: $fails failure(s)"; exit 1; }
