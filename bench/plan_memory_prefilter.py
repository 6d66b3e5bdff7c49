#!/usr/bin/python3
"""The GPU search's analytic memory (its pre-filter) against the compiled
program's, plan by plan.

For a set of pinned plans of one model on 8 A100s, prints each plan's
memory as `dtcc plan --analytic` prices it and as its compiled program
needs it (`dtcc plan`, layer-scaled compiles), their ratio, and the
gradient, activation and temporary parts of each; then the ratios' range
and median. A pre-filter below 1 lets plans through that do not fit once
compiled (the search compiles them, finds they miss, and may search
again); above 1 drops plans that would fit.

  bench/plan_memory_prefilter.py [--dtcc build/bin/dtcc]
"""
import argparse
import json
import statistics
import subprocess
import sys

MODEL = "--zoo gpt --layers 8 --hidden 1024 --heads 16 --vocab 32000 --seq 1024".split()
# (mesh, ZeRO stage, micro-batch size) at global batch 32 on 8 A100 80 GB.
PLANS = [("dp=8", 0, 1), ("dp=8", 1, 1), ("dp=8", 2, 1), ("dp=8", 3, 1),
         ("dp=4,tp=2", 1, 1), ("dp=2,pp=2,tp=2", 1, 1), ("dp=2,pp=2,tp=2", 2, 2),
         ("dp=1,pp=2,tp=4", 0, 1), ("dp=4,pp=2", 1, 1), ("dp=2,pp=4", 0, 2),
         ("dp=8", 1, 2), ("dp=4,tp=2", 2, 1)]


def price(dtcc, mesh, zero, micro, analytic):
    cmd = [dtcc, "plan"] + MODEL + ["--cluster", "dgx-a100-80g", "--ranks", "8",
                                    "--global-batch", "32", "--mesh", mesh,
                                    "--zero", str(zero), "--micro-batch", str(micro),
                                    "--json"] + (["--analytic"] if analytic else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 2):
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-500:]}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtcc", default="build/bin/dtcc")
    args = ap.parse_args()
    ratios = []
    print(f"{'plan':90s} {'analytic':>9s} {'compiled':>9s} {'ratio':>6s}  "
          "gradients a/c, activations a/c, temporaries a/c (MB)")
    for mesh, zero, micro in PLANS:
        a = price(args.dtcc, mesh, zero, micro, True)
        c = price(args.dtcc, mesh, zero, micro, False)
        am, cm = a["memory"], c["memory"]
        ratio = am["total"] / cm["total"]
        ratios.append(ratio)
        parts = ", ".join(f"{am[k] / 1e6:.0f}/{cm[k] / 1e6:.0f}"
                          for k in ("gradients", "activations", "temporaries"))
        print(f"{c['summary'][:90]:90s} {am['total'] / 1e9:8.3f}G {cm['total'] / 1e9:8.3f}G "
              f"{ratio:6.3f}  {parts}  ({c['pricedBy']})")
    print(f"analytic/compiled: {min(ratios):.3f} .. {max(ratios):.3f}, "
          f"median {statistics.median(ratios):.3f} over {len(ratios)} plans")


if __name__ == "__main__":
    main()
