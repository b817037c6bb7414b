#!/usr/bin/python3
"""jax_lenet.py: the JAX peer (impl jax): d2l's LeNet data-parallel with jax.pmap over K GPUs
(gradients averaged with lax.pmean, plain SGD), on dpbench's recipe (global batch split into equal
contiguous shards, loss normalized by the global batch, dpbench's per-epoch example order). Data
are fed from host memory per step, as in d2l. A last partial batch that K does not divide is left
out (pmap needs equal shards); the first epoch includes XLA compilation.
jax is not packaged by Debian 12. Install it for Debian's python3 (or in a venv, then point
DPB_PEER_PYTHON at its python):
  /usr/bin/python3 -m pip install --break-system-packages "jax[cuda12]"
  /usr/bin/python3 peers/jax_lenet.py --devices 2 --batch 256 --lr 0.2 --epochs 3
"""
import functools
import os
import sys
import time

import jax
import numpy as np
from jax import numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def init(seed):
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    shapes = [(20, 1, 3, 3), (50, 20, 5, 5), (800, 128), (128, 10)]
    params = []
    for key, shape in zip(keys, shapes):
        params += [jax.random.normal(key, shape) * 0.01, jnp.zeros(shape[0] if len(shape) == 4
                                                                   else shape[1])]
    return params


def lenet(p, x):  # (B, 1, 28, 28) -> (B, 10)
    dn = ("NCHW", "OIHW", "NCHW")
    pool = lambda h: jax.lax.reduce_window(h, 0.0, jax.lax.add, (1, 1, 2, 2), (1, 1, 2, 2),
                                           "VALID") / 4.0
    h = jax.lax.conv_general_dilated(x, p[0], (1, 1), "VALID", dimension_numbers=dn)
    h = pool(jax.nn.relu(h + p[1].reshape(1, -1, 1, 1)))
    h = jax.lax.conv_general_dilated(h, p[2], (1, 1), "VALID", dimension_numbers=dn)
    h = pool(jax.nn.relu(h + p[3].reshape(1, -1, 1, 1))).reshape(x.shape[0], -1)
    return jax.nn.relu(h @ p[4] + p[5]) @ p[6] + p[7]


def loss_sum(p, x, y):
    logits = lenet(p, x)
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, y[:, None], 1).sum(), (logits.argmax(1) == y).sum()


@functools.partial(jax.pmap, axis_name="d", static_broadcasted_argnums=(3, 4))
def step(p, x, y, lr, gb):
    (l, correct), g = jax.value_and_grad(loss_sum, has_aux=True)(p, x, y)
    k = jax.lax.psum(1, "d")
    g = jax.lax.pmean(jax.tree_util.tree_map(lambda d: d * (k / gb), g), "d")  # sum / gb
    return (jax.tree_util.tree_map(lambda w, d: w - lr * d, p, g),
            jax.lax.psum(l, "d") / gb, jax.lax.psum(correct, "d"))


def main():
    a = common.parser(__doc__.split("\n")[0], models=("lenet",), procs=True).parse_args()
    k = a.devices
    # dpbench's float32 math: strict FP32 unless --tf32 (JAX's GPU default is TF32)
    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if a.tf32 else "float32")
    if jax.device_count() < k:
        raise SystemExit(f"jax_lenet: {k} devices requested, jax sees {jax.device_count()} "
                         f"({jax.devices()})")
    print(f"jax_lenet: pmap over {k} x {jax.devices()[0].device_kind}, jax {jax.__version__}, "
          f"{common.math_mode(a)} math", flush=True)
    Xtr, ytr, Xte, yte = common.load(a.data_dir, a.train_limit, a.test_limit)
    ytr, yte = ytr.astype(np.int32), yte.astype(np.int32)
    state = jax.tree_util.tree_map(lambda x: jnp.stack([x] * k), init(a.seed))
    predict = jax.jit(lenet)
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
            state, l, c = step(state, jnp.asarray(Xtr[idx].reshape(k, gb // k, 1, 28, 28)),
                               jnp.asarray(ytr[idx].reshape(k, gb // k)), a.lr, gb)
            loss, correct, steps, seen = loss + l[0], correct + c[0], steps + 1, seen + gb
        jax.tree_util.tree_map(lambda x: x.block_until_ready(), state)
        dt = time.perf_counter() - t
        host = jax.tree_util.tree_map(lambda x: x[0], state)
        acc = float(np.mean(np.concatenate([np.asarray(predict(host, Xte[i:i + 1000])).argmax(1)
                                            == yte[i:i + 1000] for i in range(0, len(Xte), 1000)])))
        common.report(ep + 1, float(loss) / steps, float(correct) / seen, acc, dt, seen,
                      train_examples=n,
                      test_examples=len(Xte), jax=jax.__version__, math=common.math_mode(a))


if __name__ == "__main__":
    main()
