"""Writes an ONNX model with its node names removed and its initializers
renamed W_0, W_1, ...: a model exported with anonymous names.

Usage: anonymize_onnx.py IN.onnx OUT.onnx
"""
import sys

import onnx

model = onnx.load(sys.argv[1])
graph = model.graph
rename = {t.name: f"W_{i}" for i, t in enumerate(graph.initializer)}
for t in graph.initializer:
    t.name = rename[t.name]
for node in graph.node:
    node.name = ""
    for i, name in enumerate(node.input):
        if name in rename:
            node.input[i] = rename[name]
onnx.save(model, sys.argv[2])
