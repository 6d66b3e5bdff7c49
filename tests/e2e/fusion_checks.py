#!/usr/bin/python3
"""Fused regions (dtcc compile --fuse) against the unfused program.

1. Region outputs: a dgraph program whose outputs are the outputs of the
   regions a GPT step forms (bias + GELU with the pre-activation kept, its
   gradient with the residual gradient's sum, a scale/mask chain, SiLU and
   the sigmoid, an f64 chain) and of row regions (an RMS norm as PyTorch
   exports it, over rows of 2500: the sum's pairwise halves and a tail; a
   softmax from sums and maxima with its log-sum-exp; a residual add and
   a layer norm, an RMS norm and an f64 layer norm, the norm ops' outputs
   and statistics equal to their kernels' bit for bit) and of masks (Clip
   as imported, with inputs at its bounds; a mask read in and one written
   out; a select in a row region) compiled with and without --fuse, run on
   the same random inputs: every output within 1e-6 relative (f32; f64
   1e-12; masks equal). The regions must take the masks' ops.
2. Training: the zoo's GPT, PyTorch's GPT and PyTorch's Llama (its RMS
   norms and their gradients become row regions; tests/e2e/torch_models.py),
   also with --no-fused-attention (the scale, mask and softmax of each
   attention core and their gradients become row regions),
   10 AdamW steps on one device with --fuse against --no-fuse: losses and
   parameters within 1e-6 relative; dtcc explain lists the regions. In
   bf16 (regions compute in f32 and round only what they write, the
   unfused kernels every op): losses within 1e-3 of the unfused bf16 run,
   parameters no further from fp32's than 1.5x the unfused bf16 run's.
3. Meshes: dp=2 and tp=2 with --fuse against one device without it
   (mpirun, oversubscribed), within parallel_checks' tolerances (1e-5
   losses, 1e-4 parameters: the meshes change summation orders).
4. Matmul epilogues (--matmul-epilogues: each dense layer's bias added in
   its product and its bias gradient computed with its weight gradient's
   product, CUDA's default): on the CPU the fused ops run the unfused
   kernels, so one device gives the unfused losses and parameters bit for
   bit, and tp=2 those within the meshes' tolerances; dtcc explain counts
   the fused pairs (every dense layer's, both ways).
"""
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common  # noqa: E402
import parallel_checks  # noqa: E402

STEPS = parallel_checks.STEPS
TRAIN_FLAGS = parallel_checks.TRAIN_FLAGS

REGIONS = """
func.func @main(%x: tensor<6x40xf32> {dgraph.name = "x"},
                %b: tensor<40xf32> {dgraph.name = "b"},
                %dy: tensor<6x40xf32> {dgraph.name = "dy"},
                %res: tensor<6x40xf32> {dgraph.name = "res"},
                %mask: tensor<6x40xf32> {dgraph.name = "mask"},
                %d: tensor<3x7xf64> {dgraph.name = "d"},
                %w: tensor<4x3x2500xf32> {dgraph.name = "w"},
                %z: tensor<5x37xf32> {dgraph.name = "z"},
                %keep: tensor<6x40xi1> {dgraph.name = "keep"},
                %u: tensor<4x3x2500xf32> {dgraph.name = "u"},
                %lg: tensor<2500xf32> {dgraph.name = "lg"},
                %lb: tensor<2500xf32> {dgraph.name = "lb"},
                %dg: tensor<7xf64> {dgraph.name = "dg"})
    -> (tensor<6x40xf32> {dgraph.name = "pre"}, tensor<6x40xf32> {dgraph.name = "act"},
        tensor<6x40xf32> {dgraph.name = "grad"}, tensor<6x40xf32> {dgraph.name = "scores"},
        tensor<6x40xf32> {dgraph.name = "gate"}, tensor<3x7xf64> {dgraph.name = "f64"},
        tensor<4x3x2500xf32> {dgraph.name = "norm"}, tensor<4x3x1xf32> {dgraph.name = "rstd"},
        tensor<5x37xf32> {dgraph.name = "soft"}, tensor<5xf32> {dgraph.name = "lse"},
        tensor<6x40xf32> {dgraph.name = "probs"}, tensor<6x40xf32> {dgraph.name = "logp"},
        tensor<6x40xf32> {dgraph.name = "sgrad"}, tensor<6x40xf32> {dgraph.name = "lgrad"},
        tensor<6x40xf32> {dgraph.name = "clip"}, tensor<6x40xi1> {dgraph.name = "inside"},
        tensor<6x40xf32> {dgraph.name = "kept"}, tensor<5xf32> {dgraph.name = "posmax"},
        tensor<4x3x2500xf32> {dgraph.name = "resid"}, tensor<4x3x2500xf32> {dgraph.name = "ln"},
        tensor<4x3xf32> {dgraph.name = "lmean"}, tensor<4x3xf32> {dgraph.name = "lrstd"},
        tensor<4x3x2500xf32> {dgraph.name = "rms"}, tensor<4x3xf32> {dgraph.name = "rrstd"},
        tensor<3x7xf64> {dgraph.name = "lnd"},
        tensor<4x3x2500xf32> {dgraph.name = "gsum"}, tensor<2500xf32> {dgraph.name = "gds"},
        tensor<2500xf32> {dgraph.name = "gdb"}, tensor<4x3x2500xf32> {dgraph.name = "rdx"},
        tensor<2500xf32> {dgraph.name = "rds"}, tensor<3x7xf64> {dgraph.name = "ldx"},
        tensor<7xf64> {dgraph.name = "lds"}, tensor<7xf64> {dgraph.name = "ldb"}) {
  %bb = dgraph.broadcast_in_dim %b, dims = [1] : (tensor<40xf32>) -> tensor<6x40xf32>
  %pre = dgraph.add %x, %bb : tensor<6x40xf32>
  %act = dgraph.gelu %pre {approximate = "tanh"} : tensor<6x40xf32>
  %gg = dgraph.gelu_grad %pre, %dy {approximate = "tanh"} : tensor<6x40xf32>
  %ge = dgraph.gelu_grad %x, %gg : tensor<6x40xf32>
  %grad = dgraph.add %ge, %res : tensor<6x40xf32>
  %scale = dgraph.constant dense<0.35355339> : tensor<6x40xf32>
  %s = dgraph.mul %act, %scale : tensor<6x40xf32>
  %scores = dgraph.add %s, %mask : tensor<6x40xf32>
  %si = dgraph.silu %res : tensor<6x40xf32>
  %sg = dgraph.sigmoid %x : tensor<6x40xf32>
  %m = dgraph.mul %si, %sg : tensor<6x40xf32>
  %r = dgraph.relu %m : tensor<6x40xf32>
  %e = dgraph.exp %r : tensor<6x40xf32>
  %l = dgraph.log %e : tensor<6x40xf32>
  %q = dgraph.sqrt %e : tensor<6x40xf32>
  %gate = dgraph.div %l, %q : tensor<6x40xf32>
  %t = dgraph.tanh %d : tensor<3x7xf64>
  %n = dgraph.neg %t : tensor<3x7xf64>
  %f64 = dgraph.sub %n, %d : tensor<3x7xf64>
  // Row regions: an RMS norm as PyTorch exports it (rows of 2500: the
  // sum's pairwise halves and an 8-lane tail), and a softmax of an input
  // with its log-sum-exp (reductions of an outside value and of a member).
  %two = dgraph.constant dense<2.0> : tensor<4x3x2500xf32>
  %sq = dgraph.pow %w, %two : tensor<4x3x2500xf32>
  %ss = dgraph.reduce_sum %sq, dims = [2] : (tensor<4x3x2500xf32>) -> tensor<4x3xf32>
  %ss1 = dgraph.reshape %ss : (tensor<4x3xf32>) -> tensor<4x3x1xf32>
  %cnt = dgraph.constant dense<2500.0> : tensor<4x3x1xf32>
  %ms = dgraph.div %ss1, %cnt : tensor<4x3x1xf32>
  %eps = dgraph.constant dense<1.0e-5> : tensor<4x3x1xf32>
  %ve = dgraph.add %ms, %eps : tensor<4x3x1xf32>
  %rt = dgraph.sqrt %ve : tensor<4x3x1xf32>
  %one = dgraph.constant dense<1.0> : tensor<4x3x1xf32>
  %rstd = dgraph.div %one, %rt : tensor<4x3x1xf32>
  %rb = dgraph.broadcast_in_dim %rstd, dims = [0, 1, 2] : (tensor<4x3x1xf32>) -> tensor<4x3x2500xf32>
  %norm = dgraph.mul %w, %rb : tensor<4x3x2500xf32>
  %zm = dgraph.reduce_max %z, dims = [1] : (tensor<5x37xf32>) -> tensor<5xf32>
  %zmb = dgraph.broadcast_in_dim %zm, dims = [0] : (tensor<5xf32>) -> tensor<5x37xf32>
  %zs = dgraph.sub %z, %zmb : tensor<5x37xf32>
  %ze = dgraph.exp %zs : tensor<5x37xf32>
  %zsum = dgraph.reduce_sum %ze, dims = [1] : (tensor<5x37xf32>) -> tensor<5xf32>
  %zl = dgraph.log %zsum : tensor<5xf32>
  %lse = dgraph.add %zl, %zm : tensor<5xf32>
  %zsb = dgraph.broadcast_in_dim %zsum, dims = [0] : (tensor<5xf32>) -> tensor<5x37xf32>
  %soft = dgraph.div %ze, %zsb : tensor<5x37xf32>
  // The softmax ops with neighbours: decomposed into row regions in their
  // kernels' orders (sums of exponentials in double blocks).
  %xs = dgraph.mul %x, %scale : tensor<6x40xf32>
  %xm = dgraph.add %xs, %mask : tensor<6x40xf32>
  %probs = dgraph.softmax %xm, dim = 1 : tensor<6x40xf32>
  %logp = dgraph.log_softmax %xm, dim = 1 : tensor<6x40xf32>
  %sg0 = dgraph.softmax_grad %probs, %dy, dim = 1 : tensor<6x40xf32>
  %sgrad = dgraph.mul %sg0, %scale : tensor<6x40xf32>
  %lg0 = dgraph.log_softmax_grad %logp, %dy, dim = 1 : tensor<6x40xf32>
  %lgrad = dgraph.neg %lg0 : tensor<6x40xf32>
  // Masks: Clip as imported (values, and the select that gives clamp's
  // gradient), its mask written out, a mask read in, and a select in a
  // row region (the row maximum of the positive entries).
  %lo = dgraph.constant dense<-1.0> : tensor<6x40xf32>
  %hi = dgraph.constant dense<1.5> : tensor<6x40xf32>
  %cmax = dgraph.max %x, %lo : tensor<6x40xf32>
  %cmin = dgraph.min %cmax, %hi : tensor<6x40xf32>
  %cge = dgraph.ge %x, %lo : tensor<6x40xf32>
  %cle = dgraph.le %x, %hi : tensor<6x40xf32>
  %inside = dgraph.and %cge, %cle : tensor<6x40xi1>
  %clip = dgraph.select %inside, %x, %cmin : tensor<6x40xf32>
  %zero = dgraph.constant dense<0.0> : tensor<6x40xf32>
  %ties = dgraph.eq %cmin, %hi : tensor<6x40xf32>
  %either = dgraph.or %ties, %keep : tensor<6x40xi1>
  %drop = dgraph.not %either : tensor<6x40xi1>
  %kd = dgraph.mul %dy, %res : tensor<6x40xf32>
  %kept = dgraph.select %drop, %kd, %zero : tensor<6x40xf32>
  %zlow = dgraph.constant dense<-5.0> : tensor<5x37xf32>
  %zzero = dgraph.constant dense<0.0> : tensor<5x37xf32>
  %zpos = dgraph.gt %z, %zzero : tensor<5x37xf32>
  %zsel = dgraph.select %zpos, %z, %zlow : tensor<5x37xf32>
  %zsq = dgraph.mul %zsel, %zsel : tensor<5x37xf32>
  %posmax = dgraph.reduce_max %zsq, dims = [1] : (tensor<5x37xf32>) -> tensor<5xf32>
  // The norm ops with neighbours (a residual add, a product, an f64
  // negation): decomposed into row regions in their kernels' orders (the
  // statistics in double), so equal to the kernels' results bit for bit.
  %resid = dgraph.add %w, %u : tensor<4x3x2500xf32>
  %ln, %lmean, %lrstd = dgraph.layer_norm %resid, %lg, %lb axis = 2, epsilon = 1.0e-05
      : (tensor<4x3x2500xf32>, tensor<2500xf32>, tensor<2500xf32>)
      -> (tensor<4x3x2500xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
  %rx = dgraph.mul %w, %u : tensor<4x3x2500xf32>
  %rms, %rrstd = dgraph.rms_norm %rx, %lg axis = 2, epsilon = 1.0e-06
      : (tensor<4x3x2500xf32>, tensor<2500xf32>) -> (tensor<4x3x2500xf32>, tensor<4x3xf32>)
  %dn = dgraph.neg %d : tensor<3x7xf64>
  %lnd, %dmean, %drstd = dgraph.layer_norm %dn, %dg axis = 1, epsilon = 1.0e-05
      : (tensor<3x7xf64>, tensor<7xf64>) -> (tensor<3x7xf64>, tensor<3xf64>, tensor<3xf64>)
  // Their gradients with neighbours (the residual gradient added to dx, a
  // product making dy, an f64 product making dy): dx in row regions in the
  // kernels' order, the scale and bias gradients the kernels' own sums
  // (dgraph.{layer,rms}_norm_param_grad): equal bit for bit.
  %gdx, %gds, %gdb = dgraph.layer_norm_grad %resid, %lg, %lmean, %lrstd, %w axis = 2
      : (tensor<4x3x2500xf32>, tensor<2500xf32>, tensor<4x3xf32>, tensor<4x3xf32>,
         tensor<4x3x2500xf32>) -> (tensor<4x3x2500xf32>, tensor<2500xf32>, tensor<2500xf32>)
  %gsum = dgraph.add %gdx, %u : tensor<4x3x2500xf32>
  %rdy = dgraph.mul %u, %u : tensor<4x3x2500xf32>
  %rdx, %rds = dgraph.rms_norm_grad %rx, %lg, %rrstd, %rdy axis = 2
      : (tensor<4x3x2500xf32>, tensor<2500xf32>, tensor<4x3xf32>, tensor<4x3x2500xf32>)
      -> (tensor<4x3x2500xf32>, tensor<2500xf32>)
  %ddy = dgraph.mul %d, %d : tensor<3x7xf64>
  %ldx, %lds, %ldb = dgraph.layer_norm_grad %dn, %dg, %dmean, %drstd, %ddy axis = 1
      : (tensor<3x7xf64>, tensor<7xf64>, tensor<3xf64>, tensor<3xf64>, tensor<3x7xf64>)
      -> (tensor<3x7xf64>, tensor<7xf64>, tensor<7xf64>)
  return %pre, %act, %grad, %scores, %gate, %f64, %norm, %rstd, %soft, %lse,
         %probs, %logp, %sgrad, %lgrad, %clip, %inside, %kept, %posmax,
         %resid, %ln, %lmean, %lrstd, %rms, %rrstd, %lnd,
         %gsum, %gds, %gdb, %rdx, %rds, %ldx, %lds, %ldb
      : tensor<6x40xf32>, tensor<6x40xf32>, tensor<6x40xf32>, tensor<6x40xf32>,
        tensor<6x40xf32>, tensor<3x7xf64>, tensor<4x3x2500xf32>, tensor<4x3x1xf32>,
        tensor<5x37xf32>, tensor<5xf32>, tensor<6x40xf32>, tensor<6x40xf32>,
        tensor<6x40xf32>, tensor<6x40xf32>, tensor<6x40xf32>, tensor<6x40xi1>,
        tensor<6x40xf32>, tensor<5xf32>, tensor<4x3x2500xf32>, tensor<4x3x2500xf32>,
        tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3x2500xf32>, tensor<4x3xf32>,
        tensor<3x7xf64>, tensor<4x3x2500xf32>, tensor<2500xf32>, tensor<2500xf32>,
        tensor<4x3x2500xf32>, tensor<2500xf32>, tensor<3x7xf64>, tensor<7xf64>,
        tensor<7xf64>
}
"""


# The norm ops' outputs (and the residual the layer norm's region writes),
# and their gradients'.
NORMS = ["resid", "ln", "lmean", "lrstd", "rms", "rrstd", "lnd",
         "gsum", "gds", "gdb", "rdx", "rds", "ldx", "lds", "ldb"]


def region_outputs(dtcc, work, check):
    src = os.path.join(work, "regions.mlir")
    with open(src, "w") as f:
        f.write(REGIONS)
    rng = np.random.default_rng(3)
    inputs = {n: rng.uniform(-3, 3, size=(6, 40)).astype(np.float32)
              for n in ["x", "dy", "res", "mask"]}
    inputs["b"] = rng.uniform(-1, 1, size=40).astype(np.float32)
    inputs["d"] = rng.uniform(-2, 2, size=(3, 7))
    inputs["w"] = rng.uniform(-3, 3, size=(4, 3, 2500)).astype(np.float32)
    inputs["z"] = rng.uniform(-8, 8, size=(5, 37)).astype(np.float32)
    # Values at Clip's bounds too (its gradient's ties).
    inputs["x"].flat[::7] = np.float32(1.5)
    inputs["x"].flat[3::11] = np.float32(-1.0)
    inputs["keep"] = rng.random((6, 40)) < 0.5
    # Rows far from zero mean (the layer norm's two sums differ).
    inputs["u"] = rng.uniform(2, 5, size=(4, 3, 2500)).astype(np.float32)
    inputs["lg"] = rng.uniform(-2, 2, size=2500).astype(np.float32)
    inputs["lb"] = rng.uniform(-1, 1, size=2500).astype(np.float32)
    inputs["dg"] = rng.uniform(-2, 2, size=7)
    args = []
    for n, v in inputs.items():
        e2e_common.write_pb(os.path.join(work, n + ".pb"), n, v)
        args += ["--input", f"{n}={os.path.join(work, n + '.pb')}"]
    outs = {}
    for mode in ["--fuse", "--no-fuse"]:
        exe = os.path.join(work, "regions" + mode)
        dump = os.path.join(work, "dump" + mode)
        e2e_common.run([dtcc, "compile", src, mode, "--dump-dir", dump, "-o", exe])
        e2e_common.run([exe, "--output-dir", exe + ".out"] + args)
        outs[mode] = {n: e2e_common.read_pb(os.path.join(exe + ".out", n + ".pb"))
                      for n in ["pre", "act", "grad", "scores", "gate", "f64",
                                "norm", "rstd", "soft", "lse", "probs", "logp",
                                "sgrad", "lgrad", "clip", "inside", "kept",
                                "posmax"] + list(NORMS)}
    explained = e2e_common.run([dtcc, "explain", os.path.join(work, "regions--fuse")])
    m = re.search(r"main: (\d+) regions of (\d+) ops", explained)
    check(m is not None and int(m.group(1)) >= 5,
          f"dtcc explain lists the regions: {m.group(0) if m else '(no line)'}")
    check(os.path.exists(os.path.join(work, "dump--fuse", "kernels.mlir")) and
          os.path.exists(os.path.join(work, "dump--fuse", "kernels.ll")),
          "--dump-dir writes kernels.mlir and kernels.ll")
    # The masks' ops run in regions: no comparison, logical op or select
    # is left a kernel of its own.
    with open(os.path.join(work, "dump--fuse", "4-dexec.mlir")) as f:
        left = re.findall(r'dexec\.kernel "(eq|lt|le|gt|ge|and|or|not|select)"',
                          f.read())
    check(not left, f"the regions take the masks' ops (left as kernels: {left})")
    with open(os.path.join(work, "dump--fuse", "4-dexec.mlir")) as f:
        left = re.findall(r'dexec\.kernel "(layer_norm|rms_norm|layer_norm_grad|'
                          r'rms_norm_grad)"', f.read())
    check(not left, f"the regions take the norm ops and their gradients' dx "
          f"(left as kernels: {left})")
    for n in NORMS:
        got, want = outs["--fuse"][n], outs["--no-fuse"][n]
        check(np.array_equal(got, want),
              f"norm region output '{n}' ({want.dtype}) equals the norm kernel's "
              f"bit for bit ({int(np.sum(got != want))} of {want.size} differ)")
    for n, want in outs["--no-fuse"].items():
        got = outs["--fuse"][n]
        if want.dtype == np.bool_:
            check(np.array_equal(got, want), f"region output '{n}' (mask) equals "
                  f"the unfused program's ({int(np.sum(got != want))} differ)")
            continue
        tol = 1e-12 if want.dtype == np.float64 else 1e-6
        rel = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-3)))
        check(rel <= tol, f"region output '{n}' ({want.dtype}) equals the unfused "
              f"program's within {tol:g} relative (worst {rel:.2e})")


def training(dtcc, work, tokens, model, check):
    zoo = os.path.join(work, f"{model}.onnx")
    model_flags = []
    if model.startswith("torch-"):
        import torch
        import torch_models
        torch.manual_seed(0)
        name = model[len("torch-"):]
        net = torch_models.build(name, layers=4)
        model_flags = ["--frozen", ",".join(torch_models.frozen_buffers(net))]
        torch_models.export(name, net, parallel_checks.BATCH, zoo)
    else:
        e2e_common.run([dtcc, "zoo", "gpt", "--layers", str(parallel_checks.LAYERS),
                        "--hidden", str(parallel_checks.HIDDEN), "--heads", "4",
                        "--vocab", "64", "--seq", str(parallel_checks.SEQ),
                        "--batch", str(parallel_checks.BATCH), "-o", zoo])
    data = ["--data", tokens, "--steps", str(STEPS), "--seed", "7"]
    results = {}
    # name -> ranks, flags, the unfused reference it is held to, the loss
    # and parameter tolerances. bf16 regions compute in f32 and round only
    # what they write (the unfused kernels round every op's result): their
    # parameters (None) are held to fp32 instead, no further from it than
    # the unfused bf16 run's (Adam's normalized steps carry bf16's rounding
    # into the zero-initialized biases alike, ~6% of their largest value).
    plans = {"1 device": (1, ["--no-fuse"], None, 0, 0),
             "fused": (1, ["--fuse"], "1 device", 1e-6, 1e-6),
             "fused DP2": (2, ["--fuse", "--mesh", "dp=2"], "1 device", 1e-5, 1e-4),
             "fused TP2": (2, ["--fuse", "--mesh", "tp=2"], "1 device", 1e-5, 1e-4),
             "1 device plain attention": (1, ["--no-fuse", "--no-fused-attention"],
                                          None, 0, 0),
             "fused plain attention": (1, ["--fuse", "--no-fused-attention"],
                                       "1 device plain attention", 1e-6, 1e-6),
             # Bias gradients with their weight gradients' products
             # (--matmul-epilogues, CUDA's default): the CPU runs the fused
             # op as the unfused kernels, so the losses to the bit.
             "epilogues": (1, ["--no-fuse", "--matmul-epilogues"], "1 device", 0, 0),
             "epilogues TP2": (2, ["--no-fuse", "--matmul-epilogues", "--mesh", "tp=2"],
                               "1 device", 1e-5, 1e-4),
             "1 device bf16": (1, ["--no-fuse", "--dtype", "bf16"], None, 0, 0),
             "fused bf16": (1, ["--fuse", "--dtype", "bf16"], "1 device bf16",
                            1e-3, None)}
    planned = {}
    for name, (n, flags, _, _, _) in plans.items():
        exe = os.path.join(work, f"{model}-{name.replace(' ', '_')}")
        e2e_common.run([dtcc, "compile", zoo] + TRAIN_FLAGS + model_flags + flags +
                       ["-o", exe])
        cmd = data + ["--dump-outputs", exe + ".dump", "--save", exe + ".ckpt"]
        p = e2e_common.launch(exe, n, cmd)
        if p.returncode != 0:
            check(False, f"{model} {name}: exited {p.returncode}\n"
                  + p.stdout[-2000:] + p.stderr[-2000:])
            continue
        results[name] = (parallel_checks.losses(exe + ".dump"),
                         parallel_checks.checkpoint(exe + ".ckpt"))
        m = re.search(r"peak memory ([\d.]+) (\w+)", p.stdout + p.stderr)
        check(m is not None, f"{model} {name}: the run reports its planned peak")
        if m:
            planned[name] = float(m.group(1)) * parallel_checks.UNITS[m.group(2)]
        if name.startswith("epilogues") and model != "torch-llama":
            # Every dense layer of these GPTs has a bias. Under tp=2 a bias
            # added after the all-reduce of a product's partial sums stays
            # an add (it must be added once, to the sum).
            explained = e2e_common.run([dtcc, "explain", exe])
            m = re.search(r"matmul epilogues: (\d+) biases added in their product, "
                          r"(\d+) bias gradients", explained)
            least = 4 * parallel_checks.LAYERS
            check(m is not None and int(m.group(2)) >= least
                  and (n > 1 or int(m.group(1)) >= least),
                  f"{model} {name}: the bias gradients join their products: "
                  f"{m.group(0) if m else '(no line)'}")
        if name in ("fused", "fused bf16", "fused plain attention"):
            explained = e2e_common.run([dtcc, "explain", exe])
            m = re.search(r"train_step: (\d+) regions of (\d+) ops, ([\d.]+ \w+)",
                          explained)
            check(m is not None and int(m.group(1)) > 0,
                  f"{model}: dtcc explain lists the step's regions: "
                  f"{m.group(0) if m else '(no line)'}")
    # Fusion keeps values out of memory and writes a view (a reshape or
    # broadcast read outside a region) as a view: on these models its plan
    # is no larger. (On the 6x384 GPT it is 0.6% larger: an elementwise
    # region's outputs get buffers of their own where an unfused kernel
    # writes over a dying input; bench/RESULTS.md.)
    for name in ("fused", "fused plain attention"):
        ref = plans[name][2]
        if name in planned and ref in planned:
            check(planned[name] <= planned[ref],
                  f"{model} {name}: planned peak {planned[name] / 2**20:.2f} MiB, "
                  f"not above {ref} unfused ({planned[ref] / 2**20:.2f} MiB)")
    for name, (n, flags, ref, loss_tol, param_tol) in plans.items():
        if ref is None or name not in results or ref not in results:
            continue
        ref_losses, ref_params = results[ref]
        got, params = results[name]
        loss_err = float(np.max(np.abs(got - ref_losses) / np.abs(ref_losses)))
        check(loss_err <= loss_tol,
              f"{model} {name}: {STEPS} steps' losses within {loss_tol:g} relative "
              f"of {ref} unfused (worst {loss_err:.2e})")
        if param_tol is None:
            fp32 = results["1 device"][1]
            err = e2e_common.param_error(params, fp32)
            ref_err = e2e_common.param_error(ref_params, fp32)
            check(err <= 1.5 * ref_err,
                  f"{model} {name}: parameters no further from fp32's than "
                  f"1.5x {ref}'s ({err:.2e} vs {ref_err:.2e} of each tensor's max)")
            continue
        param_err = e2e_common.param_error(params, ref_params)
        check(param_err <= param_tol,
              f"{model} {name}: parameters within {param_tol:g} of each tensor's "
              f"max (worst {param_err:.2e})")


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--models", default="gpt,torch-gpt,torch-llama")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    args = ap.parse_args()
    import tempfile
    work = tempfile.mkdtemp(prefix="dtcc-fusion.")
    dtcc = os.path.abspath(args.dtcc)
    check = e2e_common.Checks()
    region_outputs(dtcc, work, check)
    tokens = os.path.join(work, "tokens.bin")
    np.random.default_rng(0).integers(0, 64, size=200_000, dtype=np.uint16).tofile(tokens)
    for model in args.models.split(","):
        training(dtcc, work, tokens, model, check)
    return e2e_common.finish(work, args.keep, check.failures)


if __name__ == "__main__":
    sys.exit(main())
