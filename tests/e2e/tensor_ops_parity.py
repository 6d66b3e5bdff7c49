#!/usr/bin/python3
"""Trains a model of vision/recsys tensor ops in PyTorch and, compiled by dtcc.

The model (Linear layers around F.interpolate nearest and bilinear, F.pad
reflect and replicate, torch.einsum, torch.topk, torch.gather and
scatter_add along a dimension) is exported by PyTorch 1.13 for training at
opset 17 and trained 20 AdamW steps by `dtcc compile --train` and by
PyTorch on the same batches (indices included). Checks the loss of every
step within --loss-rtol relative and every parameter's gradient after the
first step within --grad-rtol of its largest magnitude. Then trains the
same program compiled for each of --meshes (data and tensor parallel on two
ranks by default, under mpirun) and checks its losses against PyTorch's
likewise: the sharding rules of the new ops split the batch and keep the
resampled and indexed dimensions whole. Exits non-zero on any difference.
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
from e2e_common import MPI_ENV  # noqa: E402
from torch_parity import lr_at, read_pb, write_pb  # noqa: E402


class TensorOpsNet(torch.nn.Module):
    """x [b, c, s, s] -> features of resampled, padded, mixed maps -> classes."""

    def __init__(self, channels=4, size=6, picks=5, top=8, classes=5):
        super().__init__()
        self.top = top
        self.inp = torch.nn.Linear(size, size)
        self.mix = torch.nn.Parameter(torch.randn(channels, channels) * 0.5)
        self.head = torch.nn.Linear(channels * (top + picks + 100), classes)

    def forward(self, x, idx, labels):
        h = self.inp(x)
        h = F.interpolate(h, scale_factor=2.0, mode="nearest")      # 12 x 12
        h = F.pad(h, (1, 2, 2, 1), mode="reflect")                   # 15 x 15
        h = torch.tanh(h)
        h = F.interpolate(h, size=(8, 8), mode="bilinear",
                          align_corners=False)                       # 8 x 8
        h = F.pad(h, (1, 1, 1, 1), mode="replicate")                 # 10 x 10
        h = torch.einsum("bchw,cd->bdhw", h, self.mix)
        f = h.flatten(2)                                             # [b, c, 100]
        v, _ = torch.topk(f, k=self.top, dim=2)
        g = torch.gather(f, 2, idx)
        s = torch.zeros_like(f).scatter_add(2, idx, g * g)
        feat = torch.cat([v.flatten(1), g.flatten(1), (f + s).flatten(1)], dim=1)
        return F.cross_entropy(self.head(feat), labels)


# Labels from a fixed linear teacher, so that training has something to
# learn and the loss goes down.
TEACHER = np.random.default_rng(7).standard_normal((4 * 6 * 6, 5))


def batch_of(rng, batch, channels=4, size=6, picks=5):
    x = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
    return {
        "x": x,
        "idx": rng.integers(0, 100, (batch, channels, picks)).astype(np.int64),
        "labels": np.argmax(x.reshape(batch, -1) @ TEACHER, axis=1).astype(np.int64),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--loss-rtol", type=float, default=1e-4)
    ap.add_argument("--grad-rtol", type=float, default=1e-4)
    ap.add_argument("--meshes", default="dp=2;tp=2",
                    help="';'-separated --mesh values to train on with mpirun "
                         "('' for none)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TensorOpsNet()
    work = tempfile.mkdtemp(prefix="dtcc-tensor-ops.")
    try:
        onnx_path = os.path.join(work, "model.onnx")
        sample = batch_of(np.random.default_rng(0), args.batch)
        names = list(sample)
        torch.onnx.export(model, tuple(torch.from_numpy(sample[n]) for n in names),
                          onnx_path, input_names=names, output_names=["loss"],
                          opset_version=17, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        rng = np.random.default_rng(1)
        batches = []
        for step in range(args.steps):
            batch = batch_of(rng, args.batch)
            d = os.path.join(work, "batches", f"{step:04d}")
            os.makedirs(d)
            for n in names:
                write_pb(os.path.join(d, n + ".pb"), n, batch[n])
            batches.append(batch)

        lr, warmup, wd, clip = 1e-2, 5, 0.1, 1.0
        flags = ["--train", "--optimizer", "adamw", "--lr", str(lr),
                 "--beta1", "0.9", "--beta2", "0.95", "--weight-decay", str(wd),
                 "--grad-clip", str(clip), "--warmup", str(warmup),
                 "--schedule", "cosine"]
        exe = os.path.join(work, "train")
        subprocess.run([args.dtcc, "compile", onnx_path, "-o", exe,
                        "--export-gradients"] + flags, check=True)
        out = os.path.join(work, "out")
        data = ["--batches", os.path.join(work, "batches"), "--steps",
                str(args.steps), "--log-every", "5"]
        subprocess.run([exe] + data + ["--dump-outputs", out], check=True)
        # The same training on meshes of two ranks.
        mesh_outs = {}
        for mesh in filter(None, args.meshes.split(";")):
            ranks = 1
            for axis in mesh.split(","):
                ranks *= int(axis.split("=")[1])
            mesh_exe = os.path.join(work, "train-" + mesh.replace(",", "_"))
            subprocess.run([args.dtcc, "compile", onnx_path, "-o", mesh_exe,
                            "--mesh", mesh] + flags, check=True)
            mesh_outs[mesh] = mesh_exe + ".out"
            subprocess.run(["mpirun", "--oversubscribe", "-np", str(ranks),
                            mesh_exe] + data + ["--dump-outputs", mesh_outs[mesh]],
                           env=dict(os.environ, **MPI_ENV), check=True,
                           timeout=240)

        params = dict(model.named_parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95),
                                eps=1e-8, weight_decay=wd)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: lr_at(s, 1.0, warmup, args.steps))
        worst_loss, losses = 0.0, []
        for step, batch in enumerate(batches, 1):
            opt.zero_grad()
            loss = model(*(torch.from_numpy(batch[n]) for n in names))
            loss.backward()
            step_dir = os.path.join(out, f"step_{step}")
            theirs = float(read_pb(os.path.join(step_dir, "loss.pb")))
            ours = float(loss)
            losses.append(ours)
            rel = abs(theirs - ours) / max(abs(ours), 1e-12)
            worst_loss = max(worst_loss, rel)
            line = f"step {step:2d}  pytorch {ours:.6f}  dtcc {theirs:.6f}"
            for mesh, mesh_out in mesh_outs.items():
                loss_m = float(read_pb(os.path.join(mesh_out, f"step_{step}",
                                                    "loss.pb")))
                rel_m = abs(loss_m - ours) / max(abs(ours), 1e-12)
                line += f"  {mesh} {loss_m:.6f}"
                worst_loss = max(worst_loss, rel_m)
                if rel_m > args.loss_rtol:
                    print(line)
                    print(f"error: step {step}: the loss on mesh {mesh} differs "
                          f"by {rel_m:.2e} relative")
                    return 1
            print(line + f"  rel {rel:.2e}")
            if rel > args.loss_rtol:
                print(f"error: step {step}: loss differs by {rel:.2e} relative")
                return 1
            if step == 1:
                worst = ("", 0.0)
                for name, p in params.items():
                    path = os.path.join(step_dir, "grad_" + name.replace("/", "_") + ".pb")
                    if not os.path.exists(path):
                        print(f"error: dtcc wrote no gradient for '{name}' ({path})")
                        return 1
                    g = read_pb(path)
                    ref = p.grad.numpy()
                    err = e2e_common.as_error(
                        np.abs(g - ref).max() / max(np.abs(ref).max(), 1e-30))
                    if err > worst[1]:
                        worst = (name, err)
                    if err > args.grad_rtol:
                        print(f"error: gradient of '{name}' differs by {err:.2e} "
                              f"of its largest magnitude")
                        return 1
                print(f"step  1 gradients: {len(params)} parameters, worst "
                      f"'{worst[0]}' at {worst[1]:.2e} of its largest magnitude")
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            sched.step()
        # Later losses depend on every earlier update only if training moves.
        first, last = np.mean(losses[:5]), np.mean(losses[-5:])
        if not last < first:
            print(f"error: the loss did not go down (mean of the first 5 steps "
                  f"{first:.4f}, of the last 5 {last:.4f})")
            return 1
        meshes = "".join(f", on {m}" for m in mesh_outs)
        print(f"tensor ops: {args.steps} AdamW steps on one device{meshes} "
              f"agree with PyTorch "
              f"(worst loss difference {worst_loss:.2e} relative; mean loss of "
              f"the first 5 steps {first:.4f}, of the last 5 {last:.4f})")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
