"""Gradient conformance of one ONNX node test (run_onnx_node_tests.py --suite grad).

A node test whose forward pass dtcc gets right is also compiled as a training
graph: its float inputs become trainable initializers, its differentiable float
outputs are reduced to a scalar loss = sum_i sum(output_i * R_i) with fixed
random R_i, and `dtcc compile --train --export-gradients` (SGD, learning rate
0) gives dtcc's gradient of every input (train_step's grad/<input> outputs).
It does so twice: for the model in its own types (what users train) and for
the model converted to float64, which checks the VJP rules free of rounding.

The reference is independent of dtcc's autodiff: central finite differences in
float64 of the same ONNX model converted to float64 (every float tensor type,
initializer, tensor attribute, Cast/dtype target, except values feeding an
input whose type the schema fixes, such as Upsample's scales), evaluated by
dtcc's forward path. That forward path is checked first: at the unperturbed point the float64
model must reproduce ONNX's expected outputs. All perturbed points are
evaluated by one executable: the model is copied once per point (each copy
with its own inputs and loss), so one compile and one run give every loss.

Probes (as JAX's check_grads): PROBE_DIRECTIONS random directions over all
trainable inputs, plus single elements (all, or a seeded sample: see
MAX_ELEMENT_PROBES). Along a probe u, the losses f(t) at x + t u for
t = +-h, +-h/2, +-h/4 (h = STEP) give central differences D(h), D(h/2),
D(h/4) and two Richardson extrapolations R1 = (4 D(h/2) - D(h)) / 3 and
R2 = (4 D(h/4) - D(h/2)) / 3, accurate to O(h^4). dtcc's directional
derivative sum(g * u) must match R2 within
    rtol * max(sum|g * u|, |R2|) + max(atol * max|g|, UNIT_FLOOR ulps of
    the largest |output * R|) * sum|u| + the float64 noise,
with (rtol, atol) by type (TOLERANCES): float64 for the float64 gradient, the
model's narrowest float type for its own. The floor admits gradients that
are small only because the function is flat there (a saturated tanh), which
a float32 backward pass cannot resolve; it is far below what a wrong rule
gives.

A probe whose loss is not smooth within the step is at a non-differentiable
point (a Relu input at 0, a tie of Max, a jump of Mod, the second derivative's
jump of Softsign at 0) or leaves the function's domain (Pow's base at 0), and
is not compared. It shows as R1 and R2 disagreeing (O(h^4) apart when smooth)
or the one-sided slopes' gap not shrinking with the step (|2 s(h/4) - s(h/2)|
with s(k) = (f(k) - 2 f(0) + f(-k)) / k: O(h^3) when smooth, the slope's jump
at a kink), beyond SMOOTH_RTOL of the derivative plus the float64 noise, or
as a value that is not finite. A test all of whose probes are marked is
skipped for that reason. A gradient that is NaN or infinite where the finite
difference is not fails.

Which inputs are differentiable comes from ONNX's own operator schemas (each
formal input and output is tagged Differentiable or NonDifferentiable; the few
left Unknown are resolved in UNKNOWN_RESOLVED), not from dtcc.
"""

import copy
import os
import re
import subprocess
import zlib

import numpy as np
import onnx
import onnx.defs
from onnx import TensorProto, helper, numpy_helper

FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
               TensorProto.BFLOAT16)

# Finite differences: the step h along a probe (inputs move by h times the
# probe's entries, in absolute terms), and how many random directions each
# test gets.
STEP = 1e-4
STEPS = [STEP, -STEP, STEP / 2, -STEP / 2, STEP / 4, -STEP / 4]
PROBE_DIRECTIONS = 3
# A probe's finite difference is trusted when the two Richardson
# extrapolations (steps h, h/2 and h/2, h/4) and the one-sided slopes agree
# to this (relative to the derivative) plus the float64 noise.
SMOOTH_RTOL = 1e-7
# Per-element probes: every element of inputs with at most MAX_ELEMENT_PROBES
# elements in all, else a seeded sample of that many (each input's first and
# last element among them). The copies of the model in one float64
# executable are also capped at about COPY_NODE_BUDGET ONNX nodes and
# COPY_ELEMENT_BUDGET input and output elements; the random directions are
# always probed.
MAX_ELEMENT_PROBES = 48
COPY_NODE_BUDGET = 24000
COPY_ELEMENT_BUDGET = 1000000

# (rtol, atol) by the narrowest float type of the model's inputs and outputs:
# dtcc's gradient is computed in that type. atol is relative to the largest
# gradient element of the probed inputs.
TOLERANCES = {
    TensorProto.DOUBLE: (1e-6, 1e-8),
    TensorProto.FLOAT: (1e-4, 1e-5),
    TensorProto.FLOAT16: (2e-2, 5e-3),
    TensorProto.BFLOAT16: (1e-1, 3e-2),
}
PRECISION_ORDER = [TensorProto.BFLOAT16, TensorProto.FLOAT16, TensorProto.FLOAT,
                   TensorProto.DOUBLE]
TYPE_NAMES = {TensorProto.BFLOAT16: "bfloat16", TensorProto.FLOAT16: "float16",
              TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64"}
TYPE_EPS = {TensorProto.BFLOAT16: 2.0 ** -7, TensorProto.FLOAT16: 2.0 ** -10,
            TensorProto.FLOAT: 2.0 ** -23, TensorProto.DOUBLE: 2.0 ** -52}
# The absolute tolerance is at least UNIT_FLOOR ulps (of the type) of the
# largest loss term |output * R|: what a gradient through ops of unit gain
# would be.
UNIT_FLOOR = 32
# The float64 forward against ONNX's expected outputs, by the output's type
# (the expected values were rounded to it).
FORWARD_TOLERANCES = {
    TensorProto.DOUBLE: (1e-6, 1e-9),
    TensorProto.FLOAT: (1e-3, 1e-6),
    TensorProto.FLOAT16: (4e-3, 1e-4),
    TensorProto.BFLOAT16: (2e-2, 1e-3),
}

# Ops that produce random values: no gradient to check.
RANDOM_OPS = {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike",
              "RandomUniform", "RandomUniformLike"}
# Ops that ONNX tags differentiable but that are piecewise constant (their
# gradient is zero almost everywhere): treated as not differentiable.
PIECEWISE_CONSTANT = {"Hardmax"}
# Control flow, which dtcc unrolls at import (its trip count known then):
# not checked, since the finite differences' copies would make the count a
# parameter's function; the ops of the body are checked on their own.
CONTROL_FLOW = {"Loop"}
# Schemas that leave differentiability Unknown, where the op's latest schema
# does not settle it either: None (every input and output is), the positions
# of the differentiable inputs (every output is), or the reason there is no
# gradient. Other ops left Unknown count as differentiable.
UNKNOWN_RESOLVED = {
    "LayerNormalization": None,
    "Upsample": [0],  # as Resize: X, not the scales
    "Range": "output size depends on the inputs",
    "ConstantOfShape": "shape operand",
    "EyeLike": "output depends only on the shape",
    "QuantizeLinear": "quantization",
    "DequantizeLinear": "quantization",
    "DynamicQuantizeLinear": "quantization",
    # X only: torchvision's roi_align, ONNX Runtime's RoiAlign gradient and
    # dtcc give the regions (boxes, detached proposals) no gradient.
    "RoiAlign": [0],
}

# Ops ONNX's schemas tag NonDifferentiable that are linear in their float
# inputs, which dtcc differentiates as PyTorch's torch.stft and torch.fft
# do: the positions of those inputs (every output is differentiable).
LINEAR_OPS = {
    "DFT": [0],
    "STFT": [0, 2],  # the signal and the window
}

# Ops newer than Debian's onnx package (no schema there): the positions of
# their differentiable inputs (every output is). ONNX's newer schemas tag
# Mish's and Swish's X and leave the others Unknown; these are the float
# operands the ops compute smoothly from (Attention's attn_mask when it is a
# float bias, past_key and past_value; not nonpad_kv_seqlen; not
# RotaryEmbedding's position_ids; every input of DeformConv, bilinear in
# its offsets between pixels).
NEWER_OPS = {
    "Mish": [0],
    "Swish": [0],
    "RMSNormalization": [0, 1],
    "Attention": [0, 1, 2, 3, 4, 5],
    "RotaryEmbedding": [0, 1, 2],
    "AffineGrid": [0],
    "CenterCropPad": [0],
    "Col2Im": [0],
    "DeformConv": [0, 1, 2, 3, 4],
}

# ai.onnx.preview.training's optimizer steps, whose schemas leave
# differentiability Unknown: smooth in the rate R and every tensor (X, G
# and the state), not in the integer step count T (input 1). What
# differentiating through an optimizer's step (meta-learning a rate) needs.
TRAINING_DOMAIN = "ai.onnx.preview.training"
TRAINING_OPS = {"Adagrad", "Adam", "Momentum"}

# The training model's loss output (train_step names it `loss`).
LOSS = "dtcc_grad_loss"

_DIFF = onnx.defs.OpSchema.DifferentiationCategory.Differentiable
_NONDIFF = onnx.defs.OpSchema.DifferentiationCategory.NonDifferentiable


def _safe(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "output"


def _load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def _opset(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


def _schema(op, opset, latest=False):
    try:
        if latest:
            return onnx.defs.get_schema(op)
        return onnx.defs.get_schema(op, opset)
    except onnx.defs.SchemaError:
        return None


def _slot(params, i):
    """The formal parameter of actual position i (the last one is variadic)."""
    if i < len(params):
        return params[i]
    if params and params[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return params[-1]
    return None


def _categories(node, opset):
    """(input categories, output categories, reason) of a node.

    Categories are True (differentiable) or False per actual input/output;
    reason, when set, names why no input of the op is differentiable.
    """
    op = node.op_type
    if node.domain == TRAINING_DOMAIN and op in TRAINING_OPS:
        return ([i != 1 for i in range(len(node.input))],
                [True] * len(node.output), None)
    if node.domain not in ("", "ai.onnx"):
        return None, None, ("op", f"{node.domain}.{op}")
    if op in RANDOM_OPS:
        return None, None, ("random", op)
    if op in PIECEWISE_CONSTANT:
        return None, None, ("op", op)
    if op in CONTROL_FLOW:
        return None, None, ("control", op)
    if op in LINEAR_OPS:
        return ([i in LINEAR_OPS[op] for i in range(len(node.input))],
                [True] * len(node.output), None)
    schema, latest = _schema(op, opset), _schema(op, opset, latest=True)
    if schema is None and op in NEWER_OPS:
        return ([i in NEWER_OPS[op] for i in range(len(node.input))],
                [True] * len(node.output), None)
    if schema is None:
        return None, None, ("op", op)

    def resolve(params, latest_params, i):
        p = _slot(params, i)
        if p is None:
            return False
        if p.differentiationCategory == _DIFF:
            return True
        if p.differentiationCategory == _NONDIFF:
            return False
        q = _slot(latest_params, i) if latest_params is not None else None
        if q is not None and q.differentiationCategory != onnx.defs.OpSchema.DifferentiationCategory.Unknown:
            return q.differentiationCategory == _DIFF
        return None  # still unknown

    ins = [resolve(schema.inputs, latest.inputs if latest else None, i)
           for i in range(len(node.input))]
    outs = [resolve(schema.outputs, latest.outputs if latest else None, i)
            for i in range(len(node.output))]
    if any(c is None for c in ins + outs):
        rule = UNKNOWN_RESOLVED.get(op)
        if isinstance(rule, str):
            return None, None, ("undefined", f"{op}: {rule}")
        if isinstance(rule, list):
            ins = [i in rule for i in range(len(ins))]
        ins = [True if c is None else c for c in ins]
        outs = [True if c is None else c for c in outs]
    if not any(ins) or not any(outs):
        return None, None, ("op", op)
    return ins, outs, None


def _value_types(model):
    """Element type of every value ONNX's shape inference can type."""
    types = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference is best-effort; unknown types count as float
        inferred = model
    g = inferred.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    for t in g.initializer:
        types[t.name] = t.data_type
    return types


def differentiable_paths(model, candidates):
    """Which candidate inputs reach which graph outputs through differentiable
    slots of differentiable ops, by ONNX's schemas.

    Returns (reach, blocked): reach maps each graph output to the set of
    candidates it depends on differentiably; blocked maps a candidate to the
    first (kind, what) that stopped it.
    """
    opset = _opset(model) or 1
    types = _value_types(model)
    origins = {c: {c} for c in candidates}
    blocked = {}
    for node in model.graph.node:
        ins, outs, reason = _categories(node, opset)
        src = set()
        for i, name in enumerate(node.input):
            if not name or name not in origins:
                continue
            if reason:
                for o in origins[name]:
                    blocked.setdefault(o, reason)
            elif not ins[i]:
                param = _slot(_schema(node.op_type, opset).inputs, i)
                formal = param.name if param else str(i)
                for o in origins[name]:
                    blocked.setdefault(o, ("undefined", f"{node.op_type} input '{formal}'"))
            else:
                src |= origins[name]
        if not src:
            continue
        for j, out in enumerate(node.output):
            if not out or not outs[j]:
                continue
            if types.get(out, TensorProto.FLOAT) not in FLOAT_TYPES:
                for o in src:
                    blocked.setdefault(o, ("op", f"{node.op_type} (non-float output)"))
                continue
            origins.setdefault(out, set()).update(src)
    reach = {o.name: origins.get(o.name, set()) for o in model.graph.output
             if types.get(o.name, TensorProto.FLOAT) in FLOAT_TYPES}
    return reach, blocked


# ----------------------------------------------------------------------------
# Model rewriting


def _double_tensor(t):
    """A float TensorProto (any float type, bfloat16 as bits) as float64."""
    return numpy_helper.from_array(tensor_values(t, t.data_type), t.name)


def tensor_values(t, declared):
    """The values of a TensorProto as float64 (bfloat16 stored as uint16 bits
    when the model declares bfloat16), other types unchanged."""
    a = numpy_helper.to_array(t)
    if declared == TensorProto.BFLOAT16 or t.data_type == TensorProto.BFLOAT16:
        bits = a.astype(np.uint32) if a.dtype != np.float32 else a.view(np.uint32) >> 16
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if a.dtype.kind == "f":
        return a.astype(np.float64)
    return a


def _typed(t, name, declared):
    """A copy of TensorProto t named `name`, bfloat16 when declared so."""
    out = TensorProto()
    out.CopyFrom(t)
    out.name = name
    if declared == TensorProto.BFLOAT16 and out.data_type == TensorProto.UINT16:
        out.data_type = TensorProto.BFLOAT16
    return out


def fixed_type_values(model):
    """Values that feed an input whose schema fixes its type (Upsample's and
    Resize's scales are tensor(float)): they keep their type in float64."""
    opset = _opset(model) or 1
    fixed = set()
    for node in model.graph.node:
        schema = _schema(node.op_type, opset) if node.domain in ("", "ai.onnx") else None
        if schema is None:
            continue
        for i, name in enumerate(node.input):
            param = _slot(schema.inputs, i)
            if name and param is not None and param.typeStr.startswith("tensor("):
                fixed.add(name)
    return fixed


def to_float64(model):
    """The model with every float type, initializer and tensor attribute in
    float64 and every float Cast/dtype target float64, except values that
    feed inputs of a fixed type (fixed_type_values)."""
    m = copy.deepcopy(model)
    g = m.graph
    fixed = fixed_type_values(model)
    for vi in list(g.input) + list(g.output):
        tt = vi.type.tensor_type
        if tt.elem_type in FLOAT_TYPES and vi.name not in fixed:
            tt.elem_type = TensorProto.DOUBLE
    del g.value_info[:]
    inits = [(_double_tensor(t) if t.data_type in FLOAT_TYPES and t.name not in fixed else t)
             for t in g.initializer]
    del g.initializer[:]
    g.initializer.extend(inits)
    for node in g.node:
        if any(o in fixed for o in node.output):
            continue
        for a in node.attribute:
            if a.name in ("to", "dtype") and a.type == onnx.AttributeProto.INT and a.i in FLOAT_TYPES:
                a.i = TensorProto.DOUBLE
            elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type in FLOAT_TYPES:
                a.t.CopyFrom(_double_tensor(a.t))
        if node.op_type == "SequenceEmpty" and not any(
                a.name == "dtype" for a in node.attribute):
            # Its dtype's default is float.
            node.attribute.append(helper.make_attribute("dtype", TensorProto.DOUBLE))
        if node.op_type == "Constant":
            for a in list(node.attribute):
                if a.name in ("value_float", "value_floats"):
                    v = np.array(a.f if a.name == "value_float" else list(a.floats),
                                 dtype=np.float64)
                    node.attribute.remove(a)
                    node.attribute.append(helper.make_attribute(
                        "value", numpy_helper.from_array(v)))
    return m


def _constant(name, tensor):
    return helper.make_node("Constant", [], [name], name=f"{name}__const",
                            value=_typed(tensor, name, tensor.data_type))


def _loss_nodes(outputs, weights, elem_type, suffix, loss_name):
    """sum_i sum(cast(out_i) * R_i) -> loss_name."""
    nodes, sums = [], []
    for out, r in zip(outputs, weights):
        v = out + suffix
        if elem_type is not None:
            nodes.append(helper.make_node("Cast", [v], [v + "__lcast"], to=elem_type))
            v += "__lcast"
        nodes.append(helper.make_node("Mul", [v, r], [v + "__lmul"]))
        nodes.append(helper.make_node("ReduceSum", [v + "__lmul"], [v + "__lsum"], keepdims=0))
        sums.append(v + "__lsum")
    if len(sums) == 1:
        nodes.append(helper.make_node("Identity", sums, [loss_name]))
    else:
        nodes.append(helper.make_node("Sum", sums, [loss_name]))
    return nodes


class Problem:
    """One node test's data set 0, ready to rewrite."""

    def __init__(self, model, data_set, declared):
        if _opset(model) is None:
            # A model of another domain only (ONNX's training operators'
            # tests): the loss's Mul, ReduceSum and Sum need the default
            # one.
            model = copy.deepcopy(model)
            model.opset_import.append(helper.make_opsetid("", onnx.defs.onnx_opset_version()))
        self.model = model
        g = model.graph
        init_names = {t.name for t in g.initializer}
        inputs = [i.name for i in g.input if i.name not in init_names]
        files = sorted((f for f in os.listdir(data_set) if f.startswith("input_")),
                       key=lambda f: int(f[6:-3]))
        # name -> TensorProto (graph inputs from the data set, initializers)
        self.tensors = {}
        self.declared = dict(declared)
        for i, f in enumerate(files):
            if i < len(inputs) and inputs[i]:
                self.tensors[inputs[i]] = _load_pb(os.path.join(data_set, f))
        for t in g.initializer:
            self.tensors[t.name] = t
            self.declared[t.name] = t.data_type
        self.order = [n for n in inputs if n in self.tensors] + [t.name for t in g.initializer]
        outputs = sorted((f for f in os.listdir(data_set) if f.startswith("output_")),
                         key=lambda f: int(f[7:-3]))
        self.expected = {}
        for i, f in enumerate(outputs):
            name = g.output[i].name
            self.expected[name] = _load_pb(os.path.join(data_set, f))

    def float_inputs(self):
        return [n for n in self.order if self.declared.get(n) in FLOAT_TYPES]

    def values(self, name):
        return tensor_values(self.tensors[name], self.declared.get(name))


def training_model(p, trainable, constants, loss_outputs, weights):
    """The model in its own types with one output LOSS (float32, float64 when
    every loss output is) and no graph inputs: trainable inputs become
    initializers (float16 and bfloat16 ones float32 initializers cast to their
    type: dtcc's optimizers update float32 and float64 parameters),
    `constants` Constant nodes, the other inputs and the loss weights
    initializers (the float ones frozen).

    Returns (model, names to pass to --frozen)."""
    m = copy.deepcopy(p.model)
    g = m.graph
    head, inits, frozen = [], [], []
    for name in p.order:
        declared = p.declared.get(name)
        t = _typed(p.tensors[name], name, declared)
        if name in constants:
            head.append(helper.make_node("Constant", [], [name], name=f"{name}__const", value=t))
            continue
        if name in trainable and declared in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
            wide = numpy_helper.from_array(p.values(name).astype(np.float32), name + "__f32")
            inits.append(wide)
            head.append(helper.make_node("Cast", [wide.name], [name], name=f"{name}__cast",
                                         to=declared))
            continue
        inits.append(t)
        if name not in trainable and declared in FLOAT_TYPES:
            frozen.append(name)
    # The loss in float32 (the training ABI's), float64 for float64 models.
    loss_type = (TensorProto.DOUBLE if all(output_type(p, o) == TensorProto.DOUBLE
                                           for o in loss_outputs) else TensorProto.FLOAT)
    nodes, parts = [], []
    for out, r in zip(loss_outputs, weights):
        cast = None if output_type(p, out) == loss_type else loss_type
        nodes += _loss_nodes([out], [r], cast, "", f"{out}__part")
        parts.append(f"{out}__part")
    nodes.append(helper.make_node("Sum", parts, [LOSS]) if len(parts) > 1
                 else helper.make_node("Identity", parts, [LOSS]))
    for name, r in weights.items():
        dtype = np.float64 if loss_type == TensorProto.DOUBLE else np.float32
        inits.append(numpy_helper.from_array(r.astype(dtype), name))
        frozen.append(name)
    all_nodes = head + list(g.node) + nodes
    del g.node[:]
    g.node.extend(all_nodes)
    del g.input[:]
    del g.initializer[:]
    g.initializer.extend(inits)
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(LOSS, loss_type, []))
    del g.value_info[:]
    return m, frozen


def gradient_name(p, name):
    """The variable whose gradient train_step exports for input `name`."""
    if p.declared.get(name) in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        return name + "__f32"
    return name


def output_type(p, name):
    for o in p.model.graph.output:
        if o.name == name:
            return o.type.tensor_type.elem_type
    return 0


def copies_model(p, trainable, constants, loss_outputs, weights, points):
    """The float64 model copied once per point (a dict name -> float64 array
    for the trainable inputs): outputs LOSS__c<k> per copy, and copy 0's
    graph outputs as out__<i>. Inputs that are not trainable are shared by
    the copies (initializers, or Constant nodes for `constants`)."""
    m64 = to_float64(p.model)
    fixed = fixed_type_values(p.model)
    g = m64.graph
    local = set(trainable)
    for node in g.node:
        local.update(o for o in node.output if o)
    nodes, inits = [], []
    for name in p.order:
        if name in trainable:
            continue
        t = p.tensors[name]
        declared = p.declared.get(name)
        if declared in FLOAT_TYPES and name not in fixed:
            t = numpy_helper.from_array(tensor_values(t, declared), name)
        t = _typed(t, name, t.data_type)
        if name in constants:
            nodes.append(helper.make_node("Constant", [], [name], name=f"{name}__const",
                                          value=t))
        else:
            inits.append(t)
    for name, r in weights.items():
        inits.append(numpy_helper.from_array(r.astype(np.float64), name))
    outputs = []
    for k, point in enumerate(points):
        suffix = f"__c{k}"
        for name in trainable:
            inits.append(numpy_helper.from_array(point[name], name + suffix))
        for node in g.node:
            c = onnx.NodeProto()
            c.CopyFrom(node)
            c.name = (node.name or node.op_type) + suffix
            for i, n in enumerate(c.input):
                if n in local:
                    c.input[i] = n + suffix
            for i, n in enumerate(c.output):
                if n:
                    c.output[i] = n + suffix
            nodes.append(c)
        nodes += _loss_nodes(loss_outputs, list(weights), None, suffix, LOSS + suffix)
        outputs.append(helper.make_tensor_value_info(LOSS + suffix, TensorProto.DOUBLE, None))
    for i, o in enumerate(p.model.graph.output):
        nodes.append(helper.make_node("Identity", [o.name + "__c0"], [f"out__{i}"]))
        elem = o.type.tensor_type.elem_type
        outputs.append(helper.make_tensor_value_info(
            f"out__{i}", TensorProto.DOUBLE if elem in FLOAT_TYPES else elem, None))
    del g.node[:]
    g.node.extend(nodes)
    del g.input[:]
    del g.initializer[:]
    g.initializer.extend(inits)
    del g.output[:]
    g.output.extend(outputs)
    return m64


# ----------------------------------------------------------------------------
# The check


class Result:
    def __init__(self, status, detail=None, stats=None):
        self.status, self.detail, self.stats = status, detail, stats or {}


def _run(cmd, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _read(dir_path, name):
    path = os.path.join(dir_path, _safe(name) + ".pb")
    if not os.path.exists(path):
        return None
    return numpy_helper.to_array(_load_pb(path))


def _widen(a, declared):
    if declared == TensorProto.BFLOAT16 and a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def sample_elements(sizes, count, rng):
    """(input, flat index) pairs to probe one by one: all of them when they
    fit in `count`, else each input's first and last element and a seeded
    sample of the rest, spread over the inputs by size."""
    everything = [(t, i) for t, n in sizes.items() for i in range(n)]
    if len(everything) <= count:
        return everything
    picked = set()
    for t, n in sizes.items():
        for i in {0, n - 1} if n else set():
            if len(picked) < count:
                picked.add((t, i))
    rest = [e for e in everything if e not in picked]
    extra = rng.choice(len(rest), size=max(0, count - len(picked)), replace=False)
    picked.update(rest[i] for i in extra)
    return [e for e in everything if e in picked]


def dtcc_gradients(args, p, trainable, constants, loss_outputs, weights, work, tag,
                   bind_hint):
    """dtcc's gradients of `trainable` (flat float64 arrays) and its loss, from
    one train_step of p's training model; or a Result when that fails.
    Inputs dtcc needs as compile-time constants (shape operands) are added to
    `constants` and leave `trainable`, which is updated in place."""
    while True:
        train_set = [t for t in trainable if t not in constants]
        if not train_set:
            return Result("skipped", ("gradient not defined by the ONNX op",
                                      "inputs are shape operands"))
        tm, frozen = training_model(p, set(train_set), constants, loss_outputs, weights)
        path = os.path.join(work, f"{tag}.onnx")
        onnx.save(tm, path)
        prog = os.path.join(work, f"{tag}.program")
        cmd = [args.dtcc, "compile", path, "--train", "--optimizer", "sgd", "--lr", "0",
               "--export-gradients", "--compile-to", "program", "-o", prog]
        if frozen:
            cmd += ["--frozen", ",".join(frozen)]
        proc = _run(cmd)
        if proc.returncode == 0:
            break
        wanted = set(bind_hint.findall(proc.stderr))
        wanted = {w[:-len("__f32")] if w.endswith("__f32") else w for w in wanted}
        wanted &= set(p.order)
        if not wanted or wanted <= constants:
            return Result("failed", f"compile --train ({tag}): " + proc.stderr.strip())
        constants |= wanted
    trainable[:] = train_set
    out_dir = os.path.join(work, f"{tag}_out")
    proc = _run([args.runner, "--program", prog, "--function", "train_step",
                 "--output-dir", out_dir])
    if proc.returncode != 0:
        return Result("failed", f"train_step ({tag}): " + proc.stderr.strip())
    grads = {}
    for t in trainable:
        g = _read(out_dir, "grad/" + gradient_name(p, t))
        if g is None:
            # dtcc did not take it for a parameter (batch normalization's
            # running statistics): its gradient is taken as zero, which the
            # finite differences confirm or refute.
            size = int(np.prod(p.tensors[t].dims))
            grads[t] = np.zeros(size)
            continue
        grads[t] = _widen(g, p.declared.get(t)).astype(np.float64).reshape(-1)
    loss = float(_read(out_dir, "loss"))
    return grads, loss


def float64_problem(p):
    """p with its model, inputs and initializers in float64."""
    q = copy.copy(p)
    q.model = to_float64(p.model)
    fixed = fixed_type_values(p.model)
    q.tensors = {n: (numpy_helper.from_array(p.values(n), n)
                     if p.declared.get(n) in FLOAT_TYPES and n not in fixed else t)
                 for n, t in p.tensors.items()}
    q.declared = {n: (TensorProto.DOUBLE if d in FLOAT_TYPES and n not in fixed else d)
                  for n, d in p.declared.items()}
    return q


def narrowest_type(p, trainable, loss_outputs):
    types = [p.declared.get(t) for t in trainable] + [output_type(p, o) for o in loss_outputs]
    return min((t for t in types if t in PRECISION_ORDER), key=PRECISION_ORDER.index)


def check(args, test_dir, declared_inputs, work, bind_hint, classify):
    """Runs the gradient check of one node test; returns a Result."""
    name = os.path.basename(test_dir)
    model = onnx.load(os.path.join(test_dir, "model.onnx"))
    data_sets = sorted(d for d in os.listdir(test_dir) if d.startswith("test_data_set_"))
    p = Problem(model, os.path.join(test_dir, data_sets[0]), declared_inputs)

    candidates = p.float_inputs()
    if not candidates:
        return Result("skipped", ("no float input", None))
    reach, blocked = differentiable_paths(model, candidates)
    loss_outputs = [o for o, src in reach.items() if src]
    trainable = sorted(set().union(*reach.values()) if reach else set(),
                       key=p.order.index)
    if not trainable:
        kinds = [blocked[c] for c in candidates if c in blocked]
        if not kinds:
            return Result("skipped", ("no differentiable path from a float input "
                                      "to a float output", None))
        kind, what = kinds[0]
        label = {"op": "op not differentiable", "random": "random op",
                 "undefined": "gradient not defined by the ONNX op",
                 "control": "control flow, unrolled (not checked)"}[kind]
        return Result("skipped", (label, what))

    rng = np.random.default_rng(zlib.crc32(name.encode()))
    out_shapes = {o: tuple(p.expected[o].dims) for o in loss_outputs}
    weights = {f"dtcc_grad_r{i}": rng.standard_normal(out_shapes[o]).astype(np.float32)
               for i, o in enumerate(loss_outputs)}

    # dtcc's gradients: of the model in its own types, and of the model in
    # float64 (which checks the rules free of rounding).
    constants = set()
    native_type = narrowest_type(p, trainable, loss_outputs)
    native = dtcc_gradients(args, p, trainable, constants, loss_outputs, weights, work,
                            "train", bind_hint)
    if isinstance(native, Result):
        return native
    gradients = {native_type: native}
    if native_type != TensorProto.DOUBLE:
        wide = dtcc_gradients(args, float64_problem(p), trainable, constants,
                              loss_outputs, weights, work, "train64", bind_hint)
        if isinstance(wide, Result):
            return wide
        gradients[TensorProto.DOUBLE] = wide

    # The probes: random directions, then single elements.
    x = {t: p.values(t).astype(np.float64) for t in trainable}
    probes = []
    for _ in range(PROBE_DIRECTIONS):
        probes.append(("a random direction", {t: rng.standard_normal(x[t].shape)
                                              for t in trainable}))
    nodes_per_copy = len(model.graph.node) + 4 * len(loss_outputs) + 1
    elements_per_copy = (sum(x[t].size for t in trainable) +
                         sum(int(np.prod(s)) for s in out_shapes.values()) + 1)
    per_probe = len(STEPS)
    copies = min(per_probe * (PROBE_DIRECTIONS + MAX_ELEMENT_PROBES) + 1,
                 COPY_NODE_BUDGET // nodes_per_copy,
                 COPY_ELEMENT_BUDGET // elements_per_copy)
    elements = sample_elements({t: x[t].size for t in trainable},
                               max(0, (copies - 1) // per_probe - PROBE_DIRECTIONS), rng)
    sampled = len(elements) < sum(x[t].size for t in trainable)
    for t, i in elements:
        u = {s: np.zeros_like(x[s]) for s in trainable}
        u[t].reshape(-1)[i] = 1.0
        probes.append((f"{t}[{i}]", u))

    points = [x]
    for _, u in probes:
        for s in STEPS:
            points.append({t: x[t] + s * u[t] for t in trainable})
    cm = copies_model(p, trainable, constants, loss_outputs, weights, points)
    path = os.path.join(work, "fd.onnx")
    onnx.save(cm, path)
    prog = os.path.join(work, "fd.program")
    proc = _run([args.dtcc, "compile", path, "--compile-to", "program", "-o", prog])
    if proc.returncode != 0:
        rejected = classify(proc.stderr)
        if rejected:
            return Result("failed", f"float64 model rejected: {rejected[0]} "
                                    f"{', '.join(rejected[1])}")
        return Result("failed", "compile float64 model: " + proc.stderr.strip())
    out_dir = os.path.join(work, "fd_out")
    proc = _run([args.runner, "--program", prog, "--output-dir", out_dir])
    if proc.returncode != 0:
        return Result("failed", "run float64 model: " + proc.stderr.strip())

    # The float64 forward against ONNX's expected outputs. Integer outputs
    # (the node suite checked them exactly) are left out: one rounded from
    # a float (a quantization) may round a tie of the float32 reference
    # differently in float64, and no gradient is taken of it.
    for i, o in enumerate(model.graph.output):
        elem = o.type.tensor_type.elem_type
        if o.name not in p.expected or elem not in FLOAT_TYPES:
            continue
        expected = _widen(numpy_helper.to_array(p.expected[o.name]), elem)
        actual = _read(out_dir, f"out__{i}")
        if actual is None or actual.shape != expected.shape:
            return Result("failed", f"float64 forward: output '{o.name}' has shape "
                                    f"{None if actual is None else list(actual.shape)}, "
                                    f"expected {list(expected.shape)}")
        rtol, atol = FORWARD_TOLERANCES[elem]
        ok = np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        if not np.all(ok):
            idx = tuple(np.argwhere(~ok)[0].tolist())
            return Result("failed", f"float64 forward differs from ONNX's expected "
                                    f"output '{o.name}' at {idx}: {actual[idx]} vs "
                                    f"{expected[idx]}")
    names = [q.name for q in model.graph.output]
    centre = {o: _read(out_dir, f"out__{names.index(o)}") for o in loss_outputs}
    losses = np.array([float(_read(out_dir, f"{LOSS}__c{k}")) for k in range(len(points))])
    if not np.isfinite(losses[0]) or not all(np.all(np.isfinite(v))
                                             for v in centre.values()):
        return Result("skipped", ("outputs not finite at the test's inputs", None))
    terms = [centre[o] * w.astype(np.float64) for o, w in zip(loss_outputs, weights.values())]
    magnitude = sum(float(np.sum(np.abs(t))) for t in terms)
    reference = sum(float(np.sum(t)) for t in terms)
    if abs(losses[0] - reference) > 1e-12 * max(1.0, magnitude):
        return Result("failed", f"float64 loss {losses[0]} differs from the loss of "
                                f"its outputs {reference}")
    # The size of a gradient through ops of unit gain: the floor of the
    # absolute tolerance, for gradients that are small because the function
    # is flat there (a saturated tanh), which the model's type cannot resolve.
    unit = max((float(np.max(np.abs(t))) for t in terms if t.size), default=0.0)
    unit = max(unit, max((float(np.max(np.abs(w))) for w in weights.values() if w.size),
                         default=0.0))
    for ty, (_, loss) in gradients.items():
        rtol, _ = TOLERANCES[ty]
        if abs(loss - losses[0]) > max(rtol, float(np.finfo(np.float32).eps)) * magnitude:
            return Result("failed", f"train_step loss {loss} ({TYPE_NAMES[ty]}) differs "
                                    f"from the float64 loss {losses[0]}")

    # Finite differences along each probe; the smooth ones are compared.
    h = STEP
    noise = 64 * np.finfo(np.float64).eps * max(magnitude, 1e-300) / (h / 4)
    finite = []
    nonsmooth = 0
    for j, (label, u) in enumerate(probes):
        f = dict(zip(STEPS, losses[1 + per_probe * j: 1 + per_probe * (j + 1)]))
        f0 = losses[0]
        d = {k: (f[k] - f[-k]) / (2 * k) for k in (h, h / 2, h / 4)}
        r1 = (4 * d[h / 2] - d[h]) / 3
        r2 = (4 * d[h / 4] - d[h / 2]) / 3
        s = {k: (f[k] - 2 * f0 + f[-k]) / k for k in (h / 2, h / 4)}
        kink = abs(2 * s[h / 4] - s[h / 2])
        threshold = SMOOTH_RTOL * max(abs(r2), abs(d[h])) + noise
        # Not finite: the step leaves the function's domain (Pow at 0).
        if not (abs(r1 - r2) <= threshold and kink <= threshold):
            nonsmooth += 1
            continue
        finite.append((label, u, r2))
    stats = {"probes": len(probes), "nonsmooth": nonsmooth, "sampled": sampled}
    for ty, (grads, _) in sorted(gradients.items(), key=lambda kv: -PRECISION_ORDER.index(kv[0])):
        rtol, atol = TOLERANCES[ty]
        floor = UNIT_FLOOR * float(TYPE_EPS[ty]) * unit
        gmax = max((float(np.max(np.abs(grads[t]), initial=0.0, where=np.isfinite(grads[t]))))
                   for t in trainable)
        worst = None
        for label, u, fd in finite:
            # Over the probe's support only: a NaN elsewhere is another probe's.
            support = {t: np.flatnonzero(u[t]) for t in trainable}
            gu = sum(float(np.dot(grads[t][i], u[t].reshape(-1)[i]))
                     for t, i in support.items())
            gu_abs = sum(float(np.dot(np.abs(grads[t][i]), np.abs(u[t].reshape(-1)[i])))
                         for t, i in support.items())
            u_abs = sum(float(np.sum(np.abs(u[t]))) for t in trainable)
            tol = (rtol * max(np.nan_to_num(gu_abs), abs(fd)) +
                   max(atol * gmax, floor) * u_abs + noise)
            ratio = abs(gu - fd) / tol
            if not np.isfinite(ratio):  # a NaN or infinite gradient fails
                ratio = np.inf
            if worst is None or ratio > worst[0]:
                worst = (ratio, label, gu, fd, tol)
        stats[f"{TYPE_NAMES[ty]} error/tolerance"] = worst[0] if worst else None
        if worst and worst[0] > 1:
            _, label, gu, fd, tol = worst
            return Result("failed", f"{TYPE_NAMES[ty]} gradient along {label}: dtcc "
                                    f"{gu:.9g}, finite differences {fd:.9g} (tolerance "
                                    f"{tol:.3g})", stats)
    if not finite:
        return Result("skipped", ("inputs at a non-differentiable point", None), stats)
    return Result("passed", None, stats)
