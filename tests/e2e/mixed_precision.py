#!/usr/bin/python3
"""End-to-end check of mixed-precision training on the CPU backend.

A tiny zoo GPT compiled with --dtype bf16 (and fp16, with its static loss
scale) trains 10 steps on real text beside the same model compiled in fp32:
the loss at every step tracks the fp32 run within 2e-2 relative, and the
half program really computes in the half type (its matmuls are bf16/f16
while its parameters and AdamW state stay fp32). Exits non-zero on any
failure.
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np

from e2e_common import Checks, launch, run, start, text_tokens, write_batches

LOG = re.compile(r"step\s+(\d+)/\d+\s+loss (\S+)")
# Elements of a layer's parameters of the zoo GPT below (hidden 64, ffn
# 256), by name within the layer.
H, F = 64, 256
GPT_PARAMETER_ELEMENTS = {
    "ln1.scale": H, "ln1.bias": H, "ln2.scale": H, "ln2.bias": H,
    "attn.qkv.weight": H * 3 * H, "attn.qkv.bias": 3 * H,
    "attn.proj.weight": H * H, "attn.proj.bias": H,
    "mlp.fc1.weight": H * F, "mlp.fc1.bias": F,
    "mlp.fc2.weight": F * H, "mlp.fc2.bias": H,
}


def kib(nbytes):
    """`dtcc explain`'s way of printing a size."""
    return f"{nbytes / 1024:.1f} KiB" if nbytes >= 1024 else f"{nbytes} B"
STEPS = 10
TOLERANCE = 2e-2


def tied_seq2seq(work):
    """A sequence-to-sequence model whose token embedding its encoder, its
    decoder and its output head read (PyTorch exports one initializer), as
    an ONNX file in `work`, with 4 steps of batches in work/tied_batches."""
    import torch
    import torch.nn.functional as F

    class Seq2Seq(torch.nn.Module):
        def __init__(self, vocab=64, hidden=32, heads=4):
            super().__init__()
            self.tok = torch.nn.Embedding(vocab, hidden)
            self.enc = torch.nn.TransformerEncoderLayer(
                hidden, heads, 2 * hidden, dropout=0.0, batch_first=True)
            self.dec = torch.nn.TransformerDecoderLayer(
                hidden, heads, 2 * hidden, dropout=0.0, batch_first=True)

        def forward(self, src, tgt, labels):
            h = self.dec(self.tok(tgt), self.enc(self.tok(src)))
            logits = h @ self.tok.weight.t()
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                   labels.reshape(-1))

    torch.manual_seed(0)
    rng = np.random.default_rng(5)
    batches = [{n: rng.integers(0, 64, (4, 8)).astype(np.int64)
                for n in ("src", "tgt", "labels")} for _ in range(4)]
    path = os.path.join(work, "seq2seq.onnx")
    torch.onnx.export(Seq2Seq().train(),
                      tuple(torch.from_numpy(batches[0][n])
                            for n in ("src", "tgt", "labels")), path,
                      input_names=["src", "tgt", "labels"],
                      output_names=["loss"], opset_version=17,
                      do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    write_batches(batches, os.path.join(work, "tied_batches"))
    return path


def main():
    args, work = start(__doc__, "dtcc-mixed-precision.")
    check = Checks()
    failures = check.failures

    try:
        tokens = os.path.join(work, "tokens.bin")
        text_tokens(tokens)
        model = os.path.join(work, "gpt.onnx")
        run([args.dtcc, "zoo", "gpt", "--layers", "2", "--hidden", "64", "--heads", "4",
             "--vocab", "256", "--seq", "32", "--batch", "4", "--seed", "3", "-o", model])
        flags = ["--train", "--lr", "2e-3", "--warmup", "2", "--grad-clip", "1.0"]

        def losses(dtype, mesh=None, extra=(), run_args=(), compile=True, steps=STEPS):
            exe = os.path.join(work, "train_" + dtype + (mesh or "").replace("=", "") +
                               "".join(extra).replace("-", ""))
            if compile:
                run([args.dtcc, "compile", model, *flags, "--dtype", dtype, "-o", exe] +
                    (["--mesh", mesh] if mesh else []) + list(extra))
            ranks = 2 if mesh else 1
            p = launch(exe, ranks, ["--data", tokens, "--steps", str(steps),
                                    "--log-every", "1", *run_args])
            out = p.stdout
            if p.returncode != 0:
                sys.stderr.write(p.stdout + p.stderr)
                raise SystemExit(f"error: {exe} on {ranks} rank(s) exited {p.returncode}")
            got = {int(m.group(1)): float(m.group(2)) for m in LOG.finditer(out)}
            if not got or max(got) != steps:
                sys.stderr.write(out)
                raise SystemExit(f"error: expected steps up to {steps} logged, got {sorted(got)}")
            return [got[s] for s in sorted(got)]

        reference = losses("fp32")
        check(reference[-1] < reference[0], "fp32: the loss falls over 10 steps "
              f"({reference[0]:.4f} -> {reference[-1]:.4f})")
        for dtype, element in (("bf16", "bf16"), ("fp16", "f16")):
            ir = run([args.dtcc, "compile", model, *flags, "--dtype", dtype,
                      "--compile-to", "train"])
            step = ir[ir.index("func.func @train_step"):]
            matmuls = re.findall(r"dgraph\.matmul .*-> tensor<[0-9x]*(\w+)>", step)
            check(matmuls and all(m == element for m in matmuls),
                  f"{dtype}: every matmul of the step computes in {element} "
                  f"({len(matmuls)} matmuls)")
            check(re.search(r"dgraph\.adamw .*: tensor<[0-9x]*f32>", ir) is not None and
                  not re.search(r"dgraph\.variable .*x(bf16|f16)>", ir),
                  f"{dtype}: parameters and AdamW state stay fp32")
            half = losses(dtype)
            worst = max(abs(h - r) / abs(r) for h, r in zip(half, reference))
            # Identical logs would mean the half program computed in fp32.
            check(half != reference, f"{dtype}: the losses are not fp32's bit for bit")
            check(worst <= TOLERANCE,
                  f"{dtype}: the loss tracks fp32 over {STEPS} steps within "
                  f"{TOLERANCE:g} relative (worst {worst:.2e}; "
                  f"{half[0]:.4f} -> {half[-1]:.4f})")
            if dtype != "bf16":
                continue
            half_reduce = ("--grad-reduce", "half")
            casts_flag = ("--no-half-weight-copies",)
            meshes = {}
            for mesh, extra in (("tp=2", ()), ("dp=2", ()), ("dp=2", ("--zero", "3")),
                                ("dp=2", half_reduce), ("pp=2", ("--micro-batches", "2"))):
                parallel = meshes[mesh, extra] = losses(dtype, mesh, extra)
                # (Two micro-batches a step see other data than one device.)
                if mesh != "pp=2":
                    worst = max(abs(p - h) / abs(h) for p, h in zip(parallel, half))
                    check(worst <= TOLERANCE,
                          f"bf16 {mesh} {' '.join(extra)}: the loss tracks one device's "
                          f"bf16 run over {STEPS} steps within {TOLERANCE:g} relative "
                          f"(worst {worst:.2e})")
                # Every CPU mesh keeps bf16 copies of the masters that the
                # updates write (dtcc-shard-half-weight-copies): the losses
                # of casting the masters at every step, bit for bit.
                casts = losses(dtype, mesh, extra + casts_flag)
                check(parallel == casts,
                      f"bf16 {mesh} {' '.join(extra)}: the step with bf16 weight "
                      f"copies logs the losses of the masters' casts "
                      f"({parallel[-1]:.5f} vs {casts[-1]:.5f})")
            # An embedding three ops read on two pipeline stages (a
            # sequence-to-sequence model's encoder and decoder embeddings
            # and its tied head, as PyTorch exports it: one initializer):
            # its gradient terms are widened and summed in fp32, as in an
            # fp32 program, after the micro-batches (they were summed in
            # bf16 within one, which the pipeline refused: "reads parameter
            # 'tok.weight' in pipeline stage 1 but stage 0 updates it").
            tied = tied_seq2seq(work)
            one, pp = (os.path.join(work, "tied_" + n) for n in ("one", "pp"))
            for exe, mesh in ((one, []), (pp, ["--mesh", "pp=2"])):
                run([args.dtcc, "compile", tied, "--train", "--lr", "2e-3",
                     "--dtype", "bf16", "-o", exe] + mesh)
            logged = []
            for exe, ranks in ((one, 1), (pp, 2)):
                p = launch(exe, ranks, ["--batches", os.path.join(work, "tied_batches"),
                                        "--steps", "4", "--log-every", "1"])
                if p.returncode != 0:
                    sys.stderr.write(p.stdout + p.stderr)
                    raise SystemExit(f"error: {exe} exited {p.returncode}")
                logged.append([float(m.group(2)) for m in LOG.finditer(p.stdout)])
            worst = max(abs(p - h) / abs(h) for p, h in zip(*reversed(logged)))
            check(len(logged[1]) == 4 and worst <= TOLERANCE,
                  f"bf16 pp=2, an embedding three ops on two stages read: the "
                  f"loss tracks one device's over 4 steps within {TOLERANCE:g} "
                  f"relative (worst {worst:.2e})")
            # Two micro-batches a step (each the model's batch) see other
            # data than one device: the bf16 sums track the fp32 ones.
            accumulated = ("--zero", "3", "--micro-batches", "2")
            wide = losses(dtype, "dp=2", accumulated)
            narrow = losses(dtype, "dp=2", accumulated + half_reduce)
            worst = max(abs(n - w) / abs(w) for n, w in zip(narrow, wide))
            check(worst <= TOLERANCE,
                  f"bf16 dp=2 {' '.join(accumulated + half_reduce)}: the loss tracks "
                  f"the fp32 sums' over {STEPS} steps within {TOLERANCE:g} relative "
                  f"(worst {worst:.2e})")
            # ZeRO-1 with micro-batches keeps a bf16 copy of the weights and
            # splits the fp32 masters over dp (Megatron-LM's distributed
            # optimizer): the same values as casting the whole masters at
            # each micro-batch, bit for bit. Checkpoints leave the copies
            # out (a restore rounds the masters again), so either program
            # resumes the other's.
            zero1 = ("--zero", "1", "--micro-batches", "2")
            copies = losses(dtype, "dp=2", zero1)
            casts = losses(dtype, "dp=2", zero1 + casts_flag)
            check(copies == casts,
                  f"bf16 dp=2 {' '.join(zero1)}: the step with bf16 weight copies "
                  f"and split masters logs the losses of the whole masters' "
                  f"({copies[-1]:.5f} vs {casts[-1]:.5f})")

            def cross_resume(mesh, with_copies, uninterrupted, where):
                """Each of the programs compiled with `with_copies` and with
                it plus --no-half-weight-copies resumes the other's
                checkpoint of step STEPS / 2 and logs `uninterrupted`'s
                losses from there."""
                without = with_copies + casts_flag
                for first, then in ((with_copies, without), (without, with_copies)):
                    ckpt = os.path.join(work, "ckpt" + (mesh or "one") +
                                        "".join(first).replace("-", ""))
                    losses(dtype, mesh, first, compile=False, steps=STEPS // 2,
                           run_args=("--checkpoint-dir", ckpt,
                                     "--save-every", str(STEPS // 2)))
                    resumed = losses(dtype, mesh, then, compile=False,
                                     run_args=("--checkpoint-dir", ckpt,
                                               "--save-every", str(STEPS // 2)))
                    check(resumed == uninterrupted[STEPS // 2:],
                          f"bf16 {where} {' '.join(then) or '(copies)'} resumes the "
                          f"checkpoint of {' '.join(first) or '(copies)'} at step "
                          f"{STEPS // 2} and logs the uninterrupted run's losses")

            cross_resume("dp=2", zero1, copies, "dp=2")
            cross_resume("tp=2", (), meshes["tp=2", ()], "tp=2")
            # Every CPU program keeps the same copies, on one device or a
            # mesh (dtcc-shard-half-weight-copies), which the AdamW kernel
            # writes as it updates each master (its fourth output,
            # `rounded`): no cast of a master is left in the step, the
            # losses are the casts' bit for bit, and each program resumes
            # the other's checkpoint.
            for where, mesh_flags in (("on one device", ()), ("tp=2", ("--mesh", "tp=2")),
                                      ("dp=2 --zero 3", ("--mesh", "dp=2", "--zero", "3"))):
                dexec = run([args.dtcc, "compile", model, *flags, "--dtype", dtype,
                             *mesh_flags, "--compile-to", "dexec"])
                step_ir = dexec[dexec.index("func.func @train_step"):]
                state = set(re.findall(r'(%\d+) = dexec\.buffer "state"', step_ir))
                updates = step_ir.count('dexec.kernel "adamw"')
                rounded = re.findall(r'dexec\.kernel "adamw" .*outs\(.*xbf16>\)', step_ir)
                master_casts = [v for v in re.findall(r'dexec\.kernel "cast" ins\((%\d+)',
                                                      step_ir) if v in state]
                check(updates and len(rounded) == updates and not master_casts,
                      f"bf16 {where}: every AdamW update writes its weight's bf16 "
                      f"copy ({len(rounded)} of {updates}) and the step casts no master "
                      f"({len(master_casts)} casts of a variable)")
            single_casts = losses(dtype, None, casts_flag)
            check(half == single_casts,
                  f"bf16 on one device: the step with bf16 weight copies logs the "
                  f"losses of the masters' casts ({half[-1]:.5f} vs {single_casts[-1]:.5f})")
            cross_resume(None, (), half, "on one device")
            # ZeRO-3 gathers each parameter in bf16 (the shard cast first:
            # 64 x 192 x 2 bytes for a layer's qkv weight, not fp32's 48 KiB)
            # anew for the forward and the backward pass, as FSDP does; a
            # gather may carry a layer's parameters together
            # (dtcc-shard-bucket), its bytes 2 per element of each.
            explain = run([args.dtcc, "explain", os.path.join(work, "train_bf16dp2zero3")])
            qkv = [(phase, size, names) for phase, size, names in re.findall(
                r"all_gather\s+dp\s+(\w+)\s+(\S+ \S+)\s+\S+ \S+\s+(.*)$", explain, re.M)
                if "layers.0.attn.qkv.weight" in names.split(", ")]
            check(sorted(set(p for p, _, _ in qkv)) == ["backward", "forward"] and
                  all(size == kib(2 * sum(GPT_PARAMETER_ELEMENTS[n.split(".", 2)[-1]]
                                          for n in names.split(", ")))
                      for _, size, names in qkv),
                  f"bf16 dp=2 --zero 3: layers.0's qkv weight is gathered in bf16 "
                  f"for each pass (gathers: {qkv})")
            # --grad-reduce half sums the weight gradients over dp in bf16
            # (2 bytes per element of layers.0's fc1 weight, 64 x 256), the
            # default in fp32 (4): an all-reduce without ZeRO, each
            # micro-batch's reduce-scatter under ZeRO-3.
            def dp_sum_bytes(exe, kind):
                rows = re.findall(r"^\s*\d+\s+\w+\s+" + kind + r"\s+dp\s+backward\s+(\S+ \S+)"
                                  r"\s+\S+ \S+\s+layers\.0/mlp/MatMul_fc1$",
                                  run([args.dtcc, "explain", os.path.join(work, exe)]), re.M)
                return sorted(set(rows))
            fc1 = H * F
            for exe, kind, element in (
                    ("train_bf16dp2", "all_reduce", 4),
                    ("train_bf16dp2gradreducehalf", "all_reduce", 2),
                    ("train_bf16dp2zero3", "reduce_scatter", 4),
                    ("train_bf16dp2zero3microbatches2gradreducehalf", "reduce_scatter", 2)):
                got = dp_sum_bytes(exe, kind)
                check(got == [kib(element * fc1)],
                      f"{exe}: layers.0's fc1 weight gradient is summed over dp by "
                      f"{kind} of {kib(element * fc1)} ({element} bytes an element; "
                      f"got {got})")
            explain = run([args.dtcc, "explain", os.path.join(work, "train_bf16tp2")])
            split = re.findall(r"^\s+(\S+)\s+\d+x\d+\s+\[[^]]*tp[^]]*\]", explain, re.M)
            check(len(split) >= 4, f"bf16 tp=2: the weights are split over tp "
                  f"({len(split)} 2-D parameters split: {', '.join(split[:6])})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
