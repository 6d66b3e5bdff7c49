#!/usr/bin/python3
"""dtcc plan near a device's memory limit: the search again with less memory.

On a GPU cluster dtcc plan searches with the analytic model, then compiles
its choice and the slower plans that could still win and prices their
programs. Where no compiled program fits the device (the analytic memory
was too low), it searches again with the device's capacity scaled down by
the compiled/analytic ratio (compiler/Planning.cpp,
searchUntilAProgramFits). This script sweeps the device memory of an
A100 cluster file (8 GPUs, a 167 M-parameter GPT, global batch 32) across
the limit where plans start to fit, in steps of 50 MB, and checks:

1. exit 0 exactly when the chosen plan fits: its compiled program's
   memory is within the capacity (exit 2: it does not fit, and says so);
2. more memory never loses the fit, on a 50 MB grid: from its first
   capacity where a plan fits, every larger one of the grid has one. (At
   10 MB steps it can: the search compiles only the analytic model's few
   best plans, and a few MB more can trade a plan that fits for ones that
   miss; e.g. 2.53 GB fits by the second search, 2.54 GB does not. The
   capacities where that happens are printed.)
3. the second search ran somewhere (its note) and its plan was then the
   one chosen, fitting;
4. where the note names a plan that fits, that plan is the chosen one;
5. where nothing fits, the plan reported is the compiled program that
   misses by the least memory.

  plan_fit_checks.py --dtcc build/bin/dtcc
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common  # noqa: E402

MODEL = ["--zoo", "gpt", "--layers", "8", "--hidden", "1024", "--heads", "16",
         "--vocab", "32000", "--seq", "1024"]
# Device memory in GB: around where this model's plans start to fit on 8
# devices (about 2.55 GB, most of it the runtime's fixed costs), from well
# below to well above; in steps of 10 MB from 2.40 to 2.70 GB, where the
# analytic model's choices stop fitting by a few MB and the second search
# is needed, 50 MB beyond.
CAPACITIES = ([2.30, 2.35] + [round(2.40 + 0.01 * i, 2) for i in range(31)] +
              [round(2.75 + 0.05 * i, 2) for i in range(10)])
RETRY = "no compiled program of the first search fit the device"


def plan(dtcc, work, gb):
    cluster = os.path.join(work, f"a100-{gb}.json")
    with open(cluster, "w") as f:
        json.dump({"base": "dgx-a100-80g", "name": f"a100-{gb}gb",
                   "device": {"memoryBytes": {"value": gb * 1e9,
                                              "source": "plan_fit_checks.py"}}}, f)
    p = subprocess.run([dtcc, "plan"] + MODEL + ["--cluster", cluster, "--ranks", "8",
                                                 "--global-batch", "32", "--json"],
                       capture_output=True, text=True)
    try:
        report = json.loads(p.stdout)
    except ValueError:
        report = None
    return p.returncode, report, p.stderr


def main():
    args, work = e2e_common.start(__doc__, "dtcc-plan-fit.")
    dtcc = os.path.abspath(args.dtcc)
    check = e2e_common.Checks()
    fitted, retried = [], []
    for gb in CAPACITIES:
        rc, report, err = plan(dtcc, work, gb)
        if report is None:
            check(rc == 2, f"{gb} GB: no plan at all, exit 2 (exit {rc}): {err[-300:]}")
            continue
        memory = report.get("memory") or {}
        total, capacity = memory.get("total"), memory.get("capacity")
        retry_note = next((n for n in report.get("notes") or [] if RETRY in n), "")
        fits = bool(report.get("fits"))
        print(f"{gb:.2f} GB: exit {rc}, {'fits' if fits else 'does not fit'}, "
              f"{(total or 0) / 1e9:.3f} GB, {'searched again, ' if retry_note else ''}"
              f"{report.get('summary')}")
        within = total is not None and capacity is not None and total <= capacity
        check((rc == 0) == (fits and within) and rc in (0, 2),
              f"{gb} GB: exit {rc} says whether the chosen plan fits (fits: {fits}, "
              f"its program {(total or 0) / 1e9:.3f} GB of {(capacity or 0) / 1e9:.3f})")
        if rc == 0:
            fitted.append(gb)
        elif total is not None and capacity is not None:
            # Nothing fits: the plan reported is the compiled program that
            # needs the least memory, not the fastest of those that miss.
            misses = [a for a in report.get("alternatives") or []
                      if a.get("kind") == "out-of-memory"
                      and "(compiled program)" in a.get("reason", "")]
            closest = min((a["excessBytes"] for a in misses), default=None)
            check(closest is None or total - capacity <= closest,
                  f"{gb} GB: the plan reported misses by "
                  f"{(total - capacity) / 1e6:.0f} MB, no compiled alternative by less "
                  f"(closest {(closest or 0) / 1e6:.0f} MB)")
        if retry_note:
            # Each round: "searched again with N% ... model's): <plan>", "<plan>
            # (does not fit either)", "no plan fits then" or "its choice was
            # not compiled (...)".
            rounds = re.findall(r"analytic model's\): (.*?)(?=; searched again|$)",
                                retry_note)
            adopted = [r for r in rounds if "does not fit" not in r and
                       "no plan fits" not in r and "was not compiled" not in r]
            if adopted:
                check(adopted[-1] == report.get("summary") and rc == 0,
                      f"{gb} GB: the second search's fitting plan is the chosen one "
                      f"({adopted[-1]})")
                retried.append(gb)
    if fitted:
        grid = [gb for gb in CAPACITIES if round(gb * 100) % 5 == 0]
        first = min(gb for gb in fitted if gb in grid)
        larger = [gb for gb in grid if gb >= first]
        check(set(larger) <= set(fitted), f"from {first} GB on, every capacity of the "
              f"50 MB grid has a plan that fits (missing: "
              f"{sorted(set(larger) - set(fitted))})")
        lost = [gb for gb in CAPACITIES if gb > fitted[0] and gb not in fitted]
        print(f"info  capacities above the first fit ({fitted[0]} GB) where the "
              f"search found no plan that fits: {lost or 'none'}")
    check(fitted and fitted[0] > CAPACITIES[0],
          f"the sweep starts below the limit (first fit at "
          f"{fitted[0] if fitted else None} GB)")
    check(bool(retried), f"the second search chose a fitting plan at some capacity "
          f"({', '.join(map(str, retried)) or 'none'} GB)")
    return e2e_common.finish(work, False, check.failures)


if __name__ == "__main__":
    sys.exit(main())
