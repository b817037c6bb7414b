#!/usr/bin/env python3
"""overlap_report.py: which gradient-sync mode exposes the least communication, and is the
difference real? (python3 stdlib only)

    build/dpbench-micro --benchmark_filter='overlap/cpu/resnet18/.*/ranks:2/' --dpb_ranks=2 \\
        --benchmark_repetitions=10 --benchmark_enable_random_interleaving=true \\
        --benchmark_min_time=12 --benchmark_out=results/overlap.json
    scripts/overlap_report.py results/overlap.json [--reference per-param-after]

Reads the per-repetition rows of the overlap/<backend>/<model>/<mode>/ranks:<k> benchmarks (run
them with --benchmark_repetitions >= 5 and random interleaving, so that every mode sees the same
mix of machine load). For each (backend, model, ranks) it prints, per mode: the repetitions, the
median over repetitions of exposed_comm_median_s (each repetition's median of paired full -
compute-only step differences), their range, and the median compute-only step. Each mode is then
compared with the reference mode by an exact one-sided Mann-Whitney test on the repetition
medians: p is the probability of seeing the mode rank this far below the reference when both
expose the same communication. Exit status: 0, or 2 on unreadable input.
"""
import argparse
import collections
import json
import os
import statistics
import sys
from math import comb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchnames  # noqa: E402  (the one parser of benchmark names)


def mann_whitney_less(xs, ys):
    """U = #(x < y) + 0.5 #(x == y) and the exact one-sided p = P(U' >= U) under H0 (no ties
    assumed in the null distribution; ties are rare with timings)."""
    u = sum((x < y) + 0.5 * (x == y) for x in xs for y in ys)
    m, n = len(xs), len(ys)
    # counts[k]: arrangements of m x's and n y's with U = k, by the standard recursion
    # c(m, n, k) = c(m-1, n, k-n) + c(m, n-1, k)  (the largest element is an x or a y)
    memo = {}

    def c(a, b, k):
        if k < 0:
            return 0
        if a == 0 or b == 0:
            return 1 if k == 0 else 0
        key = (a, b, k)
        if key not in memo:
            memo[key] = c(a - 1, b, k - b) + c(a, b - 1, k)
        return memo[key]

    total = comb(m + n, m)
    # U counts pairs with x < y: an x placed below a y. Under H0 U is symmetric on [0, mn].
    tail = sum(c(m, n, k) for k in range(int(-(-u // 1)), m * n + 1))
    return u, tail / total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="dpbench-micro JSON output(s)")
    ap.add_argument("--reference", default="per-param-after",
                    help="mode the others are compared with (default per-param-after)")
    args = ap.parse_args()
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in args.json:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"overlap_report.py: cannot read {path}: {e}", file=sys.stderr)
            return 2
        for b in doc.get("benchmarks", []):
            f = benchnames.parse(b.get("run_name", b.get("name", "")))
            if f["family"] != "overlap" or b.get("run_type") != "iteration" or b.get("error_occurred"):
                continue
            if "exposed_comm_median_s" not in b:
                continue
            key = f"{f['backend']}/{f.get('model', '')}/ranks:{f.get('ranks', '')}"
            if f["shared"]:
                key += "/shared"
            groups[key][f.get("mode", "")].append(b)
    if not groups:
        print("overlap_report.py: no overlap/ benchmark repetitions in the input", file=sys.stderr)
        return 2
    for key in sorted(groups):
        modes = groups[key]
        print(f"== {key}: exposed communication per step (ms), medians over repetitions")
        print(f"{'mode':<28}{'reps':>5}{'median':>9}{'min':>9}{'max':>9}{'compute':>10}"
              f"{'p vs ' + args.reference:>28}")
        ref = [b["exposed_comm_median_s"] * 1e3 for b in modes.get(args.reference, [])]
        for mode in sorted(modes, key=lambda m: statistics.median(
                b["exposed_comm_median_s"] for b in modes[m])):
            xs = [b["exposed_comm_median_s"] * 1e3 for b in modes[mode]]
            comp = statistics.median(b["compute_s"] for b in modes[mode]) * 1e3
            pcol = "-"
            if mode != args.reference and ref:
                u, p = mann_whitney_less(xs, ref)
                pcol = f"U={u:g}/{len(xs) * len(ref)} p={p:.3g}"
            print(f"{mode:<28}{len(xs):>5}{statistics.median(xs):>9.1f}{min(xs):>9.1f}"
                  f"{max(xs):>9.1f}{comp:>10.1f}{pcol:>28}")
        if not ref:
            print(f"(no {args.reference} rows: no comparison)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
