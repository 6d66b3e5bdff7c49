#!/usr/bin/python3
"""Trains a model in PyTorch and, compiled by dtcc, on the same batches.

Both start from the same weights (dtcc compiles PyTorch's ONNX export) and
use AdamW with weight decay, global-norm clipping and warmup + cosine decay.
Checks, in fp32: the loss of every step within --loss-rtol relative, and
after the first step every parameter's gradient within --grad-rtol of the
tensor's largest magnitude. With --mesh (and --zero), the same step is
also compiled for that mesh and run with mpirun (oversubscribed) on its
ranks: every step's loss within --loss-rtol of PyTorch's and within
--mesh-rtol of the single-device run's. Exits non-zero on any difference.
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common  # noqa: E402
import torch_models  # noqa: E402


def write_pb(path, name, array):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def lr_at(step, base, warmup, total):
    """dgraph.lr_schedule with kind=cosine, min_lr=0."""
    if step < warmup:
        return base * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1 + math.cos(math.pi * p))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--model", choices=["mlp", "gpt", "llama", "mixer"], required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--loss-rtol", type=float, default=1e-4)
    ap.add_argument("--grad-rtol", type=float, default=1e-4)
    ap.add_argument("--reference-dtype", choices=["float32", "float64"], default="float32",
                    help="PyTorch's precision (dtcc trains in float32 either way)")
    ap.add_argument("--mesh", default="", help="also train on this mesh, e.g. dp=2 or tp=2")
    ap.add_argument("--zero", type=int, default=0, help="ZeRO stage with --mesh")
    ap.add_argument("--layout-search", default="",
                    help="with --mesh: dtcc's --layout-search (ilp: every op's tp layout by the ILP)")
    ap.add_argument("--mesh-rtol", type=float, default=1e-5,
                    help="loss difference allowed between the mesh and one device")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch_models.build(args.model)
    work = tempfile.mkdtemp(prefix=f"dtcc-parity-{args.model}.")
    try:
        onnx_path = os.path.join(work, "model.onnx")
        names = torch_models.export(args.model, model, args.batch, onnx_path)
        rng = np.random.default_rng(1)
        batches = []
        for step in range(args.steps):
            batch = torch_models.example_inputs(args.model, model, args.batch, rng)
            d = os.path.join(work, "batches", f"{step:04d}")
            os.makedirs(d)
            for n in names:
                write_pb(os.path.join(d, n + ".pb"), n, batch[n])
            batches.append(batch)

        lr, warmup, wd, clip = 1e-3, 5, 0.1, 1.0
        frozen = [n for n, _ in model.named_buffers()]
        exe = os.path.join(work, "train")
        cmd = [args.dtcc, "compile", onnx_path, "--train", "-o", exe,
               "--optimizer", "adamw", "--lr", str(lr), "--beta1", "0.9",
               "--beta2", "0.95", "--weight-decay", str(wd), "--grad-clip", str(clip),
               "--warmup", str(warmup), "--schedule", "cosine", "--export-gradients"]
        if frozen:
            cmd += ["--frozen", ",".join(frozen)]
        subprocess.run(cmd, check=True)
        out = os.path.join(work, "out")
        run_args = ["--batches", os.path.join(work, "batches"),
                    "--steps", str(args.steps), "--log-every", "5"]
        subprocess.run([exe] + run_args + ["--dump-outputs", out], check=True)
        mesh_out = None
        if args.mesh:
            ranks = 1
            for entry in args.mesh.split(","):
                ranks *= int(entry.split("=")[1])
            mesh_exe = os.path.join(work, "train-mesh")
            mesh_cmd = [c for c in cmd if c != "--export-gradients"]
            mesh_cmd[mesh_cmd.index("-o") + 1] = mesh_exe
            mesh_cmd += ["--mesh", args.mesh, "--zero", str(args.zero)]
            if args.layout_search:
                mesh_cmd += ["--layout-search", args.layout_search]
            subprocess.run(mesh_cmd, check=True)
            mesh_out = os.path.join(work, "out-mesh")
            subprocess.run(["mpirun", "--oversubscribe", "-np", str(ranks), mesh_exe] +
                           run_args + ["--dump-outputs", mesh_out], check=True,
                           env=dict(os.environ, **e2e_common.MPI_ENV))

        # PyTorch, on the same batches.
        if args.reference_dtype == "float64":
            model = model.double()

        def tensor(a):
            t = torch.from_numpy(a)
            return t.double() if args.reference_dtype == "float64" and t.is_floating_point() else t

        params = dict(model.named_parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95),
                                eps=1e-8, weight_decay=wd)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: lr_at(s, 1.0, warmup, args.steps))
        worst_loss = worst_mesh = 0.0
        for step, batch in enumerate(batches, 1):
            opt.zero_grad()
            loss = model(*(tensor(batch[n]) for n in names))
            loss.backward()
            step_dir = os.path.join(out, f"step_{step}")
            theirs = float(read_pb(os.path.join(step_dir, "loss.pb")))
            ours = float(loss)
            rel = abs(theirs - ours) / max(abs(ours), 1e-12)
            worst_loss = max(worst_loss, rel)
            print(f"step {step:2d}  pytorch {ours:.6f}  dtcc {theirs:.6f}  rel {rel:.2e}")
            if rel > args.loss_rtol:
                print(f"error: step {step}: loss differs by {rel:.2e} relative")
                return 1
            if mesh_out:
                on_mesh = float(read_pb(os.path.join(mesh_out, f"step_{step}", "loss.pb")))
                rel_torch = abs(on_mesh - ours) / max(abs(ours), 1e-12)
                rel_one = abs(on_mesh - theirs) / max(abs(theirs), 1e-12)
                worst_mesh = max(worst_mesh, rel_one)
                worst_loss = max(worst_loss, rel_torch)
                print(f"         {args.mesh} zero {args.zero}: {on_mesh:.6f}  rel to "
                      f"pytorch {rel_torch:.2e}, to one device {rel_one:.2e}")
                if rel_torch > args.loss_rtol or rel_one > args.mesh_rtol:
                    print(f"error: step {step}: the {args.mesh} loss differs by "
                          f"{rel_torch:.2e} from pytorch's, {rel_one:.2e} from one device's")
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
                    err = np.abs(g - ref).max() / max(np.abs(ref).max(), 1e-30)
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
        print(f"{args.model}: {args.steps} AdamW steps agree with PyTorch "
              f"(worst loss difference {worst_loss:.2e} relative)")
        if args.mesh:
            print(f"{args.model} on {args.mesh} zero {args.zero}: worst loss "
                  f"difference to one device {worst_mesh:.2e} relative")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
