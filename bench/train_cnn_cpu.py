#!/usr/bin/python3
"""dtcc vs PyTorch eager: training step time of a small residual CNN on CPU.

A ResNet-style network without normalization (a strided 3x3 stem, residual
blocks of two 3x3 convolutions, a strided 3x3 downsampling convolution, a
depthwise 3x3 and a 1x1 convolution, global flatten, Linear head,
cross-entropy) trained with AdamW and gradient clipping: in PyTorch 1.13
eagerly, and as a dtcc executable compiled from PyTorch's ONNX export, on
the same batches and thread count. dtcc runs twice: with its default f32
convolutions (oneDNN) and with DTCC_CPU_CONV=im2col (im2col + OpenBLAS).
Step times are medians over the timed steps (dtcc: of its 10-step log
intervals).

  bench/train_cnn_cpu.py [--dtcc build/bin/dtcc] [--batch 16 --width 32 ...]
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


def build_model(args):
    import torch
    import torch.nn.functional as F

    class Block(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.a = torch.nn.Conv2d(width, width, 3, padding=1)
            self.b = torch.nn.Conv2d(width, width, 3, padding=1)

        def forward(self, x):
            return F.relu(x + self.b(F.relu(self.a(x))))

    class Net(torch.nn.Module):
        def __init__(self, width, blocks, size, classes=10):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, width, 3, stride=2, padding=1)
            self.blocks = torch.nn.ModuleList(Block(width) for _ in range(blocks))
            self.down = torch.nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
            self.depthwise = torch.nn.Conv2d(2 * width, 2 * width, 3, padding=1,
                                             groups=2 * width)
            self.pointwise = torch.nn.Conv2d(2 * width, width, 1)
            self.head = torch.nn.Linear(width * (size // 4) ** 2, classes)

        def forward(self, x, labels):
            x = F.relu(self.stem(x))
            for block in self.blocks:
                x = block(x)
            x = F.relu(self.depthwise(F.relu(self.down(x))))
            x = F.relu(self.pointwise(x))
            return F.cross_entropy(self.head(x.flatten(1)), labels)

    torch.manual_seed(0)
    return Net(args.width, args.blocks, args.size)


def batches(args, count):
    rng = np.random.default_rng(0)
    for _ in range(count):
        yield (rng.standard_normal((args.batch, 3, args.size, args.size)).astype(np.float32),
               rng.integers(0, 10, args.batch).astype(np.int64))


def torch_child(args):
    """Trains in PyTorch; prints the median ms per step."""
    import torch
    torch.set_num_threads(args.threads)
    model = build_model(args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    times = []
    for step, (x, y) in enumerate(batches(args, args.warmup + args.steps)):
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    print(f"{1e3 * statistics.median(times):.3f}")


def export_child(args):
    """Exports the model and writes the batches; prints the parameter count."""
    import torch
    from onnx import numpy_helper
    model = build_model(args)
    x, y = next(batches(args, 1))
    torch.onnx.export(model, (torch.from_numpy(x), torch.from_numpy(y)),
                      os.path.join(args.export_child, "cnn.onnx"),
                      input_names=["x", "labels"], output_names=["loss"],
                      opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
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
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
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
             ("width", "blocks", "size", "batch", "threads", "steps", "warmup")]
    torch_ms = float(subprocess.run(
        [sys.executable, __file__, "--torch-child", *sizes], capture_output=True,
        text=True, env=env, check=True).stdout.split()[0])
    results = {}
    with tempfile.TemporaryDirectory() as work:
        params = subprocess.run([sys.executable, __file__, f"--export-child={work}", *sizes],
                                capture_output=True, text=True, check=True).stdout.split()[0]
        exe = os.path.join(work, "train")
        subprocess.run([args.dtcc, "compile", os.path.join(work, "cnn.onnx"), "--train",
                        "--lr", "1e-3", "--weight-decay", "0.1", "--grad-clip", "1.0",
                        "-o", exe], check=True, capture_output=True)
        for label, extra in (("dtcc (oneDNN)", {}),
                             ("dtcc (im2col)", {"DTCC_CPU_CONV": "im2col"})):
            out = subprocess.run([exe, "--batches", os.path.join(work, "batches"),
                                  "--steps", str(args.warmup + args.steps),
                                  "--log-every", "10"],
                                 capture_output=True, text=True, env=dict(env, **extra),
                                 check=True).stdout
            intervals = [(int(m.group(1)), float(m.group(2))) for m in
                         re.finditer(r"step\s+(\d+)/\d+ .* step ([\d.]+) ms", out)]
            results[label] = statistics.median(
                ms for step, ms in intervals if step > args.warmup)
    print(f"CNN width {args.width}, {args.blocks} residual blocks, {args.size}x{args.size} "
          f"images, batch {args.batch}: {int(params):,} parameters; {args.threads} "
          f"thread(s); AdamW + clipping")
    print(f"{'':16} {'ms/step':>9} {'images/s':>9} {'vs PyTorch':>11}")
    for name, ms in [("PyTorch", torch_ms)] + list(results.items()):
        print(f"{name:16} {ms:9.2f} {args.batch * 1e3 / ms:9.0f} {ms / torch_ms:10.2f}x")


if __name__ == "__main__":
    sys.exit(main())
