#!/usr/bin/python3
"""dtcc vs PyTorch eager: training step time of a ResNet on CPU.

torchvision's ResNet of BasicBlocks (tests/e2e/torch_models.ResNet: 3x3
convolutions with BatchNorm2d in training mode, ReLU, the stem's MaxPool,
strided stages with 1x1 projection shortcuts, global average pooling, a
Linear head, cross-entropy), trained with AdamW (weight decay 0.1) and
global-norm clipping 1.0: in PyTorch eagerly, and as a dtcc executable
compiled from PyTorch's ONNX export (training mode, opset 17), on the same
batches and the same number of threads (torch.set_num_threads,
OMP_NUM_THREADS, OPENBLAS_NUM_THREADS). Step times are medians over the
timed steps (dtcc: of its logged intervals of 5 steps); the first
--warmup steps are not timed. Both print their first step's loss (the same
weights and batch: equal to about 1e-6; later steps part as float32 runs
of a ReLU network do, PyTorch's own float32 and float64 runs included).

  bench/train_resnet_cpu.py [--dtcc build/bin/dtcc] [--model resnet18]
                            [--batch 16] [--size 32] [--threads 1]

--model resnet18 is ResNet-18's stages (2, 2, 2, 2 blocks of 64, 128, 256,
512 channels, 11.2 M parameters) with a 3x3 stride-1 stem for small images
(as CIFAR ResNets); --model small is 1, 1, 1 blocks of 16, 32, 64 channels.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

MODELS = {
    "resnet18": dict(layers=(2, 2, 2, 2), widths=(64, 128, 256, 512), stem=3),
    "resnet10": dict(layers=(1, 1, 1, 1), widths=(64, 128, 256, 512), stem=3),
    "small": dict(layers=(1, 1, 1), widths=(16, 32, 64), stem=3),
}


def build_model(args):
    import torch
    import torch_models
    torch.manual_seed(0)
    return torch_models.ResNet(classes=10, **MODELS[args.model])


def batches(args, count):
    rng = np.random.default_rng(0)
    for _ in range(count):
        yield (rng.standard_normal((args.batch, 3, args.size, args.size)).astype(np.float32),
               rng.integers(0, 10, args.batch).astype(np.int64))


def torch_child(args):
    """Trains in PyTorch; prints the median ms per step and the first
    step's loss."""
    import torch
    torch.set_num_threads(args.threads)
    model = build_model(args)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    times, first = [], None
    for step, (x, y) in enumerate(batches(args, args.warmup + args.steps)):
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        first = float(loss) if first is None else first
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    print(f"{1e3 * statistics.median(times):.3f} {first:.6f}")


def export_child(args):
    """Exports the model and writes the batches; prints the parameter count."""
    import torch
    import torch_models
    from onnx import numpy_helper
    model = build_model(args)
    x, y = next(batches(args, 1))
    path = os.path.join(args.export_child, "resnet.onnx")
    # Training mode, opset 17, running statistics as before the tracing run.
    torch_models.export("resnet", model, args.batch, path, {"x": x, "labels": y})
    for step, (x, y) in enumerate(batches(args, args.warmup + args.steps)):
        d = os.path.join(args.export_child, "batches", f"{step:05d}")
        os.makedirs(d)
        for name, value in (("x", x), ("labels", y)):
            with open(os.path.join(d, name + ".pb"), "wb") as f:
                f.write(numpy_helper.from_array(value, name).SerializeToString())
    print(sum(p.numel() for p in model.parameters()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", default=os.path.join(HERE, "..", "build", "bin", "dtcc"))
    ap.add_argument("--model", choices=sorted(MODELS), default="resnet18")
    ap.add_argument("--size", type=int, default=32, help="image height and width")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--export-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_child:
        return torch_child(args)
    if args.export_child:
        return export_child(args)

    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(args.threads),
               OMP_NUM_THREADS=str(args.threads))
    sizes = [f"--{k}={getattr(args, k)}" for k in
             ("model", "size", "batch", "threads", "steps", "warmup")]
    torch_ms, torch_loss = map(float, subprocess.run(
        [sys.executable, __file__, "--torch-child", *sizes], capture_output=True,
        text=True, env=env, check=True).stdout.split()[:2])
    with tempfile.TemporaryDirectory() as work:
        params = subprocess.run([sys.executable, __file__, f"--export-child={work}", *sizes],
                                capture_output=True, text=True, check=True).stdout.split()[0]
        exe = os.path.join(work, "train")
        t0 = time.perf_counter()
        subprocess.run([args.dtcc, "compile", os.path.join(work, "resnet.onnx"), "--train",
                        "--optimizer", "adamw", "--lr", "1e-3", "--beta1", "0.9",
                        "--beta2", "0.999", "--adam-eps", "1e-8", "--weight-decay", "0.1",
                        "--grad-clip", "1.0", "--schedule", "constant", "--warmup", "0",
                        "-o", exe], check=True, capture_output=True)
        compile_s = time.perf_counter() - t0
        # Log intervals that start after the warmup steps.
        every = max(1, min(5, args.steps))
        out = subprocess.run([exe, "--batches", os.path.join(work, "batches"),
                              "--steps", str(args.warmup + args.steps),
                              "--log-every", str(every)],
                             capture_output=True, text=True, env=env, check=True).stdout
        logged = [(int(m.group(1)), float(m.group(2)), float(m.group(3))) for m in
                  re.finditer(r"step\s+(\d+)/\d+\s+loss ([\d.]+).* step ([\d.]+) ms", out)]
        timed = [ms for step, _, ms in logged if step - every >= args.warmup]
        dtcc_ms = statistics.median(timed)
        dtcc_loss = logged[0][1]
        peak = re.search(r"peak ([\d.]+ [KMG]iB)", out)
    print(f"ResNet '{args.model}' ({'-'.join(map(str, MODELS[args.model]['layers']))} "
          f"blocks of {'-'.join(map(str, MODELS[args.model]['widths']))} channels, "
          f"BatchNorm), {args.size}x{args.size} images, batch {args.batch}: "
          f"{int(params):,} parameters; {args.threads} thread(s); AdamW + clipping; "
          f"{args.steps} timed steps after {args.warmup}")
    print(f"{'':10} {'ms/step':>9} {'images/s':>9} {'vs PyTorch':>11} {'step 1 loss':>11}")
    for name, ms, loss in (("PyTorch", torch_ms, torch_loss), ("dtcc", dtcc_ms, dtcc_loss)):
        print(f"{name:10} {ms:9.2f} {args.batch * 1e3 / ms:9.1f} {ms / torch_ms:10.2f}x "
              f"{loss:11.5f}")
    print(f"dtcc compile {compile_s:.1f} s; planned peak {peak.group(1) if peak else '?'}")


if __name__ == "__main__":
    sys.exit(main())
