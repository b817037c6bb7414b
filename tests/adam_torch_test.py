#!/usr/bin/env python3
"""adam_torch_test.py BUILD_DIR: dpbench's Adam (the optimizer table's adam, adam_step on the CPU
reference) against PyTorch's torch.optim.Adam (lr 1e-3, default betas and eps, which are optax's):
the same initial weights and 10 steps of the same gradients, every weight within 1e-6 of torch's
after every step.

This script draws the weights and gradients (normal, at scales from 1e-9, below eps, to 10, with
some exact zeros), runs torch.optim.Adam on them, and writes both to a fixture file; the gtest
AdamTorch.MatchesFixture (tests/test_optimizer_loss.cpp) reads it, runs dpbench's Adam and
compares. Skipped (exit 77) where PyTorch cannot be imported; /usr/bin/python3 is tried when the
python3 running this script lacks it. Run by ctest (adam_torch); about a second past torch's import.
"""
import os
import struct
import subprocess
import sys
import tempfile

N, STEPS, LR = 4096, 10, 1e-3


def import_torch():
    try:
        import torch  # noqa: F401
        return torch
    except ImportError as e:
        system = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(system) and os.path.exists(system) \
                and not os.environ.get("DPB_ADAM_TORCH_REEXEC"):
            os.environ["DPB_ADAM_TORCH_REEXEC"] = "1"
            os.execv(system, [system] + sys.argv)
        print(f"adam_torch_test: SKIP: PyTorch is not importable ({e}); install python3-torch "
              "(Debian) or torch (pip) to compare dpbench's Adam with torch.optim.Adam")
        sys.exit(77)


def write_fixture(torch, path):
    g = torch.Generator().manual_seed(2024)
    w0 = torch.randn(N, generator=g, dtype=torch.float32)
    p = torch.nn.Parameter(w0.clone())
    opt = torch.optim.Adam([p], lr=LR)  # betas (0.9, 0.999), eps 1e-8: optax's defaults
    # Per-weight gradient scales from 1e-9 (below eps: the update is then far from lr * sign) to 10.
    scale = 10.0 ** (torch.rand(N, generator=g) * 10 - 9)
    with open(path, "wb") as f:
        f.write(b"DPBADAM1" + struct.pack("<iid", N, STEPS, LR))
        f.write(w0.numpy().astype("<f4").tobytes())
        for t in range(STEPS):
            grad = (torch.randn(N, generator=g) * scale).to(torch.float32)
            grad[t::17] = 0.0  # exact zeros, a different set each step
            p.grad = grad.clone()
            opt.step()
            f.write(grad.numpy().astype("<f4").tobytes())
            f.write(p.detach().numpy().astype("<f4").tobytes())


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    tests = os.path.join(build, "dpb_tests")
    if not os.path.exists(tests):
        print(f"adam_torch_test: no {tests} (build dpb_tests first)")
        return 2
    torch = import_torch()
    with tempfile.TemporaryDirectory(prefix="dpb-adam-torch.") as tmp:
        fixture = os.path.join(tmp, "adam.bin")
        write_fixture(torch, fixture)
        env = dict(os.environ, DPB_ADAM_TORCH_FIXTURE=fixture)
        r = subprocess.run([tests, "--gtest_filter=AdamTorch.MatchesFixture"], env=env,
                           capture_output=True, text=True)
    out = r.stdout + r.stderr
    print(out)
    if r.returncode != 0 or "[  PASSED  ] 1 test" not in out or "SKIPPED" in out:
        print(f"adam_torch_test: FAIL (torch {torch.__version__}): dpbench's Adam differs from "
              "torch.optim.Adam, or the gtest did not run")
        return 1
    print(f"adam_torch_test: dpbench's Adam matches torch.optim.Adam (torch {torch.__version__}) "
          f"to 1e-6 over {STEPS} steps of {N} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
