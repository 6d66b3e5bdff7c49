#!/usr/bin/env python3
"""Adds device.kernelBytes to a calibration written before calibrate
counted bytes: each kernel's seconds per call over its workload's operand
and result bytes, the workload as its kernels figure states it (an
in-place result counted again, as calibrate and the program model count
it). clusters/h100-own-attention-calibrated-2026-11-26.json got its
figures so; `dtcc calibrate --device cuda` writes them itself since.

  tests/planner_validation/kernel_bytes.py CALIBRATION.json   (in place)
"""
import json, re, sys
SIZES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "i32": 4, "i1": 1, "i8": 1, "u8": 1}
IN_PLACE = {"adamw": 3, "sgd": 2}  # tools/dtcc-calibrate/KernelBench.cpp

def tensor_bytes(t):
    t = t.strip()
    m = re.fullmatch(r"(?:(\d+) x )?((?:\d+x)*)([a-z]+\d+)", t)
    if not m:
        raise ValueError(t)
    n = int(m.group(1) or 1)
    dims = [int(d) for d in m.group(2).split("x") if d]
    e = 1
    for d in dims:
        e *= d
    return n * e * SIZES[m.group(3)], e * SIZES[m.group(3)]

def side_bytes(side):
    side = side.strip()
    if side in ("()", ""):
        return 0, []
    out, big = 0, []
    for t in side.split(", "):
        b, one = tensor_bytes(t)
        out += b
        big.append((b, one))
    return out, big

path = sys.argv[1]
c = json.load(open(path))
kb = {}
for k, f in c["device"]["kernels"].items():
    src = f["source"]
    w = re.search(r"kernel on (.*), one GPU", src).group(1)
    w = re.sub(r" \{.*\}$", "", w)
    per_call = f["value"] * int(re.search(r"over (\d+) elements", src).group(1))
    total = 0
    for call in w.split(" and "):
        ins, outs = call.split(" -> ")
        b_in, big = side_bytes(ins)
        if outs.strip() == "in place":
            largest = max(one for _, one in big)
            b_out = IN_PLACE[k] * largest
        else:
            b_out, _ = side_bytes(outs)
        total += b_in + b_out
    head = src.split(": dtcc's CUDA")[0]
    kb[k] = {"value": per_call / total,
             "source": "%s: dtcc's CUDA %s kernel on %s, per call over %d bytes "
                       "(its operands and results); derived afterwards from "
                       "device.kernels.%s of this calibration, which states "
                       "the workload and the time per call" % (head, k, w, total, k)}
c["device"]["kernelBytes"] = kb
json.dump(c, open(path, "w"), indent=1)
open(path, "a").write("\n")
