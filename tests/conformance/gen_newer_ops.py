"""Writes ONNX's node tests of the ops newer than Debian's libonnx-testdata
(ONNX 1.12, opset 17) into tests/conformance/newer_ops/, in its layout
(model.onnx, test_data_set_N/input_N.pb, output_N.pb).

ONNX's wheels carry the test cases' generators (onnx.backend.test.case.node,
whose expected outputs are onnx.reference's), not their data. Run with a
newer onnx than Debian's, e.g. the benchmarks' environment, never in the
test path:

    ~/.cache/dtcc-bench/venv/bin/pip install onnx==1.23.2
    ~/.cache/dtcc-bench/venv/bin/python tests/conformance/gen_newer_ops.py \\
        tests/conformance/newer_ops \\
        '^test_(rms_normalization|attention|mish|swish|lpnormalization|rotary_embedding)' \\
        --exclude-from tests/conformance/newer_ops/README.md

The tests named in the README's exclusion list (with the measurement that
put them there) are not written.
"""
import argparse
import os
import re
import shutil

import onnx
from onnx import numpy_helper
from onnx.backend.test.case import node


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("pattern", help="regex on test names")
    ap.add_argument("--exclude-from", help="a file whose lines '- `test_...`' name tests to leave out")
    ap.add_argument("--opset", type=int,
                    help="declare models of a newer default-domain opset at this one "
                         "(for ops whose later opsets only add element types)")
    args = ap.parse_args()
    pat = re.compile(args.pattern)
    excluded = set()
    if args.exclude_from:
        excluded = set(re.findall(r"^- `(test_\w+)`", open(args.exclude_from).read(), re.M))
    written = 0
    for case in node.collect_testcases(None):
        if not pat.search(case.name) or case.name.endswith("_expanded") or case.name in excluded:
            continue
        d = os.path.join(args.out, case.name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        model = case.model
        if args.opset:
            for imp in model.opset_import:
                if imp.domain in ("", "ai.onnx") and imp.version > args.opset:
                    imp.version = args.opset
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(model.SerializeToString())
        def tensor(x, name):
            # The float8 and 4-bit cases give their data as TensorProtos.
            if isinstance(x, onnx.TensorProto):
                t = onnx.TensorProto()
                t.CopyFrom(x)
                t.name = name
                return t
            return numpy_helper.from_array(x, name)

        for i, (inputs, outputs) in enumerate(case.data_sets):
            ds = os.path.join(d, f"test_data_set_{i}")
            os.makedirs(ds)
            for j, x in enumerate(inputs):
                with open(os.path.join(ds, f"input_{j}.pb"), "wb") as f:
                    f.write(tensor(x, case.model.graph.input[j].name).SerializeToString())
            for j, x in enumerate(outputs):
                with open(os.path.join(ds, f"output_{j}.pb"), "wb") as f:
                    f.write(tensor(x, case.model.graph.output[j].name).SerializeToString())
        written += 1
    print(f"{written} tests written to {args.out}")


if __name__ == "__main__":
    main()
