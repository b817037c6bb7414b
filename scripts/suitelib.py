"""suitelib.py: the scenario suite files (scenarios/*.ini) and the run planning, what
scripts/run_suite.py, plots/make_plots.py, run_all.sh and the suite tests share: a suite's runs for
the chosen mode, backend and machine (merged arguments, the GPU, host-share, launcher and process
mode refusals, dpbench-micro's arguments, the process-mode twins). A results folder's files (CSVs,
benchmark JSON, atomic writes, the summary's numbers) are scripts/suite_results.py's, which imports
from here (never the other way). Standard library only.
"""
import configparser
import fnmatch
import os
import shlex
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = os.path.join(ROOT, "scenarios")
# every other `dpbench train` / `dpbench fit` flag takes one value
FLAGS_WITHOUT_VALUE = {"--tf32", "--quiet", "--check", "--allow-divergence"}
FIT_PREFIX = "fit-"  # DIR/fit-<suite>.csv: a suite's `dpbench fit` results (not a training CSV)
PROJECT_PREFIX = "project-"  # DIR/project-<suite>.csv: its `dpbench project` results (one row each)

# ----------------------------------------------------------------------------- scenario files


@dataclass
class Run:
    suite: str
    name: str
    args: list  # final `dpbench train` arguments for the chosen mode (no --backend / --csv)
    procs: int = 0  # > 0: run as `mpirun -np procs dpbench train ...` (process mode)
    kind: str = "train"  # "fit": a `dpbench fit` run of the suite's [fit] section; "project":
    # a `dpbench project` of its [project] section (no ranks run: any --devices)


@dataclass
class Suite:
    name: str
    about: str = ""
    default: bool = True
    targets: dict = field(default_factory=dict)  # model -> test accuracy, full mode
    quick_targets: dict = field(default_factory=dict)
    runs: dict = field(default_factory=dict)  # name -> full args (list); insertion ordered
    cuda_runs: dict = field(default_factory=dict)
    cpu_runs: dict = field(default_factory=dict)  # e.g. the emulated link, which GPUs refuse
    cpu_why: str = ""  # why the cpu-only runs are left out of a GPU run (printed as a note)
    fit_runs: dict = field(default_factory=dict)  # [fit]: name -> `dpbench fit` args (list)
    project_runs: dict = field(default_factory=dict)  # [project]: name -> `dpbench project` args
    quick: list = field(default_factory=list)  # (glob, args | None for skip), file order
    micro: dict = field(default_factory=dict)  # "cpu", "cpu.quick", ... -> args
    peer_runs: list = field(default_factory=list)  # globs of runs the peers repeat (peerlib)
    peer_micro: bool = False  # the MPI peer at the suite's all-reduce sizes
    # [suite] launchers = threads, processes: run_suite --launcher mpi|both adds process-mode twins
    # of its multi-device runs even when --suite does not name it (a suite where k ranks as
    # processes measure something the threads do not).
    processes: bool = False

    def target(self, model, quick):
        """Test accuracy for time to accuracy; None: none (e.g. a model time-only in quick)."""
        table = self.quick_targets if quick else self.targets
        return table[model] if model in table else self.targets.get(model)


# The sections of a suite file and their keys; None: keyed by run names or globs.
SUITE_SECTIONS = {
    "suite": {"about", "default", "target", "quick_target", "cpu_only_why", "launchers"},
    "runs": None, "runs.cuda": None, "runs.cpu": None, "fit": None, "project": None, "quick": None,
    "micro": {"cpu", "cpu.quick", "cuda", "cuda.quick"},  # backend[.quick] -> dpbench-micro args
    "peers": {"runs", "micro"},
}


class SuiteError(SystemExit):
    """A suite file that cannot be used (duplicate or unknown key, unknown section, unclosed
    quote, ...): the message names the file and the line. The other suites stay usable."""


def _line_of(path, section, key=None):
    """The line number of [section] (or of its `key = ...`) in a suite file; 0 when not found."""
    current = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            t = line.strip()
            if t.startswith("[") and t.endswith("]"):
                current = t[1:-1].strip()
                if key is None and current == section:
                    return n
            elif key is not None and current == section and not line[:1].isspace() \
                    and t.partition("=")[0].strip() == key:
                return n
    return 0


def _suite_error(path, line, what):
    return SuiteError(f"run_suite: {path}{f' line {line}' if line else ''}: {what}")


def _targets(text, path, key):
    out = {}
    for item in text.split():
        model, _, acc = item.partition(":")
        try:
            out[model] = None if acc == "none" else float(acc)  # none: time only
        except ValueError:
            raise _suite_error(path, _line_of(path, "suite", key),
                               f"{key}: '{item}' is not model:accuracy (or model:none)")
    return out


def suite_names():
    return sorted(f[:-4] for f in os.listdir(SCENARIOS) if f.endswith(".ini"))


def _parse_suite_file(path):
    """The file as a ConfigParser, its sections and fixed keys checked (SuiteError otherwise)."""
    cp = configparser.ConfigParser(interpolation=None, delimiters=("=",), comment_prefixes=("#",),
                                   inline_comment_prefixes=None, strict=True)
    cp.optionxform = str  # run names keep their case
    try:
        with open(path, encoding="utf-8") as f:
            cp.read_file(f)
    except UnicodeDecodeError as e:
        raise _suite_error(path, 0, f"not UTF-8 text (byte {e.start})")
    except (configparser.DuplicateOptionError, configparser.DuplicateSectionError) as e:
        what = (f"[{e.section}] has '{e.option}' twice" if hasattr(e, "option")
                else f"section [{e.section}] twice")
        raise _suite_error(path, e.lineno, what)
    except configparser.MissingSectionHeaderError as e:
        raise _suite_error(path, e.lineno, f"'{e.line.strip()}' before any [section]")
    except configparser.ParsingError as e:
        line, text = e.errors[0]
        raise _suite_error(path, line, f"not 'key = value': {text.strip()}")
    except configparser.Error as e:
        raise _suite_error(path, getattr(e, "lineno", 0), str(e).splitlines()[0])
    if cp.defaults():
        raise _suite_error(path, _line_of(path, "DEFAULT"), "unknown section [DEFAULT] (valid: "
                           + ", ".join(f"[{x}]" for x in SUITE_SECTIONS) + ")")
    for sec in cp.sections():
        if sec not in SUITE_SECTIONS:
            raise _suite_error(path, _line_of(path, sec), f"unknown section [{sec}] (valid: "
                               + ", ".join(f"[{x}]" for x in SUITE_SECTIONS) + ")")
        keys = SUITE_SECTIONS[sec]
        for k in cp[sec]:
            if keys is not None and k not in keys:
                raise _suite_error(path, _line_of(path, sec, k),
                                   f"unknown key '{k}' in [{sec}] (valid: {', '.join(sorted(keys))})")
    return cp


def _split(path, sec, key, value):
    """shlex.split of a run's arguments; an unclosed quote is a SuiteError naming the line."""
    try:
        return shlex.split(value)
    except ValueError as e:
        raise _suite_error(path, _line_of(path, sec, key), f"[{sec}] {key}: {e} in: {value}")


def load_suite(name):
    path = os.path.join(SCENARIOS, name + ".ini")
    if not os.path.exists(path):
        raise SystemExit(f"run_suite: no suite '{name}' (known: {', '.join(suite_names())})")
    cp = _parse_suite_file(path)
    s = Suite(name)
    sec = cp["suite"] if cp.has_section("suite") else {}
    s.about = sec.get("about", "")
    s.default = sec.get("default", "yes").strip().lower() in ("yes", "true", "1")
    s.targets = _targets(sec.get("target", ""), path, "target")
    s.quick_targets = _targets(sec.get("quick_target", ""), path, "quick_target")
    s.cpu_why = sec.get("cpu_only_why", "CPU backend only")
    launchers = {x.strip() for x in sec.get("launchers", "threads").split(",") if x.strip()}
    if not launchers <= {"threads", "processes"} or "threads" not in launchers:
        raise _suite_error(path, _line_of(path, "suite", "launchers"),
                           f"[suite] launchers = '{sec.get('launchers')}' "
                           "(valid: threads | threads, processes)")
    s.processes = "processes" in launchers
    for secname, dest in (("runs", s.runs), ("runs.cuda", s.cuda_runs), ("runs.cpu", s.cpu_runs),
                          ("fit", s.fit_runs), ("project", s.project_runs)):
        if cp.has_section(secname):
            for k, v in cp[secname].items():
                dest[k] = _split(path, secname, k, v)
    if cp.has_section("quick"):
        for k, v in cp["quick"].items():
            s.quick.append((k, None if v.strip() == "skip" else _split(path, "quick", k, v)))
    if cp.has_section("micro"):
        s.micro = dict(cp["micro"].items())
        for k, v in s.micro.items():
            _split(path, "micro", k, v)  # split where they are used: an unclosed quote fails here
    if cp.has_section("peers"):
        s.peer_runs = cp["peers"].get("runs", "").split()
        s.peer_micro = cp["peers"].get("micro", "no").strip().lower() in ("yes", "true", "1")
    return s


def merge_args(base, override):
    """`dpbench train` arguments with the flags in `override` replacing those in `base`; an
    override `--no-FLAG` (not a dpbench flag) takes `--FLAG` out, e.g. [quick] x = --no-check."""
    def pairs(args):
        out, i = [], 0
        while i < len(args):
            a = args[i]
            if a in FLAGS_WITHOUT_VALUE or a.startswith("--no-") or not a.startswith("--") \
                    or "=" in a:
                out.append((a.split("=")[0], [a]))
                i += 1
            else:
                out.append((a, args[i:i + 2]))
                i += 2
        return out
    merged = dict(pairs(base))
    for flag, toks in pairs(override):
        if flag.startswith("--no-"):
            merged.pop("--" + flag[len("--no-"):], None)
        else:
            merged[flag] = toks  # in place when base has the flag
    return [t for toks in merged.values() for t in toks]


def arg_value(args, flag, default=None):
    for i, a in enumerate(args[:-1]):
        if a == flag:
            return args[i + 1]
    return default


# ----------------------------------------------------------------------------- the machine


def effective_info(info):
    """`dpbench info` as the planner sees it. DPB_FAKE_GPUS=N (tests and --dry-run only) makes it a
    CUDA machine with N GPUs whatever this one is, the all-reduce table kept as the build gave it."""
    fake = os.environ.get("DPB_FAKE_GPUS", "")
    if not fake:
        return info
    if not fake.isdigit() or int(fake) < 1:
        raise SystemExit(f"DPB_FAKE_GPUS wants a GPU count (1, 2, ...), got '{fake}'")
    n = int(fake)
    out = dict(info, cuda_built=True, cuda_devices=n, default_backend="cuda", fake_gpus=n,
               gpus=[{"name": "fake GPU (DPB_FAKE_GPUS)", "memory_gib": 80.0,
                      "compute_capability": "9.0"}] * n)
    out.pop("cuda_error", None)
    return out


def gpu_refusal(args, backend, info, procs=0):
    """"" when `dpbench train args` (procs > 0: under mpirun) would not be refused for lack of GPUs
    on the machine `info` describes, else why. It asks the all-reduce's entry in `dpbench info`
    (allreduce_algorithms: runs_on, launchers, max_ranks_per_gpu) rather than knowing names."""
    if backend != "cuda":
        return ""
    name = arg_value(args, "--allreduce", "ring")
    entry = next((e for e in info.get("allreduce_algorithms", []) if e["name"] == name), None)
    if entry is None:  # an older dpbench without the table: it says so when it runs
        return ""
    if backend not in entry.get("runs_on", [backend]):
        return f"--allreduce {name} runs on {', '.join(entry['runs_on'])}, not {backend}"
    if ("processes" if procs else "threads") not in entry.get("launchers", ["threads", "processes"]):
        return f"--allreduce {name} does not run as {'processes' if procs else 'threads'}"
    k, gpus, most = int(arg_value(args, "--devices", "1")), int(info.get("cuda_devices", 0)), \
        entry.get("max_ranks_per_gpu")
    if most is None or gpus < 1 or -(-k // gpus) <= most:
        return ""
    return (f"--allreduce {name} refuses {-(-k // gpus)} ranks on one GPU ({k} ranks, {gpus} "
            f"GPU(s); it allows {most} per GPU here: dpbench info's max_ranks_per_gpu)")


def expand_runs(suite, quick, backend, devices, extra=(), info=None):
    """The runs of a suite for a mode: quick overrides applied, `--devices max` resolved, runs whose
    device count is not in `devices` left out, and, given `dpbench info` (effective_info), the runs
    its GPUs would refuse (gpu_refusal). Returns (runs, [(suite, run, why left out)])."""
    runs, notes = [], []
    table = dict(suite.runs)
    if backend == "cuda":
        table.update(suite.cuda_runs)
        notes += [(suite.name, name, suite.cpu_why) for name in suite.cpu_runs]
    else:
        table.update(suite.cpu_runs)
    kinds = {name: "fit" for name in suite.fit_runs}
    kinds.update({name: "project" for name in suite.project_runs})
    table.update(suite.fit_runs)
    table.update(suite.project_runs)
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
        if kinds.get(name) == "project":  # a prediction for any device count: nothing runs k ranks
            runs.append(Run(suite.name, name, merge_args(args, list(extra)), kind="project"))
            continue
        if dev == "max":
            args = merge_args(args, ["--devices", str(max(devices))])
        elif int(dev) not in devices:
            notes.append((suite.name, name, "device count not in --devices"))
            continue
        args = merge_args(args, list(extra))
        kind = kinds.get(name, "train")
        if kind == "fit":  # the plans run on meta; a real step only under --check
            if "--check" in args:
                why = check_refusal(args, backend, info)
                if why:
                    notes.append((suite.name, name, NO_CHECK_NOTE + why))
                    args = [a for a in args if a != "--check"]
        elif arg_value(args, "--backend") in (None, backend):  # a run on another backend (meta)
            why = gpu_refusal(args, backend, info) if info else ""  # needs none of this one's
            if not why and arg_value(args, "--device-mem") not in (None, "0"):
                why = check_refusal(args, backend, info)  # k devices of that size, for real
            if why:
                notes.append((suite.name, name, why))
                continue
        runs.append(Run(suite.name, name, args, kind=kind))
    return runs, notes


# A note's reason that starts with this: the fit runs, without --check (run_suite prints it so).
NO_CHECK_NOTE = "without --check: "

SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text):
    """Bytes of a --device-mem SIZE as dpbench reads it (24GiB, 80GB, 512MiB, 1000)."""
    t = text.strip().upper()
    num = t.rstrip("KMGTIB")
    unit = t[len(num):]
    if unit not in SIZE_UNITS or not num:
        raise ValueError(f"not a size: '{text}'")
    return int(float(num) * SIZE_UNITS[unit])


# The share of the host's memory that the real steps of a CPU fit --check may use (the check runs
# the answer and the next value, k devices of --device-mem each in this one process).
CHECK_HOST_SHARE = 0.8


def check_refusal(args, backend, info):
    """"" when this machine holds the real steps of `dpbench fit args --check` on backend (k
    devices of --device-mem each), else why not. CPU: k x capacity within CHECK_HOST_SHARE of the
    host's memory (`dpbench info` memory_gib); CUDA: the ranks sharing a GPU fit its memory, and
    the all-reduce does not refuse them (gpu_refusal)."""
    info = info or {}
    k = int(arg_value(args, "--devices", "1"))
    try:
        cap = parse_size(arg_value(args, "--device-mem", "0"))
    except ValueError:
        return ""  # dpbench names the bad size itself
    gib = cap / 2**30
    if backend == "cuda":
        why = gpu_refusal(args, backend, info)
        if why:
            return why
        gpus = info.get("gpus") or []
        per_gpu = -(-k // max(1, len(gpus)))
        mem = min((g.get("memory_gib") or 0 for g in gpus), default=0)
        if gpus and mem and per_gpu * gib > mem:
            return (f"{per_gpu} rank(s) of {gib:g} GiB on a GPU of {mem:g} GiB "
                    f"({k} devices, {len(gpus)} GPU(s))")
        return ""
    host = float(info.get("memory_gib") or 0)
    if host and k * gib > CHECK_HOST_SHARE * host:
        return (f"{k} device(s) x {gib:g} GiB is more than {CHECK_HOST_SHARE:.0%} of this host's "
                f"{host:.1f} GiB")
    return ""


MICRO_DEFAULT_RANKS = (1, 2, 4, 8)  # dpbench-micro's --dpb_ranks when not given (bench/main.cpp)


def micro_args(suite, backend, quick, info=None, devices_asked=()):
    """The suite's dpbench-micro arguments for a mode (None: it has none). On CUDA, given `dpbench
    info`, its rank counts (--dpb_ranks) stop at max(2, GPUs), or at the largest count --devices
    asked for when that is more: ranks beyond the GPUs share them, and an all-reduce of 8 ranks on
    one H200 cost ~600 us a call at every size (the sweep was not done after 4 minutes)."""
    args = suite.micro.get(backend + (".quick" if quick else "")) or suite.micro.get(backend)
    if args is None or backend != "cuda" or not info:
        return args
    cap = max([2, int(info.get("cuda_devices", 0))] + list(devices_asked))
    toks = shlex.split(args)
    given = [t for t in toks if t.startswith("--dpb_ranks=")]
    ranks = [int(x) for x in given[-1].split("=", 1)[1].split(",") if x] if given \
        else list(MICRO_DEFAULT_RANKS)
    kept = [r for r in ranks if r <= cap] or [min(ranks)]
    if kept == ranks and given:
        return args
    return " ".join(shlex.quote(t) for t in toks if not t.startswith("--dpb_ranks=")) + \
        " --dpb_ranks=" + ",".join(map(str, kept))


MPI_SUFFIX = "-mpi"  # scenario name of a run's process-mode twin
# Flag combinations `dpbench train` refuses in process mode (src/train/trainer.cpp validate):
# (predicate over the args, why). A twin that one refuses is left out with the note.
PROCESS_REFUSALS = [
    (lambda a: arg_value(a, "--allreduce") == "mpi" and
     float(arg_value(a, "--link-gbps", "0")) + float(arg_value(a, "--link-latency-us", "0")) > 0,
     "process mode refuses --allreduce mpi with the emulated link"),
]


def launcher_refusal(args, info, launcher):
    """"" when `dpbench train args` runs with its ranks as `launcher` (threads | processes), else
    why not, from its all-reduce's entry in `dpbench info` (launchers): --allreduce mpi runs as
    processes only, so such a run is planned as its process-mode twin only (run_suite --launcher
    mpi|both); an algorithm not yet written for processes gets no twin."""
    name = arg_value(args, "--allreduce", "ring")
    entry = next((e for e in (info or {}).get("allreduce_algorithms", []) if e["name"] == name),
                 None)
    if entry is None or launcher in entry.get("launchers", [launcher]):
        return ""
    if launcher == "threads":
        return f"--allreduce {name} runs as processes only (--launcher mpi|both)"
    return f"--allreduce {name} does not run as processes in this build"


def mpi_twins(runs, backend="cpu", info=None):
    """Process-mode twins (scenario + MPI_SUFFIX, procs = k) of the multi-device runs, and
    [(suite, run, why left out)] for those process mode or the machine's GPUs refuse."""
    twins, notes = [], []
    for r in runs:
        k = int(arg_value(r.args, "--devices", "1"))
        if k < 2 or r.kind != "train" or arg_value(r.args, "--backend") == "meta":
            continue
        why = next((w for refused, w in PROCESS_REFUSALS if refused(r.args)), None) or \
            (gpu_refusal(r.args, backend, info, procs=k) if info else None) or \
            launcher_refusal(r.args, info, "processes")
        if why:
            notes.append((r.suite, r.name + MPI_SUFFIX, why))
        else:
            twins.append(Run(r.suite, r.name + MPI_SUFFIX, r.args, procs=k))
    return twins, notes
