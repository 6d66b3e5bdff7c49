"""Writes an opset-23 model of one Attention node whose boolean attn_mask
is an initializer [256, 256] (lower-triangular: every query row keeps a
key), or with `--empty-row` the same mask with row 3 all false: OUT.onnx.
Q [1, 2, 256, 4], so the scores (131072 elements) are beyond the import's
constant folding and a guard against empty rows would stay in the IR."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out, empty = sys.argv[1], "--empty-row" in sys.argv[2:]
mask = np.tril(np.ones((256, 256), dtype=bool))
if empty:
    mask[3, :] = False
graph = helper.make_graph(
    [helper.make_node("Attention", ["Q", "Q", "Q", "M"], ["Y"])], "g",
    [helper.make_tensor_value_info("Q", TensorProto.FLOAT, [1, 2, 256, 4])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 2, 256, 4])],
    [numpy_helper.from_array(mask, "M")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
model.ir_version = 10
onnx.save(model, out)
