"""memory_plots.py: the memory suite's figures of plots/make_plots.py (scenarios/memory.ini; the
numbers come from scripts/memory_report.py, which also writes their table into summary.txt):
  memory_<suite>   peak memory per device by category (stacked bars: dpbench's device ledger at
                   the peak), one panel per model, one bar per run (k, global batch; plan = the
                   meta backend); a peer's peak of the same run as a marker, the --device-mem
                   capacity as a dashed line
  fit_<suite>      `dpbench fit`: the largest batch per device and the global batch vs k, and the
                   deepest MLP vs k, under each capacity, with the sharding notebook's figures
                   (seed 004) where a panel is its setting
"""
import os

import matplotlib.pyplot as plt

import memory_report as mr

CAT_COLORS = {"parameters": "C0", "gradients": "C1", "optimizer_state": "C2",
              "activations": "C3", "temporaries": "C4", "workspace": "C5", "comm": "C6",
              "data": "C7"}
PEER_MARKERS = {"pytorch": "o", "pytorch-ddp": "s", "jax-jit": "^", "jax-pmap": "v"}


def suites(out_dir, exclude=()):
    """The suites of a results folder with memory figures: the memory suite's CSV, fit CSVs;
    exclude: suites with figures of their own (the sharding suite's)."""
    names = [f[:-4] for f in os.listdir(out_dir) if f == f"{mr.SUITE}.csv"]
    return [s for s in dict.fromkeys(names + [f[len(mr.FIT_PREFIX):-4] for f in sorted(
        os.listdir(out_dir)) if f.startswith(mr.FIT_PREFIX) and f.endswith(".csv")])
        if s not in exclude]


def _unit(top):
    return ("GiB", 2**30) if top >= 2**30 else ("MiB", 2**20)


def memory(p, Skip, suite):
    """p: the make_plots Plotter; Skip: its exception for a figure without data."""
    rows = mr.run_rows(p.dir, suite, p.manifest)
    ours = [r for r in rows if r["impl"] == "dpbench" and r["peak"] is not None]
    if not ours:
        raise Skip(f"no {suite} runs with peak_mem_bytes")
    panels = list(dict.fromkeys(mr.model_words(r["shape"]) for r in ours))
    bars = [sum(1 for r in ours if mr.model_words(r["shape"]) == m) for m in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(sum(max(3.2, 1.2 + 0.75 * n) for n in bars),
                                                      4.6),
                             squeeze=False, gridspec_kw={"width_ratios": [max(3, n) for n in bars]})
    seen = set()
    for ax, words in zip(axes[0], panels):
        runs = sorted([r for r in ours if mr.model_words(r["shape"]) == words],
                      key=lambda r: (r["global_batch"], r["devices"], r["plan"]))
        unit, scale = _unit(max(r["peak"] for r in runs))
        for x, r in enumerate(runs):
            bottom = 0.0
            for c in mr.CATEGORIES:
                v = (r["breakdown"].get(c) or 0) / scale
                if v > 0:
                    ax.bar(x, v, bottom=bottom, color=CAT_COLORS[c], width=0.7,
                           label=c if c not in seen else None, hatch="//" if r["plan"] else None,
                           edgecolor="white" if r["plan"] else None, linewidth=0)
                    seen.add(c)
                    bottom += v
            ax.text(x, r["peak"] / scale, f"{r['peak'] / scale:.3g}", ha="center",
                    va="bottom", fontsize=7)
            for peer in (q for q in rows if q["impl"] != "dpbench" and q["scenario"] ==
                         r["scenario"] and q["peak"]):
                # a CPU peer's peak RSS holds the interpreter and libraries: its growth over
                # the start is what compares with the device ledger
                over = peer["base"] is not None
                label = f"{peer['impl']} ({peer['source']}" + (" over start)" if over else ")")
                y = (peer["peak"] - (peer["base"] or 0)) / scale
                ax.plot(x + 0.2, y, PEER_MARKERS.get(peer["impl"], "D"),
                        color="black", mfc="none", label=label if label not in seen else None)
                seen.add(label)
        caps = {r["device_mem"] for r in runs if r["device_mem"]}
        for cap in caps:
            ax.axhline(cap / scale, color="0.3", ls="--", lw=1)
            ax.text(len(runs) - 0.5, cap / scale, f" --device-mem {mr.size(cap)}", va="bottom",
                    ha="right", fontsize=7, color="0.3")
        if "mlp 90x2056 in 1024 adam/mse" in words:  # the notebook's GPU
            ax.axhline(mr.NOTEBOOK_CAPACITY / scale, color="C3", ls=":", lw=1)
            ax.text(-0.4, mr.NOTEBOOK_CAPACITY / scale, " notebook's GPU: 24 GiB", va="bottom",
                    fontsize=7, color="C3")
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels([f"k={r['devices']}\nbatch {r['global_batch']}" +
                            ("\nplan" if r["plan"] else f"\n{r['backend']}") for r in runs],
                           fontsize=7)
        ax.set_ylabel(f"peak per device ({unit})")
        ax.set_title(words, fontsize=9)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.08)
    p.figure_legend(fig, axes[0], -0.08)
    p.title(fig, f"Peak memory per device by category (suite {suite}; hatched: planned on the "
            "meta backend, no math)", [], "peers: their process's or allocator's peak (marker)")
    p.save(fig, f"memory_{suite}")


def fit(p, Skip, suite):
    path = os.path.join(p.dir, f"{mr.FIT_PREFIX}{suite}.csv")
    if not os.path.exists(path):
        raise Skip(f"no {os.path.basename(path)} (dpbench fit runs)")
    rows = [r for r in mr.read_fit_rows(path) if r["fits"]]
    if not rows:
        raise Skip("no fit found an answer")
    key = lambda r: (r["vary"], mr.model_words({**r, "mlp_layers": "N"} if r["vary"] == "layers"
                                               else r), r["device_mem_bytes"])  # noqa: E731
    panels = list(dict.fromkeys(key(r) for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 4.0), squeeze=False)
    for ax, (vary, words, cap) in zip(axes[0], panels):
        pr = sorted([r for r in rows if key(r) == (vary, words, cap)], key=lambda r: r["devices"])
        ks = [r["devices"] for r in pr]
        notebook = vary in ("batch", "layers") and "mlp N" not in words and \
            cap == mr.NOTEBOOK_CAPACITY and "adam/mse synthetic" in words
        if vary == "layers":
            ax.plot(ks, [r["answer"] for r in pr], "o-", color="C0", label="dpbench fit: layers")
            for k, r in zip(ks, pr):
                ax.annotate(str(r["answer"]), (k, r["answer"]), textcoords="offset points",
                            xytext=(4, 4), fontsize=7)
            ax.set_ylabel(f"deepest MLP that fits (layers) at global batch {pr[0]['global_batch']}")
            if cap == mr.NOTEBOOK_CAPACITY and "2056 in 1024 adam/mse synthetic" in words:
                ax.plot([1, 2], [90, 130], "*", ms=10, color="C3",
                        label="notebook: 90 ran on 1, 130 fit on 2 (at least)")
        else:
            ax.plot(ks, [r["batch_per_device"] for r in pr], "o-", color="C0",
                    label="batch per device")
            ax.plot(ks, [r["global_batch"] for r in pr], "s-", color="C1", label="global batch")
            for k, r in zip(ks, pr):  # at the search's limit (kMaxBatch): larger not tried
                ax.annotate(str(r["global_batch"]) + (" (search limit: at least)"
                                                      if r.get("limit_hit") else ""),
                            (k, r["global_batch"]), textcoords="offset points", xytext=(4, 4),
                            fontsize=7, ha="right" if r.get("limit_hit") else "left")
            ax.set_ylabel("largest batch that fits")
            if notebook:
                ax.errorbar([1], [(mr.B27 + mr.B54) / 2], yerr=[[(mr.B54 - mr.B27) / 2],
                                                                   [(mr.B54 - mr.B27) / 2]],
                            fmt="none", color="C3", capsize=4,
                            label="notebook, 1 GPU: 256x27 fits, 256x54 does not")
                ax.plot([2], [mr.B54], "^", ms=8, color="C3",
                        label="notebook, 2 GPUs: 256x54 fits (at least)")
        ax.set_xticks(sorted(set(ks)))
        ax.set_xlabel("devices k")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
        checks = {r["check"] for r in pr if r.get("check")}
        ax.set_title(f"{words}\nunder {mr.size(cap)} per device" +
                     (f"; --check: {', '.join(sorted(checks))}" if checks else "; no --check"),
                     fontsize=8)
        ax.legend(loc="upper left", fontsize=7)
    p.title(fig, f"What fits: dpbench fit (planned on the meta backend; suite {suite})")
    p.save(fig, f"fit_{suite}")
