#!/usr/bin/env python3
"""gpu_plan_test.py BUILD_DIR: CI's check that ./run_all.sh plans a GPU machine's run so that
nothing in it is refused for lack of GPUs, on this CPU machine, with fake GPU counts
(DPB_FAKE_GPUS, --dry-run only):
  - one GPU: no NCCL run of more than one rank (NCCL < 2.30 refuses ranks sharing a GPU), as
    threads or processes; each is left out with a note; 8 GPUs: the sync suite's NCCL runs are in;
  - the CUDA microbenchmarks' ranks stop at max(2, GPUs) unless --devices asks for more;
  - the peers that need a GPU per rank (pytorch-ddp, jax) are left out where k > GPUs, and the
    PyTorch/JAX peers get dpbench's float32 math (--tf32 only when the dpbench run has it);
  - with GPUs that nvidia-smi lists (a stub on PATH) but dpbench cannot use, ./run_all.sh stops
    and says why and how to go on (DPB_BACKEND=cpu), and `dpbench info` names the CUDA error.
A few seconds. Run: python3 scripts/gpu_plan_test.py build
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import peerlib  # noqa: E402
import suitelib  # noqa: E402

BUILD = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
PLAN_LINE = re.compile(r"^\[\d+/\d+\] (\S+?)/(\S+): (.*)$")


def run_all(*args, fake=None, env=None, path_prefix=None):
    e = dict(os.environ, DPB_BUILD_DIR=BUILD)
    for k in ("DPB_FAKE_GPUS", "DPB_BACKEND"):
        e.pop(k, None)
    if fake:
        e["DPB_FAKE_GPUS"] = str(fake)
    if path_prefix:
        e["PATH"] = path_prefix + os.pathsep + e["PATH"]
    e.update(env or {})
    return subprocess.run([os.path.join(ROOT, "run_all.sh"), "--dry-run", *args], cwd=ROOT,
                          env=e, capture_output=True, text=True, timeout=300)


def train_lines(out):
    """(suite, scenario, args list, procs) of every training run in a dry run's plan."""
    runs = []
    for line in out.splitlines():
        m = PLAN_LINE.match(line)
        if not m or "dpbench-micro" in m.group(3) or " peer " in line:
            continue
        text, procs = m.group(3), 0
        pm = re.match(r"mpirun -np (\d+) dpbench train (.*)", text)
        if pm:
            procs, text = int(pm.group(1)), pm.group(2)
        runs.append((m.group(1), m.group(2), text.split(), procs))
    return runs


def micro_ranks(out):
    return re.findall(r"micro: dpbench-micro .*--dpb_ranks=([0-9,]+)", out)


class FakeGpuPlan(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(os.path.join(BUILD, "dpbench"), os.X_OK):
            raise unittest.SkipTest(f"{BUILD}/dpbench not built")
        cls.info = json.loads(subprocess.run([os.path.join(BUILD, "dpbench"), "info"],
                                             capture_output=True, text=True).stdout)

    def test_info_lists_the_allreduce_properties(self):
        algs = {a["name"]: a for a in self.info["allreduce_algorithms"]}
        self.assertEqual(algs["nccl"]["runs_on"], ["cuda"])
        self.assertEqual(algs["nccl"]["max_ranks_per_gpu"], 1)  # NCCL 2.28 here, or no NCCL
        self.assertIsNone(algs["ring"]["max_ranks_per_gpu"])
        self.assertEqual(algs["mpi"]["launchers"], ["processes"])

    def test_one_gpu_plans_no_refused_run(self):
        for extra in ((), ("--launcher", "both"), ("--quick",)):
            r = run_all(*extra, fake=1)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("FAKE (DPB_FAKE_GPUS=1", r.stdout)
            runs = train_lines(r.stdout)
            self.assertTrue(runs, r.stdout)
            nccl = [x for x in runs if suitelib.arg_value(x[2], "--allreduce") == "nccl"]
            for suite, name, args, procs in runs:  # the test's oracle: NCCL, one rank per GPU
                if suitelib.arg_value(args, "--allreduce") == "nccl":
                    self.assertLessEqual(int(suitelib.arg_value(args, "--devices", "1")), 1,
                                         f"{suite}/{name} {extra}")
            self.assertFalse(nccl, nccl)  # sync's NCCL runs are all at --devices max (4)
            self.assertRegex(r.stdout, r"note: sync: 6 run\(s\) left out, --allreduce nccl "
                             r"refuses 4 ranks on one GPU \(4 ranks, 1 GPU\(s\)")
            self.assertIn("lenet-nccl-fused-off", r.stdout)

    def test_eight_gpus_plan_the_nccl_runs(self):
        r = run_all("--launcher", "both", fake=8)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        nccl = [(s, n, p) for s, n, a, p in train_lines(r.stdout)
                if suitelib.arg_value(a, "--allreduce") == "nccl"
                and suitelib.arg_value(a, "--devices") == "4"]
        self.assertEqual(len([x for x in nccl if x[2] == 0]), 6, r.stdout)
        if shutil.which("mpirun"):  # the -mpi twins (else left out: no mpirun)
            self.assertEqual(len([x for x in nccl if x[2] == 4]), 6, r.stdout)
        self.assertNotIn("refuses", r.stdout)

    def test_cuda_micro_ranks_stop_at_the_gpus(self):
        self.assertEqual(micro_ranks(run_all("--suite", "micro", fake=1).stdout), ["1,2"])
        self.assertEqual(micro_ranks(run_all("--suite", "micro", fake=8).stdout), ["1,2,4,8"])
        self.assertEqual(micro_ranks(run_all("--suite", "micro", fake=4).stdout), ["1,2,4"])
        asked = run_all("--suite", "micro", "--devices", "1,2,4", fake=1).stdout
        self.assertEqual(micro_ranks(asked), ["1,2,4"], asked)  # --devices asks for more

    def test_fake_gpus_only_with_dry_run(self):
        e = dict(os.environ, DPB_FAKE_GPUS="1", DPB_BUILD_DIR=BUILD)
        r = subprocess.run([os.path.join(ROOT, "run_all.sh"), "--no-build"], cwd=ROOT, env=e,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--dry-run only", r.stderr)

    def test_gpus_dpbench_cannot_use_stop_the_run(self):
        if self.info.get("cuda_devices", 0) > 0:
            self.skipTest("dpbench sees a GPU here: nothing to fake")
        self.assertTrue(self.info.get("cuda_error"), self.info)  # why it sees none
        with tempfile.TemporaryDirectory() as d:
            smi = os.path.join(d, "nvidia-smi")
            with open(smi, "w") as f:
                f.write("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0000)'\n")
            os.chmod(smi, 0o755)
            r = run_all(path_prefix=d)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("nvidia-smi lists 1 GPU(s), but", r.stderr)
            self.assertIn(self.info["cuda_error"], r.stderr)
            self.assertIn("DPB_BACKEND=cpu ./run_all.sh --dry-run", r.stderr)
            self.assertNotIn("plan (--dry-run", r.stdout)  # stopped before planning
            r = run_all(path_prefix=d, env={"DPB_BACKEND": "cpu"})
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("plan (--dry-run", r.stdout)


class PeerPlan(unittest.TestCase):
    def suite_runs(self, gpus):
        suite = suitelib.load_suite("d2l-lenet")
        info = suitelib.effective_info({"cuda_devices": gpus, "allreduce_algorithms": []})
        runs, _ = suitelib.expand_runs(suite, False, "cuda", [1, 2, 4], info=info)
        available = {p.impl: "" for p in peerlib.PEERS}
        return peerlib.plan(suite, runs, available, "cuda", gpus)

    def test_gpu_per_rank_peers_need_the_gpus(self):
        planned, notes = self.suite_runs(1)
        self.assertFalse([(p.peer.impl, p.name) for p in planned
                          if int(suitelib.arg_value(p.args, "--devices")) > 1])
        self.assertTrue([p for p in planned if p.peer.impl == "pytorch"])
        self.assertTrue(any("needs 2 GPUs, one per rank; this machine has 1" in n[2]
                            for n in notes), notes)
        planned, notes = self.suite_runs(8)
        ks = {(p.peer.impl, suitelib.arg_value(p.args, "--devices")) for p in planned}
        self.assertTrue({("pytorch-ddp", "2"), ("jax", "2"), ("pytorch-ddp", "4")} <= ks, ks)
        self.assertFalse([n for n in notes if "GPUs" in n[2]], notes)

    def test_peers_get_dpbench_math(self):
        pr = peerlib.PeerRun(peerlib.BY_IMPL["pytorch"], "d2l-lenet", "x",
                             ["--model", "lenet", "--devices", "1"])
        self.assertNotIn("--tf32", peerlib.train_command(pr, "cuda", ""))
        self.assertEqual(peerlib.math_mode(pr.args, "cuda"), "fp32")
        pr.args = pr.args + ["--tf32"]
        self.assertIn("--tf32", peerlib.train_command(pr, "cuda", ""))
        self.assertEqual(peerlib.math_mode(pr.args, "cuda"), "tf32")
        self.assertNotIn("--tf32", peerlib.train_command(pr, "cpu", ""))  # no TF32 on a CPU
        for script in ("torch_train.py", "jax_lenet.py"):  # both turn the framework's TF32 off
            with open(os.path.join(ROOT, "peers", script)) as f:
                src = f.read()
            self.assertRegex(src, r"allow_tf32 = tf32|\"tensorfloat32\" if a.tf32 else "
                             r"\"float32\"", script)


if __name__ == "__main__":
    unittest.main(verbosity=2)
