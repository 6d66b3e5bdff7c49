#!/usr/bin/python3
"""dtcc vs PyTorch on one GPU: MFU of GPT training (~350M and ~1.3B) in bf16.

The same GPT shape (learned positions, LayerNorm, GELU, untied head), batch,
sequence length and precision in every column:

  dtcc           `dtcc zoo gpt` of that shape, `dtcc compile --train --target
                 cuda --dtype bf16` (bf16 forward/backward, fp32 master
                 weights and AdamW state; elementwise chains fused into
                 generated GPU kernels, the default), run on the GPU
  dtcc-no-fuse   the same with --no-fuse (every op a library kernel)
  dtcc-unfused-attn  the same with --no-fused-attention (the score
                 products on cuBLAS, softmax and masks as kernels)
  dtcc-copies    the same with --no-strided-views (attention's heads
                 sliced, transposed and concatenated as copies around it,
                 as dtcc compiled them before 3447905)
  dtcc-casts     the same with --no-half-weight-copies (each fp32 master
                 weight cast to bf16 at every step, as dtcc compiled GPU
                 programs before the AdamW kernel wrote the bf16 copies)
  dtcc-no-epilogues  the same with --no-matmul-epilogues (each bias
                 gradient a reduction of its own instead of cuBLASLt's
                 epilogue of its weight gradient's product)
  torch eager    tests/e2e/torch_models.GPT under torch.autocast(bfloat16)
                 with fp32 parameters and AdamW (fused where available)
  torch.compile  the same, through torch.compile (PyTorch >= 2.0 only)
  ... +SDPA      eager and compiled with the attention core replaced by
                 F.scaled_dot_product_attention(is_causal=True) (PyTorch's
                 flash/memory-efficient kernels)

All use AdamW with global-norm clipping 1.0. PyTorch's attention is
tests/e2e/torch_models.GPT's (softmax over an explicit causal mask, no flash
attention) in the eager and compile columns, SDPA in the +SDPA ones; dtcc's
is its fused attention op (dgraph.attention, the CUDA backend's tiled
kernels) as compiled by default. The
weights differ (dtcc's are N(0, 0.02) draws made at start-up,
`--random-init`, as the zoo's files for these sizes would be GBs), which does
not change the work done. Step times are medians over the timed steps (dtcc:
of its logged intervals); tokens/s = batch * seq / step time.

MFU = model FLOPs per step / step time / the GPU's peak dense bf16 FLOP/s,
model FLOPs per token = 6 * (12 L h^2 + V h) + 12 L s h (matmul weights
forward + backward, and attention scores/values; no recomputation counted).
The peak comes from the GPU's name (H100/H200/A100/...) or --peak-tflops.

  bench/train_gpt_gpu.py [--dtcc build/bin/dtcc] [--models 350m,1.3b]
                         [--steps 20] [--warmup 5] [--peak-tflops 989]
                         [--impls dtcc,dtcc-no-fuse,eager,...]
  bench/train_gpt_gpu.py --prepare DIR      (where dtcc is built: programs only)
  bench/train_gpt_gpu.py --programs DIR --runner-cuda PATH   (on the GPU machine)

Needs one NVIDIA GPU (exits 2 with a message without one), dtcc built with
the CUDA backend (dtcc-runner-cuda beside dtcc), and PyTorch with CUDA for
the PyTorch columns (they are skipped, with the reason, without it).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

# GPT shapes: ~350M is GPT-2 medium's, ~1.3B is GPT-3 XL's (vocab padded to
# a multiple of 64), each with the micro-batch that fits an 80 GB GPU
# without recomputation.
MODELS = {
    "350m": dict(layers=24, hidden=1024, heads=16, vocab=50304, seq=1024, batch=8),
    "1.3b": dict(layers=24, hidden=2048, heads=16, vocab=50304, seq=1024, batch=4),
}
# The columns: dtcc, then PyTorch eager and compiled, with the model's own
# attention and with SDPA.
# dtcc's columns: its default compile and the variants whose effect on a
# GPU step is in question (fused regions; attention cores left unfused, the
# score products on cuBLAS; the heads copied around attention instead of
# passed as strided views), each a program of its own.
DTCC_VARIANTS = {
    "dtcc": [],
    "dtcc-no-fuse": ["--no-fuse"],
    "dtcc-no-rows": ["--no-row-regions"],
    "dtcc-unfused-attn": ["--no-fused-attention"],
    "dtcc-copies": ["--no-strided-views"],
    "dtcc-casts": ["--no-half-weight-copies"],
    "dtcc-no-epilogues": ["--no-matmul-epilogues"],
}
IMPLS = (*DTCC_VARIANTS, "eager", "compile", "eager-sdpa", "compile-sdpa")
TORCH_LABELS = {"eager": "torch eager", "compile": "torch.compile",
                "eager-sdpa": "torch eager+SDPA", "compile-sdpa": "torch.compile+SDPA"}
# Dense bf16 tensor-core peak (TFLOP/s, without sparsity), by name fragment;
# the first match wins, so the more specific names come first.
PEAK_BF16_TFLOPS = [
    ("H200", 989.0), ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0),
    ("GH200", 989.0), ("B200", 2250.0), ("A100", 312.0), ("A800", 312.0),
    ("L40S", 362.0), ("L40", 181.0), ("L4", 121.0), ("A10G", 70.0), ("A10", 125.0),
    ("RTX 4090", 165.0), ("RTX 3090", 71.0),
]


def gpu_name():
    """The first GPU's name, or None with the reason."""
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"nvidia-smi could not run ({e})"
    names = [n.strip() for n in p.stdout.splitlines() if n.strip()]
    if p.returncode != 0 or not names:
        return None, (p.stderr or p.stdout).strip() or "nvidia-smi lists no GPU"
    return names[0], ""


def peak_tflops(name, override):
    if override:
        return override
    for fragment, tflops in PEAK_BF16_TFLOPS:
        if fragment.lower() in name.lower():
            return tflops
    return None


def flops_per_token(m):
    L, h, V, s = m["layers"], m["hidden"], m["vocab"], m["seq"]
    return 6 * (12 * L * h * h + V * h) + 12 * L * s * h


def parameters(m):
    L, h, V, s = m["layers"], m["hidden"], m["vocab"], m["seq"]
    per_layer = 12 * h * h + 13 * h  # qkv, proj, fc1, fc2 (+ biases), 2 norms
    return L * per_layer + 2 * V * h + s * h + 2 * h


def sdpa_block_forward(self, x):
    """tests/e2e/torch_models.GPTBlock.forward with the attention core as
    F.scaled_dot_product_attention (causal, the same scale)."""
    import torch.nn.functional as F
    b, s, h = x.shape
    q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
    shape = (b, s, self.heads, h // self.heads)
    q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + self.proj(y.transpose(1, 2).reshape(b, s, h))
    return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def torch_child(args):
    """Trains in PyTorch on the GPU; prints 'ms_per_step peak_bytes'."""
    import torch
    import torch_models
    m = MODELS[args.model]
    kind, _, attention = args.torch_child.partition("-")
    if attention == "sdpa":
        torch_models.GPTBlock.forward = sdpa_block_forward
    torch.manual_seed(0)
    model = torch_models.GPT(vocab=m["vocab"], seq=m["seq"], hidden=m["hidden"],
                             heads=m["heads"], layers=m["layers"]).cuda()
    if kind == "compile":
        model = torch.compile(model)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1,
                                fused=True)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    gen = torch.Generator(device="cuda").manual_seed(0)
    times = []
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, m["vocab"], (m["batch"], m["seq"] + 1),
                               device="cuda", generator=gen)
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    print(f"{1e3 * statistics.median(times):.3f} {torch.cuda.max_memory_allocated()}")


def run_torch(args, kind):
    """(ms, peak bytes) of one PyTorch variant, or (None, reason)."""
    cmd = [sys.executable, __file__, f"--torch-child={kind}", f"--model={args.model}",
           f"--steps={args.steps}", f"--warmup={args.warmup}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["failed"])[-1]
        return None, last[:100]
    ms, peak = p.stdout.split()[-2:]
    return float(ms), float(peak)


def torch_status():
    """Why the PyTorch columns cannot run, or '' when they can."""
    p = subprocess.run([sys.executable, "-c",
                        "import torch; print(torch.__version__, torch.cuda.is_available(),"
                        " hasattr(torch, 'compile'))"], capture_output=True, text=True)
    if p.returncode != 0:
        return "PyTorch is not installed for " + sys.executable, False
    version, cuda, has_compile = p.stdout.split()
    if cuda != "True":
        return f"PyTorch {version} has no CUDA device", False
    return "", has_compile == "True"


def program_name(model, variant):
    """train_350m.prog for dtcc's default, train_350m-fuse.prog..."""
    return f"train_{model}{variant[len('dtcc'):]}.prog"


def compile_dtcc(args, out_dir, variant):
    """Compiles the model's training step for the GPU into a bare program
    (weights drawn at start-up: --random-init) with the variant's flags:
    its path, or (None, reason)."""
    m = MODELS[args.model]
    model = os.path.join(out_dir, f"gpt_{args.model}.onnx")
    prog = os.path.join(out_dir, program_name(args.model, variant))
    sizes = [f"--{k}={m[k]}" for k in ("layers", "hidden", "heads", "vocab", "seq", "batch")]
    for cmd in ([args.dtcc, "zoo", "gpt", *sizes, "--no-weights", "-o", model],
                [args.dtcc, "compile", model, "--train", "--target", "cuda", "--dtype",
                 "bf16", "--lr", "1e-4", "--weight-decay", "0.1", "--grad-clip", "1.0",
                 "--compile-to", "program", *DTCC_VARIANTS[variant], "-o", prog]):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            return None, f"{os.path.basename(cmd[0])} {cmd[1]} failed: " + \
                (p.stderr.strip().splitlines() or ["?"])[-1][:80]
    os.remove(model)
    return prog, ""


def run_dtcc(args, work, variant):
    """(ms, planned peak) of one of dtcc's variants, or (None, reason)."""
    if args.programs:
        prog = os.path.join(args.programs, program_name(args.model, variant))
        if not os.path.exists(prog):
            return None, f"{prog} was not prepared (--prepare)"
    else:
        prog, why = compile_dtcc(args, work, variant)
        if prog is None:
            return None, why
    tokens = os.path.join(work, "tokens.bin")
    if not os.path.exists(tokens):
        import numpy as np
        np.random.default_rng(0).integers(0, MODELS["350m"]["vocab"], 4_000_000).astype(
            np.uint16).tofile(tokens)
    # The weights are normal draws made on the GPU's host at start-up, not
    # the zoo's (whose files for these sizes are GBs): the same work.
    p = subprocess.run([args.runner_cuda, "--program", prog, "--data", tokens,
                        "--steps", str(args.warmup + args.steps), "--log-every", "1",
                        "--random-init", "0"], capture_output=True, text=True)
    if p.returncode != 0:
        return None, "run failed: " + (p.stderr.strip().splitlines() or ["?"])[-1][:80]
    steps = [(int(s), float(ms)) for s, ms in
             re.findall(r"step\s+(\d+)/\d+ .* step ([\d.]+) ms", p.stdout)]
    timed = [ms for s, ms in steps if s > args.warmup]
    if not timed:
        return None, "no step times in the log"
    peak = re.search(r"peak memory ([\d.]+ \w+)", p.stdout)
    return statistics.median(timed), peak.group(1) if peak else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", default=os.path.join(HERE, "..", "build", "bin", "dtcc"))
    ap.add_argument("--models", default="350m,1.3b",
                    help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="the GPU's dense bf16 peak, when its name is not known here")
    ap.add_argument("--impls", default=",".join(IMPLS),
                    help="which columns to run: " + ", ".join(IMPLS) + " (comma-separated)")
    ap.add_argument("--runner-cuda", help="dtcc-runner-cuda (default: beside --dtcc)")
    ap.add_argument("--prepare", metavar="DIR",
                    help="only compile dtcc's programs into DIR (no GPU needed), for "
                         "a GPU machine without dtcc's compiler")
    ap.add_argument("--programs", metavar="DIR",
                    help="run the programs --prepare wrote to DIR instead of compiling")
    ap.add_argument("--torch-child", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_child:
        return torch_child(args)
    args.runner_cuda = args.runner_cuda or os.path.join(os.path.dirname(args.dtcc),
                                                        "dtcc-runner-cuda")
    impls = set(args.impls.split(","))
    if impls - set(IMPLS):
        raise SystemExit("error: unknown --impls " + ", ".join(sorted(impls - set(IMPLS)))
                         + "; known: " + ", ".join(IMPLS))
    if args.prepare:
        os.makedirs(args.prepare, exist_ok=True)
        for args.model in args.models.split(","):
            for variant in DTCC_VARIANTS:
                if variant not in impls:
                    continue
                prog, why = compile_dtcc(args, args.prepare, variant)
                if prog is None:
                    raise SystemExit(f"error: {args.model} {variant}: {why}")
                print("prepared", prog)
        return 0

    name, why = gpu_name()
    if name is None:
        print(f"no NVIDIA GPU available ({why}); this benchmark measures GPU "
              "training and needs one GPU", file=sys.stderr)
        return 2
    peak = peak_tflops(name, args.peak_tflops)
    if peak is None:
        print(f"unknown peak bf16 FLOP/s for '{name}': pass --peak-tflops",
              file=sys.stderr)
        return 2
    no_torch, has_compile = torch_status()

    rows = []
    work = tempfile.mkdtemp(prefix="dtcc-gpu-bench.")
    try:
        for args.model in args.models.split(","):
            if args.model not in MODELS:
                raise SystemExit(f"error: unknown model '{args.model}'; known: "
                                 + ", ".join(MODELS))
            m = MODELS[args.model]
            tokens = m["batch"] * m["seq"]
            flops = flops_per_token(m) * tokens
            results = []

            def done(impl, ms, extra):
                """Records a column and says so on stderr: a size's columns
                take minutes (PyTorch's start, torch.compile)."""
                results.append((impl, ms, extra))
                figure = f"{ms:.1f} ms/step" if ms is not None else "-"
                print(f"train_gpt_gpu: {args.model} {impl}: {figure} ({extra})",
                      file=sys.stderr, flush=True)

            for variant in DTCC_VARIANTS:
                if variant in impls:
                    done(variant, *run_dtcc(args, work, variant))
                for f in os.listdir(work):  # one program at a time
                    if f != "tokens.bin":
                        os.remove(os.path.join(work, f))
            torch_kinds = [k for k in IMPLS if k in impls and k not in DTCC_VARIANTS]
            if torch_kinds and no_torch:
                done("torch eager", None, no_torch)
            elif torch_kinds:
                for kind in torch_kinds:
                    label = TORCH_LABELS[kind]
                    if kind.startswith("compile") and not has_compile:
                        done(label, None, "needs PyTorch >= 2.0")
                        continue
                    ms, mem = run_torch(args, kind)
                    done(label, ms, mem if ms is None else f"{mem / 2**30:.1f} GiB")
            for impl, ms, extra in results:
                rows.append((args.model, parameters(m), m, tokens, impl, ms, flops, extra))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"GPU: {name} (peak dense bf16 {peak:.0f} TFLOP/s); bf16 compute, fp32 master "
          f"weights and AdamW state, clipping 1.0; median of {args.steps} steps after "
          f"{args.warmup}")
    print(f"{'model':>6} {'params':>7} {'batch x seq':>11} {'impl':<18} {'ms/step':>9} "
          f"{'tokens/s':>9} {'TFLOP/s':>8} {'MFU':>6}  peak memory / note")
    for model, params, m, tokens, impl, ms, flops, extra in rows:
        shape = f"{m['batch']} x {m['seq']}"
        if ms is None:
            print(f"{model:>6} {params / 1e6:6.0f}M {shape:>11} {impl:<18} {'-':>9} {'-':>9} "
                  f"{'-':>8} {'-':>6}  {extra}")
            continue
        tflops = flops / (ms / 1e3) / 1e12
        print(f"{model:>6} {params / 1e6:6.0f}M {shape:>11} {impl:<18} {ms:9.1f} "
              f"{tokens / (ms / 1e3):9.0f} {tflops:8.1f} {100 * tflops / peak:5.1f}%  {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
