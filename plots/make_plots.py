#!/usr/bin/python3
"""make_plots.py RESULTS_DIR: the figures of a results folder (./run_all.sh output), PNG and SVG,
into RESULTS_DIR/plots/. Needs matplotlib (Debian: python3-matplotlib; run it with /usr/bin/python3).

  speedup.png               speedup vs devices per suite and batch rule, with the ideal line
  breakdown_<suite>.png     epoch time split into compute, data and exposed communication
  accuracy_<suite>.png      test accuracy vs epoch per configuration
  scaling_grid.png          final test accuracy over the global batch x lr grid (scaling suite);
                            a run that diverged (--allow-divergence) is written "diverged", uncoloured
  micro_busbw.png           all-reduce (and reduce-scatter, all-gather: a row each) bus bandwidth
                            vs message size per algorithm and rank count
  time_to_accuracy.png      test accuracy vs training time, with each suite's target ("diverged"
                            where a run's loss went non-finite; the accuracy legends say so too)
  peers.png                 epoch time of dpbench and each peer on the same runs, with the ratio
                            (./run_all.sh --peers); the accuracy figures draw the peers dashed
  launcher.png              epoch time, threads vs processes (mpirun), per run with an -mpi twin
                            (./run_all.sh --launcher both)
  memory_<suite>.png        peak memory per device by category per model and k (memory suite)
  fit_<suite>.png           largest batch and deepest MLP that fit vs k (dpbench fit)
  sharding_memory.png       memory per device by category vs k per --shard mode (sharding suite);
  sharding_time/_comm/_fit  step time, bytes sent per step, largest batch / deepest MLP per mode
  cluster_step, _micro      step time per all-reduce on emulated nodes, and the all-reduce curve
                            there, flat ring vs hier (cluster suite: plots/cluster_plots.py)
  rank_breakdown_<suite>    per rank, the phases of a step stacked and waiting for peers beside
                            them, per model and k (the traced runs: scripts/breakdown_plot.py)

Every title names the machine (manifest.json) and says when the data are quick subsets; runs with
ranks sharing one GPU are drawn dashed / hatched. A figure whose data are missing is skipped with a
note; a partial results folder gives the figures it can.
"""
import json
import os
import sys
import traceback

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "scripts"))
import suite_results as rr  # noqa: E402  (CSV and benchmark readers, summary rows)
from peerlib import FAMILY  # noqa: E402
from core_plots import CoreFigures, MODEL_NAME, Skip  # noqa: E402  (plots/: every folder's figures)
import peer_plots  # noqa: E402  (plots/: the peers figure)
import launcher_plot  # noqa: E402  (plots/: threads vs processes)
import memory_plots  # noqa: E402  (plots/: the memory suite's figures)
import sharding_plots  # noqa: E402  (plots/: the sharding suite's figures)
import cluster_plots  # noqa: E402  (plots/: the cluster suite's figures)
import breakdown_plot  # noqa: E402  (scripts/: the traced runs' per-rank breakdown)

plt.rcParams.update({"figure.constrained_layout.use": True, "figure.dpi": 110,
                     "savefig.dpi": 110, "font.size": 9,
                     "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 7.5,
                     "svg.fonttype": "none"})


def k_fmt(n):
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def quick_note(rows):
    """'(quick: LeNet 6k/1k, ResNet-18 512/128 train/test examples, 2-3 epochs)' or ''."""
    q = [r for r in rows if int(r["quick"])]
    if not q:
        return ""
    parts = []
    for m in sorted({r["model"] for r in q}):
        sizes = sorted({(int(r["train_examples"]), int(r["test_examples"]))
                        for r in q if r["model"] == m})
        parts.append(MODEL_NAME.get(m, m) + " " + ", ".join(f"{k_fmt(a)}/{k_fmt(b)}"
                                                             for a, b in sizes))
    return "(quick: " + "; ".join(parts) + " train/test-example subsets)"


def shared_note(rows):
    return "(dashed/hatched: ranks share one GPU, not a scaling figure)" \
        if any(int(r["shared_gpu"]) for r in rows) else ""


class Plotter(CoreFigures):
    def __init__(self, out_dir):
        self.dir = out_dir
        self.plots = os.path.join(out_dir, "plots")
        self.manifest = {}
        mpath = os.path.join(out_dir, "manifest.json")
        if os.path.exists(mpath):
            with open(mpath) as f:
                self.manifest = json.load(f)
        self.machine = self.manifest.get("machine", {}).get("label", "unknown machine")
        self.backend = self.manifest.get("backend", "")
        # dpbench's and the peers' rows; planning runs (--backend meta: memory only, no math, no
        # accuracy) are the memory figures' (memory_plots.py), not these
        self.all_results = {s: [r for r in rows if r.get("backend") != "meta"]
                            for s, rows in rr.read_results(out_dir).items()}
        self.results = {s: [r for r in rows if r["impl"] == "dpbench"]
                        for s, rows in self.all_results.items()}
        self.results = {s: rows for s, rows in self.results.items() if rows}
        self.all_summary = [r for r in rr.summarize(out_dir, family=lambda i: FAMILY.get(i, i))
                            if r["backend"] != "meta"] if self.all_results else []
        self.summary = [r for r in self.all_summary if r["impl"] == "dpbench"]
        self.made, self.skipped = [], []

    def title(self, fig, what, rows=(), extra=""):
        lines = [f"{what} — {self.machine}" + (f" ({self.backend})" if self.backend else "")]
        chance = "(every run still at chance accuracy: too few steps)" if rows and all(
            r["test_acc"] < 0.2 for r in rows) else ""
        notes = " ".join(n for n in (quick_note(rows), shared_note(rows), chance, extra) if n)
        if notes:
            lines.append(notes)
        fig.suptitle("\n".join(lines), fontsize=10)

    def figure_legend(self, fig, axes, y):
        """One legend below the figure for every label of axes (each once, first handle kept)."""
        handles, labels = [], []
        for ax in axes:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)),
                   bbox_to_anchor=(0.5, y), fontsize=7)

    def save(self, fig, name):
        os.makedirs(self.plots, exist_ok=True)
        for ext in ("png", "svg"):
            path = os.path.join(self.plots, f"{name}.{ext}")
            tmp = f"{path}.tmp{os.getpid()}"
            fig.savefig(tmp, format=ext, bbox_inches="tight")
            os.replace(tmp, path)
        plt.close(fig)
        self.made.append(name)

    def attempt(self, name, fn, *args):
        try:
            fn(*args)
        except Skip as e:
            self.skipped.append(f"{name}: {e}")
        except Exception as e:  # a broken figure must not cost the others
            traceback.print_exc(limit=3)
            self.skipped.append(f"{name}: failed ({type(e).__name__}: {e})")
        finally:
            plt.close("all")

    def all(self):
        self.attempt("speedup", self.speedup)
        for suite, rows in self.results.items():
            self.attempt(f"breakdown_{suite}", self.breakdown, suite, rows)
            self.attempt(f"accuracy_{suite}", self.accuracy, suite, self.all_results[suite])
        if not self.results:
            self.skipped.append("training figures: no suite CSVs in " + self.dir)
        self.attempt("scaling_grid", self.scaling_grid)
        self.attempt("micro_busbw", self.micro)
        self.attempt("time_to_accuracy", self.time_to_accuracy)
        self.attempt("peers", peer_plots.peers, self, Skip, MODEL_NAME)
        sharding_plots.all_figures(self, Skip)  # the sharding suite (plots/sharding_plots.py)
        cluster_plots.all_figures(self, Skip)  # the cluster suite (plots/cluster_plots.py)
        for suite in memory_plots.suites(self.dir, exclude=sharding_plots.suites(self.dir)):
            self.attempt(f"memory_{suite}", memory_plots.memory, self, Skip, suite)
            self.attempt(f"fit_{suite}", memory_plots.fit, self, Skip, suite)
        self.attempt("launcher", launcher_plot.launcher, self, Skip)
        breakdown_plot.all_figures(self, Skip)


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    if not os.path.isdir(sys.argv[1]):
        print(f"make_plots.py: no folder {sys.argv[1]}", file=sys.stderr)
        return 2
    p = Plotter(sys.argv[1])
    p.all()
    for name in p.made:
        print(f"  {p.plots}/{name}.png (+ .svg)")
    for note in p.skipped:
        print(f"  skipped {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
