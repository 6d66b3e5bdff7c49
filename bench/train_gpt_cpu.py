#!/usr/bin/python3
"""Training step of a GPT on CPU: dtcc vs PyTorch 2.x (eager and
torch.compile), ONNX Runtime Training and PyTorch 1.13 (issue 15).

The GPT of tests/e2e/torch_models.py (learned positions, LayerNorm, GELU,
causal attention, cross-entropy), exported to ONNX by PyTorch 1.13; every
system trains it from the same weights on the same batches with AdamW (lr
1e-3, weight decay 0.1) and global-norm clipping 1.0, at each thread count.
bench/cpu_compare.py says how each system runs and what is measured.
`--model llama` trains the Llama of the same file instead (RMSNorm as
PyTorch exports it: pow, mean, rsqrt and products, rotary positions,
SwiGLU of width 8/3 x hidden rounded up to a multiple of 8, no biases).

  bench/train_gpt_cpu.py [--config 4x128,6x384] [--threads 1,2] [--runs 3]
  bench/train_gpt_cpu.py --quick             checks that every system runs
  bench/train_gpt_cpu.py --layers 2 --batch 4   one other size (4x128's
                                             other dimensions)
  bench/train_gpt_cpu.py --model llama       the Llama at the same sizes

Configurations: 4x128 is 4 layers of width 128, 4 heads, vocabulary 256,
batch 8 x 64 tokens (0.87 M parameters); 6x384 is 6 layers of width 384,
6 heads, vocabulary 512, batch 8 x 128 tokens (11.1 M parameters).
"""
import argparse
import sys

import cpu_compare

CONFIGS = {
    "4x128": dict(layers=4, hidden=128, heads=4, vocab=256, seq=64, batch=8),
    "6x384": dict(layers=6, hidden=384, heads=6, vocab=512, seq=128, batch=8),
}
SIZES = ("layers", "hidden", "heads", "vocab", "seq", "batch")
# Float32 runs of the same steps in a different order of operations: the
# first steps' losses agree to a few 1e-6 (measured up to 4e-6 between
# PyTorch 2.15, PyTorch 1.13, ONNX Runtime and dtcc).
TOLERANCE = 2e-5
# bf16 matrix products against fp32 (tests/e2e/mixed_precision.py's bound).
BF16_TOLERANCE = 2e-2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="4x128,6x384",
                    help=f"comma-separated, of {', '.join(CONFIGS)}")
    for size in SIZES:
        ap.add_argument(f"--{size}", type=int, help="instead of --config: 4x128 with this")
    ap.add_argument("--model", default="gpt", choices=["gpt", "llama"],
                    help="tests/e2e/torch_models.py's GPT or Llama")
    ap.add_argument("--recompute", default="none", choices=["none", "full"],
                    help="dtcc's activation recomputation (dtcc only)")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                    help="compute type (bf16: dtcc's mixed precision with fp32 master "
                         "weights, PyTorch's torch.autocast to bfloat16; ONNX Runtime "
                         "Training stays fp32; losses agree less)")
    cpu_compare.add_arguments(ap, steps=20, warmup=3)
    args = ap.parse_args()
    cpu_compare.quick(args)
    if any(getattr(args, s) is not None for s in SIZES):
        custom = dict(CONFIGS["4x128"])
        custom.update({s: getattr(args, s) for s in SIZES if getattr(args, s) is not None})
        configs = [custom]
    else:
        names = args.config.split(",")
        if not set(names) <= set(CONFIGS):
            sys.exit(f"unknown --config {args.config}; expected some of {', '.join(CONFIGS)}")
        configs = [CONFIGS[n] for n in names]
    for c in configs:
        model = {k: c[k] for k in ("layers", "hidden", "heads", "vocab", "seq")}
        if args.model == "llama":
            model["ffn"] = (8 * c["hidden"] // 3 + 7) // 8 * 8
        spec = {"kind": args.model, "model": model, "batch": c["batch"],
                "inputs": ["ids", "labels"], "lr": 1e-3, "weight_decay": 0.1, "clip": 1.0,
                "dtcc_flags": ["--recompute", args.recompute, "--dtype", args.dtype]}
        if args.dtype == "bf16":
            spec["torch_autocast"] = "bfloat16"
        title = (f"{'Llama' if args.model == 'llama' else 'GPT'} {c['layers']} layers x "
                 f"{c['hidden']}, {c['heads']} heads, vocabulary "
                 f"{c['vocab']}, batch {c['batch']} x {c['seq']} tokens"
                 + (f", dtcc --recompute {args.recompute}" if args.recompute != "none" else "")
                 + (f", --dtype {args.dtype} (dtcc's mixed precision, PyTorch's "
                    "autocast; ORT fp32)" if args.dtype != "fp32" else ""))
        tol, why = ((TOLERANCE, "float32, a different order of operations")
                    if args.dtype == "fp32" else (BF16_TOLERANCE, "dtcc in bf16, PyTorch autocast to bf16, ORT fp32"))
        cpu_compare.run_workload(args, spec, title, lambda step: tol, f"{tol:g} ({why})")


if __name__ == "__main__":
    sys.exit(main())
