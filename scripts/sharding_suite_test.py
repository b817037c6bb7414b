#!/usr/bin/env python3
"""sharding_suite_test.py: CI's check of the sharding suite (scenarios/sharding.ini, `dpbench train
--shard`): its plan in quick and full mode (every mode at k = 1, 2, 4, the tiny MLP's real steps in
quick mode, the emulated link and the CPU-sized runs on the CPU only, the fits with --shard), the
peers it plans (torch-zero1 repeats the ZeRO-1 runs, pytorch / pytorch-ddp the replicated ones,
torch-fsdp the ZeRO-3 ones on GPUs only), and a whole quick run of run_suite.py against a stand-in
dpbench that writes the contract's CSV (the shard and comm_bytes columns, the categories by ZeRO's
arithmetic) and fit JSON: sharding.csv, fit-sharding.csv (its shard column), the report
(summary.txt, summary-sharding.md and .csv: ZeRO's formula recognized, the fit ratios, ZeRO-1
beside a torch-zero1 row) and the figures (where matplotlib is). Given a build folder whose dpbench
has --shard, also the real quick runs at k = 2 in every mode (seconds): the modes' losses agree,
the bytes each sends per step against replicated's, the sharded categories shrink.
  python3 scripts/sharding_suite_test.py [BUILD_DIR]
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
import peerlib  # noqa: E402
import sharding_report as sr  # noqa: E402
import suite_results  # noqa: E402
import suitelib  # noqa: E402
from suitelib import arg_value  # noqa: E402

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else ""
HOST = {"memory_gib": 23.5, "cores": 2, "cpu": "test CPU", "cuda_devices": 0}
MODES = ("none", "optimizer", "gradients", "parameters")

# A stand-in `dpbench` that follows the --shard contract: train writes dpbench's columns plus shard
# and comm_bytes, the model states per device by ZeRO's arithmetic (Adam, P = the MLP's
# parameters), rank 0's bytes per step (ring: 2 (k-1)/k 4P; ZeRO-3 1.5x); fit writes its JSON.
FAKE_DPBENCH = textwrap.dedent('''\
    #!/usr/bin/env python3
    import csv, json, sys
    cols = [c["name"] for c in json.load(open(sys.argv[1]))["columns"]]
    cols += [c for c in ("shard", "comm_bytes") if c not in cols]
    cmd, args = sys.argv[2], sys.argv[3:]
    val = lambda f, d=None: args[args.index(f) + 1] if f in args else d
    layers, hidden = int(val("--mlp-layers", "90")), int(val("--mlp-hidden", "2056"))
    inp, k, mode = int(val("--mlp-input", "1024")), int(val("--devices", "1")), val("--shard", "none")
    def params(layers):
        return inp * hidden + hidden + (layers - 1) * (hidden * hidden + hidden) + hidden * 10 + 10
    def peak(batch_per_device, layers):
        P = params(layers)
        p, g, o = 4 * P, 4 * P, 8 * P
        layer = 4 * (hidden * hidden + hidden)
        p, g, o = {"none": (p, g, o), "optimizer": (p, g, o / k), "gradients": (p, g / k, o / k),
                   "parameters": (p / k + 2 * layer, g / k, o / k)}[mode]
        b = {"parameters": int(p), "gradients": int(g), "optimizer_state": int(o),
             "activations": 8 * layers * hidden * batch_per_device, "temporaries": 1 << 20,
             "workspace": 0, "comm": 0 if k == 1 else 1 << 16, "data": 4096 * batch_per_device}
        return sum(b.values()), b
    if cmd == "train":
        backend, out = val("--backend"), val("--csv")
        gb = int(val("--batch", "256"))
        total, b = peak(-(-gb // k), layers)
        P = params(layers)
        ring = 0 if k == 1 else 2 * (k - 1) * 4 * P // k
        sent = {"parameters": 3 * ring // 2}.get(mode, ring)
        link = float(val("--link-gbps", "0"))
        with open(out, "w", newline="") as f:
            w = csv.DictWriter(f, cols)
            w.writeheader()
            for ep in range(1, int(val("--epochs", "10")) + 1):
                r = {c: 0 for c in cols}
                wire = sent / (link * 1.25e8) if link else 0.0
                steps = -(-int(val("--train-limit", "60000")) // gb)
                r.update(impl="dpbench", model="mlp", backend=backend, optimizer="adam",
                         loss="mse", data="synthetic", model_params=P, mlp_layers=layers,
                         mlp_hidden=hidden, mlp_input=inp, devices=k, global_batch=gb,
                         train_examples=val("--train-limit"), test_examples=val("--test-limit"),
                         epoch=ep, epoch_s=steps * (0.01 + wire), quick=1, peak_mem_bytes=total,
                         comm_s=steps * wire, exposed_comm_s=steps * wire / 2,
                         link_gbps=link, link_latency_us=float(val("--link-latency-us", "0")),
                         device_mem_bytes=0, shard=mode, comm_bytes=sent,
                         train_loss=0.1 / ep, test_acc=1.0)
                if backend == "meta":
                    r.update(test_acc="", train_acc="", train_loss="", replicas_in_sync="",
                             epoch_s="", images_per_s="", comm_s="", exposed_comm_s="")
                for c, v in b.items():
                    r[f"peak_mem_{c}_bytes"] = v
                w.writerow(r)
            print("final test acc 1.0 devices: fake")
    elif cmd == "fit":
        cap = 24 << 30
        vary = val("--vary", "batch")
        fits = lambda v: peak(v, layers)[0] <= cap if vary == "batch" else \\
            peak(-(-int(val("--batch")) // k), v)[0] <= cap
        lo, hi = 0, 60000 if vary == "batch" else 5000
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        ans = lo
        gb = ans * k if vary == "batch" else int(val("--batch"))
        total, b = peak(ans if vary == "batch" else -(-gb // k), ans if vary == "layers"
                        else layers)
        j = {"model": "mlp", "optimizer": "adam", "loss": "mse", "data": "synthetic",
             "mlp": {"layers": layers, "hidden": hidden, "input": inp}, "devices": k,
             "device_mem_bytes": cap, "vary": vary, "plan_backend": "meta", "fits": ans > 0,
             "answer": ans, "batch_per_device": -(-gb // k), "global_batch": gb,
             "limit_hit": False, "peak_mem_bytes": total, "peak_mem": b,
             "plans": [{"value": 1, "fits": True}], "search_s": 0.1}
        json.dump(j, open(val("--json"), "w"))
        print(f"  largest: {ans}")
    ''')


def plan(quick, backend="cpu", info=HOST):
    runs, notes = suitelib.expand_runs(suitelib.load_suite("sharding"), quick, backend,
                                       [1, 2, 4], (), info)
    return {r.name: r for r in runs}, notes


class ShardingPlan(unittest.TestCase):
    def test_quick_plan(self):
        runs, notes = plan(True)
        for short, mode in zip(("none", "opt", "grad", "param"), MODES):
            for k in (1, 2, 4):
                a = runs[f"mlp-{short}-k{k}"].args
                self.assertEqual((arg_value(a, "--shard"), arg_value(a, "--devices"),
                                  arg_value(a, "--mlp-layers"), arg_value(a, "--mlp-hidden"),
                                  arg_value(a, "--batch")), (mode, str(k), "8", "512", "64"))
                self.assertNotIn("--device-mem", a)
                pa = runs[f"plan-mlp-{short}-k{k}"].args
                self.assertEqual((arg_value(pa, "--backend"), arg_value(pa, "--mlp-layers"),
                                  arg_value(pa, "--shard")), ("meta", "90", mode))
                for vary in ("batch", "layers"):
                    f = runs[f"fit-{vary}-{short}-k{k}"]
                    self.assertEqual((f.kind, arg_value(f.args, "--shard"),
                                      arg_value(f.args, "--device-mem")), ("fit", mode, "24GiB"))
            for k in (2, 4):
                la = runs[f"link-mlp-{short}-k{k}"].args
                self.assertEqual((arg_value(la, "--link-gbps"), arg_value(la, "--mlp-hidden")),
                                 ("1", "512"))
        self.assertFalse([n for n in runs if n.startswith(("resnet18-", "cpu-mlp-"))])

    def test_full_plans(self):
        runs, notes = plan(False)  # a 23.5 GiB CPU host: no k x 24 GiB for real
        self.assertNotIn("mlp-none-k1", runs)
        self.assertIn("cpu-mlp-param-k4", runs)
        self.assertNotIn("cpu-mlp-none-k4", runs, "4 x 16P is more than the host holds")
        self.assertEqual(arg_value(runs["resnet18-param-k4"].args, "--shard"), "parameters")
        self.assertEqual(arg_value(runs["link-mlp-param-k4"].args, "--mlp-hidden"), "1024")
        gpu = suitelib.effective_info({"allreduce_algorithms": []})
        os.environ["DPB_FAKE_GPUS"] = "4"
        try:
            gpu = suitelib.effective_info({"allreduce_algorithms": []})
        finally:
            del os.environ["DPB_FAKE_GPUS"]
        runs, notes = plan(False, "cuda", gpu)
        self.assertEqual(arg_value(runs["mlp-param-k4"].args, "--batch"), "6912")
        self.assertFalse([n for n in runs if n.startswith(("link-", "cpu-mlp-"))])

    def test_peers(self):
        suite = suitelib.load_suite("sharding")
        avail = {p.impl: "" for p in peerlib.PEERS}
        runs, _ = plan(True)
        prs, notes = peerlib.plan(suite, list(runs.values()), avail, "cpu")
        got = {(p.name, p.peer.impl) for p in prs if p.peer.impl.startswith(("pytorch", "torch"))}
        self.assertEqual(got, {("mlp-none-k1", "pytorch"), ("mlp-none-k2", "pytorch-ddp"),
                               ("mlp-none-k4", "pytorch-ddp"), ("mlp-opt-k1", "torch-zero1"),
                               ("mlp-opt-k2", "torch-zero1"), ("mlp-opt-k4", "torch-zero1")})
        self.assertFalse([n for n in notes if "--shard" in n[2]], "another mode: no note")
        zero = next(p for p in prs if (p.name, p.peer.impl) == ("mlp-opt-k2", "torch-zero1"))
        cmd = peerlib.train_command(zero, "cpu", None)
        self.assertTrue(cmd[1].endswith("peers/torch_mlp.py"))
        self.assertEqual((arg_value(cmd, "--shard"), arg_value(cmd, "--devices"),
                          arg_value(cmd, "--optimizer")), ("optimizer", "2", "adam"))
        gpu = dict(HOST, cuda_devices=4)
        runs, _ = plan(False, "cuda", suitelib.effective_info(gpu))
        prs, _ = peerlib.plan(suite, list(runs.values()), avail, "cuda", 4)
        fsdp = {(p.name, p.peer.impl) for p in prs if p.peer.impl == "torch-fsdp"}
        self.assertIn(("resnet18-param-k4", "torch-fsdp"), fsdp)
        self.assertEqual(peerlib.BY_IMPL["torch-fsdp"].available("cpu"),
                         "GPU only (this run's backend is cpu)")


def fake_bin(tmp):
    fake = os.path.join(tmp, "dpbench")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\nexec python3 " + os.path.join(tmp, "fake.py") + " " +
                os.path.join(ROOT, "scripts", "train_csv_columns.json") + ' "$@"\n')
    with open(os.path.join(tmp, "fake.py"), "w") as f:
        f.write(FAKE_DPBENCH)
    os.chmod(fake, 0o755)
    return fake


def run_suite(out, binary, *extra, timeout=300):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "run_suite.py"), "run",
                           "--out", out, "--suite", "sharding", "--quick", "--bin", binary,
                           *extra], capture_output=True, text=True, timeout=timeout)


class ShardingReport(unittest.TestCase):
    def test_quick_suite_with_a_stand_in_dpbench(self):
        tmp = tempfile.mkdtemp(prefix="dpb-shardsuite-")
        try:
            out = os.path.join(tmp, "res")
            r = run_suite(out, fake_bin(tmp), "--info", json.dumps(HOST))
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            # a torch-zero1 repeat of mlp-opt-k2, as peerlib turns the peer's lines into rows
            pr = peerlib.PeerRun(peerlib.BY_IMPL["torch-zero1"], "sharding", "mlp-opt-k2",
                                 suitelib.load_suite("sharding").runs["mlp-opt-k2"])
            lines = ["DPB_PEER " + json.dumps({
                "epoch": e, "train_loss": 0.1 / e, "train_acc": 1, "test_acc": 1,
                "epoch_s": 0.2, "images_per_s": 5000, "train_examples": 1024,
                "test_examples": 256, "peak_mem_bytes": 300 << 20, "peak_mem_source": "peak_rss",
                "peak_mem_base_bytes": 240 << 20, "peak_mem_parameters_bytes": 9474088,
                "peak_mem_gradients_bytes": 9474088, "peak_mem_optimizer_state_bytes": 10485776,
                "shard": "optimizer"}) for e in (1, 2, 3)]
            rows = peerlib.epoch_rows(pr, "cpu", lines)
            self.assertEqual((rows[0]["impl"], rows[0]["shard"],
                              rows[0]["peak_mem_optimizer_state_bytes"]),
                             ("torch-zero1", "optimizer", 10485776))
            suite_results.append_rows(os.path.join(out, "sharding.csv"), rows)

            rr = {(r["scenario"], r["impl"]): r for r in sr.sharding_rows(out)}
            self.assertEqual(len([k for k in rr if k[1] == "dpbench"]), 32)
            none, param = rr[("mlp-none-k2", "dpbench")], rr[("mlp-param-k2", "dpbench")]
            self.assertAlmostEqual(param["comm_bytes"] / none["comm_bytes"], 1.5, places=3)
            for name in ("plan-mlp-none-k4", "plan-mlp-opt-k4", "plan-mlp-grad-k2",
                         "mlp-opt-k2"):  # the stand-in's states are ZeRO's formula exactly
                r = rr[(name, "dpbench")]
                self.assertAlmostEqual(r["states"] / r["zero"], 1.0, places=3, msg=name)
            zero3 = rr[("plan-mlp-param-k4", "dpbench")]
            self.assertGreater(zero3["states"] / zero3["zero"], 1.0)  # + the gathered layers
            self.assertEqual(rr[("mlp-opt-k2", "torch-zero1")]["model_params"],
                             rr[("mlp-opt-k2", "dpbench")]["model_params"])
            self.assertIsNone(rr[("plan-mlp-none-k1", "dpbench")]["step_s"])
            self.assertEqual(rr[("link-mlp-param-k4", "dpbench")]["link_gbps"], 1.0)

            fits = sr.read_fits(out)
            self.assertEqual(len(fits), 24)
            self.assertEqual({f["shard"] for f in fits}, set(MODES))
            by = {f["scenario"]: f for f in fits}
            self.assertGreater(by["fit-batch-param-k4"]["answer"],
                               by["fit-batch-none-k4"]["answer"])
            self.assertGreater(by["fit-layers-opt-k2"]["answer"],
                               by["fit-layers-none-k2"]["answer"])

            summary = subprocess.run([sys.executable, os.path.join(ROOT, "scripts",
                                                                   "run_suite.py"),
                                      "summary", out], capture_output=True, text=True)
            self.assertEqual(summary.returncode, 0, summary.stderr[-2000:])
            text = summary.stdout
            for needle in ("sharding: replicated (--shard none) vs ZeRO-1",
                           "what fits per mode", "dpbench beside the PyTorch peers",
                           "torch-zero1", "states/ZeRO", "ZeRO-3"):
                self.assertIn(needle, text)
            self.assertNotIn("the notebook (seed 004", text.split("== sharding")[-1],
                             "the sharding suite has its own report, not the memory one")
            zline = next(x for x in text.splitlines() if x.strip().startswith("mlp-opt-k2")
                         and "torch-zero1" in x and "/" in x.split()[-1])
            self.assertIn("10.0 MiB", zline)  # the peer's optimizer state per device
            for name in (sr.MD_NAME, sr.CSV_NAME):
                self.assertTrue(os.path.exists(os.path.join(out, name)), name)
            self.assertFalse([f for f in os.listdir(out) if ".tmp" in f])
            with open(os.path.join(out, sr.CSV_NAME), newline="") as f:
                table = list(csv.DictReader(f))
            self.assertEqual(len(table), 33)
            self.assertFalse(suite_results.is_suite_csv(os.path.join(out, sr.CSV_NAME)))
            with open(os.path.join(out, sr.MD_NAME)) as f:
                md = f.read()
            self.assertIn("## What fits per mode", md)
            if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                              capture_output=True).returncode == 0:
                p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "plots",
                                                                     "make_plots.py"), out],
                                   capture_output=True, text=True, timeout=300)
                self.assertEqual(p.returncode, 0, p.stderr[-2000:])
                made = os.listdir(os.path.join(out, "plots"))
                for name in ("sharding_memory", "sharding_time", "sharding_comm",
                             "sharding_fit"):
                    for ext in ("png", "svg"):
                        self.assertIn(f"{name}.{ext}", made, p.stdout + p.stderr[-2000:])
                self.assertNotIn("fit_sharding.png", made)
                self.assertNotIn("memory_sharding.png", made)
        finally:
            shutil.rmtree(tmp)


def has_shard(binary):
    if not binary or not os.access(binary, os.X_OK):
        return False
    r = subprocess.run([binary, "train", "--help"], capture_output=True, text=True)
    return "--shard" in r.stdout + r.stderr


@unittest.skipUnless(has_shard(os.path.join(BUILD, "dpbench")),
                     "no dpbench with --shard in the build folder given")
class ShardingReal(unittest.TestCase):
    def test_quick_runs_at_k2(self):
        tmp = tempfile.mkdtemp(prefix="dpb-shardreal-")
        try:
            out = os.path.join(tmp, "res")
            r = run_suite(out, os.path.join(BUILD, "dpbench"), "--runs", "mlp-*-k2")
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            rr = {r["shard"]: r for r in sr.sharding_rows(out)}
            self.assertEqual(set(rr), set(MODES))
            loss = rr["none"]["first_loss"]
            for m in MODES:
                self.assertAlmostEqual(rr[m]["first_loss"], loss, delta=1e-4 * max(1, loss), msg=m)
            if rr["none"]["comm_bytes"] is None:  # a dpbench before the comm_bytes column
                print("note: this dpbench writes no comm_bytes; not checked", file=sys.stderr)
            else:
                # rank 0's bytes per step over replicated's (a ring all-reduce, 2 (k-1)/k 4P):
                # ZeRO-1 all-reduces and all-gathers (1.5), ZeRO-2 reduce-scatters and
                # all-gathers (1.0), ZeRO-3 gathers for forward and backward and reduce-scatters
                # (1.5 less the unit backward finds still gathered)
                ratio = {m: rr[m]["comm_bytes"] / rr["none"]["comm_bytes"] for m in MODES}
                self.assertAlmostEqual(ratio["optimizer"], 1.5, delta=0.01, msg=ratio)
                self.assertAlmostEqual(ratio["gradients"], 1.0, delta=0.01, msg=ratio)
                self.assertTrue(1.3 < ratio["parameters"] <= 1.5, ratio)
            br = {m: rr[m]["breakdown"] for m in MODES}
            self.assertLess(br["optimizer"]["optimizer_state"], br["none"]["optimizer_state"])
            self.assertLess(br["gradients"]["gradients"], br["none"]["gradients"])
            self.assertLess(br["parameters"]["parameters"], br["none"]["parameters"])
            self.assertTrue(sr.report_lines(out))
        finally:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    unittest.main(verbosity=2)
