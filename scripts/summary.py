"""summary.py: the summary of a results folder (summary.txt and summary.csv, printed at the end of
./run_all.sh): all-reduce bus bandwidth per rank count (dpbench and the OpenMPI peer side by side),
one table per suite, the peers next to the dpbench runs they repeat with the ratio of their
epoch times, and the process-mode runs (<scenario>-mpi, run_all.sh --launcher) beside their
thread-mode twins, and the memory suite's tables (scripts/memory_report.py: peak per device, what
fits, the sharding notebook's figures beside them) and the sharding suite's
(scripts/sharding_report.py: per mode and k, what fits per mode, ZeRO-1 beside PyTorch's), and the
per-rank breakdown of the traced runs (scripts/breakdown_report.py: rank x phase, the straggler).
`scripts/run_suite.py summary DIR` rewrites it.
Standard library only.
"""
import csv
import io
import json
import os
import textwrap

import breakdown_report
import cluster_report
import memory_report
import sharding_report
from peerlib import FAMILY
from suite_results import read_micro, summarize, write_atomic
from suitelib import FIT_PREFIX, MPI_SUFFIX

# suites whose memory tables have a report of their own (else scripts/memory_report.py's)
MEMORY_REPORTS = {sharding_report.SUITE: sharding_report.report_lines}


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def micro_peer_rows(out_dir):
    """The OpenMPI peer's all-reduce rows (dicts with ranks, bytes, busbw_GBps as numbers) from the
    micro CSVs of a results folder."""
    rows = []
    for f in sorted(os.listdir(out_dir)):
        if f.startswith("micro-") and f.endswith(".csv"):
            with open(os.path.join(out_dir, f), newline="") as fh:
                for r in csv.DictReader(fh):
                    if r.get("impl") not in (None, "", "dpbench") and r.get("busbw_GBps"):
                        rows.append({"impl": r["impl"], "file": f, "ranks": int(r["ranks"]),
                                     "bytes": int(r["bytes"]), "wrong": float(r["wrong"] or 0),
                                     "busbw_GBps": float(r["busbw_GBps"])})
    return rows


def micro_summary(out_dir):
    """Lines on all-reduce bus bandwidth at the largest message of each rank count, with the
    peers' at the same size and dpbench's ring / the peer."""
    lines = []
    peers = micro_peer_rows(out_dir)
    for f in sorted(os.listdir(out_dir)):
        if not (f.startswith("micro-") and f.endswith(".json")):
            continue
        try:
            rows = [r for r in read_micro(os.path.join(out_dir, f))[0]
                    if r.get("family") == "allreduce" and r.get("busbw_GBps") is not None]
        except ValueError:
            continue
        for key in sorted({(r.get("backend"), r.get("ranks")) for r in rows}, key=str):
            at = [r for r in rows if (r.get("backend"), r.get("ranks")) == key]
            big = max(r.get("bytes", 0) for r in at)
            best = {r.get("alg"): r["busbw_GBps"] for r in at if r.get("bytes") == big}
            bw = ", ".join(f"{alg} {v:.2f}" for alg, v in sorted(best.items(), key=str))
            wrong = sum(r.get("wrong", 0) or 0 for r in at)
            for p in peers:
                if p["file"] == f[:-5] + ".csv" and (p["ranks"], p["bytes"]) == (key[1], big):
                    ours = max(best.values())
                    bw += (f"; peer {p['impl']} {p['busbw_GBps']:.2f} (dpbench's best / "
                           f"{p['impl']} = {ours / p['busbw_GBps']:.2f}x)" if p["busbw_GBps"]
                           else f"; peer {p['impl']} -")
                    wrong += p["wrong"]
            lines.append(f"  {f}: {key[0]}, {key[1]} ranks, {big / 2**20:g} MiB: busbw GB/s "
                         f"{bw}" + (f"; WRONG results in {wrong:.0f} elements" if wrong else ""))
    return lines


def suite_table(rows, cols):
    table = [cols]
    for r in rows:
        sync = f"{r['allreduce']}/{r['grad_sync']}/{r['overlap']}" if r["devices"] > 1 else "-"
        if r.get("link_gbps") or r.get("link_latency_us"):  # collectives/link.h
            sync += f" EMULATED link {r['link_gbps']:g} Gb/s {r['link_latency_us']:g} us"
        tgt = ("-" if r["target_acc"] is None else
               f"{fmt(r['time_to_target_s'], '.1f')} s @{r['target_acc']:.2f}"
               if r["time_to_target_s"] is not None else f"never @{r['target_acc']:.2f}")
        table.append((
            r["scenario"] + ("" if r["in_sync"] else " (OUT OF SYNC)") +
            (f" (diverged, epoch {r['diverged_epoch']})" if r.get("diverged_epoch") else "") +
            (" (BUSY)" if r.get("busy") else "") +
            (f" (STALLED, epoch {r['stalled_epoch']}: a rank waited {r['stalled_s']:.0f} s)"
             if r.get("stalled_epoch") else ""),
            f"{r['devices']}{'*' if r['shared_gpu'] else ''}", str(r["global_batch"]),
            f"{r['lr']:g}" + (f" w{r['warmup_epochs']:g}" if r["warmup_epochs"] else ""),
            sync, f"{r['train_examples']}/{r['test_examples']}x{r['epochs']}",
            fmt(r["epoch_s"], ".2f"), fmt(r["speedup"], ".2f"), fmt(r["efficiency"], ".0%"),
            fmt(r["final_acc"], ".3f"), fmt(r["best_acc"], ".3f"), tgt))
    return table


def peer_table(rows, math=None):
    """dpbench's run beside each peer's repeat of it: epoch times, their ratio, accuracies; the
    peer's float32 math (fp32 | tf32, from the manifest: math[(suite, scenario, impl)]) after
    its name."""
    math = math or {}
    ours = {r["scenario"]: r for r in rows if r["impl"] == "dpbench"}
    table = [("scenario", "k", "peer", "dpbench epoch s", "peer epoch s", "peer/dpbench",
              "dpbench final/best acc", "peer final/best acc", "dpbench t->target",
              "peer t->target")]
    for p in rows:
        d = ours.get(p["scenario"])
        if p["impl"] == "dpbench" or d is None:
            continue
        ratio = p["epoch_s"] / d["epoch_s"] if p["epoch_s"] and d["epoch_s"] else None
        tt = lambda r: fmt(r["time_to_target_s"], ".1f") + " s" if r["time_to_target_s"] \
            is not None else ("-" if r["target_acc"] is None else "never")
        mode = math.get((p["suite"], p["scenario"], p["impl"]))
        table.append((p["scenario"], str(p["devices"]), p["impl"] + (f" ({mode})" if mode else ""),
                      fmt(d["epoch_s"], ".2f"),
                      fmt(p["epoch_s"], ".2f"), fmt(ratio, ".2f") + "x",
                      f"{fmt(d['final_acc'], '.3f')}/{fmt(d['best_acc'], '.3f')}",
                      f"{fmt(p['final_acc'], '.3f')}/{fmt(p['best_acc'], '.3f')}", tt(d), tt(p)))
    return table if len(table) > 1 else None


def launcher_table(rows):
    """Each process-mode run (<scenario>-mpi) beside its thread-mode twin: epoch times, ratio."""
    ours = {r["scenario"]: r for r in rows if r["impl"] == "dpbench"}
    table = [("scenario", "k", "threads epoch s", "processes epoch s", "processes/threads",
              "threads final acc", "processes final acc")]
    for name, p in ours.items():
        t = ours.get(name[:-len(MPI_SUFFIX)]) if name.endswith(MPI_SUFFIX) else None
        if t is None:
            continue
        ratio = p["epoch_s"] / t["epoch_s"] if p["epoch_s"] and t["epoch_s"] else None
        table.append((t["scenario"], str(t["devices"]), fmt(t["epoch_s"], ".3f"),
                      fmt(p["epoch_s"], ".3f"), fmt(ratio, ".2f") + "x",
                      f"{t['final_acc']:.3f}", f"{p['final_acc']:.3f}"))
    return table if len(table) > 1 else None


def render(table):
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    out = []
    for i, row in enumerate(table):
        out.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w)
                             for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def summary_text(out_dir, rows):
    manifest = {}
    mpath = os.path.join(out_dir, "manifest.json")
    if os.path.exists(mpath):
        with open(mpath) as f:
            manifest = json.load(f)
    lines = []
    head = f"Summary of {out_dir}"
    if manifest:
        head += (f" ({manifest.get('machine', {}).get('label', '?')}, backend "
                 f"{manifest.get('backend')}, {manifest.get('mode', '?').upper()} mode)")
    lines.append(head)
    if any(r["quick"] for r in rows):
        lines.append("QUICK (quick = 1 in the CSVs): runs with fewer epochs or data subsets; "
                     "their accuracies are not comparable with full runs.")
    if any(r["shared_gpu"] for r in rows):
        lines.append("SHARED GPU (*): ranks share one GPU; those times are not scaling figures.")
    busy = [r for r in rows if r.get("busy")]
    if busy:  # issue 25 item 5: timings taken beside other work are not this machine's figures
        lines.append(f"BUSY: {len(busy)} run(s) measured on a busy machine (their CSV's busy "
                     f"column; e.g. {busy[0]['scenario']}: {busy[0]['busy']}): their times are "
                     "not this machine's; rerun them on a quiet one.")
    for note in manifest.get("peers_missing", []):
        lines.append("peer not run: " + note)
    micro = micro_summary(out_dir)
    if micro:
        lines += ["", "== micro: all-reduce at the largest message"] + micro
    # suites with peak memory to report: the memory suite and any with `dpbench fit` results
    memory_suites = {memory_report.SUITE} | {
        f[len(FIT_PREFIX):-4] for f in os.listdir(out_dir)
        if f.startswith(FIT_PREFIX) and f.endswith(".csv")}
    for suite in sorted(memory_suites - {r["suite"] for r in rows}):  # fits only
        lines += [""] + MEMORY_REPORTS.get(suite, memory_report.report_lines)(out_dir, suite,
                                                                             manifest)
    if not rows:
        lines.append("no training results in " + out_dir)
        return "\n".join(lines) + "\n"
    cols = ("scenario", "k", "batch", "lr", "sync", "data", "epoch s", "speedup", "eff",
            "final acc", "best acc", "t->target")
    for suite in dict.fromkeys(r["suite"] for r in rows):
        sr = [r for r in rows if r["suite"] == suite]
        lines += ["", f"== {suite}"] + render(suite_table([r for r in sr if r["impl"] ==
                                                            "dpbench"], cols))
        peers = peer_table(sr, {(c.get("suite"), c.get("scenario"), c.get("impl")): c["math"]
                                for c in manifest.get("commands", []) if c.get("math")})
        if peers:
            lines += ["", f"   {suite}: peers on the same data and recipe, in this run"]
            lines += ["   " + line for line in render(peers)]
        procs = launcher_table(sr)
        if procs:
            lines += ["", f"   {suite}: threads vs processes (mpirun -np k; runs <scenario>-mpi)"]
            lines += ["   " + line for line in render(procs)]
        if suite == cluster_report.SUITE:  # ring vs hier: step, micro curve, projection
            lines += [""] + cluster_report.report_lines(out_dir, suite, manifest)
        ranks = breakdown_report.report_lines(out_dir, suite)  # its traced runs (--steps-csv)
        if ranks:
            lines += [""] + ranks
        if suite in memory_suites | set(MEMORY_REPORTS):
            lines += [""] + MEMORY_REPORTS.get(suite, memory_report.report_lines)(
                out_dir, suite, manifest)
    lines.append("")
    lines += textwrap.wrap(
        "k: devices; data: train/test examples x epochs; epoch s: median of the epochs after the "
        "first; diverged: the loss or parameters were not finite from that epoch on, where training "
        "stopped (--allow-divergence: a finding of the suite, not a failure); "
        "STALLED: in that epoch a rank waited for a peer past the watchdog's warn threshold "
        "(dpbench --timeout), so its time is no measurement and epoch s leaves it out; "
        "speedup: 1-device epoch time of the same model (same global batch where run) / "
        "this epoch time; eff: speedup / k; t->target: training seconds until the test accuracy "
        "first reached the target. Peers: peer/dpbench is the peer's epoch time over dpbench's "
        "(above 1: dpbench is faster); their speedup is against their own 1-device run "
        "(summary.csv). processes/threads: the process-mode epoch time (one rank per process, "
        "mpirun) over the thread-mode one (above 1: threads are faster).", 100)
    return "\n".join(lines) + "\n"


def write_summary(out_dir):
    rows = summarize(out_dir, family=lambda impl: FAMILY.get(impl, impl))
    text = summary_text(out_dir, rows)
    write_atomic(os.path.join(out_dir, "summary.txt"), text)
    if rows:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        write_atomic(os.path.join(out_dir, "summary.csv"), buf.getvalue())
    return text
