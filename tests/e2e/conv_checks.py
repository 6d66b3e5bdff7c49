#!/usr/bin/python3
"""Convolutional models trained by dtcc against PyTorch and across plans.

Two models exported from PyTorch 1.13 in training mode (opset 17):
  cnn    Conv2d with stride and padding, a depthwise Conv2d, a 1x1 Conv2d,
         a ConvTranspose2d, a Conv1d over the rows, a Linear head
  audio  a 1-D model: strided, dilated and grouped Conv1d layers (one with
         an even kernel), Linear head
both ending in cross-entropy, ReLU between layers. Each is trained 20
AdamW steps (weight decay, global-norm clipping, warmup + cosine) in
PyTorch and, compiled by `dtcc compile --train`, on the same batches:
every step's loss must agree within --loss-rtol relative, and step 1's
gradients within --grad-rtol of each tensor's largest magnitude. Then the
cnn model runs under `--mesh dp=2 --zero 3` and `--mesh tp=2` on 2 ranks
(mpirun, oversubscribed): every step's loss within 1e-5 relative of the
single-device run, and under `--dtype bf16` (convolutions in bf16) within
2e-2 of the fp32 run. Exits non-zero on any difference.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common  # noqa: E402
from torch_parity import lr_at, read_pb, write_pb  # noqa: E402


class ConvNet(torch.nn.Module):
    """[b, 3, 16, 16] images, 10 classes."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)  # 16 -> 8
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pointwise = torch.nn.Conv2d(8, 16, 1)
        self.up = torch.nn.ConvTranspose2d(16, 4, 2, stride=2)  # 8 -> 16
        self.rows = torch.nn.Conv1d(64, 8, 3, stride=2, padding=1)  # 16 -> 8
        self.head = torch.nn.Linear(64, classes)

    def forward(self, x, labels):
        x = F.relu(self.conv(x))
        x = F.relu(self.depthwise(x))
        x = F.relu(self.pointwise(x))
        x = F.relu(self.up(x))
        b = x.shape[0]
        x = F.relu(self.rows(x.reshape(b, 64, 16)))
        return F.cross_entropy(self.head(x.reshape(b, 64)), labels)


class AudioNet(torch.nn.Module):
    """[b, 1, 64] waveforms, 5 classes."""

    def __init__(self, classes=5):
        super().__init__()
        self.c1 = torch.nn.Conv1d(1, 8, 5, stride=2, padding=2)  # 64 -> 32
        self.c2 = torch.nn.Conv1d(8, 16, 3, stride=2, padding=2, dilation=2)  # -> 16
        self.c3 = torch.nn.Conv1d(16, 16, 4, padding=2, groups=4)  # -> 17
        self.head = torch.nn.Linear(16 * 17, classes)

    def forward(self, x, labels):
        x = F.relu(self.c1(x))
        x = F.relu(self.c2(x))
        x = F.relu(self.c3(x))
        return F.cross_entropy(self.head(x.reshape(x.shape[0], -1)), labels)


MODELS = {"cnn": (ConvNet, (3, 16, 16), 10), "audio": (AudioNet, (1, 64), 5)}
STEPS = 20
BATCH = 4
LR, WARMUP, WD, CLIP = 1e-3, 5, 0.1, 1.0
TRAIN_FLAGS = ["--train", "--optimizer", "adamw", "--lr", str(LR), "--beta1", "0.9",
               "--beta2", "0.95", "--weight-decay", str(WD), "--grad-clip", str(CLIP),
               "--warmup", str(WARMUP), "--schedule", "cosine"]


def batch_of(name, rng):
    _, shape, classes = MODELS[name]
    x = rng.standard_normal((BATCH,) + shape).astype(np.float32)
    labels = rng.integers(0, classes, BATCH).astype(np.int64)
    return {"x": x, "labels": labels}


def step_losses(dump, steps=STEPS):
    return np.array([float(read_pb(os.path.join(dump, f"step_{s}", "loss.pb")))
                     for s in range(1, steps + 1)])


def parity(dtcc, name, work, check, args):
    """Trains `name` in PyTorch and in dtcc; returns (onnx path, batches dir)."""
    torch.manual_seed(0)
    model = MODELS[name][0]()
    rng = np.random.default_rng(1)
    batches = [batch_of(name, rng) for _ in range(STEPS)]
    names = ["x", "labels"]
    root = os.path.join(work, name + "-batches")
    for step, batch in enumerate(batches):
        d = os.path.join(root, f"{step:04d}")
        os.makedirs(d)
        for n in names:
            write_pb(os.path.join(d, n + ".pb"), n, batch[n])
    onnx_path = os.path.join(work, name + ".onnx")
    torch.onnx.export(model, tuple(torch.from_numpy(batches[0][n]) for n in names),
                      onnx_path, input_names=names, output_names=["loss"],
                      opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    exe = os.path.join(work, name)
    e2e_common.run([dtcc, "compile", onnx_path, "-o", exe, "--export-gradients"] +
                   TRAIN_FLAGS)
    dump = os.path.join(work, name + ".dump")
    e2e_common.run([exe, "--batches", root, "--steps", str(STEPS), "--log-every", "5",
                    "--dump-outputs", dump])

    params = dict(model.named_parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=WD)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(s, 1.0, WARMUP, STEPS))
    ours = step_losses(dump)
    theirs = []
    worst_grad = ("", 0.0)
    for step, batch in enumerate(batches, 1):
        opt.zero_grad()
        loss = model(*(torch.from_numpy(batch[n]) for n in names))
        loss.backward()
        theirs.append(float(loss))
        if step == 1:
            for pname, p in params.items():
                path = os.path.join(dump, "step_1", "grad_" + pname.replace("/", "_") + ".pb")
                if not os.path.exists(path):
                    check(False, f"{name}: dtcc wrote no gradient for '{pname}'")
                    continue
                ref = p.grad.numpy()
                err = e2e_common.as_error(
                    np.abs(read_pb(path) - ref).max() / max(np.abs(ref).max(), 1e-30))
                if err > worst_grad[1]:
                    worst_grad = (pname, err)
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        sched.step()
    theirs = np.array(theirs)
    rel = np.abs(ours - theirs) / np.abs(theirs)
    for step in (1, 5, 10, 15, 20):
        print(f"  {name} step {step:2d}  pytorch {theirs[step - 1]:.6f}  "
              f"dtcc {ours[step - 1]:.6f}  rel {rel[step - 1]:.2e}")
    check(rel.max() <= args.loss_rtol,
          f"{name}: {STEPS} AdamW steps, every loss within {args.loss_rtol:g} of "
          f"PyTorch's (worst {rel.max():.2e} at step {int(rel.argmax()) + 1})")
    check(worst_grad[1] <= args.grad_rtol,
          f"{name}: step 1 gradients of {len(params)} parameters within "
          f"{args.grad_rtol:g} of each tensor's largest magnitude (worst "
          f"'{worst_grad[0]}' at {worst_grad[1]:.2e})")
    return onnx_path, root, ours


def parallel(dtcc, name, onnx_path, batches, single, work, check):
    """The single-device losses again under dp=2 with ZeRO-3 and under tp=2."""
    for label, flags in (("dp=2 zero=3", ["--mesh", "dp=2", "--zero", "3"]),
                         ("tp=2", ["--mesh", "tp=2"])):
        exe = os.path.join(work, f"{name}-{label.replace(' ', '_').replace('=', '')}")
        p = subprocess.run([dtcc, "compile", onnx_path, "-o", exe] + TRAIN_FLAGS + flags,
                           capture_output=True, text=True)
        if p.returncode != 0:
            check(False, f"{name} {label}: compile failed\n{p.stderr[-2000:]}")
            continue
        if label == "tp=2":
            # The channels really are split: the 3x3 convolution by output
            # channels, the depthwise one by groups.
            ir = exe + ".shard.mlir"
            e2e_common.run([dtcc, "compile", onnx_path, "--compile-to=shard", "-o", ir] +
                           TRAIN_FLAGS + flags)
            text = open(ir).read()
            split = ["@conv.weight : tensor<4x3x3x3xf32>",
                     "@depthwise.weight : tensor<4x1x3x3xf32>"]
            check(all(s in text for s in split),
                  f"{name} {label}: per-rank filters " + ", ".join(split))
        dump = exe + ".dump"
        p = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", exe, "--batches",
                            batches, "--steps", str(STEPS), "--log-every", "10",
                            "--dump-outputs", dump],
                           capture_output=True, text=True,
                           env=dict(os.environ, **e2e_common.MPI_ENV), timeout=300)
        if p.returncode != 0:
            check(False, f"{name} {label}: mpirun exited {p.returncode}\n"
                  f"{p.stdout[-1500:]}{p.stderr[-1500:]}")
            continue
        got = step_losses(dump)
        err = float(np.max(np.abs(got - single) / np.abs(single)))
        check(err <= 1e-5, f"{name} {label} on 2 ranks: every loss within 1e-5 of "
              f"one device (worst {err:.2e})")


def mixed_precision(dtcc, name, onnx_path, batches, single, work, check):
    """--dtype bf16: the convolutions run in bf16 (fp32 master weights) and
    every loss tracks the fp32 run within 2e-2 relative."""
    exe = os.path.join(work, name + "-bf16")
    flags = TRAIN_FLAGS + ["--dtype", "bf16"]
    ir = exe + ".train.mlir"
    e2e_common.run([dtcc, "compile", onnx_path, "--compile-to=train", "-o", ir] + flags)
    step = open(ir).read().split("func.func @train_step")[-1]
    convs = [l for l in step.splitlines() if "dgraph.conv" in l]
    check(len(convs) > 0 and all("xbf16>) -> tensor<" in l for l in convs),
          f"{name} bf16: all {len(convs)} convolutions of the step compute in bf16")
    e2e_common.run([dtcc, "compile", onnx_path, "-o", exe] + flags)
    dump = exe + ".dump"
    e2e_common.run([exe, "--batches", batches, "--steps", str(STEPS), "--log-every",
                    "10", "--dump-outputs", dump])
    err = float(np.max(np.abs(step_losses(dump) - single) / np.abs(single)))
    check(err <= 2e-2, f"{name} bf16: every loss within 2e-2 of fp32 (worst {err:.2e})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--loss-rtol", type=float, default=1e-4)
    ap.add_argument("--grad-rtol", type=float, default=1e-4)
    ap.add_argument("--no-parallel", action="store_true",
                    help="skip the 2-rank runs")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="dtcc-conv-checks.")
    check = e2e_common.Checks()
    try:
        for name in MODELS:
            onnx_path, batches, losses = parity(args.dtcc, name, work, check, args)
            if name == "cnn":
                mixed_precision(args.dtcc, name, onnx_path, batches, losses, work, check)
            if name == "cnn" and not args.no_parallel:
                parallel(args.dtcc, name, onnx_path, batches, losses, work, check)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("work directory:", work)
    if check.failures:
        print(f"{len(check.failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
