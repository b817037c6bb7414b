"""suite_runner.py: what scripts/run_suite.py's `run` does once its arguments are read: the
launcher (mpirun's prefix, the process-mode twins --launcher adds) and the Runner, a
suite_state.SuiteState that executes a plan's steps (dpbench-micro, dpbench train, fit and project,
the peers) into the results folder and writes their rows; the input checks that exit 2.

  runner = Runner(a)   # a: run_suite.py's parsed `run` arguments; checks --devices
  return runner.run()  # the exit status (run_suite.py's docstring)

Standard library only.
"""
import fnmatch
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_report as fitlib  # noqa: E402  (the fit rows)
import peerlib  # noqa: E402
from suite_results import append_rows, append_suite_csv, read_rows  # noqa: E402
from suitelib import (FIT_PREFIX, NO_CHECK_NOTE, ROOT, effective_info, expand_runs,  # noqa: E402
                      launcher_refusal, load_suite, micro_args, mpi_twins, PROJECT_PREFIX)
from suite_state import (SuiteState, cmd_output, cpu_sample, interrupt_on_signals,  # noqa: E402
                         load_between, machine_facts, versions)


# ----------------------------------------------------------------------------- launcher

def mpirun_prefix(np):
    """The command prefix that starts np processes: $DPB_MPIRUN ({np} replaced), else mpirun; None
    when there is no mpirun. Open MPI's gets --oversubscribe (k may exceed the cores, as the
    threads do) and --bind-to none (each rank's math threads use any core, as in thread mode)."""
    custom = os.environ.get("DPB_MPIRUN")
    if custom:
        return [x.replace("{np}", str(np)) for x in shlex.split(custom)]
    if not shutil.which("mpirun"):
        return None
    extra = (["--oversubscribe", "--bind-to", "none"]
             if "Open MPI" in cmd_output(["mpirun", "--version"]) else [])
    return ["mpirun", "-np", str(np)] + extra


def plan_launcher(a, suite, runs, info=None):
    """Thread-mode runs kept and process-mode twins added by --launcher, with notes. A run whose
    all-reduce runs as processes only (--allreduce mpi) has its twin only."""
    procs_only = {r.name: why for r in runs if r.kind == "train"
                  for why in [launcher_refusal(r.args, info, "threads")] if why}
    if a.launcher == "threads" or (not suite.processes and not a.suite_given):
        return ([r for r in runs if r.name not in procs_only],
                [(suite.name, n, why) for n, why in procs_only.items()])
    twins, notes = mpi_twins(runs, a.backend, info)
    if twins and mpirun_prefix(2) is None:
        notes += [(suite.name, t.name, "no mpirun (apt-get install openmpi-bin)") for t in twins]
        twins = []
    out = []
    for r in runs:
        twin = [t for t in twins if t.name == r.name + "-mpi"]
        if r.name in procs_only:
            pass  # its twin only
        elif a.launcher == "mpi" and twin:
            notes.append((suite.name, r.name, "thread mode (--launcher mpi)"))
        else:
            out.append(r)
        out += twin
    return out, notes


# ----------------------------------------------------------------------------- runner


class Runner(SuiteState):
    """Runs a plan's steps into the results folder (suite_state.SuiteState: its manifest and
    temporary files)."""

    def __init__(self, a):
        super().__init__(a.out, "quick" if a.quick else "full", a.backend)
        self.a = a
        info = effective_info(json.loads(a.info) if a.info else self.dpbench_info())
        self.info = info
        check_devices(a.devices, info)
        self.manifest.update({
            "status": "running", "mode": "quick" if a.quick else "full", "backend": a.backend,
            "devices": a.devices, "suites": a.suite, "invocation": a.invocation or
            " ".join(shlex.quote(x) for x in sys.argv), "dpbench_info": info,
            "machine": machine_facts(info, a.backend), "versions": versions(a.bin, info),
            "binaries": {"dpbench": os.path.abspath(a.bin),
                         "dpbench-micro": os.path.abspath(a.micro_bin)},
        })
        if a.set:
            self.manifest["extra_args"] = a.set
        self.manifest["launcher"] = a.launcher
        if a.launcher != "threads" and os.geteuid() == 0:  # Open MPI refuses root without these
            os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

    def dpbench_info(self):
        try:
            return json.loads(cmd_output([self.a.bin, "info"]) or "{}")
        except json.JSONDecodeError:
            return {}

    def execute(self, cmd, log_path, echo):
        """Runs cmd with stdout+stderr to log_path; lines for which echo(line) is true are also
        printed, indented. Returns (rc, wall seconds, last lines)."""
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        t = time.time()
        load0 = cpu_sample()
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
            except OSError:  # the log refused a write (a full disk): the run stops with it
                p.kill()
                p.wait()
                raise
        self.last_load = load_between(load0, cpu_sample())  # record() adds it to the entry
        return rc, time.time() - t, tail

    def micro_args(self, suite):
        a = self.a
        return micro_args(suite, a.backend, a.quick, self.info,
                          a.devices if a.devices_given else ())

    def run_micro(self, suite, n, total):
        a = self.a
        args = self.micro_args(suite)
        print(f"[{n}/{total} {self.elapsed()}] {suite.name}: dpbench-micro {args or ''}",
              flush=True)
        if args is None:
            print(f"      skipped: the suite has no microbenchmarks for backend {a.backend}",
                  flush=True)
            return
        if not os.access(a.micro_bin, os.X_OK):
            print(f"      skipped: {a.micro_bin} is not built (DPB_BENCH, bench/main.cpp); no "
                  "microbenchmark results in this run", flush=True)
            self.manifest.setdefault("notes", []).append(f"{suite.name}: dpbench-micro absent")
            return
        final = os.path.join(self.out, f"micro-{suite.name}.json")
        if os.path.exists(final):
            print(f"      already done: {final}", flush=True)
            return
        tmp = self.tmp_path(os.path.basename(final))  # dpbench-micro's own FILE.tmp.<pid> too
        cmd = [a.micro_bin] + shlex.split(args) + [f"--benchmark_out={tmp}",
                                                   "--benchmark_out_format=json"]
        log = os.path.join(self.out, "logs", suite.name, "micro.log")
        rc, wall, tail = self.execute(cmd, log, lambda l: l.startswith(
            ("allreduce/", "reducescatter/", "allgather/", "gradsync/", "overlap/", "membw/",
             "dpbench-micro:")) or "rror" in l)
        entry = self.entry(suite.name, "micro", cmd, rc, wall, log)
        if rc == 0 and os.path.exists(tmp):
            os.replace(tmp, final)
            entry["output"] = os.path.basename(final)
            conv = os.path.join(ROOT, "scripts", "bench_to_csv.py")
            if os.path.exists(conv):
                csv_path = final[:-5] + ".csv"
                ccmd = [sys.executable, conv, final, "-o", csv_path] + (["--quick"] if a.quick else [])
                res = subprocess.run(ccmd, capture_output=True, text=True)
                if res.returncode == 0 and os.path.exists(csv_path):
                    entry["csv"] = os.path.basename(csv_path)
                else:  # the JSON is kept; the suite fails, naming the conversion
                    why = (res.stderr.strip().splitlines() or [f"rc {res.returncode}"])[-1]
                    print(f"      bench_to_csv.py failed (rc {res.returncode}): {why}", flush=True)
                    self.failures.append(f"{suite.name}/micro: bench_to_csv.py {final}: {why}")
                entry["convert_cmd"] = ccmd
        else:
            self.failures.append(f"{suite.name}/micro (rc {rc}, see {log})")
            if os.path.exists(tmp):
                os.remove(tmp)
        print(f"      done in {wall:.1f} s (rc {rc})", flush=True)
        self.record(entry)

    def own_files(self, run):
        """run.args with {out}, {suite} and {scenario} replaced: a run's own files in the results
        folder (sync.ini's traced runs: --trace, --steps-csv); their folders are made here."""
        args = []
        for x in run.args:
            y = x.replace("{out}", self.out).replace("{suite}", run.suite) \
                .replace("{scenario}", run.name)
            if "{out}" in x:
                os.makedirs(os.path.dirname(y) or ".", exist_ok=True)
            args.append(y)
        return args

    def run_train(self, run, n, total):
        a = self.a
        suite_csv = os.path.join(self.out, f"{run.suite}.csv")
        if os.path.exists(suite_csv) and any(r["scenario"] == run.name
                                             for r in read_rows(suite_csv)):
            print(f"[{n}/{total} {self.elapsed()}] {run.suite}/{run.name}: already in "
                  f"{suite_csv}, skipped", flush=True)
            return
        run_csv = self.tmp_path(f"{run.suite}--{run.name}.csv")
        if os.path.exists(run_csv):
            os.remove(run_csv)
        # a run that names its backend keeps it (the memory suite's plans: --backend meta)
        backend = [] if "--backend" in run.args else ["--backend", a.backend]
        cmd = [a.bin, "train"] + self.own_files(run) + backend + ["--csv", run_csv]
        if run.procs:
            cmd = mpirun_prefix(run.procs) + cmd
        if a.wrap:
            cmd = shlex.split(a.wrap.format(suite=run.suite, scenario=run.name,
                                            out=self.out)) + cmd
        shown = (f"mpirun -np {run.procs}: " if run.procs else "") + \
            " ".join(shlex.quote(c) for c in run.args)
        print(f"[{n}/{total} {self.elapsed()}] {run.suite}/{run.name}: {shown}", flush=True)
        log = os.path.join(self.out, "logs", run.suite, run.name + ".log")
        rc, wall, tail = self.execute(cmd, log, lambda l: l.startswith(("epoch", "  epoch")))
        entry = self.entry(run.suite, run.name, cmd, rc, wall, log)
        with open(log) as f:
            for line in f:
                if line.startswith("final test acc"):
                    entry["devices_line"] = line.split("devices:", 1)[-1].strip()
        nrows = 0
        if os.path.exists(run_csv):
            nrows = append_suite_csv(suite_csv, run.suite, run.name, run_csv)
            os.remove(run_csv)
        self.step_end(rc != 0, f"{run.suite}/{run.name}", rc, wall, tail, log,
                      f", {nrows} epoch rows -> {suite_csv}")
        self.record(entry)

    def run_fit(self, run, n, total):
        """`dpbench fit` (a suite's [fit] section): its JSON result becomes one row of
        DIR/fit-<suite>.csv (memory_report.py) and is kept as DIR/fit/<suite>-<scenario>.json."""
        a = self.a
        fit_csv = os.path.join(self.out, f"{FIT_PREFIX}{run.suite}.csv")
        tag = f"[{n}/{total} {self.elapsed()}] {run.suite}/{run.name}"
        if os.path.exists(fit_csv) and any(r["scenario"] == run.name
                                           for r in fitlib.read_fit_rows(fit_csv)):
            print(f"{tag}: already in {fit_csv}, skipped", flush=True)
            return
        final = os.path.join(self.out, "fit", f"{run.suite}-{run.name}.json")
        os.makedirs(os.path.dirname(final), exist_ok=True)
        tmp = self.tmp_path(f"fit-{run.suite}-{run.name}.json")
        if os.path.exists(tmp):
            os.remove(tmp)
        backend = [] if "--backend" in run.args else ["--backend", a.backend]
        cmd = [a.bin, "fit"] + run.args + backend + ["--json", tmp]
        print(f"{tag}: dpbench fit " + " ".join(shlex.quote(c) for c in run.args), flush=True)
        log = os.path.join(self.out, "logs", run.suite, run.name + ".log")
        rc, wall, tail = self.execute(cmd, log, lambda l: l.startswith(
            ("  largest", "  nothing fits", "  check on", "  search:")))
        entry = self.entry(run.suite, run.name, cmd, rc, wall, log, kind="fit")
        # exit 3: not even 1 fits, an answer too; 1: --check disagreed with the plan (a failure,
        # its row says so)
        if rc in fitlib.FIT_ANSWER_RCS and os.path.exists(tmp):
            os.replace(tmp, final)
            with open(final) as f:
                row = fitlib.fit_row(run.suite, run.name, json.load(f), run.args)
            append_rows(fit_csv, [row], fitlib.FIT_COLUMNS)
            entry["output"] = os.path.relpath(final, self.out)
        self.step_end(rc not in (0, 3), f"{run.suite}/{run.name}", rc, wall, tail, log,
                      f" -> {fit_csv}")
        if os.path.exists(tmp):
            os.remove(tmp)
        self.record(entry)

    def run_project(self, run, n, total):
        """`dpbench project` (a suite's [project] section): the JSON object it prints becomes one
        row of DIR/project-<suite>.csv (its numbers; the profile's facts as profile_*)."""
        a = self.a
        path = os.path.join(self.out, f"{PROJECT_PREFIX}{run.suite}.csv")
        tag = f"[{n}/{total} {self.elapsed()}] {run.suite}/{run.name}"
        if os.path.exists(path) and any(r["scenario"] == run.name for r in read_rows(path)):
            print(f"{tag}: already in {path}, skipped", flush=True)
            return
        cmd = [a.bin, "project"] + self.own_files(run)
        print(f"{tag}: dpbench project " + " ".join(shlex.quote(c) for c in run.args), flush=True)
        log = os.path.join(self.out, "logs", run.suite, run.name + ".log")
        rc, wall, tail = self.execute(cmd, log, lambda l: False)
        entry = self.entry(run.suite, run.name, cmd, rc, wall, log, kind="project")
        out = None
        if rc == 0:
            with open(log) as f:
                objs = [x for x in f if x.startswith("{")]
            try:
                out = json.loads(objs[-1]) if objs else None
            except json.JSONDecodeError:
                out = None
        if out is not None:
            row = {"suite": run.suite, "scenario": run.name}
            for k, v in out.items():
                if isinstance(v, dict):
                    row.update({f"{k}_{kk}": vv for kk, vv in v.items()
                                if not isinstance(vv, (dict, list))})
                elif not isinstance(v, list):
                    row[k] = v
            append_rows(path, [row])
        self.step_end(out is None, f"{run.suite}/{run.name}", rc, wall, tail, log, f" -> {path}")
        self.record(entry)

    def run(self):
        a = self.a
        suites = [load_suite(s) for s in a.suite]
        plan, notes = [], []
        available = {}
        if a.peers:
            available, missing = peerlib.check_available(a.backend)
            self.manifest["peers_missing"] = [f"{k}: {v}" for k, v in missing.items()]
        for s in suites:
            if s.micro and not a.no_micro:
                plan.append(("micro", s))
            runs, n = expand_runs(s, a.quick, a.backend, a.devices, shlex.split(a.set or ""),
                                  self.info)
            if a.runs:
                runs = [r for r in runs if fnmatch.fnmatchcase(r.name, a.runs)]
            launched, n2 = plan_launcher(a, s, runs, self.info)
            plan += [(r.kind, r) for r in launched]
            notes += n + n2
            if a.peers:
                peer_runs, n = peerlib.plan(s, runs, available, a.backend,
                                            self.info.get("cuda_devices"))
                plan += [("peer", p) for p in peer_runs]
                notes += n
                if s.peer_micro and s.micro and "openmpi" in available:
                    plan.append(("peer-micro", s))
                if not s.peer_runs and not s.peer_micro:
                    print(f"  note: {s.name}: no [peers] section, no peer repeats its runs")
        grouped = {}
        for suite, name, why in notes:
            grouped.setdefault((suite, why), []).append(name)
        for (suite, why), names in grouped.items():
            shown = ", ".join(names if a.dry_run else names[:4]) + (
                f" and {len(names) - 4} more" if len(names) > 4 and not a.dry_run else "")
            if why.startswith(NO_CHECK_NOTE):  # the fit runs, without their real steps
                print(f"  note: {suite}: {len(names)} fit(s) {NO_CHECK_NOTE.rstrip(': ')} (its "
                      f"real steps), {why[len(NO_CHECK_NOTE):]}: {shown}")
            else:
                print(f"  note: {suite}: {len(names)} run(s) left out, {why}: {shown}")
        total = len(plan)
        fake = f", {self.info['fake_gpus']} fake GPU(s) (DPB_FAKE_GPUS)" \
            if self.info.get("fake_gpus") else ""
        print(f"run_suite: {total} steps ({'quick' if a.quick else 'full'} mode, backend "
              f"{a.backend}, devices {','.join(map(str, a.devices))}{fake}) -> {self.out}",
              flush=True)
        if a.dry_run:
            for n, (kind, item) in enumerate(plan, 1):
                print(f"[{n}/{total}] " + {
                    "micro": lambda: f"{item.name}: dpbench-micro {self.micro_args(item) or ''}",
                    "train": lambda: f"{item.suite}/{item.name}: " + (
                        f"mpirun -np {item.procs} dpbench train " if item.procs else "") +
                    " ".join(item.args),
                    "fit": lambda: f"{item.suite}/{item.name}: dpbench fit " + " ".join(item.args),
                    "project": lambda: f"{item.suite}/{item.name}: dpbench project " +
                    " ".join(item.args),
                    "peer": lambda: f"{item.suite}/{item.name}: peer {item.peer.impl}",
                    "peer-micro": lambda: f"{item.name}: peer openmpi"}[kind]())
            return 0
        interrupt_on_signals()
        try:
            os.makedirs(self.out, exist_ok=True)
            self.remove_tmp()  # what a killed earlier run left
            self.save()
            steps = {"micro": self.run_micro, "train": self.run_train, "fit": self.run_fit,
                     "project": self.run_project,
                     "peer": lambda *x: peerlib.run_train_peer(self, *x),
                     "peer-micro": lambda *x: peerlib.run_micro_peer(self, *x)}
            for n, (kind, item) in enumerate(plan, 1):
                steps[kind](item, n, total)
        except OSError as e:  # the results folder refused a write: a full disk, a lost mount
            return self.write_failed(e)
        except KeyboardInterrupt:
            return self.interrupted()
        return self.finish()


def usage_error(msg):
    """A bad argument: the message on stderr, exit 2, before any work."""
    print(f"run_suite: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def check_devices(devices, info):
    """--devices against what the runs can use: dpbench runs 1 to max_ranks ranks (`dpbench info`;
    a `--devices max` run and the microbenchmarks take the largest count given)."""
    most = info.get("max_ranks")
    bad = [d for d in devices if most and d > most]
    if bad:
        usage_error(f"--devices {','.join(map(str, devices))}: {','.join(map(str, bad))} "
                    f"is more ranks than dpbench runs (1 to {most}, `dpbench info` max_ranks)")
