#!/usr/bin/env python3
"""bench_to_csv.py: Google Benchmark JSON from dpbench-micro -> one tidy CSV (python3 stdlib only).

    scripts/bench_to_csv.py results/micro-20250101-120000.json            # -> same name .csv
    scripts/bench_to_csv.py a.json b.json -o results/micro.csv             # several runs, one header

One row per benchmark run or aggregate. The benchmark name is split into its parts
(scripts/benchnames.py):
    allreduce/<backend>/<algorithm>/ranks:<k>[/shared]/bytes:<n>
    gradsync/<backend>/<model>/<mode>/ranks:<k>[/shared]
    overlap/<backend>/<model>/<mode>/ranks:<k>[/shared]
    membw/cpu/copy/threads:<k>               (ranks = threads, bytes = bytes per thread)
Google Benchmark's suffixes (/manual_time, /repeats:N, /min_time:X, ...) are dropped from the
parsed fields but kept in `name`. real_time_s is the per-iteration time in seconds; for the `cv`
aggregate every number is a coefficient of variation (a ratio) as Google Benchmark writes it.
Rows of benchmarks that failed keep their error_message and leave the numbers empty. The
context (CPU, library versions, git commit, ...) is repeated on every row. The CSV is written
to a temporary file beside the target and renamed into place (never half-written).
"""
import argparse
import csv
import io
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchnames  # noqa: E402  (the one parser of benchmark names)
from suite_results import write_atomic  # noqa: E402  (PATH.tmp<pid>, renamed; run_suite cleans stale ones)

COLUMNS = [
    "name", "backend", "kind", "algorithm_mode", "model", "ranks", "devices", "bytes", "shared_gpu",
    "quick",
    "real_time_s", "algbw_GBps", "busbw_GBps", "bw_fraction", "wrong", "calls", "backward_s",
    "compute_s", "exposed_comm_s", "aggregate",
    # extra measurements, then bookkeeping
    "exposed_comm_median_s", "exposed_comm_ci95_lo_s", "exposed_comm_ci95_hi_s", "membw_GBps", "traffic_GBps", "comm_s", "batch", "iterations",
    "xcore_GBps", "rank_cpus",
    "repetition_index", "label",
    "error_message",
]
COUNTERS = ["algbw_GBps", "busbw_GBps", "bw_fraction", "wrong", "calls", "backward_s",
            "compute_s", "exposed_comm_s", "exposed_comm_median_s", "exposed_comm_ci95_lo_s",
            "exposed_comm_ci95_hi_s", "membw_GBps", "traffic_GBps",
            "comm_s", "batch", "xcore_GBps"]
UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_name(run_name):
    """The CSV's name fields of a dpbench-micro benchmark (empty strings where not applicable),
    from scripts/benchnames.py."""
    f = benchnames.parse(run_name)
    return {"kind": f["family"], "backend": f["backend"],
            "algorithm_mode": f.get("alg", f.get("mode", "")), "model": f.get("model", ""),
            "ranks": f.get("ranks", ""), "bytes": f.get("bytes", ""), "shared_gpu": f["shared"]}


def flatten_context(ctx):
    out = {}
    for key, val in ctx.items():
        if key == "caches" and isinstance(val, list):
            val = "; ".join("L%s %s %d KiB x%s" % (c.get("level"), c.get("type"),
                                                   int(c.get("size", 0)) // 1024,
                                                   c.get("num_sharing")) for c in val)
        elif isinstance(val, list):
            val = " ".join(str(v) for v in val)
        elif isinstance(val, bool):
            val = str(val).lower()
        out[key] = val
    return out


def rows_of(doc, quick=False):
    ctx = flatten_context(doc.get("context", {}))
    for b in doc.get("benchmarks", []):
        row = {c: "" for c in COLUMNS}
        row["name"] = b.get("name", "")
        row.update(parse_name(b.get("run_name", b.get("name", ""))))
        row["shared_gpu"] = "true" if row["shared_gpu"] else "false"
        row["devices"] = row["ranks"]  # the name every dpbench CSV uses for the rank count
        row["quick"] = "true" if quick else "false"
        row["aggregate"] = b.get("aggregate_name", "") if b.get("run_type") == "aggregate" else ""
        row["iterations"] = b.get("iterations", "")
        row["repetition_index"] = b.get("repetition_index", "")
        row["label"] = b.get("label", "")  # allreduce auto: the algorithm that ran and the rules
        if b.get("error_occurred"):
            row["error_message"] = b.get("error_message", "")
        else:
            scale = UNIT_S.get(b.get("time_unit", "ns"), 1e-9)
            if b.get("aggregate_unit") == "percentage":
                scale = 1.0
            if "real_time" in b:
                row["real_time_s"] = repr(b["real_time"] * scale)
            for c in COUNTERS:
                if c in b:
                    row[c] = repr(b[c])
            # the CPU each rank thread ran on (counters cpu_rank<r>), "0 1" for ranks 0 and 1; a
            # CPU number has no stddev or cv (Google Benchmark writes them, NaN for the cv)
            if row["aggregate"] in ("", "mean", "median"):
                cpus = sorted((int(k[len("cpu_rank"):]), int(v)) for k, v in b.items()
                              if k.startswith("cpu_rank") and k[len("cpu_rank"):].isdigit()
                              and math.isfinite(v))
                row["rank_cpus"] = " ".join(str(c) for _, c in cpus)
            if row["bytes"] == "" and "bytes" in b and row["aggregate"] in ("", "mean", "median"):
                row["bytes"] = int(b["bytes"])
        yield row, ctx


def write_csv_atomic(path, header, rows):
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=header, extrasaction="raise", restval="")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    write_atomic(path, buf.getvalue())


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="Google Benchmark JSON files (--benchmark_out)")
    ap.add_argument("-o", "--output", help="CSV path (default: the first input with .csv)")
    ap.add_argument("--quick", action="store_true",
                    help="mark every row quick (a reduced sweep, as ./run_all.sh --quick runs)")
    args = ap.parse_args(argv)
    out = args.output or os.path.splitext(args.inputs[0])[0] + ".csv"
    rows, ctx_keys = [], []
    for path in args.inputs:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit("bench_to_csv.py: cannot read %s: %s" % (path, e))
        if not isinstance(doc, dict) or "benchmarks" not in doc:
            sys.exit("bench_to_csv.py: %s is not Google Benchmark JSON (no 'benchmarks')" % path)
        for row, ctx in rows_of(doc, args.quick):
            for k in ctx:
                if k not in ctx_keys:
                    ctx_keys.append(k)
            rows.append((row, ctx))
    # Context columns after the measurements; a key that clashes with a column gets "context_".
    ctx_cols = [("context_" + k if k in COLUMNS else k) for k in ctx_keys]
    merged = []
    for row, ctx in rows:
        r = dict(row)
        for k, col in zip(ctx_keys, ctx_cols):
            r[col] = ctx.get(k, "")
        merged.append(r)
    write_csv_atomic(out, COLUMNS + ctx_cols, merged)
    print("bench_to_csv.py: %d rows -> %s" % (len(merged), out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
