#!/usr/bin/env python3
"""breakdown_suite_test.py: CI's check of the per-rank breakdown in run_all's output (issue 23):
sync.ini plans one traced run per model at k = 2 and 4 (--steps-csv and --trace into the results
folder, through run_suite's {out} / {suite} / {scenario}), and on a hand-made results folder (a
sync.csv with the straggler columns and two tiny steps CSVs) scripts/breakdown_report.py's means,
summary.txt's rank x phase tables and straggler lines, a damaged steps CSV reported without costing
the rest, and scripts/breakdown_plot.py's figure (PNG + SVG; where matplotlib is). A few seconds.
  python3 scripts/breakdown_suite_test.py
"""
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import breakdown_report as br  # noqa: E402
import run_suite  # noqa: E402
import suitelib  # noqa: E402
from summary import write_summary  # noqa: E402

EPOCH_COLS = ("suite,scenario,impl,model,backend,devices,launcher,processes,shared_gpu,quick,"
              "allreduce,allreduce_resolved,grad_sync,overlap,bucket_mb,global_batch,lr,"
              "warmup_epochs,seed,train_examples,test_examples,epoch,lr_end,train_loss,train_acc,"
              "test_acc,epoch_s,images_per_s,data_s,compute_s,comm_s,exposed_comm_s,comm_calls,"
              "replicas_in_sync,max_replica_diff,link_gbps,link_latency_us,step_p50_s,step_p95_s,"
              "step_p99_s,straggler_rank,straggler_phase,straggler_loss_s,"
              "straggler_wait_s").split(",")
STEP_COLS = ["rank", "epoch", "step", "start_s", "step_s", "data_s", "forward_s", "backward_s",
             "optimizer_s", "exposed_comm_s", "comm_busy_s", "wait_s", "comm_own_s"]


def epoch_row(scenario, k, straggler):
    r = dict.fromkeys(EPOCH_COLS, "0")
    r.update(suite="sync", scenario=scenario, impl="dpbench", model="lenet", backend="cpu",
             devices=str(k), launcher="threads", processes="1", quick="1", allreduce="ring",
             allreduce_resolved="ring", grad_sync="bucketed", overlap="on", bucket_mb="25",
             global_batch="16", lr="0.2", train_examples="1600", test_examples="320", epoch="1",
             train_loss="2.2", train_acc="0.2", test_acc="0.3", epoch_s="1.5",
             images_per_s="1000", replicas_in_sync="1")
    r.update(zip(("straggler_rank", "straggler_phase", "straggler_loss_s", "straggler_wait_s"),
                 straggler))
    return r


class BreakdownSuite(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="dpbench-breakdown.")
        with open(os.path.join(self.dir, "sync.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, EPOCH_COLS)
            w.writeheader()
            w.writerow(epoch_row("lenet-traced-k2", 2, ("1", "backward", "0.03", "0.028")))
            w.writerow(epoch_row("lenet-traced-k4", 4, ("-1", "", "0", "0")))
        bdir = os.path.join(self.dir, "breakdown", "sync")
        os.makedirs(bdir)
        # k = 2: rank 1's backward 30 ms longer; rank 0 waits for it. ms: data, fwd, bwd, opt,
        # exposed, busy, wait, own; step 100 (rank 0) and 102 (rank 1)
        with open(os.path.join(bdir, "lenet-traced-k2.steps.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(STEP_COLS)
            for step in range(3):
                w.writerow([0, 1, step, 0.1 * step, 0.100, 0.002, 0.010, 0.020, 0.003, 0.040,
                            0.045, 0.030, 0.015])
                w.writerow([1, 1, step, 0.1 * step, 0.102, 0.002, 0.010, 0.050, 0.003, 0.012,
                            0.016, 0.001, 0.015])
        with open(os.path.join(bdir, "lenet-traced-k4.steps.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(STEP_COLS)
            for step in range(2):
                for rank in range(4):
                    w.writerow([rank, 1, step, 0.05 * step, 0.050, 0.001, 0.005, 0.010, 0.002,
                                0.020, 0.025, 0.004, 0.020])

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_sync_plans_the_traced_runs(self):
        suite = suitelib.load_suite("sync")
        for quick in (True, False):
            runs, _ = suitelib.expand_runs(suite, quick, "cpu", [1, 2, 4])
            traced = {r.name: r.args for r in runs if "--steps-csv" in r.args}
            self.assertEqual(set(traced), {"lenet-traced-k2", "lenet-traced-k4",
                                           "resnet18-traced-k2", "resnet18-traced-k4"})
            for name, args in traced.items():
                self.assertEqual(suitelib.arg_value(args, "--devices"), name[-1])
                self.assertEqual(suitelib.arg_value(args, "--epochs"), "1")
                self.assertEqual(suitelib.arg_value(args, "--steps-csv"),
                                 "{out}/breakdown/{suite}/{scenario}.steps.csv")
                self.assertEqual(suitelib.arg_value(args, "--trace"),
                                 "{out}/breakdown/{suite}/{scenario}.trace.json")
        # run_suite puts them in the results folder, one file per scenario (the -mpi twins too)
        fake = types.SimpleNamespace(out=os.path.join(self.dir, "r"))
        run = suitelib.Run("sync", "lenet-traced-k2-mpi",
                           ["--steps-csv", "{out}/breakdown/{suite}/{scenario}.steps.csv"], 2)
        args = run_suite.Runner.own_files(fake, run)
        self.assertEqual(args[1], os.path.join(self.dir, "r", "breakdown", "sync",
                                               "lenet-traced-k2-mpi.steps.csv"))
        self.assertTrue(os.path.isdir(os.path.dirname(args[1])))

    def test_means_per_rank(self):
        runs = br.traced_runs(self.dir)
        self.assertEqual([(r["scenario"], r["k"], r["steps"]) for r in runs],
                         [("lenet-traced-k2", 2, 3), ("lenet-traced-k4", 4, 2)])
        r1 = runs[0]["ranks"][1]
        self.assertAlmostEqual(r1["backward"], 50.0)
        self.assertAlmostEqual(r1["step"], 102.0)
        self.assertAlmostEqual(r1["other"], 102.0 - (2 + 10 + 50 + 3 + 12))
        self.assertAlmostEqual(runs[0]["ranks"][0]["wait"], 30.0)
        self.assertEqual(runs[0]["sync"], "ring/bucketed/on")

    def test_summary_tables_and_straggler_lines(self):
        text = write_summary(self.dir)
        self.assertIn("sync: per-rank breakdown, ms per step", text)
        self.assertIn("lenet-traced-k2: LeNet, k = 2, ring/bucketed/on, 3 steps", text)
        self.assertIn("straggler: rank 1 loses 30.00 ms per step in backward; the others wait "
                      "28.00 ms per step for their peers (epoch 1)", text)
        self.assertIn("lenet-traced-k4: LeNet, k = 4", text)
        self.assertIn("no straggler (epoch 1)", text)
        lines = text.splitlines()
        head = next(i for i, l in enumerate(lines) if "lenet-traced-k2: LeNet" in l)
        self.assertEqual(lines[head + 1].split(),
                         ["rank", "data", "forward", "backward", "optimizer", "exposed", "comm",
                          "other", "step", "wait", "for", "peers", "comm", "busy"])
        self.assertEqual(lines[head + 2].split(),
                         ["0", "2.00", "10.00", "20.00", "3.00", "40.00", "25.00", "100.00",
                          "30.00", "45.00"])
        self.assertEqual(lines[head + 3].split()[:4], ["1", "2.00", "10.00", "50.00"])
        with open(os.path.join(self.dir, "summary.txt")) as f:
            self.assertEqual(f.read(), text)

    def test_damaged_steps_csv_is_named(self):
        with open(os.path.join(self.dir, "breakdown", "sync", "lenet-traced-k4.steps.csv"),
                  "w") as f:
            f.write("rank,epoch\n0,1\n")
        text = write_summary(self.dir)
        self.assertIn("lenet-traced-k4: unreadable (", text)
        self.assertIn("not a --steps-csv file", text)
        self.assertIn("straggler: rank 1 loses 30.00 ms", text)  # the other run still reported

    def test_figure(self):
        py = "/usr/bin/python3"
        if subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode:
            self.skipTest("no matplotlib for /usr/bin/python3")
        res = subprocess.run([py, os.path.join(ROOT, "scripts", "breakdown_plot.py"), self.dir],
                             capture_output=True, text=True)
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        for ext in ("png", "svg"):
            path = os.path.join(self.dir, "plots", f"rank_breakdown_sync.{ext}")
            self.assertGreater(os.path.getsize(path), 1000, path)
        with open(os.path.join(self.dir, "plots", "rank_breakdown_sync.svg")) as f:
            svg = f.read()
        for words in ("wait for peers", "exposed comm", "rank 3", "no straggler"):
            self.assertIn(words, svg)
        # make_plots.py draws it among the others
        res = subprocess.run([py, os.path.join(ROOT, "plots", "make_plots.py"), self.dir],
                             capture_output=True, text=True)
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        self.assertIn("rank_breakdown_sync.png", res.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
