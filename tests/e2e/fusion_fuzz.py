#!/usr/bin/python3
"""Random programs for fused regions: dtcc compile --fuse against --no-fuse.

Each program (one seed) is a random dgraph function over a tensor of shape
[rows..., C] (one or two row dimensions; C around the kernels' lane and
block sizes, or 24000, where a row region's buffers pass 256 KiB and the
function is grouped again without it) in f32, f64 or bf16: unary and binary elementwise ops (with
broadcast weights and splat constants), sums and maxima along the last
axis, the ops on their one value per row and its two forms ([rows...] and
[rows..., 1]), broadcasts back over the row, comparisons (with ties), the
logical ops of their masks and selects by them, softmax, log_softmax
and their gradients along the last axis, and layer and RMS norms over it
(their statistics values per row the program reads on). Some intermediate
values, values per row among them, are outputs too. Every op keeps its values finite
(logarithms of |x| + 1, square roots of |x|, quotients by |x| + 1).

The program is compiled with and without --fuse and run on the same
random inputs: every output within the tolerance of its type (f32 1e-5
relative, f64 1e-12, over max(|want|, 1e-3), beyond an absolute 1e-6, f64
1e-14, plus 1e-6 of the output's largest magnitude, f64 1e-14) of the
unfused program's; masks equal. A bf16 program is held to the same
program in f32 instead (regions round only what they write, the unfused
kernels every op's result): the fused outputs no further from it than
1.5x the unfused ones, plus 2^-8 of each output's largest value. The test also checks that the programs form row regions at
all (dtcc explain counts them). A failure prints the program's seed and
keeps its MLIR.

  fusion_fuzz.py --dtcc build/bin/dtcc [--count 16] [--seed 0]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common  # noqa: E402

UNARY = ["exp", "tanh", "sigmoid", "relu", "silu", "gelu", "neg", "abs", "erf"]
BINARY = ["add", "sub", "mul", "max", "min"]
TOLERANCE = {"f32": 1e-5, "f64": 1e-12}
ABSOLUTE = {"f32": 1e-6, "f64": 1e-14}
SCALE = {"f32": 1e-6, "f64": 1e-14}
NUMPY = {"f32": np.float32, "f64": np.float64}


class Program:
    """A random dgraph function; values are (name, kind) with kind "full"
    ([rows..., C]), "mask" (an i1 tensor of that shape), "row" ([rows...]) or
    "row1" ([rows..., 1])."""

    def __init__(self, rng, dtype):
        self.rng, self.dtype = rng, dtype
        rank = int(rng.integers(2, 4))
        cols = int(rng.choice([5, 8, 13, 37, 64, 200, 600, 2500, 24000]))
        self.rows = [int(rng.integers(1, 5)) for _ in range(rank - 1)]
        self.cols = cols
        self.lines, self.counter = [], 0
        self.values = []       # (name, kind)
        # Values a softmax gradient reaches: their rows sum to ~0, so a sum
        # of one is rounding noise, which the two programs round apart.
        self.zero_sum = set()
        self.inputs = [("x", "full"), ("y", "full"), ("w", "vec"), ("s", "row1")]

    def type(self, kind):
        element = "i1" if kind == "mask" else self.dtype
        return "tensor<" + "x".join(map(str, self.shape(kind))) + "x" + element + ">"

    def emit(self, text, kind):
        name = f"%v{self.counter}"
        self.counter += 1
        if "_grad" in text or any(v in re.findall(r"%v\d+", text)
                                  for v in self.zero_sum):
            self.zero_sum.add(name)
        self.lines.append(f"  {name} = {text}")
        self.values.append((name, kind))
        return name

    def const(self, value, kind):
        return self.emit(f"dgraph.constant dense<{value!r}> : {self.type(kind)}", kind)

    def pick(self, kind, summed=False):
        pool = [n for n, k in self.values
                if k == kind and not (summed and n in self.zero_sum)]
        if kind == "full":
            pool += ["%x", "%y"]
        if kind == "row1":
            pool += ["%s"]
        if not pool:
            return None
        # Recent values more often: chains rather than a flat fan-in.
        weights = np.arange(1, len(pool) + 1, dtype=float) ** 2
        return pool[int(self.rng.choice(len(pool), p=weights / weights.sum()))]

    def full_from_row(self, name, kind):
        """A broadcast of a value per row over the row."""
        dims = list(range(len(self.rows) + (1 if kind == "row1" else 0)))
        return self.emit(f"dgraph.broadcast_in_dim {name}, dims = {dims} : "
                         f"({self.type(kind)}) -> {self.type('full')}", "full")

    def safe(self, op, a, kind):
        """op(a) kept finite: log(|a| + 1), sqrt(|a|), 1 / (|a| + 1)."""
        t = self.type(kind)
        if op in ("log", "sqrt", "reciprocal", "rsqrt"):
            a = self.emit(f"dgraph.abs {a} : {t}", kind)
            if op != "sqrt":
                a = self.emit(f"dgraph.add {a}, {self.const(1.0, kind)} : {t}", kind)
        if op == "exp":  # keep exp's argument small: exp(tanh(a))
            a = self.emit(f"dgraph.tanh {a} : {t}", kind)
        return self.emit(f"dgraph.{op} {a} : {t}", kind)

    def step(self):
        r = self.rng.random()
        full = self.type("full")
        last = len(self.rows)
        if r < 0.25:
            self.safe(str(self.rng.choice(UNARY + ["log", "sqrt", "reciprocal"])),
                      self.pick("full"), "full")
        elif r < 0.45:
            a = self.pick("full")
            b = self.second(self.rng.random(), 0.5, 2)
            self.emit(f"dgraph.{self.rng.choice(BINARY)} {a}, {b} : {full}", "full")
        elif r < 0.6:
            op = self.rng.choice(["reduce_sum", "reduce_max"])
            s = self.emit(f"dgraph.{op} {self.pick('full', op == 'reduce_sum')}, "
                          f"dims = [{last}] : "
                          f"({full}) -> {self.type('row')}", "row")
            if self.rng.random() < 0.5:
                self.emit(f"dgraph.reshape {s} : ({self.type('row')}) -> "
                          f"{self.type('row1')}", "row1")
        elif r < 0.72:
            kind = "row1" if self.rng.random() < 0.5 else "row"
            a = self.pick(kind)
            if a is None:
                return
            if self.rng.random() < 0.5:
                self.safe(str(self.rng.choice(["rsqrt", "log", "reciprocal", "tanh"])),
                          a, kind)
            else:
                b = self.pick(kind) if self.rng.random() < 0.5 else self.const(0.5, kind)
                self.emit(f"dgraph.{self.rng.choice(BINARY)} {a}, {b} : "
                          f"{self.type(kind)}", kind)
        elif r < 0.8:
            kind = "row1" if self.rng.random() < 0.5 else "row"
            a = self.pick(kind)
            if a is not None:
                b = self.full_from_row(a, kind)
                self.emit(f"dgraph.mul {self.pick('full')}, {b} : {full}", "full")
        elif r < 0.9:
            self.select()
        elif r < 0.95:
            self.norm()
        else:
            op = self.rng.choice(["softmax", "log_softmax", "softmax_grad",
                                  "log_softmax_grad"])
            a = self.pick("full")
            if op.endswith("_grad"):
                y = self.emit(f"dgraph.{op[:-5]} {a}, dim = {last} : {full}", "full")
                self.emit(f"dgraph.{op} {y}, {self.pick('full')}, dim = {last} : "
                          f"{full}", "full")
            else:
                self.emit(f"dgraph.{op} {a}, dim = {last} : {full}", "full")

    def norm(self):
        """A layer norm (with or without a bias) or an RMS norm over the last
        axis, scaled by the weight; its statistics are values per row. Its
        epsilon (0.1) bounds rstd, so that a row of near-equal values does
        not magnify the programs' rounding differences."""
        full, row, vec = self.type("full"), self.type("row"), self.type("vec")
        a = self.pick("full", summed=True)
        name = f"%v{self.counter}"
        self.counter += 1
        if self.rng.random() < 0.6:
            bias = self.rng.random() < 0.5
            self.lines.append(
                f"  {name}:3 = dgraph.layer_norm {a}, %w{', %w' if bias else ''} "
                f"axis = {len(self.rows)}, epsilon = 1.0e-01 : ({full}, {vec}"
                f"{', ' + vec if bias else ''}) -> ({full}, {row}, {row})")
            stats = [f"{name}#1", f"{name}#2"]
        else:
            self.lines.append(
                f"  {name}:2 = dgraph.rms_norm {a}, %w axis = {len(self.rows)}, "
                f"epsilon = 1.0e-01 : ({full}, {vec}) -> ({full}, {row})")
            stats = [f"{name}#1"]
        self.values.append((f"{name}#0", "full"))
        self.values += [(s, "row") for s in stats]

    def second(self, choice, low, high):
        """A binary op's second operand by `choice` in [0, 1): a value
        (below 0.5), the broadcast weight (below 0.75) or a splat constant
        drawn from [low, high)."""
        if choice < 0.5:
            return self.pick("full")
        if choice < 0.75:
            return self.emit(f"dgraph.broadcast_in_dim %w, dims = [{len(self.rows)}] : "
                             f"({self.type('vec')}) -> {self.type('full')}", "full")
        return self.const(float(np.round(self.rng.uniform(low, high), 3)), "full")

    def compare(self):
        """A mask: a comparison of a value with another, a splat or a
        broadcast weight; eq of a value with a max or min of it (ties)."""
        full = self.type("full")
        a = self.pick("full")
        choice = self.rng.random()
        if choice < 0.25:
            c = self.const(float(np.round(self.rng.uniform(-1, 1), 3)), "full")
            b = self.emit(f"dgraph.{self.rng.choice(['max', 'min'])} {a}, {c} : "
                          f"{full}", "full")
            return self.emit(f"dgraph.eq {a}, {b} : {full}", "mask")
        b = self.second(choice, -1, 1)
        op = self.rng.choice(["lt", "le", "gt", "ge"])
        return self.emit(f"dgraph.{op} {a}, {b} : {full}", "mask")

    def select(self):
        """A select between two values by a mask: a comparison, or two
        combined by and/or/xor, maybe negated (Clip, relu6 and the
        gradients of max and min are such chains)."""
        mask = self.type("mask")
        m = self.compare()
        if self.rng.random() < 0.4:
            m = self.emit(f"dgraph.{self.rng.choice(['and', 'or', 'xor'])} {m}, "
                          f"{self.compare()} : {mask}", "mask")
        if self.rng.random() < 0.2:
            m = self.emit(f"dgraph.not {m} : {mask}", "mask")
        self.emit(f"dgraph.select {m}, {self.pick('full')}, {self.pick('full')} : "
                  f"{self.type('full')}", "full")

    def text(self, steps):
        for _ in range(steps):
            self.step()
        # The last value and a few others (values per row among them).
        outs = [self.values[-1]]
        for v in self.values[:-1]:
            if self.rng.random() < 0.15:
                outs.append(v)
        args = ", ".join(f"{n}: {self.type(k)} {{dgraph.name = \"{n[1:]}\"}}"
                         for n, k in [("%" + n, k) for n, k in self.inputs])
        results = ", ".join(f"{self.type(k)} {{dgraph.name = \"o{i}\"}}"
                            for i, (_, k) in enumerate(outs))
        ret = ", ".join(n for n, _ in outs)
        types = ", ".join(self.type(k) for _, k in outs)
        body = "\n".join(self.lines)
        self.outputs = [(f"o{i}", k) for i, (_, k) in enumerate(outs)]
        return (f"func.func @main({args}) -> ({results}) {{\n{body}\n"
                f"  return {ret} : {types}\n}}\n")

    def shape(self, kind):
        return {"full": self.rows + [self.cols], "mask": self.rows + [self.cols],
                "row": self.rows,
                "row1": self.rows + [1], "vec": [self.cols]}[kind]


def compile_and_run(dtcc, src, mode, args, outputs, check, what):
    """The outputs of `src` compiled with `mode`, and dtcc explain's text;
    None (a failed check) if it does not compile or run."""
    exe = os.path.splitext(src)[0] + mode
    for cmd in ([dtcc, "compile", src, mode, "-o", exe],
                [exe, "--output-dir", exe + ".out"] + args):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            check(False, f"{what}: {os.path.basename(cmd[0])} {mode} failed "
                  f"(program kept in {src}):\n{p.stderr[-2000:]}")
            return None
    return ({n: read(os.path.join(exe + ".out", n + ".pb")) for n in outputs},
            e2e_common.run([dtcc, "explain", exe]))


def write_input(path, name, data, dtype):
    if dtype != "bf16":
        e2e_common.write_pb(path, name, data.astype(NUMPY[dtype]))
        return
    import onnx
    from onnx import helper
    # bf16: the float's upper 16 bits, rounded to nearest even.
    f32 = data.astype(np.float32).view(np.uint32)
    bits = ((f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16).astype(np.uint16)
    t = helper.make_tensor(name, onnx.TensorProto.BFLOAT16, data.shape,
                           bits.tobytes(), raw=True)
    with open(path, "wb") as out:
        out.write(t.SerializeToString())


def run_program(dtcc, work, seed, check):
    rng = np.random.default_rng(seed)
    dtype = str(rng.choice(["f32", "f32", "f64", "bf16"]))
    prog = Program(rng, dtype)
    src = os.path.join(work, f"p{seed}.mlir")
    text = prog.text(int(rng.integers(6, 16)))
    with open(src, "w") as f:
        f.write(text)
    shape = "x".join(map(str, prog.rows + [prog.cols]))
    what = f"seed {seed}: {dtype} [{shape}], {len(prog.values)} ops"
    args, args32 = [], []
    for name, kind in prog.inputs:
        data = rng.uniform(-3, 3, size=prog.shape(kind))
        path = os.path.join(work, f"p{seed}-{name}.pb")
        write_input(path, name, data, dtype)
        args += ["--input", f"{name}={path}"]
        if dtype == "bf16":
            # The f32 program reads the bf16 inputs' values.
            path32 = os.path.join(work, f"p{seed}-{name}-f32.pb")
            write_input(path32, name, read(path), "f32")
            args32 += ["--input", f"{name}={path32}"]
    names = [n for n, _ in prog.outputs]
    fused = compile_and_run(dtcc, src, "--fuse", args, names, check, what)
    plain = compile_and_run(dtcc, src, "--no-fuse", args, names, check, what)
    if fused is None or plain is None:
        return 0
    rows = len(re.findall(r"reduce_(?:sum|max)|softmax|_norm", fused[1]))
    if dtype == "bf16":
        # Regions round only what they write, the unfused program every
        # op's result: both are held to the program in f32, the fused one
        # no further from it than 1.5x the unfused one (+ a bf16 ulp).
        src32 = os.path.join(work, f"p{seed}-f32.mlir")
        with open(src32, "w") as f:
            f.write(text.replace("bf16", "f32"))
        ref = compile_and_run(dtcc, src32, "--no-fuse", args32, names, check, what)
        if ref is None:
            return rows
        def distance(outs):
            return max(float(np.max(np.abs(outs[n] - ref[0][n]), initial=0.0)) /
                       max(float(np.max(np.abs(ref[0][n]), initial=0.0)), 1e-3)
                       for n in names)
        mine, theirs = distance(fused[0]), distance(plain[0])
        ok = mine <= 1.5 * theirs + 2 ** -8
        check(ok, f"{what}: fused no further from f32 than 1.5x unfused + 2^-8 "
              f"({mine:.2e} vs {theirs:.2e} of each output's largest value)"
              + ("" if ok else f"; program: {src}"))
        return rows
    tol = TOLERANCE[dtype]
    worst = 0.0
    for n in names:
        want, got = plain[0][n], fused[0][n]
        # Relative, above a noise floor: absolute, and of the output's
        # largest magnitude (a sum that cancels to ~0, or a log-softmax
        # gradient dy - p sum(dy) of large dy, keeps the ulp differences of
        # libm's vector and scalar exp at the scale of its terms).
        floor = ABSOLUTE[dtype] + SCALE[dtype] * float(np.max(np.abs(want), initial=0.0))
        excess = np.maximum(np.abs(got - want) - floor, 0.0)
        rel = float(np.max(excess / np.maximum(np.abs(want), 1e-3), initial=0.0))
        worst = max(worst, rel if np.isfinite(rel) else np.inf)
    check(worst <= tol, f"{what}, {len(names)} outputs: fused within {tol:g} of "
          f"unfused (worst {worst:.2e})" + ("" if worst <= tol else f"; program: {src}"))
    return rows


def read(path):
    """An output .pb as float64 (bf16 widened)."""
    import onnx
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    if t.data_type == onnx.TensorProto.BFLOAT16:
        bits = np.frombuffer(t.raw_data, dtype=np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64).reshape(tuple(t.dims))
    from onnx import numpy_helper
    return numpy_helper.to_array(t).astype(np.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0, help="the first program's seed")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="dtcc-fusion-fuzz.")
    dtcc = os.path.abspath(args.dtcc)
    check = e2e_common.Checks()
    fused = 0
    for seed in range(args.seed, args.seed + args.count):
        fused += run_program(dtcc, work, seed, check)
    check(fused > 0, f"the programs' fused regions hold {fused} reductions or "
          f"softmaxes (row regions form)")
    return e2e_common.finish(work, args.keep or bool(check.failures), check.failures)


if __name__ == "__main__":
    sys.exit(main())
