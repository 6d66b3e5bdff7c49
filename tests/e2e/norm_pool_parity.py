#!/usr/bin/python3
"""A small ResNet-like vision model with batch, group and instance norm and
max/average pooling, trained by dtcc against PyTorch 1.13.

The model has no convolutions (channels are mixed by Linear layers over the
channel dimension, as 1x1 convolutions would): a learned per-channel scale,
BatchNorm2d, MaxPool2d(3, 2, 1) as in ResNet's stem, a residual block with
GroupNorm and a second BatchNorm2d, InstanceNorm2d(affine), AvgPool2d in
ceil mode, AdaptiveAvgPool2d(1) and a classifier with cross-entropy.
Exported in training mode (opset 17), compiled with `dtcc compile --train`
and trained 20 AdamW steps (weight decay, clipping, warmup + cosine) on the
same batches as PyTorch. Checks:

- every step's loss within 1e-4 relative of PyTorch's, and step 1's
  gradients within 1e-4 of each tensor's largest magnitude;
- the running means and variances after training (from a dtcc checkpoint)
  against PyTorch's buffers;
- `--mesh dp=2` and `--mesh dp=2 --zero 3` on 2 ranks (mpirun) against one
  device: synchronized batch statistics make every loss and every saved
  variable equal;
- a checkpoint saved after 10 steps holds PyTorch's running statistics
  after 10 steps, and resumed (on one device, and under dp=2) gives the
  uninterrupted run's losses and variables;
- inference (`@main`) of the trained model uses the running statistics:
  its loss equals PyTorch's in eval mode;
- an ONNX LRN node (which dtcc decomposes into an average pool over the
  channels; PyTorch exports nn.LocalResponseNorm as its own decomposition,
  not as LRN) against F.local_response_norm in float64: the output and the
  input's gradient, for an odd and an even window (ONNX's even window is
  PyTorch's mirrored over the channels).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common  # noqa: E402

STEPS = 20
BATCH = 8
CLASSES = 5
LR, WARMUP, WD, CLIP = 2e-3, 4, 0.05, 1.0
# Adam's epsilon is 1e-6 (as in parallel_checks.py): parameters that feed a
# norm through a nearly linear path (the GroupNorm bias before ReLU and
# the second BatchNorm) get gradients near zero, which Adam with epsilon
# 1e-8 turns into steps of about lr whose sign follows rounding noise.
ADAM_EPS = 1e-6
TRAIN_FLAGS = ["--train", "--optimizer", "adamw", "--lr", str(LR), "--beta1", "0.9",
               "--beta2", "0.95", "--weight-decay", str(WD), "--grad-clip", str(CLIP),
               "--warmup", str(WARMUP), "--schedule", "cosine", "--adam-eps", str(ADAM_EPS)]


class Mix(torch.nn.Module):
    """A Linear layer over the channels of [N, C, H, W] (a 1x1 convolution).

    Those that feed a batch norm have no bias, as in ResNet: batch norm
    subtracts it again, so its gradient is zero in exact arithmetic and
    rounding noise in practice, which Adam would amplify into steps whose
    sign depends on summation order (and which the running mean would
    record)."""

    def __init__(self, cin, cout, bias=True):
        super().__init__()
        self.fc = torch.nn.Linear(cin, cout, bias=bias)

    def forward(self, x):
        return self.fc(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class NormPoolNet(torch.nn.Module):
    def __init__(self, channels=4, width=8):
        super().__init__()
        self.scale = torch.nn.Parameter(1 + 0.3 * torch.randn(1, channels, 1, 1))
        self.stem = Mix(channels, width, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(width)
        self.pool1 = torch.nn.MaxPool2d(3, stride=2, padding=1)
        self.mix2 = Mix(width, width)
        self.gn = torch.nn.GroupNorm(4, width)
        self.mix3 = Mix(width, width, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(width)
        self.inorm = torch.nn.InstanceNorm2d(width, affine=True)
        self.pool2 = torch.nn.AvgPool2d(2, stride=2, padding=1, ceil_mode=True,
                                        count_include_pad=False)
        self.gap = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(width, CLASSES)

    def forward(self, x, labels):
        y = torch.relu(self.bn1(self.stem(x * self.scale)))
        y = self.pool1(y)
        r = y
        y = torch.relu(self.gn(self.mix2(y)))
        y = torch.relu(self.bn2(self.mix3(y)) + r)
        y = self.pool2(self.inorm(y))
        return F.cross_entropy(self.head(self.gap(y).flatten(1)), labels)


def lr_at(step, base, warmup, total):
    """dgraph.lr_schedule with kind=cosine, min_lr=0."""
    if step < warmup:
        return base * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1 + math.cos(math.pi * p))


def write_pb(path, name, array):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def losses(dump, steps):
    return np.array([float(read_pb(os.path.join(dump, f"step_{s}", "loss.pb")))
                     for s in steps])


def checkpoint(ckpt_dir):
    """name -> array of every variable in a checkpoint."""
    manifest = json.load(open(os.path.join(ckpt_dir, "checkpoint.json")))
    dtypes = {1: np.float32, 7: np.int64, 6: np.int32, 11: np.float64}
    out = {}
    for v in manifest["variables"]:
        dtype = dtypes[int(v.get("dtype", 1))]
        shape = [int(d) for d in v.get("shape", [])]
        data = np.fromfile(os.path.join(ckpt_dir, v["file"]), dtype=dtype)
        out[v["name"]] = data.reshape(shape)
    return out


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})), timeout=600)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"error: {' '.join(cmd)} exited {p.returncode}")
    return p.stdout + p.stderr


def mpirun(n, cmd):
    return run(["mpirun", "--oversubscribe", "-np", str(n)] + cmd, env=e2e_common.MPI_ENV)


def lrn_parity(dtcc, work, check):
    """LRN's forward and input gradient against PyTorch's in float64: x is a
    trainable initializer, loss = sum(LRN(x) * r) with r a batch input, one
    SGD step with lr 0 and --export-gradients."""
    from onnx import helper, TensorProto
    rng = np.random.default_rng(5)
    for size, alpha, beta, bias in [(3, 0.5, 0.75, 1.0), (5, 1e-4, 0.75, 1.0),
                                     (4, 2e-2, 0.6, 2.0)]:
        x = rng.standard_normal((2, 6, 3, 3)) * 2
        r = rng.standard_normal(x.shape)
        node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta,
                                bias=bias)
        graph = helper.make_graph(
            [node, helper.make_node("Mul", ["y", "r"], ["yr"]),
             helper.make_node("ReduceSum", ["yr"], ["loss"], keepdims=0)],
            "lrn", [helper.make_tensor_value_info("r", TensorProto.DOUBLE, r.shape)],
            [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
            [numpy_helper.from_array(x, "x")])
        d = os.path.join(work, f"lrn{size}")
        os.makedirs(os.path.join(d, "batches", "0000"))
        path = os.path.join(d, "lrn.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
        write_pb(os.path.join(d, "batches", "0000", "r.pb"), "r", r)
        exe = os.path.join(d, "train")
        run([dtcc, "compile", path, "-o", exe, "--train", "--optimizer", "sgd", "--lr", "0",
             "--export-gradients"])
        run([exe, "--batches", os.path.join(d, "batches"), "--steps", "1",
             "--dump-outputs", os.path.join(d, "out")])
        # ONNX keeps the attributes as float32: PyTorch gets the same values.
        alpha, beta, bias = (float(np.float32(v)) for v in (alpha, beta, bias))
        xt = torch.tensor(x, requires_grad=True)
        if size % 2:
            y = F.local_response_norm(xt, size, alpha, beta, bias)
        else:
            # An even window is c - size/2 + 1 .. c + size/2 in ONNX and
            # c - size/2 .. c + size/2 - 1 in PyTorch: mirror the channels.
            y = F.local_response_norm(xt.flip(1), size, alpha, beta, bias).flip(1)
        loss = (y * torch.tensor(r)).sum()
        loss.backward()
        got = float(read_pb(os.path.join(d, "out", "step_1", "loss.pb")))
        grad = read_pb(os.path.join(d, "out", "step_1", "grad_x.pb"))
        loss_err = abs(got - float(loss)) / abs(float(loss))
        grad_err = np.abs(grad - xt.grad.numpy()).max() / np.abs(xt.grad.numpy()).max()
        check(loss_err <= 1e-12 and grad_err <= 1e-12,
              f"LRN size {size} in float64: loss {got:.12f}, PyTorch {float(loss):.12f} "
              f"(rel {loss_err:.1e}); input gradient within {grad_err:.1e} of its "
              f"largest magnitude")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    check = e2e_common.Checks()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = NormPoolNet()
    work = tempfile.mkdtemp(prefix="dtcc-normpool.")
    try:
        rng = np.random.default_rng(3)
        names = ["x", "labels"]
        batches = []
        for step in range(STEPS):
            batch = {"x": rng.standard_normal((BATCH, 4, 8, 8)).astype(np.float32) * 2 + 0.5,
                     "labels": rng.integers(0, CLASSES, (BATCH,)).astype(np.int64)}
            d = os.path.join(work, "batches", f"{step:04d}")
            os.makedirs(d)
            for n in names:
                write_pb(os.path.join(d, n + ".pb"), n, batch[n])
            batches.append(batch)

        # Export in training mode; tracing runs the model, which moves the
        # running statistics: both sides start from the state before it.
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        onnx_path = os.path.join(work, "model.onnx")
        sample = batches[0]
        torch.onnx.export(model, tuple(torch.from_numpy(sample[n]) for n in names), onnx_path,
                          input_names=names, output_names=["loss"], opset_version=17,
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        model.load_state_dict(initial)
        m = onnx.load(onnx_path)
        for t in m.graph.initializer:
            if t.name in initial:
                t.CopyFrom(numpy_helper.from_array(initial[t.name].numpy(), t.name))
        onnx.save(m, onnx_path)
        ops = sorted({n.op_type for n in m.graph.node})
        print("exported ops: " + " ".join(ops))
        for op in ["BatchNormalization", "MaxPool", "AveragePool", "GlobalAveragePool",
                   "InstanceNormalization"]:
            check(op in ops, f"the export has {op}")

        # nn.GroupNorm(4, 8)'s export fuses back into one group norm.
        dgraph = run([args.dtcc, "compile", onnx_path, "--compile-to=dgraph", "-o", "-"])
        check("channels_per_group = 2" in dgraph,
              "the exported GroupNorm is one dgraph.group_norm after canonicalization")

        # dtcc, one device: 20 steps, gradients of step 1, a checkpoint.
        exe = os.path.join(work, "train")
        run([args.dtcc, "compile", onnx_path, "-o", exe, "--export-gradients"] + TRAIN_FLAGS)
        one = os.path.join(work, "one")
        run([exe, "--batches", os.path.join(work, "batches"), "--steps", str(STEPS),
             "--log-every", "5", "--dump-outputs", one + ".dump", "--save", one + ".ckpt"])
        dtcc_losses = losses(one + ".dump", range(1, STEPS + 1))

        # PyTorch on the same batches.
        params = dict(model.named_parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), eps=ADAM_EPS,
                                weight_decay=WD)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(s, 1.0, WARMUP, STEPS))
        model.train()
        worst_loss = 0.0
        torch_losses = []
        for step, batch in enumerate(batches, 1):
            opt.zero_grad()
            loss = model(*(torch.from_numpy(batch[n]) for n in names))
            loss.backward()
            ours, theirs = float(loss), dtcc_losses[step - 1]
            torch_losses.append(ours)
            rel = abs(theirs - ours) / max(abs(ours), 1e-12)
            worst_loss = max(worst_loss, rel)
            print(f"step {step:2d}  pytorch {ours:.6f}  dtcc {theirs:.6f}  rel {rel:.2e}")
            if step == 1:
                worst = ("", 0.0)
                for name, p in params.items():
                    path = os.path.join(one + ".dump", "step_1",
                                        "grad_" + name.replace("/", "_") + ".pb")
                    if not os.path.exists(path):
                        check(False, f"dtcc wrote a gradient for '{name}'")
                        continue
                    g, ref = read_pb(path), p.grad.numpy()
                    err = e2e_common.as_error(
                        np.abs(g - ref).max() / max(np.abs(ref).max(), 1e-30))
                    if err > worst[1]:
                        worst = (name, err)
                check(worst[1] <= 1e-4, f"step 1 gradients of {len(params)} parameters "
                      f"within 1e-4 (worst '{worst[0]}' {worst[1]:.2e})")
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            sched.step()
        check(worst_loss <= 1e-4,
              f"{STEPS} AdamW steps: losses within 1e-4 of PyTorch's "
              f"(worst {worst_loss:.2e} relative)")

        # The running statistics after training against PyTorch's buffers.
        saved = checkpoint(one + ".ckpt")
        worst = ("", 0.0)
        for name, buf in model.named_buffers():
            if "running" not in name:
                continue
            if name not in saved:
                check(False, f"the checkpoint holds '{name}'")
                continue
            ref = buf.numpy()
            err = e2e_common.as_error(
                np.abs(saved[name] - ref).max() / max(np.abs(ref).max(), 1e-30))
            if err > worst[1]:
                worst = (name, err)
        check(worst[1] <= 1e-4, f"running statistics after {STEPS} steps equal PyTorch's "
              f"buffers (worst '{worst[0]}' {worst[1]:.2e} of its largest magnitude)")
        check(not np.allclose(saved["bn1.running_var"], 1.0),
              "the running variance moved from its initial value")

        # Data parallelism: synchronized statistics, so every rank computes
        # the single-device step.
        def compare_runs(label, dump, ckpt, steps, ref_ckpt, ref_losses):
            got = losses(dump, steps)
            err = np.abs(got - ref_losses).max() / np.abs(ref_losses).max()
            check(err <= 1e-5, f"{label}: losses equal one device's (worst {err:.2e})")
            theirs, mine = checkpoint(ckpt), checkpoint(ref_ckpt)
            params = {n for n, _ in model.named_parameters()}
            worst = ("", 0.0)
            for name, ref in mine.items():
                if ref.dtype.kind != "f":
                    continue
                # A parameter that moved less than Adam's steps of about lr
                # (a bias that starts at 0) is compared at that scale.
                scale = np.abs(ref).max()
                if name in params:
                    scale = max(scale, LR * STEPS)
                e = e2e_common.as_error(np.abs(theirs[name] - ref).max() / max(scale, 1e-30))
                if e > worst[1]:
                    worst = (name, e)
            check(worst[1] <= 1e-4, f"{label}: saved variables equal one device's "
                  f"(worst '{worst[0]}' {worst[1]:.2e})")

        for label, flags in [("dp=2", ["--mesh", "dp=2"]),
                             ("dp=2 zero=3", ["--mesh", "dp=2", "--zero", "3"])]:
            tag = label.replace(" ", "_").replace("=", "")
            pexe = os.path.join(work, "train-" + tag)
            run([args.dtcc, "compile", onnx_path, "-o", pexe] + TRAIN_FLAGS + flags)
            out = os.path.join(work, tag)
            mpirun(2, [pexe, "--batches", os.path.join(work, "batches"), "--steps", str(STEPS),
                       "--dump-outputs", out + ".dump", "--save", out + ".ckpt"])
            compare_runs(label, out + ".dump", out + ".ckpt", range(1, STEPS + 1),
                         one + ".ckpt", dtcc_losses)

        # Save after 10 steps, resume for the rest: on one device, and the
        # same checkpoint under dp=2.
        half = os.path.join(work, "half")
        run([exe, "--batches", os.path.join(work, "batches"), "--steps", str(STEPS),
             "--stop-after", "10", "--save", half + ".ckpt"])
        mid = checkpoint(half + ".ckpt")
        ref10 = {}
        torch.manual_seed(0)
        replay = NormPoolNet()
        replay.load_state_dict(initial)
        ropt = torch.optim.AdamW(replay.parameters(), lr=LR, betas=(0.9, 0.95), eps=ADAM_EPS,
                                 weight_decay=WD)
        rsched = torch.optim.lr_scheduler.LambdaLR(ropt, lambda s: lr_at(s, 1.0, WARMUP, STEPS))
        for batch in batches[:10]:
            ropt.zero_grad()
            replay(*(torch.from_numpy(batch[n]) for n in names)).backward()
            torch.nn.utils.clip_grad_norm_(replay.parameters(), CLIP)
            ropt.step()
            rsched.step()
        worst = 0.0
        for name, buf in replay.named_buffers():
            if "running" in name:
                ref = buf.numpy()
                worst = max(worst, np.abs(mid[name] - ref).max() / np.abs(ref).max())
        check(worst <= 1e-4, f"the checkpoint after 10 steps holds PyTorch's running "
              f"statistics (worst {worst:.2e})")
        resumed = os.path.join(work, "resumed")
        run([exe, "--batches", os.path.join(work, "batches"), "--steps", str(STEPS),
             "--resume", half + ".ckpt", "--dump-outputs", resumed + ".dump",
             "--save", resumed + ".ckpt"])
        compare_runs("resumed after 10 steps", resumed + ".dump", resumed + ".ckpt",
                     range(11, STEPS + 1), one + ".ckpt", dtcc_losses[10:])
        pexe = os.path.join(work, "train-dp2")
        resumed2 = os.path.join(work, "resumed-dp2")
        mpirun(2, [pexe, "--batches", os.path.join(work, "batches"), "--steps", str(STEPS),
                   "--resume", half + ".ckpt", "--dump-outputs", resumed2 + ".dump",
                   "--save", resumed2 + ".ckpt"])
        compare_runs("resumed under dp=2", resumed2 + ".dump", resumed2 + ".ckpt",
                     range(11, STEPS + 1), one + ".ckpt", dtcc_losses[10:])

        # Inference (@main) normalizes with the running statistics: the
        # trained model's eval-mode output equals PyTorch's in eval mode.
        model.eval()
        with torch.no_grad():
            eval_loss = float(model(*(torch.from_numpy(batches[0][n]) for n in names)))
        infer = os.path.join(work, "infer")
        trained = os.path.join(work, "trained.onnx")
        m = onnx.load(onnx_path)
        for t in m.graph.initializer:
            if t.name in saved:
                t.CopyFrom(numpy_helper.from_array(saved[t.name], t.name))
        onnx.save(m, trained)
        run([args.dtcc, "compile", trained, "--train", "-o", infer])
        inputs = []
        for n in names:
            write_pb(os.path.join(work, n + ".pb"), n, batches[0][n])
            inputs += ["--input", f"{n}={os.path.join(work, n + '.pb')}"]
        run([infer, "--function", "main", "--output-dir", os.path.join(work, "eval")] + inputs)
        got = float(read_pb(os.path.join(work, "eval", "loss.pb")))
        rel = abs(got - eval_loss) / abs(eval_loss)
        check(rel <= 1e-4, f"inference (@main) of the trained model normalizes with the "
              f"running statistics: loss {got:.6f}, PyTorch eval mode {eval_loss:.6f} "
              f"(rel {rel:.2e})")

        lrn_parity(args.dtcc, work, check)

        if check.failures:
            print(f"{len(check.failures)} check(s) failed")
            return 1
        print("norm/pool model: PyTorch parity, data parallelism, checkpoints, LRN: all ok")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
