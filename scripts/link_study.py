#!/usr/bin/env python3
"""link_study.py: the emulated-link study: alpha-beta check of the paced all-reduces,
overlap vs bucket size on an emulated link, projection vs emulated runs, and the projected
speedup on named interconnects. Standard library for the runs; plots need matplotlib (run under
/usr/bin/python3 on Debian).

  scripts/link_study.py micro   --out DIR   # dpbench-micro all-reduces on a link vs the model
  scripts/link_study.py overlap --out DIR   # ResNet-18 k=2 overlap modes, 1/5/25 MB, 2 latencies
  scripts/link_study.py check   --out DIR   # dpbench project vs dpbench train on emulated links
  scripts/link_study.py shard-check --out DIR  # the same for --shard none|optimizer|gradients|parameters
  scripts/link_study.py nodes-check --out DIR  # two levels: project vs train on G x N emulated
                                               # nodes, a network 10x slower, ring vs hier
  scripts/link_study.py figure  --out DIR   # predicted speedup vs devices on named links
  scripts/link_study.py plot-suite --out DIR  # DIR/sync.csv (the sync suite's emulated-link runs):
                                              # exposed communication vs bucket size, per link
Common: --bin build/dpbench --micro-bin build/dpbench-micro --quick (fewer repetitions).
Outputs: DIR/link-*.csv, DIR/link-*.json, DIR/plots/link-*.png|svg, and a table on stdout.
"""
import argparse
import csv
import json
import os
import statistics
import sys

# The tables, the helpers and the check, shard-check, nodes-check and figure modes:
# scripts/link_study_projection.py.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from link_study_projection import (  # noqa: E402
    CHECK, NODES_CHECK, SHARD_CHECK, cmd_check, cmd_figure, cmd_nodes_check, cmd_shard_check,
    machine_note, pyplot, run, save, write_csv)


# ----------------------------------------------------------------------------- micro


def micro_algorithms(bin_path):
    """The all-reduce algorithms dpbench-micro times on the CPU with ranks as threads, from
    `dpbench info` (the registry): those with a link cost model report link_model_s."""
    info = json.loads(run([bin_path, "info"]))
    return [e["name"] for e in info["allreduce_algorithms"]
            if "cpu" in e["runs_on"] and "threads" in e["launchers"]]


def cmd_micro(a):
    gbps, lat = a.gbps, a.latencies[0]
    out = os.path.join(a.out, f"link-micro-{gbps:g}gbps.json")
    sizes = a.sizes or ("65536,1048576,4194304,16777216" if a.quick
                        else "65536,1048576,4194304,16777216,33554432")
    ranks = a.ranks or "2,4"
    run([a.micro_bin, f"--dpb_ranks={ranks}", f"--dpb_link_gbps={gbps}",
         f"--dpb_link_latency_us={lat}",
         f"--benchmark_filter=^allreduce/cpu/({'|'.join(micro_algorithms(a.bin))})/"
         f"ranks:({ranks.replace(',', '|')})/"
         f"bytes:({sizes.replace(',', '|')})/",
         f"--benchmark_min_time={a.min_time}", f"--benchmark_repetitions={a.reps}",
         "--benchmark_report_aggregates_only=true", f"--benchmark_out={out}"])
    with open(out) as f:
        bench = json.load(f)["benchmarks"]
    rows = []
    for b in bench:
        if "link_model_s" not in b or (a.reps > 1 and b.get("aggregate_name") != "median"):
            continue
        _, _, alg, ranks, size = b["run_name"].split("/")[:5]
        model = b["link_model_s"]
        meas = b["real_time"] * {"us": 1e-6, "ms": 1e-3, "ns": 1e-9, "s": 1.0}[b["time_unit"]]
        label = b.get("label", "")  # auto: "ran ring | auto: ..."
        ran = label.split()[1] if label.startswith("ran ") else alg
        rows.append(dict(alg=alg, ran=ran, ranks=int(ranks.split(":")[1]),
                         bytes=int(size.split(":")[1]),
                         link_gbps=gbps, link_latency_us=lat, model_ms=round(model * 1e3, 3),
                         measured_ms=round(meas * 1e3, 3), error_pct=round((meas / model - 1) * 100, 1),
                         emulated_dominates=int(model >= 0.02), wrong=b.get("wrong", "")))
    write_csv(os.path.join(a.out, f"link-micro-{gbps:g}gbps.csv"), rows)
    print(f"\nAll-reduce on an emulated link ({gbps} Gb/s, {lat} us), median of {a.reps}; "
          f"{machine_note()}")
    print(f"{'alg':6} {'ran':6} {'k':>2} {'bytes':>10} {'model ms':>10} {'measured':>10} {'error':>7}")
    for r in rows:
        flag = "" if not r["emulated_dominates"] else (" ok" if abs(r["error_pct"]) <= 10 else " >10%")
        print(f"{r['alg']:6} {r['ran']:6} {r['ranks']:>2} {r['bytes']:>10} {r['model_ms']:>10.2f} "
              f"{r['measured_ms']:>10.2f} {r['error_pct']:>6.1f}%{flag}")


# ----------------------------------------------------------------------------- overlap


def cmd_overlap(a):
    reps = 3 if a.quick else 5
    rows = []
    for lat in a.latencies:
        for mb, modes in ((25, "(fused-after|per-param-after|per-param-overlap|bucket25MB-overlap)"),
                          (5, "bucket5MB-overlap"), (1, "bucket1MB-overlap")):
            out = os.path.join(a.out, f"link-overlap-{a.model}-L{lat:g}-b{mb}.json")
            if not os.path.exists(out):
                run([a.micro_bin, "--dpb_ranks=2", f"--dpb_{a.model}_batch={a.batch}",
                     f"--dpb_bucket_mb={mb}", f"--dpb_link_gbps={a.gbps}",
                     f"--dpb_link_latency_us={lat}",
                     f"--benchmark_filter=^overlap/cpu/{a.model}/{modes}/ranks:2/",
                     f"--benchmark_min_time={a.min_time if a.quick else 1}",
                     f"--benchmark_repetitions={reps}",
                     "--benchmark_enable_random_interleaving=true", f"--benchmark_out={out}"])
            with open(out) as f:
                bench = json.load(f)["benchmarks"]
            per_mode = {}
            for b in bench:
                if b.get("run_type") == "iteration" and "exposed_comm_median_s" in b:
                    per_mode.setdefault(b["run_name"].split("/")[3], []).append(b)
            for mode, bs in per_mode.items():
                med = [b["exposed_comm_median_s"] for b in bs]
                rows.append(dict(link_gbps=a.gbps, link_latency_us=lat, mode=mode,
                                 bucket_mb=mb if mode.startswith("bucket") else "",
                                 repetitions=len(bs), exposed_comm_s=statistics.median(med),
                                 exposed_min_s=min(med), exposed_max_s=max(med),
                                 ci95_lo_s=statistics.median(b["exposed_comm_ci95_lo_s"] for b in bs),
                                 ci95_hi_s=statistics.median(b["exposed_comm_ci95_hi_s"] for b in bs),
                                 compute_s=statistics.median(b["compute_s"] for b in bs)))
    write_csv(os.path.join(a.out, "link-overlap.csv"), rows)
    print(f"\n{a.model}, k=2, global batch {a.batch}, link {a.gbps} Gb/s; {machine_note()}")
    print(f"{'L us':>6} {'mode':22} {'exposed s':>10} {'95% CI (median rep)':>22} {'compute s':>10}")
    for r in rows:
        print(f"{r['link_latency_us']:>6g} {r['mode']:22} {r['exposed_comm_s']:>10.3f} "
              f"[{r['ci95_lo_s']:.3f}, {r['ci95_hi_s']:.3f}]{'':>6} {r['compute_s']:>10.3f}")
    plot_overlap(a.out, rows, "link-overlap", "per step: median over repetitions, bars: min-max of "
                 "repetitions")


def plot_overlap(out, rows, name, what):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for i, lat in enumerate(sorted({r["link_latency_us"] for r in rows})):
        at = [r for r in rows if r["link_latency_us"] == lat]
        b = sorted((r for r in at if r["bucket_mb"] != ""), key=lambda r: r["bucket_mb"])
        color = f"C{i}"
        ax.errorbar([r["bucket_mb"] for r in b], [r["exposed_comm_s"] for r in b],
                    yerr=[[r["exposed_comm_s"] - r["exposed_min_s"] for r in b],
                          [r["exposed_max_s"] - r["exposed_comm_s"] for r in b]],
                    marker="o", color=color, capsize=3,
                    label=f"buckets, overlapped ({at[0]['link_gbps']:g} Gb/s, {lat:g} us)")
        for mode, style in (("per-param-after", "--"), ("fused-after", ":"),
                            ("per-param-overlap", "-.")):
            m = [r for r in at if r["mode"] == mode]
            if m:
                ax.axhline(m[0]["exposed_comm_s"], color=color, ls=style, lw=1,
                           label=f"{mode} ({lat:g} us)")
    ax.set_xscale("log")
    ax.set_xlim(0.7, 40)  # also when a link has no bucketed runs (only the reference lines)
    ax.set_xticks([1, 5, 25])
    ax.set_xticklabels(["1", "5", "25"])
    ax.set_xlabel("bucket size (MB)")
    ax.set_ylabel("exposed communication (s)")
    ax.set_title("ResNet-18, 2 ranks on an EMULATED link: exposed communication\n" + what,
                 fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    save(fig, out, name)


def cmd_plot_suite(a):
    """The sync suite's emulated-link runs (last epoch of each) as the overlap plot's rows."""
    path = os.path.join(a.out, "sync.csv")
    if not os.path.exists(path):
        sys.exit(f"link_study.py: no {path} (run: scripts/run_suite.py run --suite sync --out {a.out})")
    with open(path) as f:
        last = {}
        for r in csv.DictReader(f):
            last[r["scenario"]] = r  # rows are in epoch order: the last one wins
    rows = []
    for r in last.values():
        if float(r.get("link_gbps") or 0) <= 0 and float(r.get("link_latency_us") or 0) <= 0:
            continue
        ovl = r["overlap"] == "on"
        mode = (f"bucket{float(r['bucket_mb']):g}MB-overlap" if r["grad_sync"] == "bucketed" and ovl
                else f"{r['grad_sync']}-{'overlap' if ovl else 'after'}")
        x = float(r["exposed_comm_s"])
        rows.append(dict(link_gbps=float(r["link_gbps"]), link_latency_us=float(r["link_latency_us"]),
                         mode=mode, bucket_mb=float(r["bucket_mb"]) if mode.startswith("bucket") else "",
                         exposed_comm_s=x, exposed_min_s=x, exposed_max_s=x))
    if not rows:  # a GPU run: the emulated-link runs were left out
        print(f"link_study.py plot-suite: {path} has no emulated-link runs (CPU runs only); no plot")
        return
    plot_overlap(a.out, rows, "link-suite-exposed",
                 "per epoch (last epoch of each emulated-link run of the sync suite; one run each, no interval)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["micro", "overlap", "check", "shard-check", "nodes-check",
                                     "figure", "plot-suite"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--bin", default="build/dpbench")
    ap.add_argument("--micro-bin", default="build/dpbench-micro")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--backend", default="cpu",  # dpbench refuses a name not in its table
                    help="figure: the device the one-device profile is measured on")
    ap.add_argument("--epochs", type=int, default=2,
                    help="check: epochs per run (the median of all but the first is used)")
    ap.add_argument("--models", default="",
                    help="check, shard-check: models to run (comma list; default: the table's)")
    ap.add_argument("--shards", default="",
                    help="shard-check: --shard modes (comma list; default: every mode); "
                         "nodes-check: default none")
    ap.add_argument("--shapes", default="2x2",
                    help="nodes-check: G x N shapes (devices per node x nodes), comma list")
    ap.add_argument("--algs", default="ring,hier",
                    help="nodes-check: --allreduce algorithms (comma list): flat vs hierarchical")
    ap.add_argument("--gbps", type=float, default=1.0, help="micro, overlap: link bandwidth")
    ap.add_argument("--latencies", default="50,5000", help="overlap: link latencies, us")
    ap.add_argument("--batch", type=int, default=8, help="overlap: the model's global batch")
    ap.add_argument("--model", default="resnet18", help="overlap: a model of `dpbench train --help`")
    ap.add_argument("--sizes", default="", help="micro: bytes, comma list (default: 64 KB..32 MB)")
    ap.add_argument("--ranks", default="", help="micro: rank counts, comma list (default 2,4)")
    ap.add_argument("--min-time", type=float, default=0.5, help="micro: seconds per benchmark")
    ap.add_argument("--reps", type=int, default=3, help="micro: repetitions (median)")
    ap.add_argument("--train-limit", type=int, default=0,
                    help="check: training examples per run (default: the CHECK table's)")
    ap.add_argument("--profile-steps", type=int, default=0,
                    help="check: profile steps per run (default: the CHECK table's)")
    ap.add_argument("--ks", default="",
                    help="check: device counts (1 first: the speedup base; default 1,2,4); "
                         "shard-check: default 2,4")
    ap.add_argument("--profile", action="append", default=[],
                    help="figure: MODEL=FILE one-device profile (e.g. measured on a GPU)")
    a = ap.parse_args()
    a.latencies = [float(x) for x in a.latencies.split(",")]
    a.models = a.models.split(",") if a.models else list(
        {"shard-check": SHARD_CHECK, "nodes-check": NODES_CHECK}.get(a.what, CHECK))
    a.shapes = a.shapes.split(",")
    a.algs = a.algs.split(",")
    a.shards = a.shards.split(",") if a.shards else []
    a.ks = [int(x) for x in (a.ks or ("2,4" if a.what == "shard-check" else "1,2,4")).split(",")]
    a.profile = dict(p.split("=", 1) for p in a.profile)
    os.makedirs(a.out, exist_ok=True)
    {"micro": cmd_micro, "overlap": cmd_overlap, "check": cmd_check, "shard-check": cmd_shard_check,
     "nodes-check": cmd_nodes_check, "figure": cmd_figure, "plot-suite": cmd_plot_suite}[a.what](a)


if __name__ == "__main__":
    main()
