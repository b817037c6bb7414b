#!/usr/bin/python3
"""torch_train.py: the PyTorch peers of `dpbench train`, on dpbench's recipe (global batch split
into contiguous shards, loss normalized by the global batch, plain SGD, the same per-epoch example
order for every process, the last partial batch kept).
  --devices 1: plain PyTorch on one device, the d2l 12.5 / 12.6 training loop (impl pytorch)
  --devices K: DistributedDataParallel, K processes (Gloo on the CPU, NCCL on GPUs; DDP's defaults:
               25 MB buckets all-reduced while backward runs) (impl pytorch-ddp)
Run it with Debian's python3 (python3-torch):
  /usr/bin/python3 peers/torch_train.py --model lenet --devices 2 --batch 256 --lr 0.2 --epochs 3
  /usr/bin/python3 peers/torch_train.py --model resnet18 --device cuda --devices 2 --batch 512 --lr 0.2
"""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import torch_models  # noqa: E402


def evaluate(net, X, y):
    net.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(X), 1000):
            correct += (net(X[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
    net.train()
    return correct / max(1, len(X))


def set_math(tf32):
    """dpbench's float32 math: strict FP32 unless --tf32. PyTorch's own defaults differ (cuDNN
    convolutions in TF32, matmuls not), which made it 2x faster than strict FP32 on an H200."""
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32


def run(rank, a, port):
    k = a.devices
    set_math(a.tf32)  # in every process: mp.spawn starts fresh interpreters
    dev = torch.device(f"cuda:{rank}" if a.device == "cuda" else "cpu")
    if a.device == "cuda":
        torch.cuda.set_device(dev)
    torch.set_num_threads(common.threads(a, k))
    if k > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("nccl" if a.device == "cuda" else "gloo", rank=rank, world_size=k)
    Xtr, ytr, Xte, yte = common.load(a.data_dir, a.train_limit, a.test_limit)
    Xtr, ytr = torch.from_numpy(Xtr).to(dev), torch.from_numpy(ytr).to(dev)
    Xte, yte = torch.from_numpy(Xte).to(dev), torch.from_numpy(yte).to(dev)
    net = torch_models.make(a.model, a.seed).to(dev)  # same seed: same start on every rank
    model = torch.nn.parallel.DistributedDataParallel(net) if k > 1 else net
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    n, B = len(Xtr), a.batch
    steps = (n + B - 1) // B
    for ep in range(a.epochs):
        perm = torch.from_numpy(common.permutation(n, a.seed, ep)).to(dev)
        stats = torch.zeros(2, dtype=torch.float64, device=dev)  # loss sum, correct
        sync()
        if k > 1:
            dist.barrier()
        t = time.perf_counter()
        for s in range(steps):
            gb = min(B, n - s * B)
            lo, hi = common.shard(gb, k, rank)
            idx = perm[s * B + lo:s * B + hi]
            logits = model(Xtr[idx])
            loss_sum = F.cross_entropy(logits, ytr[idx], reduction="sum")
            # / gb: the global batch's mean; x k: DDP averages the k ranks' gradients
            loss = loss_sum * (k / gb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                stats[0] += loss_sum.detach() / gb
                stats[1] += (logits.argmax(1) == ytr[idx]).sum()
        sync()
        if k > 1:
            dist.barrier()
        dt = time.perf_counter() - t
        if k > 1:
            dist.all_reduce(stats)
        if rank == 0:
            acc = evaluate(net, Xte, yte)
            common.report(ep + 1, stats[0].item() / steps, stats[1].item() / n, acc, dt, n,
                          train_examples=n, test_examples=len(Xte),
                          threads=common.threads(a, k), torch=torch.__version__,
                          math=common.math_mode(a))
    if k > 1:
        common.end_process_group(dist)


def main():
    p = common.parser(__doc__.split("\n")[0], procs=True)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    a = p.parse_args()
    if a.device == "cuda" and torch.cuda.device_count() < a.devices:
        raise SystemExit(f"torch_train: {a.devices} processes need {a.devices} GPUs, "
                         f"found {torch.cuda.device_count()}")
    print(f"torch_train: {a.model}, {'DDP, ' if a.devices > 1 else ''}{a.devices} {a.device} "
          f"process(es), torch {torch.__version__}, batch {a.batch}, lr {a.lr}, "
          f"{a.epochs} epoch(s), {common.math_mode(a)} math", flush=True)
    if a.devices == 1:
        run(0, a, 0)
    else:
        mp.spawn(run, args=(a, int(os.environ.get("MASTER_PORT") or common.free_port())),
                 nprocs=a.devices, join=True)


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
