"""peer_plots.py: the peers figure of plots/make_plots.py (./run_all.sh --peers): for every suite
with peer rows, the epoch time of each dpbench run beside the peers' repeats of it (same data,
recipe and device count, same run), with the ratio peer / dpbench written on each peer's bar."""
import matplotlib.pyplot as plt

PEER_COLORS = {"dpbench": "C0", "pytorch": "C1", "pytorch-ddp": "C3", "jax": "C2"}


def peers(p, Skip, model_names):
    """p: the make_plots Plotter (its all_summary rows include the peers); Skip: its exception
    for a figure without data."""
    rows = p.all_summary
    suites = [s for s in dict.fromkeys(r["suite"] for r in rows)
              if any(r["suite"] == s and r["impl"] != "dpbench" for r in rows)]
    if not suites:
        raise Skip("no peer rows (./run_all.sh --peers)")
    fig, axes = plt.subplots(1, len(suites), figsize=(6 * len(suites), 1.6 + 0.5 * max(
        sum(1 for r in rows if r["suite"] == s) for s in suites)), squeeze=False)
    for ax, suite in zip(axes[0], suites):
        sr = [r for r in rows if r["suite"] == suite and r["epoch_s"]]
        ours = {r["scenario"]: r for r in sr if r["impl"] == "dpbench"}
        pairs = [r for r in sr if r["impl"] != "dpbench" and r["scenario"] in ours]
        scen = list(dict.fromkeys(r["scenario"] for r in pairs))
        y, ypos, labels, seen = 0.0, [], [], set()
        for name in scen:  # one group of bars per dpbench run: dpbench first, then its peers
            for r in [ours[name]] + [r for r in pairs if r["scenario"] == name]:
                ax.barh(y, r["epoch_s"], color=PEER_COLORS.get(r["impl"], "C4"),
                        label=r["impl"] if r["impl"] not in seen else None)
                seen.add(r["impl"])
                ratio = r["epoch_s"] / ours[name]["epoch_s"]
                ax.text(r["epoch_s"], y, f" {r['epoch_s']:.2f} s" + (
                    "" if r["impl"] == "dpbench" else f" ({ratio:.2f}x dpbench)"),
                    va="center", fontsize=7)
                ypos.append(y)
                labels.append(f"{name} (k={r['devices']}) {r['impl']}")
                y += 1
            y += 0.5
        ax.set_yticks(ypos)
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("s per epoch (median over epochs 2..n; training only)")
        models = sorted({model_names.get(r["model"], r["model"]) for r in pairs})
        ax.set_title(f"suite {suite}: {', '.join(models)}")
        ax.margins(x=0.35)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4)
    p.title(fig, "dpbench and its peers on the same runs (epoch time; ratio = peer / dpbench)",
            [r for s in suites for r in p.all_results[s]])
    p.save(fig, "peers")
