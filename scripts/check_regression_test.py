#!/usr/bin/env python3
"""check_regression_test.py: tests of scripts/check_regression on copies of the committed
baselines (no training: seconds), of the suite files in every mode (a dry run per suite, mode and
backend) and of which peers repeat which runs (scripts/peerlib.py). scripts/test.sh runs it.

  scripts/check_regression_test.py            # every results/baseline/cpu-* folder

For each baseline: an identical copy passes; planted regressions fail (every accuracy -0.1; the
2-device runs' epochs 3x slower, unless marked stalled or measured on a busy machine: then
skipped, their numbers still compared; a run the manifest shows as failed); what a run does not
hold is skipped, not failed (a suite left out, a run never started, peer rows); a run that
diverged (a NaN loss, or the diverged column 1) fails naming it; an older CSV without the impl column still reads; unusable input (a truncated, binary or column-less CSV, a manifest or
benchmark JSON cut short) is exit 2 naming the file. Standard library only.
"""
import csv
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHECK = os.path.join(HERE, "check_regression")
sys.path.insert(0, HERE)
import suite_results as rr  # noqa: E402  (is_suite_csv)
failures = []


def check(name, run_dir, base, want_rc, want_text=()):
    r = subprocess.run([sys.executable, CHECK, run_dir, base], capture_output=True, text=True)
    out = r.stdout + r.stderr
    ok = r.returncode == want_rc and all(t in out for t in want_text)
    print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(base)}: {name} (exit {r.returncode}, "
          f"want {want_rc})")
    if not ok:
        failures.append(f"{os.path.basename(base)}: {name}")
        print("\n".join("     | " + line for line in out.splitlines()[-25:]))


def suite_csvs(d):
    return sorted(f for f in glob.glob(os.path.join(d, "*.csv"))
                  if not os.path.basename(f).startswith("summary") and rr.is_suite_csv(f))


def edit_rows(d, fn):
    """Applies fn(row) -> row | None (drop) to every row of d's suite CSVs."""
    for path in suite_csvs(d):
        with open(path, newline="") as f:
            rd = csv.DictReader(f)
            cols, rows = rd.fieldnames, list(rd)
        rows = [x for x in (fn(dict(r)) for r in rows) if x is not None]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)


def dpbench(r):
    return r.get("impl", "dpbench") in ("", "dpbench")


def copy(base, tmp, name):
    d = os.path.join(tmp, name)
    shutil.copytree(base, d)
    return d


def test_baseline(base, tmp):
    check("identical copy passes", copy(base, tmp, "same"), base, 0, ["no regression"])

    d = copy(base, tmp, "acc")
    edit_rows(d, lambda r: {**r, "test_acc": float(r["test_acc"]) - 0.1,
                            "train_acc": float(r["train_acc"]) - 0.1} if dpbench(r) else r)
    check("accuracy -0.1 fails", d, base, 1, ["REGRESSION: off by 0.100"])

    d = copy(base, tmp, "slow")
    edit_rows(d, lambda r: {**r, "epoch_s": float(r["epoch_s"]) * 3}
              if dpbench(r) and float(r["devices"]) == 2 else r)
    check("2-device epochs 3x slower fail", d, base, 1, ["REGRESSION: slower"])

    # Issue 25 item 2: the same slow epochs marked stalled (stalled_s > 0: a rank waited past the
    # watchdog's warn threshold) are no measurement: flagged, their times not compared.
    d = copy(base, tmp, "stalled")
    for path in suite_csvs(d):
        with open(path, newline="") as f:
            rd = csv.DictReader(f)
            cols, rows = list(rd.fieldnames), list(rd)
        cols += [] if "stalled_s" in cols else ["stalled_s"]
        for r in rows:
            two = dpbench(r) and float(r["devices"]) == 2
            r["epoch_s"] = float(r["epoch_s"]) * 3 if two else r["epoch_s"]
            r["stalled_s"] = 31 if two else (r.get("stalled_s") or 0)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    check("2-device epochs 3x slower but stalled are flagged, not compared", d, base, 0,
          ["flagged: a stalled rank stretched it", "every epoch stalled"])

    test_busy(base, tmp)

    csvs = suite_csvs(base)
    victim_csv = csvs[0]
    with open(victim_csv, newline="") as f:
        victim = next(csv.DictReader(f))["scenario"]
    suite = os.path.basename(victim_csv)[:-4]

    d = copy(base, tmp, "failed")
    edit_rows(d, lambda r: None if r["suite"] == suite and r["scenario"] == victim else r)
    mpath = os.path.join(d, "manifest.json")
    with open(mpath) as f:
        m = json.load(f)
    for c in m.get("commands", []):
        if c.get("suite") == suite and c.get("scenario") == victim:
            c["rc"] = 1
    with open(mpath, "w") as f:
        json.dump(m, f)
    check(f"a failed run ({suite}/{victim}) fails", d, base, 1, ["REGRESSION: the run failed"])

    # Issue 25: a run that diverged is a regression naming it, whatever its baseline (a -nan loss
    # in a CSV from before the diverged column; the column).
    d = copy(base, tmp, "nan")
    edit_rows(d, lambda r: {**r, "train_loss": "-nan"}
              if r["suite"] == suite and r["scenario"] == victim and dpbench(r) else r)
    check(f"a NaN loss ({victim}) fails", d, base, 1,
          [f"{suite}/{victim} diverged", "REGRESSION: diverged in epoch 1 (train loss nan)"])
    d = copy(base, tmp, "diverged")
    path = os.path.join(d, os.path.basename(victim_csv))
    with open(path, newline="") as f:
        rd = csv.DictReader(f)
        cols, rows = [c for c in rd.fieldnames if c != "diverged"] + ["diverged"], list(rd)
    mine = [r for r in rows if r["scenario"] == victim and dpbench(r)]
    last = max(int(float(r["epoch"])) for r in mine)
    for r in rows:  # its last epoch marked, as --allow-divergence writes it
        r["diverged"] = int(r in mine and int(float(r["epoch"])) == last)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    check(f"a run marked diverged ({victim}, epoch {last}) fails", d, base, 1,
          [f"{suite}/{victim} diverged", f"REGRESSION: diverged in epoch {last} "])

    d = copy(base, tmp, "notrun")
    edit_rows(d, lambda r: None if r["suite"] == suite and r["scenario"] == victim else r)
    with open(mpath) as f:
        m = json.load(f)
    m["commands"] = [c for c in m.get("commands", []) if c.get("scenario") != victim]
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(m, f)
    check(f"a run never started ({victim}) is skipped", d, base, 0, ["SKIP: not run here"])

    d = copy(base, tmp, "nosuite")
    os.remove(os.path.join(d, os.path.basename(victim_csv)))
    want = 0 if len(csvs) > 1 or glob.glob(os.path.join(base, "micro-*.json")) else 2
    check(f"suite {suite} left out is skipped", d, base, want, ["SKIP: not in this run"])

    d = copy(base, tmp, "peers")
    path = os.path.join(d, os.path.basename(victim_csv))
    with open(path, newline="") as f:
        rd = csv.DictReader(f)
        cols, rows = list(rd.fieldnames), list(rd)
    if "impl" not in cols:
        cols.insert(2, "impl")
    peer = [{**r, "impl": "pytorch", "test_acc": "0.01", "epoch_s": "999",
             "replicas_in_sync": ""} for r in rows if r["scenario"] == victim]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n", restval="")
        w.writeheader()
        w.writerows(rows + peer)
    check("peer rows are not compared", d, base, 0, ["no regression"])

    d = copy(base, tmp, "noimpl")
    for path in suite_csvs(d):
        with open(path, newline="") as f:
            rd = csv.DictReader(f)
            cols, rows = [c for c in rd.fieldnames if c != "impl"], list(rd)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n", extrasaction="ignore")
            w.writeheader()
            w.writerows(r for r in rows if dpbench(r))
    check("a CSV without the impl column reads", d, base, 0, ["no regression"])


def add_column(d, col, fn):
    """Sets column col (added where missing) of every row of d's suite CSVs to fn(row)."""
    for path in suite_csvs(d):
        with open(path, newline="") as f:
            rd = csv.DictReader(f)
            cols, rows = list(rd.fieldnames), list(rd)
        cols += [] if col in cols else [col]
        for r in rows:
            r[col] = fn(r)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)


def edit_json(path, fn):
    with open(path) as f:
        m = json.load(f)
    fn(m)
    with open(path, "w") as f:
        json.dump(m, f)


def test_busy(base, tmp):
    """Issue 25 item 5: runs measured on a busy machine (the CSV's busy column, the manifest's
    load.busy, a benchmark JSON's context busy; in the run or the baseline) are not compared on
    their speed ratios, which say why; their numbers still are."""
    def slow_busy(r):
        two = dpbench(r) and float(r["devices"]) == 2
        r["epoch_s"] = float(r["epoch_s"]) * 3 if two else r["epoch_s"]
        return "load 7.1 > 2 CPUs" if two else ""

    d = copy(base, tmp, "busy")
    add_column(d, "busy", slow_busy)
    check("2-device epochs 3x slower on a busy machine are skipped, not failed", d, base, 0,
          ["skipped: measured on a busy machine (this run's lenet-k2: load 7.1 > 2 CPUs in epoch 1",
           "no regression"])

    d = copy(base, tmp, "busy-acc")  # busy, and every accuracy 0.1 lower: still a regression
    add_column(d, "busy", slow_busy)
    edit_rows(d, lambda r: {**r, "test_acc": float(r["test_acc"]) - 0.1,
                            "train_acc": float(r["train_acc"]) - 0.1} if dpbench(r) else r)
    check("busy, accuracy -0.1 still fails", d, base, 1,
          ["skipped: measured on a busy machine", "REGRESSION: off by 0.100"])

    # The manifest's load of the commands (run_suite.py), in the baseline, with no busy column.
    d = copy(base, tmp, "busy-manifest")
    edit_rows(d, lambda r: {**r, "epoch_s": float(r["epoch_s"]) * 3}
              if dpbench(r) and float(r["devices"]) == 2 else r)
    b = copy(base, tmp, os.path.join("busy-manifest-base", os.path.basename(base)))
    edit_json(os.path.join(b, "manifest.json"), lambda m: [
        c.update(load={"load_avg_start": 9.5, "busy": "load 9.5 > 2 CPUs"})
        for c in m.get("commands", []) if "suite" in c])
    micro = sorted(glob.glob(os.path.join(b, "micro-*.json")))
    want = ["skipped: measured on a busy machine (baseline's lenet-k2: load 9.5 > 2 CPUs"]
    if micro:  # and the benchmark file its command wrote
        want.append(f"skipped: measured on a busy machine (baseline's {os.path.basename(micro[0])}"
                    ": load 9.5 > 2 CPUs)")
    check("slower, the baseline's manifest busy: skipped", d, b, 0, want + ["no regression"])

    if micro:  # the benchmark JSON's own context (dpbench-micro's samples)
        d = copy(base, tmp, "busy-micro")
        name = os.path.basename(micro[0])
        edit_json(os.path.join(d, name), lambda m: m.setdefault("context", {}).update(
            busy="steal 12%"))
        check("a benchmark JSON marked busy: its ratio skipped", d, base, 0,
              [f"skipped: measured on a busy machine (this run's {name}: steal 12%)",
               "no regression"])


def test_unusable(base, tmp):
    """Issue 25: unusable input is exit 2 naming the file, never a traceback or exit 1 (the
    regression code): a suite CSV truncated, binary, without columns, with text in a number;
    a manifest or benchmark JSON that is not JSON. Either side (run or baseline)."""
    victim = os.path.basename(suite_csvs(base)[0])

    def cut(data):  # the last row cut mid-line, as a copy or a run stopped short leaves it
        return data[:len(data) - len(data.splitlines()[-1]) // 2 - 1]

    def text_in_number(data):
        head, first = data.decode().splitlines()[:2]
        i = head.split(",").index("train_loss")
        row = first.split(",")
        row[i] = "abc"
        return data.replace(first.encode(), ",".join(row).encode(), 1)

    micro = sorted(glob.glob(os.path.join(base, "micro-*.json")))
    cases = [
        ("truncated", victim, cut, ["truncated"]),
        ("a row short of fields", victim, lambda d: d + b"smoke,x\n", ["fields"]),
        ("binary", victim, lambda d: bytes(range(256)) * 4, ["binary"]),
        ("not UTF-8", victim, lambda d: b"\xff\xfe" + d, ["not UTF-8"]),
        ("empty", victim, lambda d: b"", ["empty"]),
        ("column-less", victim, lambda d: b"a,b\n1,2\n", ["no column"]),
        ("text in a number", victim, text_in_number, ["is not a number", "train_loss"]),
        ("manifest not JSON", "manifest.json", lambda d: d[:len(d) // 2], ["manifest"]),
    ]
    if micro:
        cases.append(("benchmark JSON cut", os.path.basename(micro[0]), lambda d: d[:100],
                      ["benchmark JSON"]))
    for side in ("run", "baseline"):
        for what, f, spoil, words in cases:
            d = copy(base, tmp, f"unusable-{side}-{what.replace(' ', '-')}")
            path = os.path.join(d, f)
            with open(path, "rb") as fh:
                data = fh.read()
            with open(path, "wb") as fh:
                fh.write(spoil(data))
            run_dir, base_dir = (d, base) if side == "run" else (base, d)
            r = subprocess.run([sys.executable, CHECK, run_dir, base_dir], capture_output=True,
                               text=True)
            out = r.stdout + r.stderr
            ok = (r.returncode == 2 and path in out and "Traceback" not in out
                  and all(w in out for w in words))
            print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(base)}: {side} {f} {what} is "
                  f"exit 2 naming it (exit {r.returncode})")
            if not ok:
                failures.append(f"{os.path.basename(base)}: unusable {side} {f} {what}")
                print("\n".join("     | " + line for line in out.splitlines()[-12:]))


def test_dry_runs():
    """Every suite expands in both modes on both backends (the full-mode runs are what a GPU
    machine runs by default, and what ./run_all.sh --full runs here)."""
    suites = sorted(f[:-4] for f in os.listdir(os.path.join(ROOT, "scenarios"))
                    if f.endswith(".ini"))
    for backend in ("cpu", "cuda"):
        for mode in ("--quick", "--full"):
            cmd = [sys.executable, os.path.join(HERE, "run_suite.py"), "run", "--dry-run",
                   "--out", "/nonexistent/dry", "--backend", backend, mode, "--suite",
                   ",".join(suites)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            ok = r.returncode == 0 and "steps" in r.stdout
            print(f"{'ok  ' if ok else 'FAIL'} dry run of every suite, {backend} {mode[2:]}")
            if not ok:
                failures.append(f"dry run {backend} {mode}")
                print(r.stdout[-1500:] + r.stderr[-1500:])


def test_peer_plan():
    """Which peer repeats which run: PyTorch the 1-device runs, DDP the k > 1 ones, JAX only on
    GPUs, nothing for a suite without a [peers] section."""
    sys.path.insert(0, HERE)
    import peerlib
    import suitelib
    cases = (("d2l-lenet", "cpu", {"lenet-k1": ["pytorch"], "lenet-k2": ["pytorch-ddp"],
                                   "lenet-k4": ["pytorch-ddp"]}),
             ("d2l-lenet", "cuda", {"lenet-k1": ["pytorch", "jax"],
                                    "lenet-k2": ["pytorch-ddp", "jax"],
                                    "lenet-k4": ["pytorch-ddp", "jax"]}),
             ("d2l-resnet18", "cpu", {"resnet18-k1": ["pytorch"],
                                      "resnet18-k2": ["pytorch-ddp"],
                                      "resnet18-k4": ["pytorch-ddp"]}),
             ("sync", "cpu", {}))
    every = {p.impl: "" for p in peerlib.PEERS}
    for name, backend, want in cases:
        suite = suitelib.load_suite(name)
        runs, _ = suitelib.expand_runs(suite, True, backend, [1, 2, 4])
        got = {}
        for pr in peerlib.plan(suite, runs, every, backend)[0]:
            got.setdefault(pr.name, []).append(pr.peer.impl)
        ok = got == want
        print(f"{'ok  ' if ok else 'FAIL'} peers planned for {name} on {backend}")
        if not ok:
            failures.append(f"peer plan {name} {backend}: {got}")


def main():
    bases = sorted(glob.glob(os.path.join(ROOT, "results", "baseline", "cpu-*")))
    if not bases:
        print("check_regression_test: no results/baseline/cpu-* folder", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        for base in bases:
            sub = os.path.join(tmp, os.path.basename(base))
            os.makedirs(sub)
            test_baseline(base, sub)
            if base == bases[0]:  # the reading is the same for every baseline
                test_unusable(base, sub)
    test_dry_runs()
    test_peer_plan()
    print("check_regression_test: " + (f"{len(failures)} FAILED: " + "; ".join(failures)
                                       if failures else "all passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
