"""breakdown_report.py: the per-rank breakdown of the traced runs of a results folder (issue 23;
scenarios/sync.ini's <model>-traced-k<K> runs), for summary.txt (scripts/summary.py) and the figure
(scripts/breakdown_plot.py). A traced run writes `dpbench train --steps-csv` to
DIR/breakdown/<suite>/<scenario>.steps.csv (one row per rank and step: rank, epoch, step, start_s,
step_s, then <phase>_s for data, forward, backward, optimizer, exposed_comm, comm_busy, wait,
comm_own) and its Chrome trace beside it (<scenario>.trace.json). Per rank: the mean per step of
each phase, and "other" = step - (data + forward + backward + optimizer + exposed comm); waiting for
peers overlaps exposed comm (a rank waits inside the collectives its compute waits on), so it is
shown beside the phases, not added to them. The straggler line is dpbench's own verdict, from the
epoch CSV's straggler_* columns of the run's last epoch. Standard library only.
"""
import csv
import os
import textwrap

import suite_results

FOLDER = "breakdown"  # DIR/breakdown/<suite>/<scenario>.steps.csv (sync.ini's --steps-csv)
STEPS_SUFFIX = ".steps.csv"
# The stacked phases (they add up to the step with "other"), then the ones shown beside them.
STACKED = ("data", "forward", "backward", "optimizer", "exposed_comm")
BESIDE = ("wait", "comm_busy")
LABELS = {"data": "data", "forward": "forward", "backward": "backward", "optimizer": "optimizer",
          "exposed_comm": "exposed comm", "other": "other", "wait": "wait for peers",
          "comm_busy": "comm busy", "step": "step"}
MODEL_NAME = {"lenet": "LeNet", "resnet18": "ResNet-18", "mlp": "MLP"}


def steps_files(out_dir):
    """[(suite, scenario, path)] of every steps CSV under DIR/breakdown/, sorted."""
    base = os.path.join(out_dir, FOLDER)
    found = []
    if os.path.isdir(base):
        for suite in sorted(os.listdir(base)):
            sdir = os.path.join(base, suite)
            if os.path.isdir(sdir):
                found += [(suite, f[:-len(STEPS_SUFFIX)], os.path.join(sdir, f))
                          for f in sorted(os.listdir(sdir)) if f.endswith(STEPS_SUFFIX)]
    return found


def rank_means(path):
    """({rank: {phase: mean ms per step, "other", "step"}}, steps per rank) of one steps CSV."""
    sums, counts = {}, {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        need = {"rank", "step_s"} | {p + "_s" for p in STACKED + BESIDE}
        missing = need - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: not a --steps-csv file (no {', '.join(sorted(missing))})")
        for row in reader:
            rank = int(row["rank"])
            s = sums.setdefault(rank, dict.fromkeys(STACKED + BESIDE + ("step",), 0.0))
            for p in STACKED + BESIDE:
                s[p] += float(row[p + "_s"])
            s["step"] += float(row["step_s"])
            counts[rank] = counts.get(rank, 0) + 1
    out = {}
    for rank, s in sorted(sums.items()):
        m = {p: 1e3 * v / counts[rank] for p, v in s.items()}
        m["other"] = max(0.0, m["step"] - sum(m[p] for p in STACKED))
        out[rank] = m
    return out, min(counts.values()) if counts else 0


def straggler_words(row):
    """dpbench's straggler verdict from an epoch row's straggler_* columns ('' without them)."""
    rank = row.get("straggler_rank")  # a number where suite_results reads the column as one
    if rank is None or str(rank).strip() == "":
        return ""
    rank = int(float(rank))
    if rank < 0:
        return "no straggler"
    ms = lambda k: 1e3 * float(row.get(k) or 0)
    return (f"straggler: rank {rank} loses {ms('straggler_loss_s'):.2f} ms per step "
            f"in {row.get('straggler_phase') or '?'}; the others wait "
            f"{ms('straggler_wait_s'):.2f} ms per step for their peers")


def traced_runs(out_dir):
    """Every traced run of a results folder: dicts with suite, scenario, model, k, sync (the
    all-reduce / grad-sync / overlap words), steps (per rank), ranks ({rank: means}), straggler
    (words, '' when the CSV has no straggler columns) and epoch (the one those words are of)."""
    rows_of = {}
    runs = []
    for suite, scenario, path in steps_files(out_dir):
        if suite not in rows_of:
            csv_path = os.path.join(out_dir, f"{suite}.csv")
            rows_of[suite] = suite_results.read_rows(csv_path) if os.path.exists(csv_path) else []
        epochs = [r for r in rows_of[suite] if r["scenario"] == scenario and
                  r.get("impl", "dpbench") == "dpbench"]
        last = max(epochs, key=lambda r: r.get("epoch") or 0) if epochs else {}
        try:
            ranks, steps = rank_means(path)
        except (OSError, ValueError, KeyError) as e:  # a damaged file costs its run only
            runs.append({"suite": suite, "scenario": scenario, "path": path, "error": str(e),
                         "model": "?", "k": 0})
            continue
        if not ranks:
            continue
        runs.append({
            "suite": suite, "scenario": scenario, "path": path, "error": "",
            "model": last.get("model") or "?",
            "k": int(last.get("devices") or len(ranks)),
            "sync": "/".join(str(last.get(c)) for c in ("allreduce", "grad_sync", "overlap")
                             if last.get(c) not in (None, "")),
            "steps": steps, "ranks": ranks, "straggler": straggler_words(last),
            "epoch": int(last.get("epoch") or 0)})
    runs.sort(key=lambda r: (r["suite"], r["model"], r["k"], r["scenario"]))
    return runs


def report_lines(out_dir, suite):
    """summary.txt's lines for a suite's traced runs: per model and k a rank x phase table (ms per
    step) and the straggler line; [] without traced runs."""
    runs = [r for r in traced_runs(out_dir) if r["suite"] == suite]
    if not runs:
        return []
    cols = STACKED + ("other", "step") + BESIDE
    lines = [f"   {suite}: per-rank breakdown, ms per step (mean over the steps of "
             f"{FOLDER}/{suite}/<scenario>{STEPS_SUFFIX};", "   Chrome traces beside them: "
             "<scenario>.trace.json, for Perfetto or chrome://tracing)"]
    for r in runs:
        if r["error"]:
            lines += ["", f"   {r['scenario']}: unreadable ({r['error']})"]
            continue
        lines += ["", f"   {r['scenario']}: {MODEL_NAME.get(r['model'], r['model'])}, k = {r['k']}"
                  + (f", {r['sync']}" if r["sync"] else "") + f", {r['steps']} steps"]
        table = [("rank",) + tuple(LABELS[c] for c in cols)]
        table += [(str(rank),) + tuple(f"{m[c]:.2f}" for c in cols)
                  for rank, m in r["ranks"].items()]
        widths = [max(len(row[i]) for row in table) for i in range(len(cols) + 1)]
        lines += ["     " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in table]
        if r["straggler"]:
            lines.append(f"     {r['straggler']} (epoch {r['epoch']})")
    lines += [""] + textwrap.wrap(
        "other: step - (data + forward + backward + optimizer + exposed comm); wait for peers "
        "happens inside the collectives (within exposed comm and comm busy), so it is not added; "
        "the straggler line is dpbench's (threshold: 10% of the median step).", 100,
        initial_indent="   ", subsequent_indent="   ")
    return lines
