#!/usr/bin/python3
"""Trains a model that draws random numbers in its forward pass.

The VAE of tests/e2e/torch_models.py (torch.randn_like's reparameterization
exported as RandomNormalLike, stochastic depth from torch.bernoulli and
torch.rand_like exported as RandomUniformLike) exported by PyTorch in
training mode, compiled by dtcc (dgraph.random, counter-based draws of
(seed, step, element)). Checks: one device trains it (the mean loss of the
last 5 of 40 AdamW steps well below the first 5's); a rerun gives the same
losses bit for bit (the draws depend on the step alone); data parallelism
(dp=2, mpirun) splits the normal draw over the batch and gives one
device's losses within --mesh-rtol, which only holds when every rank draws
its own rows of the single-device tensor (the partitioner's offsets: the
IR of a rank is checked for them); and the same model with RandomNormalLike
replaced by a constant trains to a different loss (the draws matter).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common  # noqa: E402
import torch_models  # noqa: E402

STEPS, BATCH = 40, 16
FLAGS = ["--train", "--optimizer", "adamw", "--lr", "1e-2", "--warmup", "3",
         "--schedule", "cosine", "--grad-clip", "5.0"]


def train(dtcc, onnx_path, batches, exe, ranks=1, extra=()):
    """Compiles and trains: the losses of the STEPS steps."""
    p = subprocess.run([dtcc, "compile", onnx_path, "-o", exe] + FLAGS + list(extra),
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"dtcc compile exited {p.returncode}:\n{p.stderr[-3000:]}")
    dump = exe + ".dump"
    r = e2e_common.launch(exe, ranks, ["--batches", batches, "--steps", str(STEPS),
                                       "--log-every", str(STEPS), "--dump-outputs", dump])
    if r.returncode != 0:
        raise RuntimeError(f"{os.path.basename(exe)} on {ranks} rank(s) exited "
                           f"{r.returncode}:\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    return e2e_common.step_losses(dump, STEPS)


def without_noise(src, dst):
    """The model with its RandomNormalLike replaced by zeros (z = mu)."""
    m = onnx.load(src)
    for n in m.graph.node:
        if n.op_type == "RandomNormalLike":
            x = n.input[0]
            n.op_type = "Sub"
            del n.attribute[:]
            n.input[:] = [x, x]
    onnx.save(m, dst)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--mesh-rtol", type=float, default=1e-6,
                    help="loss difference allowed between dp=2 and one device")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    dtcc = os.path.abspath(args.dtcc)
    check = e2e_common.Checks()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="dtcc-random.")
    started = time.time()
    try:
        model = torch_models.build("vae")
        onnx_path = os.path.join(work, "vae.onnx")
        torch_models.export("vae", model, BATCH, onnx_path)
        ops = sorted({n.op_type for n in onnx.load(onnx_path).graph.node
                      if n.op_type.startswith("Random") or n.op_type == "Bernoulli"})
        check(ops == ["RandomNormalLike", "RandomUniformLike"],
              f"the VAE's export draws with {', '.join(ops)}")
        rng = np.random.default_rng(1)
        batches = e2e_common.write_batches(
            [torch_models.example_inputs("vae", model, BATCH, rng) for _ in range(STEPS)],
            os.path.join(work, "batches"))

        one = train(dtcc, onnx_path, batches, os.path.join(work, "one"))
        first, last = float(np.mean(one[:5])), float(np.mean(one[-5:]))
        print("losses:", " ".join(f"{v:.4f}" for v in one))
        check(last < 0.6 * first,
              f"one device trains the VAE: mean loss of the first 5 steps {first:.4f}, "
              f"of the last 5 {last:.4f} (below 0.6x)")
        again = train(dtcc, onnx_path, batches, os.path.join(work, "again"))
        check(np.array_equal(one, again), "a second run draws the same values: "
              "identical losses")

        quiet = os.path.join(work, "quiet.onnx")
        without_noise(onnx_path, quiet)
        calm = train(dtcc, quiet, batches, os.path.join(work, "calm"))
        diff, _ = e2e_common.relative_error(calm, one)
        check(diff > 1e-3, f"the draws reach the loss: without RandomNormalLike the "
              f"losses differ by up to {diff:.2e} relative")

        ir = subprocess.run([dtcc, "compile", onnx_path, "--compile-to", "shard",
                             "-o", "-", "--mesh", "dp=2"] + FLAGS,
                            capture_output=True, text=True)
        # The reparameterization's draw feeds the batch-split activations
        # directly: each rank draws its rows. (The stochastic-depth masks
        # reach them through constants and casts: drawn whole and sliced,
        # the same values.)
        blocks = re.findall(r"dgraph\.random %\S+, %\S+ \{distribution = \"normal\", "
                            r"global_shape = array<i64: (\d+), (\d+)>.*-> tensor<(\d+)x",
                            ir.stdout)
        check(ir.returncode == 0 and blocks == [(str(BATCH), "8", str(BATCH // 2))],
              f"on dp=2 each rank draws its {BATCH // 2} rows of the {BATCH}-row "
              f"normal draw (global_shape and offsets): found {blocks}")
        dp = train(dtcc, onnx_path, batches, os.path.join(work, "dp2"), ranks=2,
                   extra=["--mesh", "dp=2"])
        err, at = e2e_common.relative_error(dp, one)
        check(err <= args.mesh_rtol,
              f"dp=2 (mpirun, 2 ranks) gives one device's losses within "
              f"{args.mesh_rtol:g} (worst {err:.2e} at step {at})")
    except RuntimeError as e:
        check(False, str(e))
    print(f"{time.time() - started:.1f} s")
    return e2e_common.finish(work, args.keep, check.failures)


if __name__ == "__main__":
    sys.exit(main())
