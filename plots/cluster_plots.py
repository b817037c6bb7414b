"""cluster_plots.py: the cluster suite's figures of plots/make_plots.py (scenarios/cluster.ini: flat
ring vs hierarchical all-reduce on emulated nodes with a slow network; the numbers come from
scripts/cluster_report.py, which writes their tables into summary.txt and summary-cluster.md/.csv):
  cluster_step    training step time per all-reduce algorithm, a panel per model, a bar group per
                  launcher (threads; mpi: mpirun processes), exposed communication hatched inside
                  each bar, hier's ratio to the ring written above its bar
  cluster_micro   all-reduce time vs message size on the emulated cluster (medians of the
                  repetitions), ring and hier, with hier/ring on a second axis
"""
import os

import matplotlib.pyplot as plt
import matplotlib.ticker

import cluster_report as cr

SUITE = cr.SUITE
MICRO_FILE = f"micro-{SUITE}.json"  # make_plots' generic micro figure leaves it out (paced link)
ALG_COLORS = {"ring": "C0", "hier": "C1", "mpi": "C2"}


def _machine_note(p, rows):
    busy = any(r.get("busy") for r in rows)
    return " BUSY machine: timings beside other work" if busy else ""


def step(p, Skip, suite=SUITE):
    rows = [r for r in cr.step_rows(p.dir, suite) if r["step_s"]]
    if not rows:
        raise Skip(f"no {suite} training runs")
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 4.2), squeeze=False)
    for ax, model in zip(axes[0], models):
        mr = [r for r in rows if r["model"] == model]
        launchers = list(dict.fromkeys(r["launcher"] for r in mr))
        algs = list(dict.fromkeys(r["allreduce"] for r in mr))
        width = 0.8 / max(1, len(algs))
        for i, launcher in enumerate(launchers):
            for j, alg in enumerate(algs):
                r = next((r for r in mr if r["launcher"] == launcher and r["allreduce"] == alg),
                         None)
                if r is None:
                    continue
                x = i + (j - (len(algs) - 1) / 2) * width
                ms = r["step_s"] * 1e3
                ax.bar(x, ms, width=width * 0.9, color=ALG_COLORS.get(alg, f"C{3 + j}"),
                       label=alg if i == 0 else None)
                if r["exposed_step_s"]:
                    ax.bar(x, r["exposed_step_s"] * 1e3, width=width * 0.9, fill=False,
                           hatch="//", edgecolor="0.25", linewidth=0,
                           label="exposed comm" if i == 0 and j == 0 else None)
                text = f"{ms:.0f} ms" + (f"\n{r['vs_ring']:.2f}x ring" if r["vs_ring"] else "")
                ax.text(x, ms, text, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(launchers)))
        ax.set_xticklabels([f"{lab}\n{mr[0]['nodes']} x {mr[0]['devices'] // max(1, mr[0]['nodes'])}"
                            f" nodes x ranks" for lab in launchers])
        ax.set_ylabel("step time (ms, steady epoch / steps)")
        ax.set_title(f"{model}: inside {mr[0]['link']}, between {mr[0]['node_link']}",
                     fontsize=9)
        ax.margins(y=0.18)
        ax.legend(fontsize=7)
    p.title(fig, "Step time: flat ring vs hier on emulated nodes", [],
            "EMULATED network" + _machine_note(p, rows))
    p.save(fig, "cluster_step")


def micro(p, Skip, suite=SUITE):
    rows, ctx = cr.micro_rows(p.dir, suite)
    rows = [r for r in rows if r.get("ring_s") or r.get("hier_s")]
    if not rows:
        raise Skip(f"no {MICRO_FILE}")
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for alg in ("ring", "hier"):
        pts = [(r["bytes"], r[f"{alg}_s"] * 1e3) for r in rows if r.get(f"{alg}_s")]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, color=ALG_COLORS[alg], label=alg)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: cr.size(v)))
    ax.set_xlabel("message size (bytes per rank)")
    ax.set_ylabel("all-reduce time (ms, median)")
    ratio = [(r["bytes"], r["hier_over_ring"]) for r in rows if r["hier_over_ring"]]
    if ratio:
        ax2 = ax.twinx()
        ax2.plot(*zip(*ratio), ls=":", color="0.3", label="hier / ring")
        ax2.set_ylabel("hier / ring")
        ax2.set_ylim(0, max(1.1, max(v for _, v in ratio) * 1.1))
        ax2.axhline(1.0, color="0.6", lw=0.6)
        ax2.grid(False)
        ax2.legend(loc="lower right", fontsize=7)
    ax.legend(loc="upper left", fontsize=7)
    ax.set_title(f"{rows[0]['ranks']} ranks on emulated nodes (dpbench-micro --dpb_nodes)",
                 fontsize=9)
    load = cr._num(ctx.get("load_avg_start"), None)
    p.title(fig, "All-reduce on emulated nodes: flat ring vs hier", [],
            "EMULATED network" + (f", load {load:.1f}" if load is not None else "") +
            (" BUSY" if ctx.get("busy") else ""))
    p.save(fig, "cluster_micro")


def all_figures(p, Skip):
    """Both figures when the results folder has the suite's runs or micro (make_plots.attempt)."""
    names = (f"{SUITE}.csv", MICRO_FILE)
    if not any(os.path.exists(os.path.join(p.dir, n)) for n in names):
        return
    p.attempt("cluster_step", step, p, Skip)
    p.attempt("cluster_micro", micro, p, Skip)
