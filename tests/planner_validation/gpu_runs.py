#!/usr/bin/env python3
"""The planner against dtcc's own training steps measured on GPUs.

validate.py holds the planner to published runs of other systems, priced
with presets. This script holds it to steps of dtcc itself: each row of
gpu_runs.json is a step that dtcc-runner-cuda ran and timed on a GPU, with
the calibration file `dtcc calibrate --device cuda` wrote on that machine in
the same session. `dtcc plan --zoo ... --cluster FILE --json` prices the
row's model and plan from its compiled program (4 and 5 layers compiled and
extrapolated; every instruction at the calibrated rates), and the checks are

  time     predicted step within --time-tolerance (15%) of the measured one;
  memory   the predicted static plan (total less the cluster's
           reservedBytes) within 1% of the arenas the runtime planned and
           cudaMalloc'ed for the whole model (the extrapolation from 4 and
           5 layers against the real 24-layer program), and the predicted
           total no less than the device memory in use at the peak
           (cudaMemGetInfo: a plan predicted to fit must fit) and at most
           --memory-tolerance (15%) above it.

Prints one line per row and `planner-gpu-runs: N rows, time error ...`;
exits 1 when a check fails or a row cannot be priced.

  tests/planner_validation/gpu_runs.py --dtcc build/bin/dtcc
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def price(dtcc, row):
    cluster = os.path.join(HERE, row["calibration"])
    cmd = [dtcc, "plan", *row["zoo"], "--cluster", cluster, *row["plan"], "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("dtcc plan failed (%d): %s" % (
            p.returncode, (p.stderr.strip().splitlines() or ["?"])[-1]))
    report = json.loads(p.stdout)
    with open(cluster) as f:
        reserved = json.load(f)["device"]["reservedBytes"]["value"]
    return report, reserved


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--rows", default=os.path.join(HERE, "gpu_runs.json"))
    ap.add_argument("--time-tolerance", type=float, default=0.15)
    ap.add_argument("--memory-tolerance", type=float, default=0.15)
    args = ap.parse_args()
    with open(args.rows) as f:
        rows = json.load(f)["rows"]
    failures, errors = [], []
    print("%-20s %10s %10s %8s  %s" % ("row", "predicted", "measured", "error", "memory"))
    for row in rows:
        rid, m = row["id"], row["measured"]
        try:
            report, reserved = price(args.dtcc, row)
        except (RuntimeError, ValueError, KeyError) as e:
            failures.append("%s: %s" % (rid, e))
            continue
        if report.get("pricedBy") != "compiled program":
            failures.append("%s: priced by %s (%s), not its compiled program" % (
                rid, report.get("pricedBy"), report.get("pricedByReason")))
            continue
        step = report["time"]["stepTime"]
        err = step / m["stepSeconds"] - 1
        errors.append(err)
        if abs(err) > args.time_tolerance:
            failures.append("%s: step predicted %.1f ms, measured %.1f ms (%+.1f%%)" % (
                rid, 1e3 * step, 1e3 * m["stepSeconds"], 100 * err))
        total = report["memory"]["total"]
        plan = total - reserved
        notes = []
        if "plannedArenaBytes" not in m:
            notes.append("no memory measured for today's program")
        else:
            arena_tol = max(0.01 * m["plannedArenaBytes"], m.get("plannedArenaBytesPrecision", 0))
            notes.append("plan %.3f GB vs %.3f GB planned" % (plan / 1e9, m["plannedArenaBytes"] / 1e9))
            if abs(plan - m["plannedArenaBytes"]) > arena_tol:
                failures.append("%s: static plan predicted %d B, the runtime planned %d B" % (
                    rid, plan, m["plannedArenaBytes"]))
        if "cudaMallocPeakBytes" in m and abs(plan - m["cudaMallocPeakBytes"]) > 0.01 * m["cudaMallocPeakBytes"]:
            failures.append("%s: static plan predicted %d B, cudaMalloc peak %d B" % (
                rid, plan, m["cudaMallocPeakBytes"]))
        if "deviceBytesInUse" in m:
            used = m["deviceBytesInUse"]
            over = total / used - 1
            notes.append("total %.2f GB vs %.2f GB in use (%+.1f%%)" % (total / 1e9, used / 1e9, 100 * over))
            if over < 0 or over > args.memory_tolerance:
                failures.append("%s: memory predicted %d B, %d B in use (%+.1f%%)" % (
                    rid, total, used, 100 * over))
        print("%-20s %8.1f ms %8.1f ms %+7.1f%%  %s" % (
            rid, 1e3 * step, 1e3 * m["stepSeconds"], 100 * err, "; ".join(notes)))
    worst = max((abs(e) for e in errors), default=float("nan"))
    print("planner-gpu-runs: %d rows, time error max %.1f%% (limit %.0f%%), %d failed" % (
        len(rows), 100 * worst, 100 * args.time_tolerance, len(failures)))
    for f in failures:
        print("planner-gpu-runs: FAILED " + f, file=sys.stderr)
    return 1 if failures or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
