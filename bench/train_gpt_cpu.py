#!/usr/bin/python3
"""dtcc vs PyTorch eager: training step time and peak memory of a GPT on CPU.

The same GPT (tests/e2e/torch_models.py), batch, sequence length and thread
count in both: PyTorch trains it eagerly with AdamW and gradient clipping;
dtcc compiles PyTorch's ONNX export with --train (the same optimizer) and
runs the executable. Step times are medians over the timed steps (dtcc: of
its 10-step log intervals). Memory is each process's peak resident set
(VmHWM) and its growth above the process's startup (PyTorch after `import
torch`, dtcc before loading its program); dtcc also reports its planned peak.

  bench/train_gpt_cpu.py [--dtcc build/bin/dtcc] [--layers 4 --hidden 128 ...]
      [--dtype fp32|bf16] [--no-torch]

--dtype bf16 compiles dtcc's step in mixed precision (bf16 forward and
backward, fp32 master weights; PyTorch stays fp32). --no-torch times dtcc
alone.
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
UNITS = {"B": 1 / 1024, "KiB": 1, "MiB": 1024, "GiB": 1 << 20}


def vm_hwm_kib():
    """This process's peak RSS (VmHWM: unlike getrusage's maximum it does
    not inherit the peak of the process that exec'd this one)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def build_model(args):
    import torch
    import torch_models
    torch.manual_seed(0)
    return torch_models.GPT(vocab=args.vocab, seq=args.seq, hidden=args.hidden,
                            heads=args.heads, layers=args.layers)


def torch_child(args):
    """Trains in PyTorch; prints 'ms_per_step peak_kib startup_kib'."""
    import torch
    torch.set_num_threads(args.threads)
    startup = vm_hwm_kib()
    model = build_model(args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    rng = np.random.default_rng(0)
    times = []
    for step in range(args.warmup + args.steps):
        tokens = torch.from_numpy(
            rng.integers(0, args.vocab, (args.batch, args.seq + 1)).astype(np.int64))
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    print(f"{1e3 * statistics.median(times):.3f} {vm_hwm_kib()} {startup}")


def export_child(args):
    """Exports the model; prints its parameter count and buffer names."""
    import torch_models
    model = build_model(args)
    torch_models.export("gpt", model, args.batch, args.export_child)
    print(sum(p.numel() for p in model.parameters()),
          ",".join(n for n, _ in model.named_buffers()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", default=os.path.join(HERE, "..", "build", "bin", "dtcc"))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--recompute", default="none", choices=["none", "full"])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                    help="dtcc's compute type (--dtype of dtcc compile)")
    ap.add_argument("--no-torch", action="store_true", help="time dtcc only")
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
             ("layers", "hidden", "heads", "vocab", "seq", "batch", "threads", "steps",
              "warmup")]
    # Everything with torch runs in children: this process stays small.
    torch_ms = torch_kib = torch_startup = None
    if not args.no_torch:
        torch_ms, torch_kib, torch_startup = subprocess.run(
            [sys.executable, __file__, "--torch-child", *sizes], capture_output=True,
            text=True, env=env, check=True).stdout.split()

    with tempfile.TemporaryDirectory() as work:
        onnx_path = os.path.join(work, "gpt.onnx")
        params, frozen = subprocess.run(
            [sys.executable, __file__, f"--export-child={onnx_path}", *sizes],
            capture_output=True, text=True, check=True).stdout.split()
        exe = os.path.join(work, "train")
        subprocess.run([args.dtcc, "compile", onnx_path, "--train", "--lr", "1e-3",
                        "--weight-decay", "0.1", "--grad-clip", "1.0", "--frozen", frozen,
                        "--recompute", args.recompute, "--dtype", args.dtype, "-o", exe],
                       check=True, capture_output=True)
        tokens = os.path.join(work, "tokens.bin")
        np.random.default_rng(0).integers(0, args.vocab, 200_000).astype(
            np.uint16).tofile(tokens)
        out = subprocess.run([exe, "--data", tokens, "--steps",
                              str(args.warmup + args.steps), "--log-every", "10"],
                             capture_output=True, text=True, env=env, check=True).stdout
    intervals = [(int(m.group(1)), float(m.group(2))) for m in
                 re.finditer(r"step\s+(\d+)/\d+ .* step ([\d.]+) ms", out)]
    dtcc_ms = statistics.median(ms for step, ms in intervals if step > args.warmup)
    planned = re.search(r"peak memory ([\d.]+ \w+)", out).group(1)
    m = re.search(r"process peak RSS ([\d.]+) (\w+) \(([\d.]+) (\w+) before", out)
    dtcc_kib = float(m.group(1)) * UNITS[m.group(2)]
    dtcc_startup = float(m.group(3)) * UNITS[m.group(4)]

    print(f"GPT {args.layers} layers x {args.hidden} wide, {args.heads} heads, vocab "
          f"{args.vocab}, seq {args.seq}, batch {args.batch}: {int(params):,} parameters; "
          f"{args.threads} thread(s); AdamW + clipping; recompute {args.recompute}; "
          f"dtcc {args.dtype}")
    print(f"{'':10} {'ms/step':>9} {'steps/s':>8} {'tokens/s':>9} {'peak RSS':>11} "
          f"{'above startup':>14}")
    tokens_per_step = args.batch * args.seq
    rows = [("dtcc", dtcc_ms, dtcc_kib, dtcc_startup)]
    if torch_ms is not None:
        rows.insert(0, ("PyTorch", float(torch_ms), float(torch_kib),
                        float(torch_startup)))
    for name, ms, kib, start in rows:
        print(f"{name:10} {ms:9.2f} {1e3 / ms:8.1f} {tokens_per_step * 1e3 / ms:9.0f} "
              f"{kib / 1024:7.1f} MiB {(kib - start) / 1024:10.1f} MiB")
    if torch_ms is not None:
        print(f"dtcc / PyTorch step time: {dtcc_ms / float(torch_ms):.2f}x")
    print(f"dtcc's planned peak (its arenas): {planned}")


if __name__ == "__main__":
    sys.exit(main())
