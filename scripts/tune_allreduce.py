#!/usr/bin/env python3
"""tune_allreduce.py: measure every all-reduce algorithm on this machine and write the tuning
table that `--allreduce auto` reads (collectives/tuning.h), as NCCL tunes between its algorithms.
python3 stdlib only.

    scripts/tune_allreduce.py --build build --ranks 2,4,8 -o results/tuning.json
    build/dpbench train --allreduce auto --tune-file results/tuning.json ...
    scripts/tune_allreduce.py --from-json results/micro-X.json -o FILE   # reuse a sweep

Runs dpbench-micro's allreduce/<backend>/<algorithm>/ranks:<k>/bytes:<n> benchmarks for every
algorithm the binary registers (its table, collectives/registry.h; never auto itself) with
random interleaving and repetitions, takes the median time per (backend, k, size, algorithm),
and picks the fastest algorithm per size (each time the median over the size and its two
neighbours, so one disturbed measurement cannot flip a choice), with hysteresis: the previous
size's algorithm is kept while it is within --margin of the fastest (a crossover must be clear,
not noise; raise it on a busy machine). Consecutive sizes with the same choice become one rule:
{"up_to_bytes": the largest of those sizes, "algorithm": ...}, the last rule unbounded (null).
Only benchmarks with wrong == 0 count. The output (written to a temporary file and renamed)
records the machine, the sweep's command, this script's arguments and the medians it used.
To make it the compiled-in default: copy it to collectives/tuning/default.json and rebuild.
"""
import argparse
import collections
import datetime
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchnames  # noqa: E402
from suite_results import write_atomic  # noqa: E402

UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def run_sweep(args, out_json):
    micro = os.path.join(args.build, "dpbench-micro")
    common = [f"--dpb_ranks={args.ranks}", f"--dpb_max_bytes={args.max_bytes}"]
    if args.backends:
        common.append(f"--dpb_backends={args.backends}")
    listing = subprocess.run([micro, "--benchmark_list_tests"] + common, check=True,
                             capture_output=True, text=True).stdout.split()
    algs = sorted({f["alg"] for f in map(benchnames.parse, listing)
                   if f["family"] == "allreduce" and f["alg"] != "auto"})
    if not algs:
        sys.exit("tune_allreduce.py: dpbench-micro lists no all-reduce benchmarks")
    ranks = args.ranks.replace(",", "|")
    cmd = [micro, f"--benchmark_filter=^allreduce/[^/]+/({'|'.join(algs)})/ranks:({ranks})/",
           f"--benchmark_min_time={args.min_time}", f"--benchmark_repetitions={args.repetitions}",
           "--benchmark_enable_random_interleaving=true", f"--benchmark_out={out_json}",
           "--benchmark_out_format=json"] + common
    print("tune_allreduce.py: " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    return cmd


def medians(paths):
    """{(backend, ranks): {bytes: {alg: median seconds}}} over the repetitions, wrong == 0 only."""
    times = collections.defaultdict(list)
    context = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        context = context or doc.get("context", {})
        for b in doc.get("benchmarks", []):
            if b.get("run_type") != "iteration" or b.get("error_occurred") or b.get("wrong", 0):
                continue
            f = benchnames.parse(b.get("run_name", b["name"]))
            if f["family"] != "allreduce" or f["alg"] == "auto" or "bytes" not in f:
                continue
            s = b["real_time"] * UNIT_S[b.get("time_unit", "ns")]
            times[(f["backend"], f["ranks"], f["bytes"], f["alg"])].append(s)
    out = collections.defaultdict(lambda: collections.defaultdict(dict))
    for (backend, k, nbytes, alg), ts in times.items():
        out[(backend, k)][nbytes][alg] = statistics.median(ts)
    return out, context


def smoothed(by_size):
    """Each algorithm's time at a size as the median over that size and its two neighbours, so
    that one disturbed measurement (a rank descheduled on a busy machine) cannot flip a choice."""
    sizes = sorted(by_size)
    out = {}
    for i, s in enumerate(sizes):
        near = sizes[max(0, i - 1):i + 2]
        out[s] = {a: statistics.median(by_size[n][a] for n in near if a in by_size[n])
                  for a in by_size[s]}
    return out


def rules_for(by_size, margin):
    """Fastest algorithm per size (smoothed), with hysteresis: the algorithm chosen for the
    previous size stays while it is within `margin` of the fastest (a crossover must be clear)."""
    rules = []
    smooth = smoothed(by_size)
    for s in sorted(smooth):
        t = smooth[s]
        best = min(t, key=t.get)
        cur = rules[-1]["algorithm"] if rules else best
        if cur not in t or t[cur] > t[best] * (1 + margin):
            cur = best
        if rules and rules[-1]["algorithm"] == cur:
            rules[-1]["up_to_bytes"] = s
        else:
            rules.append({"up_to_bytes": s, "algorithm": cur})
    rules[-1]["up_to_bytes"] = None
    return rules


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory with dpbench-micro")
    ap.add_argument("--ranks", default="2,4,8", help="rank counts (default 2,4,8)")
    ap.add_argument("--backends", default="", help="cpu and/or cuda (default: what the binary finds)")
    ap.add_argument("--max-bytes", default="256M", help="largest message (default 256M)")
    ap.add_argument("--min-time", default="0.05", help="--benchmark_min_time (default 0.05)")
    ap.add_argument("--repetitions", type=int, default=1,
                    help="repetitions (default 1: random interleaving then only shuffles the order; "
                         "more repeat the expensive setup of large messages)")
    ap.add_argument("--margin", type=float, default=0.10,
                    help="keep the previous size's algorithm while within this fraction of the "
                         "fastest (default 0.10)")
    ap.add_argument("--from-json", nargs="+", help="decide from existing dpbench-micro JSON")
    ap.add_argument("-o", "--output", required=True, help="tuning table to write (JSON)")
    args = ap.parse_args(argv)
    if args.from_json:
        paths, command = args.from_json, "from " + " ".join(args.from_json)
    else:
        sweep = os.path.splitext(args.output)[0] + "-sweep.json"
        command = " ".join(run_sweep(args, sweep))
        paths = [sweep]
    by_table, ctx = medians(paths)
    if not by_table:
        sys.exit("tune_allreduce.py: no usable all-reduce results (wrong == 0) in " + ", ".join(paths))
    tables = []
    for (backend, k) in sorted(by_table):
        by_size = by_table[(backend, k)]
        tables.append({"backend": backend, "ranks": k, "rules": rules_for(by_size, args.margin),
                       "median_us": {str(s): {a: round(t * 1e6, 2) for a, t in sorted(by_size[s].items())}
                                     for s in sorted(by_size)}})
    doc = {"format": "dpbench-allreduce-tuning/1",
           "about": "--allreduce auto: per backend and rank count, the fastest algorithm up to each "
                    "message size (bytes per rank); written by scripts/tune_allreduce.py",
           "machine": {"cpu_model": ctx.get("cpu_model", "unknown"), "cores": ctx.get("cores", ""),
                       "host_name": ctx.get("host_name", ""), "git_commit": ctx.get("git_commit", "")},
           "command": command,
           "decided_by": "scripts/tune_allreduce.py " + " ".join(argv),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "tables": tables}
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    write_atomic(args.output, json.dumps(doc, indent=1) + "\n")
    for t in tables:
        desc = "; ".join(r["algorithm"] + ("" if r["up_to_bytes"] is None else f"<={r['up_to_bytes']}")
                         for r in t["rules"])
        print(f"tune_allreduce.py: {t['backend']} k={t['ranks']}: {desc}")
    print(f"tune_allreduce.py: wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
