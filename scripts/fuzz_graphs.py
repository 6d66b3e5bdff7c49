#!/usr/bin/python3
"""Differential fuzzing: random graphs of several ONNX nodes, checked against
ONNX Runtime and finite differences.

scripts/fuzz_nodes.py draws one node at a time and asks only that dtcc
behaves (a program or a clear error). This draws chains and small DAGs of
float ops, the shapes a fused region, a pattern match or the autodiff of
one value used twice meet: elementwise ops with broadcasting partners,
reductions over random axes, softmax and layer norm over any axis, matrix
products, layout ops (Transpose, Reshape, Slice, Concat, Pad, Expand,
Tile, ...), and the decomposed forms exporters write (GELU with erf or
tanh, layer and RMS norm, softmax, SiLU, attention) that dtcc recognizes.
Sizes run to 17 so that vector loops get remainders.

Each graph becomes an ONNX node test (model.onnx, test_data_set_0/) whose
expected outputs are ONNX Runtime's, and the conformance runner
(tests/conformance/run_onnx_node_tests.py --suite all) checks it as it
checks ONNX's own: the forward outputs against ONNX Runtime's (rtol 1e-3),
and dtcc's gradient of every float input against central finite
differences of the model in float64 (grad_check.py). A graph ONNX Runtime
rejects is dropped; so is one whose float32 outputs move by more than
1e-4 relative when ONNX Runtime runs it in float64 (ill-conditioned: the
comparison would test rounding, not dtcc). A failed check is a finding,
kept with the runner's message in OUT/findings/.

ONNX Runtime comes from the benchmarks' virtual environment
(bench/cpu_compare.py makes it: $DTCC_BENCH_VENV or
~/.cache/dtcc-bench/venv), never from the test path.

With --plans the same graphs are trained instead, on their first input
(dimension 0 even: the batch) with every other float value a parameter
and loss = sum(output * R) for a fixed R: 3 SGD steps on one device and
under each plan (dp, ZeRO-1/3, tp, dp x tp by default; mpirun), whose
losses must agree within 1e-4 relative. The graphs split or sum along
whatever axes they like (softmax, cumulative sums, transposes and
reshapes across the batch): a plan dtcc cannot build must be refused with
a diagnostic, and one it builds must train like one device.

  scripts/fuzz_graphs.py --dtcc build/bin/dtcc --seconds 600 --out /tmp/fg
      [--seed N] [--nodes 6] [--batch 24] [--jobs 2] [--forward-only]
  scripts/fuzz_graphs.py --plans [FLAGS;FLAGS;...] --seconds 600 --out /tmp/fp
"""
import argparse
import glob
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFORMANCE = os.path.join(REPO, "tests", "conformance")
sys.path.insert(0, CONFORMANCE)
import grad_check  # noqa: E402  (the conformance runner's float64 conversion)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuzz_nodes import classify  # noqa: E402  (the fuzz targets' oracle)
sys.path.insert(0, os.path.join(REPO, "bench"))
import cpu_compare  # noqa: E402  (the benchmarks' venv; it puts tests/e2e on the path)
import e2e_common  # noqa: E402  (launch, write_batches)
OPSET = 17
SIZES = [1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 16, 17]
MAX_ELEMENTS = 600


class Draw:
    """One random graph under construction: float values by name and shape."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes, self.inputs, self.inits, self.feeds = [], [], [], {}
        self.values = []  # (name, shape) of every float value, in order
        self.count = 0

    def name(self, stem):
        self.count += 1
        return f"{stem}{self.count}"

    def array(self, shape, low=None, scale=1.0):
        r = np.random.RandomState(self.rng.randint(0, 1 << 30))
        a = np.asarray(r.randn(*shape) * scale, np.float32)
        if low is not None:
            a = (np.abs(a) + low).astype(np.float32)
        return a

    def data(self, shape, low=None, trainable=None, scale=1.0, pool=True):
        """A new float value: a graph input (made a trainable parameter by
        the gradient check) or an initializer (a constant for the forward
        check, trainable for the gradient check too). A matrix product's
        weights are scaled by 1/sqrt(K), as models initialize them, so
        that values stay near 1 (else f32 rounding grows with K, and
        periodic functions of large values test rounding). Values kept out of
        the pool (`pool`) feed no other node."""
        n = self.name("w" if trainable is False else "x")
        a = self.array(shape, low, scale)
        if trainable is False or (trainable is None and self.rng.random() < 0.3):
            self.inits.append(numpy_helper.from_array(a, n))
        else:
            self.inputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, shape))
            self.feeds[n] = a
        if pool:
            self.values.append((n, list(shape)))
        return n, list(shape)

    def ints(self, values):
        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(values, np.int64), n))
        return n

    def scalar(self, v):
        """A float scalar initializer (trainable in the gradient check)."""
        n = self.name("s")
        self.inits.append(numpy_helper.from_array(np.asarray(v, np.float32), n))
        return n

    def constant(self, v):
        """A float scalar Constant node: not trainable. Pow's exponent on a
        base of either sign must be one, since x^e has no derivative in e
        for x < 0 (dtcc's NaN there is right)."""
        n = self.name("k")
        self.nodes.append(helper.make_node("Constant", [], [n], name=n + "_",
                                           value=numpy_helper.from_array(
                                               np.asarray(v, np.float32))))
        return n

    def node(self, op, inputs, shape, outputs=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op + "_"), **attrs))
        if shape is not None:
            self.values.append((outs[0], list(shape)))
            return outs[0], list(shape)
        return outs

    def mark(self):
        return (len(self.nodes), len(self.inputs), len(self.inits), len(self.values))

    def undo(self, mark):
        """Forgets what a rule that gave up drew after `mark`."""
        n, i, k, v = mark
        for vi in self.inputs[i:]:
            self.feeds.pop(vi.name, None)
        del self.nodes[n:], self.inputs[i:], self.inits[k:], self.values[v:]

    def pick(self):
        """The newest value mostly (a chain), else an earlier one (a DAG:
        one value with several consumers)."""
        if self.rng.random() < 0.75:
            return self.values[-1]
        return self.rng.choice(self.values)

    def shape(self, rank=None):
        rank = self.rng.choice([1, 2, 2, 3, 3, 4]) if rank is None else rank
        while True:
            s = [self.rng.choice(SIZES) for _ in range(rank)]
            if math.prod(s) <= MAX_ELEMENTS:
                return s


def broadcast_shape(a, b):
    out = []
    for i in range(max(len(a), len(b))):
        da = a[len(a) - 1 - i] if i < len(a) else 1
        db = b[len(b) - 1 - i] if i < len(b) else 1
        if da != db and 1 not in (da, db):
            return None
        out.append(max(da, db))
    return out[::-1]


def partner(d, x):
    """A second operand for x: an earlier value that broadcasts with it, or
    new data of a shape that does (a suffix of x's with some 1s)."""
    _, shape = x
    rng = d.rng
    if rng.random() < 0.35:
        fits = [v for v in d.values if broadcast_shape(v[1], shape) is not None
                and math.prod(broadcast_shape(v[1], shape)) <= MAX_ELEMENTS]
        if fits:
            return rng.choice(fits)
    drop = rng.randint(0, len(shape))
    s = [1 if rng.random() < 0.3 else n for n in shape[drop:]]
    if rng.random() < 0.15 and len(s) == len(shape) < 4:
        s = [rng.choice([1, 2])] + s  # broadcasts x up a rank
        if math.prod(broadcast_shape(s, shape)) > MAX_ELEMENTS:
            s = s[1:]
    return d.data(s)


def positive(d, x, low=0.5):
    """|x| + low: an operand inside Log's, Sqrt's, Div's domain."""
    a = d.node("Abs", [x[0]], x[1])
    return d.node("Add", [a[0], d.scalar(low)], x[1])


UNARY = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Erf", "Softplus", "Softsign", "Sin",
         "Cos", "Identity", "Selu", "HardSwish", "Floor", "Ceil"]


def op_unary(d, x):
    op = d.rng.choice(UNARY + ["Elu", "LeakyRelu", "Celu", "HardSigmoid", "ThresholdedRelu",
                               "Exp", "Log", "Sqrt", "Reciprocal", "Clip"])
    if op in ("Elu", "LeakyRelu", "Celu", "ThresholdedRelu"):
        return d.node(op, [x[0]], x[1], alpha=d.rng.choice([0.1, 0.5, 1.0, 1.5]))
    if op == "HardSigmoid":
        return d.node(op, [x[0]], x[1], alpha=0.2, beta=d.rng.choice([0.5, 0.3]))
    if op == "Exp":
        t = d.node("Tanh", [x[0]], x[1])
        return d.node("Exp", [t[0]], x[1])
    if op in ("Log", "Sqrt", "Reciprocal"):
        return d.node(op, [positive(d, x)[0]], x[1])
    if op == "Clip":
        lo, hi = sorted(d.rng.sample([-1.0, -0.5, 0.0, 0.25, 1.0], 2))
        ins = [x[0], d.scalar(lo), d.scalar(hi)]
        if d.rng.random() < 0.3:
            ins = ins[:1] + ["", ins[2]]
        return d.node(op, ins, x[1])
    return d.node(op, [x[0]], x[1])


def op_binary(d, x):
    op = d.rng.choice(["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Where", "PRelu"])
    if op == "PRelu":
        # The slope broadcasts to the input (unidirectionally).
        s = [1 if d.rng.random() < 0.5 else n for n in x[1][d.rng.randint(0, len(x[1])):]]
        return d.node(op, [x[0], d.data(s)[0]], x[1])
    if op == "Pow":
        e = d.scalar(d.rng.choice([2.0, 3.0, 0.5, -1.0]))
        return d.node(op, [positive(d, x)[0], e], x[1])
    y = partner(d, x)
    if d.rng.random() < 0.5:
        x, y = y, x
    shape = broadcast_shape(x[1], y[1])
    if op == "Div":
        return d.node(op, [x[0], positive(d, y)[0]], shape)
    if op == "Where":
        c = d.node("Greater", [x[0], y[0]], None)[0]
        z = partner(d, (None, shape))
        return d.node(op, [c, x[0], z[0]], broadcast_shape(shape, z[1]))
    return d.node(op, [x[0], y[0]], shape)


def random_axes(d, rank):
    k = d.rng.randint(1, rank)
    axes = sorted(d.rng.sample(range(rank), k))
    return [a - rank if d.rng.random() < 0.3 else a for a in axes]


def op_reduce(d, x):
    name, shape = x
    if not shape:
        return None
    op = d.rng.choice(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2",
                       "ReduceLogSumExp", "ReduceSumSquare", "ReduceL1", "ReduceProd"])
    keep = d.rng.random() < 0.6
    axes = random_axes(d, len(shape)) if d.rng.random() < 0.9 else None
    norm = sorted({a % len(shape) for a in axes}) if axes else list(range(len(shape)))
    out = [1 if i in norm else n for i, n in enumerate(shape)] if keep else \
        [n for i, n in enumerate(shape) if i not in norm]
    if op == "ReduceL2":
        name = positive(d, x, 0.25)[0]  # not at sqrt(0)
    if op == "ReduceProd":
        if math.prod(shape[i] for i in norm) > 8:
            return None  # a product of many factors under- or overflows
        name = d.node("Tanh", [name], shape)[0]
    if op == "ReduceSum":
        ins = [name] + ([d.ints(axes)] if axes else [])
        return d.node(op, ins, out, keepdims=int(keep))
    attrs = {"keepdims": int(keep)}
    if axes:
        attrs["axes"] = axes
    return d.node(op, [name], out, **attrs)


def op_softmax(d, x):
    if not x[1]:
        return None
    r = len(x[1])
    axis = d.rng.choice([-1, -1, r - 1, d.rng.randint(-r, r - 1)])
    return d.node(d.rng.choice(["Softmax", "LogSoftmax"]), [x[0]], x[1], axis=axis)


def op_layernorm(d, x):
    if not x[1]:
        return None
    r = len(x[1])
    axis = d.rng.choice([-1, -1, d.rng.randint(-r, r - 1)])
    normalized = x[1][axis % r:]
    ins = [x[0], d.data(normalized)[0]]
    if d.rng.random() < 0.7:
        ins.append(d.data(normalized)[0])
    return d.node("LayerNormalization", ins, x[1], axis=axis,
                  epsilon=d.rng.choice([1e-5, 1e-3]))


def op_matmul(d, x):
    name, shape = x
    if not shape:
        return None
    k = shape[-1]
    n = d.rng.choice(SIZES)
    if len(shape) == 2 and d.rng.random() < 0.3:
        trans_b = d.rng.random() < 0.5
        b = d.data([n, k] if trans_b else [k, n], scale=k ** -0.5)
        ins = [name, b[0]]
        if d.rng.random() < 0.7:
            ins.append(d.data(d.rng.choice([[n], [1, n], [shape[0], n], [shape[0], 1]]))[0])
        return d.node("Gemm", ins, [shape[0], n], transB=int(trans_b),
                      alpha=d.rng.choice([1.0, 0.5]), beta=d.rng.choice([1.0, 2.0]))
    if len(shape) >= 2 and d.rng.random() < 0.25:
        # Batched right operand (broadcast over x's leading dimensions).
        lead = shape[-3:-2] if len(shape) >= 3 else []
        w = d.data(lead + [k, n], scale=k ** -0.5)
    else:
        w = d.data([k, n], scale=k ** -0.5)
    out = shape[:-1] + [n]
    if len(w[1]) > 2:
        out = broadcast_shape(shape[:-2], w[1][:-2]) + [shape[-2], n]
    if math.prod(out) > MAX_ELEMENTS:
        return None
    return d.node("MatMul", [name, w[0]], out)


def op_layout(d, x):
    name, shape = x
    rng = d.rng
    op = rng.choice(["Transpose", "Reshape", "Flatten", "Unsqueeze", "Squeeze", "Slice",
                     "Concat", "Pad", "Expand", "Tile", "Split", "CumSum"])
    r = len(shape)
    if op == "Transpose" and r >= 2:
        perm = list(range(r))
        rng.shuffle(perm)
        return d.node(op, [name], [shape[p] for p in perm], perm=perm)
    if op == "Reshape" and r >= 1:
        total = math.prod(shape)
        if rng.random() < 0.5 or total == 1:
            new = [total] if rng.random() < 0.5 else [-1]
            if r >= 2 and rng.random() < 0.5:
                new = shape[:-2] + [shape[-2] * shape[-1]]
        else:
            f = [p for p in range(2, total + 1) if total % p == 0]
            p = rng.choice(f)
            new = [p, total // p] if rng.random() < 0.5 else [p, -1]
        out = [total // math.prod([n for n in new if n != -1]) if n == -1 else n for n in new]
        return d.node(op, [name, d.ints(new)], out)
    if op == "Flatten":
        axis = rng.randint(0, r)
        return d.node(op, [name], [math.prod(shape[:axis]), math.prod(shape[axis:])], axis=axis)
    if op == "Unsqueeze" and r < 4:
        axis = rng.randint(-(r + 1), r)
        out = list(shape)
        out.insert(axis % (r + 1), 1)
        return d.node(op, [name, d.ints([axis])], out)
    if op == "Squeeze" and 1 in shape:
        axes = [i for i, n in enumerate(shape) if n == 1]
        return d.node(op, [name, d.ints(axes)], [n for n in shape if n != 1])
    if op == "Slice" and r >= 1:
        axis = rng.randrange(r)
        n = shape[axis]
        if rng.random() < 0.3 and n > 1:
            start, end, step = n - 1, -n - 1, -rng.choice([1, 2])  # backwards, to the start
            size = len(range(start, -1, step))
        else:
            start = rng.randint(0, max(0, n - 1))
            end = rng.randint(start + 1, n) if n > start else n
            step = rng.choice([1, 1, 2])
            size = len(range(start, end, step))
            if rng.random() < 0.3:
                start -= n  # the same element, counted from the end
        out = list(shape)
        out[axis] = size
        return d.node(op, [name, d.ints([start]), d.ints([end]), d.ints([axis]),
                           d.ints([step])], out)
    if op == "Concat" and r >= 1:
        axis = rng.randrange(r)
        other = list(shape)
        other[axis] = rng.choice([1, 2, 3])
        if rng.random() < 0.3:
            y = (name, shape)  # a value concatenated with itself
        else:
            y = d.data(other)
        out = list(shape)
        out[axis] += y[1][axis]
        if math.prod(out) > MAX_ELEMENTS:
            return None
        ins = [name, y[0]] if rng.random() < 0.5 else [y[0], name]
        return d.node(op, ins, out, axis=axis - r if rng.random() < 0.3 else axis)
    if op == "Pad" and r >= 1:
        mode = rng.choice(["constant", "reflect", "edge"])
        pads = [rng.choice([0, 0, 1, 2]) for _ in range(2 * r)]
        if mode == "reflect":
            pads = [min(p, shape[i % r] - 1) for i, p in enumerate(pads)]
        out = [shape[i] + pads[i] + pads[i + r] for i in range(r)]
        if math.prod(out) > MAX_ELEMENTS:
            return None
        ins = [name, d.ints(pads)]
        if mode == "constant" and rng.random() < 0.5:
            ins.append(d.scalar(rng.choice([0.5, -1.0])))
        return d.node(op, ins, out, mode=mode)
    if op == "Expand" and r >= 1 and 1 in shape:
        out = [rng.choice([2, 3]) if n == 1 else n for n in shape]
        if math.prod(out) > MAX_ELEMENTS:
            return None
        return d.node(op, [name, d.ints(out)], out)
    if op == "Tile" and r >= 1:
        reps = [rng.choice([1, 1, 2]) for _ in shape]
        out = [n * k for n, k in zip(shape, reps)]
        if math.prod(out) > MAX_ELEMENTS:
            return None
        return d.node(op, [name, d.ints(reps)], out)
    if op == "Split" and r >= 1:
        axis = rng.randrange(r)
        if shape[axis] < 2:
            return None
        first = rng.randint(1, shape[axis] - 1)
        sizes = [first, shape[axis] - first]
        outs = d.node(op, [name, d.ints(sizes)], None, outputs=2, axis=axis)
        for o, n in zip(outs, sizes):
            s = list(shape)
            s[axis] = n
            d.values.append((o, s))
        return d.values[-1 if rng.random() < 0.5 else -2]
    if op == "CumSum" and r >= 1:
        axis = rng.randint(-r, r - 1)
        return d.node(op, [name, d.ints(axis)], shape,
                      exclusive=rng.choice([0, 1]), reverse=rng.choice([0, 1]))
    return None


# Decomposed forms as exporters write them; dtcc's graph passes recognize
# several of them (GELU, the norms, softmax, attention).
def motif_gelu(d, x):
    name, shape = x
    if d.rng.random() < 0.5:
        a = d.node("Div", [name, d.scalar(1.4142135)], shape)
        b = d.node("Erf", [a[0]], shape)
        c = d.node("Add", [b[0], d.scalar(1.0)], shape)
        e = d.node("Mul", [name, c[0]], shape)
        return d.node("Mul", [e[0], d.scalar(0.5)], shape)
    p = d.node("Pow", [name, d.constant(3.0)], shape)
    q = d.node("Mul", [p[0], d.scalar(0.044715)], shape)
    s = d.node("Add", [name, q[0]], shape)
    t = d.node("Mul", [s[0], d.scalar(0.7978846)], shape)
    u = d.node("Tanh", [t[0]], shape)
    v = d.node("Add", [u[0], d.scalar(1.0)], shape)
    w = d.node("Mul", [name, v[0]], shape)
    return d.node("Mul", [w[0], d.scalar(0.5)], shape)


def motif_norm(d, x):
    name, shape = x
    if not shape:
        return None
    r = len(shape)
    axes = [-1] if d.rng.random() < 0.7 else [d.rng.randint(0, r - 1)]
    reduced = [1 if i in [a % r for a in axes] else n for i, n in enumerate(shape)]
    w = [n if i in [a % r for a in axes] else 1 for i, n in enumerate(shape)]
    w = w[min(a % r for a in axes):]
    if d.rng.random() < 0.5:  # layer norm
        m = d.node("ReduceMean", [name], reduced, axes=axes, keepdims=1)
        c = d.node("Sub", [name, m[0]], shape)
        sq = d.node("Pow", [c[0], d.constant(2.0)], shape)
    else:  # RMS norm
        c = x
        sq = d.node("Mul", [name, name], shape)
    v = d.node("ReduceMean", [sq[0]], reduced, axes=axes, keepdims=1)
    e = d.node("Add", [v[0], d.scalar(1e-5)], reduced)
    s = d.node("Sqrt", [e[0]], reduced)
    if d.rng.random() < 0.5:
        y = d.node("Div", [c[0], s[0]], shape)
    else:
        rs = d.node("Reciprocal", [s[0]], reduced)
        y = d.node("Mul", [c[0], rs[0]], shape)
    y = d.node("Mul", [y[0], d.data(w)[0]], shape)
    if d.rng.random() < 0.6:
        y = d.node("Add", [y[0], d.data(w)[0]], shape)
    return y


def motif_softmax(d, x):
    name, shape = x
    if not shape:
        return None
    axis = -1 if d.rng.random() < 0.7 else d.rng.randrange(len(shape))
    reduced = list(shape)
    reduced[axis] = 1
    m = d.node("ReduceMax", [name], reduced, axes=[axis], keepdims=1)
    c = d.node("Sub", [name, m[0]], shape)
    e = d.node("Exp", [c[0]], shape)
    s = d.node("ReduceSum", [e[0], d.ints([axis])], reduced, keepdims=1)
    return d.node("Div", [e[0], s[0]], shape)


def motif_silu(d, x):
    s = d.node("Sigmoid", [x[0]], x[1])
    return d.node("Mul", [x[0], s[0]] if d.rng.random() < 0.5 else [s[0], x[0]], x[1])


def motif_attention(d, x):
    """Multi-head self-attention as a traced PyTorch module writes it:
    projections, heads by Reshape + Transpose, scaled scores (a causal
    mask added or selected), softmax, the weighted sum, heads merged."""
    rng = d.rng
    heads = rng.choice([1, 2, 4])
    dh = rng.choice([1, 2, 3, 4])
    e = heads * dh
    b, t = rng.choice([1, 2]), rng.choice([1, 2, 3, 5, 9, 17])
    if b * t * e > MAX_ELEMENTS // 2:
        return None
    if x[1] == [b, t, e]:
        h = x
    elif math.prod(x[1]) * b * t * e > 8 * MAX_ELEMENTS:
        return None
    else:
        flat = d.node("Reshape", [x[0], d.ints([-1])], [math.prod(x[1])])
        w = d.data([math.prod(x[1]), b * t * e], scale=math.prod(x[1]) ** -0.5)
        h = d.node("Reshape", [d.node("MatMul", [flat[0], w[0]], [b * t * e])[0],
                               d.ints([b, t, e])], [b, t, e])

    def heads_of(v, transpose_last=False):
        p = d.node("MatMul", [v[0], d.data([e, e], scale=e ** -0.5)[0]], [b, t, e])
        r = d.node("Reshape", [p[0], d.ints([b, t, heads, dh])], [b, t, heads, dh])
        perm = [0, 2, 3, 1] if transpose_last else [0, 2, 1, 3]
        return d.node("Transpose", [r[0]], [[b, t, heads, dh][i] for i in perm], perm=perm)
    q, k, v = heads_of(h), heads_of(h, True), heads_of(h)
    s = d.node("MatMul", [q[0], k[0]], [b, heads, t, t])
    s = d.node(rng.choice(["Div", "Mul"]), [s[0], d.scalar(
        math.sqrt(dh) if rng.random() < 0.5 else 1 / math.sqrt(dh))], s[1])
    if rng.random() < 0.5:
        mask = np.triu(np.full((t, t), -1e4 if rng.random() < 0.5 else -np.inf, np.float32), 1)
        m = d.name("mask")
        d.inits.append(numpy_helper.from_array(mask, m))
        if np.isinf(mask).any():
            ok = d.name("keep")
            d.inits.append(numpy_helper.from_array(~np.isinf(mask), ok))
            s = d.node("Where", [ok, s[0], d.scalar(-np.inf)], s[1])
        else:
            s = d.node("Add", [s[0], m], s[1])
    p = d.node("Softmax", [s[0]], s[1], axis=-1)
    o = d.node("MatMul", [p[0], v[0]], [b, heads, t, dh])
    o = d.node("Transpose", [o[0]], [b, t, heads, dh], perm=[0, 2, 1, 3])
    return d.node("Reshape", [o[0], d.ints([b, t, e])], [b, t, e])


def spatial(d, x):
    """x as [N, C, spatial...] (rank 3 or 4), reshaped there if needed."""
    name, shape = x
    if len(shape) in (3, 4) and shape[1] <= 8:
        return x
    total = math.prod(shape)
    for n, c in ((2, 2), (1, 2), (2, 1), (1, 1)):
        rest = total // (n * c)
        if total % (n * c) == 0 and rest >= 4:
            side = int(math.isqrt(rest))
            dims = [side, rest // side] if side * (rest // side) == rest and side > 1 else [rest]
            out = [n, c] + dims
            return d.node("Reshape", [name, d.ints(out)], out)
    return None


def conv_size(n, k, stride, pad, dilation):
    return (n + pad - dilation * (k - 1) - 1) // stride + 1


def op_conv(d, x):
    """Conv (groups, strides, dilations, pads), ConvTranspose, pooling."""
    x = spatial(d, x)
    if x is None:
        return None
    rng = d.rng
    name, shape = x
    n, c, dims = shape[0], shape[1], shape[2:]
    op = rng.choice(["Conv", "Conv", "ConvTranspose", "MaxPool", "AveragePool",
                     "GlobalAveragePool", "GlobalMaxPool"])
    if op.startswith("Global"):
        return d.node(op, [name], [n, c] + [1] * len(dims))
    kernel = [rng.choice([1, 2, 3]) for _ in dims]
    kernel = [min(k, m) for k, m in zip(kernel, dims)]
    strides = [rng.choice([1, 1, 2]) for _ in dims]
    pads = [rng.choice([0, 0, 1]) for _ in range(2 * len(dims))]
    pads = [min(p, kernel[i % len(dims)] - 1) for i, p in enumerate(pads)]
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads}
    if op in ("MaxPool", "AveragePool"):
        out = [conv_size(m, k, st, pads[i] + pads[i + len(dims)], 1)
               for i, (m, k, st) in enumerate(zip(dims, kernel, strides))]
        if min(out) < 1:
            return None
        if op == "AveragePool":
            attrs["count_include_pad"] = rng.choice([0, 1])
        return d.node(op, [name], [n, c] + out, **attrs)
    dilations = [rng.choice([1, 1, 2]) if k > 1 else 1 for k in kernel]
    group = rng.choice([g for g in (1, 1, 2, c) if c % g == 0])
    m = group * rng.choice([1, 2, 3])
    if op == "Conv":
        out = [conv_size(mm, k, st, pads[i] + pads[i + len(dims)], dl)
               for i, (mm, k, st, dl) in enumerate(zip(dims, kernel, strides, dilations))]
        w = d.data([m, c // group] + kernel, scale=(c // group * math.prod(kernel)) ** -0.5)
    else:
        out = [(mm - 1) * st - pads[i] - pads[i + len(dims)] + dl * (k - 1) + 1
               for i, (mm, k, st, dl) in enumerate(zip(dims, kernel, strides, dilations))]
        w = d.data([c, m // group] + kernel, scale=(c * math.prod(kernel)) ** -0.5)
    if min(out) < 1 or n * m * math.prod(out) > MAX_ELEMENTS:
        return None
    ins = [name, w[0]]
    if rng.random() < 0.6:
        ins.append(d.data([m])[0])
    attrs.update(dilations=dilations, group=group)
    return d.node(op, ins, [n, m] + out, **attrs)


def op_channel_norm(d, x):
    """BatchNormalization (inference, or training: the batch's statistics)
    and InstanceNormalization over x's channels (dimension 1)."""
    name, shape = x
    if len(shape) < 2:
        return None
    c = shape[1]
    if d.rng.random() < 0.3:
        return d.node("InstanceNormalization", [name, d.data([c])[0], d.data([c])[0]], shape,
                      epsilon=1e-5)
    # The running statistics feed nothing else: dtcc keeps them as state in
    # training (not trainable), and ONNX Runtime updates them in place in
    # training mode, so a later reader sees the new value (ONNX's values
    # are immutable; dtcc's reader sees the initializer's).
    mean = d.data([c], trainable=False, pool=False)
    var = d.data([c], low=0.5, trainable=False, pool=False)
    training = d.rng.random() < 0.5 and math.prod(shape) // c > 1
    ins = [name, d.data([c])[0], d.data([c])[0], mean[0], var[0]]
    # In training mode the running statistics are outputs too (unused).
    return d.node("BatchNormalization", ins, shape, outputs=3 if training else 1,
                  epsilon=1e-5, momentum=0.9, training_mode=int(training))


def op_gather(d, x):
    """Gather of rows (an embedding's lookup) along any axis, indices
    negative as well."""
    name, shape = x
    if not shape:
        return None
    axis = d.rng.randrange(len(shape))
    n = shape[axis]
    idx_shape = d.rng.choice([[], [3], [2, 2]])
    idx = np.asarray(np.random.RandomState(d.rng.randint(0, 1 << 30)).randint(
        -n, n, size=idx_shape), np.int64)
    out = shape[:axis] + idx_shape + shape[axis + 1:]
    if math.prod(out) > MAX_ELEMENTS:
        return None
    return d.node("Gather", [name, d.ints(idx)], out, axis=axis - len(shape)
                  if d.rng.random() < 0.3 else axis)


def op_einsum(d, x):
    name, shape = x
    rng = d.rng
    if len(shape) == 2:
        i, j = shape
        eq, other = rng.choice([("ij->ji", None), ("ij->i", None), ("ij,jk->ik", [j, None]),
                                ("ij,ij->ij", [i, j]), ("ij,j->i", [j])])
    elif len(shape) == 3:
        b, i, j = shape
        eq, other = rng.choice([("bij,bjk->bik", [b, j, None]), ("bij->bji", None),
                                ("bij->b", None), ("bij,j->bi", [j])])
    else:
        return None
    ins = [name]
    if other is not None:
        k = rng.choice(SIZES)
        w = d.data([k if n is None else n for n in other], scale=(shape[-1]) ** -0.5)
        ins.append(w[0])
    letters = dict(zip(eq.split("->")[0].replace(",", ""), shape + (w[1] if other else [])))
    out = [letters[c] for c in eq.split("->")[1]]
    if math.prod(out) > MAX_ELEMENTS:
        return None
    return d.node("Einsum", ins, out, equation=eq)


def op_image(d, x):
    """DepthToSpace, SpaceToDepth, Resize (nearest, linear) on [N, C, H, W]."""
    x = spatial(d, x)
    if x is None or len(x[1]) != 4:
        return None
    name, (n, c, h, w) = x
    rng = d.rng
    op = rng.choice(["DepthToSpace", "SpaceToDepth", "Resize", "Resize"])
    if op == "DepthToSpace" and c % 4 == 0:
        return d.node(op, [name], [n, c // 4, 2 * h, 2 * w], blocksize=2,
                      mode=rng.choice(["DCR", "CRD"]))
    if op == "SpaceToDepth" and h % 2 == 0 and w % 2 == 0:
        return d.node(op, [name], [n, 4 * c, h // 2, w // 2], blocksize=2)
    if op == "Resize" and 4 * math.prod(x[1]) <= MAX_ELEMENTS:
        scales = d.name("scales")
        d.inits.append(numpy_helper.from_array(np.asarray([1, 1, 2, 2], np.float32), scales))
        mode = rng.choice(["nearest", "linear"])
        attrs = {"mode": mode, "coordinate_transformation_mode": rng.choice(
            ["half_pixel", "asymmetric", "align_corners"] if mode == "linear" else
            ["half_pixel", "asymmetric"])}
        if mode == "nearest":
            attrs["nearest_mode"] = rng.choice(["floor", "round_prefer_floor"])
        return d.node(op, [name, "", scales], [n, c, 2 * h, 2 * w], **attrs)
    return None


def op_select(d, x):
    """GatherElements (indices negative as well), TopK's values,
    LpNormalization, MeanVarianceNormalization."""
    name, shape = x
    if not shape:
        return None
    rng = d.rng
    r = len(shape)
    axis = rng.randrange(r)
    op = rng.choice(["GatherElements", "TopK", "LpNormalization", "MeanVarianceNormalization"])
    if op == "GatherElements":
        ishape = list(shape)
        ishape[axis] = rng.randint(1, shape[axis])
        idx = np.random.RandomState(rng.randint(0, 1 << 30)).randint(
            -shape[axis], shape[axis], size=ishape)
        return d.node(op, [name, d.ints(idx)], ishape, axis=axis)
    if op == "TopK":
        k = rng.randint(1, shape[axis])
        out = list(shape)
        out[axis] = k
        values = d.node(op, [name, d.ints([k])], None, outputs=2, axis=axis,
                        largest=rng.choice([0, 1]), sorted=1)[0]
        d.values.append((values, out))
        return d.values[-1]
    if op == "LpNormalization":
        return d.node(op, [name], shape, axis=axis - r if rng.random() < 0.3 else axis, p=2)
    if r >= 2:
        axes = random_axes(d, r)
        return d.node(op, [name], shape, axes=axes)
    return None


def op_recurrent(d, x):
    """LSTM, GRU and RNN over x as [sequence, batch, features], forward,
    reverse or bidirectional: their Y ([sequence, directions, batch,
    hidden])."""
    name, shape = x
    if len(shape) != 3 or shape[0] > 9:
        return None
    rng = d.rng
    seq, batch, features = shape
    op = rng.choice(["LSTM", "GRU", "RNN"])
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    hidden = rng.choice([1, 2, 3, 5])
    direction = rng.choice(["forward", "reverse", "bidirectional"])
    dirs = 2 if direction == "bidirectional" else 1
    out = [seq, dirs, batch, hidden]
    if math.prod(out) > MAX_ELEMENTS:
        return None
    ins = [name, d.data([dirs, gates * hidden, features], scale=features ** -0.5)[0],
           d.data([dirs, gates * hidden, hidden], scale=hidden ** -0.5)[0]]
    if rng.random() < 0.7:
        ins.append(d.data([dirs, 2 * gates * hidden], scale=0.5)[0])
    attrs = {"hidden_size": hidden, "direction": direction}
    if op == "GRU":
        attrs["linear_before_reset"] = rng.choice([0, 1])
    return d.node(op, ins, out, **attrs)


RULES = [(op_unary, 6), (op_binary, 6), (op_reduce, 2), (op_softmax, 1), (op_layernorm, 1),
         (op_matmul, 2), (op_layout, 4), (motif_gelu, 1), (motif_norm, 1),
         (motif_softmax, 1), (motif_silu, 1), (motif_attention, 1), (op_conv, 2),
         (op_channel_norm, 1), (op_gather, 1), (op_einsum, 1), (op_image, 1), (op_select, 1),
         (op_recurrent, 1)]


def draw_graph(rng, max_nodes, batch=False):
    """A random graph and its inputs' values; with `batch` its first input
    has an even dimension 0, the batch a plan's dp axis splits."""
    d = Draw(rng)
    shape = d.shape()
    if batch:
        shape[0] = rng.choice([2, 4])
    d.data(shape, trainable=True)
    steps = rng.randint(1, max_nodes)
    rules, weights = zip(*RULES)
    tries = 0
    while steps > 0 and tries < 50:
        tries += 1
        rule = rng.choices(rules, weights)[0]
        mark = d.mark()
        out = rule(d, d.pick())
        if out is None:
            d.undo(mark)  # a rule that gave up may have drawn nodes
            continue
        steps -= 1
    if not d.nodes:
        op_unary(d, d.values[-1])
    produced = {o for n in d.nodes for o in n.output}
    consumed = {i for n in d.nodes for i in n.input}
    # Outputs: the last value and, now and then, an intermediate one that
    # others consume too (a fused region's value that must still be written).
    outs = [next(v for v in reversed(d.values) if v[0] in produced)]
    inner = [v for v in d.values if v[0] in produced and v[0] in consumed]
    if inner and rng.random() < 0.3:
        outs.append(rng.choice(inner))
    outs = list(dict((n, s) for n, s in outs).items())
    graph = helper.make_graph(
        d.nodes, "fuzz", d.inputs,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outs], d.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model, d.feeds


# Runs in the benchmarks' virtual environment (ONNX Runtime): for each test
# directory, the expected outputs, or why the graph is dropped.
ORT_SCRIPT = r"""
import json, os, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
opts = ort.SessionOptions()
opts.intra_op_num_threads = 1
opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def first(e):
    return (str(e).splitlines() or [""])[0][:200]


def verdict(test):
    ds = os.path.join(test, "test_data_set_0")
    model = onnx.load(os.path.join(test, "model.onnx"))
    names = [i.name for i in model.graph.input]
    feeds = {n: numpy_helper.to_array(onnx.load_tensor(os.path.join(ds, f"input_{k}.pb")))
             for k, n in enumerate(names)}
    try:
        outs = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception as e:
        return "onnxruntime: " + first(e)
    # ONNX Runtime's float32 outputs are the reference only where they are
    # within 1e-4 (and 1e-8 absolute: ten times tighter than the runner's
    # comparison) of the float64 model's (ONNX Runtime's, or where it lacks
    # a float64 kernel onnx's reference evaluator) and move by less under a
    # 1e-6 relative nudge of the inputs and initializers: an ill-conditioned graph tests
    # rounding, and ONNX Runtime's own float32 kernels round more than
    # dtcc's in places (LayerNormalization's variance as E[x^2] - E[x]^2).
    try:
        wide = ort.InferenceSession(os.path.join(test, "float64.onnx"), opts,
                                    providers=["CPUExecutionProvider"]).run(
            None, {n: a.astype(np.float64) for n, a in feeds.items()})
    except Exception:  # ORT lacks some float64 kernels: onnx's reference
        try:
            from onnx.reference import ReferenceEvaluator
            wide = ReferenceEvaluator(os.path.join(test, "float64.onnx")).run(
                None, {n: a.astype(np.float64) for n, a in feeds.items()})
        except Exception as e:
            return "no float64 reference: " + first(e)
    try:
        nudged = ort.InferenceSession(os.path.join(test, "nudged.onnx"), opts,
                                      providers=["CPUExecutionProvider"]).run(None, {})
    except Exception as e:
        return "onnxruntime, nudged: " + first(e)
    bad = None
    for k, a in enumerate(outs):
        finite = np.isfinite(a)
        if not finite.all():
            bad = "not finite"
        for label, w in (("float64", wide[k]), ("nudged inputs", nudged[k])):
            if np.shape(w) != np.shape(a):
                bad = "%s output of shape %s, not %s" % (label, list(np.shape(w)), list(a.shape))
            elif not np.allclose(a, w, rtol=1e-4, atol=1e-8, equal_nan=True):
                bad = "ill-conditioned: %s differs by %.2g" % (label, np.max(np.abs(a - w)))
    if bad:
        return bad
    for k, a in enumerate(outs):
        t = numpy_helper.from_array(a, model.graph.output[k].name)
        with open(os.path.join(ds, f"output_{k}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    return "ok"


verdicts = {}
for test in sys.argv[1:]:
    try:
        verdicts[test] = verdict(test)
    except Exception as e:  # a reference that cannot run this graph
        verdicts[test] = "reference: %s: %s" % (type(e).__name__, first(e))
print(json.dumps(verdicts))
"""


def marginal(why):
    """Whether a failed check looks like float32 rounding rather than a
    wrong result: a float32 gradient within 4x its tolerance where the
    float64 gradient passed (grad_check compares float64 first), or a float32
    loss that differs from the float64 one only below 1e-6. Both come from
    normalizing values that are constant in exact arithmetic (a Max with a
    large parameter clamps a whole row: its variance is rounding noise,
    which 1/sqrt(eps) amplifies), which the forward checks cannot see.
    Kept in OUT/marginal/, not counted as findings."""
    m = re.match(r"float32 gradient along .*: dtcc (\S+), finite differences (\S+) "
                 r"\(tolerance (\S+)\)", why)
    if m:
        gu, fd, tol = (float(v) for v in m.groups())
        return abs(gu - fd) <= 4 * tol
    m = re.match(r"train_step loss (\S+) \(float32\) differs from the float64 loss (\S+)", why)
    if m:
        return max(abs(float(v)) for v in m.groups()) < 1e-6
    return False


def nudge(tensors, fixed, rng):
    """Multiplies each float32 TensorProto of `tensors` not named in `fixed`
    (those of a fixed type: Resize's scales) by 1 + 1e-6 N(0, 1), element by
    element, in place: a graph whose results that moves is ill-conditioned."""
    for t in tensors:
        if t.data_type == TensorProto.FLOAT and t.name not in fixed:
            a = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array(
                np.asarray(a * (1 + 1e-6 * rng.randn(*a.shape)), np.float32), t.name))


def run_conformance(args, root, suite, jobs):
    """The conformance runner over the node-test folders in `root` (no
    expected-pass lists: every failure is printed), its CompletedProcess."""
    empty = os.path.join(root, "none.txt")
    open(empty, "w").close()
    return subprocess.run(
        [sys.executable, os.path.join(CONFORMANCE, "run_onnx_node_tests.py"),
         "--dtcc", args.dtcc, "--data", root, "--suite", suite, "--jobs", str(jobs),
         "--expected-node", empty, "--expected-grad", empty, "--verbose"],
        capture_output=True, text=True)


F32_GRADIENT = re.compile(r"float32 gradient along (\S+): dtcc (\S+), finite differences "
                          r"(\S+) \(tolerance (\S+)\)")


def rounding_sensitive(args, test, why):
    """Whether a float32 gradient failure (its float64 gradient passed) is
    float32's conditioning rather than a wrong result: the same graph with
    its inputs and float initializers nudged by 1e-6 relative (as for ONNX
    Runtime's conditioning check) passes, fails elsewhere, or gives that
    coordinate a float32 gradient that moved by more than the tolerance.
    (A channel normalized over two values 0.007 apart near 1.0 has a
    1/sigma of 200: x - mean loses 5 digits to cancellation, and its
    gradient, exactly 0 for a bias before the norm, is 2e-3 of rounding.)
    The copy keeps the test's name, which seeds the sampled probes."""
    m = F32_GRADIENT.match(why)
    if not m:
        return False
    where, got, tol = m.group(1), float(m.group(2)), float(m.group(4))
    root = tempfile.mkdtemp(prefix="nudge.", dir=args.out)
    try:
        copy = os.path.join(root, os.path.basename(test))
        shutil.copytree(test, copy)
        rng = np.random.RandomState(1)
        model = onnx.load(os.path.join(copy, "model.onnx"))
        fixed = grad_check.fixed_type_values(model)
        nudge(model.graph.initializer, fixed, rng)
        onnx.save(model, os.path.join(copy, "model.onnx"))
        for pb in glob.glob(os.path.join(copy, "test_data_set_0", "input_*.pb")):
            t = TensorProto()
            with open(pb, "rb") as f:
                t.ParseFromString(f.read())
            nudge([t], fixed, rng)
            with open(pb, "wb") as f:
                f.write(t.SerializeToString())
        run = run_conformance(args, root, "all", 1)
        again = re.search(r"FAILED test_fuzz_\d+: (.*)", run.stdout)
        if not again:
            return "passed" in run.stdout
        m = F32_GRADIENT.match(again.group(1))
        return bool(m) and (m.group(1) != where or abs(float(m.group(2)) - got) > tol)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_test(root, index, model, feeds):
    test = os.path.join(root, f"test_fuzz_{index:05d}")
    ds = os.path.join(test, "test_data_set_0")
    os.makedirs(ds)
    onnx.save(model, os.path.join(test, "model.onnx"))
    # ONNX Runtime's float64 run, and one whose inputs and float
    # initializers (not those of a fixed type: Resize's scales) are nudged
    # by 1e-6 relative, the inputs made initializers: to drop
    # ill-conditioned graphs (both removed before the runner sees the folder).
    onnx.save(grad_check.to_float64(model), os.path.join(test, "float64.onnx"))
    nudged = onnx.ModelProto()
    nudged.CopyFrom(model)
    g = nudged.graph
    g.initializer.extend(numpy_helper.from_array(feeds[vi.name], vi.name) for vi in g.input)
    del g.input[:]
    nudge(g.initializer, grad_check.fixed_type_values(model), np.random.RandomState(index))
    onnx.save(nudged, os.path.join(test, "nudged.onnx"))
    for k, vi in enumerate(model.graph.input):
        t = numpy_helper.from_array(feeds[vi.name], vi.name)
        with open(os.path.join(ds, f"input_{k}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    return test


# Plans the --plans mode trains under (compile flags, separated by ';'),
# each against one device.
PLANS = "--mesh dp=2;--mesh dp=2 --zero 1;--mesh dp=2 --zero 3;--mesh tp=2;--mesh dp=2,tp=2"
PLAN_STEPS = 3


def plan_ranks(flags):
    mesh = flags[flags.index("--mesh") + 1] if "--mesh" in flags else ""
    return math.prod(int(a.split("=")[1]) for a in mesh.split(",") if "=" in a) or 1


def training_graph(model, feeds, rng):
    """The graph trained on its first input (the batch) with every other
    input a parameter: loss = sum(output * R) for a fixed random R (frozen).
    None when the batch cannot be split in two or nothing is trainable."""
    g = model.graph
    data = g.input[0]
    shape = [dim.dim_value for dim in data.type.tensor_type.shape.dim]
    if not shape or shape[0] % 2:
        return None
    for vi in list(g.input[1:]):
        g.initializer.append(numpy_helper.from_array(feeds[vi.name], vi.name))
    del g.input[1:]
    if not any(t.data_type == TensorProto.FLOAT for t in g.initializer):
        return None  # nothing to train
    out = g.output[0]
    r = np.random.RandomState(rng.randint(0, 1 << 30)).randn(
        *[dim.dim_value for dim in out.type.tensor_type.shape.dim])
    g.initializer.append(numpy_helper.from_array(np.asarray(r, np.float32), "loss_weights"))
    g.node.append(helper.make_node("Mul", [out.name, "loss_weights"], ["weighted"]))
    g.node.append(helper.make_node("ReduceSum", ["weighted"], ["loss"], keepdims=0))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    return model, data.name, shape


def check_plans(args, rng, work, model, feeds):
    """Trains the graph PLAN_STEPS SGD steps on one device and under each
    plan (mpirun, oversubscribed): (None or a finding's text, the
    outcomes by plan). Losses must agree within 1e-4 relative (the order of
    sums differs between plans); a compile that fails with a diagnostic is
    a refusal, not a finding."""
    t = training_graph(model, feeds, rng)
    if t is None:
        return None, {}
    model, data, shape = t
    path = os.path.join(work, "model.onnx")
    onnx.save(model, path)
    batches = e2e_common.write_batches(
        [{data: np.asarray(np.random.RandomState(s).randn(*shape), np.float32)}
         for s in range(PLAN_STEPS)], os.path.join(work, "batches"))
    common = ["--train", "--optimizer", "sgd", "--lr", "0.001", "--frozen", "loss_weights"]
    outcome, losses, problems = {}, {}, []
    for label in ["one device"] + args.plans.split(";"):
        flags = [] if label == "one device" else label.split()
        exe = os.path.join(work, f"train{len(outcome)}")
        c = subprocess.run([args.dtcc, "compile", path, "-o", exe] + common + flags,
                           capture_output=True, text=True, timeout=300)
        why = classify(c)
        if why:
            problems.append(f"{label}: compile: {why}: {c.stderr.strip()[-300:]}")
            outcome[label] = "finding"
            continue
        if c.returncode:
            line = next((l for l in c.stderr.splitlines() if "error" in l), "")
            outcome[label] = "refused: " + re.sub(r"/\S+|[0-9]+", "_", line)[:120]
            continue
        dump = os.path.join(work, f"dump{len(outcome)}")
        p = e2e_common.launch(exe, plan_ranks(flags), ["--batches", batches, "--steps",
                                                       str(PLAN_STEPS), "--dump-outputs", dump])
        if p.returncode:
            problems.append(f"{label}: run exited {p.returncode}: {(p.stdout + p.stderr)[-400:]}")
            outcome[label] = "finding"
            continue
        losses[label] = np.array([float(numpy_helper.to_array(onnx.load_tensor(
            os.path.join(dump, f"step_{k}", "loss.pb")))) for k in range(1, PLAN_STEPS + 1)])
        outcome[label] = "trained"
    ref = losses.get("one device")
    if ref is not None and np.isfinite(ref).all():
        for label, got in losses.items():
            err = np.abs(got - ref) / np.maximum(np.abs(ref), 1e-3)
            if not (err <= 1e-4).all():
                problems.append(f"{label}: losses {got.tolist()} against one device's "
                                f"{ref.tolist()}")
                outcome[label] = "finding"
    return ("\n".join(problems) or None), outcome


def fuzz_plans(args, rng, findings, deadline):
    outcomes, graphs, found = {}, 0, 0
    while time.time() < deadline and graphs < args.count:
        model, feeds = draw_graph(rng, args.nodes, batch=True)
        work = tempfile.mkdtemp(prefix="plans.", dir=args.out)
        finding, outcome = check_plans(args, rng, work, model, feeds)
        graphs += 1
        for label, what in outcome.items():
            outcomes[(label, what)] = outcomes.get((label, what), 0) + 1
        if finding:
            found += 1
            dest = os.path.join(findings, os.path.basename(work))
            shutil.copytree(work, dest)
            with open(os.path.join(dest, "finding.txt"), "w") as f:
                f.write(finding + "\n")
            print(f"finding: {dest}: {finding.splitlines()[0][:300]}", flush=True)
        shutil.rmtree(work)
        if graphs % 10 == 0:
            print(f"fuzz-graphs --plans: {graphs} graphs, {found} findings", flush=True)
    print(f"fuzz-graphs --plans: {graphs} graphs, {found} findings")
    for (label, what), n in sorted(outcomes.items()):
        print(f"  {label}: {what}: {n}")
    # A run in which some plan trained nothing checked nothing of it.
    idle = [label for label in ["one device"] + args.plans.split(";")
            if not outcomes.get((label, "trained"))]
    for label in idle:
        print(f"fuzz-graphs --plans: no graph trained under '{label}'")
    return 1 if found or idle else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--dtcc", default=os.path.join(REPO, "build", "bin", "dtcc"))
    ap.add_argument("--seconds", type=float, default=300, help="stop drawing after this long")
    ap.add_argument("--count", type=int, default=1 << 62,
                    help="or after this many graphs (--plans), whichever comes first")
    ap.add_argument("--out", default="/tmp/fuzz-graphs",
                    help="findings go to OUT/findings/, each graph a node-test folder")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=6,
                    help="at most this many drawing steps a graph (a step may add several nodes)")
    ap.add_argument("--batch", type=int, default=24, help="graphs checked per runner call")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--forward-only", action="store_true",
                    help="check the forward outputs only (no gradient check)")
    ap.add_argument("--python", default=os.path.join(cpu_compare.default_venv(), "bin", "python"),
                    help="a Python with onnxruntime (default: the benchmarks' venv)")
    ap.add_argument("--plans", nargs="?", const=PLANS, metavar="FLAGS;FLAGS;...",
                    help="instead: train each graph under these plans (compile flags, "
                         f"';' between plans; default \"{PLANS}\") and on one device, "
                         "and compare the losses (needs mpirun, not onnxruntime)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    findings = os.path.join(args.out, "findings")
    os.makedirs(findings, exist_ok=True)
    deadline = time.time() + args.seconds
    if args.plans:
        return fuzz_plans(args, rng, findings, deadline)
    if not os.path.exists(args.python):
        sys.exit(f"fuzz_graphs: no Python with onnxruntime at {args.python}; run a CPU "
                 "benchmark once (bench/train_gpt_cpu.py --quick makes the venv) or pass --python")
    stats = {"drawn": 0, "checked": 0, "passed": 0, "skipped": 0, "marginal": 0, "failed": 0}
    marginals = os.path.join(args.out, "marginal")
    os.makedirs(marginals, exist_ok=True)
    dropped, skipped = {}, {}
    index = 0
    while time.time() < deadline:
        root = tempfile.mkdtemp(prefix="batch.", dir=args.out)
        tests = []
        for _ in range(args.batch):
            model, feeds = draw_graph(rng, args.nodes)
            tests.append(write_test(root, index, model, feeds))
            index += 1
        stats["drawn"] += len(tests)
        p = subprocess.run([args.python, "-c", ORT_SCRIPT] + tests,
                           capture_output=True, text=True)
        if p.returncode:
            sys.exit("fuzz_graphs: the ONNX Runtime step failed:\n" + p.stderr[-2000:])
        verdicts = json.loads(p.stdout.strip().splitlines()[-1])
        for t, v in verdicts.items():
            os.remove(os.path.join(t, "float64.onnx"))
            os.remove(os.path.join(t, "nudged.onnx"))
            if v != "ok":
                key = re.sub(r"\d[\d.e+-]*", "N", v)[:100]
                dropped[key] = dropped.get(key, 0) + 1
                shutil.rmtree(t)
        kept = [t for t, v in verdicts.items() if v == "ok"]
        stats["checked"] += len(kept)
        if not kept:
            shutil.rmtree(root)
            continue
        run = run_conformance(args, root, "node" if args.forward_only else "all", args.jobs)
        failed = {}
        for line in run.stdout.splitlines():
            m = re.match(r"FAILED (test_fuzz_\d+): (.*)", line)
            if m:
                failed.setdefault(m.group(1), []).append(m.group(2))
            m = re.match(r"\[\d+/\d+\] (test_fuzz_\d+) \([^)]*\): (\w+)(?:, gradient (\w+)"
                         r"(?: \((.*)\))?)?", line)
            if m:
                states = [m.group(2)] + ([m.group(3)] if m.group(3) else [])
                if "skipped" in states and "failed" not in states:
                    why = re.sub(r"[0-9]+", "N", m.group(4) or "forward")[:100]
                    skipped[why] = skipped.get(why, 0) + 1
                    stats["skipped"] += 1
                elif "failed" not in states:
                    stats["passed"] += 1
        for t, why in failed.items():
            kind = "marginal" if marginal(why[0]) else "finding"
            if kind == "finding" and rounding_sensitive(args, os.path.join(root, t), why[0]):
                kind = "marginal"
                why = why + ["a 1e-6 nudge of the inputs and initializers moves this float32 gradient "
                             "by more than its tolerance (or clears it)"]
            stats["failed" if kind == "finding" else "marginal"] += 1
            dest = os.path.join(findings if kind == "finding" else marginals,
                                f"{os.path.basename(root)}-{t}")
            shutil.copytree(os.path.join(root, t), dest)
            with open(os.path.join(dest, "finding.txt"), "w") as f:
                f.write("\n".join(why) + "\n")
            ops = sorted({n.op_type for n in onnx.load(os.path.join(dest, "model.onnx")).graph.node})
            print(f"{kind}: {dest} ({','.join(ops)}): {why[0][:300]}", flush=True)
        shutil.rmtree(root)
        print(f"fuzz-graphs: {stats['drawn']} drawn, {stats['checked']} checked, "
              f"{stats['passed']} passed, {stats['skipped']} skipped, "
              f"{stats['marginal']} marginal, {stats['failed']} failed", flush=True)
    for label, table in (("dropped before dtcc", dropped), ("skipped by the runner", skipped)):
        for why, n in sorted(table.items(), key=lambda x: -x[1])[:8]:
            print(f"  {label}: {n:5d}  {why}")
    return 1 if stats["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
