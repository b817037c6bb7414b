#!/usr/bin/env python3
"""cluster_report.py: the cluster suite's report (scenarios/cluster.ini: flat ring vs hierarchical
all-reduce, `--allreduce hier`, on emulated nodes with a slow network; issue 26).

  scripts/cluster_report.py DIR    # print the tables; write DIR/summary-cluster.md and .csv

Tables (summary.txt has them too):
  step time     every training run: model, launcher (threads, mpi), all-reduce, nodes x ranks per
                node, the link inside / between nodes, step time (the steady epoch over its steps),
                exposed communication per step, bytes rank 0 sends per step, and each hier run's
                step over the ring's on the same model and launcher
  micro curve   dpbench-micro's all-reduce on the emulated cluster (DIR/micro-cluster.json): the
                median time per size of ring and hier, hier/ring, and each over the alpha-beta
                model of the emulated link (link_model_s)
  projection    `dpbench project` (DIR/project-cluster.csv): step, communication and exposed
                communication per step for each model and algorithm, and hier over ring
DIR/summary-cluster.csv has every row of the three (column `table`: step | micro | projection).
Files are written to a temporary name and renamed. Standard library only.
"""
import csv
import io
import json
import math
import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_results import (group_runs, read_micro, read_results, read_rows,  # noqa: E402
                           steady_epoch_s, write_atomic)
from suitelib import MPI_SUFFIX, PROJECT_PREFIX, arg_value  # noqa: E402
from report_main import report_main  # noqa: E402

SUITE = "cluster"
MD_NAME, CSV_NAME = "summary-cluster.md", "summary-cluster.csv"  # "summary*": not a suite CSV
FLAT = "ring"  # the flat algorithm each hier run is compared with


def _f(v, spec):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def link_words(gbps, lat):
    return "-" if not gbps and not lat else f"{gbps:g} Gb/s {lat:g} us"


def _num(v, default=0.0):
    try:
        return float(v) if v not in (None, "") else default
    except (TypeError, ValueError):
        return default


def run_args(out_dir, suite):
    """{scenario: its `dpbench train` arguments} from DIR/manifest.json: the nodes and the link
    between them of a CSV from before its nodes, node_link_gbps and node_link_latency_us columns
    (the CSV's, where present, also count DPB_NODES, which the command does not show)."""
    path = os.path.join(out_dir, "manifest.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        cmds = json.load(f).get("commands", [])
    return {c["scenario"]: c.get("cmd", []) for c in cmds if c.get("suite") == suite}


def step_rows(out_dir, suite=SUITE):
    """One dict per training run of the suite (dpbench's): its setting and per-step numbers."""
    rows = read_results(out_dir).get(suite, [])
    cmds = run_args(out_dir, suite)
    out = []
    for (_, scenario, impl), eps in group_runs(rows).items():
        if impl != "dpbench":
            continue
        e0 = eps[0]
        steps = max(1, math.ceil((e0.get("train_examples") or 0) / (e0.get("global_batch") or 1)))
        epoch = steady_epoch_s(eps)
        exposed = steady_epoch_s(eps, "exposed_comm_s")
        cmd = cmds.get(scenario, [])
        k = int(e0["devices"])
        nodes = int(_num(e0.get("nodes"), 0) or _num(arg_value(cmd, "--nodes"), 1))
        node_gbps = _num(e0.get("node_link_gbps"), None)
        node_lat = _num(e0.get("node_link_latency_us"), None)
        if node_gbps is None:  # a CSV without the columns: the run's command
            node_gbps = _num(arg_value(cmd, "--node-link-gbps"))
            node_lat = _num(arg_value(cmd, "--node-link-latency-us"))
        gbps, lat = _num(e0.get("link_gbps")), _num(e0.get("link_latency_us"))
        if not node_gbps and not node_lat:  # 0 and 0: between nodes as inside one (link.h)
            node_gbps, node_lat = gbps, lat
        out.append({
            "scenario": scenario, "model": e0["model"],
            "launcher": "mpi" if scenario.endswith(MPI_SUFFIX) or e0.get("launcher") == "mpi"
            else "threads",
            "allreduce": e0["allreduce"], "devices": k, "nodes": nodes,
            "link": link_words(gbps, lat),
            "node_link": link_words(node_gbps, node_lat or 0.0),
            "global_batch": int(e0["global_batch"]), "steps": steps, "epochs": len(eps),
            "step_s": epoch / steps if epoch else None,
            "exposed_step_s": exposed / steps if exposed is not None else None,
            "comm_bytes": e0.get("comm_bytes"), "busy": next((e["busy"] for e in eps
                                                              if e.get("busy")), ""),
            "load": e0.get("load_avg_start"),
        })
    for r in out:  # hier over the ring on the same model and launcher
        flat = next((f for f in out if f["allreduce"] == FLAT and f["model"] == r["model"]
                     and f["launcher"] == r["launcher"] and f["nodes"] == r["nodes"]), None)
        r["vs_ring"] = (r["step_s"] / flat["step_s"] if flat and r is not flat and
                        r["step_s"] and flat["step_s"] else None)
    return sorted(out, key=lambda r: (r["model"], r["launcher"], r["allreduce"] != FLAT,
                                      r["allreduce"]))


def micro_rows(out_dir, suite=SUITE):
    """Per all-reduce size: ring's and hier's median seconds (and their link models)."""
    path = os.path.join(out_dir, f"micro-{suite}.json")
    if not os.path.exists(path):
        return [], {}
    bench, ctx = read_micro(path)
    with open(path) as f:  # read_micro keeps the numbers; the unit of real_time is a string
        units = {b.get("run_name", b["name"]): b.get("time_unit", "ns")
                 for b in json.load(f).get("benchmarks", [])}
    by = {}
    for b in bench:
        if b.get("family") != "allreduce" or "bytes" not in b:
            continue
        secs = b.get("real_time", 0) * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}.get(
            units.get(b["name"], "ns"), 1e-9)
        by.setdefault((b["ranks"], b["bytes"]), {})[b["alg"]] = (secs, b.get("link_model_s"),
                                                                 b.get("wrong", 0))
    out = []
    for (ranks, size), algs in sorted(by.items()):
        row = {"ranks": ranks, "bytes": size}
        for alg, (s, model, wrong) in algs.items():
            row[f"{alg}_s"], row[f"{alg}_model_s"], row[f"{alg}_wrong"] = s, model, wrong
        row["hier_over_ring"] = (row["hier_s"] / row["ring_s"]
                                 if row.get("hier_s") and row.get("ring_s") else None)
        out.append(row)
    return out, ctx


def project_rows(out_dir, suite=SUITE):
    path = os.path.join(out_dir, f"{PROJECT_PREFIX}{suite}.csv")
    if not os.path.exists(path):
        return []
    rows = []
    for r in read_rows(path):
        rows.append({k: (_num(v, None) if k not in ("suite", "scenario", "model", "allreduce",
                                                      "grad_sync", "overlap", "shard") and
                         not str(k).startswith("profile_") else v) for k, v in r.items()})
    for r in rows:
        flat = next((f for f in rows if f.get("allreduce") == FLAT and f.get("model") ==
                     r.get("model") and f.get("devices") == r.get("devices")), None)
        r["vs_ring"] = (r["step_s"] / flat["step_s"] if flat and flat is not r and
                        r.get("step_s") and flat.get("step_s") else None)
        r["comm_vs_ring"] = (r["comm_s"] / flat["comm_s"] if flat and flat is not r and
                             r.get("comm_s") and flat.get("comm_s") else None)
    return rows


def size(b):
    if b is None:
        return "-"
    for p, u in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if b >= 2**p:
            return f"{b / 2**p:.3g} {u}"
    return f"{b:g} B"


def step_table(rows):
    t = [("scenario", "model", "launcher", "allreduce", "nodes x g", "link in node",
          "link between", "step ms", "exposed ms", "comm/step", "vs ring", "load")]
    for r in rows:
        t.append((r["scenario"], r["model"], r["launcher"], r["allreduce"],
                  f"{r['nodes']} x {r['devices'] // max(1, r['nodes'])}", r["link"],
                  r["node_link"] if r["nodes"] > 1 else "-", _f(r["step_s"] and r["step_s"] * 1e3,
                                                                 ".1f"),
                  _f(r["exposed_step_s"] and r["exposed_step_s"] * 1e3, ".1f"),
                  size(r["comm_bytes"]), _f(r["vs_ring"], ".2f"),
                  _f(r["load"], ".1f") + (" BUSY" if r["busy"] else "")))
    return t


def micro_table(rows):
    t = [("size", "ring ms", "hier ms", "hier/ring", "ring/model", "hier/model", "wrong")]
    for r in rows:
        def over(alg):
            s, m = r.get(f"{alg}_s"), r.get(f"{alg}_model_s")
            return s / m if s and m else None
        t.append((size(r["bytes"]), _f(r.get("ring_s") and r["ring_s"] * 1e3, ".2f"),
                  _f(r.get("hier_s") and r["hier_s"] * 1e3, ".2f"), _f(r["hier_over_ring"], ".2f"),
                  _f(over("ring"), ".2f"), _f(over("hier"), ".2f"),
                  _f((r.get("ring_wrong") or 0) + (r.get("hier_wrong") or 0), "g")))
    return t


def project_table(rows):
    t = [("scenario", "model", "devices", "nodes", "allreduce", "step ms", "comm ms/step",
          "exposed ms/step", "step vs ring", "comm vs ring")]
    for r in rows:
        steps = r.get("steps") or 1
        t.append((r["scenario"], r.get("model"), _f(r.get("devices"), "g"), _f(r.get("nodes"), "g"),
                  r.get("allreduce"), _f(r.get("step_s") and r["step_s"] * 1e3, ".2f"),
                  _f(r.get("comm_s") and r["comm_s"] / steps * 1e3, ".3f"),
                  _f(r.get("exposed_comm_s") is not None and r["exposed_comm_s"] / steps * 1e3,
                     ".3f"), _f(r["vs_ring"], ".2f"), _f(r["comm_vs_ring"], ".2f")))
    return t


def render(table):
    w = [max(len(str(row[i])) for row in table) for i in range(len(table[0]))]
    return ["  ".join(str(c).rjust(w[i]) if i else str(c).ljust(w[i]) for i, c in enumerate(row))
            for row in table]


def markdown(table):
    out = ["| " + " | ".join(map(str, table[0])) + " |", "|" + "---|" * len(table[0])]
    return out + ["| " + " | ".join(map(str, row)) + " |" for row in table[1:]]


def write_files(out_dir, parts, notes):
    md = ["# Cluster suite: flat ring vs hier on emulated nodes", ""]
    for title, table in parts:
        md += [f"## {title}", ""] + markdown(table) + [""]
    md += notes
    write_atomic(os.path.join(out_dir, MD_NAME), "\n".join(md) + "\n")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header = ["table"] + sorted({c for _, t in parts for c in t[0]}, key=str)
    w.writerow(header)
    for title, table in parts:
        for row in table[1:]:
            d = dict(zip(table[0], row))
            w.writerow([title.split(":")[0]] + [d.get(c, "") for c in header[1:]])
    write_atomic(os.path.join(out_dir, CSV_NAME), buf.getvalue())


def report_lines(out_dir, suite=SUITE, manifest=None, write=True):
    """The cluster report of a results folder as lines ([] when it has none of its results);
    write: also DIR/summary-cluster.md and .csv."""
    steps = step_rows(out_dir, suite)
    micro, ctx = micro_rows(out_dir, suite)
    proj = project_rows(out_dir, suite)
    if not steps and not micro and not proj:
        return []
    parts, lines = [], [f"   {suite}: flat {FLAT} vs hier (reduce-scatter in the node, all-reduce "
                        "of 1/g across nodes, all-gather in the node) on emulated nodes"]
    if steps:
        parts.append(("step: training step time", step_table(steps)))
        lines += ["", "   step time per algorithm (steady epoch / steps; vs ring: this step over "
                  "the ring's on the same model and launcher)"] + \
            ["   " + x for x in render(step_table(steps))]
    if micro:
        load = _num(ctx.get("load_avg_start"), None)
        parts.append(("micro: all-reduce on the emulated cluster", micro_table(micro)))
        lines += ["", f"   micro: all-reduce median time per size, {micro[0]['ranks']} ranks "
                  f"(load {_f(load, '.1f')}{' BUSY: ' + ctx['busy'] if ctx.get('busy') else ''};"
                  " x/model: over the emulated link's alpha-beta model)"] + \
            ["   " + x for x in render(micro_table(micro))]
    if proj:
        parts.append(("projection: dpbench project", project_table(proj)))
        prof = proj[0].get("profile_backend") or "?"
        lines += ["", f"   projection (dpbench project; the profile measured on {prof}: its "
                  "compute is that device's, the communication the links')"] + \
            ["   " + x for x in render(project_table(proj))]
    notes = ["hier sends 2(g-1)/g of the buffer per rank inside its node and 2(N-1)/(N g) across "
             "the network (N nodes of g ranks); the flat ring 2(k-1)/k, half of its transfers "
             "across the network at 2 x 2. The mpi_allreduce runs (MPI_Allreduce, processes) are "
             "not paced by the emulated link: the library on this machine's shared memory."]
    text = []
    for n in notes:
        text += textwrap.wrap(n, 100, initial_indent="   ", subsequent_indent="     ")
    lines += [""] + text
    if write:
        write_files(out_dir, parts, notes)
    return lines


def main(argv):
    return report_main(argv, __doc__, "cluster_report", SUITE, report_lines, (MD_NAME, CSV_NAME))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
