"""peerlib.py: the peers (peers/: the reference implementations people compare dpbench with) as
one table, and how scripts/run_suite.py runs them beside a suite's own runs (`--peers`).

A suite names what its peers repeat in its [peers] section (scenarios/d2l-lenet.ini):
  runs = GLOB ...   dpbench runs each available training peer repeats with the same data and
                    recipe (model, global batch, lr, epochs, data limits, seed, device count)
  micro = yes       OpenMPI's MPI_Allreduce at the ranks and message sizes of the suite's all-reduce
                    microbenchmarks
Peer rows go into the same CSVs as dpbench's, told apart by the `impl` column (dpbench, pytorch,
pytorch-ddp, jax, openmpi), with dpbench's columns (blank where a peer has no such number).
Adding a peer: a script in peers/ that prints `DPB_PEER {json}` per epoch (peers/common.py) and
one Peer entry below. Standard library only.
"""
import fnmatch
import json
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass

from suitelib import ROOT, arg_value

PEERS_DIR = os.path.join(ROOT, "peers")
TORCH_HINT = "sudo apt-get install python3-torch (Debian 12), or: DPB_PEERS=1 scripts/setup.sh"
JAX_HINT = ("not packaged by Debian 12: /usr/bin/python3 -m pip install --break-system-packages "
            "'jax[cuda12]' (or a venv and DPB_PEER_PYTHON=VENV/bin/python)")
MPI_HINT = "sudo apt-get install openmpi-bin libopenmpi-dev (scripts/setup.sh installs them)"


def peer_python():
    """Debian's python3 sees python3-torch; a pyenv python3 on PATH does not."""
    return os.environ.get("DPB_PEER_PYTHON") or "/usr/bin/python3"


@dataclass
class Peer:
    impl: str  # the `impl` column
    family: str  # speedup reference: a run's 1-device run of the same family
    kind: str  # "train" (mirrors training runs) or "micro" (mirrors all-reduce benchmarks)
    about: str
    probe: str  # python code that exits 0 when the framework works ("" for the MPI peer)
    install: str
    gpu_only: bool = False
    gpu_per_rank: bool = False  # on CUDA each rank needs a GPU of its own (NCCL, pmap)
    min_devices: int = 1
    max_devices: int = 1 << 30
    # model -> the script in peers/ that repeats its runs (and the arguments it adds)
    scripts: dict = None
    shard: str = "none"  # the `dpbench train --shard` mode whose runs it repeats (sharding suite)

    @property
    def models(self):
        return tuple(self.scripts or ())

    def available(self, backend):
        """'' when this peer can run here, else why not (with how to install it)."""
        if self.gpu_only and backend != "cuda":
            return "GPU only (this run's backend is cpu)"
        if self.kind == "micro":
            missing = [c for c in ("mpicc", "mpirun") if not shutil.which(c)]
            return f"{' and '.join(missing)} not found: {self.install}" if missing else ""
        code = self.probe + ("; import torch; assert torch.cuda.is_available()"
                             if backend == "cuda" and "torch" in self.probe else "")
        try:
            r = subprocess.run([peer_python(), "-c", code], capture_output=True, text=True,
                               timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            return f"{peer_python()} failed ({e}): {self.install}"
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["?"])[-1][:120]
            return f"not usable with {peer_python()} ({last}): {self.install}"
        return ""

    def mirrors(self, args, backend, gpus=None):
        """'' when this peer can repeat the dpbench run with these arguments on a machine with
        `gpus` GPUs (None: not known), else why not."""
        model, k = arg_value(args, "--model", "lenet"), int(arg_value(args, "--devices", "1"))
        if self.gpu_only and backend != "cuda":
            return "GPU only"
        if backend == "cuda" and self.gpu_per_rank and gpus is not None and k > gpus:
            return f"needs {k} GPUs, one per rank; this machine has {gpus}"
        if model not in self.models:
            return f"no {model} peer"
        if arg_value(args, "--shard", "none") != self.shard:  # another peer's mode: no note
            return SHARD_MISMATCH + arg_value(args, "--shard", "none")
        if arg_value(args, "--backend") == "meta":
            return "a planning run (--backend meta): no step to repeat"
        if self.scripts[model][0] not in MLP_SCRIPTS:  # the d2l scripts: SGD, xent, the dataset
            for flag, default in RECIPE_DEFAULTS.items():
                if arg_value(args, flag, default) != default:
                    return f"{flag} {arg_value(args, flag)} (peers/{self.scripts[model][0]})"
        if not self.min_devices <= k <= self.max_devices:
            return f"{k} device(s)"
        if float(arg_value(args, "--warmup-epochs", "0")) > 0:
            return "lr warmup"
        return ""


SHARD_MISMATCH = "--shard "
ZERO_SCRIPTS = {m: ("torch_mlp.py", "--shard", "optimizer") for m in ("mlp", "resnet18")}
FSDP_SCRIPTS = {m: ("torch_mlp.py", "--shard", "parameters") for m in ("mlp", "resnet18")}
TORCH_SCRIPTS = {"lenet": ("torch_train.py",), "resnet18": ("torch_train.py",),
                 "mlp": ("torch_mlp.py",)}
MLP_SCRIPTS = ("torch_mlp.py", "jax_mlp.py")  # they take the MLP_ARGS too
# What the d2l scripts (torch_train.py, jax_lenet.py) do; a run asking otherwise is not repeated.
RECIPE_DEFAULTS = {"--optimizer": "sgd", "--loss": "xent", "--data": "fashion-mnist"}

PEERS = (
    Peer("pytorch", "pytorch", "train", "PyTorch, one device: d2l 12.5 LeNet / 12.6 ResNet-18 "
         "(peers/torch_train.py), the notebook's MLP (peers/torch_mlp.py)", "import torch",
         TORCH_HINT, max_devices=1, scripts=TORCH_SCRIPTS),
    Peer("pytorch-ddp", "pytorch", "train", "PyTorch DistributedDataParallel, K processes, Gloo "
         "(CPU) or NCCL (GPU) (peers/torch_train.py, peers/torch_mlp.py)", "import torch",
         TORCH_HINT, gpu_per_rank=True, min_devices=2,  # DDP over NCCL refuses two ranks on one GPU
         scripts=TORCH_SCRIPTS),
    Peer("jax", "jax", "train", "JAX pmap LeNet on K GPUs (peers/jax_lenet.py)",
         "import jax; assert jax.default_backend() == 'gpu'", JAX_HINT, gpu_only=True,
         gpu_per_rank=True,  # pmap over K devices needs K GPUs
         scripts={"lenet": ("jax_lenet.py",)}),
    # The sharding notebook's modes (seed 004) on its MLP; on the CPU over XLA host devices.
    Peer("jax-jit", "jax", "train", "JAX jit: the notebook's jit_single (1 device) and jit_multi "
         "(batch sharded over K devices) (peers/jax_mlp.py --mode jit)", "import jax", JAX_HINT,
         gpu_per_rank=True, scripts={"mlp": ("jax_mlp.py", "--mode", "jit")}),
    Peer("jax-pmap", "jax", "train", "JAX pmap: the notebook's pmap mode on K devices "
         "(peers/jax_mlp.py --mode pmap)", "import jax", JAX_HINT, gpu_per_rank=True,
         min_devices=2, scripts={"mlp": ("jax_mlp.py", "--mode", "pmap")}),
    # The sharded modes (the sharding suite): ZeRO-1 and FSDP's full shard (ZeRO-3) in PyTorch.
    Peer("torch-zero1", "pytorch", "train", "PyTorch ZeroRedundancyOptimizer (ZeRO-1) beside DDP, "
         "K processes, Gloo (CPU) or NCCL (GPU) (peers/torch_mlp.py --shard optimizer)",
         "import torch; from torch.distributed.optim import ZeroRedundancyOptimizer", TORCH_HINT,
         gpu_per_rank=True, scripts=ZERO_SCRIPTS, shard="optimizer"),
    Peer("torch-fsdp", "pytorch", "train", "PyTorch FullyShardedDataParallel, full shard (ZeRO-3), "
         "K GPUs, NCCL (peers/torch_mlp.py --shard parameters)",
         "import torch.distributed.fsdp", TORCH_HINT, gpu_only=True, gpu_per_rank=True,
         scripts=FSDP_SCRIPTS, shard="parameters"),
    Peer("openmpi", "openmpi", "micro", "OpenMPI MPI_Allreduce, K processes "
         "(peers/mpi_allreduce.c)", "", MPI_HINT),
)
BY_IMPL = {p.impl: p for p in PEERS}
FAMILY = {p.impl: p.family for p in PEERS} | {"dpbench": "dpbench"}
PEER_ARGS = ("--model", "--batch", "--lr", "--epochs", "--train-limit", "--test-limit", "--seed",
             "--devices")
MLP_ARGS = ("--mlp-layers", "--mlp-hidden", "--mlp-input", "--optimizer", "--loss", "--data")


@dataclass
class PeerRun:
    peer: Peer
    suite: str
    name: str  # the dpbench run it mirrors (its scenario)
    args: list  # that run's final dpbench arguments


def check_available(backend):
    """({impl: ''}, {impl: why not}) for every peer, printed for the user."""
    ok, missing = {}, {}
    for p in PEERS:
        why = p.available(backend)
        (missing if why else ok)[p.impl] = why
    print("peers: " + (", ".join(ok) or "none available") + " (DPB_PEER_PYTHON=" +
          peer_python() + ")", flush=True)
    for impl, why in missing.items():
        print(f"  peer {impl} not run: {why}", flush=True)
    return ok, missing


def plan(suite, runs, available, backend, gpus=None):
    """PeerRuns for a suite's expanded dpbench runs, and notes on what is not mirrored; gpus: the
    machine's GPU count (`dpbench info` cuda_devices; None: not known)."""
    out, notes = [], []
    globs = suite.peer_runs
    for run in runs:
        if run.kind != "train" or not any(fnmatch.fnmatchcase(run.name, g) for g in globs):
            continue
        for p in PEERS:
            if p.kind == "train" and p.impl in available:
                why = p.mirrors(run.args, backend, gpus)
                if not why:
                    out.append(PeerRun(p, suite.name, run.name, run.args))
                elif "device" not in why and not why.startswith(SHARD_MISMATCH):
                    # a peer for other device counts or another --shard mode: no news
                    notes.append((suite.name, f"{p.impl} {run.name}", "not repeated by the "
                                  "peer: " + why))
    return out, notes


def math_mode(args, backend):
    """The float32 math of a dpbench run, which its peers repeat: dpbench is strict FP32 unless
    --tf32 (cuDNN/cuBLAS tensor-op math on GPUs); the CPU backend has no TF32."""
    return "tf32" if backend == "cuda" and "--tf32" in args else "fp32"


def train_command(pr, backend, data_dir):
    a = pr.args
    script, *extra = pr.peer.scripts[arg_value(a, "--model", "lenet")]
    cmd = [peer_python(), os.path.join(PEERS_DIR, script)] + extra
    for flag in PEER_ARGS + (MLP_ARGS if script in MLP_SCRIPTS else ()):
        v = arg_value(a, flag)
        if v is not None:
            cmd += [flag, v]
    if script.startswith("torch_"):
        cmd += ["--device", "cuda" if backend == "cuda" else "cpu"]
        threads = arg_value(a, "--threads")
        if threads:
            cmd += ["--threads", threads]
    if math_mode(a, backend) == "tf32":  # else the peer turns its framework's TF32 off
        cmd += ["--tf32"]
    if data_dir:
        cmd += ["--data-dir", data_dir]
    return cmd


def epoch_rows(pr, backend, log_lines):
    """dpbench-schema rows (dicts) from a training peer's `DPB_PEER {json}` lines."""
    a, impl = pr.args, pr.peer.impl
    k = int(arg_value(a, "--devices", "1"))
    limited = arg_value(a, "--train-limit") or arg_value(a, "--test-limit")
    sync = {"pytorch-ddp": ("nccl" if backend == "cuda" else "gloo", "ddp-bucketed", "on", 25),
            "jax": ("pmean", "fused", "off", ""), "jax-pmap": ("pmean", "fused", "off", ""),
            "jax-jit": ("xla-spmd", "xla", "xla", ""),
            "torch-zero1": ("nccl" if backend == "cuda" else "gloo", "ddp-bucketed", "on", 25),
            "torch-fsdp": ("nccl", "fsdp", "on", "")}.get(impl, ("", "", "", ""))
    rows = []
    for line in log_lines:
        if not line.startswith("DPB_PEER "):
            continue
        e = json.loads(line[len("DPB_PEER "):])
        rows.append({
            "suite": pr.suite, "scenario": pr.name, "impl": impl,
            "model": arg_value(a, "--model", "lenet"), "backend": backend, "devices": k,
            "shared_gpu": 0, "quick": 1 if limited else 0, "allreduce": sync[0],
            "grad_sync": sync[1], "overlap": sync[2], "bucket_mb": sync[3],
            "global_batch": arg_value(a, "--batch", "256"), "lr": arg_value(a, "--lr", "0.2"),
            "warmup_epochs": 0, "seed": arg_value(a, "--seed", "1"),
            "train_examples": e.get("train_examples", ""),
            "test_examples": e.get("test_examples", ""), "epoch": e["epoch"],
            "lr_end": arg_value(a, "--lr", "0.2"), "train_loss": e["train_loss"],
            "train_acc": e["train_acc"], "test_acc": e["test_acc"], "epoch_s": e["epoch_s"],
            "images_per_s": e["images_per_s"],  # the rest (times, sync checks): blank
            # the memory peers' peak per device, and how they measured it (peers/torch_mlp.py)
            **{c: e[c] for c in ("peak_mem_bytes", "peak_mem_source", "peak_mem_base_bytes",
                                 "peak_mem_parameters_bytes", "peak_mem_gradients_bytes",
                                 "peak_mem_optimizer_state_bytes", "shard") if c in e},
        })
    return rows


# ----------------------------------------------------------------------------- MPI peer


def mpi_binary(build_dir):
    """Compiles peers/mpi_allreduce.c with mpicc into BUILD/peers/ when missing or stale."""
    src = os.path.join(PEERS_DIR, "mpi_allreduce.c")
    exe = os.path.join(build_dir, "peers", "mpi_allreduce")
    if os.path.exists(exe) and os.path.getmtime(exe) >= os.path.getmtime(src):
        return exe, None
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    cmd = ["mpicc", "-O2", "-o", exe + ".tmp", src]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"{' '.join(cmd)} failed: {r.stderr.strip()[:300]}"
    os.replace(exe + ".tmp", exe)
    return exe, None


def mpi_command(exe, ranks, sizes, min_time):
    launcher = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
    if os.geteuid() == 0:
        launcher.insert(1, "--allow-run-as-root")
    return launcher + [exe, "--min-time", f"{min_time:g}"] + [str(b) for b in sizes]


def mpi_env():
    env = dict(os.environ)
    if os.geteuid() == 0:  # OpenMPI refuses root without both
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def micro_targets(micro_rows):
    """{ranks: [bytes...]} of dpbench's all-reduce benchmarks (not shared-GPU ones)."""
    out = {}
    for r in micro_rows:
        if r.get("family") == "allreduce" and not r.get("shared") and r.get("ranks") and \
                r.get("bytes"):
            out.setdefault(int(r["ranks"]), set()).add(int(r["bytes"]))
    return {k: sorted(v) for k, v in sorted(out.items())}


def min_time_of(micro_args, default=0.1):
    for tok in shlex.split(micro_args or ""):
        if tok.startswith("--benchmark_min_time="):
            try:
                return float(tok.split("=", 1)[1].rstrip("s"))
            except ValueError:
                pass
    return default


def micro_rows(log_lines, backend, quick):
    """bench_to_csv-schema rows (dicts) from the MPI peer's `DPB_PEER_MICRO k=v ...` lines."""
    rows = []
    for line in log_lines:
        if not line.startswith("DPB_PEER_MICRO "):
            continue
        f = dict(kv.split("=", 1) for kv in line.split()[1:])
        ranks, size = int(f["ranks"]), int(f["bytes"])
        rows.append({"name": f"allreduce/cpu/openmpi/ranks:{ranks}/bytes:{size}",
                     "impl": "openmpi", "backend": "cpu", "kind": "allreduce",
                     "algorithm_mode": "openmpi", "ranks": ranks, "devices": ranks,
                     "bytes": size, "shared_gpu": False, "quick": int(quick),
                     "real_time_s": f["time_s"], "algbw_GBps": f["algbw_GBps"],
                     "busbw_GBps": f["busbw_GBps"], "wrong": f["wrong"],
                     "iterations": f.get("reps", ""), "aggregate": "median"})
    return rows


# ----------------------------------------------------------------------------- running them


def _done(csv_path, scenario, impl, read_rows):
    return os.path.exists(csv_path) and any(
        r["scenario"] == scenario and r["impl"] == impl for r in read_rows(csv_path))


def run_train_peer(runner, pr, n, total):
    """Runs one training peer for a dpbench run and adds its rows to the suite CSV."""
    from suite_results import read_rows
    a = runner.a
    suite_csv = os.path.join(runner.out, f"{pr.suite}.csv")
    tag = f"[{n}/{total} {runner.elapsed()}] {pr.suite}/{pr.name} peer {pr.peer.impl}"
    if _done(suite_csv, pr.name, pr.peer.impl, read_rows):
        print(f"{tag}: already in {suite_csv}, skipped", flush=True)
        return
    cmd = train_command(pr, a.backend, arg_value(pr.args, "--data-dir"))
    print(f"{tag}: {' '.join(shlex.quote(c) for c in cmd[1:])}", flush=True)
    log = os.path.join(runner.out, "logs", pr.suite, f"{pr.name}.{pr.peer.impl}.log")
    rc, wall, tail = runner.execute(cmd, log, lambda line: line.startswith("epoch"))
    with open(log) as f:
        rows = epoch_rows(pr, a.backend, f)
    if rows:
        from suite_results import append_rows
        append_rows(suite_csv, rows, fallback_columns())
    entry = {"suite": pr.suite, "scenario": pr.name, "impl": pr.peer.impl, "cmd": cmd, "rc": rc,
             "wall_s": round(wall, 2), "log": os.path.relpath(log, runner.out),
             "math": math_mode(pr.args, a.backend)}
    _finish(runner, entry, rc, wall, tail, f"{len(rows)} epoch rows -> {suite_csv}")


def run_micro_peer(runner, suite, n, total):
    """MPI_Allreduce at the ranks and sizes of the suite's dpbench all-reduce benchmarks; rows go
    to DIR/micro-<suite>.csv beside dpbench's."""
    from suite_results import append_rows, read_micro
    a = runner.a
    tag = f"[{n}/{total} {runner.elapsed()}] {suite.name}: peer openmpi"
    bench = os.path.join(runner.out, f"micro-{suite.name}.json")
    csv_path = bench[:-5] + ".csv"
    if not os.path.exists(bench):
        print(f"{tag}: skipped, no dpbench all-reduce results to compare with", flush=True)
        return
    if os.path.exists(csv_path) and "openmpi" in open(csv_path).read():
        print(f"{tag}: already in {csv_path}, skipped", flush=True)
        return
    targets = micro_targets(read_micro(bench)[0])
    exe, err = mpi_binary(os.path.dirname(os.path.abspath(a.bin)))
    print(f"{tag}: MPI_Allreduce at " + "; ".join(
        f"{k} ranks x {len(v)} sizes" for k, v in targets.items()), flush=True)
    if err:
        runner.failures.append(f"{suite.name}/openmpi ({err})")
        print("      FAILED: " + err, flush=True)
        return
    key = a.backend + (".quick" if a.quick else "")
    min_time = min_time_of(suite.micro.get(key) or suite.micro.get(a.backend))
    os.environ.update({k: v for k, v in mpi_env().items() if k.startswith("OMPI_ALLOW")})
    for ranks, sizes in targets.items():
        cmd = mpi_command(exe, ranks, sizes, min_time)
        log = os.path.join(runner.out, "logs", suite.name, f"openmpi-{ranks}.log")
        rc, wall, tail = runner.execute(cmd, log, lambda line: line.startswith("DPB_PEER_MICRO"))
        with open(log) as f:
            rows = micro_rows(f, a.backend, a.quick)
        if rows:
            append_rows(csv_path, rows, ["name", "impl"])
        entry = {"suite": suite.name, "scenario": f"openmpi-{ranks}", "impl": "openmpi",
                 "cmd": cmd, "rc": rc, "wall_s": round(wall, 2),
                 "log": os.path.relpath(log, runner.out)}
        _finish(runner, entry, rc, wall, tail, f"{len(rows)} rows -> {csv_path}")


def _finish(runner, entry, rc, wall, tail, done):
    runner.step_end(rc != 0, f"{entry['suite']}/{entry['scenario']} peer {entry['impl']}", rc,
                    wall, tail, entry["log"], ", " + done)
    runner.record(entry)


def fallback_columns():
    """The suite CSV's columns when no dpbench run wrote its header yet: suite, scenario, then
    dpbench's column table (scripts/train_csv_columns.json, impl first)."""
    from suite_results import TRAIN_CSV_COLUMNS
    return ["suite", "scenario"] + [c["name"] for c in TRAIN_CSV_COLUMNS]
