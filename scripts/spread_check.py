#!/usr/bin/env python3
"""spread_check.py: is one dpbench-micro invocation's timing repeatable? (issue 25 item 6)

Runs dpbench-micro N times (default 8) with the same filter, each invocation its own process,
and prints per benchmark the min / median / max of its real_time over the invocations and
max/min. Exit 1 when a benchmark of at least --min-bytes (default 64 KiB) spreads more than
--bound (default 1.3), 2 on bad input or a failed invocation. Also prints the load
(/proc/loadavg) before and after, and each invocation's rank CPUs and busy verdict from the
JSON context, so a spread measured on a busy machine is read as such, and the cross-core
probe's range (counter xcore_GBps: how fast a rank read its neighbour's fresh 2 MiB just before
the benchmark) with r, the correlation of the time with 1 / probe over the invocations: r near
+1 says the spread is the host's (on a VM, what moving lines between two vCPUs costs changes from
minute to minute), not the placement's.

  scripts/spread_check.py --micro build/dpbench-micro \\
      --filter '^allreduce/cpu/(ring|naive)/ranks:(2|4)/bytes:(65536|4194304)/' -n 8
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchnames import parse, strip_suffixes  # noqa: E402  (the scripts' one name parser)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "unknown"


def xcore_note(xs, us):
    """The cross-core probe's range over the invocations (counter xcore_GBps) and the correlation
    of the time with 1 / probe: near 1, the spread follows the host's cross-core cost."""
    if not xs or min(xs) <= 0:
        return ""
    inv = [1.0 / x for x in xs]
    r = ""
    if len(xs) >= 3 and statistics.pstdev(inv) > 0 and statistics.pstdev(us) > 0:
        mi, mu = statistics.mean(inv), statistics.mean(us)
        cov = sum((a - mi) * (b - mu) for a, b in zip(inv, us)) / len(xs)
        r = f" r={cov / (statistics.pstdev(inv) * statistics.pstdev(us)):+.2f}"
    return f"  xcore {min(xs):.1f}-{max(xs):.1f} GB/s{r}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--micro", default="build/dpbench-micro", help="the dpbench-micro binary")
    ap.add_argument("--filter", default="^allreduce/cpu/.*/ranks:(2|4)/bytes:(65536|262144|1048576|4194304)/",
                    help="--benchmark_filter")
    ap.add_argument("-n", type=int, default=8, help="invocations (>= 2)")
    ap.add_argument("--min-time", default="0.2", help="--benchmark_min_time per benchmark")
    ap.add_argument("--bound", type=float, default=1.3, help="largest max/min allowed")
    ap.add_argument("--min-bytes", type=int, default=65536, help="sizes checked against the bound")
    ap.add_argument("extra", nargs="*", help="more dpbench-micro arguments (after --)")
    a = ap.parse_args()
    if a.n < 2 or a.bound < 1:
        print("spread_check: -n must be >= 2 and --bound >= 1", file=sys.stderr)
        return 2
    if not os.access(a.micro, os.X_OK):
        print(f"spread_check: {a.micro} is not an executable (build it, or pass --micro)", file=sys.stderr)
        return 2
    times = {}  # name -> [us per invocation]
    print(f"load before: {loadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.n):
            out = os.path.join(tmp, f"run{i}.json")
            cmd = [a.micro, f"--benchmark_filter={a.filter}", f"--benchmark_min_time={a.min_time}",
                   f"--benchmark_out={out}", "--benchmark_format=console"] + a.extra
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"spread_check: invocation {i + 1} failed (exit {r.returncode}):\n{r.stderr[-2000:]}",
                      file=sys.stderr)
                return 2
            with open(out) as f:
                j = json.load(f)
            ctx = j.get("context", {})
            print(f"invocation {i + 1}: load {ctx.get('load_avg_start', '?')}->{ctx.get('load_avg_end', '?')}"
                  f" busy: {ctx.get('busy', '?') or 'no'}")
            for b in j.get("benchmarks", []):
                if b.get("error_occurred") or b.get("run_type") == "aggregate":
                    continue
                us = float(b["real_time"])
                unit = b.get("time_unit", "us")
                us *= {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[unit]
                times.setdefault(strip_suffixes(b["name"]), []).append(
                    (us, ",".join(str(int(b[c])) for c in sorted(b) if c.startswith("cpu_rank")),
                     float(b.get("xcore_GBps") or 0)))
    print(f"load after: {loadavg()}")
    if not times:
        print("spread_check: no benchmark ran", file=sys.stderr)
        return 2
    bad = 0
    print(f"{'benchmark':60s} {'min_us':>10s} {'median_us':>10s} {'max_us':>10s} {'max/min':>8s}")
    for name, v in times.items():
        us = [t for t, _, _ in v]
        lo, med, hi = min(us), statistics.median(us), max(us)
        ratio = hi / lo if lo > 0 else float("inf")
        try:
            nbytes = parse(name).get("bytes") or 0
        except Exception:  # a name the parser does not know: check it anyway
            nbytes = a.min_bytes
        over = nbytes >= a.min_bytes and ratio > a.bound
        bad += over
        cpus = sorted({c for _, c, _ in v if c})
        print(f"{name:60s} {lo:10.1f} {med:10.1f} {hi:10.1f} {ratio:8.2f}"
              f"{'  OVER ' + str(a.bound) if over else ''}{'  cpus ' + ' | '.join(cpus) if cpus else ''}"
              f"{xcore_note([x for _, _, x in v], us)}")
    print(f"spread_check: {bad} benchmark(s) over max/min {a.bound} (sizes >= {a.min_bytes} B), "
          f"{a.n} invocations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
