#!/usr/bin/python3
"""Runs ONNX's own node tests through dtcc: import -> compile -> run -> compare.

Every test directory of Debian's libonnx-testdata holds a model and one or more
data sets (input_N.pb, output_N.pb). For each, dtcc compiles the model into an
executable, runs it on the inputs and compares its outputs with ONNX's
reference outputs (rtol 1e-3, atol 1e-7 as in ONNX's backend tests; integers
and booleans exactly).

A test is skipped when dtcc rejects the model for using an op outside its set
(listed by op name) or a feature it does not implement (listed by reason). Any
other difference is a failure. Ends with the line
    onnx-node: P passed, F failed, S skipped
and exits non-zero on a failure or fewer passes than --min-passed.
"""

import argparse
import collections
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

DEFAULT_DATA = "/usr/share/libonnx-testdata/data/node"
UNSUPPORTED_OP = re.compile(r"node '[^']*': (\w+) \(domain ([\w.]+), opset (\d+): (.*)\)")
BIND_HINT = re.compile(r"bind its value with --bind ([^=\s]+)=FILE\.pb")
# Rejections that name a feature dtcc does not implement (not a wrong answer).
FEATURE_PATTERNS = [
    (re.compile(r"element type (\w+), which dtcc does not support"), "type {0}"),
    (re.compile(r"cannot cast to (\w+), which dtcc does not support"), "type {0}"),
    (re.compile(r"pad mode \"(\w+)\" is not supported"), "Pad mode {0}"),
    (re.compile(r"is not a tensor \(sequences"), "sequence/optional inputs"),
    (re.compile(r"strings and sparse tensors are not supported"), "string/sparse Constant"),
]


def graph_inputs(model):
    initializers = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers]


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def data_sets(test_dir):
    sets = sorted(d for d in os.listdir(test_dir) if d.startswith("test_data_set_"))
    return [os.path.join(test_dir, d) for d in sets]


def numbered(dir_path, prefix):
    files = [f for f in os.listdir(dir_path) if f.startswith(prefix) and f.endswith(".pb")]
    return sorted(files, key=lambda f: int(f[len(prefix):-3]))


def compare(name, expected, actual, bf16=False):
    """Returns None when equal within tolerance, else a reason.

    ONNX's test data stores bfloat16 as uint16 bits (numpy has no bfloat16)
    and its reference casts to bfloat16 by truncation, where the spec rounds
    to nearest even: bfloat16 outputs compare as floats within one bfloat16
    ulp (2^-7 relative).
    """
    if bf16:
        def widen(t):
            if t.dtype == np.uint16:
                return (t.astype(np.uint32) << 16).view(np.float32)
            return t.astype(np.float32)
        e, a = widen(expected), widen(actual)
        if e.shape != a.shape:
            return f"output '{name}': shape {list(a.shape)}, expected {list(e.shape)}"
        ok = np.isclose(a, e, rtol=2.0 ** -7, atol=0, equal_nan=True)
        if not ok.all():
            return f"output '{name}': bfloat16 values differ by more than one ulp"
        return None
    if expected.shape != actual.shape:
        return f"output '{name}': shape {list(actual.shape)}, expected {list(expected.shape)}"
    if expected.dtype != actual.dtype:
        return f"output '{name}': dtype {actual.dtype}, expected {expected.dtype}"
    if expected.dtype.kind in "fc":
        e = expected.astype(np.float64)
        a = actual.astype(np.float64)
        nan_e, nan_a = np.isnan(e), np.isnan(a)
        if not np.array_equal(nan_e, nan_a):
            return f"output '{name}': NaN positions differ"
        ok = np.isclose(a, e, rtol=1e-3, atol=1e-7, equal_nan=True)
        if not ok.all():
            idx = np.argwhere(~ok)[0]
            return (f"output '{name}': {int((~ok).sum())} of {ok.size} values differ; "
                    f"first at {tuple(idx.tolist())}: {a[tuple(idx)]} vs {e[tuple(idx)]}")
        return None
    if not np.array_equal(expected, actual):
        bad = np.argwhere(expected != actual)[0]
        return (f"output '{name}': values differ; first at {tuple(bad.tolist())}: "
                f"{actual[tuple(bad)]} vs {expected[tuple(bad)]}")
    return None


def classify_rejection(stderr):
    """('op', [op names]) or ('feature', [reasons]) or None for a failure."""
    ops = [m.group(1) for m in UNSUPPORTED_OP.finditer(stderr)]
    if ops:
        return "op", sorted(set(ops))
    for pattern, label in FEATURE_PATTERNS:
        m = pattern.search(stderr)
        if m:
            return "feature", [label.format(*m.groups())]
    return None


def declared_types(values):
    return {v.name: v.type.tensor_type.elem_type for v in values}


def as_bf16_file(src, dst):
    """Rewrites a uint16 tensor file as bfloat16 (same bits); see compare."""
    t = load_pb(src)
    if t.data_type == onnx.TensorProto.UINT16:
        t.data_type = onnx.TensorProto.BFLOAT16
    with open(dst, "wb") as f:
        f.write(t.SerializeToString())
    return dst


def random_dropout(model, data_set):
    """Whether a Dropout in training mode with a nonzero ratio draws a mask:
    its outputs come from ONNX's random generator (numpy's), not dtcc's."""
    if not any(n.op_type == "Dropout" for n in model.graph.node):
        return False
    values = {}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].HasField("t"):
            values[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    for i, name in enumerate(graph_inputs(model)):
        path = os.path.join(data_set, f"input_{i}.pb")
        if os.path.exists(path):
            values[name] = numpy_helper.to_array(load_pb(path))
    for n in model.graph.node:
        if n.op_type != "Dropout" or len(n.input) < 3 or not n.input[2]:
            continue
        training = bool(values.get(n.input[2], False))
        ratio = float(values.get(n.input[1], 0.5)) if len(n.input) > 1 and n.input[1] else 0.5
        if training and ratio > 0:
            return True
    return False


def run_test(args, test_dir):
    """Returns (status, detail) with status in passed/failed/skipped."""
    name = os.path.basename(test_dir)
    model = onnx.load(os.path.join(test_dir, "model.onnx"))
    if any(random_dropout(model, ds) for ds in data_sets(test_dir)):
        return "skipped", ("feature", ["random dropout mask (numpy's generator)"])
    inputs = graph_inputs(model)
    outputs = [o.name for o in model.graph.output]
    input_types = declared_types(model.graph.input)
    output_types = declared_types(model.graph.output)
    BF16 = onnx.TensorProto.BFLOAT16
    work = tempfile.mkdtemp(prefix=name + ".", dir=args.work_dir)
    try:
        for ds in data_sets(test_dir):
            in_files = numbered(ds, "input_")
            by_name = {inputs[i]: os.path.join(ds, f) for i, f in enumerate(in_files)
                       if i < len(inputs)}
            for n, path in list(by_name.items()):
                if input_types.get(n) == BF16:
                    by_name[n] = as_bf16_file(path, os.path.join(work, n + ".bf16.pb"))
            shapes = []
            for n, path in by_name.items():
                dims = "x".join(str(d) for d in load_pb(path).dims)
                shapes += ["--input-shape", f"{n}={dims}"]
            binds = []
            exe = os.path.join(work, "model")
            while True:
                cmd = [args.dtcc, "compile", os.path.join(test_dir, "model.onnx"),
                       "-o", exe] + shapes + binds
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                if p.returncode == 0:
                    break
                wanted = [b for b in BIND_HINT.findall(p.stderr) if b in by_name]
                new = [b for b in wanted if f"{b}={by_name[b]}" not in binds]
                if not new:
                    rejected = classify_rejection(p.stderr)
                    if rejected:
                        return "skipped", rejected
                    return "failed", "compile: " + p.stderr.strip()
                for b in new:
                    binds += ["--bind", f"{b}={by_name[b]}"]
                    # A bound input is no longer an input: drop its shape flag.
                    i = shapes.index(f"{b}={'x'.join(str(d) for d in load_pb(by_name[b]).dims)}")
                    del shapes[i - 1:i + 1]
            bound = {b.split("=", 1)[0] for b in binds[1::2]}
            out_dir = os.path.join(work, "out")
            cmd = [exe, "--output-dir", out_dir]
            for n, path in by_name.items():
                if n not in bound:
                    cmd += ["--input", f"{n}={path}"]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                return "failed", "run: " + p.stderr.strip()
            for i, f in enumerate(numbered(ds, "output_")):
                expected = numpy_helper.to_array(load_pb(os.path.join(ds, f)))
                out_name = outputs[i]
                safe = re.sub(r"[^A-Za-z0-9._-]", "_", out_name) or "output"
                actual_path = os.path.join(out_dir, safe + ".pb")
                if not os.path.exists(actual_path):
                    return "failed", f"output '{out_name}' was not written"
                actual = numpy_helper.to_array(load_pb(actual_path))
                reason = compare(out_name, expected, actual,
                                 bf16=output_types.get(out_name) == BF16)
                if reason:
                    return "failed", f"{os.path.basename(ds)}: {reason}"
        return "passed", None
    except subprocess.TimeoutExpired as e:
        return "failed", f"timeout: {' '.join(e.cmd[:2])}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtcc", required=True, help="path to the dtcc executable")
    parser.add_argument("--data", default=DEFAULT_DATA, help="ONNX node test directory")
    parser.add_argument("--filter", default="", help="regex on test names")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--min-passed", type=int, default=0,
                        help="fail unless at least this many tests pass")
    parser.add_argument("--verbose", action="store_true", help="print every test")
    args = parser.parse_args()

    tests = sorted(d for d in os.listdir(args.data)
                   if re.search(args.filter, d) and
                   os.path.exists(os.path.join(args.data, d, "model.onnx")))
    args.work_dir = tempfile.mkdtemp(prefix="dtcc-onnx-node.")
    results = {}
    try:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(run_test, args, os.path.join(args.data, t)): t
                       for t in tests}
            for done, fut in enumerate(concurrent.futures.as_completed(futures), 1):
                t = futures[fut]
                results[t] = fut.result()
                if args.verbose:
                    print(f"[{done}/{len(tests)}] {t}: {results[t][0]}", flush=True)
                elif done % 100 == 0:
                    print(f"onnx-node: {done}/{len(tests)} run", flush=True)
    finally:
        shutil.rmtree(args.work_dir, ignore_errors=True)

    counts = collections.Counter(status for status, _ in results.values())
    skipped_ops = collections.Counter()
    skipped_features = collections.Counter()
    for status, detail in results.values():
        if status == "skipped":
            kind, names = detail
            target = skipped_ops if kind == "op" else skipped_features
            for n in names:
                target[n] += 1
    if skipped_ops:
        print("skipped, ops outside dtcc's set (tests): " +
              ", ".join(f"{op} ({n})" for op, n in sorted(skipped_ops.items())))
    if skipped_features:
        print("skipped, unsupported features (tests): " +
              ", ".join(f"{f} ({n})" for f, n in sorted(skipped_features.items())))
    failed = sorted(t for t, (s, _) in results.items() if s == "failed")
    for t in failed:
        print(f"FAILED {t}: {results[t][1]}")
    print(f"onnx-node: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped")
    if failed or counts["passed"] < args.min_passed:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
