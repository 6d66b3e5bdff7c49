#!/usr/bin/python3
"""Writes an ONNX node test's model as a training graph: every input becomes
an initializer holding its test data (float ones are then trainable
parameters), and the loss is the dot product of each float output with
fixed random weights. Usage: node_test_as_training.py TEST_DIR OUT.onnx"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOATS = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16}


def main(test_dir, out_path):
    model = onnx.load(os.path.join(test_dir, "model.onnx"))
    g = model.graph
    data = os.path.join(test_dir, "test_data_set_0")
    for i, inp in enumerate(list(g.input)):
        t = onnx.TensorProto()
        with open(os.path.join(data, f"input_{i}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        t.name = inp.name
        g.initializer.append(t)
    del g.input[:]
    rng = np.random.default_rng(0)
    terms = []
    for k, out in enumerate(g.output):
        if out.type.tensor_type.elem_type not in FLOATS:
            continue
        t = onnx.TensorProto()
        with open(os.path.join(data, f"output_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        flat, shape = out.name + "__flat", out.name + "__shape"
        g.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), shape))
        g.node.append(helper.make_node("Reshape", [out.name, shape], [flat]))
        if out.type.tensor_type.elem_type != TensorProto.FLOAT:
            g.node.append(helper.make_node("Cast", [flat], [flat + "_f"], to=TensorProto.FLOAT))
            flat += "_f"
        n = int(np.prod(t.dims))
        w = numpy_helper.from_array(rng.uniform(-1, 1, n).astype(np.float32), out.name + "__w")
        g.initializer.append(w)
        g.node.append(helper.make_node("MatMul", [flat, w.name], [out.name + "__dot"]))
        terms.append(out.name + "__dot")
    loss = terms[0]
    for k, term in enumerate(terms[1:]):
        g.node.append(helper.make_node("Add", [loss, term], [f"__sum{k}"]))
        loss = f"__sum{k}"
    g.node.append(helper.make_node("Identity", [loss], ["loss"]))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    onnx.save(model, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
