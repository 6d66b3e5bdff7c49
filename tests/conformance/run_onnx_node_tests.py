#!/usr/bin/python3
"""Runs ONNX's own node tests through dtcc: import -> compile -> run -> compare.

Every test directory of Debian's libonnx-testdata holds a model and one or more
data sets (input_N.pb, output_N.pb). For each, dtcc compiles the model into an
executable, runs it on the inputs and compares its outputs with ONNX's
reference outputs (rtol 1e-3, atol 1e-7 as in ONNX's backend tests; integers
and booleans exactly).

A test is skipped when dtcc rejects the model for using an op outside its set
(listed by op name) or a feature it does not implement (listed by reason). Any
other difference is a failure.

With --suite grad (or all), every test whose forward check passes is also
compiled as a training graph and its gradients are checked against central
finite differences in float64 (grad_check.py says how). Its skips are listed
by reason: forward skipped, no float input, op not differentiable, gradient
not defined by the ONNX op (ONNX's schemas tag each input), inputs at a
non-differentiable point (found numerically), outputs not finite.

Each suite ends with its line
    onnx-node: P passed, F failed, S skipped
    onnx-grad: P passed, F failed, S skipped
and the run exits non-zero on a failure, or when a test listed in the suite's
expected-pass file does not pass (the floor: no silent regressions).
"""

import argparse
import collections
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np
import onnx
from onnx import numpy_helper

import grad_check

HERE = os.path.dirname(os.path.abspath(__file__))
EPILOG = """\
expected passes:
  tests/conformance/expected_pass_node.txt and expected_pass_grad.txt list the
  tests whose forward and gradient checks pass today; every listed test must
  keep passing (a listed test that fails or is now skipped fails the run and
  is printed as REGRESSED). The lists are the floors of `make conformance`
  and of ctest's conformance tests. When an op family is added (or a test
  starts passing for another reason), regenerate them and commit the diff:
    tests/conformance/run_onnx_node_tests.py --dtcc build/bin/dtcc \\
        --suite all --update-expected
  (with --filter, only the entries of the tests run change). A test that
  leaves a list needs a reason in the commit message.
"""

DEFAULT_DATA = "/usr/share/libonnx-testdata/data/node"
UNSUPPORTED_OP = re.compile(r"node '[^']*': (\w+) \(domain ([\w.]+), opset (\d+): (.*)\)")
BIND_HINT = re.compile(r"bind its value with --bind ([^=\s]+)=FILE\.pb")
# Rejections that name a feature dtcc does not implement (not a wrong answer).
FEATURE_PATTERNS = [
    (re.compile(r"element type (\w+), which dtcc does not support"), "type {0}"),
    (re.compile(r"cannot cast to (\w+), which dtcc does not support"), "type {0}"),
    (re.compile(r"pad mode \"(\w+)\" is not supported"), "Pad mode {0}"),
    (re.compile(r"is not a tensor \(sequences"), "sequence/optional inputs"),
    (re.compile(r"is a sequence of \d+ tensors: dtcc's programs return tensors"),
     "sequence outputs"),
    (re.compile(r"strings and sparse tensors are not supported"), "string/sparse Constant"),
    (re.compile(r"has a data-dependent shape \(the elements NonZero"),
     "data-dependent output shape (NonZero)"),
]

# Tests whose reference outputs contradict their own model, with the
# evidence: skipped (and printed as such) where the predicate on the model
# holds, so that a corrected copy of the test still runs.
WRONG_REFERENCE = {
    # onnx 1.12's generator computed the outputs with epsilon 1e-2 and left
    # epsilon out of the node, whose default is 1e-6: numpy's apply_adam
    # with 1e-6 gives X1_new 0.75595933 (dtcc 0.75595933), with 1e-2 the
    # stored 0.75913626. onnx 1.13 passes epsilon to the node; that test
    # is tests/conformance/newer_ops/test_adam_multiple.
    "test_adam_multiple": (
        lambda model: not any(a.name == "epsilon" for a in model.graph.node[0].attribute),
        "reference outputs computed with another epsilon than the node's (onnx 1.12)"),
}


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


# Ops whose outputs are random draws (dgraph.random): ONNX's reference
# outputs come from numpy's generator, which dtcc's counter-based draws do
# not reproduce.
RANDOM_OPS = {"RandomUniform", "RandomUniformLike", "RandomNormal",
              "RandomNormalLike", "Bernoulli"}


def draws_random(model):
    """Whether the model's outputs depend on a random draw."""
    return any(n.op_type in RANDOM_OPS for n in model.graph.node)


def compile_test(args, test_dir, work):
    """Compiles a test's model for each of its data sets: ("planned", plans)
    with one plan per data set (the program, its inputs and the expected
    outputs), or ("skipped"/"failed", detail)."""
    model = onnx.load(os.path.join(test_dir, "model.onnx"))
    wrong = WRONG_REFERENCE.get(os.path.basename(test_dir))
    if wrong and wrong[0](model):
        return "skipped", ("feature", [wrong[1]])
    if any(random_dropout(model, ds) for ds in data_sets(test_dir)):
        return "skipped", ("feature", ["random dropout mask (numpy's generator)"])
    inputs = graph_inputs(model)
    outputs = [o.name for o in model.graph.output]
    input_types = declared_types(model.graph.input)
    output_types = declared_types(model.graph.output)
    BF16 = onnx.TensorProto.BFLOAT16
    # A bare program run by dtcc-runner, as the gradient check runs its
    # own: the same program and kernels as an executable's, without
    # copying the runner into each test's executable (13 MB a compile,
    # which doubled a one-op forward compile's time: 0.2 s against 0.11).
    target = ["--target", args.target, "--compile-to", "program"]
    plans = []
    for n_ds, ds in enumerate(data_sets(test_dir)):
        in_files = numbered(ds, "input_")
        by_name = {inputs[i]: os.path.join(ds, f) for i, f in enumerate(in_files)
                   if i < len(inputs)}
        for n, path in list(by_name.items()):
            if input_types.get(n) == BF16:
                by_name[n] = as_bf16_file(path, os.path.join(work, f"{n_ds}.{n}.bf16.pb"))
        shapes = []
        for n, path in by_name.items():
            dims = "x".join(str(d) for d in load_pb(path).dims)
            shapes += ["--input-shape", f"{n}={dims}"]
        binds = []
        exe = os.path.join(work, f"model{n_ds}.prog")
        while True:
            cmd = [args.dtcc, "compile", os.path.join(test_dir, "model.onnx"),
                   "-o", exe] + target + shapes + binds
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
        plans.append({
            "data_set": os.path.basename(ds), "program": exe,
            "inputs": {n: path for n, path in by_name.items() if n not in bound},
            "outputs": [(outputs[i], os.path.join(ds, f), output_types.get(outputs[i]) == BF16)
                        for i, f in enumerate(numbered(ds, "output_"))]})
    # Compiled (so imported): only its values cannot be compared.
    if draws_random(model):
        return "skipped", ("feature", ["random draws (numpy's generator), compiled "
                                       "but not compared"])
    return "planned", plans


def run_plans(args, plans, work):
    """Runs compiled data sets and compares their outputs: (status, detail)."""
    for n_ds, plan in enumerate(plans):
        out_dir = os.path.join(work, f"out{n_ds}")
        cmd = [args.runner, "--program", plan["program"], "--output-dir", out_dir]
        for n, path in plan["inputs"].items():
            cmd += ["--input", f"{n}={path}"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            return "failed", "run: " + p.stderr.strip()
        for out_name, expected_path, bf16 in plan["outputs"]:
            expected = numpy_helper.to_array(load_pb(expected_path))
            safe = re.sub(r"[^A-Za-z0-9._-]", "_", out_name) or "output"
            actual_path = os.path.join(out_dir, safe + ".pb")
            if not os.path.exists(actual_path):
                return "failed", f"output '{out_name}' was not written"
            actual = numpy_helper.to_array(load_pb(actual_path))
            reason = compare(out_name, expected, actual, bf16=bf16)
            if reason:
                return "failed", f"{plan['data_set']}: {reason}"
    return "passed", None


def in_work_dir(args, prefix, fn):
    """fn(a fresh work directory), removed after; a timeout fails the test."""
    work = tempfile.mkdtemp(prefix=prefix, dir=args.work_dir)
    try:
        return fn(work)
    except subprocess.TimeoutExpired as e:
        return "failed", f"timeout: {' '.join(e.cmd[:2])}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_test(args, test_dir):
    """Returns (status, detail) with status in passed/failed/skipped."""
    def compile_and_run(work):
        status, plans = compile_test(args, test_dir, work)
        if status != "planned":
            return status, plans
        return run_plans(args, plans, work)
    return in_work_dir(args, os.path.basename(test_dir) + ".", compile_and_run)


def prepare_test(args, test_dir):
    """--prepare: compiles a test into args.prepare/<test>/ with copies of
    its inputs and expected outputs; returns its manifest entry."""
    name = os.path.basename(test_dir)
    work = os.path.join(args.prepare, name)
    os.makedirs(work, exist_ok=True)
    try:
        status, plans = compile_test(args, test_dir, work)
    except subprocess.TimeoutExpired as e:
        status, plans = "failed", f"timeout: {' '.join(e.cmd[:2])}"
    if status != "planned":
        shutil.rmtree(work, ignore_errors=True)
        return {"status": status, "detail": plans}
    for n_ds, plan in enumerate(plans):
        def keep(path, tag):
            dst = os.path.join(work, f"{n_ds}.{tag}.pb")
            shutil.copyfile(path, dst)
            return os.path.relpath(dst, args.prepare)
        plan["program"] = os.path.relpath(plan["program"], args.prepare)
        plan["inputs"] = {n: keep(path, "in" + str(i))
                          for i, (n, path) in enumerate(sorted(plan["inputs"].items()))}
        plan["outputs"] = [(n, keep(path, "out" + str(i)), bf16)
                           for i, (n, path, bf16) in enumerate(plan["outputs"])]
    return {"status": "planned", "plans": plans}


def check_test(args, entry, root):
    """--check: runs one prepared test."""
    if entry["status"] != "planned":
        detail = entry["detail"]
        return entry["status"], tuple(detail) if isinstance(detail, list) else detail
    plans = [dict(p, program=os.path.join(root, p["program"]),
                  inputs={n: os.path.join(root, f) for n, f in p["inputs"].items()},
                  outputs=[(n, os.path.join(root, f), b) for n, f, b in p["outputs"]])
             for p in entry["plans"]]
    return in_work_dir(args, "check.", lambda work: run_plans(args, plans, work))


def run_one(args, test_dir):
    """The forward result and, with --suite grad or all, the gradient result."""
    start = time.monotonic()
    forward = run_test(args, test_dir)
    if args.suite == "node":
        return forward, None, time.monotonic() - start, None
    status, detail = forward
    if status != "passed":
        return (forward, ("skipped", ("forward " + status, None)),
                time.monotonic() - start, None)
    model = onnx.load(os.path.join(test_dir, "model.onnx"))
    work = tempfile.mkdtemp(prefix=os.path.basename(test_dir) + ".grad.",
                            dir=args.work_dir)
    try:
        r = grad_check.check(args, test_dir, declared_types(model.graph.input), work,
                             BIND_HINT, classify_rejection)
        return forward, (r.status, r.detail), time.monotonic() - start, r.stats
    except subprocess.TimeoutExpired as e:
        return (forward, ("failed", f"timeout: {' '.join(e.cmd[:2])}"),
                time.monotonic() - start, None)
    except Exception as e:  # a harness error fails this test, not the run
        where = traceback.extract_tb(e.__traceback__)[-1]
        return (forward, ("failed", f"gradient check raised {type(e).__name__}: {e} "
                                    f"({os.path.basename(where.filename)}:{where.lineno})"),
                time.monotonic() - start, None)
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)


def read_expected(path):
    """The test names listed in an expected-pass file ('#' starts a comment)."""
    names = set()
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(line)
    return names


def write_expected(path, passed, suite):
    with open(path, "w") as f:
        f.write(f"# ONNX node tests whose {suite} check passes in dtcc; the conformance\n"
                "# run fails when one of them does not pass. Regenerate after adding\n"
                "# ops (see run_onnx_node_tests.py --help) and review the diff.\n")
        for t in sorted(passed):
            f.write(t + "\n")


def report(label, results, expected_path, args, tests):
    """Prints the summary of one suite; returns whether it is green."""
    counts = collections.Counter(status for status, _ in results.values())
    if label == "onnx-node":
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
    else:
        reasons = collections.Counter()
        details = collections.defaultdict(collections.Counter)
        for status, detail in results.values():
            if status == "skipped":
                reason, what = detail
                reasons[reason] += 1
                if what:
                    details[reason][what] += 1
        for reason, n in sorted(reasons.items()):
            more = ""
            if details[reason]:
                more = ": " + ", ".join(f"{w} ({k})" for w, k in sorted(details[reason].items()))
            print(f"{label} skipped, {reason} ({n}){more}")
    failed = sorted(t for t, (s, _) in results.items() if s == "failed")
    for t in failed:
        print(f"FAILED {t}: {results[t][1]}")
    green = not failed
    if args.update_expected:
        passed = {t for t, (s, _) in results.items() if s == "passed"}
        if args.filter:
            # Only the tests this run saw change.
            old = read_expected(expected_path) if os.path.exists(expected_path) else set()
            passed |= {t for t in old if t not in results}
        write_expected(expected_path, passed, "forward" if label == "onnx-node" else "gradient")
        print(f"{label}: wrote {len(passed)} expected passes to {expected_path}")
    elif expected_path:
        expected = read_expected(expected_path) & set(tests)
        regressed = sorted(t for t in expected if results[t][0] != "passed")
        for t in regressed:
            status, detail = results[t]
            why = detail if status == "failed" else ", ".join(
                str(x) for x in detail if x) if isinstance(detail, tuple) else detail
            print(f"REGRESSED {t}: expected to pass, {status} ({why})")
        green = green and not regressed
        if regressed:
            shown = os.path.relpath(expected_path)
            if shown.startswith(".."):
                shown = expected_path
            print(f"{label}: {len(regressed)} of the {len(expected)} expected passes "
                  f"({shown}) did not pass")
    print(f"{label}: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped")
    if counts["passed"] < args.min_passed:
        print(f"{label}: fewer than --min-passed {args.min_passed}")
        green = False
    return green


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtcc", help="path to the dtcc executable (needed unless --check)")
    parser.add_argument("--runner", help="path to dtcc-runner, or dtcc-runner-cuda with "
                                         "--target cuda (default: beside --dtcc)")
    parser.add_argument("--target", choices=["cpu", "cuda"], default="cpu",
                        help="compile for and run on this device (cuda: forward tests only)")
    parser.add_argument("--prepare", metavar="DIR",
                        help="only compile the tests into DIR (programs, inputs, expected "
                             "outputs, manifest.json), e.g. for a GPU machine without dtcc")
    parser.add_argument("--check", metavar="DIR",
                        help="run the tests a --prepare wrote to DIR with --runner")
    parser.add_argument("--data", default=DEFAULT_DATA, help="ONNX node test directory")
    parser.add_argument("--filter", default="", help="regex on test names")
    parser.add_argument("--suite", choices=["node", "grad", "all"], default="node",
                        help="forward tests (node), gradient tests (grad, which also "
                             "runs each forward test first) or both (all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--expected-node", default=os.path.join(HERE, "expected_pass_node.txt"),
                        help="tests whose forward check must pass (default: %(default)s)")
    parser.add_argument("--expected-grad", default=os.path.join(HERE, "expected_pass_grad.txt"),
                        help="tests whose gradient check must pass (default: %(default)s)")
    parser.add_argument("--update-expected", action="store_true",
                        help="rewrite the expected-pass lists of the suites run from "
                             "this run's passes instead of checking them")
    parser.add_argument("--min-passed", type=int, default=0,
                        help="also fail unless each suite run passes at least this many")
    parser.add_argument("--verbose", action="store_true", help="print every test")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep the gradient checks' models and programs (the "
                             "directory is printed)")
    args = parser.parse_args()
    if not args.dtcc and not args.check:
        parser.error("--dtcc is needed unless --check DIR is given")
    if args.target != "cpu" and args.suite != "node":
        parser.error("--target cuda runs the forward tests only (--suite node)")
    if args.check and not args.runner:
        parser.error("--check needs --runner (dtcc-runner-cuda for a cuda --prepare)")
    if not args.runner:
        args.runner = os.path.join(os.path.dirname(args.dtcc), "dtcc-runner" +
                                   ("-cuda" if args.target == "cuda" else ""))
    if args.prepare:
        args.prepare = os.path.abspath(args.prepare)
    manifest = {}
    if args.check:
        args.check = os.path.abspath(args.check)
        with open(os.path.join(args.check, "manifest.json")) as f:
            manifest = json.load(f)
        args.target = manifest.pop("__target__", args.target)
        tests = sorted(t for t in manifest if re.search(args.filter, t))
    else:
        tests = sorted(d for d in os.listdir(args.data)
                       if re.search(args.filter, d) and
                       os.path.exists(os.path.join(args.data, d, "model.onnx")))
    # The tests' files (programs, inputs, and the finite-difference runs'
    # hundreds of one-number outputs) and dtcc's own temporaries go to
    # memory where the machine has a tmpfs: on ext4 the creation and
    # removal of those files was a quarter of the suite's CPU time.
    # (Not a container's small default /dev/shm: at least 1 GiB free.)
    if "TMPDIR" not in os.environ and os.path.isdir("/dev/shm") and \
            os.access("/dev/shm", os.W_OK):
        shm = os.statvfs("/dev/shm")
        if shm.f_bavail * shm.f_frsize >= 1 << 30:
            os.environ["TMPDIR"] = tempfile.tempdir = "/dev/shm"
    args.work_dir = tempfile.mkdtemp(prefix="dtcc-onnx-node.")
    forward, grad = {}, {}
    start = time.monotonic()

    def one(t):
        if args.prepare:
            entry = prepare_test(args, os.path.join(args.data, t))
            manifest[t] = entry
            status = "passed" if entry["status"] == "planned" else entry["status"]
            return (status, entry.get("detail")), None, 0.0, None
        if args.check:
            return check_test(args, manifest[t], args.check), None, 0.0, None
        return run_one(args, os.path.join(args.data, t))
    try:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(one, t): t for t in tests}
            for done, fut in enumerate(concurrent.futures.as_completed(futures), 1):
                t = futures[fut]
                forward[t], g, seconds, stats = fut.result()
                if g is not None:
                    grad[t] = g
                if args.verbose:
                    line = f"[{done}/{len(tests)}] {t} ({seconds:.1f} s): {forward[t][0]}"
                    if g is not None:
                        line += f", gradient {g[0]}"
                        if g[1]:
                            line += f" ({g[1]})"
                        if stats:
                            line += " " + ", ".join(
                                f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                for k, v in stats.items())
                    print(line, flush=True)
                elif done % 100 == 0:
                    print(f"conformance: {done}/{len(tests)} run", flush=True)
    finally:
        if args.keep_work:
            print(f"conformance: work files kept in {args.work_dir}")
        else:
            shutil.rmtree(args.work_dir, ignore_errors=True)

    if args.prepare:
        manifest["__target__"] = args.target
        with open(os.path.join(args.prepare, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        counts = collections.Counter(s for s, _ in forward.values())
        print(f"conformance: prepared {counts['passed']} tests for --target "
              f"{args.target} in {args.prepare} ({counts['skipped']} skipped, "
              f"{counts['failed']} failed to compile)")
        for t in sorted(t for t, (s, _) in forward.items() if s == "failed"):
            print(f"FAILED {t}: {forward[t][1]}")
        return 0 if not counts["failed"] else 1
    green = True
    if args.suite in ("node", "all"):
        green &= report("onnx-node", forward, args.expected_node, args, tests)
    if args.suite in ("grad", "all"):
        green &= report("onnx-grad", grad, args.expected_grad, args, tests)
    print(f"conformance: {len(tests)} tests in {time.monotonic() - start:.0f} s "
          f"with {args.jobs} jobs")
    return 0 if green else 1


if __name__ == "__main__":
    sys.exit(main())
