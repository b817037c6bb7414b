#!/usr/bin/python3
"""jax_mlp.py: the sharding notebook's JAX modes (../shared/seeds/004) as peers of `dpbench train
--model mlp` (the memory suite, scenarios/memory.ini), on dpbench's recipe and memory figures:
  --mode jit, 1 device:   jit_single: jax.jit on one device (impl jax-jit)
  --mode jit, K devices:  jit_multi: the batch sharded over a 1-D mesh ('data'), the parameters and
                          Adam's state replicated, jax.jit (XLA inserts the gradient all-reduce)
  --mode pmap, K devices: pmap: parameters replicated, batch reshaped (K, B/K, ...), lax.pmean of
                          the gradients (impl jax-pmap)
The model is the notebook's flax MLP written in plain JAX (no flax or optax needed): --mlp-layers
dense layers of --mlp-hidden with ReLU, a dense layer to 10 outputs, lecun_normal kernels and zero
biases (flax.linen.Dense's defaults); Adam with optax's defaults (b1 0.9, b2 0.999, eps 1e-8,
bias-corrected) or SGD; MSE (the notebook's jnp.mean((y_pred - y) ** 2) against one-hot labels)
or cross-entropy, normalized by the global batch; synthetic data (every feature 1.0, class 1)
or Fashion-MNIST. A last partial batch that K does not divide is left out (equal shards); the
first epoch includes XLA compilation.
Memory: peak_mem_bytes is the largest peak_bytes_in_use over the devices (XLA's allocator; on a GPU
the preallocated pool is not counted, only what is in use: XLA_PYTHON_CLIENT_PREALLOCATE does not
change it), peak_mem_source = xla_peak_bytes_in_use; where the devices report no statistics (the
CPU) the process's peak resident set (peak_rss).
On the CPU (no GPU backend) K devices are XLA host devices (--xla_force_host_platform_device_count).
jax is not packaged by Debian 12: /usr/bin/python3 -m pip install --break-system-packages
"jax[cuda12]" (or a venv and DPB_PEER_PYTHON), then e.g.
  /usr/bin/python3 peers/jax_mlp.py --mode jit --devices 2 --batch 6912 --lr 1e-4 --optimizer adam \
      --loss mse --data synthetic --train-limit 20736 --epochs 3
"""
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CLASSES = 10
SYNTHETIC_LABEL = 1  # src/data/synthetic.h kSyntheticLabel: every example is class 1


def args():
    p = common.parser(__doc__.split("\n")[0], models=("mlp",), procs=True)
    p.set_defaults(lr=1e-4)
    p.add_argument("--mode", choices=("jit", "pmap"), default="jit",
                   help="jit: jit_single on 1 device, jit_multi (sharding) on K; pmap")
    p.add_argument("--mlp-layers", type=int, default=90)
    p.add_argument("--mlp-hidden", type=int, default=2056)
    p.add_argument("--mlp-input", type=int, default=1024)
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--loss", choices=("xent", "mse"), default="xent")
    p.add_argument("--data", choices=("fashion-mnist", "synthetic"), default="fashion-mnist")
    a = p.parse_args()
    if min(a.mlp_layers, a.mlp_hidden, a.mlp_input, a.batch, a.epochs, a.devices) < 1:
        raise SystemExit("jax_mlp: --mlp-layers, --mlp-hidden, --mlp-input, --batch, --epochs and "
                         "--devices must be positive")
    return a


A = args()
if A.devices > 1 and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # Only the CPU platform reads it; on a GPU machine the GPUs are the devices.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={A.devices}").strip()
import jax  # noqa: E402  (after XLA_FLAGS)
import numpy as np  # noqa: E402
from jax import numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402


def init(key, layers, hidden, inputs):
    """[(kernel, bias)] as flax.linen.Dense initializes them: lecun_normal, zeros."""
    lecun = jax.nn.initializers.lecun_normal()
    widths = [inputs] + [hidden] * layers + [CLASSES]
    keys = jax.random.split(key, len(widths) - 1)
    return [(lecun(kk, (i, o), jnp.float32), jnp.zeros((o,), jnp.float32))
            for kk, i, o in zip(keys, widths[:-1], widths[1:])]


def mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_sum(params, x, y, kind):
    out = mlp(params, x)
    if kind == "mse":
        per = jnp.mean((out - jax.nn.one_hot(y, CLASSES)) ** 2, axis=1)
    else:
        per = -jnp.take_along_axis(jax.nn.log_softmax(out), y[:, None], 1)[:, 0]
    return per.sum(), (out.argmax(1) == y).sum()


def opt_init(params, kind):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return (jnp.zeros((), jnp.int32), zeros, jax.tree_util.tree_map(jnp.zeros_like, params)) \
        if kind == "adam" else ()


def opt_update(params, grads, state, lr, kind):
    """optax.adam's update (b1 0.9, b2 0.999, eps 1e-8 outside the sqrt, bias-corrected) or SGD."""
    if kind != "adam":
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), state
    b1, b2, eps = 0.9, 0.999, 1e-8
    t, m, v = state
    t = t + 1
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    c1, c2 = 1 - b1 ** t.astype(jnp.float32), 1 - b2 ** t.astype(jnp.float32)
    params = jax.tree_util.tree_map(
        lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, m, v)
    return params, (t, m, v)


def make_step(a, k):
    def step(params, state, x, y, gb):
        (ls, correct), g = jax.value_and_grad(loss_sum, has_aux=True)(params, x, y, a.loss)
        g = jax.tree_util.tree_map(lambda d: d / gb, g)  # the global batch's mean
        if a.mode == "pmap":
            g = jax.lax.pmean(jax.tree_util.tree_map(lambda d: d * k, g), "device")
            ls, correct = jax.lax.psum(ls, "device"), jax.lax.psum(correct, "device")
        params, state = opt_update(params, g, state, a.lr, a.optimizer)
        return params, state, ls / gb, correct
    if a.mode == "pmap":
        return jax.pmap(step, axis_name="device", static_broadcasted_argnums=(4,))
    return jax.jit(step, static_argnums=(4,), donate_argnums=(0, 1))


def load_data(a):
    if a.data == "synthetic":
        n, m = a.train_limit or 60000, a.test_limit or 10000
        return (np.ones((n, a.mlp_input), np.float32), np.full(n, SYNTHETIC_LABEL, np.int32),
                np.ones((m, a.mlp_input), np.float32), np.full(m, SYNTHETIC_LABEL, np.int32))
    a.mlp_input = 784
    Xtr, ytr, Xte, yte = common.load(a.data_dir, a.train_limit, a.test_limit)
    return (Xtr.reshape(len(Xtr), -1), ytr.astype(np.int32), Xte.reshape(len(Xte), -1),
            yte.astype(np.int32))


def peak(devs):
    stats = [d.memory_stats() or {} for d in devs]
    if all("peak_bytes_in_use" in s for s in stats):
        return max(s["peak_bytes_in_use"] for s in stats), "xla_peak_bytes_in_use"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "peak_rss"


def main():
    a, k = A, A.devices
    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if a.tf32 else "float32")
    if jax.device_count() < k:
        raise SystemExit(f"jax_mlp: {k} devices requested, jax sees {jax.device_count()} "
                         f"({jax.devices()})")
    devs = jax.devices()[:k]
    mode = "pmap" if a.mode == "pmap" else ("jit_single" if k == 1 else "jit_multi")
    print(f"jax_mlp: {mode}, {a.mlp_layers} x {a.mlp_hidden} MLP (input {a.mlp_input}), {k} x "
          f"{devs[0].device_kind}, jax {jax.__version__}, {a.optimizer} lr {a.lr:g}, {a.loss}, "
          f"{a.data}, batch {a.batch}, {common.math_mode(a)} math", flush=True)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    Xtr, ytr, Xte, yte = load_data(a)
    params = init(jax.random.PRNGKey(a.seed), a.mlp_layers, a.mlp_hidden, a.mlp_input)
    state = opt_init(params, a.optimizer)
    if mode == "pmap":
        params, state = jax.device_put_replicated((params, state), devs)
        put = lambda x: jnp.asarray(x.reshape((k, x.shape[0] // k) + x.shape[1:]))  # noqa: E731
    else:
        mesh = Mesh(np.array(devs), axis_names=("data",))
        rep = NamedSharding(mesh, PartitionSpec())
        split = NamedSharding(mesh, PartitionSpec("data"))
        params, state = jax.device_put((params, state), rep)
        put = lambda x: jax.device_put(x, split)  # noqa: E731
    step = make_step(a, k)
    predict = jax.jit(mlp)
    n, B = len(Xtr), a.batch
    for ep in range(a.epochs):
        perm = common.permutation(n, a.seed, ep)
        loss, correct, steps, seen = 0.0, 0, 0, 0
        t = time.perf_counter()
        for s in range(0, n, B):
            idx = perm[s:s + B]
            gb = len(idx)
            if gb % k:
                continue
            params, state, ls, c = step(params, state, put(Xtr[idx]), put(ytr[idx]), gb)
            loss, correct = loss + (ls[0] if mode == "pmap" else ls), \
                correct + (c[0] if mode == "pmap" else c)
            steps, seen = steps + 1, seen + gb
        jax.block_until_ready(params)
        dt = time.perf_counter() - t
        host = jax.tree_util.tree_map(lambda x: x[0], params) if mode == "pmap" else params
        acc = float(np.mean(np.concatenate([np.asarray(predict(host, Xte[i:i + 1000])).argmax(1)
                                            == yte[i:i + 1000] for i in range(0, len(Xte), 1000)])))
        top, source = peak(devs)
        common.report(ep + 1, float(loss) / max(1, steps), float(correct) / max(1, seen), acc, dt,
                      seen, train_examples=n, test_examples=len(Xte), steps=steps, mode=mode,
                      peak_mem_bytes=int(top), peak_mem_source=source,
                      peak_mem_base_bytes=base if source == "peak_rss" else "",
                      jax=jax.__version__, math=common.math_mode(a))


if __name__ == "__main__":
    main()
