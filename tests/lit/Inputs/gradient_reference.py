"""Gradients of activations, norms and clamps at the inputs where a naive
decomposition breaks, against PyTorch 1.13's autograd: large |x| (an exp
that overflows in a branch not taken, sigmoid rounded to 0 or 1), zero
vectors (the L2 norm's sqrt at 0) and values exactly at clamp's bounds.

Each case is a torch module f(x + b), b a zero parameter, exported for
training at opset 17 as torch.onnx.export writes it, compiled by
`dtcc compile --train --optimizer sgd --lr 0 --export-gradients` and run for
one train_step (dtcc-runner). The loss and the gradient of b (that of f's
input) must match PyTorch's in float32.

Usage: gradient_reference.py WORKDIR. Prints "ok <case>" or
"FAIL <case>: <why>" and exits non-zero if any failed.
"""
import os
import subprocess
import sys
import warnings

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

warnings.filterwarnings("ignore")
WORK = sys.argv[1]
os.makedirs(WORK, exist_ok=True)
FAILED = []


class Case(torch.nn.Module):
    def __init__(self, f, shape):
        super().__init__()
        self.f = f
        self.b = torch.nn.Parameter(torch.zeros(shape))

    def forward(self, x):
        y = self.f(x + self.b)
        # Fixed weights (a Constant node, not a parameter), so that every
        # element's gradient differs.
        n = y.numel()
        w = torch.tensor([0.5 + k / n for k in range(n)]).reshape(y.shape)
        return (y * w).sum()


def read(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def check(name, f, x, rtol=1e-5, atol=1e-6):
    x = np.asarray(x, np.float32)
    model = Case(f, x.shape)
    xt = torch.from_numpy(x)
    loss = model(xt)
    loss.backward()
    want_loss, want_grad = loss.item(), model.b.grad.numpy()
    d = os.path.join(WORK, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    torch.onnx.export(model, (xt,), path, input_names=["x"], output_names=["loss"],
                      opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    prog = os.path.join(d, "model.program")
    p = run(["dtcc", "compile", path, "--train", "--optimizer", "sgd", "--lr", "0",
             "--export-gradients", "--compile-to", "program", "-o", prog])
    if p.returncode:
        FAILED.append(name)
        print(f"FAIL {name}: compile: {p.stderr.strip()}")
        return
    xf = os.path.join(d, "x.pb")
    with open(xf, "wb") as fh:
        fh.write(numpy_helper.from_array(x, "x").SerializeToString())
    out = os.path.join(d, "out")
    p = run(["dtcc-runner", "--program", prog, "--function", "train_step",
             "--input", f"x={xf}", "--output-dir", out])
    if p.returncode:
        FAILED.append(name)
        print(f"FAIL {name}: run: {p.stderr.strip()}")
        return
    # train_step's outputs: loss, grad/b (written as grad_b.pb), ...
    got_loss = float(read(os.path.join(out, "loss.pb")))
    got_grad = read(os.path.join(out, "grad_b.pb")).reshape(want_grad.shape)
    tol = atol * max(1.0, float(np.abs(want_grad).max()))
    if not np.isfinite(got_loss) or abs(got_loss - want_loss) > rtol * abs(want_loss) + atol:
        FAILED.append(name)
        print(f"FAIL {name}: loss {got_loss}, PyTorch {want_loss}")
    elif not np.allclose(got_grad, want_grad, rtol=rtol, atol=tol):
        FAILED.append(name)
        bad = ~np.isclose(got_grad, want_grad, rtol=rtol, atol=tol)
        print(f"FAIL {name}: gradient at x = {x[bad].tolist()}: "
              f"{got_grad[bad].tolist()}, PyTorch {want_grad[bad].tolist()}")
    else:
        print(f"ok {name}")


LARGE = [-1000.0, -100.0, -20.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 20.0, 89.0, 100.0, 1000.0]

# Elu, Selu, Celu: exp of a large x is inf in the branch not taken.
check("elu_large", F.elu, LARGE)
check("elu_alpha", lambda v: F.elu(v, alpha=0.5), LARGE)
check("selu_large", F.selu, LARGE)
check("celu_large", lambda v: F.celu(v, alpha=2.0), LARGE)
check("softplus_large", F.softplus, LARGE)
check("mish_large", F.mish, LARGE)
check("silu_large", F.silu, LARGE)
# Log(Sigmoid) and Log(1 - Sigmoid), as the exporter writes them.
check("logsigmoid_large", F.logsigmoid, LARGE)
target = torch.tensor([0.0, 1.0, 0.3, 1.0, 0.0, 1.0, 0.0, 0.5, 1.0, 0.0, 1.0, 0.0])
check("bce_with_logits_large",
      lambda v: F.binary_cross_entropy_with_logits(v, target, reduction="none"), LARGE)
check("bce_with_logits_pos_weight",
      lambda v: F.binary_cross_entropy_with_logits(
          v, target, pos_weight=torch.full([12], 3.0), reduction="none"), LARGE)
# The tails where log(1 + e) of a tiny e rounds to 0: PyTorch's log1p keeps
# e, and so must dtcc (no absolute tolerance: the values are below 1e-8).
TAIL = [-80.0, -50.0, -30.0, -20.0, -17.0, -10.0]
check("softplus_tail", F.softplus, TAIL, atol=0)
check("mish_tail", F.mish, TAIL, atol=0)
check("logsigmoid_tail", F.logsigmoid, [-v for v in TAIL], atol=0)
# Norms of a zero vector: F.normalize and torch.norm() export ReduceL2,
# torch.norm(dim=) Sqrt(ReduceSum(x * x)), vector_norm (p = 2 and 3)
# Pow(ReduceSum(Pow(Abs(x), p)), 1 / p).
rows = [[0.0, 0.0, 0.0, 0.0], [3.0, -4.0, 0.0, 1.0], [1e-3, 0.0, -2e-3, 0.0]]
check("normalize_zero_row", lambda v: F.normalize(v, dim=1), rows)
check("norm_zero_row", lambda v: torch.norm(v, dim=1), rows)
check("vector_norm_zero", lambda v: torch.linalg.vector_norm(v, dim=1, keepdim=True), rows)
check("norm3_zero_row", lambda v: torch.linalg.vector_norm(v, ord=3, dim=1), rows)
check("norm_all_zero", lambda v: torch.norm(v).reshape(1), [[0.0, 0.0], [0.0, 0.0]])
# Clip at its bounds: clamp's gradient includes them.
bounds = [-2.0, -1.0, -0.5, 0.0, 1.0, 2.0, 3.0]
check("clamp_bounds", lambda v: torch.clamp(v, -1.0, 2.0), bounds)
check("clamp_min_bound", lambda v: torch.clamp(v, min=0.0), bounds)
check("clamp_max_bound", lambda v: torch.clamp(v, max=2.0), bounds)
check("clamp_equal_bounds", lambda v: torch.clamp(v, 1.0, 1.0), bounds)
# LocalResponseNorm exports an If whose condition folds from shapes
# (dtcc inlines the branch it takes).
check("local_response_norm", lambda v: F.local_response_norm(v, 3),
      np.linspace(-2.0, 2.0, 2 * 5 * 3).reshape(2, 5, 3))

sys.exit(1 if FAILED else 0)
