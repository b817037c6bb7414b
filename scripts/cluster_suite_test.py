#!/usr/bin/env python3
"""cluster_suite_test.py: CI's check of the cluster suite (scenarios/cluster.ini, issue 26: flat
ring vs hier on emulated nodes with a 10x slower network): its plan (the runs on 2 x 2 emulated
nodes, ring and hier, CPU only; MPI_Allreduce's runs as processes only, planned with --launcher
mpi|both; no hier twin where `dpbench info` says hier does not run as processes, one where it
does; the 8 x 8 projections at 64 devices whatever --devices says; not a default suite), the
report and figures on a recorded micro curve (scripts/cluster_report.py, plots/cluster_plots.py),
and, given a build folder whose dpbench takes --nodes, the real quick LeNet runs (ring, hier; a
smaller data subset) and the projections: the CSVs, the step table with hier's ratio to the ring,
the projection table, summary.txt's section and the figures (where matplotlib is); the step
table's nodes and links from the CSV's columns, or the manifest's commands for older CSVs. Under
a minute.
  python3 scripts/cluster_suite_test.py [BUILD_DIR]      (ctest cluster_suite)
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import cluster_report as cr  # noqa: E402
import suitelib  # noqa: E402
from suitelib import arg_value  # noqa: E402

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else ""
RUN_SUITE = os.path.join(ROOT, "scripts", "run_suite.py")


def info(hier_procs=False):
    """A `dpbench info` with the all-reduce table's launchers (hier as processes or not)."""
    algs = [{"name": n, "launchers": ["threads", "processes"]} for n in ("ring", "auto")]
    algs += [{"name": "hier", "launchers": ["threads", "processes"] if hier_procs else ["threads"]},
             {"name": "mpi", "launchers": ["processes"]}]
    return {"cores": 2, "cpu": "test CPU", "cuda_devices": 0, "memory_gib": 16,
            "allreduce_algorithms": algs}


def dry_run(*extra, inf=None):
    env = dict(os.environ, DPB_MPIRUN="mpirun -np {np}")  # a launcher whether or not one exists
    r = subprocess.run([sys.executable, RUN_SUITE, "run", "--out", "/nonexistent/cluster-plan",
                        "--suite", "cluster", "--dry-run", "--bin", "/bin/true",
                        "--info", json.dumps(inf or info())] + list(extra),
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


class Plan(unittest.TestCase):
    def test_suite(self):
        s = suitelib.load_suite("cluster")
        self.assertFalse(s.default, "not a default suite: ./run_all.sh stays as long")
        self.assertTrue(s.processes)
        runs, notes = suitelib.expand_runs(s, True, "cpu", [1, 2, 4], (), info())
        by = {r.name: r for r in runs}
        for model in ("lenet", "resnet18"):
            for alg in ("ring", "hier"):
                a = by[f"{model}-{alg}-2x2"].args
                self.assertEqual((arg_value(a, "--devices"), arg_value(a, "--nodes")), ("4", "2"))
                self.assertEqual(arg_value(a, "--allreduce"), alg)
                # the network 10x slower than the node's links
                self.assertEqual(float(arg_value(a, "--link-gbps")),
                                 10 * float(arg_value(a, "--node-link-gbps")))
        for alg in ("ring", "hier"):
            for model in ("lenet", "resnet18"):
                r = by[f"proj-{model}-{alg}-8x8"]
                self.assertEqual(r.kind, "project")
                self.assertEqual((arg_value(r.args, "--devices"), arg_value(r.args, "--nodes")),
                                 ("64", "8"), "64 devices planned although --devices stops at 4")
        gpu, notes = suitelib.expand_runs(s, True, "cuda", [1, 2, 4], (), info())
        self.assertFalse([r for r in gpu if r.kind == "train"], "the emulated link is the CPU's")
        self.assertTrue(any("CPU backend" in why for _, _, why in notes))

    def test_launchers(self):
        out = dry_run()
        self.assertIn("runs as processes only", out)
        self.assertNotIn("mpi_allreduce:", out)
        self.assertNotIn("mpirun", out)
        out = dry_run("--launcher", "both")
        self.assertIn("lenet-mpi_allreduce-mpi: mpirun -np 4", out)
        self.assertIn("lenet-ring-2x2-mpi: mpirun -np 4", out)
        self.assertIn("does not run as processes in this build: lenet-hier-2x2-mpi", out)
        out = dry_run("--launcher", "both", inf=info(hier_procs=True))
        self.assertIn("lenet-hier-2x2-mpi: mpirun -np 4", out)
        self.assertIn("lenet-hier-2x2: --model", out)


def micro_json(path):
    """A recorded dpbench-micro JSON of the suite's shape: ring and hier medians at three sizes."""
    bench = []
    for alg, ms in (("ring", (2.5, 14.6, 58.3)), ("hier", (0.8, 5.9, 22.8))):
        for size, t in zip((65536, 1048576, 4194304), ms):
            name = f"allreduce/cpu/{alg}/ranks:4/bytes:{size}/manual_time"
            for rep in range(3):
                bench.append({"name": name, "run_name": name, "run_type": "iteration",
                              "real_time": t * 1e3 * (1 + 0.01 * rep), "time_unit": "us",
                              "busbw_GBps": 0.1, "wrong": 0, "link_model_s": t * 1e-3 / 1.2})
            bench.append({"name": name + "_median", "run_name": name, "run_type": "aggregate",
                          "aggregate_name": "median", "real_time": t * 1e3, "time_unit": "us",
                          "busbw_GBps": 0.1, "wrong": 0, "link_model_s": t * 1e-3 / 1.2})
    with open(path, "w") as f:
        json.dump({"context": {"load_avg_start": 1.5, "busy": ""}, "benchmarks": bench}, f)


def can_plot():
    return subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                          capture_output=True).returncode == 0


class Report(unittest.TestCase):
    def test_micro_report_and_figure(self):
        with tempfile.TemporaryDirectory() as out:
            micro_json(os.path.join(out, "micro-cluster.json"))
            lines = cr.report_lines(out)
            text = "\n".join(lines)
            self.assertIn("hier/ring", text)
            row = next(x for x in lines if x.strip().startswith("4 MiB"))
            self.assertIn("0.39", row)  # 22.8 / 58.3
            self.assertIn("1.20", row)  # over the model
            self.assertTrue(os.path.exists(os.path.join(out, cr.MD_NAME)))
            with open(os.path.join(out, cr.CSV_NAME)) as f:
                self.assertEqual(sum(1 for r in csv.DictReader(f) if r["table"] == "micro"), 3)
            if can_plot():
                subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "plots", "make_plots.py"),
                                out], check=True, capture_output=True, timeout=120)
                for ext in ("png", "svg"):
                    self.assertTrue(os.path.exists(os.path.join(out, "plots",
                                                                f"cluster_micro.{ext}")))
                # the paced curve stays out of the generic micro figure
                self.assertFalse(os.path.exists(os.path.join(out, "plots", "micro_busbw.png")))


def step_folder(out, with_columns):
    """A results folder of two cluster runs (ring, hier on 4 ranks): a CSV with the two-level
    columns (nodes from DPB_NODES: the command has no --nodes) or an older one without them
    (the manifest's command has --nodes and the link between nodes)."""
    cols = ["suite", "scenario", "impl", "model", "allreduce", "devices", "launcher",
            "global_batch", "train_examples", "epoch", "epoch_s", "exposed_comm_s", "comm_bytes",
            "link_gbps", "link_latency_us", "busy", "load_avg_start"]
    cols += ["nodes", "node_link_gbps", "node_link_latency_us"] if with_columns else []
    cmds = []
    with open(os.path.join(out, "cluster.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        for alg, epoch_s in (("ring", 2.0), ("hier", 1.0)):
            name = f"lenet-{alg}-2x2"
            for epoch in (1, 2):
                w.writerow({"suite": "cluster", "scenario": name, "impl": "dpbench",
                            "model": "lenet", "allreduce": alg, "devices": 4,
                            "launcher": "threads", "global_batch": 256, "train_examples": 1024,
                            "epoch": epoch, "epoch_s": epoch_s, "exposed_comm_s": 0.1,
                            "comm_bytes": 1000, "link_gbps": 100, "link_latency_us": 1,
                            "busy": "", "load_avg_start": 1.0, "nodes": 2,
                            "node_link_gbps": 10, "node_link_latency_us": 0})
            args = ["train", "--devices", "4", "--allreduce", alg]
            args += [] if with_columns else ["--nodes", "2", "--node-link-gbps", "10"]
            cmds.append({"suite": "cluster", "scenario": name, "cmd": args})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"commands": cmds}, f)


class StepColumns(unittest.TestCase):
    """The step table's nodes and links: the CSV's columns, else (older CSVs) the command's."""
    def test_columns_and_fallback(self):
        for with_columns in (True, False):
            with tempfile.TemporaryDirectory() as out:
                step_folder(out, with_columns)
                rows = {r["allreduce"]: r for r in cr.step_rows(out)}
                self.assertEqual(set(rows), {"ring", "hier"})
                for r in rows.values():
                    self.assertEqual(r["nodes"], 2, with_columns)
                    self.assertEqual(r["link"], "100 Gb/s 1 us")
                    self.assertEqual(r["node_link"], "10 Gb/s 0 us", with_columns)
                self.assertAlmostEqual(rows["hier"]["vs_ring"], 0.5)

    def test_no_link_between_nodes_is_the_node_link(self):
        with tempfile.TemporaryDirectory() as out:
            step_folder(out, True)
            path = os.path.join(out, "cluster.csv")
            with open(path) as f:
                text = f.read().replace(",10,0\n", ",0,0\n")  # node_link_gbps, _latency_us
            with open(path, "w") as f:
                f.write(text)
            self.assertEqual({r["node_link"] for r in cr.step_rows(out)}, {"100 Gb/s 1 us"})


def takes_nodes(binary, cmd):
    r = subprocess.run([binary, cmd, "--help"], capture_output=True, text=True)
    return "--nodes" in r.stdout


@unittest.skipUnless(BUILD and os.access(os.path.join(BUILD, "dpbench"), os.X_OK),
                     "no build folder given")
class RealQuick(unittest.TestCase):
    def test_lenet_ring_hier_and_projection(self):
        binary = os.path.join(BUILD, "dpbench")
        if not takes_nodes(binary, "train"):
            self.skipTest("this dpbench train has no --nodes")
        runs = "*lenet-*" if takes_nodes(binary, "project") else "lenet-*"
        out = tempfile.mkdtemp(prefix="cluster-suite-")
        try:
            r = subprocess.run([sys.executable, RUN_SUITE, "run", "--out", out, "--suite", "cluster",
                                "--quick", "--bin", binary, "--no-micro", "--runs", runs,
                                "--set", "--train-limit 1024"],
                               capture_output=True, text=True, timeout=240)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-2000:])
            steps = {x["allreduce"]: x for x in cr.step_rows(out)}
            self.assertEqual(set(steps), {"ring", "hier"})
            self.assertEqual(steps["hier"]["nodes"], 2)
            with open(os.path.join(out, "cluster.csv")) as f:  # the CSV records the two levels
                hier = next(r for r in csv.DictReader(f) if r["allreduce"] == "hier")
            self.assertEqual(hier["nodes"], "2")
            self.assertIsNotNone(steps["hier"]["vs_ring"])
            self.assertGreater(steps["ring"]["step_s"], 0)
            subprocess.run([sys.executable, RUN_SUITE, "summary", out], check=True,
                           capture_output=True, timeout=60)
            summary = open(os.path.join(out, "summary.txt")).read()
            self.assertIn("cluster: flat ring vs hier", summary)
            if runs == "*lenet-*":
                proj = {x["allreduce"]: x for x in cr.project_rows(out)}
                self.assertEqual(set(proj), {"ring", "hier"})
                self.assertEqual(proj["hier"]["devices"], 64)
                self.assertLess(proj["hier"]["comm_s"], proj["ring"]["comm_s"],
                                "hier crosses IB with 1/8 of the ring's bytes")
            if can_plot():
                subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "plots", "make_plots.py"),
                                out], check=True, capture_output=True, timeout=120)
                self.assertTrue(os.path.exists(os.path.join(out, "plots", "cluster_step.png")))
        finally:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
