#!/usr/bin/python3
"""Trains a model in PyTorch and, compiled by dtcc, on the same batches.

One model of tests/e2e/torch_models.py per run (--model): MLP, GPT,
Llama, MLP-Mixer, and the vision and audio models a PyTorch user writes
from torch.nn modules: a ViT (Conv2d patch embedding), a ResNet
(BatchNorm2d in training mode, MaxPool, GlobalAveragePool), a U-Net
(ConvTranspose2d, AveragePool, GroupNorm exported as InstanceNormalization
+ Reshape, skip concatenations), a 1-D convolutional audio classifier and
a recurrent language model (ONNX LSTM, GRU and RNN nodes), a
prototypical network (weight_norm, F.normalize, torch.cdist), a
DLRM-style recommender (nn.EmbeddingBag, exported as ONNX Loops) and a
normalizing flow (torch.det, ONNX Det), a masked language model whose
loss reads the masked positions by boolean indexing (ONNX NonZero) and an
index_add through torch.nonzero's rows (ScatterElements); and
architectures the compiler was not written against (DenseNet, an
EfficientNet block, ConvNeXt, nn.Transformer, WaveNet, a graph
convolution, hand-written losses, PixelShuffle super-resolution,
Conv-TasNet, a pointer network, VoxelMorph, a box head; a Conformer block,
PointNet, T5's relative position bias, a top-2 mixture of experts,
StyleGAN2's modulated convolution, capsules with dynamic routing, causal
linear attention).
PyTorch 1.13 exports each in training mode at opset 17; dtcc compiles the
export, so both start from the same weights, and both use AdamW with
weight decay, global-norm clipping and warmup + cosine decay.

Checks, in fp32: the loss of every step within --loss-rtol relative of
PyTorch's; after the first step every parameter's gradient within
--grad-rtol of the tensor's largest magnitude (or float32's epsilon of the
step's largest gradient, where a gradient is rounding noise); for the models whose
batches are learnable, the loss falls. Then the same steps under each
plan of --plans and --mesh (with --zero, --layout-search), on its ranks
started by mpirun (oversubscribed): every loss within --loss-rtol of
PyTorch's and within --mesh-rtol of the single-device run's; under a tp
plan some trained variable is really split; `--plan auto` reports the plan
it chose. Prints a table of the plans; exits non-zero on any failure.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common  # noqa: E402
import torch_models  # noqa: E402
# conv_checks.py and tensor_ops_parity.py import these from here.
from e2e_common import lr_at, read_pb, write_pb  # noqa: E402,F401


class Settings:
    """A model's batch size and AdamW recipe, and whether its batches are
    learnable (the loss must fall over the run)."""

    def __init__(self, batch=4, lr=1e-3, eps=1e-8, learns=False):
        self.batch, self.lr, self.eps, self.learns = batch, lr, eps, learns


# Adam's epsilon is 1e-6 for the convolutional models (as in
# parallel_checks.py and norm_pool_parity.py): parameters whose gradient is
# zero in exact arithmetic (the attention key bias; channel means a norm
# removes) get rounding noise that Adam with 1e-8 turns into steps of about
# lr whose sign follows summation order. These models have ReLUs and max
# pools: a step where an input of one lands within rounding of its kink
# routes a gradient differently in any two float32 implementations
# (PyTorch's own float32 and float64 gradients then differ by as much as
# 10%), after which the runs' losses part by 1e-4 and more. Their batches
# (seed 1) have no such step; a failure that starts at one step with
# gradients far apart is such a kink.
SETTINGS = {
    "mlp": Settings(), "gpt": Settings(), "llama": Settings(), "mixer": Settings(),
    "vit": Settings(batch=8, lr=1e-3, eps=1e-6, learns=True),
    "resnet": Settings(batch=8, lr=2e-3, eps=1e-6, learns=True),
    "mobilenet": Settings(batch=8, lr=2e-3, eps=1e-6, learns=True),
    "unet": Settings(batch=4, lr=2e-3, eps=1e-6, learns=True),
    "audio": Settings(batch=8, lr=2e-3, eps=1e-6, learns=True),
    "swin": Settings(batch=8, lr=2e-3, eps=1e-6),
    "padded-text": Settings(batch=8, lr=1e-3, eps=1e-6),
    "rnn-lm": Settings(batch=8, lr=1e-3, eps=1e-6),
    "proto": Settings(batch=16, lr=1e-2, eps=1e-6, learns=True),
    "qat": Settings(batch=8, lr=2e-3, eps=1e-6, learns=True),
    "spectrogram": Settings(batch=8, lr=5e-3, eps=1e-6, learns=True),
    "recommender": Settings(batch=16, lr=1e-2, eps=1e-6, learns=True),
    "flow": Settings(batch=16, lr=5e-3, eps=1e-6, learns=True),
    "masked-lm": Settings(batch=8, lr=1e-2, eps=1e-6, learns=True),
    "index-add": Settings(batch=16, lr=5e-2, eps=1e-6, learns=True),
    "densenet": Settings(batch=8, lr=2e-3, eps=1e-6),
    "effnet": Settings(batch=8, lr=2e-3, eps=1e-6),
    "convnext": Settings(batch=8, lr=2e-3, eps=1e-6, learns=True),
    "seq2seq": Settings(batch=8, lr=1e-3, eps=1e-6),
    "wavenet": Settings(batch=8, lr=2e-3, eps=1e-6),
    "gcn": Settings(batch=8, lr=1e-2, eps=1e-6),
    "losses": Settings(batch=8, lr=1e-2, eps=1e-6),
    "superres": Settings(batch=8, lr=2e-3, eps=1e-6, learns=True),
    "tasnet": Settings(batch=8, lr=2e-3, eps=1e-6, learns=True),
    "pointer": Settings(batch=8, lr=1e-2, eps=1e-6),
    "registration": Settings(batch=4, lr=2e-3, eps=1e-6, learns=True),
    "roi-head": Settings(batch=4, lr=5e-3, eps=1e-6),
    "conformer": Settings(batch=8, lr=5e-3, eps=1e-6, learns=True),
    "pointnet": Settings(batch=8, lr=5e-3, eps=1e-6, learns=True),
    "t5-bias": Settings(batch=8, lr=2e-3, eps=1e-6),
    "moe": Settings(batch=16, lr=1e-2, eps=1e-6, learns=True),
    "modconv": Settings(batch=4, lr=2e-3, eps=1e-6),
    "capsule": Settings(batch=16, lr=1e-2, eps=1e-6, learns=True),
    "linear-attention": Settings(batch=8, lr=2e-3, eps=1e-6),
}

# --plans: name -> (label, ranks, dtcc flags).
PLANS = {
    "dp2-zero3": ("dp=2 zero=3", 2, ["--mesh", "dp=2", "--zero", "3"]),
    "tp2": ("tp=2", 2, ["--mesh", "tp=2"]),
    "dp2-tp2": ("dp=2 tp=2", 4, ["--mesh", "dp=2,tp=2"]),
    "pp2": ("pp=2", 2, ["--mesh", "pp=2"]),
    # Context parallelism: each sequence split over cp (causal attention).
    "cp2": ("cp=2", 2, ["--mesh", "cp=2"]),
    "dp2-cp2": ("dp=2 cp=2", 4, ["--mesh", "dp=2,cp=2"]),
    "auto": ("plan auto", 2, ["--plan", "auto", "--ranks", "2"]),
    # Fused regions (generated kernels, row regions) on one device.
    "fused": ("--fuse", 1, ["--fuse"]),
}

WARMUP, WEIGHT_DECAY, CLIP, BETAS = 5, 0.1, 1.0, (0.9, 0.95)


def recipe_flags(s):
    return ["--train", "--optimizer", "adamw", "--lr", str(s.lr),
            "--beta1", str(BETAS[0]), "--beta2", str(BETAS[1]), "--adam-eps", str(s.eps),
            "--weight-decay", str(WEIGHT_DECAY), "--grad-clip", str(CLIP),
            "--warmup", str(WARMUP), "--schedule", "cosine"]


def train_dtcc(dtcc, onnx_path, batches, steps, flags, exe, ranks=1):
    """Compiles `onnx_path` with `flags` into `exe` and trains `steps` steps
    of `batches` on `ranks` ranks: (losses, the dump directory, compile's
    stderr), or raises RuntimeError with what failed."""
    p = subprocess.run([dtcc, "compile", onnx_path, "-o", exe] + flags,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"dtcc compile exited {p.returncode}:\n{p.stderr[-3000:]}")
    dump = exe + ".dump"
    r = e2e_common.launch(exe, ranks, ["--batches", batches, "--steps", str(steps),
                                       "--log-every", str(steps), "--dump-outputs", dump])
    if r.returncode != 0:
        raise RuntimeError(f"{os.path.basename(exe)} on {ranks} rank(s) exited "
                           f"{r.returncode}:\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    return e2e_common.step_losses(dump, steps), dump, p.stderr


def train_torch(model, names, batches, s, steps, dtype):
    """Trains `model` in PyTorch (in `dtype`) on `batches`: (losses, step
    1's gradients by parameter name, before clipping)."""
    if dtype == torch.float64:
        model = model.double()

    def tensor(a):
        t = torch.from_numpy(a)
        return t.to(dtype) if t.is_floating_point() else t

    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=BETAS, eps=s.eps,
                            weight_decay=WEIGHT_DECAY)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: lr_at(k, 1.0, WARMUP, steps))
    model.train()
    losses, grads = [], {}
    for step, batch in enumerate(batches, 1):
        opt.zero_grad()
        loss = model(*(tensor(batch[n]) for n in names))
        loss.backward()
        losses.append(float(loss))
        if step == 1:
            # A parameter without a gradient path to the loss has none.
            grads = {n: p.grad.double().numpy().copy() for n, p in model.named_parameters()
                     if p.grad is not None}
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        sched.step()
    return np.array(losses), grads


# A gradient that is zero in exact arithmetic (a BatchNorm's shift whose
# output reaches only linear layers and another BatchNorm, which removes
# it: MobileNet's linear bottlenecks) holds rounding noise in either run.
# A tensor's gradient may differ by --grad-rtol of its largest magnitude,
# or by float32's epsilon of the step's largest gradient if that is more
# (its terms are summed at that scale).
EPS32 = float(np.finfo(np.float32).eps)


def gradient_errors(dump, grads, rtol):
    """Step 1's gradients from a dtcc run with --export-gradients against
    `grads`: (worst name, worst error over the allowed one, that error
    of the tensor's largest magnitude, names dtcc wrote no gradient for)."""
    worst, missing = ("", 0.0, 0.0), []
    floor = EPS32 * max(float(np.abs(g).max()) for g in grads.values())
    for name, ref in grads.items():
        path = os.path.join(dump, "step_1", "grad_" + name.replace("/", "_") + ".pb")
        if not os.path.exists(path):
            missing.append(name)
            continue
        diff = float(np.abs(read_pb(path) - ref).max())
        largest = max(float(np.abs(ref).max()), 1e-30)
        err = e2e_common.as_error(diff / max(rtol * largest, floor, 1e-30))
        if err > worst[1]:
            worst = (name, err, diff / largest)
    return worst[0], worst[1], worst[2], missing


def split_variables(dtcc, onnx_path, flags, ir):
    """Trained variables whose per-rank type is smaller than the model's
    under `flags` (from the sharded IR): [(name, per-rank type)]."""
    e2e_common.run([dtcc, "compile", onnx_path, "--compile-to=shard", "-o", ir] + flags)
    out = []
    for line in open(ir):
        m = re.match(r'\s*dgraph\.variable @"?([\w.]+)"? : (tensor<[^>]+>) = '
                     r'\((tensor<[^>]+>)\)', line)
        if m and "trainable" in line and m.group(2) != m.group(3):
            out.append((m.group(1), m.group(2)))
    return out


def ranks_of(mesh):
    ranks = 1
    for entry in mesh.split(","):
        ranks *= int(entry.split("=")[1])
    return ranks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--model", choices=sorted(SETTINGS), required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, help="the model's batch size (default: its own)")
    ap.add_argument("--loss-rtol", type=float, default=1e-4)
    ap.add_argument("--grad-rtol", type=float, default=1e-4)
    ap.add_argument("--reference-dtype", choices=["float32", "float64"], default="float32",
                    help="PyTorch's precision (dtcc trains in float32 either way)")
    ap.add_argument("--plans", default="",
                    help="comma-separated plans also trained: " + ", ".join(
                        f"{k} ({v[0]}, {v[1]} ranks)" for k, v in PLANS.items()))
    ap.add_argument("--mesh", default="", help="also train on this mesh, e.g. dp=2 or tp=2")
    ap.add_argument("--zero", type=int, default=0, help="ZeRO stage with --mesh")
    ap.add_argument("--layout-search", default="",
                    help="with --mesh: dtcc's --layout-search (ilp: every op's tp layout by the ILP)")
    ap.add_argument("--mesh-rtol", type=float, default=1e-5,
                    help="loss difference allowed between a plan and one device")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    plans = []
    for name in filter(None, args.plans.split(",")):
        if name not in PLANS:
            ap.error(f"--plans: unknown plan '{name}' (expected one of {', '.join(PLANS)})")
        plans.append(PLANS[name])
    if args.mesh:
        flags = ["--mesh", args.mesh, "--zero", str(args.zero)]
        if args.layout_search:
            flags += ["--layout-search", args.layout_search]
        plans.append((f"{args.mesh} zero={args.zero}" +
                      (f" {args.layout_search}" if args.layout_search else ""),
                      ranks_of(args.mesh), flags))

    dtcc = os.path.abspath(args.dtcc)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    s = SETTINGS[args.model]
    if args.batch:
        s.batch = args.batch
    model = torch_models.build(args.model)
    check = e2e_common.Checks()
    started = time.time()
    work = tempfile.mkdtemp(prefix=f"dtcc-parity-{args.model}.")
    rows = []
    try:
        onnx_path = os.path.join(work, "model.onnx")
        names = torch_models.export(args.model, model, s.batch, onnx_path)
        rng = np.random.default_rng(1)
        batches = [torch_models.example_inputs(args.model, model, s.batch, rng)
                   for _ in range(args.steps)]
        root = e2e_common.write_batches(batches, os.path.join(work, "batches"))
        params = sum(p.numel() for p in model.parameters())
        print(f"{args.model}: {params:,} parameters, batch {s.batch}", flush=True)

        # One device against PyTorch.
        flags = recipe_flags(s)
        frozen = torch_models.frozen_buffers(model)
        if frozen:
            flags += ["--frozen", ",".join(frozen)]
        t0 = time.time()
        try:
            single, dump, _ = train_dtcc(dtcc, onnx_path, root, args.steps,
                                         flags + ["--export-gradients"],
                                         os.path.join(work, "one"))
        except RuntimeError as e:
            check(False, f"{args.model} on one device: {e}")
            return 1
        one_seconds = time.time() - t0
        dtype = torch.float64 if args.reference_dtype == "float64" else torch.float32
        theirs, grads = train_torch(model, names, batches, s, args.steps, dtype)
        for step in range(1, args.steps + 1):
            print(f"step {step:2d}  pytorch {theirs[step - 1]:.6f}  dtcc "
                  f"{single[step - 1]:.6f}  rel "
                  f"{abs(single[step - 1] - theirs[step - 1]) / abs(theirs[step - 1]):.2e}")
        err, at = e2e_common.relative_error(single, theirs)
        check(err <= args.loss_rtol,
              f"{args.model}: {args.steps} AdamW steps, every loss within "
              f"{args.loss_rtol:g} of PyTorch's (worst {err:.2e} at step {at})")
        name, ratio, gerr, missing = gradient_errors(dump, grads, args.grad_rtol)
        check(not missing, f"{args.model}: dtcc wrote step 1's gradient of every "
              f"parameter (missing: {', '.join(missing) or 'none'})")
        check(ratio <= 1.0,
              f"{args.model}: step 1 gradients of {len(grads)} parameters within "
              f"{args.grad_rtol:g} of each tensor's largest magnitude or float32's "
              f"epsilon of the largest gradient (worst '{name}' {gerr:.2e}, "
              f"{ratio:.2f} of its tolerance)")
        if s.learns:
            first, last = np.mean(theirs[:5]), np.mean(theirs[-5:])
            check(last < first, f"{args.model}: training lowers the loss (mean of the "
                  f"first 5 steps {first:.4f}, of the last 5 {last:.4f})")
        rows.append(("1 device", 1, 0.0, err, "", one_seconds))

        # Plans on ranks against one device.
        for label, ranks, plan_flags in plans:
            tag = re.sub(r"[^\w]+", "_", label)
            if "tp=" in label:
                split = split_variables(dtcc, onnx_path, flags + plan_flags,
                                        os.path.join(work, tag + ".shard.mlir"))
                check(bool(split), f"{args.model} {label}: {len(split)} trained variables "
                      "are split over tp (e.g. " +
                      ", ".join(f"{n} {t}" for n, t in split[:3]) + ")")
            t0 = time.time()
            try:
                got, _, log = train_dtcc(dtcc, onnx_path, root, args.steps,
                                         flags + plan_flags, os.path.join(work, tag), ranks)
            except RuntimeError as e:
                check(False, f"{args.model} {label}: {e}")
                rows.append((label, ranks, float("nan"), float("nan"), "failed",
                             time.time() - t0))
                continue
            chosen = ""
            if "--plan" in plan_flags:
                # "plan auto: dp=1,tp=2, zero 0: 1.2 ms per step predicted"
                chosen = [m.group(1) for m in re.finditer(
                    r"^plan auto: (\w+=\d+[^:]*, zero \d)", log, re.M)]
                check(bool(chosen), f"{args.model} {label}: the chosen plan is reported")
                chosen = chosen[-1] if chosen else "?"
            err, at = e2e_common.relative_error(got, single)
            torch_err, torch_at = e2e_common.relative_error(got, theirs)
            check(err <= args.mesh_rtol, f"{args.model} {label} on {ranks} ranks: every "
                  f"loss within {args.mesh_rtol:g} of one device (worst {err:.2e} at step "
                  f"{at})" + (f"; chose {chosen}" if chosen else ""))
            check(torch_err <= args.loss_rtol, f"{args.model} {label}: every loss within "
                  f"{args.loss_rtol:g} of PyTorch's (worst {torch_err:.2e} at step "
                  f"{torch_at})")
            rows.append((label, ranks, err, torch_err, chosen, time.time() - t0))

        print(f"\n{args.model}: {params:,} parameters, {args.steps} AdamW steps")
        print(f"{'plan':20} {'ranks':>5} {'vs 1 device':>12} {'vs PyTorch':>11} "
              f"{'seconds':>8}  chosen")
        for label, ranks, err, torch_err, chosen, seconds in rows:
            print(f"{label:20} {ranks:5d} {err:12.2e} {torch_err:11.2e} {seconds:8.1f}  "
                  f"{chosen}")
        print(f"torch_parity {args.model}: {time.time() - started:.0f} s")
    finally:
        if args.keep:
            print("work directory:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if check.failures:
        print(f"{len(check.failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
