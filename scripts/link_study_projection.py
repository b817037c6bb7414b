"""link_study_projection.py: the projection side of scripts/link_study.py: `dpbench project`
against emulated `dpbench train` runs (check, shard-check, nodes-check), the projected speedup on
named links (figure), their tables, and the helpers every mode uses (run, write_csv, machine_note,
pyplot, save). Imported by link_study.py; run that:

  scripts/link_study.py check|shard-check|nodes-check|figure --out DIR
"""
import csv
import json
import os
import statistics
import subprocess
import sys
import time

# Named links: dpbench's table (collectives/named_links.cpp, with its sources; `dpbench info`
# lists it as "named_links"), so the figure and `dpbench project --link NAME` cannot disagree.
# The figure draws these four of them.
FIGURE_LINKS = "pcie4 nvlink-h100 eth100 ib-ndr400".split()


def named_links(bin_path):
    """[(name, G Gb/s, L us)] of FIGURE_LINKS, from `dpbench info`."""
    table = {e["name"]: e for e in json.loads(run([bin_path, "info"]))["named_links"]}
    return [(n, table[n]["gbps"], table[n]["latency_us"]) for n in FIGURE_LINKS]
DEVICES = [1, 2, 4, 8, 16, 32, 64]

# The projection check: per model, the data subset, two emulated links (slow, fast; 50 us) and the
# gradient sync whose overlap is switched on and off.
CHECK = {
    "lenet": dict(batch=256, train=2048, links=[0.02, 0.1], sync=["--grad-sync", "per-param"],
                  profile_steps=20),  # LeNet's steps take milliseconds: more of them, less noise
    "resnet18": dict(batch=32, train=128, links=[0.25, 1.0],
                     sync=["--grad-sync", "bucketed", "--bucket-mb", "5"], profile_steps=5),
}
CHECK_LATENCY_US = 50.0

# --shard's modes (src/train/shard.h's table; `dpbench train --help` lists them).
SHARD_MODES = ["none", "optimizer", "gradients", "parameters"]
# The sharded modes' projection check (--shard, `dpbench train --shard`): per model, its flags,
# the global batch, the training examples per run, the emulated links (50 us) and the profile
# steps; every mode at k = 2, 4, overlap off and on. The links make communication about 2/3 of
# a replicated step, so that both the schedule and the overlap count, while the compute's noise
# on a shared machine (its ranks time-slice with other work) weighs less.
SHARD_CHECK = {
    "mlp": dict(args=["--model", "mlp", "--mlp-layers", "4", "--mlp-hidden", "512",
                      "--data", "synthetic"], batch=256, train=4096, links=[1.0],
                sync=["--grad-sync", "per-param"], profile_steps=10),
    "lenet": dict(args=["--model", "lenet"], batch=256, train=2048, links=[0.03],
                  sync=["--grad-sync", "per-param"], profile_steps=20),
}

# The two-level check (issue 26): `dpbench project` vs `dpbench train` on G x N emulated nodes
# (threads, --nodes N), the network NODES_SLOWER times slower than the link inside a node (G down,
# L up), per model: its flags, global batch, training examples, the intra-node link (Gb/s, us),
# the gradient sync and profile steps. The links make communication a large part of a step, so
# the flat ring and hier differ.
NODES_CHECK = {
    "mlp": dict(args=["--model", "mlp", "--mlp-layers", "4", "--mlp-hidden", "512",
                      "--data", "synthetic"], batch=256, train=2048, link=(10.0, 50.0),
                sync=["--grad-sync", "per-param"], profile_steps=10),
    "lenet": dict(args=["--model", "lenet"], batch=256, train=2048, link=(1.0, 50.0),
                  sync=["--grad-sync", "per-param"], profile_steps=20),
}
NODES_SLOWER = 10.0


def run(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE, **kw).stdout


def write_csv(path, rows):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def machine_note():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, out, name):
    os.makedirs(os.path.join(out, "plots"), exist_ok=True)
    for ext in ("png", "svg"):
        path = os.path.join(out, "plots", f"{name}.{ext}")
        tmp = f"{path}.tmp{os.getpid()}"
        fig.savefig(tmp, format=ext, bbox_inches="tight", dpi=110)
        os.replace(tmp, path)
    print(f"wrote {out}/plots/{name}.png and .svg")


# ----------------------------------------------------------------------------- check


def train_args(model, k, gbps, overlap):
    c = CHECK[model]
    return (["--model", model, "--devices", str(k), "--batch", str(c["batch"]), "--allreduce",
             "ring", "--overlap", overlap, "--link-gbps", str(gbps), "--link-latency-us",
             str(CHECK_LATENCY_US if k > 1 else 0)] + c["sync"])


def measure_and_project(a, args, train, csv_path, prof, profile_steps):
    """One emulated `dpbench train` run (the median epoch after the first) and `dpbench project`
    with the same flags, its profile (written to prof) measured right after the run, so that it
    shares the run's conditions (on a shared machine other work comes and goes within minutes).
    Returns (measured epoch s, measured exposed s, the projection's JSON)."""
    run([a.bin, "train"] + args + ["--train-limit", str(train), "--test-limit", "64", "--epochs",
        str(a.epochs), "--quiet", "--csv", csv_path])
    with open(csv_path) as f:  # this run's epochs after the first (warm-up)
        eps = list(csv.DictReader(f))[-a.epochs:]
    eps = eps[1:] or eps
    measured = statistics.median(float(e["epoch_s"]) for e in eps)
    exposed = statistics.median(float(e["exposed_comm_s"]) for e in eps)
    pred = json.loads(run([a.bin, "project"] + args + ["--train-limit", str(train), "--profile-out",
                                                       prof, "--profile-steps", str(profile_steps)]))
    return measured, exposed, pred


def outcome(measured, exposed, pred, comm=True):
    """One point's columns that every check writes: the projected vs the measured epoch and
    exposed communication (comm: also the projection's whole communication)."""
    d = dict(predicted_s=round(pred["epoch_s"], 4), measured_s=round(measured, 4),
             error_pct=round((pred["epoch_s"] / measured - 1) * 100, 1))
    if comm:
        d["predicted_comm_s"] = round(pred["comm_s"], 4)
    d.update(predicted_exposed_s=round(pred["exposed_comm_s"], 4),
             measured_exposed_s=round(exposed, 4))
    return d


def kept_rows(out_csv, models):
    """A check's earlier rows of the models not run this time (a check can run one model at a
    time): they stay in its CSV."""
    if not os.path.exists(out_csv):
        return []
    with open(out_csv) as f:
        return [r for r in csv.DictReader(f) if r["model"] not in models]


def error_summary(errs):
    """|error| percentages of a check: median, max, how many within the 15% target."""
    return (f"|error| median {statistics.median(errs):.1f}%, max {max(errs):.1f}%, "
            f"{sum(x <= 15 for x in errs)}/{len(errs)} within 15%")


def cmd_check(a):
    csv_path = os.path.join(a.out, "link-check-train.csv")
    rows = [{k: (v if k in ("model", "overlap") else float(v)) for k, v in r.items()}
            for r in kept_rows(os.path.join(a.out, "link-check.csv"), a.models)]
    for model, c in CHECK.items():
        if model not in a.models:
            continue
        base = None
        train = a.train_limit or c["train"]
        for k in a.ks:
            for gbps in (c["links"] if k > 1 else [0]):
                for overlap in (("off", "on") if k > 1 else ("off",)):
                    args = train_args(model, k, gbps, overlap)
                    t0 = time.time()
                    prof = os.path.join(a.out, f"link-profile-{model}-k{k}-{gbps:g}-{overlap}.json")
                    measured, exposed, pred = measure_and_project(
                        a, args, train, csv_path, prof, a.profile_steps or c["profile_steps"])
                    if k == 1:
                        base = (measured, pred["epoch_s"])
                    rows.append(dict(model=model, devices=k, link_gbps=gbps,
                                     link_latency_us=CHECK_LATENCY_US if k > 1 else 0,
                                     overlap=overlap, **outcome(measured, exposed, pred, comm=False),
                                     measured_speedup=round(base[0] / measured, 3) if base else "",
                                     predicted_speedup=round(base[1] / pred["epoch_s"], 3) if base else "",
                                     wall_s=round(time.time() - t0, 1)))
                    write_csv(os.path.join(a.out, "link-check.csv"), rows)
    print(f"\nProjection vs emulated runs (median of epochs 2..{a.epochs}; {machine_note()})")
    print(f"{'model':9} {'k':>2} {'Gb/s':>5} {'ovl':>3} {'predicted s':>11} {'measured s':>10} "
          f"{'error':>7}  exposed pred/meas")
    for r in rows:
        print(f"{r['model']:9} {int(r['devices']):>2} {r['link_gbps']:>5g} {r['overlap']:>3} "
              f"{r['predicted_s']:>11.3f} {r['measured_s']:>10.3f} {r['error_pct']:>6.1f}%  "
              f"{r['predicted_exposed_s']:.3f}/{r['measured_exposed_s']:.3f}")


# ----------------------------------------------------------------------------- figure


def project(a, model, k, gbps, lat, profile, cores, extra):
    out = run([a.bin, "project", "--model", model, "--devices", str(k), "--batch", "256",
               "--allreduce", "ring", "--link-gbps", str(gbps), "--link-latency-us", str(lat),
               "--cores", str(cores), "--profile", profile] + extra)
    return json.loads(out)


def cmd_shard_check(a):
    """dpbench project --shard MODE vs dpbench train --shard MODE on an emulated link."""
    csv_path = os.path.join(a.out, "link-shard-check-train.csv")
    out_csv = os.path.join(a.out, "link-shard-check.csv")
    rows = kept_rows(out_csv, a.models)
    modes = a.shards or SHARD_MODES
    for model, c in SHARD_CHECK.items():
        if model not in a.models:
            continue
        train = a.train_limit or c["train"]
        for k in a.ks:
            for gbps in c["links"]:
                for mode in modes:
                    for overlap in ("off", "on"):
                        args = (c["args"] + ["--devices", str(k), "--batch", str(c["batch"]),
                                "--allreduce", "ring", "--overlap", overlap, "--shard", mode,
                                "--link-gbps", str(gbps), "--link-latency-us",
                                str(CHECK_LATENCY_US)] + c["sync"])
                        t0 = time.time()
                        prof = os.path.join(a.out, f"link-shard-profile-{model}-k{k}-{mode}-{overlap}.json")
                        measured, exposed, pred = measure_and_project(
                            a, args, train, csv_path, prof, a.profile_steps or c["profile_steps"])
                        rows.append(dict(model=model, devices=k, link_gbps=gbps,
                                         link_latency_us=CHECK_LATENCY_US, shard=mode,
                                         overlap=overlap, **outcome(measured, exposed, pred),
                                         calls_per_step=pred["calls_per_step"],
                                         load=round(os.getloadavg()[0], 1),
                                         wall_s=round(time.time() - t0, 1)))
                        write_csv(out_csv, rows)
    print(f"\nSharded modes: projection vs emulated runs (ring, {CHECK_LATENCY_US:g} us; median of "
          f"epochs 2..{a.epochs}; {machine_note()})")
    print(f"{'model':6} {'k':>2} {'Gb/s':>5} {'shard':10} {'ovl':>3} {'predicted s':>11} "
          f"{'measured s':>10} {'error':>7} {'load':>5}")
    errs = {}
    for r in rows:
        err = float(r["error_pct"])
        errs.setdefault(r["shard"], []).append(abs(err))
        print(f"{r['model']:6} {int(r['devices']):>2} {float(r['link_gbps']):>5g} {r['shard']:10} "
              f"{r['overlap']:>3} {float(r['predicted_s']):>11.3f} {float(r['measured_s']):>10.3f} "
              f"{err:>6.1f}% {float(r['load']):>5.1f}")
    for mode, e in errs.items():
        print(f"{mode:10}: {error_summary(e)}")


def cmd_nodes_check(a):
    """dpbench project vs dpbench train on G x N emulated nodes: algorithms x overlap x shard."""
    csv_path = os.path.join(a.out, "link-nodes-check-train.csv")
    out_csv = os.path.join(a.out, "link-nodes-check.csv")
    rows = kept_rows(out_csv, a.models)
    for model, c in NODES_CHECK.items():
        if model not in a.models:
            continue
        train = a.train_limit or c["train"]
        gbps, lat = c["link"]
        for shape in a.shapes:
            per_node, nodes = (int(x) for x in shape.split("x"))
            for alg in a.algs:
                for mode in a.shards or ["none"]:
                    for overlap in ("off", "on"):
                        args = (c["args"] + ["--devices", str(per_node * nodes), "--nodes",
                                str(nodes), "--batch", str(c["batch"]), "--allreduce", alg,
                                "--overlap", overlap, "--shard", mode,
                                "--link-gbps", str(gbps), "--link-latency-us", str(lat),
                                "--node-link-gbps", str(gbps / NODES_SLOWER),
                                "--node-link-latency-us", str(lat * NODES_SLOWER)] + c["sync"])
                        t0 = time.time()
                        prof = os.path.join(a.out, f"link-nodes-profile-{model}-{shape}-{alg}-"
                                                   f"{mode}-{overlap}.json")
                        measured, exposed, pred = measure_and_project(
                            a, args, train, csv_path, prof, a.profile_steps or c["profile_steps"])
                        rows.append(dict(model=model, shape=shape, devices=per_node * nodes,
                                         nodes=nodes, link_gbps=gbps, link_latency_us=lat,
                                         node_link_gbps=gbps / NODES_SLOWER,
                                         node_link_latency_us=lat * NODES_SLOWER, allreduce=alg,
                                         shard=mode, overlap=overlap,
                                         **outcome(measured, exposed, pred),
                                         load=round(os.getloadavg()[0], 1),
                                         wall_s=round(time.time() - t0, 1)))
                        write_csv(out_csv, rows)
    print(f"\nTwo levels: projection vs emulated runs (network {NODES_SLOWER:g}x slower than the "
          f"node's link; median of epochs 2..{a.epochs}; {machine_note()})")
    print(f"{'model':6} {'GxN':>4} {'alg':5} {'shard':10} {'ovl':>3} {'predicted s':>11} "
          f"{'measured s':>10} {'error':>7} {'load':>5}")
    errs = []
    for r in rows:
        err = float(r["error_pct"])
        errs.append(abs(err))
        print(f"{r['model']:6} {r['shape']:>4} {r['allreduce']:5} {r['shard']:10} "
              f"{r['overlap']:>3} {float(r['predicted_s']):>11.3f} {float(r['measured_s']):>10.3f} "
              f"{err:>6.1f}% {float(r['load']):>5.1f}")
    if errs:
        print(error_summary(errs))


def cmd_figure(a):
    sync = ["--grad-sync", "bucketed", "--bucket-mb", "25", "--overlap", "on"]
    links = named_links(a.bin)
    rows = []
    for model in CHECK:  # the models this study has settings for
        prof = a.profile.get(model) if a.profile else None
        if not prof:
            prof = os.path.join(a.out, f"link-profile-{model}-figure.json")
            if not os.path.exists(prof):  # one device at 16 images (seconds on a CPU); the
                # projection scales compute linearly to each device count's shard
                run([a.bin, "project", "--model", model, "--devices", "1", "--batch", "16",
                     "--backend", a.backend, "--profile-steps", "1", "--profile-out", prof])
        for name, gbps, lat in links:
            t1 = project(a, model, 1, gbps, lat, prof, 0, sync)["epoch_s"]
            for k in DEVICES:
                p = project(a, model, k, gbps, lat, prof, 0, sync)
                rows.append(dict(model=model, link=name, link_gbps=gbps, link_latency_us=lat,
                                 devices=k, epoch_s=p["epoch_s"], exposed_comm_s=p["exposed_comm_s"],
                                 speedup=t1 / p["epoch_s"], profile=prof))
    write_csv(os.path.join(a.out, "link-projection.csv"), rows)
    checked = []
    check_csv = os.path.join(a.out, "link-check.csv")
    if os.path.exists(check_csv):
        with open(check_csv) as f:
            checked = list(csv.DictReader(f))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(CHECK), figsize=(5.5 * len(CHECK), 4.2), squeeze=False)
    for ax, model in zip(axes[0], CHECK):
        for i, (name, gbps, lat) in enumerate(links):
            r = [x for x in rows if x["model"] == model and x["link"] == name]
            ax.plot([x["devices"] for x in r], [x["speedup"] for x in r], marker=".", color=f"C{i}",
                    label=f"{name}: {gbps:g} Gb/s, {lat:g} us (projected)")
        ax.plot(DEVICES, DEVICES, color="0.7", lw=0.8, ls=":", label="linear")
        for j, gbps in enumerate(sorted({float(c["link_gbps"]) for c in checked
                                         if c["model"] == model and float(c["link_gbps"]) > 0})):
            pts = [c for c in checked if c["model"] == model and float(c["link_gbps"]) == gbps
                   and c["overlap"] == "on" and c["predicted_speedup"] != ""]
            ax.plot([1] + [int(c["devices"]) for c in pts],
                    [1.0] + [float(c["predicted_speedup"]) for c in pts],
                    ls="--", color=f"C{4 + j}", lw=1,
                    label=f"emulated {gbps:g} Gb/s, {CHECK_LATENCY_US:g} us: projected, this machine")
            ax.plot([int(c["devices"]) for c in pts], [float(c["measured_speedup"]) for c in pts],
                    ls="none", marker="x", ms=8, color=f"C{4 + j}",
                    label=f"emulated {gbps:g} Gb/s: MEASURED (subset)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xticks(DEVICES)
        ax.set_xticklabels([str(d) for d in DEVICES])
        ax.set_xlabel("devices")
        ax.set_ylabel("speedup over 1 device (x: measured, lines: projected)")
        ax.set_title(f"{model}: global batch 256, ring, 25 MB buckets overlapped", fontsize=9)
        ax.legend(fontsize=6, loc="upper left")
    first = json.load(open(rows[0]["profile"]))
    fig.suptitle(f"dpbench project: speedup vs devices from a one-device {first['backend']} profile "
                 f"({first['device']}; {machine_note()}); named links: a device per rank",
                 fontsize=8)
    save(fig, a.out, "link-projection")
