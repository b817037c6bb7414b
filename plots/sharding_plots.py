"""sharding_plots.py: the sharding suite's figures of plots/make_plots.py (scenarios/sharding.ini,
`dpbench train --shard`; the numbers come from scripts/sharding_report.py, which writes their
table into summary.txt and summary-sharding.md / .csv):
  sharding_memory   peak memory per device by category (stacked) vs k, one bar per mode in each
                    k's group, a panel per model (plans on the meta backend hatched)
  sharding_time     step time per mode vs k (solid) and its exposed communication (dotted), a
                    panel per model and link (the emulated link's runs apart)
  sharding_comm     bytes rank 0 sends per step per mode vs k, a panel per model and link
  sharding_fit      `dpbench fit --shard`: the largest batch per device and the deepest MLP per
                    mode vs k under each capacity
"""
import os

import matplotlib.pyplot as plt

import memory_report as mr
import sharding_report as sr

MODE_COLORS = {"none": "C0", "optimizer": "C1", "gradients": "C2", "parameters": "C3"}
MODE_MARKERS = {"none": "o", "optimizer": "s", "gradients": "^", "parameters": "D"}
CAT_COLORS = {"parameters": "C0", "gradients": "C1", "optimizer_state": "C2",
              "activations": "C3", "temporaries": "C4", "workspace": "C5", "comm": "C6",
              "data": "C7"}
PEER_MARKERS = {"pytorch": "o", "pytorch-ddp": "s", "torch-zero1": "x", "torch-fsdp": "+"}
FIGURES = ("memory", "time", "comm", "fit")
# each mode's points a little apart on the k axis, so that equal values do not hide each other
X_SHIFT = {"none": -0.09, "optimizer": -0.03, "gradients": 0.03, "parameters": 0.09}


def suites(out_dir):
    """[the sharding suite] when the results folder has its runs or fits, else []."""
    names = (f"{sr.SUITE}.csv", f"{mr.FIT_PREFIX}{sr.SUITE}.csv")
    return [sr.SUITE] if any(os.path.exists(os.path.join(out_dir, n)) for n in names) else []


def _panels(rows, with_link=True):
    key = (lambda r: (mr.model_words(r["shape"]), r["plan"], sr.link_words(r))) if with_link \
        else (lambda r: (mr.model_words(r["shape"]), r["plan"], "-"))
    return key, list(dict.fromkeys(key(r) for r in rows))


def _title(words, plan, link):
    return words + (" (plan: meta backend)" if plan else "") + \
        ("" if link == "-" else f"\nEMULATED link {link}")


def memory(p, Skip, suite):
    rows = [r for r in sr.sharding_rows(p.dir, suite, p.manifest)
            if r["impl"] == "dpbench" and r["peak"] is not None and not r["link_gbps"]]
    if not rows:
        raise Skip(f"no {suite} runs with peak_mem_bytes")
    key, panels = _panels(rows, with_link=False)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.6), squeeze=False)
    seen = set()
    for ax, panel in zip(axes[0], panels):
        pr = [r for r in rows if key(r) == panel]
        ks = sorted({r["devices"] for r in pr})
        modes = [m for m in sr.MODES if any(r["shard"] == m for r in pr)]
        unit, scale = ("GiB", 2**30) if max(r["peak"] for r in pr) >= 2**30 else ("MiB", 2**20)
        width = 0.8 / max(1, len(modes))
        for i, k in enumerate(ks):
            for j, m in enumerate(modes):
                r = next((r for r in pr if r["devices"] == k and r["shard"] == m), None)
                if r is None:
                    continue
                x, bottom = i + (j - (len(modes) - 1) / 2) * width, 0.0
                for c in mr.CATEGORIES:
                    v = (r["breakdown"].get(c) or 0) / scale
                    if v > 0:
                        ax.bar(x, v, bottom=bottom, width=width * 0.92, color=CAT_COLORS[c],
                               label=c if c not in seen else None, linewidth=0,
                               hatch="//" if r["plan"] else None,
                               edgecolor="white" if r["plan"] else None)
                        seen.add(c)
                        bottom += v
                ax.text(x, r["peak"] / scale, sr.MODE_NAME[m].replace("replicated", "repl"),
                        ha="center", va="bottom", fontsize=6, rotation=90)
        caps = {r["device_mem"] for r in pr if r["device_mem"]}
        for cap in caps:
            ax.axhline(cap / scale, color="0.3", ls="--", lw=1)
            ax.text(len(ks) - 0.5, cap / scale, f" --device-mem {mr.size(cap)}", va="bottom",
                    ha="right", fontsize=7, color="0.3")
        ax.set_xticks(range(len(ks)))
        ax.set_xticklabels([f"k={k}" for k in ks])
        ax.set_ylabel(f"peak per device ({unit})")
        ax.set_title(_title(*panel) + f", batch {pr[0]['global_batch']}", fontsize=8)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)
    p.figure_legend(fig, axes[0], -0.1)
    p.title(fig, f"Memory per device by category and --shard mode (suite {suite}; bars per k: "
            "replicated, ZeRO-1, ZeRO-2, ZeRO-3)", [])
    p.save(fig, "sharding_memory")


def _per_mode_lines(p, Skip, suite, value, ylabel, name, title, extra=None):
    rows = [r for r in sr.sharding_rows(p.dir, suite, p.manifest)
            if r["impl"] == "dpbench" and value(r) is not None]
    if not rows:
        raise Skip(f"no {suite} runs with {name.split('_')[-1]} figures")
    key, panels = _panels(rows)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 4.0), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        pr = [r for r in rows if key(r) == panel]
        for m in sr.MODES:
            mr_ = sorted((r for r in pr if r["shard"] == m), key=lambda r: r["devices"])
            if mr_:
                ax.plot([r["devices"] + X_SHIFT[m] for r in mr_], [value(r) for r in mr_],
                        MODE_MARKERS[m] + "-", color=MODE_COLORS[m], label=sr.MODE_NAME[m])
                if extra:
                    extra(ax, m, mr_)
        if name == "sharding_time":  # the peers' repeats of the same runs
            for r in sr.sharding_rows(p.dir, suite, p.manifest):
                if r["impl"] != "dpbench" and r["step_s"] and key(r) == panel:
                    ax.plot(r["devices"] + X_SHIFT.get(r["shard"], 0), r["step_s"],
                            PEER_MARKERS.get(r["impl"], "*"),
                            color=MODE_COLORS.get(r["shard"], "k"), ms=8, label=r["impl"])
        ax.set_xticks(sorted({r["devices"] for r in pr}))
        ax.set_xlabel("devices k")
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
        ax.set_title(_title(*panel), fontsize=8)
    p.figure_legend(fig, axes[0], -0.1)
    p.title(fig, title, [])
    p.save(fig, name)


def time(p, Skip, suite):
    def exposed(ax, m, rs):
        xs = [(r["devices"], r["exposed_step_s"]) for r in rs if r["exposed_step_s"] is not None]
        if xs:
            ax.plot([x + X_SHIFT[m] for x, _ in xs], [y for _, y in xs], ":",
                    color=MODE_COLORS[m], lw=1,
                    label="exposed communication (dotted)")
    _per_mode_lines(p, Skip, suite, lambda r: r["step_s"], "step time (s)", "sharding_time",
                    f"Step time per --shard mode (suite {suite}; dotted: exposed communication "
                    "per step; markers: PyTorch peers)", exposed)


def comm(p, Skip, suite):
    _per_mode_lines(p, Skip, suite, lambda r: r["comm_bytes"] / 2**20
                    if r["comm_bytes"] is not None else None,
                    "MiB rank 0 sends per step (comm_bytes)", "sharding_comm",
                    f"Bytes on the wire per --shard mode (suite {suite}; replicated: a ring "
                    "all-reduce, 2 (k-1)/k x 4P bytes)")


def fit(p, Skip, suite):
    fits = [r for r in sr.read_fits(p.dir, suite) if r["fits"]]
    if not fits:
        raise Skip(f"no {mr.FIT_PREFIX}{suite}.csv answers")
    panels = list(dict.fromkeys(sr.fit_key(r) for r in fits))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.0), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        vary, words, cap = panel
        pr = [r for r in fits if sr.fit_key(r) == panel]
        for m in sr.MODES:
            mr_ = sorted((r for r in pr if (r.get("shard") or "none") == m),
                         key=lambda r: r["devices"])
            if not mr_:
                continue
            ys = [r["answer"] if vary == "layers" else r["batch_per_device"] for r in mr_]
            ax.plot([r["devices"] + X_SHIFT[m] for r in mr_], ys, MODE_MARKERS[m] + "-",
                    color=MODE_COLORS[m], label=sr.MODE_NAME[m])
            for r, y in zip(mr_, ys):
                if r["devices"] == 1 and m != "none":  # k = 1: every mode is replicated's
                    continue
                ax.annotate(str(y) + (" (limit)" if r.get("limit_hit") else ""),
                            (r["devices"] + X_SHIFT[m], y), textcoords="offset points",
                            xytext=(4, 3),
                            fontsize=6, color=MODE_COLORS[m])
        ax.set_xticks(sorted({r["devices"] for r in pr}))
        ax.set_xlabel("devices k")
        ax.set_ylabel("deepest MLP that fits (layers)" if vary == "layers" else
                      "largest batch per device that fits")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
        at = f" at global batch {pr[0]['global_batch']}" if vary == "layers" else ""
        ax.set_title(f"{words}{at}\nunder {mr.size(cap)} per device", fontsize=8)
        ax.legend(loc="upper left", fontsize=7)
    p.title(fig, f"What fits per --shard mode: dpbench fit (planned on the meta backend; suite "
            f"{suite})")
    p.save(fig, "sharding_fit")


def all_figures(p, Skip):
    """Every sharding figure of a results folder (make_plots.Plotter.attempt, one each)."""
    for suite in suites(p.dir):
        for fig in FIGURES:
            p.attempt(f"sharding_{fig}", globals()[fig], p, Skip, suite)
