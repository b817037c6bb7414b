#!/usr/bin/env python3
"""run_suite.py: run dpbench scenario suites (scenarios/*.ini) into a results folder, and summarize.

  scripts/run_suite.py list                                   # the suites and their runs
      (a suite file that does not read is listed UNUSABLE with its file and line; exit 2)
  scripts/run_suite.py run --out DIR --suite d2l-lenet,micro [--quick|--full] [--devices 1,2,4]
      [--backend cpu|cuda] [--bin build/dpbench] [--micro-bin build/dpbench-micro] [--peers]
      [--set "--lr 0.1"] [--wrap "nsys profile -o DIR/{suite}-{scenario}"] [--dry-run]
      [--launcher threads|mpi|both] [--no-micro] [--runs GLOB]
  scripts/run_suite.py summary DIR                            # the summary table of a results folder
  scripts/run_suite.py record --rc N --wall S DIR -- CMD...   # add a command run outside to DIR's manifest

`run` writes DIR/<suite>.csv (dpbench's columns after `suite,scenario,impl`, one header, rewritten
atomically after every run), DIR/micro-<suite>.json (+ .csv when scripts/bench_to_csv.py exists),
DIR/fit-<suite>.csv (one row per `dpbench fit` of the suite's [fit] section; its JSON in DIR/fit/),
DIR/project-<suite>.csv (one row per `dpbench project` of its [project] section),
DIR/logs/<suite>/<scenario>.log and DIR/manifest.json (machine, versions, every command). Runs
already in DIR/<suite>.csv are skipped, so an interrupted run continues with the same --out.
A run's arguments may name files of its own in DIR with {out}, {suite} and {scenario} (sync.ini's
traced runs: --trace {out}/breakdown/{suite}/{scenario}.trace.json); their folders are made.
--peers: after each suite's runs, the installed peers (peers/, scripts/peerlib.py) repeat the runs
its [peers] section names; their rows join the same CSVs with impl = pytorch, pytorch-ddp, jax or
openmpi.
--launcher mpi|both: the multi-device runs (k > 1) of the sync and scaling suites (of every suite
given with --suite) also run in process mode, `mpirun -np K dpbench train ...` (one rank per
process; Open MPI: --oversubscribe --bind-to none, like the threads, which are not bound), as
scenario <name>-mpi (CSV column launcher = mpi); `mpi` leaves their thread-mode runs out. Without
mpirun they are skipped with a note. DPB_MPIRUN replaces the launcher prefix ({np}: the count),
e.g. DPB_MPIRUN="srun -n {np} --mpi=pmix".
Temporary files (each run's CSV, the microbenchmark JSON and fit JSON until they are complete) live
in DIR/.tmp/, which is emptied when `run` starts and when it ends (also on Ctrl-C, SIGTERM, SIGHUP);
a results file is only ever replaced whole. Exit status of `run`: 0 every run passed, 1 some runs
failed (their rows say which; the other results are complete), 2 bad arguments (--devices beyond
what dpbench runs, an --out that cannot be written: nothing ran), 3 the results folder could not
be written (a full disk: the manifest's status says failed, with the error), 130 interrupted.
Standard library only: it runs under any python3. Suite files and run planning are in
scripts/suitelib.py; the results folder's CSVs, readers and the per-run numbers in
scripts/suite_results.py; its manifest, temporary files and how a run ends (exit status, signals,
a full disk) in scripts/suite_state.py.
"""
# The runner (the launcher, the Runner that executes a plan's steps, the input checks that exit 2)
# is scripts/suite_runner.py.
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_runner import Runner, usage_error  # noqa: E402
from suitelib import ROOT, load_suite, suite_names, SuiteError  # noqa: E402
from suite_state import out_dir_problem, record_outside  # noqa: E402
from summary import write_summary  # noqa: E402


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
    r.add_argument("--devices", default=None, help="device counts (default 1,2,4); given, the "
                   "CUDA microbenchmarks' rank counts may go beyond the GPUs up to the largest")
    r.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    r.add_argument("--bin", default=os.path.join(ROOT, "build", "dpbench"))
    r.add_argument("--micro-bin", default=None)
    r.add_argument("--set", default="", help="dpbench arguments added to every run (they win)")
    r.add_argument("--wrap", default="", help="command prefix for every training run; "
                   "{suite}, {scenario} and {out} are replaced")
    r.add_argument("--info", default="", help="`dpbench info` JSON (else asked from --bin)")
    r.add_argument("--invocation", default="", help="the command line to record")
    r.add_argument("--dry-run", action="store_true", help="print the commands only")
    r.add_argument("--launcher", default="threads", choices=["threads", "mpi", "both"],
                   help="ranks as threads (default); mpi: the k > 1 runs of sync and scaling (of "
                   "the suites given with --suite) as `mpirun -np K` processes instead; both: "
                   "each twice, the process runs named <scenario>-mpi")
    r.add_argument("--no-micro", action="store_true", help="leave the microbenchmarks out")
    r.add_argument("--runs", default="", help="only the runs whose name matches this glob "
                   "(their -mpi twins follow them)")
    r.add_argument("--peers", action="store_true", help="also run the installed peers (peers/) "
                   "on the runs the suites' [peers] sections name")
    rec = sub.add_parser("record", help="add a command run outside (plots) to the manifest")
    rec.add_argument("dir")
    rec.add_argument("--rc", type=int, default=0)
    rec.add_argument("--wall", type=float, default=0)
    rec.add_argument("command", nargs=argparse.REMAINDER)
    s = sub.add_parser("summary", help="print (and write summary.txt/.csv) for a results folder")
    s.add_argument("dir")
    a = p.parse_args(argv)
    if a.cmd == "list":
        unusable = 0
        for name in suite_names():
            try:
                st = load_suite(name)
            except SuiteError as e:  # listed as such; the other suites stay usable
                print(f"{name} (UNUSABLE): {e}")
                unusable += 1
                continue
            print(f"{name}{'' if st.default else ' (not default)'}: {st.about}")
            for rn, args in {**st.runs, **st.cuda_runs, **st.cpu_runs}.items():
                print(f"    {rn}: {' '.join(args)}")
            for rn, args in st.fit_runs.items():
                print(f"    {rn}: dpbench fit {' '.join(args)}")
            for rn, args in st.project_runs.items():
                print(f"    {rn}: dpbench project {' '.join(args)}")
        return 2 if unusable else 0
    if a.cmd == "record":
        record_outside(a.dir, a.command[1:] if a.command[:1] == ["--"] else a.command, a.rc,
                       a.wall)
        return 0
    if a.cmd == "summary":
        print(write_summary(a.dir), end="")
        return 0
    a.suite_given = any(a.suite)
    # Only a default run reads every suite file: --suite X runs while another file is broken.
    try:  # an unknown or unusable suite is bad input: exit 2 naming it, before any work
        a.suite = [x for s in a.suite for x in s.split(",") if x] or sorted(
            (n for n in suite_names() if load_suite(n).default),
            key=lambda n: (bool(load_suite(n).runs), n))  # microbenchmarks first
        for sname in a.suite:
            load_suite(sname)
    except SystemExit as e:  # SuiteError, or load_suite's unknown name
        if not isinstance(e.code, str):
            raise
        usage_error(e.code.removeprefix("run_suite: "))
    a.devices_given = a.devices is not None
    if os.environ.get("DPB_FAKE_GPUS") and not a.dry_run:
        raise SystemExit("run_suite: DPB_FAKE_GPUS plans for a machine that is not this one; it "
                         "is for --dry-run only")
    try:
        a.devices = sorted({int(x) for x in (a.devices or "1,2,4").split(",") if x})
    except ValueError:
        usage_error(f"--devices wants a comma list of counts, got '{a.devices}'")
    if not a.devices or min(a.devices) < 1:
        usage_error("--devices wants positive counts")
    a.micro_bin = a.micro_bin or os.path.join(os.path.dirname(a.bin), "dpbench-micro")
    if not os.access(a.bin, os.X_OK) and not a.dry_run:
        usage_error(f"{a.bin} is not built; run scripts/setup.sh")
    runner = Runner(a)  # checks --devices against `dpbench info`
    problem = "" if a.dry_run else out_dir_problem(a.out)
    if problem:
        usage_error(problem)
    return runner.run()


if __name__ == "__main__":
    sys.exit(main())
