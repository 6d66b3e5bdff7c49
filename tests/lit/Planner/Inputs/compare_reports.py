"""Prints one line per K of plan_recompute_layers.test: how the zoo plan
was priced, and its step and memory against the whole compile's.

  compare_reports.py OUTDIR [--step-tolerance R] [--memory-tolerance M] K...

The step is "same" within R relative (default 1e-6), the memory within M
relative (default: 4 KiB).
"""
import json
import os
import sys

out = sys.argv[1]
ks = sys.argv[2:]
tolerance, memory_tolerance = 1e-6, None
while ks[:1] in (["--step-tolerance"], ["--memory-tolerance"]):
    if ks[0] == "--step-tolerance":
        tolerance = float(ks[1])
    else:
        memory_tolerance = float(ks[1])
    ks = ks[2:]
for k in ks:
    with open(os.path.join(out, f"file-{k}.out")) as f:
        whole = json.load(f)
    with open(os.path.join(out, f"zoo-{k}.out")) as f:
        scaled = json.load(f)
    step_a, step_b = whole["time"]["stepTime"], scaled["time"]["stepTime"]
    mem_a, mem_b = whole["memory"]["total"], scaled["memory"]["total"]
    print(f"K={k}: {scaled['pricedBy']} | {scaled['pricedByReason'].split(';')[0]}")
    print(f"K={k}: step {'same' if abs(step_b / step_a - 1) < tolerance else 'differs'} "
          f"({step_a * 1e3:.4f} ms whole, {step_b * 1e3:.4f} ms scaled), memory "
          f"{'same' if (abs(mem_b - mem_a) < 4096 if memory_tolerance is None else abs(mem_b / mem_a - 1) < memory_tolerance) else 'differs'} "
          f"({mem_a} B whole, {mem_b} B scaled)")
