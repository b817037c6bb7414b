"""launcher_plot.py: the threads-vs-processes figure of plots/make_plots.py (./run_all.sh
--launcher both): per suite, the epoch time of each multi-device run with its ranks as threads of
one process beside its twin <scenario>-mpi (one rank per process, mpirun), with the ratio
processes / threads written on the process bar. Drawn only when a results folder has such pairs."""
import matplotlib.pyplot as plt

from suitelib import MPI_SUFFIX


def launcher_pairs(rows):
    """[(suite, threads row, processes row)] of dpbench summary rows with an -mpi twin."""
    ours = {(r["suite"], r["scenario"]): r for r in rows if r["impl"] == "dpbench"}
    return [(s, ours[(s, n[:-len(MPI_SUFFIX)])], r) for (s, n), r in ours.items()
            if n.endswith(MPI_SUFFIX) and (s, n[:-len(MPI_SUFFIX)]) in ours
            and r["epoch_s"] and ours[(s, n[:-len(MPI_SUFFIX)])]["epoch_s"]]


def launcher(p, Skip):
    """p: the make_plots Plotter; Skip: its exception for a figure without data."""
    pairs = launcher_pairs(p.summary)
    if not pairs:
        raise Skip("no process-mode runs with thread twins (./run_all.sh --launcher both)")
    suites = list(dict.fromkeys(s for s, _, _ in pairs))
    n_max = max(sum(1 for s, _, _ in pairs if s == suite) for suite in suites)
    fig, axes = plt.subplots(1, len(suites), figsize=(6 * len(suites), 1.6 + 0.55 * n_max),
                             squeeze=False)
    for ax, suite in zip(axes[0], suites):
        sp = [(t, m) for s, t, m in pairs if s == suite]
        for i, (t, m) in enumerate(sp):
            y = i * 2.6
            ax.barh(y, t["epoch_s"], color="C0", label="threads (one process)" if i == 0 else None)
            ax.barh(y + 1, m["epoch_s"], color="C1",
                    label="processes (mpirun, one rank each)" if i == 0 else None)
            ax.text(m["epoch_s"], y + 1, f" {m['epoch_s'] / t['epoch_s']:.2f}x", va="center",
                    fontsize=7)
        ax.set_yticks([i * 2.6 + 0.5 for i in range(len(sp))])
        ax.set_yticklabels([f"{t['scenario']} (k={t['devices']})" for t, _ in sp], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("epoch time, s (median of the epochs after the first)")
        ax.set_title(suite)
        ax.margins(x=0.15)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5), ncol=2)
    p.title(fig, "Threads vs processes: epoch time (ratio processes / threads)",
            [r for s in suites for r in p.results.get(s, [])])
    p.save(fig, "launcher")
