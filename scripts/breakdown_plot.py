#!/usr/bin/python3
"""breakdown_plot.py RESULTS_DIR: the per-rank breakdown of a results folder's traced runs (issue
23; scenarios/sync.ini's <model>-traced-k<K> runs, `dpbench train --steps-csv`), PNG and SVG, into
RESULTS_DIR/plots/ (plots/make_plots.py draws it too, as part of ./run_all.sh's plot step):

  rank_breakdown_<suite>   per rank, the mean per step of data, forward, backward, optimizer,
                           exposed communication and other (step - their sum), stacked; waiting
                           for peers drawn hatched beside each bar, since it overlaps exposed
                           communication; a panel per model (rows) and k (columns), each titled
                           with dpbench's straggler verdict

The numbers are scripts/breakdown_report.py's (summary.txt's tables). Needs matplotlib (Debian:
python3-matplotlib; run it with /usr/bin/python3).
"""
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import breakdown_report as br  # noqa: E402

COLORS = {"data": "C7", "forward": "C0", "backward": "C1", "optimizer": "C2",
          "exposed_comm": "C3", "other": "0.8"}


def suites(out_dir):
    """The suites with traced runs in a results folder."""
    return list(dict.fromkeys(s for s, _, _ in br.steps_files(out_dir)))


def rank_breakdown(p, Skip, suite):
    """The figure of one suite (p: make_plots.Plotter, Skip: its exception for missing data)."""
    runs = [r for r in br.traced_runs(p.dir) if r["suite"] == suite and not r["error"]]
    if not runs:
        raise Skip(f"no readable {br.FOLDER}/{suite}/*{br.STEPS_SUFFIX}")
    models = list(dict.fromkeys(r["model"] for r in runs))
    ncols = max(sum(r["model"] == m for r in runs) for m in models)
    fig, axes = plt.subplots(len(models), ncols, figsize=(4.6 * ncols, 3.9 * len(models)),
                             squeeze=False)
    stack = br.STACKED + ("other",)
    for row, m in zip(axes, models):
        mruns = [r for r in runs if r["model"] == m]
        for ax, r in zip(row, mruns):
            ranks = list(r["ranks"])
            x = range(len(ranks))
            bottom = [0.0] * len(ranks)
            for ph in stack:
                vals = [r["ranks"][k][ph] for k in ranks]
                ax.bar([i - 0.14 for i in x], vals, 0.56, bottom=bottom, color=COLORS[ph],
                       label=br.LABELS[ph])
                bottom = [b + v for b, v in zip(bottom, vals)]
            ax.bar([i + 0.3 for i in x], [r["ranks"][k]["wait"] for k in ranks], 0.22,
                   facecolor="white", edgecolor="C3", hatch="////",
                   label="wait for peers (inside exposed comm / comm busy)")
            ax.set_xticks(list(x), [f"rank {k}" for k in ranks])
            ax.set_ylabel("ms per step (mean)")
            head = (f"{br.MODEL_NAME.get(m, m)}, k = {r['k']}" + (f" ({r['sync']})" if r["sync"]
                                                                   else "") +
                    f", {r['steps']} steps\n{r['scenario']}")
            verdict = "\n".join(textwrap.wrap(r["straggler"], 62)) if r["straggler"] else ""
            ax.set_title(head + ("\n" + verdict if verdict else ""), fontsize=8)
        for ax in row[len(mruns):]:
            ax.set_visible(False)
    p.figure_legend(fig, [ax for row in axes for ax in row if ax.get_visible()],
                    -0.11 / len(models))
    p.title(fig, f"Where each rank's step goes (suite {suite}: the traced runs, --steps-csv)")
    p.save(fig, f"rank_breakdown_{suite}")


def all_figures(p, Skip):
    for suite in suites(p.dir):
        p.attempt(f"rank_breakdown_{suite}", rank_breakdown, p, Skip, suite)


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    if not os.path.isdir(sys.argv[1]):
        print(f"breakdown_plot.py: no folder {sys.argv[1]}", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.join(ROOT, "plots"))
    import make_plots  # the Plotter: titles, legend, PNG + SVG (plots/make_plots.py)
    p = make_plots.Plotter(sys.argv[1])
    all_figures(p, make_plots.Skip)
    for name in p.made:
        print(f"  {p.plots}/{name}.png (+ .svg)")
    for note in p.skipped:
        print(f"  skipped {note}")
    return 1 if not p.made else 0


if __name__ == "__main__":
    sys.exit(main())
