#!/usr/bin/env python3
"""run_suite.py: run dpbench scenario suites (scenarios/*.ini) into a results folder, and summarize.

  scripts/run_suite.py list                                   # the suites and their runs
  scripts/run_suite.py run --out DIR --suite d2l-lenet,micro [--quick|--full] [--devices 1,2,4]
      [--backend cpu|cuda] [--bin build/dpbench] [--micro-bin build/dpbench-micro]
      [--set "--lr 0.1"] [--wrap "nsys profile -o DIR/{suite}-{scenario}"] [--dry-run]
  scripts/run_suite.py summary DIR                            # the summary table of a results folder

`run` writes DIR/<suite>.csv (dpbench's columns after `suite,scenario`, one header, rewritten
atomically after every run), DIR/micro-<suite>.json (+ .csv when scripts/bench_to_csv.py exists),
DIR/logs/<suite>/<scenario>.log and DIR/manifest.json (machine, versions, every command). Runs
already in DIR/<suite>.csv are skipped, so an interrupted run continues with the same --out.
Standard library only: it runs under any python3. plots/make_plots.py and scripts/check_regression
import the readers below.
"""
import argparse
import configparser
import csv
import fnmatch
import io
import json
import os
import platform
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = os.path.join(ROOT, "scenarios")
FLAGS_WITHOUT_VALUE = {"--tf32", "--quiet"}  # every other `dpbench train` flag takes one value

# ----------------------------------------------------------------------------- scenario files


@dataclass
class Run:
    suite: str
    name: str
    args: list  # final `dpbench train` arguments for the chosen mode (no --backend / --csv)


@dataclass
class Suite:
    name: str
    about: str = ""
    default: bool = True
    targets: dict = field(default_factory=dict)  # model -> test accuracy, full mode
    quick_targets: dict = field(default_factory=dict)
    runs: dict = field(default_factory=dict)  # name -> full args (list); insertion ordered
    cuda_runs: dict = field(default_factory=dict)
    quick: list = field(default_factory=list)  # (glob, args | None for skip), file order
    micro: dict = field(default_factory=dict)  # "cpu", "cpu.quick", ... -> args

    def target(self, model, quick):
        t = (self.quick_targets if quick else self.targets).get(model)
        return t if t is not None else self.targets.get(model)


def _targets(text):
    out = {}
    for item in text.split():
        model, _, acc = item.partition(":")
        out[model] = float(acc)
    return out


def suite_names():
    return sorted(f[:-4] for f in os.listdir(SCENARIOS) if f.endswith(".ini"))


def load_suite(name):
    path = os.path.join(SCENARIOS, name + ".ini")
    if not os.path.exists(path):
        raise SystemExit(f"run_suite: no suite '{name}' (known: {', '.join(suite_names())})")
    cp = configparser.ConfigParser(interpolation=None, delimiters=("=",), comment_prefixes=("#",),
                                   inline_comment_prefixes=None, strict=True)
    cp.optionxform = str  # run names keep their case
    cp.read(path)
    s = Suite(name)
    sec = cp["suite"] if cp.has_section("suite") else {}
    s.about = sec.get("about", "")
    s.default = sec.get("default", "yes").strip().lower() in ("yes", "true", "1")
    s.targets = _targets(sec.get("target", ""))
    s.quick_targets = _targets(sec.get("quick_target", ""))
    for secname, dest in (("runs", s.runs), ("runs.cuda", s.cuda_runs)):
        if cp.has_section(secname):
            for k, v in cp[secname].items():
                dest[k] = shlex.split(v)
    if cp.has_section("quick"):
        for k, v in cp["quick"].items():
            s.quick.append((k, None if v.strip() == "skip" else shlex.split(v)))
    if cp.has_section("micro"):
        s.micro = dict(cp["micro"].items())
    return s


def merge_args(base, override):
    """`dpbench train` arguments with the flags in `override` replacing those in `base`."""
    def pairs(args):
        out, i = [], 0
        while i < len(args):
            a = args[i]
            if a in FLAGS_WITHOUT_VALUE or not a.startswith("--") or "=" in a:
                out.append((a.split("=")[0], [a]))
                i += 1
            else:
                out.append((a, args[i:i + 2]))
                i += 2
        return out
    merged = dict(pairs(base))
    for flag, toks in pairs(override):
        merged[flag] = toks  # in place when base has the flag
    return [t for toks in merged.values() for t in toks]


def arg_value(args, flag, default=None):
    for i, a in enumerate(args[:-1]):
        if a == flag:
            return args[i + 1]
    return default


def expand_runs(suite, quick, backend, devices, extra=()):
    """The runs of a suite for a mode: quick overrides applied, `--devices max` resolved, runs whose
    device count is not in `devices` left out. Returns (runs, [(suite, run, why left out)])."""
    runs, notes = [], []
    table = dict(suite.runs)
    if backend == "cuda":
        table.update(suite.cuda_runs)
    for name, args in table.items():
        if quick:
            skip = False
            for pattern, over in suite.quick:
                if fnmatch.fnmatchcase(name, pattern):
                    if over is None:
                        skip = True
                    else:
                        args = merge_args(args, over)
            if skip:
                notes.append((suite.name, name, "full mode only"))
                continue
        dev = arg_value(args, "--devices", "1")
        if dev == "max":
            args = merge_args(args, ["--devices", str(max(devices))])
        elif int(dev) not in devices:
            notes.append((suite.name, name, "device count not in --devices"))
            continue
        runs.append(Run(suite.name, name, merge_args(args, list(extra))))
    return runs, notes


# ----------------------------------------------------------------------------- files


def write_atomic(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path, obj):
    write_atomic(path, json.dumps(obj, indent=2) + "\n")


NUMERIC = {"devices", "shared_gpu", "quick", "bucket_mb", "global_batch", "lr", "warmup_epochs",
           "seed", "train_examples", "test_examples", "epoch", "lr_end", "train_loss", "train_acc",
           "test_acc", "epoch_s", "images_per_s", "data_s", "compute_s", "comm_s",
           "exposed_comm_s", "comm_calls", "replicas_in_sync", "max_replica_diff"}


def read_rows(path):
    """Rows of a suite CSV as dicts, numeric columns as floats."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in NUMERIC & r.keys():
            try:
                r[k] = float(r[k])
            except ValueError:
                pass
    return rows


def read_results(out_dir):
    """{suite: [rows]} for every suite CSV in a results folder."""
    res = {}
    for f in sorted(os.listdir(out_dir)):
        if f.endswith(".csv") and not f.startswith(("micro-", "summary")):
            rows = read_rows(os.path.join(out_dir, f))
            if rows and "scenario" in rows[0]:
                res[f[:-4]] = rows
    return res


def append_suite_csv(path, suite, scenario, run_csv):
    """Adds dpbench's rows from run_csv to the suite CSV with suite and scenario in front."""
    with open(run_csv, newline="") as f:
        new = list(csv.reader(f))
    if len(new) < 2:
        return 0
    header = ["suite", "scenario"] + new[0]
    old = []
    if os.path.exists(path):
        with open(path, newline="") as f:
            old = list(csv.reader(f))
        if old and old[0] != header:
            raise SystemExit(f"run_suite: {path} has a different header; use another --out")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerows(old or [header])
    w.writerows([suite, scenario] + r for r in new[1:])
    write_atomic(path, buf.getvalue())
    return len(new) - 1


# ----------------------------------------------------------------------------- micro JSON


def parse_bench_name(name):
    """dpbench-micro names (see bench/main.cpp --help) as fields:
    'allreduce/cpu/ring/ranks:4/bytes:1048576/manual_time' -> {'family': 'allreduce',
    'backend': 'cpu', 'alg': 'ring', 'ranks': 4, 'bytes': 1048576, 'shared': False};
    'gradsync/cuda/resnet18/fused/ranks:4/shared' -> {'family': 'gradsync', 'backend': 'cuda',
    'model': 'resnet18', 'mode': 'fused', 'ranks': 4, 'shared': True}."""
    parts = name.split("/")
    plain = ["family", "backend", "alg" if parts[0] in ("allreduce", "membw") else "model", "mode"]
    out = {"shared": False}
    for part in parts:
        if part == "shared":
            out["shared"] = True
        elif ":" in part:
            k, _, v = part.partition(":")
            try:
                out[k] = int(v)
            except ValueError:
                out[k] = v
        elif part in ("manual_time", "real_time", "process_time"):
            continue
        elif plain:
            out[plain.pop(0)] = part
    return out


def read_micro(path):
    """Benchmarks of a Google Benchmark JSON file as dicts (name fields + counters); medians when
    repetitions were aggregated, else the mean over repeated iteration entries."""
    with open(path) as f:
        data = json.load(f)
    groups = {}
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        key = b.get("run_name", b["name"])
        groups.setdefault(key, []).append(b)
    out = []
    for key, bs in groups.items():
        med = [b for b in bs if b.get("aggregate_name") == "median"]
        bs = med or bs
        row = parse_bench_name(key)
        row["name"] = key
        for k, v in bs[0].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in row:
                row[k] = statistics.mean(b.get(k, v) for b in bs)
        out.append(row)
    return out, data.get("context", {})


# ----------------------------------------------------------------------------- summary


def group_runs(rows):
    """{(suite, scenario): [rows ordered by epoch]}."""
    g = {}
    for r in rows:
        g.setdefault((r["suite"], r["scenario"]), []).append(r)
    for v in g.values():
        v.sort(key=lambda r: r["epoch"])
    return g


def steady_epoch_s(epochs, key="epoch_s"):
    """Median over epochs after the first (the first includes warm-up); the only one if one."""
    vals = [e[key] for e in epochs[1:]] or [epochs[0][key]]
    return statistics.median(vals)


def time_to_acc(epochs, target):
    """Training seconds (sum of epoch_s) until test accuracy first reaches target, else None."""
    t = 0.0
    for e in epochs:
        t += e["epoch_s"]
        if target is not None and e["test_acc"] >= target:
            return t
    return None


def find_reference(runs, key):
    """The 1-device run of the same suite and model to compare speed with: same global batch if
    there is one."""
    first = runs[key][0]
    cands = [k for k, v in runs.items() if k[0] == key[0] and v[0]["model"] == first["model"]
             and v[0]["devices"] == 1 and v[0]["backend"] == first["backend"]]
    same = [k for k in cands if runs[k][0]["global_batch"] == first["global_batch"]]
    return (same or cands or [None])[0]


def summarize(out_dir):
    """Summary rows (dicts) for every training run in a results folder."""
    targets = {}
    rows_out = []
    for suite, rows in read_results(out_dir).items():
        try:
            targets[suite] = load_suite(suite)
        except SystemExit:
            targets[suite] = Suite(suite)
        runs = group_runs(rows)
        for key, eps in runs.items():
            e0, last = eps[0], eps[-1]
            t = steady_epoch_s(eps)
            ref = find_reference(runs, key)
            speedup = steady_epoch_s(runs[ref]) / t if ref and t > 0 else None
            quick = bool(e0["quick"])
            target = targets[suite].target(e0["model"], quick)
            tta = time_to_acc(eps, target)
            rows_out.append({
                "suite": suite, "scenario": key[1], "model": e0["model"],
                "backend": e0["backend"], "devices": int(e0["devices"]),
                "shared_gpu": int(e0["shared_gpu"]), "quick": int(quick),
                "global_batch": int(e0["global_batch"]), "lr": e0["lr"],
                "warmup_epochs": e0["warmup_epochs"], "allreduce": e0["allreduce"],
                "grad_sync": e0["grad_sync"], "overlap": e0["overlap"],
                "train_examples": int(e0["train_examples"]),
                "test_examples": int(e0["test_examples"]), "epochs": len(eps),
                "epoch_s": t, "images_per_s": steady_epoch_s(eps, "images_per_s"),
                "exposed_comm_s": steady_epoch_s(eps, "exposed_comm_s"),
                "speedup": speedup,
                "efficiency": speedup / e0["devices"] if speedup else None,
                "final_acc": last["test_acc"], "best_acc": max(e["test_acc"] for e in eps),
                "target_acc": target, "time_to_target_s": tta,
                "in_sync": int(all(e["replicas_in_sync"] == 1 for e in eps)),
            })
    return rows_out


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def micro_summary(out_dir):
    """Lines on all-reduce bus bandwidth at the largest message of each rank count."""
    lines = []
    for f in sorted(os.listdir(out_dir)):
        if not (f.startswith("micro-") and f.endswith(".json")):
            continue
        try:
            rows = [r for r in read_micro(os.path.join(out_dir, f))[0]
                    if r.get("family") == "allreduce" and r.get("busbw_GBps") is not None]
        except ValueError:
            continue
        for key in sorted({(r.get("backend"), r.get("ranks")) for r in rows}, key=str):
            at = [r for r in rows if (r.get("backend"), r.get("ranks")) == key]
            big = max(r.get("bytes", 0) for r in at)
            bw = ", ".join(f"{r.get('alg')} {r['busbw_GBps']:.2f}"
                           for r in sorted(at, key=lambda r: str(r.get("alg")))
                           if r.get("bytes") == big)
            wrong = sum(r.get("wrong", 0) or 0 for r in at)
            lines.append(f"  {f}: {key[0]}, {key[1]} ranks, {big / 2**20:g} MiB: busbw GB/s "
                         f"{bw}" + (f"; WRONG results in {wrong:.0f} elements" if wrong else ""))
    return lines


def summary_text(out_dir, rows):
    manifest = {}
    mpath = os.path.join(out_dir, "manifest.json")
    if os.path.exists(mpath):
        with open(mpath) as f:
            manifest = json.load(f)
    lines = []
    head = f"Summary of {out_dir}"
    if manifest:
        head += (f" ({manifest.get('machine', {}).get('label', '?')}, backend "
                 f"{manifest.get('backend')}, {manifest.get('mode', '?').upper()} mode)")
    lines.append(head)
    if any(r["quick"] for r in rows):
        lines.append("QUICK: data subsets and fewer epochs; accuracies are not comparable with full "
                     "runs.")
    if any(r["shared_gpu"] for r in rows):
        lines.append("SHARED GPU (*): ranks share one GPU; those times are not scaling figures.")
    micro = micro_summary(out_dir)
    if micro:
        lines += ["", "== micro: all-reduce at the largest message"] + micro
    if not rows:
        lines.append("no training results in " + out_dir)
        return "\n".join(lines) + "\n"
    cols = ("scenario", "k", "batch", "lr", "sync", "data", "epoch s", "speedup", "eff",
            "final acc", "best acc", "t->target")
    for suite in dict.fromkeys(r["suite"] for r in rows):
        sr = [r for r in rows if r["suite"] == suite]
        lines.append("")
        lines.append(f"== {suite}")
        table = [cols]
        for r in sr:
            sync = f"{r['allreduce']}/{r['grad_sync']}/{r['overlap']}" if r["devices"] > 1 else "-"
            tgt = ("-" if r["target_acc"] is None else
                   f"{fmt(r['time_to_target_s'], '.1f')} s @{r['target_acc']:.2f}"
                   if r["time_to_target_s"] is not None else f"never @{r['target_acc']:.2f}")
            table.append((
                r["scenario"] + ("" if r["in_sync"] else " (OUT OF SYNC)"),
                f"{r['devices']}{'*' if r['shared_gpu'] else ''}", str(r["global_batch"]),
                f"{r['lr']:g}" + (f" w{r['warmup_epochs']:g}" if r["warmup_epochs"] else ""),
                sync, f"{r['train_examples']}/{r['test_examples']}x{r['epochs']}",
                fmt(r["epoch_s"], ".2f"), fmt(r["speedup"], ".2f"), fmt(r["efficiency"], ".0%"),
                fmt(r["final_acc"], ".3f"), fmt(r["best_acc"], ".3f"), tgt))
        widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
        for i, row in enumerate(table):
            lines.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w)
                                   for j, (c, w) in enumerate(zip(row, widths))))
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    lines += textwrap.wrap(
        "k: devices; data: train/test examples x epochs; epoch s: median of the epochs after the "
        "first; speedup: 1-device epoch time of the same model (same global batch where run) / "
        "this epoch time; eff: speedup / k; t->target: training seconds until the test accuracy "
        "first reached the target.", 100)
    return "\n".join(lines) + "\n"


def write_summary(out_dir):
    rows = summarize(out_dir)
    text = summary_text(out_dir, rows)
    write_atomic(os.path.join(out_dir, "summary.txt"), text)
    if rows:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        write_atomic(os.path.join(out_dir, "summary.csv"), buf.getvalue())
    return text


# ----------------------------------------------------------------------------- manifest


def _cmd_out(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_facts(info, backend):
    cpu = info.get("cpu") or platform.processor() or "unknown CPU"
    gpus = []
    smi = _cmd_out(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                    "--format=csv,noheader"])
    for line in smi.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "memory": parts[1], "driver": parts[2]})
    mem_gb = None
    try:
        with open("/proc/meminfo") as f:
            mem_gb = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    cores = info.get("cores") or os.cpu_count()
    if backend == "cuda" and gpus:
        label = f"{gpus[0]['name']} x{len(gpus)}" if len(gpus) > 1 else gpus[0]["name"]
    else:
        label = f"{cpu.replace('(R)', '').replace(' Processor', '')}, {cores} cores"
    return {"hostname": socket.gethostname(), "os": platform.platform(), "cpu": cpu,
            "cores": cores, "memory_gib": mem_gb, "gpus": gpus, "label": label}


def versions(bin_path):
    v = {"python": platform.python_version()}
    build = os.path.dirname(os.path.abspath(bin_path))
    cache = os.path.join(build, "CMakeCache.txt")
    if os.path.exists(cache):
        with open(cache) as f:
            for line in f:
                for key in ("CMAKE_CXX_COMPILER:", "CMAKE_BUILD_TYPE:", "DPB_CUDA:",
                            "CMAKE_CUDA_COMPILER:", "CMAKE_CUDA_ARCHITECTURES:"):
                    if line.startswith(key):
                        v[key.rstrip(":").lower()] = line.split("=", 1)[1].strip()
    cxx = v.get("cmake_cxx_compiler") or "c++"
    v["cxx"] = _cmd_out([cxx, "--version"]).split("\n")[0]
    v["cmake"] = _cmd_out(["cmake", "--version"]).split("\n")[0]
    if v.get("cmake_cuda_compiler"):
        out = _cmd_out([v["cmake_cuda_compiler"], "--version"]).splitlines()
        v["nvcc"] = out[-1] if out else ""
    for pkg in ("libdnnl2", "libbenchmark1debian"):
        ver = _cmd_out(["dpkg-query", "-W", "-f=${Version}", pkg])
        if ver:
            v[pkg] = ver
    git = ["git", "-C", ROOT]
    v["git_commit"] = _cmd_out(git + ["rev-parse", "HEAD"])
    v["git_dirty"] = bool(_cmd_out(git + ["status", "--porcelain", "--untracked-files=no"]))
    return v


# ----------------------------------------------------------------------------- runner


class Runner:
    def __init__(self, a):
        self.a = a
        self.out = a.out
        self.t0 = time.time()
        self.failures = []
        self.mpath = os.path.join(self.out, "manifest.json")
        if os.path.exists(self.mpath):  # continuing an interrupted run: keep its history
            with open(self.mpath) as f:
                self.manifest = json.load(f)
            self.manifest.setdefault("continued_utc", []).append(utc())
        else:
            self.manifest = {"run_id": os.path.basename(os.path.abspath(self.out)),
                             "created_utc": utc(), "commands": []}
        info = json.loads(a.info) if a.info else self.dpbench_info()
        self.manifest.update({
            "status": "running", "mode": "quick" if a.quick else "full", "backend": a.backend,
            "devices": a.devices, "suites": a.suite, "invocation": a.invocation or
            " ".join(shlex.quote(x) for x in sys.argv), "dpbench_info": info,
            "machine": machine_facts(info, a.backend), "versions": versions(a.bin),
            "binaries": {"dpbench": os.path.abspath(a.bin),
                         "dpbench-micro": os.path.abspath(a.micro_bin)},
        })
        if a.set:
            self.manifest["extra_args"] = a.set

    def dpbench_info(self):
        try:
            return json.loads(_cmd_out([self.a.bin, "info"]) or "{}")
        except json.JSONDecodeError:
            return {}

    def save(self):
        write_json(self.mpath, self.manifest)

    def elapsed(self):
        s = int(time.time() - self.t0)
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"

    def execute(self, cmd, log_path, echo):
        """Runs cmd with stdout+stderr to log_path; lines for which echo(line) is true are also
        printed, indented. Returns (rc, wall seconds, last lines)."""
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        t = time.time()
        tail = []
        with open(log_path, "w") as log:
            log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
            log.flush()
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 bufsize=1, errors="replace")
            try:
                for line in p.stdout:
                    log.write(line)
                    tail = (tail + [line.rstrip()])[-5:]
                    if echo(line):
                        print("      " + line.rstrip(), flush=True)
                rc = p.wait()
            except KeyboardInterrupt:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                raise
        return rc, time.time() - t, tail

    def record(self, entry):
        self.manifest["commands"].append(entry)
        self.save()

    def run_micro(self, suite, n, total):
        a = self.a
        key = a.backend + (".quick" if a.quick else "")
        args = suite.micro.get(key) or suite.micro.get(a.backend)
        print(f"[{n}/{total} {self.elapsed()}] {suite.name}: dpbench-micro {args}", flush=True)
        if not os.access(a.micro_bin, os.X_OK):
            print(f"      skipped: {a.micro_bin} is not built (DPB_BENCH, bench/main.cpp); no "
                  "microbenchmark results in this run", flush=True)
            self.manifest.setdefault("notes", []).append(f"{suite.name}: dpbench-micro absent")
            return
        final = os.path.join(self.out, f"micro-{suite.name}.json")
        if os.path.exists(final):
            print(f"      already done: {final}", flush=True)
            return
        tmp = final + ".part"
        cmd = [a.micro_bin] + shlex.split(args) + [f"--benchmark_out={tmp}",
                                                   "--benchmark_out_format=json"]
        if a.dry_run:
            print("      " + " ".join(shlex.quote(c) for c in cmd))
            return
        log = os.path.join(self.out, "logs", suite.name, "micro.log")
        rc, wall, tail = self.execute(cmd, log, lambda l: l.startswith(
            ("allreduce/", "gradsync/", "overlap/", "membw/", "dpbench-micro:")) or "rror" in l)
        entry = {"suite": suite.name, "scenario": "micro", "cmd": cmd, "rc": rc,
                 "wall_s": round(wall, 2), "log": os.path.relpath(log, self.out),
                 "started_utc": utc(time.time() - wall)}
        if rc == 0 and os.path.exists(tmp):
            os.replace(tmp, final)
            entry["output"] = os.path.basename(final)
            conv = os.path.join(ROOT, "scripts", "bench_to_csv.py")
            if os.path.exists(conv):
                csv_path = final[:-5] + ".csv"
                ccmd = [sys.executable, conv, final, "-o", csv_path]
                res = subprocess.run(ccmd, capture_output=True, text=True)
                if res.returncode == 0 and os.path.exists(csv_path):
                    entry["csv"] = os.path.basename(csv_path)
                else:
                    print(f"      bench_to_csv.py failed (rc {res.returncode}): "
                          f"{res.stderr.strip()[:300]}", flush=True)
                entry["convert_cmd"] = ccmd
        else:
            self.failures.append(f"{suite.name}/micro (rc {rc}, see {log})")
            if os.path.exists(tmp):
                os.remove(tmp)
        print(f"      done in {wall:.1f} s (rc {rc})", flush=True)
        self.record(entry)

    def run_train(self, run, n, total):
        a = self.a
        suite_csv = os.path.join(self.out, f"{run.suite}.csv")
        if os.path.exists(suite_csv) and any(r["scenario"] == run.name
                                             for r in read_rows(suite_csv)):
            print(f"[{n}/{total} {self.elapsed()}] {run.suite}/{run.name}: already in "
                  f"{suite_csv}, skipped", flush=True)
            return
        tmpdir = os.path.join(self.out, ".tmp")
        os.makedirs(tmpdir, exist_ok=True)
        run_csv = os.path.join(tmpdir, f"{run.suite}--{run.name}.csv")
        if os.path.exists(run_csv):
            os.remove(run_csv)
        cmd = ([a.bin, "train"] + run.args + ["--backend", a.backend, "--csv", run_csv])
        if a.wrap:
            cmd = shlex.split(a.wrap.format(suite=run.suite, scenario=run.name,
                                            out=self.out)) + cmd
        shown = " ".join(shlex.quote(c) for c in run.args)
        print(f"[{n}/{total} {self.elapsed()}] {run.suite}/{run.name}: {shown}", flush=True)
        if a.dry_run:
            return
        log = os.path.join(self.out, "logs", run.suite, run.name + ".log")
        rc, wall, tail = self.execute(cmd, log, lambda l: l.startswith(("epoch", "  epoch")))
        entry = {"suite": run.suite, "scenario": run.name, "cmd": cmd, "rc": rc,
                 "wall_s": round(wall, 2), "log": os.path.relpath(log, self.out),
                 "started_utc": utc(time.time() - wall)}
        with open(log) as f:
            for line in f:
                if line.startswith("final test acc"):
                    entry["devices_line"] = line.split("devices:", 1)[-1].strip()
        nrows = 0
        if os.path.exists(run_csv):
            nrows = append_suite_csv(suite_csv, run.suite, run.name, run_csv)
            os.remove(run_csv)
        if rc != 0:
            self.failures.append(f"{run.suite}/{run.name} (rc {rc}, see {log})")
            print(f"      FAILED (rc {rc}) after {wall:.1f} s; last output:", flush=True)
            for line in tail:
                print("      | " + line, flush=True)
        else:
            print(f"      done in {wall:.1f} s, {nrows} epoch rows -> {suite_csv}", flush=True)
        self.record(entry)

    def run(self):
        a = self.a
        suites = [load_suite(s) for s in a.suite]
        plan, notes = [], []
        for s in suites:
            if s.micro:
                plan.append(("micro", s))
            runs, n = expand_runs(s, a.quick, a.backend, a.devices, shlex.split(a.set or ""))
            plan += [("train", r) for r in runs]
            notes += n
        grouped = {}
        for suite, name, why in notes:
            grouped.setdefault((suite, why), []).append(name)
        for (suite, why), names in grouped.items():
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            print(f"  note: {suite}: {len(names)} run(s) left out, {why}: {shown}")
        total = len(plan)
        print(f"run_suite: {total} steps ({'quick' if a.quick else 'full'} mode, backend "
              f"{a.backend}, devices {','.join(map(str, a.devices))}) -> {self.out}", flush=True)
        os.makedirs(self.out, exist_ok=True)
        self.save()
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # like Ctrl-C: stop cleanly
        try:
            for n, (kind, item) in enumerate(plan, 1):
                if kind == "micro":
                    self.run_micro(item, n, total)
                else:
                    self.run_train(item, n, total)
        except KeyboardInterrupt:
            self.manifest["status"] = "interrupted"
            self.manifest["finished_utc"] = utc()
            self.save()
            print(f"\nrun_suite: interrupted after {self.elapsed()}. Only complete files remain in "
                  f"{self.out} (suite CSVs hold every finished run); continue with --out "
                  f"{self.out}", flush=True)
            return 130
        try:
            os.rmdir(os.path.join(self.out, ".tmp"))  # only when empty
        except OSError:
            pass
        self.manifest["status"] = "failed" if self.failures else "complete"
        self.manifest["finished_utc"] = utc()
        self.manifest["wall_s"] = round(time.time() - self.t0, 1)
        if self.failures:
            self.manifest["failures"] = self.failures
        self.save()
        for f in self.failures:
            print(f"run_suite: FAILED: {f}", flush=True)
        return 1 if self.failures else 0


def utc(t=None):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 1)[1])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the suites and their runs")
    r = sub.add_parser("run", help="run suites into a results folder")
    r.add_argument("--out", required=True)
    r.add_argument("--suite", action="append", default=[],
                   help="suite name, repeatable or comma separated (default: default suites)")
    m = r.add_mutually_exclusive_group()
    m.add_argument("--quick", dest="quick", action="store_true", default=True)
    m.add_argument("--full", dest="quick", action="store_false")
    r.add_argument("--devices", default="1,2,4")
    r.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    r.add_argument("--bin", default=os.path.join(ROOT, "build", "dpbench"))
    r.add_argument("--micro-bin", default=None)
    r.add_argument("--set", default="", help="dpbench arguments added to every run (they win)")
    r.add_argument("--wrap", default="", help="command prefix for every training run; "
                   "{suite}, {scenario} and {out} are replaced")
    r.add_argument("--info", default="", help="`dpbench info` JSON (else asked from --bin)")
    r.add_argument("--invocation", default="", help="the command line to record")
    r.add_argument("--dry-run", action="store_true", help="print the commands only")
    rec = sub.add_parser("record", help="add a command run outside (plots) to the manifest")
    rec.add_argument("dir")
    rec.add_argument("--rc", type=int, default=0)
    rec.add_argument("--wall", type=float, default=0)
    rec.add_argument("command", nargs=argparse.REMAINDER)
    s = sub.add_parser("summary", help="print (and write summary.txt/.csv) for a results folder")
    s.add_argument("dir")
    a = p.parse_args(argv)
    if a.cmd == "list":
        for name in suite_names():
            st = load_suite(name)
            print(f"{name}{'' if st.default else ' (not default)'}: {st.about}")
            for rn, args in {**st.runs, **st.cuda_runs}.items():
                print(f"    {rn}: {' '.join(args)}")
        return 0
    if a.cmd == "record":
        path = os.path.join(a.dir, "manifest.json")
        if os.path.exists(path):
            with open(path) as f:
                man = json.load(f)
            cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
            man.setdefault("commands", []).append({"cmd": cmd, "rc": a.rc, "wall_s": a.wall,
                                                   "started_utc": utc(time.time() - a.wall)})
            write_json(path, man)
        return 0
    if a.cmd == "summary":
        print(write_summary(a.dir), end="")
        return 0
    default = sorted((n for n in suite_names() if load_suite(n).default),
                     key=lambda n: (bool(load_suite(n).runs), n))  # microbenchmarks first
    a.suite = [x for s in a.suite for x in s.split(",") if x] or default
    for sname in a.suite:
        load_suite(sname)  # unknown names fail before any work
    try:
        a.devices = sorted({int(x) for x in a.devices.split(",") if x})
    except ValueError:
        raise SystemExit(f"run_suite: --devices wants a comma list of counts, got '{a.devices}'")
    if not a.devices or min(a.devices) < 1:
        raise SystemExit("run_suite: --devices wants positive counts")
    a.micro_bin = a.micro_bin or os.path.join(os.path.dirname(a.bin), "dpbench-micro")
    if not os.access(a.bin, os.X_OK) and not a.dry_run:
        raise SystemExit(f"run_suite: {a.bin} is not built; run scripts/setup.sh")
    return Runner(a).run()


if __name__ == "__main__":
    sys.exit(main())
