"""Writes model.onnx whose weight W lives in the external file weights.bin.

Usage: make_external_data_model.py DIR
The model computes Y = X @ W with X: float[2,4], W: float[4,3] = arange(12).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
w = np.arange(12, dtype=np.float32).reshape(4, 3)
with open(os.path.join(out, "weights.bin"), "wb") as f:
    f.write(b"\0" * 16)  # an offset, to test that it is honoured
    f.write(w.tobytes())
init = TensorProto()
init.name = "W"
init.data_type = TensorProto.FLOAT
init.dims.extend([4, 3])
init.data_location = TensorProto.EXTERNAL
for k, v in [("location", "weights.bin"), ("offset", "16"), ("length", str(w.nbytes))]:
    e = init.external_data.add()
    e.key, e.value = k, v
graph = helper.make_graph(
    [helper.make_node("MatMul", ["X", "W"], ["Y"], name="matmul")],
    "external",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])],
    [init])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
with open(os.path.join(out, "model.onnx"), "wb") as f:
    f.write(model.SerializeToString())
