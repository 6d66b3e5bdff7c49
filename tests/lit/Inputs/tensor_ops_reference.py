"""Runs ONNX models of dtcc's resampling, indexing, einsum and recurrent ops
against references that ONNX 1.12's node tests lack: numpy (einsum, pad
wrap, gather_nd with two batch dims) and PyTorch 1.13 (interpolate with
antialias, LSTM and GRU with layout 1 and both directions).

Usage: tensor_ops_reference.py WORKDIR. Compiles each case with `dtcc`
(found on PATH), runs it, prints "ok <case>" or "FAIL <case>: <why>" and
exits non-zero if any failed.
"""
import os
import subprocess
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

WORK = sys.argv[1]
os.makedirs(WORK, exist_ok=True)
RNG = np.random.default_rng(5)
FAILED = []

ONNX_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
              np.int64: TensorProto.INT64, np.int32: TensorProto.INT32}


def onnx_type(a):
    return ONNX_TYPES[a.dtype.type]


def run_case(name, nodes, inputs, outputs, expected, opset, rtol=1e-5,
             atol=1e-6, initializers=()):
    """Builds a model of `nodes`, runs it with dtcc, compares `expected`."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, onnx_type(a), a.shape)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, onnx_type(expected[n]), expected[n].shape)
         for n in outputs],
        initializer=[numpy_helper.from_array(a, n) for n, a in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    d = os.path.join(WORK, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    onnx.save(model, path)
    exe = os.path.join(d, "model")
    p = subprocess.run(["dtcc", "compile", path, "-o", exe], capture_output=True,
                       text=True)
    if p.returncode:
        FAILED.append(name)
        print(f"FAIL {name}: compile: {p.stderr.strip()}")
        return
    args = [exe, "--output-dir", os.path.join(d, "out")]
    for n, a in inputs.items():
        f = os.path.join(d, n + ".pb")
        with open(f, "wb") as fh:
            fh.write(numpy_helper.from_array(a, n).SerializeToString())
        args += ["--input", f"{n}={f}"]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode:
        FAILED.append(name)
        print(f"FAIL {name}: run: {p.stderr.strip()}")
        return
    for n in outputs:
        t = onnx.TensorProto()
        with open(os.path.join(d, "out", n + ".pb"), "rb") as fh:
            t.ParseFromString(fh.read())
        got, want = numpy_helper.to_array(t), expected[n]
        if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=atol):
            FAILED.append(name)
            err = np.abs(got - want).max() if got.shape == want.shape else "shape"
            print(f"FAIL {name}: output {n} differs (max error {err})")
            return
    print(f"ok {name}")


def const(name, array):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.asarray(array), name))


# Einsum against numpy.einsum.
EINSUM = [
    ("einsum_matmul_chain", "ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("einsum_ellipsis_broadcast", "...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 2)]),
    ("einsum_trace", "ii", [(4, 4)]),
    ("einsum_outer", "i,j->ij", [(3,), (4,)]),
    ("einsum_bilinear", "bn,anm,bm->ba", [(2, 3), (5, 3, 4), (2, 4)]),
    ("einsum_batch_diag_sum", "bii,bjj->b", [(2, 3, 3), (2, 4, 4)]),
    ("einsum_implicit_sorted", "kj,ji", [(2, 3), (3, 4)]),
    ("einsum_keep_repeated", "aab->ab", [(3, 3, 2)]),
    ("einsum_size1_broadcast", "ij,ij->ij", [(3, 1), (3, 4)]),
]
for name, eq, shapes in EINSUM:
    arrays = {f"x{i}": RNG.standard_normal(s).astype(np.float32)
              for i, s in enumerate(shapes)}
    if name == "einsum_size1_broadcast":
        want = arrays["x0"] * arrays["x1"]
    else:
        want = np.einsum(eq, *arrays.values())
    want = np.asarray(want, dtype=np.float32)
    run_case(name, [helper.make_node("Einsum", list(arrays), ["y"], equation=eq)],
             arrays, ["y"], {"y": want}, 12, rtol=1e-4, atol=1e-5)

# Pad wrap (opset 19) and reflect beyond the dimension against numpy.pad.
x = RNG.standard_normal((2, 3)).astype(np.float32)
for mode, pads in [("wrap", [1, 4, 2, 5]), ("reflect", [0, 5, 1, 7]),
                   ("edge", [3, 0, 0, 2])]:
    want = np.pad(x, ((pads[0], pads[2]), (pads[1], pads[3])), mode=mode)
    run_case(f"pad_{mode}_long", [const("p", np.array(pads, np.int64)),
                                  helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)],
             {"x": x}, ["y"], {"y": want}, 19)

# GatherND with two batch dims against a loop.
data = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
idx = RNG.integers(-4, 4, (2, 3, 6, 1)).astype(np.int64)
want = np.zeros((2, 3, 6, 5), np.float32)
for a in range(2):
    for b in range(3):
        for i in range(6):
            want[a, b, i] = data[a, b, idx[a, b, i, 0]]
run_case("gathernd_batch_dims_2",
         [helper.make_node("GatherND", ["d", "i"], ["y"], batch_dims=2)],
         {"d": data, "i": idx}, ["y"], {"y": want}, 13)

# Resize-18 against torch.nn.functional.interpolate.
img = RNG.standard_normal((1, 2, 9, 7)).astype(np.float32)
t = torch.from_numpy(img)
RESIZE = [
    # name, attributes, sizes of axes [2, 3], torch reference
    ("resize_antialias_linear", dict(mode="linear", antialias=1, exclude_outside=1),
     [4, 3], lambda: F.interpolate(t, size=(4, 3), mode="bilinear",
                                   align_corners=False, antialias=True)),
    ("resize_cubic_half_pixel", dict(mode="cubic"), [13, 11],
     lambda: F.interpolate(t, size=(13, 11), mode="bicubic", align_corners=False)),
    ("resize_linear_align_corners",
     dict(mode="linear", coordinate_transformation_mode="align_corners"), [5, 12],
     lambda: F.interpolate(t, size=(5, 12), mode="bilinear", align_corners=True)),
    ("resize_nearest_asymmetric",
     dict(mode="nearest", coordinate_transformation_mode="asymmetric",
          nearest_mode="floor"), [18, 5],
     lambda: F.interpolate(t, size=(18, 5), mode="nearest")),
]
for name, attrs, sizes, ref in RESIZE:
    run_case(name, [const("s", np.array(sizes, np.int64)),
                    helper.make_node("Resize", ["x", "", "", "s"], ["y"],
                                     axes=[2, 3], **attrs)],
             {"x": img}, ["y"], {"y": ref().numpy()}, 18, rtol=1e-4, atol=1e-5)
# keep_aspect_ratio_policy: one scale for both axes, the output rounded.
want = F.interpolate(t, scale_factor=(4 / 9, 4 / 9), mode="bilinear",
                     align_corners=False, recompute_scale_factor=False).numpy()
run_case("resize_not_larger", [const("s", np.array([4, 5], np.int64)),
                               helper.make_node("Resize", ["x", "", "", "s"], ["y"],
                                                axes=[2, 3], mode="linear",
                                                keep_aspect_ratio_policy="not_larger")],
         {"x": img}, ["y"], {"y": want}, 18, rtol=1e-4, atol=1e-5)


# LSTM and GRU (layout 1, bidirectional) against torch.nn.LSTM / GRU.
def torch_gates(w, order):
    """Reorders ONNX's gate blocks [g0; g1; ...] into torch's order."""
    blocks = np.split(w, len(order), axis=0)
    return np.concatenate([blocks[i] for i in order], axis=0)


batch, seq, inp, hid = 3, 4, 5, 6
xs = RNG.standard_normal((batch, seq, inp)).astype(np.float32)
for cell, gates, to_torch in [("LSTM", 4, [0, 2, 3, 1]),  # ONNX iofc -> torch ifgo
                              ("GRU", 3, [1, 0, 2])]:     # ONNX zrh -> torch rzn
    W = (RNG.standard_normal((2, gates * hid, inp)) * 0.4).astype(np.float32)
    R = (RNG.standard_normal((2, gates * hid, hid)) * 0.4).astype(np.float32)
    B = (RNG.standard_normal((2, 2 * gates * hid)) * 0.2).astype(np.float32)
    h0 = RNG.standard_normal((batch, 2, hid)).astype(np.float32)
    module = (torch.nn.LSTM if cell == "LSTM" else torch.nn.GRU)(
        inp, hid, batch_first=True, bidirectional=True)
    with torch.no_grad():
        for d, suffix in enumerate(["", "_reverse"]):
            getattr(module, "weight_ih_l0" + suffix).copy_(
                torch.from_numpy(torch_gates(W[d], to_torch)))
            getattr(module, "weight_hh_l0" + suffix).copy_(
                torch.from_numpy(torch_gates(R[d], to_torch)))
            getattr(module, "bias_ih_l0" + suffix).copy_(
                torch.from_numpy(torch_gates(B[d, :gates * hid], to_torch)))
            getattr(module, "bias_hh_l0" + suffix).copy_(
                torch.from_numpy(torch_gates(B[d, gates * hid:], to_torch)))
        h0t = torch.from_numpy(h0.transpose(1, 0, 2).copy())
        if cell == "LSTM":
            c0 = RNG.standard_normal((batch, 2, hid)).astype(np.float32)
            y, (hn, cn) = module(torch.from_numpy(xs),
                                 (h0t, torch.from_numpy(c0.transpose(1, 0, 2).copy())))
        else:
            y, hn = module(torch.from_numpy(xs), h0t)
    # torch: [batch, seq, 2 * hid]; ONNX layout 1: [batch, seq, 2, hid].
    want_y = y.numpy().reshape(batch, seq, 2, hid)
    want_h = hn.numpy().transpose(1, 0, 2)
    inputs = {"x": xs, "w": W, "r": R, "b": B, "h0": h0}
    names = ["x", "w", "r", "b", "", "h0"]
    attrs = dict(hidden_size=hid, direction="bidirectional", layout=1)
    if cell == "LSTM":
        inputs["c0"] = c0
        names.append("c0")
    else:
        attrs["linear_before_reset"] = 1
    run_case(f"{cell.lower()}_bidirectional_layout1",
             [helper.make_node(cell, names, ["y", "yh"], **attrs)], inputs,
             ["y", "yh"], {"y": want_y, "yh": want_h}, 14, rtol=1e-4, atol=1e-5)

# sequence_lens: each sequence stops (forward) or starts (reverse) at its own
# length; torch packs the sequences to the same effect.
lens = np.array([4, 2, 3], np.int32)
gates, to_torch = 3, [1, 0, 2]
W = (RNG.standard_normal((2, gates * hid, inp)) * 0.4).astype(np.float32)
R = (RNG.standard_normal((2, gates * hid, hid)) * 0.4).astype(np.float32)
module = torch.nn.GRU(inp, hid, bias=False, bidirectional=True)
with torch.no_grad():
    for d, suffix in enumerate(["", "_reverse"]):
        getattr(module, "weight_ih_l0" + suffix).copy_(
            torch.from_numpy(torch_gates(W[d], to_torch)))
        getattr(module, "weight_hh_l0" + suffix).copy_(
            torch.from_numpy(torch_gates(R[d], to_torch)))
    xt = xs.transpose(1, 0, 2).copy()  # layout 0: [seq, batch, input]
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        torch.from_numpy(xt), torch.from_numpy(lens.astype(np.int64)),
        enforce_sorted=False)
    y, hn = module(packed)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=seq)
want_y = y.numpy().reshape(seq, batch, 2, hid).transpose(0, 2, 1, 3)
run_case("gru_sequence_lens",
         [helper.make_node("GRU", ["x", "w", "r", "", "lens"], ["y", "yh"],
                           hidden_size=hid, direction="bidirectional",
                           linear_before_reset=1)],
         {"x": xt, "w": W, "r": R, "lens": lens}, ["y", "yh"],
         {"y": want_y, "yh": hn.numpy()}, 14, rtol=1e-4, atol=1e-5)

sys.exit(1 if FAILED else 0)
