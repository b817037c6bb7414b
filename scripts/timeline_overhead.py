#!/usr/bin/env python3
"""timeline_overhead.py: what recording the per-rank breakdown and writing a trace cost (issue 23's
closing note): LeNet on Fashion-MNIST, one epoch, in three modes, medians of epoch_s.

    scripts/timeline_overhead.py                                  # 5 repetitions, k = 2, full set
    scripts/timeline_overhead.py --reps 2 --train-limit 2000      # a quick look (noisy)

Modes, each `dpbench train --model lenet --devices K --epochs 1 --csv FILE` plus:
  off        --breakdown off   no timeline recorded (no breakdown, straggler report, trace)
  breakdown  (nothing)         the default: every rank's phases per step, the report at the end
  trace      --trace FILE      the breakdown, the host track too, and the Chrome trace written
Each repetition runs the three modes once, in an order rotated from one repetition to the next
(off/breakdown/trace, breakdown/trace/off, trace/off/breakdown, ...), so slow drift of the machine
and a mode's position in the sequence weigh on every mode alike; one unrecorded run (--breakdown
off) warms the page cache first. epoch_s is read from the CSV: host wall clock over the epoch's
steps, so evaluation, the gathering of the ranks' rows and the writing of the trace file are not in
it; the process's wall time, which includes them, is printed beside it.

Prints the medians (and ranges) per mode, the overhead of each mode against off in percent (from
the medians; in parentheses the median of the per-repetition ratios), the trace file's size and
the machine: CPU model (/proc/cpuinfo, else `dpbench info`), cores, load average before and after.
Run it on a quiet machine: on a shared 2-core CPU the run-to-run spread of an epoch can be larger
than the overheads it measures. Exit 2 on a bad option or a missing dpbench; 1 when a run fails.
Python 3 standard library only.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("off", "breakdown", "trace")
TARGET_PCT = {"breakdown": 2.0, "trace": 5.0}  # issue 23: < 2% and < 5% of a LeNet epoch


def fail(msg, code=2):
    print(f"timeline_overhead: {msg}", file=sys.stderr)
    sys.exit(code)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5, help="repetitions of the three modes (default 5)")
    p.add_argument("--devices", type=int, default=2, help="ranks (threads; default 2)")
    p.add_argument("--train-limit", type=int, default=0,
                   help="training examples (default 0: the full set, 60000; 235 steps at batch 256)")
    p.add_argument("--test-limit", type=int, default=1000,
                   help="test examples (default 1000: evaluation is not in epoch_s; 0: all 10000)")
    p.add_argument("--data-dir", help="Fashion-MNIST folder (default: dpbench's, $DPBENCH_DATA "
                                      "else /usr/share/datasets/fashion-mnist)")
    p.add_argument("--dpbench", default=os.path.join(ROOT, "build", "dpbench"),
                   help="the dpbench binary (default build/dpbench of this checkout)")
    a = p.parse_args(argv)
    if a.reps < 1:
        fail(f"--reps {a.reps}: at least 1")
    if a.devices < 1:
        fail(f"--devices {a.devices}: at least 1")
    if a.train_limit < 0 or a.test_limit < 0:
        fail("--train-limit and --test-limit: 0 (all) or a positive count")
    if not (os.path.isfile(a.dpbench) and os.access(a.dpbench, os.X_OK)):
        fail(f"--dpbench {a.dpbench}: no executable there (build it: scripts/setup.sh, or pass "
             "--dpbench PATH)")
    return a


def cpu_model(dpbench):
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        out = subprocess.run([dpbench, "info"], capture_output=True, text=True, check=True).stdout
        return json.loads(out).get("cpu") or "unknown CPU"
    except (OSError, subprocess.CalledProcessError, ValueError):
        return "unknown CPU"


def train_command(a, mode, csv_path, trace_path):
    cmd = [a.dpbench, "train", "--model", "lenet", "--devices", str(a.devices), "--epochs", "1",
           "--quiet", "--csv", csv_path]
    if a.train_limit:
        cmd += ["--train-limit", str(a.train_limit)]
    if a.test_limit:
        cmd += ["--test-limit", str(a.test_limit)]
    if a.data_dir:
        cmd += ["--data-dir", a.data_dir]
    if mode == "off":
        cmd += ["--breakdown", "off"]
    elif mode == "trace":
        cmd += ["--trace", trace_path]
    return cmd


def run_once(a, mode, tmp, tag):
    """(epoch_s, process wall s, trace bytes or None) of one run in `mode`."""
    csv_path = os.path.join(tmp, f"{tag}.csv")
    trace_path = os.path.join(tmp, f"{tag}.trace.json")
    cmd = train_command(a, mode, csv_path, trace_path)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        fail(f"{mode} run failed (exit {r.returncode}): {' '.join(cmd)}", 1)
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "epoch_s" not in rows[-1] or "step_p50_s" not in rows[-1]:
        fail(f"{csv_path}: no epoch_s / step_p50_s column (a dpbench without the breakdown?)", 1)
    row = rows[-1]
    # The breakdown's columns are empty exactly when nothing was recorded: check the modes took.
    recorded = row["step_p50_s"] != ""
    if recorded != (mode != "off"):
        fail(f"{mode} run: the breakdown was {'' if recorded else 'not '}recorded "
             f"(step_p50_s '{row['step_p50_s']}'): {' '.join(cmd)}", 1)
    trace_bytes = os.path.getsize(trace_path) if mode == "trace" else None
    for path in (csv_path, trace_path):
        if os.path.exists(path):
            os.remove(path)
    return float(row["epoch_s"]), wall, trace_bytes


def main(argv):
    a = parse_args(argv)
    cores = os.cpu_count()
    load0 = os.getloadavg()[0]
    epoch = {m: [] for m in MODES}
    wall = {m: [] for m in MODES}
    trace_bytes = []
    steps = "full set" if not a.train_limit else f"--train-limit {a.train_limit}"
    print(f"timeline_overhead: dpbench train --model lenet --devices {a.devices} --epochs 1 "
          f"({steps}), {a.reps} repetition(s) of {', '.join(MODES)}, order rotated", flush=True)
    with tempfile.TemporaryDirectory(prefix="dpb-overhead-") as tmp:
        run_once(a, "off", tmp, "warmup")  # page cache, first-run effects: not counted
        for rep in range(a.reps):
            order = MODES[rep % 3:] + MODES[:rep % 3]
            got = []
            for mode in order:
                e, w, tb = run_once(a, mode, tmp, f"{rep}-{mode}")
                epoch[mode].append(e)
                wall[mode].append(w)
                if tb is not None:
                    trace_bytes.append(tb)
                got.append(f"{mode} {e:.3f}")
            print(f"  rep {rep + 1}/{a.reps}: epoch_s " + ", ".join(got), flush=True)
    load1 = os.getloadavg()[0]

    med = {m: statistics.median(epoch[m]) for m in MODES}
    print(f"machine: {cpu_model(a.dpbench)}, {cores} cores; load average (1 min) "
          f"{load0:.2f} before, {load1:.2f} after")
    print(f"{'mode':<10} {'epoch_s median':>14} {'(min .. max)':>18} {'wall_s median':>13}  "
          "overhead vs off")
    for m in MODES:
        rng = f"({min(epoch[m]):.3f} .. {max(epoch[m]):.3f})"
        line = f"{m:<10} {med[m]:>14.3f} {rng:>18} {statistics.median(wall[m]):>13.2f}  "
        if m == "off":
            line += "-"
        else:
            pct = (med[m] / med["off"] - 1) * 100
            paired = statistics.median(x / y for x, y in zip(epoch[m], epoch["off"]))
            line += (f"{pct:+.2f}% (paired {(paired - 1) * 100:+.2f}%; target < "
                     f"{TARGET_PCT[m]:g}%)")
        print(line)
    if trace_bytes:
        print(f"trace file: {statistics.median(trace_bytes) / 1e6:.2f} MB (median)")
    print("epoch_s: the CSV's host wall clock over the epoch's steps (evaluation, the ranks' "
          "gather and the trace's writing not in it; wall_s has them)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
