"""core_plots.py: the figures of plots/make_plots.py that every results folder gets: speedup,
breakdown_<suite>, accuracy_<suite>, scaling_grid, micro_busbw and time_to_accuracy, as the
methods of CoreFigures (make_plots.Plotter's base); the names and Skip they share. Needs
matplotlib; run make_plots.py:

  /usr/bin/python3 plots/make_plots.py RESULTS_DIR
"""
import glob
import math
import os
import statistics

import matplotlib
import matplotlib.pyplot as plt

import suite_results as rr  # (scripts/ on sys.path: make_plots.py) CSV and benchmark readers
import suitelib as rs  # suite files
import cluster_plots  # the cluster suite's micro file, which has its own figure
from summary import micro_peer_rows

MODEL_NAME = {"lenet": "LeNet", "resnet18": "ResNet-18"}
GRAD_BYTES = {516272: "LeNet gradients", 44703272: "ResNet-18 gradients"}  # dpbench-micro's sizes
SPEED_KEYS = ("model", "devices", "global_batch", "allreduce", "grad_sync", "overlap", "bucket_mb",
              "launcher")

# dpbench-micro's collective families and their titles (collectives/shard.h; nccl-tests' busbw).
MICRO_FAMILIES = {"allreduce": "all-reduce", "reducescatter": "reduce-scatter",
                  "allgather": "all-gather"}


class Skip(Exception):
    """A figure without the data it needs."""


def short(name, model):
    """Run name without its model prefix (the panel names the model)."""
    return name[len(model) + 1:] if name.startswith(model + "-") else name


def acc_ylim(ax):
    """From 0, and at least to 0.3, so that noise around chance (0.1) does not look like a trend."""
    ax.set_ylim(0, max(0.3, ax.get_ylim()[1]))


def peer_label(name, impl):
    return name if impl == "dpbench" else f"{name} [{impl}]"


def legend_below(ax, n, **kw):
    if n <= 5:
        ax.legend(loc="best", **kw)
    else:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3 if n > 8 else 2,
                  fontsize=7, **kw)


class CoreFigures:
    """Plotter's figures of every results folder (make_plots.Plotter: self.summary, .results,
    .title, .save, ...)."""

    # ------------------------------------------------------------------ figures

    def speedup(self):
        """Speedup vs devices: one line per suite and batch rule (global batch fixed or per-device
        batch fixed), median over the runs that differ only in lr."""
        rows = [r for r in self.summary if r["suite"] not in ("sync", "smoke")
                and r["speedup"] is not None and not r["scenario"].endswith(rs.MPI_SUFFIX)]
        models = sorted({r["model"] for r in rows})
        if not rows or max(r["devices"] for r in rows) < 2:
            raise Skip("no suite with runs on 1 and more devices")
        fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 4.2), squeeze=False)
        maxk = max(r["devices"] for r in rows)
        for ax, m in zip(axes[0], models):
            mr = [r for r in rows if r["model"] == m]
            ks = list(range(1, maxk + 1))
            ax.plot(ks, ks, color="0.5", ls=":", lw=1.2, label="ideal (linear)")
            base = {r["suite"]: r["global_batch"] for r in mr if r["devices"] == 1}
            series = {}
            for r in mr:
                if r["devices"] == 1:
                    continue
                rule = ("global batch fixed" if r["global_batch"] == base.get(r["suite"])
                        else "per-device batch fixed")
                series.setdefault((r["suite"], rule), []).append(r)
            for i, ((suite, rule), sr) in enumerate(sorted(series.items())):
                by_k = {}
                for r in sr:
                    by_k.setdefault(r["devices"], []).append(r)
                pts = [(1, 1.0, False)] + [
                    (k, statistics.median(r["speedup"] for r in v), any(r["shared_gpu"] for r in v))
                    for k, v in sorted(by_k.items())]
                shared = any(p[2] for p in pts)
                color = f"C{i}"
                eff = ", ".join(f"{s / k:.0%}" for k, s, _ in pts[1:])
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, marker="o",
                        ls="--" if shared else "-", mfc="white" if shared else color,
                        label=f"{suite}: {rule} (eff. {eff})" + (" (shared GPU)" if shared else ""))
            ax.set_xticks(ks)
            ax.set_xlabel("devices k")
            ax.set_ylabel("speedup (1-device epoch time / epoch time)")
            ax.set_title(MODEL_NAME.get(m, m))
            ax.set_ylim(0, maxk + 0.3)
            ax.legend(loc="upper left")
        self.title(fig, "Speedup vs devices (eff. = speedup / k at each k > 1)",
                   [r for s in self.results.values() for r in s if r["suite"] not in
                    ("sync", "smoke")])
        self.save(fig, "speedup")

    def breakdown(self, suite, rows):
        """Stacked horizontal bars: compute, data, exposed comm per speed-relevant configuration
        (runs that differ only in lr or warmup are one bar, their median)."""
        runs = rr.group_runs(rows)
        groups = {}
        for eps in runs.values():
            e0 = eps[0]
            key = tuple((e0.get(k) or "threads") if k == "launcher" else e0[k]
                        for k in SPEED_KEYS)
            groups.setdefault(key, []).append(eps)
        if not groups:
            raise Skip("no runs")
        def varying(model):  # the settings that differ between this model's bars
            keys = [g for g in groups if g[0] == model]
            return [i for i, k in enumerate(SPEED_KEYS)
                    if k != "model" and len({g[i] for g in keys}) > 1]

        def label(key):
            parts = []
            for i in varying(key[0]):
                k, v = SPEED_KEYS[i], key[i]
                if k == "devices":
                    parts.append(f"k={int(v)}")
                elif k == "global_batch":
                    parts.append(f"batch {int(v)}")
                elif k == "bucket_mb":
                    parts.append(f"{v:g} MB")
                elif int(key[1]) > 1 or k not in ("allreduce", "grad_sync", "overlap"):
                    parts.append(f"overlap {v}" if k == "overlap" else str(v))
            return " ".join(parts).replace(" overlap", ", overlap") or f"k={int(key[1])}"

        models = sorted({k[0] for k in groups})
        n_max = max(sum(1 for k in groups if k[0] == m) for m in models)
        fig, axes = plt.subplots(1, len(models), figsize=(5.6 * len(models), 1.2 + 0.32 * n_max),
                                 squeeze=False)
        parts = (("compute_s", "compute", "C0"), ("data_s", "data", "C2"),
                 ("exposed_comm_s", "exposed communication", "C3"))
        for ax, m in zip(axes[0], models):
            keys = sorted((k for k in groups if k[0] == m), key=lambda k: (k[1], k[2], k[3:]))
            for y, key in enumerate(keys):
                vals = {p: statistics.median(rr.steady_epoch_s(eps, p) for eps in groups[key])
                        for p, _, _ in parts + (("comm_s", "", ""),)}
                shared = any(eps[0]["shared_gpu"] for eps in groups[key])
                left = 0.0
                for p, name, color in parts:
                    ax.barh(y, vals[p], left=left, color=color, hatch="//" if shared else None,
                            edgecolor="white" if not shared else "black", lw=0.3,
                            label=name if y == 0 else None)
                    left += vals[p]
                if vals["comm_s"] > 0:
                    ax.plot([vals["comm_s"]], [y], marker="|", ms=12, mew=2, color="black",
                            label="all comm time, incl. hidden (rank 0)"
                            if not any("incl" in str(t) for t in
                                       ax.get_legend_handles_labels()[1]) else None)
                ax.text(left, y, f" {left:.2f}", va="center", fontsize=7)
            ax.set_yticks(range(len(keys)))
            ax.set_yticklabels([label(k) + (" (OUT OF SYNC)" if any(
                e["replicas_in_sync"] != 1 for eps in groups[k] for e in eps) else "")
                for k in keys])
            ax.invert_yaxis()
            ax.set_xlabel("s per epoch (median over epochs 2..n)")
            ax.set_title(MODEL_NAME.get(m, m))
            ax.margins(x=0.15)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0), ncol=4)
        self.title(fig, f"Epoch time breakdown, suite {suite}", rows)
        self.save(fig, f"breakdown_{suite}")

    def accuracy(self, suite, rows):
        """Test accuracy per epoch; a peer's repeat of a run in the run's colour, dotted."""
        runs = rr.group_runs(rows)
        models = sorted({eps[0]["model"] for eps in runs.values()})
        fig, axes = plt.subplots(1, len(models), figsize=(5.6 * len(models), 4.4), squeeze=False)
        for ax, m in zip(axes[0], models):
            items = [(k, eps) for k, eps in runs.items() if eps[0]["model"] == m]
            names = list(dict.fromkeys(k[1] for k, _ in items))
            cmap = plt.get_cmap("tab20" if len(names) > 10 else "tab10")
            for key, eps in items:
                shared = any(e["shared_gpu"] for e in eps)
                ax.plot([e["epoch"] for e in eps], [e["test_acc"] for e in eps],
                        marker="o" if key[2] == "dpbench" else "s", ms=3,
                        color=cmap(names.index(key[1]) % cmap.N),
                        ls=":" if key[2] != "dpbench" else "--" if shared else "-",
                        label=peer_label(short(key[1], m), key[2]) +
                        (" (shared GPU)" if shared else "") +
                        (" (OUT OF SYNC)" if any(e["replicas_in_sync"] not in (1, None)
                                                 for e in eps) else "") +
                        (" (diverged)" if rr.diverged_epoch(eps) else ""))
            acc_ylim(ax)
            ax.set_xlabel("epoch")
            ax.set_ylabel("test accuracy (fraction)")
            ax.set_title(MODEL_NAME.get(m, m) + self.time_only(suite, m, rows))
            ax.xaxis.get_major_locator().set_params(integer=True)
            legend_below(ax, len(items))
        self.title(fig, f"Test accuracy per epoch, suite {suite}", rows)
        self.save(fig, f"accuracy_{suite}")

    @staticmethod
    def time_only(suite, model, rows):
        """A note for a model that a suite's quick mode runs for time only (no quick target)."""
        try:
            s = rs.load_suite(suite)
        except SystemExit:
            return ""
        quick = any(r["quick"] for r in rows if r["model"] == model)
        return ("\n(time only in quick mode: too few steps for a meaningful accuracy)"
                if quick and model in s.quick_targets and s.target(model, True) is None else "")

    def scaling_grid(self):
        rows = [r for r in self.summary if r["suite"] == "scaling"]
        if not rows:
            raise Skip("no scaling suite results")
        models = sorted({r["model"] for r in rows})
        warm = sorted({r["warmup_epochs"] > 0 for r in rows})
        fig, axes = plt.subplots(len(models), len(warm), figsize=(4.4 * len(warm),
                                                                  3.3 * len(models)),
                                 squeeze=False)
        im = None
        for i, m in enumerate(models):
            for j, w in enumerate(warm):
                ax = axes[i][j]
                sub = [r for r in rows if r["model"] == m and (r["warmup_epochs"] > 0) == w]
                lrs = sorted({r["lr"] for r in sub})
                bs = sorted({r["global_batch"] for r in sub})
                grid = [[None] * len(lrs) for _ in bs]
                ks = [[[] for _ in lrs] for _ in bs]
                gone = [[[] for _ in lrs] for _ in bs]  # the k whose run diverged
                for r in sub:
                    y, x = bs.index(r["global_batch"]), lrs.index(r["lr"])
                    if r.get("diverged_epoch"):  # its accuracy is no result: no colour
                        gone[y][x].append(r["devices"])
                    else:
                        grid[y][x] = (grid[y][x] or []) + [r["final_acc"]]
                    ks[y][x].append(r["devices"])
                data = [[statistics.mean(c) if c else math.nan for c in row] for row in grid]
                cmap = plt.get_cmap("viridis").copy()
                cmap.set_bad("0.93")  # not run
                im = ax.imshow(data, cmap=cmap, vmin=0, vmax=1, origin="lower",
                               aspect="auto")
                for y in range(len(bs)):
                    for x in range(len(lrs)):
                        k_all = f"k={','.join(map(str, sorted(ks[y][x])))}"
                        div = (f"\ndiverged k={','.join(map(str, sorted(gone[y][x])))}"
                               if gone[y][x] else "")
                        if grid[y][x]:
                            v = data[y][x]
                            ax.text(x, y, f"{v:.3f}\n{k_all}{div}",
                                    ha="center", va="center", fontsize=7,
                                    color="white" if v < 0.6 else "black")
                        elif gone[y][x]:
                            ax.text(x, y, f"diverged\n{k_all}", ha="center", va="center",
                                    fontsize=7, color="firebrick")
                ax.set_xticks(range(len(lrs)))
                ax.set_xticklabels([f"{v:g}" for v in lrs])
                ax.set_yticks(range(len(bs)))
                ax.set_yticklabels([str(b) for b in bs])
                ax.set_xlabel("learning rate")
                ax.set_ylabel("global batch (examples)")
                ax.grid(False)
                ax.set_title(f"{MODEL_NAME.get(m, m)}, "
                             + ("gradual warmup" if w else "no warmup"))
        fig.colorbar(im, ax=axes, label="final test accuracy (fraction)", shrink=0.8)
        self.title(fig, "Final test accuracy over global batch x lr (suite scaling)",
                   self.results.get("scaling", []))
        self.save(fig, "scaling_grid")

    # dpbench-micro's collective families (bench/allreduce_bench.cpp), a row of micro_busbw each.
    def micro(self):
        files = sorted(f for f in glob.glob(os.path.join(self.dir, "micro-*.json"))
                       if os.path.basename(f) != cluster_plots.MICRO_FILE)  # its own figure
        if not files:
            raise Skip("no micro-*.json (dpbench-micro not built or not run)")
        pts = []
        for f in files:
            try:
                bench, _ = rr.read_micro(f)
            except ValueError as e:
                self.skipped.append(f"micro data {os.path.basename(f)}: unreadable ({e})")
                continue
            pts += [b for b in bench if b.get("family") in MICRO_FAMILIES and "bytes" in b
                    and "busbw_GBps" in b]
        pts += [{"family": "allreduce", "backend": "cpu", "alg": p["impl"], "ranks": p["ranks"],
                 "bytes": p["bytes"], "busbw_GBps": p["busbw_GBps"], "wrong": p["wrong"]}
                for p in micro_peer_rows(self.dir)]  # the OpenMPI peer (--peers)
        if not pts:
            raise Skip("no allreduce benchmarks with bytes and busbw_GBps in " +
                       ", ".join(os.path.basename(f) for f in files))
        backends = sorted({b.get("backend", "?") for b in pts})
        families = [f for f in MICRO_FAMILIES if any(b["family"] == f for b in pts)]
        fig, axes = plt.subplots(len(families), len(backends),
                                 figsize=(6 * len(backends), 4.3 * len(families)), squeeze=False)
        algs = sorted({b.get("alg", "?") for b in pts})
        ranks_all = sorted({b.get("ranks", 0) for b in pts})
        styles = ["-", "--", ":", "-."]
        for (fam, be), ax in zip([(f, be) for f in families for be in backends], axes.flat):
            for a_i, alg in enumerate(algs):
                for r_i, ranks in enumerate(ranks_all):
                    line = {}
                    for b in pts:
                        if b["family"] == fam and b.get("backend") == be and b.get("alg") == alg and \
                                b.get("ranks", 0) == ranks:
                            line.setdefault(b["bytes"], []).append(b["busbw_GBps"])
                    if not line:
                        continue
                    xs = sorted(line)
                    ax.plot(xs, [statistics.median(line[x]) for x in xs], marker="o", ms=3,
                            color=f"C{a_i}", ls=styles[r_i % len(styles)],
                            label=f"{alg}, {ranks} ranks")
            if not ax.lines:
                ax.set_visible(False)
                continue
            for size in sorted({b["bytes"] for b in pts if b["bytes"] & (b["bytes"] - 1)}):
                ax.axvline(size, color="0.4", ls=":", lw=0.8)  # not a power of two: a model's
                ax.text(size, 1.0, " " + GRAD_BYTES.get(size, "model gradients"), rotation=90,
                        va="top", ha="right", fontsize=7, transform=ax.get_xaxis_transform())
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
                lambda v, _: next((f"{v / 2**p:g} {u}" for p, u in ((30, "GiB"), (20, "MiB"),
                                                                      (10, "KiB"), (0, "B"))
                                   if v >= 2**p), f"{v:g} B")))
            ax.set_xlabel("message size (bytes per rank" +
                          (")" if fam == "allreduce" else ": the whole buffer)"))
            ax.set_ylabel("bus bandwidth (GB/s)")
            ax.set_title(f"{MICRO_FAMILIES[fam]}, backend {be}")
            ax.legend()
        wrong = sorted({f"{b['family']} {b.get('alg')} {b.get('ranks')} ranks" for b in pts
                        if b.get("wrong")})
        self.title(fig, " / ".join(MICRO_FAMILIES[f] for f in families) +
                   " bus bandwidth vs message size", [],
                   "busbw = algbw x 2(k-1)/k (all-reduce), x (k-1)/k (reduce-scatter, all-gather);"
                   " dotted: the models' gradient sizes" +
                   (f"\nWARNING: wrong results from {', '.join(wrong)}" if wrong else ""))
        self.save(fig, "micro_busbw")

    def time_to_accuracy(self):
        suites = [s for s in self.results if s not in ("sync", "smoke")]
        panels = []
        for s in suites:
            try:
                suite = rs.load_suite(s)
            except SystemExit:
                continue
            runs = rr.group_runs(self.all_results[s])  # with the peers
            for m in sorted({eps[0]["model"] for eps in runs.values()}):
                items = [(k, eps) for k, eps in runs.items() if eps[0]["model"] == m]
                target = suite.target(m, bool(items[0][1][0]["quick"]))
                if target is not None:
                    panels.append((s, m, target, items))
        if not panels:
            raise Skip("no suite with a target accuracy has results")
        ncol = min(2, len(panels))
        nrow = math.ceil(len(panels) / ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(5.8 * ncol, 3.9 * nrow), squeeze=False)
        for ax in axes.flat[len(panels):]:
            ax.set_visible(False)
        for ax, (s, m, target, items) in zip(axes.flat, panels):
            names = list(dict.fromkeys(k[1] for k, _ in items))
            cmap = plt.get_cmap("tab20" if len(names) > 10 else "tab10")
            for key, eps in items:
                t, xs = 0.0, []
                for e in eps:
                    t += e["epoch_s"]
                    xs.append(t)
                shared = any(e["shared_gpu"] for e in eps)
                tta = rr.time_to_acc(eps, target)
                ax.plot(xs, [e["test_acc"] for e in eps], ms=3,
                        marker="o" if key[2] == "dpbench" else "s",
                        color=cmap(names.index(key[1]) % cmap.N),
                        ls=":" if key[2] != "dpbench" else "--" if shared else "-",
                        label=f"{peer_label(short(key[1], m), key[2])}: " +
                        (f"{tta:.3g} s" if tta is not None else
                         "diverged" if rr.diverged_epoch(eps) else "not reached"))
            ax.axhline(target, color="black", lw=0.8, ls=":")
            ax.text(0.01, target, f"target {target:.2f}", va="bottom", fontsize=7,
                    transform=ax.get_yaxis_transform())
            ax.set_xlim(left=0)
            acc_ylim(ax)
            ax.set_xlabel("training time (s, sum of epoch times)")
            ax.set_ylabel("test accuracy (fraction)")
            ax.set_title(f"{s}: {MODEL_NAME.get(m, m)}")
            legend_below(ax, len(items), title="time to target")
        self.title(fig, "Time to accuracy",
                   [r for s in suites for r in self.results[s]])
        self.save(fig, "time_to_accuracy")
