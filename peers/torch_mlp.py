#!/usr/bin/python3
"""torch_mlp.py: the PyTorch peer of `dpbench train --model mlp` (the memory and sharding suites,
scenarios/memory.ini, scenarios/sharding.ini): the sharding notebook's MLP (../shared/seeds/004: --mlp-layers dense layers
of --mlp-hidden with ReLU, then a dense layer to 10 outputs; flax's default init, lecun_normal
weights and zero biases) with Adam (optax's defaults, as torch.optim.Adam's) or SGD, MSE or
cross-entropy loss, on synthetic data (every feature 1.0, class 1: the notebook's ones) or
Fashion-MNIST (the 784 pixels), on dpbench's recipe (global batch in contiguous shards, loss
normalized by the global batch, the same per-epoch example order on every process).
  --devices 1: plain PyTorch on one device (impl pytorch)
  --devices K: DistributedDataParallel on K processes, Gloo on the CPU, NCCL on GPUs (pytorch-ddp)
  --shard optimizer: ZeRO-1, torch.distributed.optim.ZeroRedundancyOptimizer over the optimizer
      (each process keeps and updates 1/K of its state, then broadcasts its parameters) beside DDP's
      gradient all-reduce, K processes as above, K = 1 too (torch-zero1; the sharding suite)
  --shard parameters: FullyShardedDataParallel, full shard (ZeRO-3: every dense layer, or residual
      block, a unit gathered before its forward and backward, prefetched, then freed; gradients
      reduce-scattered), NCCL on K GPUs only (torch-fsdp; torch 1.13's FSDP needs CUDA)
  --model resnet18: d2l's ResNet-18 (peers/torch_models.py, N(0, 0.01) init) on Fashion-MNIST with
      the same optimizers and modes (the sharding suite's ResNet-18 runs use Adam)
Memory: the peak per device, as dpbench's peak_mem_bytes (the largest over the ranks), with how it
was measured (peak_mem_source): on a GPU torch.cuda.max_memory_allocated (PyTorch's caching
allocator: tensors only, no CUDA context, no NCCL buffers); on the CPU the process's peak resident
set (getrusage ru_maxrss: the interpreter, torch's libraries and the data too;
peak_mem_base_bytes is that figure before the data and the model were made). Per category, from the
tensors torch holds at the end of each epoch's last step (the largest over the ranks, bytes):
peak_mem_parameters_bytes the module's parameters (FSDP: this rank's flat shards),
peak_mem_gradients_bytes their .grad after backward (DDP's own bucket copies not counted),
peak_mem_optimizer_state_bytes the optimizer's state tensors (ZeroRedundancyOptimizer: this rank's
share of them, its local optimizer's state).
  /usr/bin/python3 peers/torch_mlp.py --mlp-layers 8 --mlp-hidden 256 --batch 256 --lr 1e-4 \
      --optimizer adam --loss mse --data synthetic --train-limit 1024 --epochs 2 --devices 2
"""
import functools
import importlib
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import torch_models  # noqa: E402

CLASSES = 10
# flax.linen.Dense's default kernel init, jax.nn.initializers.lecun_normal(): a normal truncated
# at +-2 standard deviations, scaled so that its variance is 1 / fan_in (this constant is the
# standard deviation of a unit normal truncated at +-2, as in jax's variance_scaling).
TRUNC_STD = 0.87962566103423978


def make_mlp(layers, hidden, inputs, seed):
    torch.manual_seed(seed)
    mods, width = [], inputs
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    mods.append(nn.Linear(width, CLASSES))
    net = nn.Sequential(*mods)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            std = (1.0 / m.in_features) ** 0.5 / TRUNC_STD
            nn.init.trunc_normal_(m.weight, std=std, a=-2 * std, b=2 * std)
            nn.init.zeros_(m.bias)
    return net


SYNTHETIC_LABEL = 1  # src/data/synthetic.h kSyntheticLabel: every example is class 1


def synthetic(n, inputs):
    """dpbench's --data synthetic (src/data/synthetic.h): every feature 1.0, every label 1."""
    return np.ones((n, inputs), np.float32), np.full(n, SYNTHETIC_LABEL, np.int64)


def load_data(a):
    if a.model == "resnet18":  # images as they are, 1 x 28 x 28
        if a.data == "synthetic":
            raise SystemExit("torch_mlp: --model resnet18 runs on Fashion-MNIST, not --data "
                             "synthetic")
        return common.load(a.data_dir, a.train_limit, a.test_limit)
    if a.data == "synthetic":
        return synthetic(a.train_limit or 60000, a.mlp_input) + \
            synthetic(a.test_limit or 10000, a.mlp_input)
    if a.mlp_input not in (784, 1024):  # 1024: the flag's default, meaningless on images
        raise SystemExit(f"torch_mlp: Fashion-MNIST has 784 input features, not --mlp-input "
                         f"{a.mlp_input}")
    a.mlp_input = 784
    Xtr, ytr, Xte, yte = common.load(a.data_dir, a.train_limit, a.test_limit)
    return Xtr.reshape(len(Xtr), -1), ytr, Xte.reshape(len(Xte), -1), yte


def loss_sum(kind, out, y):
    """Summed over the examples (the caller divides by the global batch, as dpbench does). mse:
    per example the mean over the 10 outputs of (out - onehot(y))^2, the notebook's
    jnp.mean((y_pred - y) ** 2) times the batch."""
    if kind == "mse":
        return ((out - F.one_hot(y, CLASSES).to(out.dtype)) ** 2).mean(1).sum()
    return F.cross_entropy(out, y, reduction="sum")


def blas_library():
    """The BLAS this process loaded (Debian's torch calls libblas.so.3, whose alternative is the
    reference BLAS unless an optimized one, e.g. libopenblas0-pthread, is installed)."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "blas" in line.split()[-1]}
    except OSError:
        return "unknown"
    return ", ".join(sorted(os.path.realpath(x) for x in libs)) or "none (MKL or built in)"


def peak_bytes(dev):
    if dev.type == "cuda":
        return torch.cuda.max_memory_allocated(dev), "cuda_max_memory_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "peak_rss"  # Linux: KiB


def make_model(a, dev):
    """The model on dev, the same on every rank (the seed), wrapped for the mode: (module to
    train, module to evaluate)."""
    net = (torch_models.make("resnet18", a.seed) if a.model == "resnet18" else
           make_mlp(a.mlp_layers, a.mlp_hidden, a.mlp_input, a.seed)).to(dev)
    if a.shard == "parameters":
        from torch.distributed.fsdp import (BackwardPrefetch, FullyShardedDataParallel,
                                            ShardingStrategy)
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        # one unit per dense layer (the MLP) or residual block (ResNet-18): each gathered before
        # its forward and again before its backward, freed after; the next one prefetched
        units = {nn.Linear, torch_models.Residual}
        model = FullyShardedDataParallel(
            net, sharding_strategy=ShardingStrategy.FULL_SHARD, device_id=dev,
            auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                               transformer_layer_cls=units),
            backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=True)
        return model, model  # evaluation gathers the shards too: every rank runs it
    if dist.is_initialized():
        return torch.nn.parallel.DistributedDataParallel(net), net
    return net, net


def make_optimizer(a, model):
    cls, kw = ((torch.optim.Adam, dict(lr=a.lr, betas=(0.9, 0.999), eps=1e-8))
               if a.optimizer == "adam" else (torch.optim.SGD, dict(lr=a.lr)))
    if a.shard == "optimizer":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=cls, **kw)
    return cls(model.parameters(), **kw)


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t))


def optimizer_state_bytes(opt):
    """Bytes of the optimizer's state tensors on this rank (ZeroRedundancyOptimizer: its local
    optimizer's, over the parameters this rank owns)."""
    inner = getattr(opt, "optim", opt)
    return tensor_bytes(t for st in inner.state.values() for t in st.values())


def evaluate(net, X, y, dev):
    net.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(X), 1000):
            xb = torch.from_numpy(X[i:i + 1000]).to(dev)
            correct += (net(xb).argmax(1).cpu() == torch.from_numpy(y[i:i + 1000])).sum().item()
    net.train()
    return correct / max(1, len(X))


def run(rank, a, port):
    k = a.devices
    dev = torch.device(f"cuda:{rank}" if a.device == "cuda" else "cpu")
    if a.device == "cuda":
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = a.tf32  # dpbench: strict FP32 unless --tf32
    torch.set_num_threads(common.threads(a, k))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    blas = blas_library() if a.device == "cpu" else "cuBLAS"
    if rank == 0 and a.device == "cpu" and "/blas/libblas.so" in blas:
        print(f"torch_mlp: note: PyTorch's CPU matmuls use the reference BLAS ({blas}), about 10x "
              "slower than an optimized one: sudo apt-get install libopenblas0-pthread (Debian "
              "switches libblas.so.3 to it)", flush=True)
    if k > 1 or a.shard != "none":  # the sharded modes need a group, of one process too
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("nccl" if a.device == "cuda" else "gloo", rank=rank, world_size=k)
    Xtr, ytr, Xte, yte = load_data(a)  # on the host: each step uploads its shard, as dpbench
    model, net = make_model(a, dev)
    opt = make_optimizer(a, model)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    n, B = len(Xtr), a.batch
    steps = (n + B - 1) // B
    for ep in range(a.epochs):
        perm = common.permutation(n, a.seed, ep)
        # loss sum, correct; the peak, parameter, gradient and optimizer state bytes (largest rank)
        stats = torch.zeros(6, dtype=torch.float64, device=dev)
        sync()
        if k > 1:
            dist.barrier()
        t = time.perf_counter()
        for s in range(steps):
            gb = min(B, n - s * B)
            lo, hi = common.shard(gb, k, rank)
            idx = perm[s * B + lo:s * B + hi]
            xb = torch.from_numpy(Xtr[idx]).to(dev, non_blocking=True)
            yb = torch.from_numpy(ytr[idx]).to(dev, non_blocking=True)
            out = model(xb)
            ls = loss_sum(a.loss, out, yb)
            # / gb: the global batch's mean; x k: DDP averages the k ranks' gradients
            opt.zero_grad(set_to_none=True)
            (ls * (k / gb)).backward()
            if s == steps - 1:
                stats[4] = tensor_bytes(p.grad for p in model.parameters())
            opt.step()
            with torch.no_grad():
                stats[0] += ls.detach() / gb
                stats[1] += (out.argmax(1) == yb).sum()
        sync()
        if k > 1:
            dist.barrier()
        dt = time.perf_counter() - t
        peak, source = peak_bytes(dev)
        stats[2] = peak
        stats[3] = tensor_bytes(model.parameters())
        stats[5] = optimizer_state_bytes(opt)
        if dist.is_initialized():
            top = stats[2:].clone()
            dist.all_reduce(stats[:2])
            dist.all_reduce(top, op=dist.ReduceOp.MAX)
            stats[2:] = top
        # FSDP's evaluation gathers the shards: every rank takes part; else rank 0 alone
        acc = evaluate(net, Xte, yte, dev) if rank == 0 or a.shard == "parameters" else None
        if rank == 0:
            common.report(ep + 1, stats[0].item() / steps, stats[1].item() / n, acc, dt, n,
                          train_examples=n, test_examples=len(Xte), steps=steps,
                          peak_mem_bytes=int(stats[2].item()), peak_mem_source=source,
                          peak_mem_base_bytes=base if source == "peak_rss" else "",
                          peak_mem_parameters_bytes=int(stats[3].item()),
                          peak_mem_gradients_bytes=int(stats[4].item()),
                          peak_mem_optimizer_state_bytes=int(stats[5].item()), shard=a.shard,
                          threads=common.threads(a, k), torch=torch.__version__, blas=blas,
                          math=common.math_mode(a))
    if dist.is_initialized():
        common.end_process_group(dist)


def main():
    p = common.parser(__doc__.split("\n")[0], models=("mlp", "resnet18"), procs=True)
    p.set_defaults(lr=1e-4)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--mlp-layers", type=int, default=90)
    p.add_argument("--mlp-hidden", type=int, default=2056)
    p.add_argument("--mlp-input", type=int, default=1024)
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--loss", choices=("xent", "mse"), default="xent")
    p.add_argument("--data", choices=("fashion-mnist", "synthetic"), default="fashion-mnist")
    p.add_argument("--shard", choices=("none", "optimizer", "parameters"), default="none",
                   help="optimizer: ZeroRedundancyOptimizer (ZeRO-1); parameters: "
                   "FullyShardedDataParallel full shard (GPUs only)")
    a = p.parse_args()
    if a.shard == "parameters":
        if a.device != "cuda":
            raise SystemExit("torch_mlp: --shard parameters (FullyShardedDataParallel) runs on "
                             "GPUs only (--device cuda): torch 1.13's FSDP needs CUDA")
        try:
            importlib.import_module("torch.distributed.fsdp")
        except Exception as e:  # torch 1.13's FSDP does not import under Python 3.11
            raise SystemExit(f"torch_mlp: --shard parameters: torch {torch.__version__}'s "
                             f"FullyShardedDataParallel does not import here ({e})")
    if min(a.mlp_layers, a.mlp_hidden, a.mlp_input, a.batch, a.epochs, a.devices) < 1:
        raise SystemExit("torch_mlp: --mlp-layers, --mlp-hidden, --mlp-input, --batch, --epochs "
                         "and --devices must be positive")
    if a.device == "cuda" and torch.cuda.device_count() < a.devices:
        raise SystemExit(f"torch_mlp: {a.devices} processes need {a.devices} GPUs, "
                         f"found {torch.cuda.device_count()}")
    mode = {"none": "DDP, " if a.devices > 1 else "", "optimizer": "DDP + "
            "ZeroRedundancyOptimizer (ZeRO-1), ", "parameters": "FSDP full shard, "}[a.shard]
    what = "ResNet-18" if a.model == "resnet18" else \
        f"{a.mlp_layers} x {a.mlp_hidden} MLP (input {a.mlp_input})"
    print(f"torch_mlp: {what}, {mode}{a.devices} {a.device} process(es), torch "
          f"{torch.__version__}, {a.optimizer} lr {a.lr:g}, {a.loss}, {a.data}, batch {a.batch}, "
          f"{a.epochs} epoch(s), {common.math_mode(a)} math", flush=True)
    if a.devices == 1 and a.shard == "none":
        run(0, a, 0)
    elif a.devices == 1:  # one process in a group of one
        run(0, a, int(os.environ.get("MASTER_PORT") or common.free_port()))
    else:
        mp.spawn(run, args=(a, int(os.environ.get("MASTER_PORT") or common.free_port())),
                 nprocs=a.devices, join=True)


if __name__ == "__main__":
    main()
