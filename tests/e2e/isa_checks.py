#!/usr/bin/python3
"""The AVX-512 clones of the hot loops give bitwise the baseline's results.

The CPU runtime compiles its hot loops (elementwise and conversion loops,
attention and its gradient, layer norm and the norm gradients, the AdamW
update) a second time for AVX-512 and picks them at run time
(runtime/device/cpu/IsaDispatch.h); DTCC_CPU_ISA=baseline keeps the SSE2
loops. A zoo GPT trains 4 steps with AdamW both ways, in fp32 and in bf16
(casts, half-type norms and their gradients), on 1 and 2 kernel threads:
every parameter and optimizer-state file of the final checkpoint and every
logged loss must be equal, byte for byte. On a CPU without AVX-512 both
runs take the baseline loops, and the check says so. (Library-like kernel
choices that follow the CPU itself, not DTCC_CPU_ISA, are the same in both
runs: oneDNN's bf16 products, bf16 attention's dot products on
AVX512-BF16 or AMX, and the attention kernels' f32 block products on
AVX-512, runtime/device/cpu/TileProduct.h.)
"""
import filecmp
import os
import re
import subprocess
import sys

import e2e_common


def has_avx512():
    flags = open("/proc/cpuinfo").read()
    return all(f in flags for f in ("avx512f", "avx512vl", "avx512bw", "avx512dq"))


def train(exe, tokens, ckpt, isa, threads):
    env = dict(os.environ, DTCC_CPU_ISA=isa, OPENBLAS_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads))
    p = subprocess.run([exe, "--data", tokens, "--steps", "4", "--seed", "7", "--log-every", "1",
                        "--checkpoint-dir", ckpt, "--save-every", "4"],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"error: {exe} (DTCC_CPU_ISA={isa}) exited {p.returncode}")
    return re.findall(r"^step\s+\d+/\d+\s+loss (\S+)", p.stdout, re.M)


def main():
    args, work = e2e_common.start(__doc__, "dtcc-isa-")
    checks = e2e_common.Checks()
    onnx = os.path.join(work, "gpt.onnx")
    e2e_common.run([args.dtcc, "zoo", "gpt", "--layers", "2", "--hidden", "256",
                    "--heads", "4", "--vocab", "512", "--seq", "64", "--batch", "8",
                    "-o", onnx])
    tokens = os.path.join(work, "tokens.bin")
    e2e_common.text_tokens(tokens)
    print("AVX-512 clones:", "in use" if has_avx512() else
          "not on this CPU (both runs take the baseline loops)")
    for dtype in ("fp32", "bf16"):
        exe = os.path.join(work, f"train-{dtype}")
        e2e_common.run([args.dtcc, "compile", onnx, "--train", "--optimizer", "adamw",
                        "--grad-clip", "1.0", "--dtype", dtype, "-o", exe])
        for threads in (1, 2):
            runs = {}
            for isa in ("baseline", "native"):
                ckpt = os.path.join(work, f"ckpt-{dtype}-{isa}-{threads}")
                runs[isa] = (train(exe, tokens, ckpt, isa, threads), ckpt)
            (base_losses, base_dir), (native_losses, native_dir) = runs["baseline"], runs["native"]
            checks(len(base_losses) == 4 and base_losses == native_losses,
                   f"{dtype}, {threads} thread(s): losses equal ({' '.join(native_losses)})")
            files = sorted(os.path.relpath(os.path.join(d, f), base_dir)
                           for d, _, fs in os.walk(base_dir) for f in fs)
            differ = [f for f in files
                      if not filecmp.cmp(os.path.join(base_dir, f),
                                         os.path.join(native_dir, f), shallow=False)]
            checks(files and not differ,
                   f"{dtype}, {threads} thread(s): {len(files)} checkpoint files byte-equal"
                   + (f" (differ: {', '.join(differ[:5])})" if differ else ""))
    return e2e_common.finish(work, False, checks.failures)


if __name__ == "__main__":
    sys.exit(main())
