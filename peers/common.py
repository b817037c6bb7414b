"""common.py: what the Python peers share: their command line (the `dpbench train` flags they
honour), Fashion-MNIST from the gzip IDX files (the prefix limits of --train-limit/--test-limit,
like dpbench), the per-epoch permutation and contiguous shards of dpbench's recipe, and the result
lines that scripts/peerlib.py reads.

Every peer prints, per epoch, a line for people and one for the runner:
  epoch 1: loss 2.3021 train acc 0.1000 test acc 0.1000 12.34 s 4862 img/s
  DPB_PEER {"epoch": 1, "train_loss": 2.3021, "train_acc": 0.1, "test_acc": 0.1, "epoch_s": ...}
epoch_s is training time only (after a device synchronize; evaluation excluded), like dpbench's.
"""
import argparse
import gzip
import json
import os
import socket

import numpy as np

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def parser(about, models=("lenet", "resnet18"), procs=False):
    p = argparse.ArgumentParser(description=about)
    p.add_argument("--model", choices=models, default=models[0])
    p.add_argument("--data-dir", default=os.environ.get("DPBENCH_DATA") or DEFAULT_DATA,
                   help="Fashion-MNIST gzip IDX files (default $DPBENCH_DATA, else Debian's)")
    p.add_argument("--batch", type=int, default=256, help="global batch")
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--train-limit", type=int, default=0, help="first N training examples")
    p.add_argument("--test-limit", type=int, default=0, help="first N test examples")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="CPU math threads per process "
                   "(default: cores / processes)")
    p.add_argument("--tf32", action="store_true", help="float32 convolutions and matmuls in TF32 "
                   "on GPUs, as dpbench's --tf32; default: strict FP32, as dpbench's default")
    if procs:
        p.add_argument("--devices", type=int, default=1, help="processes (one per device)")
    return p


def _idx(path, offset):
    if not os.path.exists(path):
        raise SystemExit(f"peer: {path} does not exist (sudo apt-get install "
                         "dataset-fashion-mnist, or --data-dir / $DPBENCH_DATA)")
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def load(data_dir, train_limit=0, test_limit=0):
    """(Xtr, ytr, Xte, yte) as float32 N x 1 x 28 x 28 in [0, 1] and int64 labels."""
    out = []
    for split, limit in (("train", train_limit), ("t10k", test_limit)):
        x = _idx(f"{data_dir}/{split}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
        y = _idx(f"{data_dir}/{split}-labels-idx1-ubyte.gz", 8).astype(np.int64)
        if limit:
            x, y = x[:limit], y[:limit]
        out += [x.astype(np.float32) / 255, y]
    return tuple(out)


def permutation(n, seed, epoch):
    """This epoch's order of the training examples (the same on every process)."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def shard(lo_hi_batch, k, rank):
    """[begin, end) of rank's contiguous share of a global batch of n examples: sizes differ by at
    most one, the first n % k ranks get one more (dpbench's chunk_begin / chunk_size)."""
    n = lo_hi_batch
    q, r = divmod(n, k)
    begin = rank * q + min(rank, r)
    return begin, begin + q + (1 if rank < r else 0)


def free_port():
    """A free TCP port on this host for torch.distributed's rendezvous (DDP peers)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def math_mode(a):
    """The float32 math the peer asked its framework for: "tf32" or "fp32" (strict)."""
    return "tf32" if a.tf32 else "fp32"


def threads(a, procs=1):
    return a.threads or max(1, (os.cpu_count() or 1) // procs)


def report(epoch, train_loss, train_acc, test_acc, epoch_s, images, **extra):
    rec = {"epoch": epoch, "train_loss": train_loss, "train_acc": train_acc, "test_acc": test_acc,
           "epoch_s": epoch_s, "images_per_s": images / epoch_s if epoch_s > 0 else 0.0, **extra}
    print(f"epoch {epoch}: loss {train_loss:.4f} train acc {train_acc:.4f} test acc "
          f"{test_acc:.4f} {epoch_s:.2f} s {rec['images_per_s']:.0f} img/s", flush=True)
    print("DPB_PEER " + json.dumps(rec), flush=True)


def end_process_group(dist):
    """Every rank leaves the torch.distributed group together: a barrier (rank 0 may still be
    evaluating), then the group is destroyed. Without the barrier a rank that got to its end first
    can sit in Gloo's teardown while rank 0, the TCPStore's host, exits; torch 1.13's store client
    then spins forever (seen in CI: rank 1 at 100% CPU long after rank 0 had finished)."""
    dist.barrier()
    dist.destroy_process_group()
