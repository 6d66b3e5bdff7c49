#!/usr/bin/python3
"""Structured fuzzing of the ONNX importer and the compiler, one node at a time.

libFuzzer (scripts/fuzz.sh) mutates bytes of whole models; most mutants
fail to parse or fail ONNX's own checks. This draws graphs of one node of
every op `dtcc ops` lists, from ONNX's own schemas (onnx.defs): inputs of
the types the op's type constraints allow (sometimes two inputs of one
constraint in different types), shapes of rank 0-4 that broadcast or not
(sizes 0-5), int64 operands that are usually attributes (shapes, axes,
pads, repeats, ...) as initializers of small, sometimes negative or out
of range values, and each attribute with a probability of one half and a
value of its type (strings from the spellings ONNX ops use). Each graph
is compiled (`dtcc compile --compile-to dexec`, and with --train a second
time as a training graph whose loss sums the node's first float output).

The oracle is the fuzz targets' (tests/fuzz/README.md): dtcc exits 0 or 1
with a diagnostic, never a signal, another status, "internal error", or
a hang. Besides, the graph's outputs are declared with the shapes onnx's
own shape inference gives them (run in a child process: onnx 1.12's
crashes on some of these graphs), so an output dtcc computes in another
shape is a finding too: the two disagree on what the node means.
Findings are saved with dtcc's output in OUT/findings/.

  scripts/fuzz_nodes.py --dtcc build/bin/dtcc --seconds 600 --out /tmp/fn
      [--seed N] [--ops Add,Conv,...] [--train]
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ELEM = {
    "tensor(float)": TensorProto.FLOAT, "tensor(double)": TensorProto.DOUBLE,
    "tensor(float16)": TensorProto.FLOAT16, "tensor(bfloat16)": TensorProto.BFLOAT16,
    "tensor(int8)": TensorProto.INT8, "tensor(int16)": TensorProto.INT16,
    "tensor(int32)": TensorProto.INT32, "tensor(int64)": TensorProto.INT64,
    "tensor(uint8)": TensorProto.UINT8, "tensor(uint16)": TensorProto.UINT16,
    "tensor(uint32)": TensorProto.UINT32, "tensor(uint64)": TensorProto.UINT64,
    "tensor(bool)": TensorProto.BOOL,
}
NUMPY = {
    TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16, TensorProto.INT8: np.int8,
    TensorProto.INT16: np.int16, TensorProto.INT32: np.int32,
    TensorProto.INT64: np.int64, TensorProto.UINT8: np.uint8,
    TensorProto.UINT16: np.uint16, TensorProto.UINT32: np.uint32,
    TensorProto.UINT64: np.uint64, TensorProto.BOOL: np.bool_,
}
STRINGS = ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "constant", "reflect",
           "edge", "linear", "nearest", "cubic", "none", "tanh", "mean", "sum",
           "DCR", "CRD", "half_pixel", "asymmetric", "align_corners", "floor",
           "round_prefer_floor", "bilinear", "zeros", "border", "", "bogus"]
# Inputs that ONNX ops take as data but that are attributes in spirit:
# given as initializers (constants) of small int64 values.
CONSTANT_INPUT_NAMES = re.compile(
    r"shape|axes|pads|repeats|starts|ends|steps|split|sizes|scales|roi|"
    r"indices|k$|depth|axis|perm|output_shape|min|max|ratio|training_mode|"
    r"condition|blocksize|count|delta|limit|start|values|padding_value|"
    r"fill_value|constant_value|trip|num_", re.I)


def supported_ops(dtcc):
    out = subprocess.run([dtcc, "ops"], capture_output=True, text=True).stdout
    return sorted({line.split()[0] for line in out.splitlines() if line.strip()})


def random_shape(rng, rank=None):
    rank = rng.choice([0, 1, 2, 2, 3, 3, 4]) if rank is None else rank
    return [rng.choice([0, 1, 2, 3, 4, 5]) if rng.random() < 0.1 else rng.choice([1, 2, 3, 4])
            for _ in range(rank)]


def broadcast_partner(rng, shape):
    """A shape that broadcasts with `shape` (mostly), or any shape."""
    if rng.random() < 0.15:
        return random_shape(rng)
    drop = rng.randint(0, len(shape))
    return [1 if rng.random() < 0.3 else d for d in shape[drop:]]


def random_array(rng, elem, shape):
    npt = NUMPY.get(elem)
    if elem == TensorProto.BFLOAT16 or npt is None:
        return None
    if npt == np.bool_:
        return np.asarray(np.random.RandomState(rng.randint(0, 1 << 30)).rand(*shape) < 0.5)
    if np.issubdtype(npt, np.integer):
        lo = -3 if np.issubdtype(npt, np.signedinteger) else 0
        vals = np.random.RandomState(rng.randint(0, 1 << 30)).randint(lo, 6, size=shape)
        return np.asarray(vals, dtype=npt)
    return np.asarray(np.random.RandomState(rng.randint(0, 1 << 30)).randn(*shape), dtype=npt)


def random_attribute(rng, name, attr):
    t = attr.type
    A = onnx.defs.OpSchema.AttrType
    if t == A.INT:
        return helper.make_attribute(name, rng.choice([-2, -1, 0, 1, 1, 2, 3, 7]))
    if t == A.INTS:
        n = rng.randint(0, 5)
        return helper.make_attribute(name, [rng.choice([-1, 0, 1, 1, 2, 3]) for _ in range(n)])
    if t == A.FLOAT:
        return helper.make_attribute(name, rng.choice([0.0, 0.5, 1.0, -1.0, 1e-5, 2.0]))
    if t == A.FLOATS:
        return helper.make_attribute(name, [rng.choice([0.5, 1.0, 2.0]) for _ in range(rng.randint(0, 4))])
    if t == A.STRING:
        return helper.make_attribute(name, rng.choice(STRINGS))
    if t == A.STRINGS:
        return helper.make_attribute(name, [rng.choice(STRINGS) for _ in range(rng.randint(0, 3))])
    if t == A.TENSOR:
        elem = rng.choice([TensorProto.FLOAT, TensorProto.INT64])
        arr = random_array(rng, elem, random_shape(rng, rng.choice([0, 1])))
        return helper.make_attribute(name, numpy_helper.from_array(arr, name))
    return None


def allowed_types(schema, type_str):
    for c in schema.type_constraints:
        if c.type_param_str == type_str:
            return [t for t in c.allowed_type_strs if t in ELEM]
    return [type_str] if type_str in ELEM else []


def make_model(rng, schema, opset):
    """One graph of `schema`'s op, or None where nothing can be drawn."""
    inputs, inits, names = [], [], []
    chosen = {}  # type parameter -> type string
    first_shape = None
    formal = list(schema.inputs)
    count = len(formal)
    if formal and formal[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        count = len(formal) - 1 + rng.randint(1, 3)
    elif schema.min_input < len(formal):
        count = rng.randint(schema.min_input, len(formal))
    for i in range(count):
        f = formal[min(i, len(formal) - 1)]
        types = allowed_types(schema, f.typeStr)
        if not types:
            return None
        if f.typeStr in chosen and rng.random() < 0.9:
            t = chosen[f.typeStr]
        else:
            # f32 most of the time where the op takes it.
            prefer = "tensor(float)" in types and rng.random() < 0.6
            t = "tensor(float)" if prefer else rng.choice(types)
            chosen.setdefault(f.typeStr, t)
        elem = ELEM[t]
        name = f"in{i}"
        if first_shape is None:
            shape = random_shape(rng)
            first_shape = shape
        else:
            shape = broadcast_partner(rng, first_shape)
        constant = CONSTANT_INPUT_NAMES.search(f.name) and elem in (
            TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL) or (
            elem != TensorProto.FLOAT and rng.random() < 0.2)
        if constant:
            if elem == TensorProto.INT64 and rng.random() < 0.7:
                shape = [rng.randint(0, 4)]
            arr = random_array(rng, elem, shape)
            if arr is None:
                return None
            inits.append(numpy_helper.from_array(arr, name))
        else:
            inputs.append(helper.make_tensor_value_info(name, elem, shape))
        names.append(name)
        if f.option == onnx.defs.OpSchema.FormalParameterOption.Optional and rng.random() < 0.2:
            names[-1] = ""
    while names and names[-1] == "":
        names.pop()
    attrs = []
    for aname, attr in schema.attributes.items():
        if attr.required or rng.random() < 0.5:
            a = random_attribute(rng, aname, attr)
            if a is not None:
                attrs.append(a)
    outs = [f"out{i}" for i in range(max(1, schema.min_output if rng.random() < 0.7
                                         else len(schema.outputs) or 1))]
    node = helper.make_node(schema.name, names, outs, name=f"{schema.name}_0",
                            domain=schema.domain or None)
    node.attribute.extend(attrs)
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                               for o in outs], inits)
    imports = [helper.make_opsetid("", opset)]
    if schema.domain not in ("", "ai.onnx"):
        imports.append(helper.make_opsetid(schema.domain, schema.since_version))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    inferred = infer_isolated(model)
    if inferred is not None:
        for vi in inferred.graph.output:
            if vi.type.tensor_type.elem_type:
                for o in model.graph.output:
                    if o.name == vi.name:
                        o.CopyFrom(vi)
    return model


def infer_isolated(model):
    """onnx's shape inference of `model` in a child process (onnx 1.12's
    crashes on some of these graphs), or None."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            data = onnx.shape_inference.infer_shapes(
                model, strict_mode=False).SerializeToString()
        except Exception:
            data = b""
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return onnx.load_from_string(data) if data else None


def with_loss(model):
    """The node's graph as a training graph: loss = ReduceSum of its first
    float output, the float inputs made trainable initializers."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    out = next((o for o in g.output if o.type.tensor_type.elem_type in
                (TensorProto.FLOAT, TensorProto.DOUBLE)), None)
    if out is None:
        return None
    keep = []
    for vi in g.input:
        tt = vi.type.tensor_type
        if tt.elem_type == TensorProto.FLOAT:
            shape = [d.dim_value for d in tt.shape.dim]
            g.initializer.append(numpy_helper.from_array(
                random_array(random.Random(1), TensorProto.FLOAT, shape), vi.name))
        else:
            keep.append(vi)
    del g.input[:]
    g.input.extend(keep)
    g.node.append(helper.make_node("ReduceSum", [out.name], ["loss"], keepdims=0))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("loss", out.type.tensor_type.elem_type, []))
    return m


def known_disagreement(model):
    """Why onnx's shape inference and dtcc disagree by design on this graph's
    node, or None. Each was checked against a third implementation:

    - Squeeze with an empty axes input: onnx's inference and reference
      squeeze nothing, ONNX Runtime (1.32) and dtcc every dimension of size
      1, as when axes is absent ("if axes is not provided").
    - Squeeze (opset < 13) with an empty axes attribute: onnx's inference
      squeezes nothing, ONNX Runtime (1.32), onnx's reference (1.23) and
      dtcc every dimension of size 1, as when axes is absent.
    - Einsum with an implicit output and upper-case labels: onnx 1.12's
      inference gives a scalar; numpy.einsum, onnx 1.23 and dtcc the labels
      that occur once, in alphabetical order.
    """
    node = model.graph.node[0]
    if node.op_type == "Squeeze" and len(node.input) > 1:
        axes = next((t for t in model.graph.initializer if t.name == node.input[1]), None)
        if axes is not None and numpy_helper.to_array(axes).size == 0:
            return "Squeeze with an empty axes input"
    if node.op_type == "Squeeze" and any(a.name == "axes" and not a.ints
                                         for a in node.attribute):
        return "Squeeze with an empty axes attribute"
    if node.op_type == "Einsum":
        eq = next((a.s.decode() for a in node.attribute if a.name == "equation"), "")
        if "->" not in eq and any(c.isupper() for c in eq):
            return "Einsum with an implicit output and upper-case labels"
    return None


def classify(proc):
    """None when dtcc behaved (status 0, or 1 with a diagnostic), else why not."""
    text = proc.stdout + proc.stderr
    if proc.returncode not in (0, 1):
        return f"exit status {proc.returncode}"
    if "internal error" in text.lower():
        return "internal error"
    if re.search(r"graph output '[^']*' is declared with shape", text):
        # The declared shape is onnx's inference: the two disagree on what
        # the node computes (dtcc's error, or onnx's, to be looked at).
        return "shape differs from onnx's inference"
    if proc.returncode == 1 and "error" not in text.lower():
        return "status 1 without a diagnostic"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtcc", default="build/bin/dtcc")
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--out", default="/tmp/fuzz-nodes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", default="")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--errors", type=int, default=0,
                    help="print the N most frequent diagnostics of rejected graphs")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    ops = args.ops.split(",") if args.ops else supported_ops(args.dtcc)
    schemas = []
    for op in ops:
        # Another domain's ops are listed as "<domain>.<op>" (opset 1 of
        # ai.onnx.preview.training, the only one there is).
        domain, _, name = op.rpartition(".")
        try:
            schemas.append(onnx.defs.get_schema(name, args.opset if not domain else 1,
                                                domain))
        except Exception:
            pass
    findings = os.path.join(args.out, "findings")
    os.makedirs(findings, exist_ok=True)
    work = tempfile.mkdtemp(dir=args.out)
    deadline = time.time() + args.seconds
    stats = {"graphs": 0, "compiled": 0, "errors": 0, "findings": 0, "known": 0}
    seen = set()
    rejections = {}
    while time.time() < deadline:
        schema = rng.choice(schemas)
        model = make_model(rng, schema, args.opset)
        if model is None:
            continue
        variants = [("infer", model)]
        if args.train:
            t = with_loss(model)
            if t is not None:
                variants.append(("train", t))
        for kind, m in variants:
            path = os.path.join(work, "m.onnx")
            onnx.save(m, path)
            cmd = [args.dtcc, "compile", path, "--compile-to", "program", "-o",
                   os.path.join(work, "out.mlir")]
            if kind == "train":
                cmd.insert(3, "--train")
            stats["graphs"] += 1
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
                why = classify(proc)
            except subprocess.TimeoutExpired:
                proc, why = None, "timeout (60 s)"
            if why == "shape differs from onnx's inference" and known_disagreement(m):
                stats["known"] += 1
                continue
            if why is None:
                stats["compiled" if proc.returncode == 0 else "errors"] += 1
                if proc.returncode and args.errors:
                    line = next((l for l in proc.stderr.splitlines() if "error" in l), "")
                    line = re.sub(r"'[^']*'|\[[^]]*\]|[0-9]+", "_", line)
                    rejections[line[:150]] = rejections.get(line[:150], 0) + 1
                continue
            text = (proc.stdout + proc.stderr) if proc else ""
            last = text.strip().splitlines()[-1] if text.strip() else ""
            key = (schema.name, kind, why, re.sub(r"[0-9]+", "N", last))
            stats["findings"] += 1
            if key in seen:
                continue
            seen.add(key)
            base = os.path.join(findings, f"{schema.name}-{kind}-{len(seen)}")
            onnx.save(m, base + ".onnx")
            with open(base + ".txt", "w") as f:
                f.write(" ".join(cmd) + "\n" + why + "\n" + text)
            print(f"finding: {schema.name} ({kind}): {why}: {last[:200]}", flush=True)
    print(f"fuzz-nodes: {stats['graphs']} graphs over {len(schemas)} ops: "
          f"{stats['compiled']} compiled, {stats['errors']} rejected with a diagnostic, "
          f"{stats['known']} known disagreements with onnx's inference (known_disagreement), "
          f"{stats['findings']} findings ({len(seen)} distinct) in {findings}")
    for line, n in sorted(rejections.items(), key=lambda x: -x[1])[:args.errors]:
        print(f"  {n:6d}  {line}")
    return 1 if seen else 0


if __name__ == "__main__":
    sys.exit(main())
