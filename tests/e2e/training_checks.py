#!/usr/bin/python3
"""End-to-end checks of compiled training runs on a zoo GPT and real text.

  resume        a 20-step run stopped after step 10 and resumed logs exactly
                the losses of an uninterrupted run
  micro-batches batch 4 in one micro-batch and batch 2 in two micro-batches
                draw the same sequences and agree step by step
  recompute     --recompute full gives the same losses with a smaller peak
  learns        the loss falls on real English text
Exits non-zero on any failure.
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np

import e2e_common
from e2e_common import Checks, run, text_tokens

LOG = re.compile(r"step\s+(\d+)/\d+\s+loss (\S+).*peak ([\d.]+) (\w+)")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse(output):
    """Per-step losses (as logged) and the peak memory in bytes."""
    losses, peak = {}, 0.0
    for m in LOG.finditer(output):
        losses[int(m.group(1))] = m.group(2)
        peak = float(m.group(3)) * UNITS[m.group(4)]
    return losses, peak


def main():
    args, work = e2e_common.start(__doc__, "dtcc-training-checks.")
    check = Checks()
    failures = check.failures

    try:
        tokens = os.path.join(work, "tokens.bin")
        text_tokens(tokens)

        def zoo(batch, layers=2):
            path = os.path.join(work, f"gpt_b{batch}_l{layers}.onnx")
            run([args.dtcc, "zoo", "gpt", "--layers", str(layers), "--hidden", "64",
                 "--heads", "4", "--vocab", "256", "--seq", "32", "--batch", str(batch),
                 "--seed", "3", "-o", path])
            return path

        def compile_(model, name, *flags):
            exe = os.path.join(work, name)
            run([args.dtcc, "compile", model, "--train", "--lr", "2e-3", "--warmup", "5",
                 "--schedule", "cosine", "--grad-clip", "1.0", "-o", exe, *flags])
            return exe

        def train(exe, *flags):
            return parse(run([exe, "--data", tokens, "--log-every", "1", *flags]))

        exe = compile_(zoo(4), "train")
        full, peak = train(exe, "--steps", "20")

        ckpt = os.path.join(work, "ckpt")
        first, _ = train(exe, "--steps", "20", "--stop-after", "10", "--save", ckpt)
        second, _ = train(exe, "--steps", "20", "--resume", ckpt)
        resumed = {**first, **second}
        check(resumed == full and len(full) == 20,
              "resume: a run stopped at step 10 and resumed logs the same 20 losses")

        micro = compile_(zoo(2), "train_micro", "--micro-batches", "2")
        split, _ = train(micro, "--steps", "20")
        worst = max(abs(float(split[s]) - float(full[s])) / float(full[s]) for s in full)
        check(worst < 1e-5,
              f"micro-batches: 2 x 2 sequences match 1 x 4 (worst {worst:.1e} relative)")

        deep = zoo(4, layers=4)
        plain, plain_peak = train(compile_(deep, "train_deep"), "--steps", "10")
        recomputed, recompute_peak = train(
            compile_(deep, "train_recompute", "--recompute", "full"), "--steps", "10")
        worst = max(abs(float(recomputed[s]) - float(plain[s])) / float(plain[s])
                    for s in plain)
        check(worst < 1e-5 and recompute_peak < plain_peak,
              f"recompute: same losses (worst {worst:.1e}), peak "
              f"{plain_peak / 2**20:.2f} -> {recompute_peak / 2**20:.2f} MiB")

        long_run, _ = train(exe, "--steps", "300")
        start = np.mean([float(long_run[s]) for s in range(1, 11)])
        end = np.mean([float(long_run[s]) for s in range(291, 301)])
        check(end < start - 2.0 and end < 3.0,
              f"learns: mean loss {start:.3f} over steps 1-10 -> {end:.3f} over "
              f"steps 291-300 (ln 256 = 5.545)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
