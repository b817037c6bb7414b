"""suite_results.py: a results folder's files, what scripts/run_suite.py, scripts/check_regression,
plots/make_plots.py and the report scripts share: result CSVs and dpbench-micro's benchmark JSON,
atomic writes, and the per-run numbers of the summary (epoch time, speedup, time to accuracy). The
scenario suite files and run planning are scripts/suitelib.py's (imported from there; suitelib does
not import this module). Standard library only.
"""
import contextlib
import csv
import io
import json
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchnames  # noqa: E402  (the one parser of benchmark names)
from suitelib import FIT_PREFIX, PROJECT_PREFIX, ROOT, Suite, load_suite  # noqa: E402


# ----------------------------------------------------------------------------- files


def write_atomic(path, text):
    """path replaced by text at once; a failed write (a full disk) leaves the old file and no
    temp file (run_suite also removes PATH.tmp<pid> left by a killed run: stale_temps)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def stale_temps(folder):
    """write_atomic's temp files in folder (FILE.tmp<pid>) and dpbench-micro's (FILE.tmp.<pid>)
    whose process is gone: what a killed run left behind."""
    out = []
    for f in os.listdir(folder) if os.path.isdir(folder) else []:
        m = re.fullmatch(r".+\.tmp\.?(\d+)", f)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            out.append(os.path.join(folder, f))
    return out


def mark_status_in_place(path, old, new):
    """Rewrites '"status": "<old>"' as '"status": "<new>"' (padded with spaces to the same length)
    inside path without growing it: what still works on a full disk, where write_atomic cannot
    make its temp file. True when the file held the old status (needs len(new) <= len(old))."""
    before, after = f'"status": "{old}"'.encode(), f'"status": "{new}"'.encode()
    if len(after) > len(before):
        return False
    try:
        with open(path, "r+b") as f:
            data = f.read()
            at = data.find(before)
            if at < 0:
                return False
            f.seek(at)
            f.write(after + b" " * (len(before) - len(after)))
        return True
    except OSError:
        return False


def write_json(path, obj):
    write_atomic(path, json.dumps(obj, indent=2) + "\n")


# The training CSV's columns come from dpbench's one table (src/train/train_csv.cpp) through
# scripts/train_csv_columns.json (`dpbench info --csv-columns`; tests/cli_test.sh keeps it equal).
with open(os.path.join(ROOT, "scripts", "train_csv_columns.json")) as _f:
    TRAIN_CSV_COLUMNS = json.load(_f)["columns"]
NUMERIC = {c["name"] for c in TRAIN_CSV_COLUMNS if c["type"] == "number"}


def is_suite_csv(path):
    """True for a training CSV (one row per run and epoch: columns suite and scenario); False for
    the other CSVs of a results folder (micro-*.csv, summary.csv, link-projection.csv, ...)."""
    if os.path.basename(path).startswith((FIT_PREFIX, PROJECT_PREFIX)):
        return False
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    return "suite" in header and "scenario" in header


def read_rows(path):
    """Rows of a suite CSV as dicts: numeric columns as floats, blank ones (a peer's numbers that
    it does not have) as None; `impl` is "dpbench" where the column is absent (older CSVs)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in NUMERIC & r.keys():
            try:
                r[k] = float(r[k]) if r[k] != "" else None
            except ValueError:
                pass
        if not r.get("impl"):
            r["impl"] = "dpbench"
    return rows


def read_results(out_dir):
    """{suite: [rows]} for every suite CSV in a results folder."""
    res = {}
    for f in sorted(os.listdir(out_dir)):
        if f.endswith(".csv") and not f.startswith(("micro-", "summary", FIT_PREFIX,
                                                    PROJECT_PREFIX)):
            rows = read_rows(os.path.join(out_dir, f))
            if rows and "scenario" in rows[0]:
                res[f[:-4]] = rows
    return res


def _rewrite_csv(path, header, rows):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    write_atomic(path, buf.getvalue())


def append_suite_csv(path, suite, scenario, run_csv):
    """Adds dpbench's rows from run_csv to the suite CSV with suite, scenario and impl (dpbench)
    in front (impl only when dpbench's own CSV lacks it). Returns the number of rows added."""
    with open(run_csv, newline="") as f:
        new = list(csv.reader(f))
    if len(new) < 2:
        return 0
    own_impl = "impl" in new[0]
    header = ["suite", "scenario"] + ([] if own_impl else ["impl"]) + new[0]
    old = []
    prefix = [suite, scenario] + ([] if own_impl else ["dpbench"])
    rows = [prefix + r for r in new[1:]]
    if os.path.exists(path):
        with open(path, newline="") as f:
            old = list(csv.reader(f))
        if old and old[0] != header:
            if not set(header) <= set(old[0]):
                raise SystemExit(f"run_suite: {path} has a different header; use another --out")
            # the file's header has columns a peer added (peerlib: peak_mem_source): blank here
            rows = [[dict(zip(header, r)).get(c, "") for c in old[0]] for r in rows]
            header = old[0]
    _rewrite_csv(path, header, (old or [header])[1:] + rows)
    return len(new) - 1


def append_rows(path, rows, columns=None):
    """Adds rows (dicts) to a CSV under its existing header (else `columns`); a column the header
    lacks is added (blank in the old rows); keys the rows lack stay blank."""
    header, old = list(columns or []), []
    if os.path.exists(path):
        with open(path, newline="") as f:
            rd = csv.DictReader(f)
            header, old = list(rd.fieldnames or header), list(rd)
    for r in rows:
        header += [k for k in r if k not in header]
    for r in old:  # rows written before the impl column existed are dpbench's
        if "impl" in header and not r.get("impl"):
            r["impl"] = "dpbench"
    body = [[r.get(c, "") if r.get(c) is not None else "" for c in header] for r in old + rows]
    _rewrite_csv(path, header, body)
    return len(rows)


# ----------------------------------------------------------------------------- micro JSON


def parse_bench_name(name):
    """dpbench-micro names as fields, by the one parser (scripts/benchnames.py):
    'allreduce/cpu/ring/ranks:4/bytes:1048576/manual_time' -> {'family': 'allreduce',
    'backend': 'cpu', 'alg': 'ring', 'ranks': 4, 'bytes': 1048576, 'shared': False}."""
    return benchnames.parse(name)


def read_micro(path):
    """Benchmarks of a Google Benchmark JSON file as dicts (name fields + counters); medians when
    repetitions were aggregated, else the mean over repeated iteration entries; with repetitions,
    busbw_GBps_best is the best repetition's bus bandwidth."""
    with open(path) as f:
        data = json.load(f)
    groups = {}
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        key = b.get("run_name", b["name"])
        groups.setdefault(key, []).append(b)
    out = []
    for key, bs in groups.items():
        reps = [b for b in bs if b.get("run_type") != "aggregate" and "busbw_GBps" in b]
        med = [b for b in bs if b.get("aggregate_name") == "median"]
        bs = med or bs
        row = parse_bench_name(key)
        if len(reps) > 1:  # repetitions: also the least disturbed one (check_regression)
            row["busbw_GBps_best"] = max(b["busbw_GBps"] for b in reps)
        row["name"] = key
        for k, v in bs[0].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in row:
                row[k] = statistics.mean(b.get(k, v) for b in bs)
        out.append(row)
    return out, data.get("context", {})


# ----------------------------------------------------------------------------- summary


def group_runs(rows):
    """{(suite, scenario, impl): [rows ordered by epoch]}: a peer's rows carry the scenario of the
    dpbench run they repeat."""
    g = {}
    for r in rows:
        g.setdefault((r["suite"], r["scenario"], r.get("impl") or "dpbench"), []).append(r)
    for v in g.values():
        v.sort(key=lambda r: r["epoch"])
    return g


def stalled(e):
    """The epoch's time was stretched by a stalled rank: the CSV's stalled_s > 0 (a wait past
    the watchdog's warn threshold, src/core/watchdog.h); its times are no measurement."""
    return (e.get("stalled_s") or 0) > 0


def stalled_epoch(epochs):
    """The first stalled epoch (its number), None when none was."""
    for i, e in enumerate(epochs, 1):
        if stalled(e):
            return int(e["epoch"]) if isinstance(e.get("epoch"), float) else i
    return None


def steady_epoch_s(epochs, key="epoch_s"):
    """Median over epochs after the first (the first includes warm-up); the only one if one.
    Stalled epochs (stalled()) are left out. None when the run has no such number (a peer's
    blank column, or every epoch stalled)."""
    vals = ([e[key] for e in epochs[1:] if not stalled(e)] or
            [e[key] for e in epochs[:1] if not stalled(e)])
    return None if not vals or None in vals else statistics.median(vals)


def time_to_acc(epochs, target):
    """Training seconds (sum of epoch_s) until test accuracy first reaches target, else None."""
    t = 0.0
    for e in epochs:
        if e["epoch_s"] is None:  # a planning run (--backend meta): no time
            return None
        t += e["epoch_s"]
        if target is not None and e["test_acc"] is not None and e["test_acc"] >= target:
            return t
    return None


def diverged_epoch(epochs):
    """The first epoch (its number) whose loss or parameters were not finite: the CSV's diverged
    column 1 (dpbench train, src/train/divergence.h), or a NaN/inf train loss (a peer, an older
    CSV); None when the run stayed finite."""
    for i, e in enumerate(epochs, 1):
        loss = e.get("train_loss")
        if e.get("diverged") == 1 or (isinstance(loss, float) and not math.isfinite(loss)):
            return int(e["epoch"]) if isinstance(e.get("epoch"), float) else i
    return None


def find_reference(runs, key, family=None):
    """The 1-device run of the same suite, model and implementation family (dpbench; PyTorch for
    PyTorch and its DDP) to compare speed with: same global batch if there is one."""
    family = family or (lambda impl: impl)
    first = runs[key][0]
    cands = [k for k, v in runs.items() if k[0] == key[0] and v[0]["model"] == first["model"]
             and v[0]["devices"] == 1 and v[0]["backend"] == first["backend"]
             and family(k[2]) == family(key[2])]
    same = [k for k in cands if runs[k][0]["global_batch"] == first["global_batch"]]
    return (same or cands or [None])[0]


def summarize(out_dir, family=None):
    """Summary rows (dicts) for every training run (dpbench's and the peers') in a results
    folder; family(impl) groups implementations for the speedup reference."""
    targets = {}
    rows_out = []
    for suite, rows in read_results(out_dir).items():
        try:
            targets[suite] = load_suite(suite)
        except SystemExit:
            targets[suite] = Suite(suite)
        runs = group_runs(rows)
        for key, eps in runs.items():
            e0, last = eps[0], eps[-1]
            t = steady_epoch_s(eps)
            ref = find_reference(runs, key, family)
            ref_t = steady_epoch_s(runs[ref]) if ref else None  # None: a plan has no time
            speedup = ref_t / t if ref_t and t else None
            quick = bool(e0["quick"])
            target = targets[suite].target(e0["model"], quick)
            tta = time_to_acc(eps, target)
            rows_out.append({
                "suite": suite, "scenario": key[1], "impl": key[2], "model": e0["model"],
                "backend": e0["backend"], "devices": int(e0["devices"]),
                "shared_gpu": int(e0["shared_gpu"]), "quick": int(quick),
                "global_batch": int(e0["global_batch"]), "lr": e0["lr"],
                "warmup_epochs": e0["warmup_epochs"], "allreduce": e0["allreduce"],
                "grad_sync": e0["grad_sync"], "overlap": e0["overlap"],
                "link_gbps": float(e0.get("link_gbps") or 0),
                "link_latency_us": float(e0.get("link_latency_us") or 0),
                "train_examples": int(e0["train_examples"]),
                "test_examples": int(e0["test_examples"]), "epochs": len(eps),
                "epoch_s": t, "images_per_s": steady_epoch_s(eps, "images_per_s"),
                "exposed_comm_s": steady_epoch_s(eps, "exposed_comm_s"),
                "speedup": speedup,
                "efficiency": speedup / e0["devices"] if speedup else None,
                # a planning run (--backend meta) has no accuracy: None
                "final_acc": last["test_acc"], "best_acc": max(
                    (e["test_acc"] for e in eps if e["test_acc"] is not None), default=None),
                "target_acc": target, "time_to_target_s": tta,
                "in_sync": int(all(e["replicas_in_sync"] in (1, None) for e in eps)),
                # the epoch it diverged in, its last (--allow-divergence); None: finite
                "diverged_epoch": diverged_epoch(eps),
                # the first epoch a stalled rank stretched, and the longest wait (seconds)
                "stalled_epoch": stalled_epoch(eps),
                "stalled_s": max((e.get("stalled_s") or 0 for e in eps), default=0),
                # why the machine was busy in an epoch (the CSV's busy column; "": it was not)
                "busy": next((e["busy"] for e in eps if e.get("busy")), ""),
            })
    return rows_out
