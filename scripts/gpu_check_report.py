#!/usr/bin/env python3
"""gpu_check_report.py: the readers behind scripts/gpu_check.sh (python3 standard library only, so
that it runs from the GPU bundle on a machine without Debian's packages). Each command prints one
line of key figures (and a few indented detail lines) and exits 0 = pass, 1 = fail, 2 = warn.

  gpu_check_report.py info FILE.json [need-gpu]       `dpbench info`: versions, GPUs
  gpu_check_report.py selftest FILE.json              `dpbench selftest --json`: passed/failed
  gpu_check_report.py csv FILE.csv [REQ...]           last epoch row of a `dpbench train --csv` file;
        REQ: sync (replicas_in_sync = 1), comm (comm_s > 0), shared (shared_gpu = 1),
             acc=X (test_acc >= X)
  gpu_check_report.py micro FILE.json MIN_ALGOS       dpbench-micro all-reduce sweep: errors, wrong
  gpu_check_report.py compare A.bin B.bin INIT.bin WARN FAIL
        two `--dump-params` files after the same training: relative L2 of their difference
        against the update INIT -> A (the parameters both started from), so a run that hardly
        moved its weights cannot pass by its initialization alone
  gpu_check_report.py gtest FILE.xml                  GoogleTest XML: tests, failures, skipped
"""
import csv
import json
import math
import sys
import xml.etree.ElementTree as ET
from array import array

PASS, FAIL, WARN = 0, 1, 2


def cmd_info(path, *flags):
    with open(path) as f:
        info = json.load(f)
    keys = ("git_commit", "build_type", "cuda_architectures", "cuda_built", "cuda_devices",
            "cuda_driver_version", "cuda_runtime_version", "cudnn_version", "nccl_version",
            "cublas_version", "onednn_version")
    gpus = info.get("gpus") or []
    names = ",".join(f"{g.get('name')}({g.get('memory_gib')}GiB,sm{g.get('compute_capability')})"
                     for g in gpus)
    print(" ".join(f"{k}={info.get(k)}" for k in keys) + f" gpus={names or 'none'}")
    if "need-gpu" in flags:
        if not info.get("cuda_built"):
            print("  this dpbench was built without CUDA (configure with -DDPB_CUDA=ON)")
            return FAIL
        if not info.get("cuda_devices"):
            why = info.get("cuda_error") or (f"driver {info.get('cuda_driver_version')}, runtime "
                                             f"{info.get('cuda_runtime_version')}")
            print(f"  dpbench sees no CUDA GPU ({why}): see `dpbench info` and nvidia-smi")
            return FAIL
    return PASS


def cmd_selftest(path):
    with open(path) as f:
        data = json.load(f)
    checks = data.get("checks", [])
    count = {"pass": data.get("passed"), "fail": data.get("failed"), "skip": data.get("skipped")}
    for status in count:  # the top-level counts, else counted from the checks
        if count[status] is None:
            count[status] = sum(1 for c in checks if c.get("status", "").startswith(status))
    backends = sorted({c.get("backend", "?") for c in checks})
    worst = {}
    for c in checks:
        if c.get("status") == "pass":
            b = c.get("backend", "?")
            worst[b] = max(worst.get(b, 0.0), float(c.get("max_error") or 0.0))
    print(f"passed={count['pass']} failed={count['fail']} skipped={count['skip']} "
          f"backends={','.join(backends)} max_error: "
          + " ".join(f"{b}={e:.2g}" for b, e in sorted(worst.items()))
          + (f" (no GPU: {data['no_gpu_reason']})" if data.get("no_gpu_reason") else ""))
    for c in checks:
        if c.get("status", "").startswith("fail"):
            print(f"  failed: {c.get('backend')} {c.get('op')}: {c.get('case')} {c.get('detail')}")
    return FAIL if count["fail"] or not count["pass"] else PASS


def cmd_csv(path, *reqs):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print("no epoch rows in " + path)
        return FAIL
    r = rows[-1]
    keys = ("backend", "devices", "shared_gpu", "allreduce", "grad_sync", "overlap", "epoch",
            "epoch_s", "images_per_s", "data_s", "compute_s", "comm_s", "exposed_comm_s",
            "comm_calls", "train_loss", "test_acc", "replicas_in_sync", "max_replica_diff")
    print(" ".join(f"{k}={r.get(k, '?')}" for k in keys))

    def num(k):
        try:
            return float(r.get(k) or "nan")
        except ValueError:
            return math.nan

    bad = []
    if not math.isfinite(num("train_loss")):
        bad.append("train_loss is not finite")
    epoch_s = num("epoch_s")
    if not epoch_s > 0:
        bad.append("epoch_s <= 0")
    for k in ("data_s", "compute_s", "comm_s", "exposed_comm_s"):
        if not num(k) >= 0:
            bad.append(f"{k} < 0 or NaN")
    for k in ("data_s", "exposed_comm_s"):
        if num(k) > 1.05 * epoch_s:
            bad.append(f"{k} > epoch_s")
    for req in reqs:
        if req == "sync" and r.get("replicas_in_sync") != "1":
            bad.append(f"replicas NOT in sync (max_replica_diff {r.get('max_replica_diff')})")
        elif req == "comm" and not num("comm_s") > 0:
            bad.append("comm_s is 0: the comm stream's timer measured nothing")
        elif req == "shared" and r.get("shared_gpu") != "1":
            bad.append("shared_gpu is not 1 although the ranks share one GPU")
        elif req.startswith("acc="):
            if not num("test_acc") >= float(req[4:]):
                bad.append(f"test_acc {r.get('test_acc')} < {req[4:]} (did not learn)")
        elif req not in ("sync", "comm", "shared"):
            print(f"  unknown requirement '{req}' (sync, comm, shared, acc=X)")
            return FAIL
    if bad:
        print("  PROBLEMS: " + "; ".join(bad))
    return FAIL if bad else PASS


def cmd_micro(path, min_algos="4"):
    with open(path) as f:
        data = json.load(f)
    bs = [b for b in data.get("benchmarks", []) if b.get("name", "").startswith("allreduce/")]
    errors = [b["name"] for b in bs if b.get("error_occurred")]
    wrong = [b["name"] for b in bs if b.get("wrong", 0) != 0]
    algos = sorted({b["name"].split("/")[2] for b in bs})
    largest = {}
    for b in bs:
        if "busbw_GBps" in b and not b.get("error_occurred"):
            a = b["name"].split("/")[2]
            largest[a] = max(largest.get(a, (0, 0)), (b.get("bytes", 0), b["busbw_GBps"]))
    print(f"benchmarks={len(bs)} algorithms={','.join(algos)} errors={len(errors)} "
          f"wrong={len(wrong)} busbw_GBps@largest: "
          + " ".join(f"{a}={v[1]:.3g}@{v[0] / 2**20:.3g}MiB" for a, v in sorted(largest.items())))
    for name in (errors + wrong)[:8]:
        print("  bad: " + name)
    if len(algos) < int(min_algos):
        print(f"  only {len(algos)} algorithms ran, expected at least {min_algos}")
        return FAIL
    return FAIL if errors or wrong or not bs else PASS


def load_floats(path):
    a = array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def cmd_compare(path_a, path_b, path_init, warn, fail):
    a, b, init = load_floats(path_a), load_floats(path_b), load_floats(path_init)
    if not (len(a) == len(b) == len(init)) or not a:
        print(f"sizes differ: {len(a)}, {len(b)}, init {len(init)} floats")
        return FAIL
    diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
    update = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, init)))
    norm = math.sqrt(sum(x * x for x in a))
    finite = all(math.isfinite(x) for x in a) and all(math.isfinite(x) for x in b)
    rel_update = diff / update if update > 0 else math.inf
    print(f"rel_L2_vs_update={rel_update:.3g} rel_L2={diff / (norm or 1):.3g} "
          f"update_L2={update:.3g} floats={len(a)} finite={finite} (warn>{warn} fail>{fail})")
    if not finite:
        return FAIL
    if update == 0:
        print("  the parameters did not move from their initialization: nothing was trained")
        return FAIL
    if not rel_update <= float(fail):
        return FAIL
    return WARN if rel_update > float(warn) else PASS


def cmd_gtest(path):
    root = ET.parse(path).getroot()
    tests, failures = int(root.get("tests", 0)), int(root.get("failures", 0))
    skipped, failed = 0, []
    for tc in root.iter("testcase"):
        if tc.find("failure") is not None:
            failed.append(f"{tc.get('classname')}.{tc.get('name')}")
        if tc.get("result") == "skipped" or tc.find("skipped") is not None:
            skipped += 1
    print(f"tests={tests} failures={failures} skipped={skipped}")
    for name in failed[:10]:
        print("  failed: " + name)
    return FAIL if failures or not tests else PASS


COMMANDS = {"info": cmd_info, "selftest": cmd_selftest, "csv": cmd_csv, "micro": cmd_micro,
            "compare": cmd_compare, "gtest": cmd_gtest}

if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        sys.exit(FAIL)
    try:
        sys.exit(COMMANDS[sys.argv[1]](*sys.argv[2:]))
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError, ET.ParseError) as e:
        print(f"unreadable: {type(e).__name__}: {e}")
        sys.exit(FAIL)
