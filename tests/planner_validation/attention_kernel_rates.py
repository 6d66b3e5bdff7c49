#!/usr/bin/env python3
"""How fast MPT's Triton FlashAttention ran in MosaicML's own benchmarks.

MosaicML's MPT benchmark tables (rows_mosaic_more.json; llm-foundry,
scripts/train/benchmarking/README.md) were run with `attn_impl: triton`
(submit_benchmarks.py's default): the Triton FlashAttention MPT vendors
(flash_attn_triton.py, on triton-pre-mlir), not FlashAttention-2. dtcc's
presets price that kernel at device.attentionKernels["flash-attn-triton"];
this script derives the figure from the tables and checks the presets
against it.

The derivation. Within one model on one GPU kind, with the same
recomputation, the time per token grows with the sequence length s only
through attention: a causal fused kernel runs 2 s h FLOPs per token and
layer forward, its backward 2.5 times that (it recomputes the scores), and
full recomputation adds one more forward (dtcc's runtime::attentionFlops
counts them so). So between two rows of lengths s1 < s2,

    rate = (7 or 9) h L (s2 - s1) / (t2 - t1),   t = 1 / (tokens/s/GPU)

and the fraction of the bf16 peak is rate / peak (the preset's own bf16
peak, read from dtcc). Every pair of
neighbouring lengths >= 4096 of the 8-GPU data-parallel rows gives one
figure; the median over a GPU kind's pairs is its constant (the median,
because a few pairs at one sequence per micro-batch are communication-bound
and not attention-bound). The rows are apart from rows.json, whose MPT rows
(all at s = 2048, where attention is 3-10% of a step) the figure then
prices.
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

from validate import DTYPE

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL = "flash-attn-triton"
# The GPU kind of each preset whose rows count.
KINDS = {"dgx-a100-80g": "A100", "dgx-a100-40g": "A100", "dgx-h100": "H100"}
# The preset that holds each kind's figure (the others share it).
PRESET_OF_KIND = {"A100": "dgx-a100-80g", "H100": "dgx-h100"}
TOLERANCE = 0.01  # a preset's figure within 1 point of the derived median


def pair_rates(rows, peaks):
    """[(kind, series, s1, s2, fraction of peak)] of neighbouring lengths;
    `peaks`: the bf16 peak of each preset."""
    series = collections.defaultdict(list)
    for r in rows:
        c, m, cl = r["config"], r["model"], r["cluster"]
        if (m.get("attentionKernel") != KERNEL or cl["gpus"] != 8
                or c["dp"] != 8 or cl.get("preset") not in KINDS
                or m["seq"] < 4096):
            continue
        key = (cl["preset"], m["name"], c["recompute"])
        series[key].append((m["seq"], 1.0 / float(r["measured"]["value"]), m))
    out = []
    for (preset, name, recompute), points in sorted(series.items()):
        points.sort(key=lambda p: p[0])
        kind, peak = KINDS[preset], peaks[preset]
        passes = 9 if recompute == "full" else 7
        for (s1, t1, m), (s2, t2, _) in zip(points, points[1:]):
            if t2 <= t1:
                continue
            rate = passes * m["hidden"] * m["layers"] * (s2 - s1) / (t2 - t1)
            out.append((kind, "%s %s recompute %s" % (preset, name, recompute),
                        s1, s2, rate / peak))
    return out


def preset_device(dtcc, preset):
    """The preset's device figures, read from the cluster dtcc saves with a
    plan (--plan-out)."""
    plan = {"schemaVersion": 1,
            "plan": {"dp": 8, "pp": 1, "tp": 1, "zeroStage": 3,
                     "microBatchSize": 1, "microBatches": 1,
                     "schedule": "1f1b", "virtualStages": 1,
                     "recompute": "none", "sequenceParallel": False,
                     "offload": "none", "dtype": DTYPE},
            "model": {"name": "probe", "layers": 2, "hidden": 256,
                      "heads": 2, "ffnHidden": 1024, "vocab": 1024,
                      "seq": 256, "flashAttention": True, "dropout": False}}
    with tempfile.TemporaryDirectory() as tmp:
        path_in = os.path.join(tmp, "in.json")
        path_out = os.path.join(tmp, "out.json")
        with open(path_in, "w") as f:
            json.dump(plan, f)
        proc = subprocess.run(
            [dtcc, "plan", "--plan-in", path_in, "--cluster", preset,
             "--nodes", "1", "--analytic", "--plan-out", path_out],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=120)
        if proc.returncode not in (0, 2) or not os.path.exists(path_out):
            raise RuntimeError("dtcc plan --cluster %s failed: %s"
                               % (preset, proc.stderr.strip()))
        with open(path_out) as f:
            return json.load(f)["cluster"]["device"]


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default=os.path.join(
        HERE, "rows_mosaic_more.json"))
    parser.add_argument("--dtcc", required=True,
                        help="the dtcc binary whose presets give the peaks "
                             "and whose figures are checked against the "
                             "derived medians (within %.0f points)"
                             % (100 * TOLERANCE))
    args = parser.parse_args()
    with open(args.rows) as f:
        rows = json.load(f)["rows"]
    devices = {preset: preset_device(args.dtcc, preset) for preset in KINDS}
    peaks = {preset: d["peakFlops"]["bf16"]["value"]
             for preset, d in devices.items()}
    pairs = pair_rates(rows, peaks)
    by_kind = collections.defaultdict(list)
    print("%-44s %6s %6s  %s" % ("series", "s1", "s2", "of bf16 peak"))
    for kind, name, s1, s2, fraction in pairs:
        by_kind[kind].append(fraction)
        print("%-44s %6d %6d  %5.1f%%" % (name, s1, s2, 100 * fraction))
    failed = False
    for kind in sorted(PRESET_OF_KIND):
        values = by_kind.get(kind, [])
        if len(values) < 5:
            print("%s: only %d pairs" % (kind, len(values)))
            failed = True
            continue
        median = statistics.median(values)
        line = ("%s: %s at %.1f%% of the bf16 peak (median of %d pairs, "
                "%.1f%%..%.1f%%)" % (kind, KERNEL, 100 * median, len(values),
                                     100 * min(values), 100 * max(values)))
        preset = PRESET_OF_KIND[kind]
        kernels = devices[preset].get("attentionKernels", {})
        if KERNEL not in kernels:
            print(line + "; preset %s has no device.attentionKernels.%s"
                  % (preset, KERNEL))
            failed = True
            continue
        figure = kernels[KERNEL]["value"]
        ok = abs(figure - median) <= TOLERANCE
        failed |= not ok
        line += "; preset %s: %.1f%% %s" % (preset, 100 * figure,
                                           "ok" if ok else "DIFFERS")
        print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
