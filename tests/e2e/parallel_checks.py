#!/usr/bin/python3
"""Parallel training equals single-device training, plan by plan.

For a zoo GPT and a Llama-style model (4 layers), trains 10 AdamW steps (clipping,
warmup + cosine) on one device, then under each plan with mpirun
(oversubscribed): every step's loss must agree within 1e-5 relative and
every final parameter within 1e-4 of its tensor's largest magnitude. Also:
a checkpoint saved under one plan resumes under another with the losses of
an uninterrupted run, and a rank killed mid-step makes the others exit
non-zero with a message naming the collective, a PP2 1F1B pipeline
whose messages exceed MPI's eager limit trains like one device (plan "PP2
1F1B large"), and so does a 12-stage pipeline of a 12-layer GPT on 12
ranks (plan "PP12"), and an 8-layer GPT under the interleaved schedule
(pp=4 and 2 chunks per stage, pp=2 and 4) and ZB-H1, over MPI and over
TCP (torchrun-style ranks), alone and beside dp and tp (plan "interleaved
8"). The optimizer offloaded to the host (plans "Offload
...") reports host memory and the bytes its transfers moved beside the
compiler's figures, and an offloaded checkpoint resumes on 2 TCP ranks and
without offload ("Offload checkpoints"). The context-parallel plans (CP2,
DP2xCP2) also run over the TCP backend (torchrun-style ranks) against one
device.

With --plan-set recompute the plans are activation recomputation's
instead (--recompute selective and layers=K, on one rank and on dp, tp and
pp meshes), each against the same single-device run without
recomputation, and `dtcc explain` must list what each program recomputes
(the attention cores of every layer; the first K layers of each pipeline
stage). The models may include "torch-gpt", a GPT exported by PyTorch 1.13
(tests/e2e/torch_models.py), whose attention cores are found like the
zoo's. That set also checks the memory selective recomputation saves:
for a zoo GPT with 4 layers, 4 heads, sequence 64 and batch 8, the static
memory plan's workspace without recomputation less the one with
selective recomputation against the planner's per-layer figure
(planner/Model.cpp, Korthikanti et al.: 34sbh + 5as^2b without, 34sbh
with; for dtcc's fp32 step without dropout the difference is the softmax
output, 4 * a * s^2 * b bytes a layer) times the layers before the last
(both workspaces peak at the last layer's softmax, whose scores are alive
either way), within 5%.

--launcher tcp starts the ranks torchrun-style (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT: the TCP backend) instead of mpirun.

Prints a table: plan, worst loss error, worst parameter error, per-rank
peak memory (planned) and bytes sent (measured beside `dtcc explain`'s
prediction), and step time. Exits non-zero on any failure.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import e2e_common

STEPS = 10
MPI_ENV = dict(e2e_common.MPI_ENV)
RANK_LINE = re.compile(r"rank (\d+): peak memory ([\d.]+) (\w+) planned \(process ([\d.]+) (\w+) "
                       r"above start\), bytes sent ([\d.]+) (\w+) \(predicted ([\d.]+) (\w+)\)")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
# Adam's epsilon is 1e-6, not 1e-8: some parameters have a gradient that is
# exactly zero in exact arithmetic (the attention key bias: softmax ignores a
# constant per row), so what they get is rounding noise of ~1e-10, which
# Adam's normalisation with epsilon 1e-8 turns into steps of ~lr whose sign
# depends on summation order. Any plan (or thread count) changes that order.
TRAIN_FLAGS = ["--train", "--optimizer", "adamw", "--lr", "3e-3",
               "--weight-decay", "0.1", "--grad-clip", "1.0", "--warmup", "3",
               "--schedule", "cosine", "--adam-eps", "1e-6"]

# (name, ranks, compile flags, micro-batches per step). With M micro-batches
# the ONNX model's batch is one micro-batch (8 / M): the step's global batch
# is always 8 sequences, as in the single-device run.
PLANS = [
    ("DP2", 2, ["--mesh", "dp=2"], 1),
    ("DP4", 4, ["--mesh", "dp=4"], 1),
    ("TP2", 2, ["--mesh", "tp=2"], 1),
    ("TP4", 4, ["--mesh", "tp=4"], 1),
    ("PP2 GPipe", 2, ["--mesh", "pp=2", "--pipeline-schedule", "gpipe"], 4),
    ("PP2 1F1B", 2, ["--mesh", "pp=2", "--pipeline-schedule", "1f1b"], 4),
    ("PP4 GPipe", 4, ["--mesh", "pp=4", "--pipeline-schedule", "gpipe"], 4),
    ("PP4 1F1B", 4, ["--mesh", "pp=4", "--pipeline-schedule", "1f1b"], 4),
    # Interleaved 1F1B: 4 chunks of one layer, chunks 0 and 2 on stage 0.
    ("PP2 interleaved", 2, ["--mesh", "pp=2", "--pipeline-schedule",
                            "interleaved", "--virtual-stages", "2"], 4),
    # ZB-H1: backwards split into input and weight gradients.
    ("PP2 ZB-H1", 2, ["--mesh", "pp=2", "--pipeline-schedule", "zb-h1"], 4),
    ("PP4 ZB-H1", 4, ["--mesh", "pp=4", "--pipeline-schedule", "zb-h1"], 4),
    ("ZeRO-1 DP4", 4, ["--mesh", "dp=4", "--zero", "1"], 1),
    ("ZeRO-2 DP4", 4, ["--mesh", "dp=4", "--zero", "2"], 1),
    ("ZeRO-3 DP4", 4, ["--mesh", "dp=4", "--zero", "3"], 1),
    # Micro-batches without pipelining: accumulators split by ZeRO-2.
    ("ZeRO-2 DP4 M=2", 4, ["--mesh", "dp=4", "--zero", "2"], 2),
    # Below ZeRO-2 each rank accumulates its partial sums and the dp
    # reduction happens once per step, in @apply_step.
    ("DP2 M=2", 2, ["--mesh", "dp=2"], 2),
    ("ZeRO-1 DP2xTP2 M=2", 4, ["--mesh", "dp=2,tp=2", "--zero", "1"], 2),
    ("DP2xTP2 SP M=2", 4, ["--mesh", "dp=2,tp=2", "--sequence-parallel"], 2),
    ("DP2xCP2 M=2", 4, ["--mesh", "dp=2,cp=2"], 2),
    ("DP2xTP2", 4, ["--mesh", "dp=2,tp=2"], 1),
    # Written the other way round: tp outer, dp inner (rank order differs
    # from Megatron's: the dp replicas are neighbouring ranks).
    ("TP2xDP2", 4, ["--mesh", "tp=2,dp=2"], 1),
    ("DP2xPP2", 4, ["--mesh", "dp=2,pp=2"], 2),
    ("TP2xPP2", 4, ["--mesh", "tp=2,pp=2"], 2),
    ("DP2xTP2xPP2", 8, ["--mesh", "dp=2,tp=2,pp=2"], 2),
    ("DP2xPP2 interleaved", 4, ["--mesh", "dp=2,pp=2", "--pipeline-schedule",
                                "interleaved", "--virtual-stages", "2"], 2),
    ("TP2xPP2 interleaved", 4, ["--mesh", "tp=2,pp=2", "--pipeline-schedule",
                                "interleaved", "--virtual-stages", "2"], 2),
    ("DP2xPP2 ZB-H1", 4, ["--mesh", "dp=2,pp=2", "--pipeline-schedule", "zb-h1"], 2),
    ("TP2xPP2 ZB-H1", 4, ["--mesh", "tp=2,pp=2", "--pipeline-schedule", "zb-h1"], 4),
    ("DP2xTP2 ZeRO-3", 4, ["--mesh", "dp=2,tp=2", "--zero", "3"], 1),
    # The optimizer step on the host (ZeRO-Offload): Adam's moments in the
    # host's arenas, gradients copied out as they become final, parameters
    # copied back.
    ("Offload", 1, ["--offload", "optimizer"], 1),
    ("Offload ZeRO-1 DP2", 2, ["--mesh", "dp=2", "--zero", "1", "--offload", "optimizer"], 1),
    ("Offload ZeRO-2 DP2", 2, ["--mesh", "dp=2", "--zero", "2", "--offload", "optimizer"], 1),
    ("Offload ZeRO-3 DP2", 2, ["--mesh", "dp=2", "--zero", "3", "--offload", "optimizer"], 1),
    ("Offload TP2", 2, ["--mesh", "tp=2", "--offload", "optimizer"], 1),
    ("Offload ZeRO-2 DP2 M=2", 2, ["--mesh", "dp=2", "--zero", "2", "--offload", "optimizer"], 2),
    ("Offload ZeRO-1 DP2 M=2", 2, ["--mesh", "dp=2", "--zero", "1", "--offload", "optimizer"], 2),
    ("Offload PP2 1F1B", 2, ["--mesh", "pp=2", "--offload", "optimizer"], 2),
    # Context parallelism: every sequence split over cp, keys and values
    # gathered for attention, their gradients reduce-scattered back.
    ("CP2", 2, ["--mesh", "cp=2"], 1),
    ("DP2xCP2", 4, ["--mesh", "dp=2,cp=2"], 1),
    ("CP2xTP2", 4, ["--mesh", "cp=2,tp=2"], 1),
    ("CP2xPP2", 4, ["--mesh", "pp=2,cp=2"], 2),
    # Sequence parallelism: the hidden state between the tensor-parallel
    # regions split along the sequence (reduce-scatter / all-gather).
    ("TP2 SP", 2, ["--mesh", "tp=2", "--sequence-parallel"], 1),
    ("DP2xTP2 SP", 4, ["--mesh", "dp=2,tp=2", "--sequence-parallel"], 1),
    ("TP2xPP2 SP", 4, ["--mesh", "tp=2,pp=2", "--sequence-parallel"], 2),
]
HOST_LINE = re.compile(r"(?:rank (\d+): )?host memory ([\d.]+) (\w+) planned .*?transfers "
                       r"([\d.]+) (\w+) to host \(predicted ([\d.]+) (\w+)\), "
                       r"([\d.]+) (\w+) to device \(predicted ([\d.]+) (\w+)\)")


# Activation recomputation (--plan-set recompute): (name, ranks, compile
# flags, micro-batches per step, what `dtcc explain` must list: a regex).
# The zoo's and PyTorch's GPTs have 4 layers; on pp=2 each stage holds 2.
# Selective recomputation is of the unfused attention core (a fused core,
# dgraph.attention, keeps no scores and recomputes them itself): those
# plans compile with --no-fused-attention.
UNFUSED = ["--no-fused-attention"]
RECOMPUTE_PLANS = [
    ("Selective", 1, ["--recompute", "selective"] + UNFUSED, 1,
     r"selective \(attention cores\); train_step: \d+ ops in layers 0-3 \(.*softmax 4"),
    ("Layers=2", 1, ["--recompute", "layers=2"], 1,
     r"full \(the first 2 layers of each stage\); train_step: \d+ ops in layers 0-1 "),
    ("Selective DP2", 2, ["--mesh", "dp=2", "--recompute", "selective"] + UNFUSED, 1,
     r"selective .* layers 0-3 "),
    ("Selective TP2", 2, ["--mesh", "tp=2", "--recompute", "selective"] + UNFUSED, 1,
     r"selective .* layers 0-3 "),
    ("Layers=1 TP2", 2, ["--mesh", "tp=2", "--recompute", "layers=1"], 1,
     r"full \(the first 1 layers of each stage\); train_step: \d+ ops in layers 0 "),
    ("Selective PP2 1F1B", 2, ["--mesh", "pp=2", "--pipeline-schedule", "1f1b",
                               "--recompute", "selective"] + UNFUSED, 4,
     r"train_step_pp0: \d+ ops in layers 0-1 .*train_step_pp1: \d+ ops in layers 2-3 "),
    ("Layers=1 PP2 GPipe", 2, ["--mesh", "pp=2", "--pipeline-schedule", "gpipe",
                               "--recompute", "layers=1"], 4,
     r"train_step_pp0: \d+ ops in layers 0 .*train_step_pp1: \d+ ops in layers 2 "),
    ("Layers=1 DP2xTP2", 4, ["--mesh", "dp=2,tp=2", "--recompute", "layers=1"], 1,
     r"train_step: \d+ ops in layers 0 "),
    ("Selective TP2xPP2", 4, ["--mesh", "tp=2,pp=2", "--recompute", "selective"] + UNFUSED, 2,
     r"train_step_pp0: \d+ ops in layers 0-1 .*train_step_pp1: \d+ ops in layers 2-3 "),
]
# Each sequence-parallel plan and the plan without it, whose bytes it is
# compared with (sequence_parallel_bytes); these also run over TCP.
SEQUENCE_PARALLEL = {"TP2 SP": "TP2", "DP2xTP2 SP": "DP2xTP2"}
# The zoo models every plan trains (main): 4 layers, width 32, sequences
# of 16, 8 per step.
LAYERS, HIDDEN, SEQ, BATCH = 4, 32, 16, 8


def run(cmd, env=None, check=True, timeout=600):
    full_env = dict(os.environ, **(env or {}))
    p = subprocess.run(cmd, capture_output=True, text=True, env=full_env,
                       timeout=timeout)
    if check and p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"error: {' '.join(cmd)} exited {p.returncode}")
    return p


def mpirun(n, cmd, **kw):
    return run(["mpirun", "--oversubscribe", "-np", str(n)] + cmd,
               env=MPI_ENV, **kw)


def torchrun_procs(n, cmd, collective_timeout="60"):
    """Starts `cmd` on `n` ranks torchrun-style (the TCP backend: RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT on a free local port, no MPI
    variables): the processes, their stdout and stderr piped."""
    port = e2e_common.free_port()
    procs = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OPENBLAS_NUM_THREADS="1", DTCC_COLLECTIVE_TIMEOUT=collective_timeout)
        for k in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK"):
            env.pop(k, None)
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def tcp_launch(n, cmd, timeout=300):
    """Runs `cmd` on `n` torchrun-style ranks (torchrun_procs); a
    CompletedProcess-like result with every rank's output and the first
    non-zero exit status (124 for a rank that did not end in time)."""
    outs, errs, code = [], [], 0
    for p in torchrun_procs(n, cmd):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            p.returncode = 124
        outs.append(out)
        errs.append(err)
        code = code or p.returncode
    return subprocess.CompletedProcess(cmd, code, "".join(outs), "".join(errs))


def recompute_memory(dtcc, work, check):
    """Selective recomputation's saving in the static memory plan against
    the planner's per-layer figure (see the module's docstring)."""
    layers, heads, seq, batch = 4, 4, 64, 8
    path = os.path.join(work, "gpt-long.onnx")
    run([dtcc, "zoo", "gpt", "--layers", str(layers), "--hidden", "32", "--heads",
         str(heads), "--vocab", "64", "--seq", str(seq), "--batch", str(batch),
         "-o", path])
    workspace, peaks = {}, {}
    for mode in ("none", "selective"):
        out = os.path.join(work, f"gpt-long-{mode}.mlir")
        run([dtcc, "compile", path] + TRAIN_FLAGS +
            ["--recompute", mode, "--compile-to", "dexec", "--debug-info", "-o", out] + UNFUSED)
        m = re.search(r"dexec.workspace_bytes = (\d+)", open(out).read())
        workspace[mode] = int(m.group(1)) if m else 0
        explained = run([dtcc, "explain", out, "--cluster", "cpu-local"]).stdout
        m = re.search(r'workspace is fullest at instruction \d+ of \w+ \(ONNX node "([^"]+)"\)',
                      explained)
        peaks[mode] = m.group(1) if m else "(not reported)"
    # Both workspaces peak at the last layer's softmax, where that layer's
    # scores and probabilities are alive either way; before it, each of the
    # other layers keeps its softmax output without recomputation and
    # nothing of its core with it. planner/Model.cpp activationBytesPerLayer:
    # none - selective = b * a/t * s^2 elements (no dropout), 4 bytes.
    last = f"layers.{layers - 1}/attn/Softmax"
    check(all(p.startswith(last) for p in peaks.values()),
          f"both workspaces peak at the last layer's softmax ({peaks})")
    per_layer = batch * heads * seq * seq * 4
    saved = (workspace["none"] - workspace["selective"]) / (layers - 1)
    check(abs(saved - per_layer) <= 0.05 * per_layer,
          f"selective recomputation saves {saved:.0f} B a layer in the static "
          f"memory plan (workspace {workspace['none']} -> {workspace['selective']} B "
          f"over {layers - 1} layers); the planner's Korthikanti figure "
          f"(34sbh + 5as^2b vs 34sbh; fp32, no dropout: 4*a*s^2*b) is {per_layer} B "
          f"(within 5%: {abs(saved - per_layer) / per_layer:.1%})")


def losses(dump_dir):
    """The loss of each step from --dump-outputs (float32 TensorProto)."""
    sys.path.insert(0, "/usr/lib/python3/dist-packages")
    import onnx
    from onnx import numpy_helper
    out = []
    for step in range(1, STEPS + 1):
        t = onnx.load_tensor(os.path.join(dump_dir, f"step_{step}", "loss.pb"))
        out.append(float(numpy_helper.to_array(t)))
    return np.array(out, dtype=np.float64)


def checkpoint(ckpt_dir):
    """name -> array of every parameter in a checkpoint."""
    manifest = json.load(open(os.path.join(ckpt_dir, "checkpoint.json")))
    dtypes = {1: np.float32, 7: np.int64, 6: np.int32, 11: np.float64}
    out = {}
    for v in manifest["variables"]:
        dtype = dtypes[int(v.get("dtype", 1))]
        shape = [int(d) for d in v.get("shape", [])]
        data = np.fromfile(os.path.join(ckpt_dir, v["file"]), dtype=dtype)
        out[v["name"]] = data.reshape(shape)
    return out


def rank_figures(output):
    """[(rank, planned peak, process growth, bytes sent, predicted sent)]
    from the ranks' closing lines."""
    rows = []
    for m in RANK_LINE.finditer(output):
        g = m.groups()
        rows.append((int(g[0]), float(g[1]) * UNITS[g[2]], float(g[3]) * UNITS[g[4]],
                     float(g[5]) * UNITS[g[6]], float(g[7]) * UNITS[g[8]]))
    return sorted(rows)


def fmt(b):
    for unit in ("GiB", "MiB", "KiB"):
        if b >= UNITS[unit]:
            return f"{b / UNITS[unit]:.1f} {unit}"
    return f"{b:.0f} B"


def check_host_figures(what, output, n, check):
    """An offloaded optimizer: every rank reports its host memory and the
    bytes its transfers moved, which equal the compiler's figures."""
    rows = []
    for m in HOST_LINE.finditer(output):
        g = m.groups()
        rows.append([float(g[i]) * UNITS[g[i + 1]] for i in (1, 3, 5, 7, 9)])
    check(len(rows) == n and all(r[0] > 0 for r in rows),
          f"{what}: every rank reports its host memory ({len(rows)} of {n})")
    check(all(r[1] > 0 and abs(r[1] - r[2]) <= 0.01 * r[2] and
              r[3] > 0 and abs(r[3] - r[4]) <= 0.01 * r[4] for r in rows),
          f"{what}: bytes moved to the host and back match the compiler's "
          "prediction")


def offload_checkpoints(dtcc, work, tokens, check):
    """The offloaded optimizer state round-trips through a checkpoint and
    reshards: saved after 5 steps by one device with --offload optimizer,
    resumed on 2 torchrun-style TCP ranks with ZeRO-2 and offload, and on
    one device without offload (the state moves from host to device
    memory): steps 6 to 10 have the losses of the uninterrupted run."""
    onnx_path = os.path.join(work, "gpt-b8.onnx")
    ref_losses = losses(os.path.join(work, "gpt-ref.dump"))
    data = ["--data", tokens, "--steps", str(STEPS), "--seed", "7"]
    first = os.path.join(work, "offload-1")
    run([dtcc, "compile", onnx_path] + TRAIN_FLAGS + ["--offload", "optimizer",
                                                      "-o", first])
    ckpt = os.path.join(work, "offload.ckpt")
    run([first] + data + ["--save", ckpt, "--stop-after", "5"],
        env={"OPENBLAS_NUM_THREADS": "1"})
    second = os.path.join(work, "offload-dp2")
    run([dtcc, "compile", onnx_path] + TRAIN_FLAGS +
        ["--mesh", "dp=2", "--zero", "2", "--offload", "optimizer", "-o", second])
    dump = os.path.join(work, "offload-dp2.dump")
    procs = torchrun_procs(2, [second] + data + ["--resume", ckpt, "--dump-outputs", dump])
    outs = [p.communicate(timeout=120) for p in procs]
    if any(p.returncode != 0 for p in procs):
        check(False, "offload ZeRO-2 DP2 over TCP resumed from an offloaded "
              "checkpoint: a rank failed\n" + "".join(o[1][-1500:] for o in outs))
        return
    check_host_figures("offload ZeRO-2 DP2 over TCP", "".join(o[0] for o in outs),
                       2, check)
    def tail(dump_dir):
        import onnx
        from onnx import numpy_helper
        return np.array([float(numpy_helper.to_array(onnx.load_tensor(
            os.path.join(dump_dir, f"step_{k}", "loss.pb"))))
            for k in range(6, STEPS + 1)])
    err = float(np.max(np.abs(tail(dump) - ref_losses[5:]) / np.abs(ref_losses[5:])))
    check(err <= 1e-5, "an offloaded checkpoint (one device) resumes on 2 TCP "
          f"ranks with ZeRO-2 and offload: steps 6-10 within 1e-5 (worst {err:.2e})")
    plain = os.path.join(work, "gpt-ref")
    dump = os.path.join(work, "offload-plain.dump")
    run([plain] + data + ["--resume", ckpt, "--dump-outputs", dump],
        env={"OPENBLAS_NUM_THREADS": "1"})
    err = float(np.max(np.abs(tail(dump) - ref_losses[5:]) / np.abs(ref_losses[5:])))
    check(err <= 1e-5, "an offloaded checkpoint resumes without offload: "
          f"steps 6-10 within 1e-5 (worst {err:.2e})")


def resume_across_plans(dtcc, work, tokens, check):
    """Saved under DP4 after 5 steps, resumed under TP2xPP2: the losses of
    steps 6 to 10 are those of the uninterrupted single-device run."""
    onnx_path = os.path.join(work, "gpt-b8.onnx")
    ref = os.path.join(work, "gpt-ref")
    data = ["--data", tokens, "--steps", str(STEPS), "--seed", "7"]
    ref_losses = losses(ref + ".dump")
    first = os.path.join(work, "resume-dp4")
    second = os.path.join(work, "resume-tp2pp2")
    run([dtcc, "compile", onnx_path] + TRAIN_FLAGS + ["--mesh", "dp=4", "-o", first])
    run([dtcc, "compile", os.path.join(work, "gpt-b4.onnx")] + TRAIN_FLAGS +
        ["--mesh", "tp=2,pp=2", "--micro-batches", "2", "-o", second])
    ckpt = os.path.join(work, "resume.ckpt")
    p = mpirun(4, [first] + data + ["--save", ckpt, "--stop-after", "5"], check=False)
    if p.returncode != 0:
        check(False, "checkpoint saved under DP4: mpirun exited "
              f"{p.returncode}\n{p.stdout[-1500:]}{p.stderr[-1500:]}")
        return
    dump = os.path.join(work, "resume.dump")
    p = mpirun(4, [second] + data + ["--resume", ckpt, "--dump-outputs", dump],
               check=False)
    if p.returncode != 0:
        check(False, "resumed under TP2xPP2: mpirun exited "
              f"{p.returncode}\n{p.stdout[-1500:]}{p.stderr[-1500:]}")
        return
    got = []
    for step in range(6, STEPS + 1):
        import onnx
        from onnx import numpy_helper
        t = onnx.load_tensor(os.path.join(dump, f"step_{step}", "loss.pb"))
        got.append(float(numpy_helper.to_array(t)))
    err = float(np.max(np.abs(np.array(got) - ref_losses[5:]) / np.abs(ref_losses[5:])))
    check(err <= 1e-5, "a checkpoint saved under DP4 resumes under TP2xPP2 with "
          f"the losses of an uninterrupted run (steps 6-10, worst {err:.2e})")


def large_activations(dtcc, work, tokens, check):
    """PP2 1F1B whose activations and gradients (128 KiB per micro-batch)
    exceed Open MPI's eager limit over TCP (64 KiB): each stage sends to the
    other before receiving the other's, so a send that held the
    communication thread until its receiver took it deadlocked. Losses equal
    the single-device run's; a hang fails within the collective timeout."""
    steps = 3
    def zoo(batch):
        path = os.path.join(work, f"gpt-wide-b{batch}.onnx")
        run([dtcc, "zoo", "gpt", "--layers", "4", "--hidden", "128", "--heads",
             "4", "--vocab", "64", "--seq", "64", "--batch", str(batch), "-o", path])
        return path
    data = ["--data", tokens, "--steps", str(steps), "--seed", "7"]
    ref = os.path.join(work, "gpt-wide-ref")
    run([dtcc, "compile", zoo(8)] + TRAIN_FLAGS + ["-o", ref])
    run([ref] + data + ["--dump-outputs", ref + ".dump"],
        env={"OPENBLAS_NUM_THREADS": "1"})
    exe = os.path.join(work, "gpt-wide-PP2_1F1B")
    run([dtcc, "compile", zoo(4)] + TRAIN_FLAGS +
        ["--mesh", "pp=2", "--pipeline-schedule", "1f1b", "--micro-batches", "2",
         "-o", exe])
    env = dict(MPI_ENV, DTCC_COLLECTIVE_TIMEOUT="20")
    try:
        p = run(["mpirun", "--oversubscribe", "-np", "2", exe] + data +
                ["--dump-outputs", exe + ".dump"], env=env, check=False, timeout=90)
    except subprocess.TimeoutExpired:
        check(False, "gpt PP2 1F1B, 128 KiB messages: no exit within 90 s")
        return
    if p.returncode != 0:
        check(False, f"gpt PP2 1F1B, 128 KiB messages: mpirun exited {p.returncode}\n"
              + p.stdout[-1500:] + p.stderr[-1500:])
        return
    want = e2e_common.step_losses(ref + ".dump", steps)
    got = e2e_common.step_losses(exe + ".dump", steps)
    err = float(np.max(np.abs(got - want) / np.abs(want)))
    check(err <= 1e-5, "gpt PP2 1F1B, 128 KiB messages (above MPI's eager limit): "
          f"losses within 1e-5 relative of one device (worst {err:.2e})")


class DeepGpt:
    """A zoo GPT of `layers` layers (width 16, 2 heads, sequence 8) trained
    `steps` steps on one device, and the checks of a plan's run against it:
    every step's loss within 1e-5 relative, every final parameter within
    1e-4 of its tensor's largest magnitude."""

    def __init__(self, dtcc, work, tokens, layers, batch, steps=3):
        self.dtcc, self.work, self.layers, self.steps = dtcc, work, layers, steps
        self.data = ["--data", tokens, "--steps", str(steps), "--seed", "7"]
        ref = os.path.join(work, f"gpt-{layers}-ref")
        run([dtcc, "compile", self.zoo(batch)] + TRAIN_FLAGS + ["-o", ref])
        run([ref] + self.data + ["--dump-outputs", ref + ".dump", "--save", ref + ".ckpt"],
            env={"OPENBLAS_NUM_THREADS": "1"})
        self.want = e2e_common.step_losses(ref + ".dump", steps)
        self.ref_params = checkpoint(ref + ".ckpt")

    def zoo(self, batch):
        path = os.path.join(self.work, f"gpt-{self.layers}-b{batch}.onnx")
        if not os.path.exists(path):
            run([self.dtcc, "zoo", "gpt", "--layers", str(self.layers), "--hidden", "16",
                 "--heads", "2", "--vocab", "64", "--seq", "8", "--batch",
                 str(batch), "-o", path])
        return path

    def command(self, exe):
        """The run of `exe` on the reference's data, dumping and saving."""
        return [exe] + self.data + ["--dump-outputs", exe + ".dump", "--save", exe + ".ckpt"]

    def compare(self, what, exe, n, t0, check):
        err = float(np.max(np.abs(e2e_common.step_losses(exe + ".dump", self.steps)
                                  - self.want) / np.abs(self.want)))
        param_err = e2e_common.param_error(checkpoint(exe + ".ckpt"), self.ref_params)
        check(err <= 1e-5, f"{what} on {n} ranks: losses within 1e-5 relative of "
              f"one device (worst {err:.2e}, {time.time() - t0:.1f} s)")
        check(param_err <= 1e-4, f"{what}: parameters within 1e-4 of each "
              f"tensor's max (worst {param_err:.2e})")


def twelve_stages(dtcc, work, tokens, check):
    """A 12-stage pipeline (pp=12, GPipe and 1F1B) of a 12-layer GPT on 12
    ranks, one micro-batch of one sequence per stage in flight: every
    step's loss and every final parameter equal the single-device run's
    (the plan carries pp once; the pipeline pass cuts exactly 12 stages)."""
    gpt = DeepGpt(dtcc, work, tokens, layers=12, batch=12)
    for schedule in ("gpipe", "1f1b"):
        what = f"gpt 12 layers PP12 {schedule}"
        exe = os.path.join(work, f"gpt-12-PP12-{schedule}")
        run([dtcc, "compile", gpt.zoo(1)] + TRAIN_FLAGS +
            ["--mesh", "pp=12", "--pipeline-schedule", schedule,
             "--micro-batches", "12", "-o", exe])
        t0 = time.time()
        try:
            p = run(["mpirun", "--oversubscribe", "-np", "12"] + gpt.command(exe),
                    env=MPI_ENV, check=False, timeout=120)
        except subprocess.TimeoutExpired:
            check(False, f"{what}: no exit within 120 s")
            continue
        if p.returncode != 0:
            check(False, f"{what}: mpirun exited {p.returncode}\n"
                  + p.stdout[-1500:] + p.stderr[-1500:])
            continue
        gpt.compare(what, exe, 12, t0, check)


def interleaved_and_zero_bubble(dtcc, work, tokens, check):
    """An 8-layer GPT under the interleaved schedule on pp=4 with 2 chunks
    per stage (chunks of one layer; stage s holds layers s and s + 4, so
    stage 3 sends to stage 0) over MPI and over TCP (torchrun-style ranks),
    and on pp=2 with 4 chunks, and under ZB-H1 on pp=4 and beside dp=2 x
    tp=2 over TCP: every step's loss within 1e-5 relative of one device and every final
    parameter within 1e-4 of its tensor's largest magnitude."""
    gpt = DeepGpt(dtcc, work, tokens, layers=8, batch=8)
    cases = [
        ("PP4 interleaved V=2", "mpi", 4, ["--mesh", "pp=4", "--pipeline-schedule",
         "interleaved", "--virtual-stages", "2"], 4),
        ("PP4 interleaved V=2", "tcp", 4, ["--mesh", "pp=4", "--pipeline-schedule",
         "interleaved", "--virtual-stages", "2"], 8),
        ("PP2 interleaved V=4", "tcp", 2, ["--mesh", "pp=2", "--pipeline-schedule",
         "interleaved", "--virtual-stages", "4"], 4),
        ("PP4 ZB-H1", "tcp", 4, ["--mesh", "pp=4", "--pipeline-schedule", "zb-h1"], 4),
        ("DP2xTP2xPP2 ZB-H1", "tcp", 8, ["--mesh", "dp=2,tp=2,pp=2",
         "--pipeline-schedule", "zb-h1"], 2),
        ("DP2xPP2 interleaved V=2", "mpi", 4, ["--mesh", "dp=2,pp=2",
         "--pipeline-schedule", "interleaved", "--virtual-stages", "2"], 2),
    ]
    for name, launcher, n, flags, micro in cases:
        what = f"gpt 8 layers {name} ({launcher.upper()})"
        exe = os.path.join(work, "gpt-8-" + re.sub(r"[^A-Za-z0-9]+", "_", name)
                           + "-" + launcher)
        run([dtcc, "compile", gpt.zoo(8 // micro)] + TRAIN_FLAGS + flags +
            ["--micro-batches", str(micro), "-o", exe])
        cmd = gpt.command(exe)
        t0 = time.time()
        if launcher == "mpi":
            try:
                p = run(["mpirun", "--oversubscribe", "-np", str(n)] + cmd,
                        env=MPI_ENV, check=False, timeout=120)
            except subprocess.TimeoutExpired:
                check(False, f"{what}: no exit within 120 s")
                continue
            ok, output = p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:]
        else:
            p = tcp_launch(n, cmd, timeout=120)
            ok, output = p.returncode == 0, f"exit status {p.returncode}\n" + p.stderr[-2000:]
        if not ok:
            check(False, f"{what}: ranks failed\n{output}")
            continue
        gpt.compare(what, exe, n, t0, check)


def context_parallel_tcp(dtcc, work, tokens, check):
    """CP2 and DP2xCP2 over the TCP backend (torchrun-style ranks) train
    like one device: every loss within 1e-5 relative, every parameter
    within 1e-4 of its tensor's largest magnitude."""
    for model in ("gpt", "llama"):
        ref = os.path.join(work, f"{model}-ref")
        if not os.path.exists(ref + ".ckpt"):
            continue
        want, ref_params = losses(ref + ".dump"), checkpoint(ref + ".ckpt")
        for name, n in (("CP2", 2), ("DP2xCP2", 4)):
            exe = os.path.join(work, f"{model}-{name}")
            if not os.path.exists(exe):
                continue
            dump, ckpt = exe + ".tcp.dump", exe + ".tcp.ckpt"
            p = tcp_launch(n, [exe, "--data", tokens, "--steps", str(STEPS), "--seed",
                               "7", "--dump-outputs", dump, "--save", ckpt])
            if p.returncode != 0:
                check(False, f"{model} {name} over TCP: exit status {p.returncode}\n"
                      f"{p.stderr[-1500:]}")
                continue
            loss_err = float(np.max(np.abs(losses(dump) - want) / np.abs(want)))
            params = checkpoint(ckpt)
            param_err = e2e_common.param_error(params, ref_params)
            check(loss_err <= 1e-5 and param_err <= 1e-4,
                  f"{model} {name} over TCP ({n} torchrun-style ranks): losses within "
                  f"1e-5 (worst {loss_err:.2e}), parameters within 1e-4 (worst {param_err:.2e})")


def sequence_parallel_extra(model, dp, tp):
    """Bytes each rank sends per step with sequence parallelism beyond the
    plan without it, from the model's sizes (ring volumes, f32): the
    backward pass gathers again each input of a column-parallel matmul
    (the QKV and first MLP projections of each layer, the head), whose
    weight gradients need the whole sequence (2L + 1 all-gathers of the
    rank's tokens x hidden); the gradients of the parameters applied to
    the split sequence (norm scales, and GPT's norm biases and
    row-parallel biases) are partial sums over tp, all-reduced; GPT's
    position embedding gradient is computed split along the sequence and
    gathered (s x hidden), its all-reduce over dp summing 1/tp of it. Every all-reduce of the hidden state of the
    plan without it is a reduce-scatter plus an all-gather, the same
    bytes."""
    L, h, s, a = LAYERS, HIDDEN, SEQ, 4
    tokens = BATCH // dp * s
    gather = (tp - 1) / tp * a
    reduce = 2 * (tp - 1) / tp * a
    norms = 2 * L + 1
    extra = (2 * L + 1) * tokens * h * gather
    if model == "gpt":
        # The position gradient: gathered over tp, after its all-reduce
        # over dp summed 1/tp of it.
        dp_reduce = 2 * (dp - 1) / dp * a
        extra += (2 * norms + 2 * L) * h * reduce + s * h * gather \
            - s * h * dp_reduce * (1 - 1 / tp)
    else:
        extra += norms * h * reduce
    return extra


def sequence_parallel_bytes(dtcc, work, model, check, tokens, ref_losses):
    """Sequence parallelism against the plan without it: the forward
    pass sends the same bytes (each all-reduce is a reduce-scatter and an
    all-gather), the collectives on tp are reduce-scatters and all-gathers,
    the bytes each rank sends per step (the prediction, which the ranks'
    measured bytes equal) exceed the other plan's by exactly what
    sequence_parallel_extra derives from the model's sizes, and the plan
    trains like one device over TCP too."""
    for sp, base in SEQUENCE_PARALLEL.items():
        exe = os.path.join(work, f"{model}-{sp.replace(' ', '_')}")
        other = os.path.join(work, f"{model}-{base.replace(' ', '_')}")
        if not (os.path.exists(exe) and os.path.exists(other)):
            continue
        mesh = dict(kv.split("=") for kv in next(f for name, _, f, _ in PLANS
                                                 if name == sp)[1].split(","))
        dp, tp = int(mesh.get("dp", 1)), int(mesh.get("tp", 1))
        hidden = BATCH // dp * SEQ * HIDDEN * 4  # a rank's hidden state, bytes
        got = e2e_common.explain_collectives(dtcc, exe)
        want = e2e_common.explain_collectives(dtcc, other)
        fwd = lambda cs: sum(c[4] for c in cs if c[0] == "forward" and c[2] == "tp")
        check(abs(fwd(got) - fwd(want)) <= 64,
              f"{model} {sp}: forward bytes on tp equal {base}'s "
              f"({fwd(got):.0f} vs {fwd(want):.0f})")
        on_state = lambda cs, kind: sum(1 for c in cs if c[1] == kind and
                                        c[2] == "tp" and c[3] == hidden)
        check(on_state(got, "all_reduce") == 0 and
              on_state(got, "reduce_scatter") == on_state(want, "all_reduce") and
              on_state(got, "all_gather") == on_state(want, "all_reduce") + 2 * LAYERS + 1,
              f"{model} {sp}: dtcc explain lists {on_state(got, 'reduce_scatter')} "
              f"reduce-scatters and {on_state(got, 'all_gather')} all-gathers of the "
              f"hidden state on tp, no all-reduce ({base}: "
              f"{on_state(want, 'all_reduce')} all-reduces)")
        # Per step, as the compiler predicts it (the ranks' measured bytes
        # equal the prediction: checked with each plan).
        extra = sequence_parallel_extra(model, dp, tp)
        sent_sp, sent_base = sum(c[4] for c in got), sum(c[4] for c in want)
        err = abs(sent_sp - sent_base - extra)
        # explain's rounding of each collective's bytes (a layer's gradients
        # are one collective: dtcc-shard-bucket), and 64 B besides.
        rounding = sum(c[5] for c in got) + sum(c[5] for c in want)
        check(err <= 64 + rounding, f"{model} {sp}: each rank sends {fmt(sent_sp)} per step = "
              f"{base}'s {fmt(sent_base)} + {fmt(extra)} (backward re-gathers, norm "
              f"and bias gradients), off by {err:.0f} B (explain's rounding: "
              f"{rounding:.0f} B)")
        res = tcp_launch(4 if "DP2" in sp else 2,
                         [exe, "--data", tokens, "--steps", str(STEPS), "--seed", "7",
                          "--dump-outputs", exe + ".tcp.dump"])
        if res.returncode != 0:
            check(False, f"{model} {sp} over TCP: a rank exited non-zero\n"
                  + res.stderr[-3000:])
            continue
        err = float(np.max(np.abs(losses(exe + ".tcp.dump") - ref_losses) / np.abs(ref_losses)))
        check(err <= 1e-5, f"{model} {sp} over TCP (torchrun-style ranks): losses "
              f"within 1e-5 relative (worst {err:.2e})")


def mismatched_programs(dtcc, work, tokens, check):
    """Ranks started with programs whose collectives differ (DP4 with and
    without ZeRO-1) stop at load time with an error, not a hang."""
    a = os.path.join(work, "gpt-DP4")
    b = os.path.join(work, "gpt-ZeRO-1_DP4")
    if not (os.path.exists(a) and os.path.exists(b)):
        return
    data = ["--data", tokens, "--steps", "2"]
    p = run(["mpirun", "--oversubscribe", "-np", "2"] + [a] + data + [":", "-np", "2", b] + data,
            env=MPI_ENV, check=False, timeout=120)
    check(p.returncode != 0 and "different sequence of collectives" in p.stderr,
          "ranks started with different programs stop at load time: "
          + next((l for l in p.stderr.splitlines() if "different sequence" in l), "(no message)"))


def killed_rank(dtcc, work, tokens, check):
    """Four torchrun-style ranks (TCP); rank 2 is killed mid-run: the others
    exit non-zero within the collective timeout, naming the collective."""
    exe = os.path.join(work, "gpt-DP4")
    if not os.path.exists(exe):
        return
    procs = torchrun_procs(4, [exe, "--data", tokens, "--steps", "1000000", "--seed",
                               "7", "--log-every", "1000"], collective_timeout="5")
    time.sleep(2.0)
    if procs[2].poll() is not None:
        out, err = procs[2].communicate()
        check(False, "killed rank: rank 2 ended before it was killed\n" + err[-1500:])
        return
    procs[2].send_signal(signal.SIGKILL)
    start = time.time()
    outcomes = []
    for rank, p in enumerate(procs):
        if rank == 2:
            p.wait()
            continue
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            outcomes.append((rank, None, err))
            continue
        outcomes.append((rank, p.returncode, err))
    elapsed = time.time() - start
    ok = all(code not in (None, 0) for _, code, _ in outcomes)
    named = all(re.search(r"all_reduce|all_gather|reduce_scatter", err or "")
                for _, _, err in outcomes)
    message = next((e.strip().splitlines()[-1] for _, _, e in outcomes if e.strip()), "")
    check(ok and named and elapsed < 30,
          f"a killed rank makes the others exit non-zero in {elapsed:.1f} s "
          f"(timeout 5 s), naming the collective: {message}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--models", default="gpt,llama")
    ap.add_argument("--plans", default="", help="comma-separated plan names")
    ap.add_argument("--plan-set", choices=["parallel", "recompute"], default="parallel",
                    help="the parallel plans, or activation recomputation's")
    ap.add_argument("--launcher", choices=["mpirun", "tcp"], default="mpirun",
                    help="start ranks with mpirun or torchrun-style over TCP")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    args = ap.parse_args()
    dtcc = os.path.abspath(args.dtcc)
    work = tempfile.mkdtemp(prefix="dtcc-parallel.")
    failures = []
    table = []

    def check(ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            failures.append(what)

    rng = np.random.default_rng(0)
    tokens = os.path.join(work, "tokens.bin")
    rng.integers(0, 64, size=200_000, dtype=np.uint16).tofile(tokens)
    wanted = set(p for p in args.plans.split(",") if p)

    recompute = args.plan_set == "recompute"
    plans = RECOMPUTE_PLANS if recompute else [p + ("",) for p in PLANS]
    for model in args.models.split(","):
        model_flags = []
        def zoo(batch):
            path = os.path.join(work, f"{model}-b{batch}.onnx")
            if model == "torch-gpt":
                # PyTorch's GPT (tests/e2e/torch_models.py), its causal
                # mask a frozen buffer; the same weights at every batch.
                sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
                import torch
                import torch_models
                torch.manual_seed(0)
                gpt = torch_models.build("gpt", layers=4)
                model_flags[:] = ["--frozen", ",".join(torch_models.frozen_buffers(gpt))]
                if not os.path.exists(path):
                    torch_models.export("gpt", gpt, batch, path)
            elif not os.path.exists(path):
                # "gpt-tied": the output head reuses the token embedding,
                # which pipeline stages share (the first and the last).
                family, _, tied = model.partition("-")
                run([dtcc, "zoo", family, "--layers", str(LAYERS), "--hidden",
                     str(HIDDEN), "--heads", "4", "--vocab", "64", "--seq",
                     str(SEQ), "--batch", str(batch), "-o", path] +
                    (["--tied-embeddings"] if tied == "tied" else []))
            return path
        onnx_path = zoo(BATCH)
        ref = os.path.join(work, f"{model}-ref")
        run([dtcc, "compile", onnx_path] + TRAIN_FLAGS + model_flags + ["-o", ref])
        data = ["--data", tokens, "--steps", str(STEPS), "--seed", "7"]
        t0 = time.time()
        run([ref] + data + ["--dump-outputs", ref + ".dump", "--save",
                            ref + ".ckpt"], env={"OPENBLAS_NUM_THREADS": "1"})
        ref_time = (time.time() - t0) / STEPS
        ref_losses = losses(ref + ".dump")
        ref_params = checkpoint(ref + ".ckpt")
        table.append((model, "1 device", 0.0, 0.0, "", "", f"{ref_time * 1e3:.0f} ms"))

        for name, n, flags, micro, listed in plans:
            if wanted and name not in wanted:
                continue
            exe = os.path.join(work, f"{model}-{name.replace(' ', '_')}")
            run([dtcc, "compile", zoo(8 // micro)] + TRAIN_FLAGS + model_flags + flags +
                ["--micro-batches", str(micro), "-o", exe])
            if listed:
                explained = run([dtcc, "explain", exe]).stdout
                line = next((l for l in explained.splitlines()
                             if l.startswith("recomputation:")), "(no line)")
                check(re.search(listed, line) is not None,
                      f"{model} {name}: dtcc explain lists the recomputation: {line}")
            cmd = [exe] + data + ["--dump-outputs", exe + ".dump", "--save", exe + ".ckpt"]
            t0 = time.time()
            if n == 1:
                p = run(cmd, env={"OPENBLAS_NUM_THREADS": "1"}, check=False)
            elif args.launcher == "tcp":
                p = tcp_launch(n, cmd)
            else:
                p = mpirun(n, cmd, check=False)
            step_time = (time.time() - t0) / STEPS
            if p.returncode != 0:
                check(False, f"{model} {name}: {args.launcher} exited {p.returncode}\n"
                      + p.stdout[-2000:] + p.stderr[-2000:])
                continue
            got = losses(exe + ".dump")
            loss_err = float(np.max(np.abs(got - ref_losses) / np.abs(ref_losses)))
            params = checkpoint(exe + ".ckpt")
            param_err = e2e_common.param_error(params, ref_params)
            check(loss_err <= 1e-5,
                  f"{model} {name}: losses within 1e-5 relative (worst {loss_err:.2e})")
            check(param_err <= 1e-4,
                  f"{model} {name}: parameters within 1e-4 of each tensor's max "
                  f"(worst {param_err:.2e})")
            if "--offload" in flags:
                check_host_figures(f"{model} {name}", p.stdout, n, check)
            if n == 1:
                table.append((model, name, loss_err, param_err, "", "",
                              f"{step_time * 1e3:.0f} ms"))
                continue
            ranks = rank_figures(p.stdout)
            check(len(ranks) == n, f"{model} {name}: every rank reports its peak "
                  f"memory and bytes sent ({len(ranks)} of {n})")
            check(all(abs(r[3] - r[4]) <= 0.02 * r[4] + 64 for r in ranks),
                  f"{model} {name}: bytes sent match the compiler's prediction")
            peaks = " / ".join(f"{fmt(r[1])}, {fmt(r[2])}" for r in ranks[:2])
            sent = " / ".join(f"{fmt(r[3])} ({fmt(r[4])})" for r in ranks[:2])
            table.append((model, name, loss_err, param_err, peaks, sent,
                          f"{step_time * 1e3:.0f} ms"))
        sequence_parallel_bytes(dtcc, work, model, check, tokens, ref_losses)

    if recompute and (not wanted or "memory" in wanted):
        recompute_memory(dtcc, work, check)
    if not recompute and "gpt" in args.models.split(",") and (
            not wanted or "PP2 1F1B large" in wanted):
        large_activations(dtcc, work, tokens, check)
    if not recompute and "gpt" in args.models.split(",") and (not wanted or "PP12" in wanted):
        twelve_stages(dtcc, work, tokens, check)
    if not recompute and (not wanted or "CP2" in wanted or "DP2xCP2" in wanted):
        context_parallel_tcp(dtcc, work, tokens, check)
    if not recompute and "gpt" in args.models.split(",") and (
            not wanted or "interleaved 8" in wanted):
        interleaved_and_zero_bubble(dtcc, work, tokens, check)
    if not recompute and "gpt" in args.models.split(",") and (
            not wanted or "Offload checkpoints" in wanted):
        offload_checkpoints(dtcc, work, tokens, check)
    if not recompute and "gpt" in args.models.split(",") and not wanted:
        resume_across_plans(dtcc, work, tokens, check)
        killed_rank(dtcc, work, tokens, check)
        mismatched_programs(dtcc, work, tokens, check)

    print("\nranks 0 and 1 shown; memory: planned peak, process RSS growth; "
          "bytes: sent over 10 steps, measured (predicted)")
    print(f"{'model':6} {'plan':16} {'loss err':10} {'param err':10} "
          f"{'memory (planned, measured)':44} {'bytes sent (predicted)':44} wall/step")
    for row in table:
        print(f"{row[0]:6} {row[1]:16} {row[2]:<10.2e} {row[3]:<10.2e} {row[4]:44} {row[5]:44} {row[6]}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print("work dir:", work)
    if failures:
        print(f"\n{len(failures)} check(s) failed")
        return 1
    print("\nall checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
