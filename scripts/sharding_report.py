#!/usr/bin/env python3
"""sharding_report.py: the sharding suite's report (scenarios/sharding.ini: `dpbench train --shard
none|optimizer|gradients|parameters`, replicated data parallelism beside ZeRO-1/2/3).

  scripts/sharding_report.py DIR    # print the tables; write DIR/summary-sharding.md and .csv

Tables (summary.txt has them too):
  per model, mode and k   every training run (dpbench's real steps, its plans on the meta backend,
                          the peers): step time, exposed communication per step, bytes rank 0
                          sends per step (comm_bytes), peak memory per device and its categories,
                          and the model states (parameters + gradients + optimizer state) over
                          ZeRO's arithmetic for the run's P parameters and optimizer
  what fits per mode      `dpbench fit --shard MODE` (DIR/fit-sharding.csv): the largest batch per
                          device and the deepest MLP per mode and k, and each over replicated's
  ZeRO-1 vs PyTorch       dpbench's --shard optimizer runs beside torch-zero1's
                          (ZeroRedundancyOptimizer) repeat of them: step time, optimizer state per
                          device, first and last epoch loss
The rows come from scripts/memory_report.py (run_rows, read_fit_rows: one reader for both suites).
Files are written to a temporary name and renamed. Standard library only.
"""
import csv
import io
import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_report as mr  # noqa: E402
from suite_results import write_atomic  # noqa: E402
from suitelib import FIT_PREFIX  # noqa: E402
from report_main import read_manifest, report_main  # noqa: E402

SUITE = "sharding"
MODES = ("none", "optimizer", "gradients", "parameters")
MODE_NAME = {"none": "replicated", "optimizer": "ZeRO-1", "gradients": "ZeRO-2",
             "parameters": "ZeRO-3"}
# bytes per parameter of each optimizer's state (fp32): Adam's two moments, SGD none
STATE_BYTES = {"adam": 8, "sgd": 0}
MD_NAME, CSV_NAME = "summary-sharding.md", "summary-sharding.csv"  # "summary*": not a suite CSV


def zero_states(mode, k, params, optimizer):
    """Bytes of the model states per device (fp32 parameters, gradients, optimizer state) by ZeRO's
    arithmetic: Adam replicated 16P, ZeRO-1 8P + 8P/k, ZeRO-2 4P + 12P/k, ZeRO-3 16P/k (without
    the gathered layer and the prefetch); None when P or the optimizer is not known."""
    s = STATE_BYTES.get(optimizer or "sgd")
    if not params or s is None or mode not in MODES:
        return None
    p, g, o = 4 * params, 4 * params, s * params
    return {"none": p + g + o, "optimizer": p + g + o / k, "gradients": p + (g + o) / k,
            "parameters": (p + g + o) / k}[mode]


def mode_words(mode):
    return f"{mode} ({MODE_NAME.get(mode, '?')})"


def link_words(r):
    if not r["link_gbps"] and not r["link_latency_us"]:
        return "-"
    return f"{r['link_gbps']:g} Gb/s {r['link_latency_us']:g} us"


def _key(r):
    return (r["shape"].get("model") or "", mr.model_words(r["shape"]), r["plan"],
            r["link_gbps"], r["global_batch"], MODES.index(r["shard"]) if r["shard"] in MODES
            else 9, r["devices"], r["impl"] != "dpbench", r["impl"])


def sharding_rows(out_dir, suite=SUITE, manifest=None):
    """memory_report.run_rows, ordered by model, plan, link, batch, mode, k, impl; a peer's row
    takes P (model_params) from the dpbench run it repeats."""
    rows = mr.run_rows(out_dir, suite, manifest)
    params = {r["scenario"]: r["model_params"] for r in rows if r["impl"] == "dpbench"}
    for r in rows:
        if not r["model_params"]:
            r["model_params"] = params.get(r["scenario"])
        br = r["breakdown"]
        states = [br.get(c) for c in ("parameters", "gradients", "optimizer_state")]
        r["states"] = sum(states) if None not in states else None
        r["zero"] = zero_states(r["shard"], r["devices"], r["model_params"],
                                r["shape"].get("optimizer"))
    return sorted(rows, key=_key)


RUN_COLUMNS = ("scenario", "impl", "model", "mode", "k", "batch", "backend", "link", "step_s",
               "exposed_comm_step_s", "comm_bytes_per_step", "peak_per_device_bytes") + tuple(
    f"{c}_bytes" for c in mr.CATEGORIES) + ("model_states_bytes", "zero_formula_bytes",
                                             "states_over_formula")


def run_record(r):
    """One row of the run table as values (the CSV's; the text table formats them)."""
    ratio = r["states"] / r["zero"] if r["states"] and r["zero"] else None
    return dict(zip(RUN_COLUMNS, (
        r["scenario"], r["impl"], mr.model_words(r["shape"]), r["shard"], r["devices"],
        r["global_batch"], r["backend"] + (" (plan)" if r["plan"] else ""), link_words(r),
        r["step_s"], r["exposed_step_s"], r["comm_bytes"], r["peak"]) + tuple(
        r["breakdown"].get(c) for c in mr.CATEGORIES) + (r["states"], r["zero"], ratio)))


def _f(v, spec):
    return "-" if v is None else format(v, spec)


def run_table(rows):
    table = [("scenario", "impl", "mode", "k", "batch", "link", "step s", "exposed/step",
              "comm/step", "peak/device") + tuple(mr.CAT_SHORT[c] for c in mr.CATEGORIES) +
             ("states/ZeRO",)]
    for r in rows:
        x = run_record(r)
        table.append((x["scenario"], x["impl"], MODE_NAME.get(x["mode"], x["mode"]), x["k"],
                      x["batch"], x["link"], _f(x["step_s"], ".3g"),
                      _f(x["exposed_comm_step_s"], ".3g"), mr.size(x["comm_bytes_per_step"]),
                      mr.size(x["peak_per_device_bytes"])) +
                     tuple(mr.size(x[f"{c}_bytes"]) for c in mr.CATEGORIES) +
                     (_f(x["states_over_formula"], ".2f"),))
    return table


def fit_key(r):
    shape = {k: r.get(k) for k in ("model", "optimizer", "loss", "data", "mlp_hidden",
                                   "mlp_input")}
    shape["mlp_layers"] = "N" if r["vary"] == "layers" else r.get("mlp_layers")
    return (r["vary"], mr.model_words(shape), r.get("device_mem_bytes"))


def fit_table(fits):
    """Per (vary, model, capacity): every mode and k, the answer and the answer over
    replicated's at the same k."""
    table = [("vary", "model", "device mem", "mode", "k", "largest", "global batch",
              "peak there", "vs replicated")]
    groups = {}
    for r in fits:
        groups.setdefault(fit_key(r), []).append(r)
    for (vary, words, cap), rs in groups.items():
        # at the search's limit the answer is a lower bound: no ratio from it
        base = {r["devices"]: r["answer"] for r in rs if (r.get("shard") or "none") == "none"
                and r["fits"] and not r.get("limit_hit")}
        rs.sort(key=lambda r: (MODES.index(r.get("shard") or "none") if (r.get("shard") or
                               "none") in MODES else 9, r["devices"]))
        for r in rs:
            mode = r.get("shard") or "none"
            if not r["fits"]:
                largest = "nothing fits"
            elif vary == "layers":
                largest = f"{r['answer']} layers"
            else:
                largest = f"{r['batch_per_device']}/device"
            if r.get("limit_hit"):
                largest += " (search limit)"
            ratio = r["answer"] / base[r["devices"]] if r["fits"] and base.get(r["devices"]) \
                and not r.get("limit_hit") else None
            table.append((vary, words, mr.size(cap), MODE_NAME.get(mode, mode), r["devices"],
                          largest, r["global_batch"] if r["fits"] else "-",
                          mr.size(r["peak_mem_bytes"]), _f(ratio, ".2f") + "x"
                          if ratio else "-"))
    return table


def peer_table(rows):
    """dpbench's runs beside each peer's repeat (the same scenario): ZeRO-1 vs torch-zero1,
    replicated vs pytorch / pytorch-ddp, ZeRO-3 vs torch-fsdp."""
    ours = {r["scenario"]: r for r in rows if r["impl"] == "dpbench"}
    table = [("scenario", "mode", "k", "peer", "dpbench step s", "peer step s", "peer/dpbench",
              "dpbench opt/device", "peer opt/device", "dpbench loss first/last",
              "peer loss first/last")]
    for p in rows:
        d = ours.get(p["scenario"])
        if p["impl"] == "dpbench" or d is None:
            continue
        ratio = p["step_s"] / d["step_s"] if p["step_s"] and d["step_s"] else None
        table.append((p["scenario"], MODE_NAME.get(d["shard"], d["shard"]), d["devices"],
                      p["impl"], _f(d["step_s"], ".3g"), _f(p["step_s"], ".3g"),
                      _f(ratio, ".2f") + ("x" if ratio else ""),
                      mr.size(d["breakdown"].get("optimizer_state")),
                      mr.size(p["breakdown"].get("optimizer_state")),
                      f"{_f(d['first_loss'], '.4g')}/{_f(d['final_loss'], '.4g')}",
                      f"{_f(p['first_loss'], '.4g')}/{_f(p['final_loss'], '.4g')}"))
    return table if len(table) > 1 else None


def read_fits(out_dir, suite=SUITE):
    path = os.path.join(out_dir, f"{FIT_PREFIX}{suite}.csv")
    return mr.read_fit_rows(path) if os.path.exists(path) else []


def markdown(table):
    head, body = table[0], table[1:]
    out = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(map(str, row)) + " |" for row in body]
    return out


def write_files(out_dir, rows, fits, peers, notes):
    """DIR/summary-sharding.md (the tables) and DIR/summary-sharding.csv (one row per run, the
    numbers unformatted), each written to a temporary name and renamed."""
    md = ["# Sharding suite: replicated vs ZeRO-1/2/3", ""]
    if rows:
        md += ["## Per model, mode and k", ""] + markdown(run_table(rows)) + [""]
    if fits:
        md += ["## What fits per mode (dpbench fit --shard)", ""] + markdown(fit_table(fits)) + [""]
    if peers:
        md += ["## dpbench beside the PyTorch peers", ""] + markdown(peers) + [""]
    md += notes
    write_atomic(os.path.join(out_dir, MD_NAME), "\n".join(md) + "\n")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=RUN_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if v is None else v for k, v in run_record(r).items()})
    write_atomic(os.path.join(out_dir, CSV_NAME), buf.getvalue())


def report_lines(out_dir, suite=SUITE, manifest=None, write=True):
    """The sharding report of a results folder as lines ([] when it has nothing); write: also
    DIR/summary-sharding.md and .csv."""
    rows = sharding_rows(out_dir, suite, manifest)
    fits = read_fits(out_dir, suite)
    if not rows and not fits:
        return []
    peers = peer_table(rows)
    lines = [f"   {suite}: replicated (--shard none) vs ZeRO-1 (optimizer), ZeRO-2 (gradients), "
             "ZeRO-3 (parameters)"]
    if rows:
        lines += ["", "   per model, mode and k (step s: steady epoch / steps; exposed and comm: "
                  "per step, comm = bytes rank 0 sends; categories at the peak per device)"]
        lines += ["   " + x for x in mr.render(run_table(rows))]
    if fits:
        lines += ["", "   what fits per mode (dpbench fit --shard MODE, planned on the meta "
                  "backend)"]
        lines += ["   " + x for x in mr.render(fit_table(fits))]
    if peers:
        lines += ["", "   dpbench beside the PyTorch peers (torch-zero1: ZeroRedundancyOptimizer "
                  "+ DDP; the peers' categories are the tensors torch holds)"]
        lines += ["   " + x for x in mr.render(peers)]
    notes = []
    if rows:
        notes.append("states/ZeRO: parameters + gradients + optimizer state per device over "
                     "ZeRO's arithmetic for fp32 with P parameters (Adam: replicated 16P, ZeRO-1 "
                     "8P + 8P/k, ZeRO-2 4P + 12P/k, ZeRO-3 16P/k). Above 1 by the units in "
                     "flight: ZeRO-2's gradients also hold its two gradient buckets, ZeRO-3's "
                     "parameters and gradients its two gathered slots (the layer in use and the "
                     "prefetched one); a unit is a --grad-sync bucket of whole layers.")
    if any(r["source"] == "peak_rss" for r in rows):
        notes.append("peak/device of a CPU peer: its process's peak resident set "
                     "(interpreter, libraries, data); its categories are the tensors torch holds "
                     "(peers/torch_mlp.py).")
    text = []
    for n in notes:
        text += textwrap.wrap(n, 100, initial_indent="   ", subsequent_indent="     ")
    lines += text
    if write:
        write_files(out_dir, rows, fits, peers, [n for n in notes])
    return lines


def main(argv):
    return report_main(argv, __doc__, "sharding_report", SUITE,
                       lambda out_dir: report_lines(out_dir, SUITE, read_manifest(out_dir)),
                       (MD_NAME, CSV_NAME))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
