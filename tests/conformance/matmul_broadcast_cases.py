#!/usr/bin/python3
"""MatMul with NumPy broadcasting in every direction, as ONNX node tests.

ONNX's own node tests have MatMul only on operands of one batch shape
(test_matmul_2d/3d/4d). This writes a node-test directory per broadcasting
form (1-D operands, N-D x 2-D, 2-D x N-D, size-1 batch dimensions against
larger ones, different ranks) in f32, f64 and int32, with numpy.matmul's
result as the expected output, and runs them through
run_onnx_node_tests.py: import -> compile -> run -> compare.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper

# (name, lhs shape, rhs shape)
CASES = [
    ("1d_1d", [5], [5]),
    ("1d_2d", [5], [5, 3]),
    ("2d_1d", [4, 5], [5]),
    ("1d_3d", [5], [2, 5, 3]),
    ("3d_1d", [2, 4, 5], [5]),
    ("3d_2d", [2, 4, 5], [5, 3]),
    ("2d_3d", [4, 5], [2, 5, 3]),
    ("2d_4d", [4, 5], [2, 3, 5, 6]),
    ("4d_2d", [2, 3, 4, 5], [5, 6]),
    ("size1_vs_n", [2, 1, 4, 5], [3, 5, 6]),
    ("both_broadcast", [1, 3, 4, 5], [2, 1, 5, 6]),
    ("strided_groups", [2, 1, 3, 4, 5], [1, 4, 1, 5, 2]),
    ("ones_only", [1, 4, 5], [1, 1, 5, 6]),
]
TYPES = [("f32", np.float32, onnx.TensorProto.FLOAT),
         ("f64", np.float64, onnx.TensorProto.DOUBLE),
         ("i32", np.int32, onnx.TensorProto.INT32)]


def write_case(root, name, a, b, elem):
    y = np.matmul(a, b)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], name,
        [helper.make_tensor_value_info("a", elem, a.shape),
         helper.make_tensor_value_info("b", elem, b.shape)],
        [helper.make_tensor_value_info("y", elem, y.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(model, os.path.join(d, "model.onnx"))
    for i, (n, v) in enumerate([("a", a), ("b", b)]):
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, n).SerializeToString())
    with open(os.path.join(d, "test_data_set_0", "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(np.asarray(y), "y").SerializeToString())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--jobs", default="2")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    root = tempfile.mkdtemp(prefix="dtcc-matmul-broadcast.")
    count = 0
    for name, ls, rs in CASES:
        for tname, dtype, elem in TYPES:
            if dtype == np.int32:
                a = rng.integers(-5, 6, ls).astype(dtype)
                b = rng.integers(-5, 6, rs).astype(dtype)
            else:
                a = rng.standard_normal(ls).astype(dtype)
                b = rng.standard_normal(rs).astype(dtype)
            write_case(root, f"test_matmul_broadcast_{name}_{tname}", a, b, elem)
            count += 1
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "run_onnx_node_tests.py")
    p = subprocess.run([sys.executable, runner, "--dtcc", args.dtcc, "--data", root,
                        "--jobs", args.jobs, "--min-passed", str(count)])
    if p.returncode == 0:
        import shutil
        shutil.rmtree(root, ignore_errors=True)
    else:
        print("cases kept in", root)
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
