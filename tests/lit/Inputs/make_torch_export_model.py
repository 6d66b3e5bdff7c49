"""Writes a model as PyTorch's ONNX exporter (torch.onnx.export(...,
dynamo=True)) writes one: initializers that are the module's parameters,
its buffers and the exporter's own constants, told apart only by the
metadata torch.export's graph signature leaves on each value
(ValueInfoProto.metadata_props, "pkg.torch.export.graph_signature.InputSpec.
kind") and on the graph (GraphProto.metadata_props, the signature's text).

Usage: make_torch_export_model.py OUT.onnx [--missing NAME]
       make_torch_export_model.py OUT.onnx --clip OP


loss = ReduceMean(Pow(X @ W + B + running, e)) with W, B parameters,
`running` a buffer and `e` (2.0) a constant; --missing adds a parameter NAME
to the signature that the graph lacks (as the exporter's optimizer leaves
one it merged with another of equal value).

Debian's onnx 1.12 predates metadata_props on values and graphs (onnx 1.16):
the fields are appended to the serialized messages as protobuf wire format,
which is what a newer onnx writes.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def field(number, payload):
    """A length-delimited protobuf field."""
    out = bytearray()
    key = (number << 3) | 2
    for v in (key, len(payload)):
        while True:
            b = v & 0x7F
            v >>= 7
            out.append(b | (0x80 if v else 0))
            if not v:
                break
    return bytes(out) + payload


def entry(key, value):
    """A StringStringEntryProto."""
    e = onnx.StringStringEntryProto(key=key, value=value)
    return e.SerializeToString()


def with_metadata(message, number, props):
    """`message` (a ValueInfoProto, NodeProto or GraphProto) with
    metadata_props."""
    data = message.SerializeToString()
    for k, v in props:
        data += field(number, entry(k, v))
    out = type(message)()
    out.ParseFromString(data)
    return out


def clip_model(out, op):
    """Y = Clip(X, 0, 6), the node's metadata naming the PyTorch op `op`
    (hardtanh: nn.ReLU6; clamp: torch.clamp) as the exporter records it."""
    node = helper.make_node("Clip", ["X", "lo", "hi"], ["Y"], name="node_" + op)
    node = with_metadata(node, 9, [(
        "pkg.torch.onnx.fx_node",
        "%%%s : [num_users=1] = call_function[target=torch.ops.aten.%s.default]"
        "(args = (%%x, 0.0, 6.0), kwargs = {})" % (op, op))])
    graph = helper.make_graph(
        [node], "main_graph",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
        initializer=[numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
                     numpy_helper.from_array(np.array(6.0, np.float32), "hi")])
    onnx.save(helper.make_model(graph, producer_name="pytorch",
                                opset_imports=[helper.make_opsetid("", 17)]), out)


def batch_norm_model(out, training):
    """loss = mean(BatchNormalization(X)) written as PyTorch 2's exporter
    writes a BatchNorm1d: in ONNX's inference form (no training_mode, one
    output), the node's metadata naming the op it came from with its
    training argument (`training`: "True" for a module in train())."""
    node = helper.make_node(
        "BatchNormalization", ["X", "bn.weight", "bn.bias", "bn.running_mean",
                               "bn.running_var"], ["Y"], epsilon=1e-5,
        momentum=0.9, name="node__native_batch_norm_legit_functional")
    node = with_metadata(node, 9, [(
        "pkg.torch.onnx.fx_node",
        "%_native_batch_norm_legit_functional : [num_users=3] = call_function["
        "target=torch.ops.aten._native_batch_norm_legit_functional.default]"
        "(args = (%x, %p_bn_weight, %p_bn_bias, %b_bn_running_mean, "
        "%b_bn_running_var, " + training + ", 0.1, 1e-05), kwargs = {})")])
    graph = helper.make_graph(
        [node, helper.make_node("ReduceMean", ["Y"], ["loss"], keepdims=0)],
        "main_graph",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 3, 2])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(np.full((3,), v, np.float32), n)
                     for n, v in (("bn.weight", 1.0), ("bn.bias", 0.0),
                                  ("bn.running_mean", 0.0),
                                  ("bn.running_var", 1.0))])
    onnx.save(helper.make_model(graph, producer_name="pytorch",
                                opset_imports=[helper.make_opsetid("", 18)]), out)


def cross_entropy_model(out, smoothing):
    """loss = SoftmaxCrossEntropyLoss(X @ W, labels) written as PyTorch 2's
    exporter writes F.cross_entropy(..., label_smoothing=`smoothing`): the
    node has no smoothing; its metadata records the call's arguments."""
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["S", "L"], ["loss"],
                            reduction="mean", name="node_cross_entropy_loss")
    node = with_metadata(node, 9, [(
        "pkg.torch.onnx.fx_node",
        "%cross_entropy_loss : [num_users=1] = call_function[target=torch.ops."
        "aten.cross_entropy_loss.default](args = (%linear, %y, None, 1, -100, "
        + smoothing + "), kwargs = {})")])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["S"], name="node_matmul"),
         node], "main_graph",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("L", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(np.full((3, 4), 0.1, np.float32), "W")])
    onnx.save(helper.make_model(graph, producer_name="pytorch",
                                opset_imports=[helper.make_opsetid("", 18)]), out)


def detach_model(out):
    """loss = mean((X W - detach(X W))^2 + X W), the detach an Identity
    whose metadata names aten.detach, as PyTorch 2's exporter writes it."""
    node = helper.make_node("Identity", ["S"], ["D"], name="node_detach")
    node = with_metadata(node, 9, [(
        "pkg.torch.onnx.fx_node",
        "%detach : [num_users=1] = call_function[target=torch.ops.aten.detach."
        "default](args = (%linear,), kwargs = {})")])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["S"], name="node_matmul"),
         node, helper.make_node("Sub", ["S", "D"], ["E"], name="node_sub"),
         helper.make_node("Mul", ["E", "E"], ["E2"], name="node_mul"),
         helper.make_node("Add", ["E2", "S"], ["T"], name="node_add"),
         helper.make_node("ReduceMean", ["T"], ["loss"], keepdims=0,
                          name="node_mean")], "main_graph",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(np.full((3, 4), 0.1, np.float32), "W")])
    onnx.save(helper.make_model(graph, producer_name="pytorch",
                                opset_imports=[helper.make_opsetid("", 18)]), out)


def main():
    out = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "--detach":
        return detach_model(out)
    if len(sys.argv) > 3 and sys.argv[2] == "--cross-entropy":
        return cross_entropy_model(out, sys.argv[3])
    if len(sys.argv) > 3 and sys.argv[2] == "--clip":
        return clip_model(out, sys.argv[3])
    if len(sys.argv) > 3 and sys.argv[2] == "--batch-norm":
        return batch_norm_model(out, sys.argv[3])
    missing = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--missing" else None
    inits = [
        numpy_helper.from_array(np.full((4, 3), 0.1, np.float32), "W"),
        numpy_helper.from_array(np.zeros((3,), np.float32), "B"),
        numpy_helper.from_array(np.ones((3,), np.float32), "running"),
        numpy_helper.from_array(np.array(2.0, np.float32), "e"),
    ]
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["xw"], name="node_matmul"),
        helper.make_node("Add", ["xw", "B"], ["xb"], name="node_add"),
        helper.make_node("Add", ["xb", "running"], ["xr"], name="node_add_1"),
        helper.make_node("Pow", ["xr", "e"], ["p"], name="node_pow"),
        helper.make_node("ReduceMean", ["p"], ["loss"], keepdims=0,
                         name="node_mean"),
    ]
    # The module scopes the exporter records on each node
    # (NodeProto.metadata_props, field 9): the product and its bias in
    # blocks.0.fc (a ModuleList's child: the list itself is no scope), the
    # rest in blocks.1, the mean in the root.
    scopes = ["['', 'blocks.0', 'blocks.0.fc', 'matmul']",
              "['', 'blocks.0', 'blocks.0.fc', 'add']",
              "['', 'blocks.1', 'add_1']",
              "['', 'blocks.1', 'pow']",
              "['', 'mean']"]
    nodes = [with_metadata(n, 9, [("pkg.torch.onnx.name_scopes", s)])
             for n, s in zip(nodes, scopes)]
    kind = "pkg.torch.export.graph_signature.InputSpec.kind"
    infos = []
    for name, k, shape in [("W", "PARAMETER", [4, 3]),
                           ("B", "PARAMETER", [3]),
                           ("running", "BUFFER", [3])]:
        vi = helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
        infos.append(with_metadata(vi, 4, [(kind, k)]))
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])
    x = with_metadata(x, 4, [(kind, "USER_INPUT")])
    graph = helper.make_graph(
        nodes, "main_graph", [x],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=inits, value_info=infos)
    signature = ("\n# inputs\n"
                 "p_w: PARAMETER target='W'\n"
                 "p_b: PARAMETER target='B'\n")
    if missing:
        signature += "p_missing: PARAMETER target='%s'\n" % missing
    signature += ("b_running: BUFFER target='running' persistent=True\n"
                  "x: USER_INPUT\n\n# outputs\nloss: USER_OUTPUT\n")
    graph = with_metadata(graph, 16, [
        ("pkg.torch.export.ExportedProgram.graph_signature", signature)])
    model = helper.make_model(graph, producer_name="pytorch",
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, out)


if __name__ == "__main__":
    main()
