#!/usr/bin/python3
"""dtcc's CUDA backend against its CPU backend: training steps of real models.

Each case compiles one model twice, `--target cpu` and `--target cuda`, with
the same training flags, trains both on the same batches and compares the
loss of every step (the CPU backend is the reference: torch_parity.py holds
it to PyTorch). Cases: zoo GPT and Llama in fp32 and bf16 (fused and
unfused attention, micro-batches with recomputation, fused regions run by
the kernels generated for CUDA against the CPU's), and PyTorch 1.13
exports of a ViT, a ResNet, a U-Net, a 1-D audio CNN and an MLP-Mixer
(convolutions on cuDNN, batch/group norms, pools, resizes). Tolerances:
fp32 1e-5 relative on the transformers, 1e-4 on the convolutional nets (see
torch_parity.py on ReLU kinks), bf16 2e-2 against the CPU's bf16 run.

The GPU machine need not have dtcc's compiler: `--prepare DIR` compiles every
case (a bare program for the GPU) and trains the CPU references where dtcc
was built; `--check DIR` runs the GPU programs with dtcc-runner-cuda and
compares. Without either flag both happen in a temporary directory.

  tests/e2e/cuda_checks.py --dtcc build/bin/dtcc [--cases gpt-fp32,...]
  tests/e2e/cuda_checks.py --dtcc build/bin/dtcc --prepare DIR
  tests/e2e/cuda_checks.py --check DIR --runner-cuda build/bin/dtcc-runner-cuda

Prints one row per case and `cuda-checks: P passed, F failed`; exits 1 on a
failure and 77 (skipped) when no CUDA device can run the programs.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import e2e_common  # noqa: E402

SKIP = 77
STEPS = 8
GPT = ["gpt", "--layers", "2", "--hidden", "128", "--heads", "4", "--vocab", "256",
       "--seq", "64", "--batch", "8", "--seed", "3"]
LLAMA = ["llama", "--layers", "2", "--hidden", "128", "--heads", "4", "--kv-heads", "2",
         "--vocab", "256", "--seq", "64", "--batch", "8", "--seed", "3"]
RECIPE = ["--train", "--lr", "1e-3", "--warmup", "2", "--weight-decay", "0.1",
          "--grad-clip", "1.0"]

# name -> (model: a zoo command or a torch_models name, extra compile flags,
#          relative tolerance of every step's loss)
CASES = {
    "gpt-fp32": (GPT, [], 1e-5),
    "gpt-bf16": (GPT, ["--dtype", "bf16"], 2e-2),
    "gpt-unfused-attention": (GPT, ["--no-fused-attention"], 1e-5),
    "gpt-microbatch-recompute": (GPT, ["--micro-batches", "2", "--recompute", "full"], 1e-5),
    "llama-fp32": (LLAMA, [], 1e-5),
    "llama-bf16": (LLAMA, ["--dtype", "bf16"], 2e-2),
    # Fused regions with the kernels generated for CUDA against the CPU's
    # generated kernels (bias + GELU, SwiGLU's SiLU and their gradients).
    "gpt-fp32-fuse": (GPT, ["--fuse"], 1e-5),
    "llama-fp32-fuse": (LLAMA, ["--fuse"], 1e-5),
    "gpt-bf16-fuse": (GPT, ["--dtype", "bf16", "--fuse"], 2e-2),
    "vit": ("vit", [], 1e-5),
    "mixer": ("mixer", [], 1e-5),
    "resnet": ("resnet", [], 1e-4),
    "unet": ("unet", [], 1e-4),
    "audio": ("audio", [], 1e-4),
}


def prepare(args, root, cases):
    """Compiles each case for both targets and trains its CPU reference:
    writes root/manifest.json, the GPU programs and their inputs."""
    dtcc = os.path.abspath(args.dtcc)
    tokens = os.path.join(root, "tokens.bin")
    e2e_common.text_tokens(tokens)
    manifest = {}
    for name in cases:
        model, extra, rtol = CASES[name]
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        onnx_path = os.path.join(d, "model.onnx")
        flags = list(RECIPE)
        if isinstance(model, list):
            e2e_common.run([dtcc, "zoo", *model, "-o", onnx_path])
            inputs = ["--data", os.path.relpath(tokens, root)]
        else:
            import torch
            import torch_models
            torch.manual_seed(0)
            net = torch_models.build(model)
            batch = 4
            torch_models.export(model, net, batch, onnx_path)
            rng = np.random.default_rng(1)
            e2e_common.write_batches(
                [torch_models.example_inputs(model, net, batch, rng) for _ in range(STEPS)],
                os.path.join(d, "batches"))
            inputs = ["--batches", os.path.relpath(os.path.join(d, "batches"), root)]
            frozen = torch_models.frozen_buffers(net)
            if frozen:
                flags += ["--frozen", ",".join(frozen)]
            flags += ["--adam-eps", "1e-6"]
        manifest[name] = prepare_case(dtcc, root, name, flags + extra, inputs, rtol)
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def prepare_case(dtcc, root, name, flags, inputs, rtol, steps=STEPS):
    """Compiles root/name/model.onnx with `flags` for the CPU and (a bare
    program, root/name/cuda.prog) for CUDA and trains the CPU program
    `steps` steps on `inputs` (runner flags, paths relative to root): the
    case's manifest entry."""
    d = os.path.join(root, name)
    onnx_path = os.path.join(d, "model.onnx")
    cpu = os.path.join(d, "train_cpu")
    e2e_common.run([dtcc, "compile", onnx_path, *flags, "-o", cpu])
    e2e_common.run([dtcc, "compile", onnx_path, *flags, "--target", "cuda",
                    "--compile-to", "program", "-o", os.path.join(d, "cuda.prog")])
    run_args = inputs + ["--steps", str(steps), "--log-every", "1"]
    losses, _ = train(root, [cpu], run_args, os.path.join(d, "cpu.dump"), steps)
    os.remove(cpu)
    print(f"prepared {name}: cpu losses {losses[0]:.6f} .. {losses[-1]:.6f}", flush=True)
    return {"flags": flags, "args": run_args, "rtol": rtol, "cpu_losses": losses.tolist()}


def train(root, cmd, run_args, dump, steps=STEPS):
    """Runs a trainer in `root` (its inputs are relative to it): the losses
    of the `steps` steps and the logged step times (ms)."""
    p = e2e_common.launch(cmd[0], 1, cmd[1:] + run_args + ["--dump-outputs", dump],
                          timeout=600, cwd=root)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n"
                           f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    times = [float(t) for t in re.findall(r"step ([\d.]+) ms", p.stdout)]
    return e2e_common.step_losses(dump, steps), times


def gpu_missing(runner):
    """Why no GPU can run the programs, or '' when one can."""
    if not os.path.exists(runner):
        return f"{runner} does not exist (dtcc was built without the CUDA backend)"
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"nvidia-smi could not run ({e})"
    if p.returncode != 0 or "GPU" not in p.stdout:
        return "nvidia-smi lists no GPU"
    return ""


def check(args, root):
    with open(os.path.join(root, "manifest.json")) as f:
        manifest = json.load(f)
    runner = os.path.abspath(args.runner_cuda)
    failures = []
    print(f"{'case':<26} {'steps':>5} {'cpu loss 1..N':>21} {'worst rel':>10} "
          f"{'at':>3} {'limit':>7} {'gpu ms/step':>11}")
    for name, case in manifest.items():
        d = os.path.join(root, name)
        try:
            got, times = train(root, [runner, "--program", os.path.join(d, "cuda.prog")],
                               case["args"], os.path.join(d, "cuda.dump"),
                               len(case["cpu_losses"]))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"{name:<26} FAIL {e}")
            failures.append(name)
            continue
        want = np.array(case["cpu_losses"])
        worst, at = e2e_common.relative_error(got, want)
        ok = bool(np.all(np.isfinite(got))) and worst <= case["rtol"]
        ms = statistics.median(times[1:]) if len(times) > 1 else float("nan")
        print(f"{name:<26} {len(got):>5} {want[0]:>10.5f}..{want[-1]:<10.5f} {worst:>10.2e} "
              f"{at:>3} {case['rtol']:>7.0e} {ms:>11.2f}  {'ok' if ok else 'FAIL'}",
              flush=True)
        if not ok:
            print("  cuda losses:", " ".join(f"{x:.7f}" for x in got))
            print("  cpu losses: ", " ".join(f"{x:.7f}" for x in want))
            failures.append(name)
    print(f"cuda-checks: {len(manifest) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--dtcc", help="dtcc (to compile the cases and train the CPU references)")
    ap.add_argument("--runner-cuda", help="dtcc-runner-cuda (default: beside --dtcc)")
    ap.add_argument("--cases", default=",".join(CASES),
                    help="comma-separated, of: " + ", ".join(CASES))
    ap.add_argument("--prepare", metavar="DIR", help="only compile and train the CPU references")
    ap.add_argument("--check", metavar="DIR", help="only run a prepared DIR on the GPU")
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            ap.error(f"--cases: unknown case '{c}'")
    if not args.check and not args.dtcc:
        ap.error("--dtcc is needed unless --check DIR is given")
    if not args.runner_cuda and args.dtcc:
        args.runner_cuda = os.path.join(os.path.dirname(args.dtcc), "dtcc-runner-cuda")

    if args.prepare:
        args.prepare = os.path.abspath(args.prepare)
        os.makedirs(args.prepare, exist_ok=True)
        prepare(args, args.prepare, cases)
        return 0
    if not args.runner_cuda:
        ap.error("--runner-cuda is needed with --check")
    why = gpu_missing(args.runner_cuda)
    if why:
        print(f"cuda-checks: skipped: {why}")
        return SKIP
    if args.check:
        return check(args, os.path.abspath(args.check))
    root = tempfile.mkdtemp(prefix="dtcc-cuda-checks.")
    try:
        prepare(args, root, cases)
        return check(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
