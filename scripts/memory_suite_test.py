#!/usr/bin/env python3
"""memory_suite_test.py: CI's check of the memory suite's machinery (scenarios/memory.ini) without
dpbench's math: the plan in quick and full mode (the small MLP's real steps in quick, --backend
meta kept, [quick] --no-FLAG, --check and --device-mem runs left out where the host or the GPU
cannot hold k devices of 24 GiB), the peers it plans (the MLP flags reach peers/torch_mlp.py and
peers/jax_mlp.py; planning runs are not repeated), and a whole quick run of run_suite.py against a
stand-in dpbench (train writes dpbench's CSV columns, fit writes `dpbench fit --json`'s object):
memory.csv, fit-memory.csv, the report beside the notebook's figures in summary.txt, and the
figures (where matplotlib is). Seconds; the real suite runs in scripts/run_all_modes_test.sh.
  python3 scripts/memory_suite_test.py
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import memory_report  # noqa: E402
import peerlib  # noqa: E402
import suitelib  # noqa: E402
from suitelib import arg_value  # noqa: E402

HOST_24 = {"memory_gib": 23.5, "cores": 2, "cpu": "test CPU", "cuda_devices": 0}
HOST_256 = dict(HOST_24, memory_gib=256.0)

# A stand-in `dpbench`: train writes one CSV row per epoch with dpbench's columns (a peak that
# grows with the batch per device and the depth), fit writes the JSON object of `dpbench fit`.
FAKE_DPBENCH = textwrap.dedent('''\
    #!/usr/bin/env python3
    import csv, json, sys
    cols = [c["name"] for c in json.load(open(sys.argv[1]))["columns"]]
    cmd, args = sys.argv[2], sys.argv[3:]
    val = lambda f, d=None: args[args.index(f) + 1] if f in args else d
    cats = ["parameters", "gradients", "optimizer_state", "activations", "temporaries",
            "workspace", "comm", "data"]
    layers, hidden = int(val("--mlp-layers", "90")), int(val("--mlp-hidden", "2056"))
    k = int(val("--devices", "1"))
    def peak(batch_per_device, layers):
        params = 4 * layers * hidden * hidden
        b = {"parameters": params, "gradients": params, "optimizer_state": 2 * params,
             "activations": 8 * layers * hidden * batch_per_device, "temporaries": 1 << 20,
             "workspace": 0, "comm": 0 if k == 1 else 1 << 16, "data": 4096 * batch_per_device}
        return sum(b.values()), b
    if cmd == "train":
        assert args.count("--backend") == 1, args
        backend, out = val("--backend"), val("--csv")
        gb = int(val("--batch", "256"))
        total, b = peak(-(-gb // k), layers)
        with open(out, "w", newline="") as f:
            w = csv.DictWriter(f, cols)
            w.writeheader()
            for ep in range(1, int(val("--epochs", "10")) + 1):
                r = {c: 0 for c in cols}
                mlp = val("--model") == "mlp"
                inp = int(val("--mlp-input", "1024")) if val("--data") == "synthetic" else 784
                r.update(impl="dpbench", model=val("--model", "lenet"), backend=backend,
                         optimizer=val("--optimizer", "sgd"), loss=val("--loss", "xent"),
                         data=val("--data", "fashion-mnist"),
                         model_params=layers * hidden * hidden if mlp else 129068,
                         mlp_layers=layers if mlp else "", mlp_hidden=hidden if mlp else "",
                         mlp_input=inp if mlp else "",
                         devices=k, global_batch=gb, train_examples=val("--train-limit", "60000"),
                         test_examples=val("--test-limit", "10000"), epoch=ep, epoch_s=0.5 * ep,
                         quick=1, peak_mem_bytes=total, device_mem_bytes=0)
                if backend == "meta":  # no math: no loss, accuracy or time
                    r.update(test_acc="", train_acc="", train_loss="", replicas_in_sync="",
                             epoch_s="", images_per_s="")
                for c in cats:
                    r[f"peak_mem_{c}_bytes"] = b[c]
                w.writerow(r)
            print("final test acc 0.1 devices: fake")
    elif cmd == "fit":
        cap = 24 << 30 if val("--device-mem") == "24GiB" else 64 << 20
        vary = val("--vary", "batch")
        fits = lambda v: peak(v, layers)[0] <= cap if vary == "batch" else \\
            peak(-(-int(val("--batch")) // k), v)[0] <= cap
        ans = max((v for v in range(1, 60001 if vary == "batch" else 1001) if fits(v)),
                  default=0)
        gb = ans * k if vary == "batch" else int(val("--batch"))
        total, b = peak(ans if vary == "batch" else -(-gb // k), ans if vary == "layers"
                        else layers)
        j = {"model": "mlp", "optimizer": val("--optimizer"), "loss": val("--loss"),
             "data": val("--data"), "mlp": {"layers": layers, "hidden": hidden,
                                             "input": int(val("--mlp-input", "1024"))},
             "devices": k, "device_mem_bytes": cap, "vary": vary, "plan_backend": "meta",
             "fits": ans > 0, "answer": ans, "batch_per_device": -(-gb // k),
             "global_batch": gb, "limit": 60000 // k, "limit_hit": False, "peak_at": ans,
             "peak_mem_bytes": total, "peak_rank": 0, "peak_mem": b,
             "plans": [{"value": 1, "fits": True, "peak_mem_bytes": 1, "seconds": 0.1}],
             "search_s": 0.1}
        if "--check" in args:
            j["check"] = {"backend": val("--backend"), "ok": True, "runs": [
                {"value": ans, "expected": "fits", "got": "fits", "peak_mem_bytes": total},
                {"value": ans + 1, "expected": "out of memory", "got": "out of memory",
                 "peak_mem_bytes": 0}]}
        json.dump(j, open(val("--json"), "w"))
        print(f"  largest batch per device that fits: {ans}")
    ''')


def plan(quick, backend="cpu", info=HOST_24, devices=(1, 2, 4)):
    runs, notes = suitelib.expand_runs(suitelib.load_suite("memory"), quick, backend,
                                       list(devices), (), info)
    return {r.name: r for r in runs}, notes


class MemoryPlan(unittest.TestCase):
    def test_quick_plan(self):
        runs, notes = plan(True)
        k1 = runs["mlp-k1"].args
        self.assertEqual((arg_value(k1, "--mlp-layers"), arg_value(k1, "--mlp-hidden"),
                          arg_value(k1, "--batch")), ("8", "256", "256"))
        self.assertNotIn("--device-mem", k1, "[quick] --no-device-mem takes it out")
        self.assertEqual(arg_value(runs["mlp-x54-k2"].args, "--batch"), "512")
        for name in ("plan-mlp-k1", "plan-mlp-x54-k1", "plan-lenet-k4", "plan-resnet18-k4"):
            self.assertEqual(arg_value(runs[name].args, "--backend"), "meta", name)
        self.assertEqual(arg_value(runs["plan-mlp-k1"].args, "--mlp-layers"), "90")
        for k in (1, 2, 4):  # planned at full size, no real step at full size in quick mode
            self.assertEqual(runs[f"fit-mlp-batch-k{k}"].kind, "fit")
            self.assertNotIn("--check", runs[f"fit-mlp-batch-k{k}"].args)
            self.assertNotIn("--check", runs[f"fit-mlp-layers-k{k}"].args)
            self.assertEqual(arg_value(runs[f"fit-mlp-layers-k{k}"].args, "--vary"), "layers")
        self.assertIn("--check", runs["fit-small-k1"].args)
        self.assertNotIn("mlp-b256-k1", runs)
        self.assertFalse([n for n in notes if n[2].startswith(suitelib.NO_CHECK_NOTE)])

    def test_full_plan_on_a_small_host(self):
        runs, notes = plan(False)  # 23.5 GiB: no k x 24 GiB for real
        for name in ("mlp-k1", "mlp-k2", "mlp-x54-k2"):
            self.assertNotIn(name, runs)
        self.assertIn("mlp-b256-k1", runs, "[runs.cpu]: the full-depth MLP at batch 256")
        self.assertNotIn("--check", runs["fit-mlp-batch-k1"].args)
        why = {n[1]: n[2] for n in notes}
        self.assertIn("more than 80% of this host's 23.5 GiB", why["mlp-k1"])
        self.assertTrue(why["fit-mlp-layers-k4"].startswith(suitelib.NO_CHECK_NOTE))

    def test_full_plan_on_a_large_host(self):
        runs, notes = plan(False, info=HOST_256)  # 256 GiB: k = 1, 2, 4 of 24 GiB fit in 80%
        self.assertEqual(arg_value(runs["mlp-k1"].args, "--device-mem"), "24GiB")
        self.assertIn("--check", runs["fit-mlp-batch-k4"].args)
        runs, _ = plan(False, info=dict(HOST_256, memory_gib=100))  # 4 x 24 > 80 GiB
        self.assertNotIn("--check", runs["fit-mlp-batch-k4"].args)
        self.assertIn("--check", runs["fit-mlp-batch-k2"].args)

    def test_gpu_plan(self):
        info = suitelib.effective_info({"allreduce_algorithms": []})
        os.environ["DPB_FAKE_GPUS"] = "1"
        try:
            info = suitelib.effective_info({"allreduce_algorithms": []})
        finally:
            del os.environ["DPB_FAKE_GPUS"]
        runs, notes = plan(False, "cuda", info)
        self.assertIn("mlp-k2", runs)  # 2 ranks of 24 GiB share one 80 GiB GPU
        self.assertIn("--check", runs["fit-mlp-batch-k2"].args)
        self.assertNotIn("--check", runs["fit-mlp-batch-k4"].args)  # 96 GiB on 80
        self.assertNotIn("mlp-b256-k1", runs)

    def test_sizes_and_overrides(self):
        self.assertEqual(suitelib.parse_size("24GiB"), 24 * 2**30)
        self.assertEqual(suitelib.parse_size("80GB"), 80 * 10**9)
        self.assertEqual(suitelib.parse_size("512MiB"), 512 * 2**20)
        self.assertEqual(suitelib.parse_size("1000"), 1000)
        with self.assertRaises(ValueError):
            suitelib.parse_size("12parsecs")
        self.assertEqual(suitelib.merge_args(["--a", "1", "--check", "--b", "2"],
                                             ["--no-check", "--b", "3", "--no-a"]),
                         ["--b", "3"])


class MemoryPeers(unittest.TestCase):
    def test_peer_commands(self):
        runs, _ = plan(True)
        suite = suitelib.load_suite("memory")
        avail = {p.impl: "" for p in peerlib.PEERS}
        peer_runs, notes = peerlib.plan(suite, list(runs.values()), avail, "cpu")
        got = {(p.name, p.peer.impl) for p in peer_runs}
        self.assertEqual(got, {("mlp-k1", "pytorch"), ("mlp-k1", "jax-jit"),
                               ("mlp-k2", "pytorch-ddp"), ("mlp-k2", "jax-jit"),
                               ("mlp-k2", "jax-pmap"), ("mlp-x54-k2", "pytorch-ddp"),
                               ("mlp-x54-k2", "jax-jit"), ("mlp-x54-k2", "jax-pmap")})
        by = {(p.name, p.peer.impl): p for p in peer_runs}
        cmd = peerlib.train_command(by[("mlp-k2", "pytorch-ddp")], "cpu", None)
        self.assertTrue(cmd[1].endswith("peers/torch_mlp.py"))
        for flag, v in (("--mlp-layers", "8"), ("--optimizer", "adam"), ("--loss", "mse"),
                        ("--data", "synthetic"), ("--devices", "2"), ("--device", "cpu")):
            self.assertEqual(arg_value(cmd, flag), v, flag)
        cmd = peerlib.train_command(by[("mlp-k2", "jax-pmap")], "cuda", None)
        self.assertTrue(cmd[1].endswith("peers/jax_mlp.py"))
        self.assertEqual(arg_value(cmd, "--mode"), "pmap")
        self.assertNotIn("--device", cmd)
        # the d2l scripts do not repeat what they cannot (Adam, MSE, synthetic data)
        lenet = suitelib.Run("x", "lenet-adam", ["--model", "lenet", "--optimizer", "adam"])
        why = peerlib.BY_IMPL["pytorch"].mirrors(lenet.args, "cpu")
        self.assertIn("--optimizer adam", why)
        self.assertIn("planning run", peerlib.BY_IMPL["pytorch"].mirrors(
            ["--model", "mlp", "--backend", "meta"], "cpu"))

    def test_peer_rows(self):
        pr = peerlib.PeerRun(peerlib.BY_IMPL["pytorch"], "memory", "mlp-k1",
                             ["--model", "mlp", "--batch", "256", "--devices", "1"])
        line = "DPB_PEER " + json.dumps({
            "epoch": 1, "train_loss": 0.1, "train_acc": 0.1, "test_acc": 0.1, "epoch_s": 2.0,
            "images_per_s": 512, "train_examples": 1024, "test_examples": 256,
            "peak_mem_bytes": 300 << 20, "peak_mem_source": "peak_rss",
            "peak_mem_base_bytes": 200 << 20})
        (row,) = peerlib.epoch_rows(pr, "cpu", [line])
        self.assertEqual((row["model"], row["peak_mem_bytes"], row["peak_mem_source"]),
                         ("mlp", 300 << 20, "peak_rss"))


class MemoryRun(unittest.TestCase):
    def test_quick_suite_with_a_stand_in_dpbench(self):
        tmp = tempfile.mkdtemp(prefix="dpb-memsuite-")
        try:
            fake = os.path.join(tmp, "dpbench")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\nexec python3 " + os.path.join(tmp, "fake.py") + " " +
                        os.path.join(ROOT, "scripts", "train_csv_columns.json") + ' "$@"\n')
            with open(os.path.join(tmp, "fake.py"), "w") as f:
                f.write(FAKE_DPBENCH)
            os.chmod(fake, 0o755)
            out = os.path.join(tmp, "res")
            r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "run_suite.py"),
                                "run", "--out", out, "--suite", "memory", "--quick", "--bin",
                                fake, "--info", json.dumps(HOST_24)],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            with open(os.path.join(out, "memory.csv"), newline="") as f:
                rows = list(csv.DictReader(f))
            scen = {x["scenario"] for x in rows}
            self.assertTrue({"mlp-k1", "mlp-k2", "plan-mlp-k1", "plan-resnet18-k4"} <= scen)
            self.assertEqual({x["backend"] for x in rows if x["scenario"] == "plan-lenet-k2"},
                             {"meta"})
            # Without the manifest's commands, a run's shape comes from its own CSV columns.
            plans = {r["scenario"]: r for r in memory_report.run_rows(out)}
            self.assertTrue(memory_report.is_notebook(plans["plan-mlp-k1"]["shape"]),
                            plans["plan-mlp-k1"]["shape"])
            self.assertEqual(plans["plan-lenet-k2"]["shape"]["mlp_layers"], None)
            fits = memory_report.read_fit_rows(os.path.join(out, "fit-memory.csv"))
            self.assertEqual(len(fits), 8)
            small = next(x for x in fits if x["scenario"] == "fit-small-k1")
            self.assertEqual(small["check"], "ok")
            layers = next(x for x in fits if x["scenario"] == "fit-mlp-layers-k2")
            self.assertEqual(layers["mlp_layers"], layers["answer"])
            self.assertTrue(os.path.exists(os.path.join(out, "fit", "memory-fit-small-k2.json")))
            summary = subprocess.run([sys.executable, os.path.join(ROOT, "scripts",
                                                                   "run_suite.py"),
                                      "summary", out], capture_output=True, text=True).stdout
            for needle in ("step time and peak per device", "what fits (dpbench fit",
                           "peak per device by category",
                           "256 x 27 fits, 256 x 54 out of memory", "jit_single 1.2 s",
                           "130 fit", "XLA: 9.10 GiB", "ok: "):
                self.assertIn(needle, summary)
            nb = [line for line in summary.splitlines() if line.strip().startswith(
                "fit-mlp-batch-k1")]
            self.assertEqual(len(nb), 1)
            # the stand-in's peak at k=1: 1.52 GiB x 4 + 0.66 MB per example: 256 x 27 fits
            self.assertTrue(nb[0].rstrip().endswith("yes"), nb[0])
            if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                              capture_output=True).returncode == 0:
                p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "plots",
                                                                     "make_plots.py"), out],
                                   capture_output=True, text=True, timeout=300)
                self.assertEqual(p.returncode, 0, p.stderr[-2000:])
                for name in ("memory_memory", "fit_memory"):
                    for ext in ("png", "svg"):
                        self.assertTrue(os.path.exists(os.path.join(out, "plots",
                                                                    f"{name}.{ext}")),
                                        p.stdout + p.stderr[-2000:])
        finally:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    unittest.main(verbosity=2)
