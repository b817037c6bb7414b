#!/usr/bin/env python3
"""memory_report.py: the memory suite's report (scenarios/memory.ini: the sharding notebook,
../shared/seeds/004, side by side with dpbench), and the `dpbench fit` rows the suite runner keeps.

  scripts/memory_report.py DIR          # the tables of a results folder (summary.txt has them too)

Two tables, each with the notebook's figures beside ours where a row is the notebook's setting
(the 90 x 2056 MLP, input 1024, Adam, MSE, synthetic data: NOTEBOOK below):
  peak per device   every training run of the suite (dpbench's real steps, its plans on the meta
                    backend, the peers): model, k, global batch, backend, step time (steady epoch
                    time / steps per epoch), the peak per device and its breakdown by category
                    (dpbench's device ledger; a peer's peak says how it was measured)
  what fits         every `dpbench fit` (DIR/fit-<suite>.csv): the largest batch per device and
                    global batch, or the deepest MLP, under --device-mem, the peak there, and
                    what --check's real steps found
The runner (scripts/run_suite.py) turns each fit's JSON into one row of DIR/fit-<suite>.csv with
fit_row(). Standard library only.
"""
import csv
import math
import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_results import group_runs, read_results, steady_epoch_s  # noqa: E402
from suitelib import FIT_PREFIX, arg_value  # noqa: E402

SUITE = "memory"
# dpbench's memory categories in the CSV's order (src/core/memory.h; peak_mem_<name>_bytes)
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries",
              "workspace", "comm", "data")
CAT_SHORT = {"parameters": "param", "gradients": "grad", "optimizer_state": "opt",
             "activations": "act", "temporaries": "tmp", "workspace": "ws", "comm": "comm",
             "data": "data"}
FIT_ANSWER_RCS = (0, 1, 3)  # fit's exit statuses that come with a result (1: --check disagreed)
FIT_COLUMNS = (["suite", "scenario", "impl", "model", "optimizer", "loss", "data", "mlp_layers",
                "mlp_hidden", "mlp_input", "devices", "shard", "device_mem_bytes", "vary",
                "plan_backend",
                "fits", "answer", "batch_per_device", "global_batch", "limit_hit", "peak_mem_bytes"]
               + [f"peak_mem_{c}_bytes" for c in CATEGORIES]
               + ["plans", "search_s", "check_backend", "check", "check_runs"])

# The notebook (seed 004): 2 x Quadro RTX 6000 (24 GiB), jax 0.4.31, flax 0.8.6.
NOTEBOOK_MACHINE = "2 x Quadro RTX 6000 (24 GiB each), jax 0.4.31"
NOTEBOOK_MODEL = {"model": "mlp", "mlp_layers": 90, "mlp_hidden": 2056, "mlp_input": 1024,
                  "optimizer": "adam", "loss": "mse", "data": "synthetic"}
NOTEBOOK_CAPACITY = 24 * 2**30
B27, B54 = 256 * 27, 256 * 54
NOTEBOOK_STEP = {  # (devices, global batch) -> what the notebook measured per training step
    (1, B27): "jit_single 1.2 s",
    (2, B27): "jit_multi 0.7 s, pmap 0.7 s",
    (1, B54): "jit_single: out of memory",
    (2, B54): "jit_multi 1.3 s, pmap 1.3 s",
}
NOTEBOOK_PEAK = {  # XLA's own log line of the jit_single run (In [7])
    (1, B27): "XLA: 9.10 GiB after rematerialization (13.81 GiB before)",
}
NOTEBOOK_FIT = {  # (vary, devices) -> (what the notebook says, test of our answer row)
    ("batch", 1): ("256 x 27 fits, 256 x 54 out of memory",
                   lambda r: B27 <= r["global_batch"] < B54),
    ("batch", 2): ("256 x 54 fits", lambda r: r["global_batch"] >= B54),
    ("layers", 1): ("90 fit (the run)", lambda r: r["answer"] >= 90),
    ("layers", 2): ("130 fit ('can handle up to 130')", lambda r: r["answer"] >= 130),
}


# ----------------------------------------------------------------------------- fit rows


def fit_row(suite, scenario, j, args=()):
    """One DIR/fit-<suite>.csv row (dict) from `dpbench fit --json`'s object; args: the fit's
    arguments (its --shard mode when the JSON does not name it)."""
    mlp = j.get("mlp") or {}
    peak = j.get("peak_mem") or {}
    check = j.get("check")
    row = {"suite": suite, "scenario": scenario, "impl": "dpbench", "model": j.get("model"),
           "optimizer": j.get("optimizer"), "loss": j.get("loss"), "data": j.get("data"),
           "mlp_layers": mlp.get("layers"), "mlp_hidden": mlp.get("hidden"),
           "mlp_input": mlp.get("input"), "devices": j.get("devices"),
           "shard": j.get("shard") or arg_value(list(args), "--shard", "none"),
           "device_mem_bytes": j.get("device_mem_bytes"), "vary": j.get("vary"),
           "plan_backend": j.get("plan_backend"), "fits": int(bool(j.get("fits"))),
           "answer": j.get("answer"), "batch_per_device": j.get("batch_per_device"),
           "global_batch": j.get("global_batch"), "limit_hit": int(bool(j.get("limit_hit"))),
           "peak_mem_bytes": j.get("peak_mem_bytes"), "plans": len(j.get("plans") or []),
           "search_s": j.get("search_s"), "check_backend": "", "check": "", "check_runs": ""}
    if j.get("vary") == "layers" and j.get("fits"):
        row["mlp_layers"] = j.get("answer")  # the model at the answer
    for c in CATEGORIES:
        row[f"peak_mem_{c}_bytes"] = peak.get(c)
    if check:
        row["check_backend"] = check.get("backend", "")
        row["check"] = "ok" if check.get("ok") else "mismatch"
        row["check_runs"] = "; ".join(f"{r['value']} {r['got']}" for r in check.get("runs", []))
    return row


def read_fit_rows(path):
    """Rows of a DIR/fit-<suite>.csv, numbers as numbers (None when blank)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            if v == "":
                r[k] = None
            elif k not in ("suite", "scenario", "impl", "model", "optimizer", "loss", "data",
                           "shard", "vary", "plan_backend", "check_backend", "check",
                           "check_runs"):
                try:
                    r[k] = int(v)
                except ValueError:
                    try:
                        r[k] = float(v)
                    except ValueError:
                        pass
    return rows


# ----------------------------------------------------------------------------- formatting


def size(b):
    """Bytes as people read them: 12.34 GiB, 456.7 MiB, 12.0 KiB; '-' for none."""
    if b is None:
        return "-"
    b = float(b)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            return f"{b / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{b:.0f} B"


def render(table):
    widths = [max(len(str(row[i])) for row in table) for i in range(len(table[0]))]
    out = []
    for n, row in enumerate(table):
        out.append("  ".join(str(c).ljust(w) if j == 0 else str(c).rjust(w)
                             for j, (c, w) in enumerate(zip(row, widths))).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def model_words(shape):
    """'mlp 90x2056 in 1024 adam/mse synthetic' or 'lenet sgd/xent'."""
    m = shape.get("model") or "?"
    words = m
    if m == "mlp":
        words += f" {shape.get('mlp_layers')}x{shape.get('mlp_hidden')} in {shape.get('mlp_input')}"
    opt, loss = shape.get("optimizer") or "sgd", shape.get("loss") or "xent"
    return f"{words} {opt}/{loss}" + (" synthetic" if shape.get("data") == "synthetic" else "")


def is_notebook(shape):
    return all(str(shape.get(k)) == str(v) for k, v in NOTEBOOK_MODEL.items())


# ----------------------------------------------------------------------------- run rows


def run_shapes(manifest):
    """{(suite, scenario, impl): the run's model, optimizer, loss, data and MLP shape} from the
    commands in manifest.json (the CSV may lack the MLP's shape; the command line has it)."""
    out = {}
    for c in manifest.get("commands", []):
        if "suite" not in c or "cmd" not in c or c.get("kind") == "fit":
            continue
        args = c["cmd"]
        shape = {"model": arg_value(args, "--model", "lenet"),
                 "optimizer": arg_value(args, "--optimizer", "sgd"),
                 "loss": arg_value(args, "--loss", "xent"),
                 "data": arg_value(args, "--data", "fashion-mnist")}
        if shape["model"] == "mlp":
            for flag, key, default in (("--mlp-layers", "mlp_layers", "90"),
                                       ("--mlp-hidden", "mlp_hidden", "2056"),
                                       ("--mlp-input", "mlp_input", "1024")):
                shape[key] = int(arg_value(args, flag, default))
            if shape["data"] != "synthetic":
                shape["mlp_input"] = 784
        out[(c["suite"], c["scenario"], c.get("impl", "dpbench"))] = shape
    return out


def csv_shape(row):
    """The run's shape from its own CSV row (dpbench's has the MLP's mlp_layers, mlp_hidden and
    mlp_input columns, read as floats: whole numbers as ints, so 90.0 reads as the notebook's 90)."""
    def whole(v):
        return int(v) if isinstance(v, float) and v.is_integer() else v
    return {k: whole(row.get(k)) for k in NOTEBOOK_MODEL}


def run_rows(out_dir, suite=SUITE, manifest=None):
    """One dict per training run (dpbench's and the peers') of the suite: shape, k, batch,
    backend, step_s, peak and its breakdown (a peer's: the categories it measured), how the peak
    was measured; the sharding suite's shard mode, model_params, comm_bytes (per step, rank 0),
    comm_step_s and exposed_step_s (per step) and the emulated link."""
    rows = read_results(out_dir).get(suite, [])
    shapes = run_shapes(manifest or {})
    out = []
    for (s, scenario, impl), eps in group_runs(rows).items():
        e0, last = eps[0], eps[-1]
        shape = shapes.get((s, scenario, impl)) or csv_shape(e0)
        shape.setdefault("model", e0.get("model"))
        gb = int(e0["global_batch"])
        steps = math.ceil(int(e0["train_examples"]) / gb) if e0.get("train_examples") else None
        epoch_s = steady_epoch_s(eps)
        plan = e0.get("backend") == "meta"
        peak = max((e["peak_mem_bytes"] for e in eps if e.get("peak_mem_bytes") is not None),
                   default=None)
        top = next((e for e in eps if e.get("peak_mem_bytes") == peak), last)
        source = last.get("peak_mem_source") or ("device ledger" if impl == "dpbench" else "")
        per_step = lambda key: None if plan or not steps or steady_epoch_s(eps, key) is None \
            else steady_epoch_s(eps, key) / steps  # noqa: E731
        out.append({
            "suite": s, "scenario": scenario, "impl": impl, "shape": shape,
            "devices": int(e0["devices"]), "global_batch": gb, "backend": e0.get("backend"),
            "plan": plan, "quick": int(e0.get("quick") or 0),
            "step_s": None if plan or not epoch_s or not steps else epoch_s / steps,
            "peak": peak, "source": source, "device_mem": e0.get("device_mem_bytes"),
            "base": _num(last.get("peak_mem_base_bytes")),
            "breakdown": {c: _num(top.get(f"peak_mem_{c}_bytes")) for c in CATEGORIES},
            "shard": e0.get("shard") or "none", "model_params": _num(e0.get("model_params")),
            "comm_bytes": _num(last.get("comm_bytes")), "comm_step_s": per_step("comm_s"),
            "exposed_step_s": per_step("exposed_comm_s"),
            "link_gbps": _num(e0.get("link_gbps")) or 0.0,
            "link_latency_us": _num(e0.get("link_latency_us")) or 0.0,
            "first_loss": _num(e0.get("train_loss")), "final_loss": _num(last.get("train_loss")),
        })
    return out


def _num(v):
    try:
        return float(v) if v not in (None, "") else None
    except (TypeError, ValueError):
        return None


def peak_table(rows):
    """Step time and peak per device of every run, the notebook's figures beside its setting."""
    table = [("scenario", "impl", "model", "k", "batch", "backend", "step s", "peak/device",
              "measured by", "in 24 GiB", "notebook (same k, batch)")]
    for r in rows:
        nb = ""
        if is_notebook(r["shape"]):
            key = (r["devices"], r["global_batch"])
            nb = "; ".join(x for x in (NOTEBOOK_STEP.get(key), NOTEBOOK_PEAK.get(key)) if x)
        how = r["source"] or "-"
        if r["base"] and r["peak"]:
            how += f" ({size(r['peak'] - r['base'])} over start)"
        verdict = "-" if r["peak"] is None or r["impl"] != "dpbench" or not \
            is_notebook(r["shape"]) else (
                "fits" if r["peak"] <= NOTEBOOK_CAPACITY else "out of memory")
        table.append((r["scenario"], r["impl"], model_words(r["shape"]), r["devices"],
                      r["global_batch"], r["backend"] + (" (plan)" if r["plan"] else ""),
                      "-" if r["step_s"] is None else f"{r['step_s']:.3g}", size(r["peak"]),
                      how, verdict, nb or "-"))
    return table


def breakdown_table(rows):
    """dpbench's peak per device by category (its device ledger at the peak)."""
    table = [("scenario", "k", "batch", "peak/device") + tuple(CAT_SHORT[c] for c in CATEGORIES)]
    for r in rows:
        if r["impl"] == "dpbench" and r["breakdown"]:
            table.append((r["scenario"], r["devices"], r["global_batch"], size(r["peak"])) +
                         tuple(size(r["breakdown"].get(c)) for c in CATEGORIES))
    return table


def fit_table(rows):
    table = [("scenario", "model", "vary", "k", "device mem", "largest", "global batch",
              "peak there", "check (real steps)", "notebook", "agrees")]
    for r in rows:
        shape = {k: r.get(k) for k in NOTEBOOK_MODEL}
        if r["vary"] == "layers":
            shape["mlp_layers"] = 90  # the notebook's model varied in depth
        nb, agrees = "-", "-"
        key = (r["vary"], r["devices"])
        cap_ok = r.get("device_mem_bytes") == NOTEBOOK_CAPACITY
        if is_notebook(shape) and cap_ok and key in NOTEBOOK_FIT and \
                (r["vary"] != "layers" or r.get("global_batch") == B27):
            nb, test = NOTEBOOK_FIT[key]
            agrees = "yes" if r["fits"] and test(r) else "no"
        if not r["fits"]:
            largest = "nothing fits"
        elif r["vary"] == "layers":
            largest = f"{r['answer']} layers"
        else:
            largest = f"{r['batch_per_device']}/device"
        if r.get("limit_hit"):
            largest += " (search limit)"
        check = "-" if not r.get("check") else f"{r['check']}: {r['check_runs']}"
        table.append((r["scenario"], model_words(shape if r["vary"] != "layers" else
                                                 {**shape, "mlp_layers": "N"}),
                      r["vary"], r["devices"], size(r["device_mem_bytes"]), largest,
                      r["global_batch"] if r["fits"] else "-", size(r["peak_mem_bytes"]), check,
                      nb, agrees))
    return table


def report_lines(out_dir, suite=SUITE, manifest=None):
    """The memory report of a results folder's suite as lines ([] when it has nothing)."""
    rows = run_rows(out_dir, suite, manifest)
    fit_path = os.path.join(out_dir, f"{FIT_PREFIX}{suite}.csv")
    fits = read_fit_rows(fit_path) if os.path.exists(fit_path) else []
    if not rows and not fits:
        return []
    lines = [f"   {suite}: peak memory per device and what fits; the notebook (seed 004, "
             f"{NOTEBOOK_MACHINE}) where a row is its setting"]
    if rows:
        lines += ["", "   step time and peak per device (plan: the meta backend, no math; "
                  "in 24 GiB: the notebook's model, its peak against the notebook's GPU)"]
        lines += ["   " + x for x in render(peak_table(rows))]
        lines += ["", "   dpbench's peak per device by category (param, grad, opt: optimizer "
                  "state, act: activations, tmp: temporaries, ws: workspace, comm, data)"]
        lines += ["   " + x for x in render(breakdown_table(rows))]
    if fits:
        lines += ["", "   what fits (dpbench fit: plans on the meta backend; check: one real step "
                  "at the answer and at the next value)"]
        lines += ["   " + x for x in render(fit_table(fits))]
    notes = []
    if any(r[-1] != "-" for r in fit_table(fits)[1:]):
        notes.append("notebook: JAX preallocates 75% of a GPU by default "
                     "(XLA_PYTHON_CLIENT_MEM_FRACTION), about 18 of the Quadro's 24 GiB, and XLA "
                     "planned 13.81 GiB at 256 x 27 before rematerialization; dpbench fit counts "
                     "the whole --device-mem against its own step's allocations.")
    if any(r["source"] == "peak_rss" for r in rows):
        notes.append("peak_rss: a CPU peer's whole process (interpreter, libraries, data); 'over "
                     "start': minus its resident set before the data and the model.")
    for n in notes:
        lines += textwrap.wrap(n, 100, initial_indent="   ", subsequent_indent="     ")
    return lines


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    import json
    mpath = os.path.join(argv[1], "manifest.json")
    manifest = json.load(open(mpath)) if os.path.exists(mpath) else {}
    lines = report_lines(argv[1], SUITE, manifest)
    print("\n".join(lines) if lines else f"memory_report: no {SUITE} results in {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
