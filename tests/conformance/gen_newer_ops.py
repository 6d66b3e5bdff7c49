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

With --training-steps it writes instead ONNX's training operators
(Adagrad, Adam, Momentum) at steps T > 0, which ONNX's own tests (all at
T = 0) leave unchecked, as test_dtcc_<op>_step<T>_<type>, their expected
outputs from onnx.reference:

    ~/.cache/dtcc-bench/venv/bin/python tests/conformance/gen_newer_ops.py \\
        tests/conformance/newer_ops --training-steps

With --legacy-opsets it writes instead ops at the opsets older exports
declare (1 to 12: Softmax's 2-D coercion, Pad's, Slice's and Clip's
attributes, ...) as test_dtcc_legacy_*, from ONNX Runtime, into
tests/conformance/legacy_opsets:

    ~/.cache/dtcc-bench/venv/bin/python tests/conformance/gen_newer_ops.py \\
        tests/conformance/legacy_opsets --legacy-opsets

With --tfidf it writes instead TfIdfVectorizer cases ONNX's tests lack
(IDF and TF-IDF, weights, trigrams, a shared output position) as
test_dtcc_tfidfvectorizer_*, from ONNX Runtime (pip install onnxruntime
there too):

    ~/.cache/dtcc-bench/venv/bin/python tests/conformance/gen_newer_ops.py \\
        tests/conformance/newer_ops --tfidf

With --gridsample-nd it writes instead the GridSample cases ONNX's
generators lack and PyTorch cannot check (1-D and volumetric cubic
sampling, opset 20), as test_dtcc_gridsample_*, their expected outputs
from ONNX's reference implementation (onnx.reference):

    ~/.cache/dtcc-bench/venv/bin/python tests/conformance/gen_newer_ops.py \\
        tests/conformance/newer_ops --gridsample-nd
"""
import argparse
import os
import re
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.test.case import node


def write_case(out, name, model, inputs, outputs):
    """One test in ONNX's layout: model.onnx, test_data_set_0/."""
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    ds = os.path.join(d, "test_data_set_0")
    os.makedirs(ds)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for kind, values, infos in (("input", inputs, model.graph.input),
                                ("output", outputs, model.graph.output)):
        for j, x in enumerate(values):
            with open(os.path.join(ds, f"{kind}_{j}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(x, infos[j].name).SerializeToString())


def write_gridsample_nd(out):
    """Cubic GridSample on signals [N, C, W] and volumes [N, C, D, H, W]
    (opset 20) with onnx.reference's outputs. Padding "zeros" at points in
    and past the borders; "border" and "reflection" at points inside the
    image, where the reference (which pads the coordinate, then each tap)
    and PyTorch's convention (each tap only), which dtcc follows and
    ONNX's 2-D tests agree with, give the same values."""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(20)
    written = 0
    for dims, x_shape, out_shape in ((1, (2, 3, 7), (9,)),
                                     (3, (1, 2, 4, 5, 6), (3, 4, 2))):
        for padding in ("zeros", "border", "reflection"):
            for align in (0, 1):
                reach = 1.3 if padding == "zeros" else 1.0
                x = rng.standard_normal(x_shape).astype(np.float32)
                grid = rng.uniform(-reach, reach, size=(x_shape[0], *out_shape, dims))
                grid = grid.astype(np.float32)
                node_ = helper.make_node("GridSample", ["X", "Grid"], ["Y"], mode="cubic",
                                         padding_mode=padding, align_corners=align)
                y_shape = [x_shape[0], x_shape[1], *out_shape]
                graph = helper.make_graph(
                    [node_], "gridsample",
                    [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape)),
                     helper.make_tensor_value_info("Grid", TensorProto.FLOAT, list(grid.shape))],
                    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)])
                model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)],
                                          producer_name="gen_newer_ops.py")
                (y,) = ReferenceEvaluator(model).run(None, {"X": x, "Grid": grid})
                name = f"test_dtcc_gridsample_{dims}d_cubic_{padding}_align_corners_{align}"
                write_case(out, name, model, [x, grid], [y.astype(np.float32)])
                written += 1
    print(f"{written} tests written to {out}")


def write_training_steps(out):
    """ONNX's training operators (ai.onnx.preview.training Adagrad, Adam,
    Momentum) past the first step: every one of ONNX's own tests has T = 0,
    where Adam's bias correction, Adagrad's decayed rate and Momentum's
    beta are not used. Several tensors of several shapes, nonzero
    regularization, float and double; expected outputs from onnx.reference."""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(23)
    cases = [
        ("adam", "Adam", ["V", "H"], dict(alpha=0.8, beta=0.95, epsilon=1e-3,
                                         norm_coefficient=0.02,
                                         norm_coefficient_post=0.01), 3),
        ("adam_defaults", "Adam", ["V", "H"], {}, 10),
        ("adagrad", "Adagrad", ["H"], dict(decay_factor=0.3, epsilon=1e-4,
                                          norm_coefficient=0.05), 4),
        ("momentum", "Momentum", ["V"], dict(alpha=0.9, beta=0.3, mode="standard",
                                            norm_coefficient=0.01), 2),
        ("nesterov", "Momentum", ["V"], dict(alpha=0.7, beta=0.6, mode="nesterov",
                                            norm_coefficient=0.03), 7),
    ]
    written = 0
    domain = "ai.onnx.preview.training"
    for label, op, state, attrs, step in cases:
        for elem, np_type, shapes in ((TensorProto.FLOAT, np.float32, [(3,), (2, 4)]),
                                      (TensorProto.DOUBLE, np.float64, [(2, 3)])):
            lists = ["X", "G"] + state
            names = [f"{l}{i + 1}" for l in lists for i in range(len(shapes))]
            outs = [f"{l}{i + 1}_new" for l in ["X"] + state for i in range(len(shapes))]
            node_ = helper.make_node(op, ["R", "T"] + names, outs, domain=domain, **attrs)
            def info(n, kind):
                i = (names if kind == "in" else outs).index(n) % len(shapes)
                return helper.make_tensor_value_info(n, elem, list(shapes[i]))
            graph = helper.make_graph(
                [node_], f"{label}_step",
                [helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
                 helper.make_tensor_value_info("T", TensorProto.INT64, [])] +
                [info(n, "in") for n in names], [info(n, "out") for n in outs])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, 1)],
                                      producer_name="gen_newer_ops.py")
            feeds = {"R": np.array(0.05, np.float32), "T": np.array(step, np.int64)}
            for n in names:
                shape = shapes[names.index(n) % len(shapes)]
                v = rng.standard_normal(shape)
                if n[0] == "H":  # a sum of squares
                    v = np.abs(v)
                feeds[n] = v.astype(np_type)
            results = ReferenceEvaluator(model).run(None, feeds)
            kind = "float" if elem == TensorProto.FLOAT else "double"
            write_case(out, f"test_dtcc_{label}_step{step}_{kind}", model,
                       [feeds[i.name] for i in graph.input],
                       [np.asarray(r).astype(np_type) for r in results])
            written += 1
    print(f"{written} tests written to {out}")


def write_tfidf(out):
    """TfIdfVectorizer beyond ONNX's tests (all TF of uni- and bigrams over
    int32 tokens): IDF and TF-IDF with and without weights, trigrams with
    skips, int64 tokens, n-grams mapped to output
    positions out of order and two n-grams at one position. Expected
    outputs from ONNX Runtime (from PyPI, in this environment), whose
    weights are per n-gram as ONNX's specification defines them;
    onnx.reference reads them per output position instead, which differs
    where ngram_indexes is not the identity."""
    import onnxruntime as ort
    rng = np.random.default_rng(29)
    pool = [3, 1, 4, 5,                # unigrams
            1, 2, 2, 3, 4, 4, 3, 1,    # bigrams
            1, 2, 3, 2, 2, 2, 4, 1, 2]  # trigrams
    counts = [0, 4, 12]
    cases = [
        ("tfidf_weights", dict(mode="TFIDF", min_gram_length=1, max_gram_length=3,
                                max_skip_count=2, weights=[0.5 + 0.25 * i for i in range(11)],
                                ngram_indexes=[3, 0, 1, 2, 5, 4, 6, 7, 9, 8, 8]),
         TensorProto.INT64, (3, 9)),
        ("idf_weights", dict(mode="IDF", min_gram_length=2, max_gram_length=3,
                              max_skip_count=1, weights=[2.0 - 0.125 * i for i in range(11)],
                              ngram_indexes=list(range(10, -1, -1))), TensorProto.INT32, (2, 14)),
        ("idf_plain", dict(mode="IDF", min_gram_length=1, max_gram_length=2,
                            max_skip_count=3, ngram_indexes=list(range(11))),
         TensorProto.INT32, (12,)),
        ("tfidf_plain_shared_output", dict(mode="TFIDF", min_gram_length=1, max_gram_length=3,
                                           max_skip_count=0,
                                           ngram_indexes=[0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 8]),
         TensorProto.INT64, (2, 7)),
        ("tf_trigrams_skip2", dict(mode="TF", min_gram_length=3, max_gram_length=3,
                                   max_skip_count=2, ngram_indexes=list(range(11))),
         TensorProto.INT64, (4, 16)),
    ]
    written = 0
    for label, attrs, elem, shape in cases:
        node_ = helper.make_node("TfIdfVectorizer", ["X"], ["Y"], pool_int64s=pool,
                                 ngram_counts=counts, **attrs)
        size = max(attrs["ngram_indexes"]) + 1
        y_shape = [shape[0], size] if len(shape) == 2 else [size]
        graph = helper.make_graph(
            [node_], label, [helper.make_tensor_value_info("X", elem, list(shape))],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)],
                                  producer_name="gen_newer_ops.py")
        x = rng.integers(1, 5, size=shape).astype(np.int64 if elem == TensorProto.INT64
                                                  else np.int32)
        model.ir_version = 8  # what this ONNX Runtime reads
        (y,) = ort.InferenceSession(model.SerializeToString()).run(None, {"X": x})
        write_case(out, f"test_dtcc_tfidfvectorizer_{label}", model, [x],
                   [np.asarray(y, np.float32)])
        written += 1
    print(f"{written} tests written to {out}")


def write_legacy_opsets(out):
    """Ops at the opsets PyTorch's older exports and the ONNX model zoo's
    classic models declare (1 to 12), whose semantics or operands differ
    from the latest: Softmax, LogSoftmax and Hardmax coercing to 2-D at
    their axis, Pad's, Slice's and Clip's attributes, and the ops whose
    later versions only widened them (Squeeze, Unsqueeze, Split, Flatten,
    ArgMax, DepthToSpace, OneHot, Greater, Max, PRelu, MaxPool,
    BatchNormalization with spatial). Expected outputs from ONNX Runtime
    (pip install onnxruntime in this environment), each checked against
    onnx.reference where it implements the version."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(31)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    cases = [
        # name, opset, op, attrs, [(name, array)], outputs
        ("softmax_axis1_3d", 11, "Softmax", dict(axis=1), [("X", f32(2, 3, 4))], 1),
        ("softmax_default_axis_4d", 9, "Softmax", {}, [("X", f32(2, 3, 2, 2))], 1),
        ("softmax_last_axis", 12, "Softmax", dict(axis=-1), [("X", f32(2, 3, 5))], 1),
        ("logsoftmax_axis0", 11, "LogSoftmax", dict(axis=0), [("X", f32(3, 2, 2))], 1),
        ("logsoftmax_axis2_4d", 10, "LogSoftmax", dict(axis=2), [("X", f32(2, 2, 3, 2))], 1),
        ("hardmax_axis1_3d", 11, "Hardmax", dict(axis=1), [("X", f32(2, 3, 4))], 1),
        ("pad_constant_value", 7, "Pad", dict(pads=[0, 1, 2, 0, 2, 1], value=1.5),
         [("X", f32(2, 3, 4))], 1),
        ("pad_reflect", 10, "Pad", dict(pads=[0, 0, 1, 2, 0, 0, 2, 1], mode="reflect"),
         [("X", f32(1, 2, 4, 5))], 1),
        ("pad_edge", 7, "Pad", dict(pads=[1, 0, 0, 2], mode="edge"), [("X", f32(3, 2))], 1),
        ("slice_axes", 9, "Slice", dict(starts=[1, -3], ends=[3, 100], axes=[0, 2]),
         [("X", f32(4, 3, 5))], 1),
        ("slice_no_axes", 7, "Slice", dict(starts=[0, 1], ends=[-1, 1000]),
         [("X", f32(3, 4))], 1),
        ("clip_min_max", 7, "Clip", dict(min=-0.5, max=0.7), [("X", f32(3, 4))], 1),
        ("clip_min_only", 10, "Clip", dict(min=0.0), [("X", f32(3, 4))], 1),
        ("squeeze_axes_attr", 9, "Squeeze", dict(axes=[0, 2]), [("X", f32(1, 3, 1, 2))], 1),
        ("unsqueeze_axes_attr", 9, "Unsqueeze", dict(axes=[0, 3]), [("X", f32(3, 2))], 1),
        ("split_attr", 9, "Split", dict(axis=1, split=[1, 3]), [("X", f32(2, 4))], 2),
        ("flatten_axis0", 7, "Flatten", dict(axis=0), [("X", f32(2, 3, 2))], 1),
        ("argmax_keepdims", 9, "ArgMax", dict(axis=1), [("X", f32(3, 4, 2))], 1),
        ("depthtospace_dcr", 7, "DepthToSpace", dict(blocksize=2), [("X", f32(1, 8, 2, 3))], 1),
        ("onehot_axis", 9, "OneHot", dict(axis=1),
         [("I", np.array([0, 2, 1], np.int64)), ("D", np.array([4], np.int64)),
          ("V", np.array([-1.0, 2.0], np.float32))], 1),
        ("greater_broadcast", 7, "Greater", {}, [("A", f32(3, 4)), ("B", f32(4))], 1),
        ("max_same_shapes", 7, "Max", {}, [("A", f32(2, 3)), ("B", f32(2, 3)), ("C", f32(2, 3))], 1),
        ("prelu_channel", 7, "PRelu", {}, [("X", f32(2, 3, 4)), ("S", f32(3, 1))], 1),
        ("maxpool_pads", 7, "MaxPool", dict(kernel_shape=[2, 2], pads=[1, 0, 0, 1], strides=[2, 1]),
         [("X", f32(1, 2, 5, 4))], 1),
        ("batchnorm_spatial", 7, "BatchNormalization", dict(epsilon=1e-3),
         [("X", f32(2, 3, 2, 2)), ("S", f32(3)), ("B", f32(3)), ("M", f32(3)),
          ("V", (np.abs(f32(3)) + 0.5).astype(np.float32))], 1),
    ]
    written = 0
    for label, opset, op, attrs, inputs, n_out in cases:
        outs = [f"Y{i}" for i in range(n_out)]
        node_ = helper.make_node(op, [n for n, _ in inputs], outs, **attrs)
        graph = helper.make_graph(
            [node_], label,
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
             for n, a in inputs],
            [helper.make_tensor_value_info(o, 0, None) for o in outs])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="gen_newer_ops.py")
        model.ir_version = 7
        # The outputs' types from onnx's inference (ONNX Runtime needs them).
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        graph = model.graph
        feeds = dict(inputs)
        ys = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
        try:
            refs = ReferenceEvaluator(model).run(None, feeds)
            if not all(np.allclose(y, r, rtol=1e-5, atol=1e-6) for y, r in zip(ys, refs)):
                # onnx 1.23's reference computes Softmax, LogSoftmax and
                # Hardmax of opsets 1 to 12 along the one axis, as opset 13
                # does, where their specification (and ONNX Runtime)
                # coerces to 2-D.
                print(f"{label}: onnx.reference differs from ONNX Runtime")
        except Exception as e:  # versions the reference lacks or fails on
            print(f"{label}: onnx.reference cannot run it ({type(e).__name__})")
        write_case(out, f"test_dtcc_legacy_{label}_opset{opset}", model,
                   [a for _, a in inputs], [np.asarray(y) for y in ys])
        written += 1
    print(f"{written} tests written to {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("pattern", nargs="?", default="", help="regex on test names")
    ap.add_argument("--exclude-from", help="a file whose lines '- `test_...`' name tests to leave out")
    ap.add_argument("--opset", type=int,
                    help="declare models of a newer default-domain opset at this one "
                         "(for ops whose later opsets only add element types)")
    ap.add_argument("--gridsample-nd", action="store_true",
                    help="write the 1-D and volumetric cubic GridSample cases instead")
    ap.add_argument("--legacy-opsets", action="store_true",
                    help="write ops at opsets 1 to 12 (tests/conformance/legacy_opsets) instead")
    ap.add_argument("--tfidf", action="store_true",
                    help="write TfIdfVectorizer's modes, weights and trigrams instead")
    ap.add_argument("--training-steps", action="store_true",
                    help="write Adagrad, Adam and Momentum past their first step instead")
    args = ap.parse_args()
    if args.legacy_opsets:
        write_legacy_opsets(args.out)
        return
    if args.tfidf:
        write_tfidf(args.out)
        return
    if args.training_steps:
        write_training_steps(args.out)
        return
    if args.gridsample_nd:
        write_gridsample_nd(args.out)
        return
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
