"""suite_state.py: a results folder while scripts/run_suite.py writes it: DIR/manifest.json (the
machine, the versions and every command with its exit status, wall time and the load around it)
and DIR/.tmp/ (each output until it is complete), and how a run ends: complete or failed (exit 0
or 1), interrupted (Ctrl-C, and SIGTERM or SIGHUP alike: exit 130, only complete files left), or
stopped by a results folder that refuses writes (a full disk: exit 3, the manifest's status
failed, in place when nothing else can be written).

  state = SuiteState(out, mode, backend)   # a new manifest, or the one an interrupted run left
  state.tmp_path(name) ... state.record(entry) ... return state.finish()

suite_runner.py's Runner (run_suite.py run) is a SuiteState that runs the steps; the peers
(scripts/peerlib.py) record through it too. Standard library only.
"""
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_results import mark_status_in_place, stale_temps, write_json  # noqa: E402
from suitelib import ROOT  # noqa: E402


def utc(t=None):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


# ----------------------------------------------------------------------------- manifest facts


def cmd_output(cmd):
    """cmd's stdout, stripped; "" when it does not run (or takes more than 20 s)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_sample():
    """(1-minute load, steal jiffies, all jiffies) now; None where /proc lacks them."""
    load = steal = total = None
    try:
        with open("/proc/loadavg") as f:
            load = float(f.read().split()[0])
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        if len(v) == 8:  # user .. steal (guest is inside user)
            steal, total = v[7], sum(v)
    except (OSError, ValueError, IndexError):
        pass
    return load, steal, total


def load_between(a, b):
    """The manifest's load of one command (issue 25 item 5): the load average at its start and
    end, the steal over it, and busy: why the machine was busy ("" when it was not; the rule of
    src/core/cpu_info.h, less its count of other processes' runnable tasks)."""
    cpus = len(os.sched_getaffinity(0))
    steal = (round(100.0 * (b[1] - a[1]) / (b[2] - a[2]), 2)
             if None not in (a[1], b[1]) and b[2] > a[2] else None)
    why = []
    if a[0] is not None and a[0] > cpus:
        why.append(f"load {a[0]:g} > {cpus} CPUs")
    if steal is not None and steal > 2:
        why.append(f"steal {steal:g}%")
    return {"cpus": cpus, "load_avg_start": a[0], "load_avg_end": b[0], "steal_pct": steal,
            "busy": ", ".join(why)}


def machine_facts(info, backend):
    """The machine as `dpbench info` (kernels/machine_info.h) found it; nvidia-smi adds the
    driver per GPU, and the probes here only stand in when info lacks a fact."""
    cpu = info.get("cpu") or platform.processor() or "unknown CPU"
    gpus = [dict(g) for g in info.get("gpus", [])]
    smi = cmd_output(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                    "--format=csv,noheader"])
    for i, line in enumerate(smi.splitlines()):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            if i >= len(gpus):
                gpus.append({"name": parts[0], "memory": parts[1]})
            gpus[i]["driver"] = parts[2]
    cores = info.get("cores") or os.cpu_count()
    if backend == "cuda" and gpus:
        label = f"{gpus[0]['name']} x{len(gpus)}" if len(gpus) > 1 else gpus[0]["name"]
    else:
        label = f"{cpu.replace('(R)', '').replace(' Processor', '')}, {cores} cores"
    return {"hostname": socket.gethostname(), "os": info.get("os") or platform.platform(),
            "cpu": cpu, "cores": cores, "memory_gib": info.get("memory_gib"), "gpus": gpus,
            "label": label}


def versions(bin_path, info):
    """Library and build versions: dpbench's own (`dpbench info`), plus the tools around it."""
    keys = ("compiler", "build_type", "cuda_architectures", "dpbench_version", "onednn_version",
            "cuda_driver_version", "cuda_runtime_version", "cudnn_version", "nccl_version",
            "cublas_version", "nvidia_driver")
    v = {k: info[k] for k in keys if k in info}
    v["python"] = platform.python_version()
    v["cmake"] = cmd_output(["cmake", "--version"]).split("\n")[0]
    v["libbenchmark1debian"] = cmd_output(["dpkg-query", "-W", "-f=${Version}",
                                         "libbenchmark1debian"])
    commit = info.get("git_commit") or cmd_output(["git", "-C", ROOT, "rev-parse", "HEAD"])
    v["git_commit"] = commit.removesuffix("-dirty")
    v["git_dirty"] = commit.endswith("-dirty")
    return v


# ----------------------------------------------------------------------------- the results folder


def out_dir_problem(out):
    """--out: made when missing; an existing folder must take a file (a read-only one, or a
    mount that refuses writes, is refused now rather than after the first run). "" when it does,
    else why not."""
    try:
        os.makedirs(out, exist_ok=True)
        probe = os.path.join(out, f".write-probe.{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        return f"--out {out}: cannot write there ({e.strerror or e})"
    return ""


def interrupt_on_signals():
    """SIGTERM and SIGHUP stop the run as Ctrl-C does (KeyboardInterrupt): cleanly."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)


def record_outside(out, cmd, rc, wall):
    """Adds a command run outside run_suite (the plots) to DIR/manifest.json, when there is one."""
    path = os.path.join(out, "manifest.json")
    if os.path.exists(path):
        with open(path) as f:
            man = json.load(f)
        man.setdefault("commands", []).append({"cmd": cmd, "rc": rc, "wall_s": wall,
                                               "started_utc": utc(time.time() - wall)})
        write_json(path, man)


class SuiteState:
    """The manifest and the temporary files of one results folder, and the steps' failures."""

    def __init__(self, out, mode, backend):
        self.out = out
        self.t0 = time.time()
        self.failures = []
        self.last_load = None  # the load around the last command (execute), for record()
        self.mpath = os.path.join(self.out, "manifest.json")
        if os.path.exists(self.mpath):  # continuing an interrupted run: keep its history
            with open(self.mpath) as f:
                self.manifest = json.load(f)
            if self.manifest.get("mode", mode) != mode or \
                    self.manifest.get("backend", backend) != backend:
                raise SystemExit(f"run_suite: {self.out} holds a {self.manifest.get('mode')} "
                                 f"{self.manifest.get('backend')} run; use another --out")
            self.manifest.setdefault("continued_utc", []).append(utc())
        else:
            self.manifest = {"run_id": os.path.basename(os.path.abspath(self.out)),
                             "created_utc": utc(), "commands": []}

    def save(self):
        write_json(self.mpath, self.manifest)

    def elapsed(self):
        s = int(time.time() - self.t0)
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"

    def tmp_path(self, name):
        """A temporary file in DIR/.tmp/ (made here): outputs until they are complete."""
        tmpdir = os.path.join(self.out, ".tmp")
        os.makedirs(tmpdir, exist_ok=True)
        return os.path.join(tmpdir, name)

    def remove_tmp(self):
        """Removes the folder dpbench writes each run's CSV (and dpbench-micro and fit their JSON)
        into, with any left-overs of a run that was interrupted before its results were complete,
        and the temp files of a killed run_suite beside the results (manifest.json.tmp<pid>)."""
        tmpdir = os.path.join(self.out, ".tmp")
        if os.path.isdir(tmpdir):
            shutil.rmtree(tmpdir, ignore_errors=True)
        for f in stale_temps(self.out) + stale_temps(os.path.join(self.out, "fit")):
            try:
                os.remove(f)
            except OSError:
                pass

    def entry(self, suite, scenario, cmd, rc, wall, log, kind=None):
        """A command's manifest entry: what ran, its exit status, wall time, log (relative to
        DIR) and start; kind: fit | project (a training run and the micro have none)."""
        e = {"suite": suite, "scenario": scenario}
        if kind:
            e["kind"] = kind
        e.update({"cmd": cmd, "rc": rc, "wall_s": round(wall, 2),
                  "log": os.path.relpath(log, self.out), "started_utc": utc(time.time() - wall)})
        return e

    def record(self, entry):
        """Adds a command's entry (with the load around it, when execute sampled one) to the
        manifest and saves it."""
        if self.last_load and "load" not in entry:
            entry["load"], self.last_load = self.last_load, None
        self.manifest["commands"].append(entry)
        self.save()

    def step_end(self, failed, what, rc, wall, tail, log, done=""):
        """Says how a step ended: failed, `what (rc N, see LOG)` joins the failures and its last
        output lines are printed; else `done in W s` and `done`."""
        if failed:
            self.failures.append(f"{what} (rc {rc}, see {log})")
            print(f"      FAILED (rc {rc}) after {wall:.1f} s; last output:", flush=True)
            for line in tail:
                print("      | " + line, flush=True)
        else:
            print(f"      done in {wall:.1f} s{done}", flush=True)

    def write_failed(self, err):
        """The results folder refused a write (err): its temp files removed, the manifest marked
        failed with the error (in place when the disk is full), a clear message; exit 3."""
        self.remove_tmp()
        why = f"cannot write to {self.out}: {err.strerror or err} " \
              f"({err.filename or 'a results file'})"
        self.manifest.update({"status": "failed", "finished_utc": utc(), "error": why,
                              "wall_s": round(time.time() - self.t0, 1)})
        try:
            self.save()
            how = "the manifest says so"
        except OSError:
            how = "manifest status set to failed in place" if mark_status_in_place(
                self.mpath, "running", "failed") else "the manifest could not be updated"
            self.remove_tmp()
        print(f"run_suite: {why}; stopped ({how}). Complete results so far stay in {self.out}; "
              f"free space and continue with --out {self.out}", file=sys.stderr, flush=True)
        return 3

    def interrupted(self):
        """Ctrl-C, SIGTERM or SIGHUP: temp files removed, the manifest says interrupted; 130."""
        self.remove_tmp()
        self.manifest["status"] = "interrupted"
        self.manifest["finished_utc"] = utc()
        self.save()
        print(f"\nrun_suite: interrupted after {self.elapsed()}. Only complete files remain in "
              f"{self.out} (suite CSVs hold every finished run); continue with --out "
              f"{self.out}", flush=True)
        return 130

    def finish(self):
        """Every step ran: temp files removed, the manifest complete or failed (with the
        failures, which are printed); exit status 0 or 1."""
        self.remove_tmp()
        self.manifest["status"] = "failed" if self.failures else "complete"
        self.manifest["finished_utc"] = utc()
        self.manifest["wall_s"] = round(time.time() - self.t0, 1)
        if self.failures:
            self.manifest["failures"] = self.failures
        self.save()
        for f in self.failures:
            print(f"run_suite: FAILED: {f}", flush=True)
        return 1 if self.failures else 0
