#!/usr/bin/python3
"""The planner's predictions against real runs on the CPU backend.

Calibrates this machine with `dtcc calibrate` (one process, and under
mpirun with as many ranks as each plan runs), then for the parallelism
issue's plans of two zoo GPTs -- a tiny one whose step is a few hundred
small kernels and a larger one where the matrix products dominate --
prints the planner's predicted step time and per-rank peak memory beside
the measured ones. `dtcc plan model.onnx --cluster <calibrated> --mesh ...`
compiles the plan and prices the program: its memory is the program's
static memory plan, its step the program simulated instruction by
instruction with the calibrated figures.

  memory: predicted = the plan's memory (less the runtime reserve, which
          the static plan does not hold); measured = what each rank
          reports it allocated (`rank R: peak memory X planned`), and the
          process's RSS growth above its start (shown);
  time:   measured = the median of the trainer's step lines, step 1
          excluded.

Checks (exit non-zero on any failure):
  - every plan: predicted peak memory within 10% of what the ranks
    allocate;
  - every plan of the larger model with no more ranks than cores:
    predicted step time within 30% of the measured one (a plan that misses
    is calibrated and measured again, up to twice, each attempt printed:
    the host's other tenants change its speed from one minute to the next);
    the other plans are printed: the tiny model's steps are dominated by
    per-kernel dispatch, and more ranks than cores time-share them, which
    the time model does not describe;
  - `dtcc compile --plan auto --ranks 2` picks a plan that compiles and
    trains, and prints its choice;
  - the analytic transformer model (what `dtcc plan` uses for GPU clusters
    and for models given without a file) is printed beside the compiled
    program's memory, for the 1-device and 2-rank plans.
"""
import argparse
import array
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import e2e_common

MPI_ENV = {
    **e2e_common.MPI_ENV,
    # A rank's communication thread waits in MPI; polling there would take
    # the core from the rank's (or its neighbour's) compute thread.
    "OMPI_MCA_mpi_yield_when_idle": "1",
}
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
RANK_LINE = re.compile(r"rank (\d+): peak memory ([\d.]+) (\w+) planned \(process ([\d.]+) (\w+) "
                       r"above start\)")
STEP_LINE = re.compile(r"^step\s+(\d+)/\d+ .* step ([\d.]+) ms")
SINGLE_PEAK = re.compile(r"steps \d+ to \d+; peak memory ([\d.]+) (\w+)")
SINGLE_RSS = re.compile(r"process peak RSS ([\d.]+) (\w+) \(([\d.]+) (\w+) before loading")

# (name, zoo flags without --batch, steps). Every plan trains 8 sequences
# per step: with M micro-batches the model's batch is 8 / M.
MODELS = [
    ("tiny GPT", ["--layers", "4", "--hidden", "32", "--heads", "4", "--vocab", "64",
                  "--seq", "16"], 12),
    ("GPT h256", ["--layers", "4", "--hidden", "256", "--heads", "4", "--vocab", "64",
                  "--seq", "64"], 10),
]
GLOBAL_BATCH = 8
# The parallelism issue's plans: (name, ranks, mesh, zero, micro-batches,
# pipeline schedule).
PLANS = [
    ("1 device", 1, "", 0, 1, ""),
    ("DP2", 2, "dp=2", 0, 1, ""),
    ("TP2", 2, "tp=2", 0, 1, ""),
    ("PP2 GPipe", 2, "pp=2", 0, 4, "gpipe"),
    ("PP2 1F1B", 2, "pp=2", 0, 4, "1f1b"),
    ("ZeRO-1 DP2", 2, "dp=2", 1, 1, ""),
    ("ZeRO-2 DP2 M=2", 2, "dp=2", 2, 2, ""),
    ("ZeRO-3 DP2", 2, "dp=2", 3, 1, ""),
    ("DP4", 4, "dp=4", 0, 1, ""),
    ("TP4", 4, "tp=4", 0, 1, ""),
    ("PP4 1F1B", 4, "pp=4", 0, 4, "1f1b"),
    ("ZeRO-3 DP4", 4, "dp=4", 3, 1, ""),
    ("DP2xTP2", 4, "dp=2,tp=2", 0, 1, ""),
    ("DP2xPP2", 4, "dp=2,pp=2", 0, 2, "1f1b"),
    ("TP2xPP2", 4, "tp=2,pp=2", 0, 2, "1f1b"),
    ("DP2xTP2 ZeRO-3", 4, "dp=2,tp=2", 3, 1, ""),
]
MEMORY_TOLERANCE = 0.10
TIME_TOLERANCE = 0.30


def run(cmd, env=None, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})), timeout=timeout)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"error: {' '.join(cmd)} exited {p.returncode}")
    return p


def launch(ranks, cmd, **kw):
    if ranks == 1:
        return run(cmd, env=MPI_ENV, **kw)
    return run(["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd, env=MPI_ENV, **kw)


def to_bytes(value, unit):
    return float(value) * UNITS[unit]


def mib(b):
    return f"{b / (1 << 20):.2f}"


def measure(exe, ranks, tokens, steps):
    """Median step time (s) without step 1, the largest planned peak over
    the ranks, and the largest RSS growth."""
    p = launch(ranks, [exe, "--data", tokens, "--steps", str(steps), "--log-every", "1",
                       "--seed", "7"], timeout=120)
    out = p.stdout + p.stderr
    times = [float(m.group(2)) / 1e3 for line in out.splitlines()
             if (m := STEP_LINE.match(line)) and int(m.group(1)) > 1]
    if len(times) < steps - 1:
        sys.stderr.write(out)
        raise SystemExit(f"error: expected {steps - 1} step lines from {exe}")
    if ranks == 1:
        planned = to_bytes(*SINGLE_PEAK.search(out).groups())
        rss = SINGLE_RSS.search(out).groups()
        growth = to_bytes(rss[0], rss[1]) - to_bytes(rss[2], rss[3])
    else:
        lines = RANK_LINE.findall(out)
        if len(lines) != ranks:
            sys.stderr.write(out)
            raise SystemExit(f"error: expected {ranks} rank summary lines")
        planned = max(to_bytes(l[1], l[2]) for l in lines)
        growth = max(to_bytes(l[3], l[4]) for l in lines)
    return statistics.median(times), planned, growth


def calibrate(dtcc, ranks, out):
    """`dtcc calibrate` alone (ranks = 1: the device has the machine to
    itself) or under mpirun (each rank's share while all compute, and the
    link between them); returns its summary line."""
    p = launch(ranks, [dtcc, "calibrate", "-o", out])
    return p.stderr.strip().split(": ", 1)[-1]


def plan_flags(mesh, zero, micro, schedule):
    flags = ["--mesh", mesh or "dp=1", "--zero", str(zero), "--micro-batches", str(micro)]
    if schedule:
        flags += ["--pipeline-schedule", schedule]
    return flags


def predict(dtcc, model, cluster, flags, analytic=False):
    cmd = [dtcc, "plan", model, "--cluster", cluster, "--json"] + flags
    if analytic:
        cmd.append("--analytic")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 2):
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"error: {' '.join(cmd)} exited {p.returncode}")
    return json.loads(p.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtcc", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--only", help="run only plans whose name contains this")
    args = parser.parse_args()
    dtcc = os.path.abspath(args.dtcc)
    work = tempfile.mkdtemp(prefix="dtcc-plan-checks-")
    started = time.time()
    failures = []
    cores = os.cpu_count() or 1
    try:
        tokens = os.path.join(work, "tokens.bin")
        rng = random.Random(0)
        array.array("H", (rng.randrange(64) for _ in range(200_000))).tofile(open(tokens, "wb"))

        clusters = {}

        def cluster_for(ranks, fresh=False):
            """A calibration with `ranks` ranks measuring at once."""
            if fresh or ranks not in clusters:
                path = os.path.join(work, f"cluster-{ranks}.json")
                note = calibrate(dtcc, ranks, path)
                print(f"calibrate ({ranks} rank{'s' if ranks > 1 else ''}): {note}", flush=True)
                spec = json.load(open(path))
                if ranks > 1 and "measured by dtcc calibrate" not in \
                        spec["intraNode"]["bandwidth"]["source"]:
                    failures.append("calibrate: the link was not measured under mpirun")
                if not spec["device"].get("kernels"):
                    failures.append("calibrate: no kernel rates (device.kernels)")
                clusters[ranks] = path
            return clusters[ranks]

        rows = []
        plans = [p for p in PLANS if not args.only or args.only in p[0]]
        for model_name, sizes, steps in MODELS:
            large = model_name != "tiny GPT"
            for plan_name, ranks, mesh, zero, micro, schedule in plans:
                onnx = os.path.join(work, f"{model_name.replace(' ', '_')}-b{GLOBAL_BATCH // micro}.onnx")
                if not os.path.exists(onnx):
                    run([dtcc, "zoo", "gpt"] + sizes + ["--batch", str(GLOBAL_BATCH // micro),
                                                        "-o", onnx])
                flags = plan_flags(mesh, zero, micro, schedule)
                exe = os.path.join(work, "train")
                run([dtcc, "compile", onnx, "--train", "-o", exe] + flags)
                time_checked = large and ranks <= cores
                attempts = 3 if time_checked else 1
                for attempt in range(attempts):
                    spec_file = cluster_for(ranks, fresh=attempt > 0)
                    report = predict(dtcc, onnx, spec_file, flags)
                    reserve = json.load(open(spec_file))["device"]["reservedBytes"]["value"]
                    pred_time = report["time"]["stepTime"]
                    pred_mem = report["memory"]["total"] - reserve
                    step, planned, growth = measure(exe, ranks, tokens, steps)
                    mem_err = pred_mem / planned - 1
                    time_err = pred_time / step - 1
                    if not time_checked or abs(time_err) <= TIME_TOLERANCE:
                        break
                    print(f"  {model_name} {plan_name}: {pred_time * 1e3:.1f} ms predicted "
                          f"vs {step * 1e3:.1f} ms measured ({time_err:+.1%}); calibrating "
                          "and measuring again", flush=True)
                analytic = ""
                if large and ranks <= 2 and not schedule:
                    a = predict(dtcc, onnx, spec_file, flags, analytic=True)
                    analytic = (f"{a['time']['stepTime'] * 1e3:.2f} ms, "
                                f"{mib(a['memory']['total'] - reserve)} MiB")
                if abs(mem_err) > MEMORY_TOLERANCE:
                    failures.append(f"{model_name} {plan_name}: predicted memory "
                                    f"{mib(pred_mem)} MiB vs allocated {mib(planned)} MiB "
                                    f"({mem_err:+.1%})")
                if time_checked and abs(time_err) > TIME_TOLERANCE:
                    failures.append(f"{model_name} {plan_name}: predicted step "
                                    f"{pred_time * 1e3:.1f} ms vs measured {step * 1e3:.1f} ms "
                                    f"({time_err:+.1%})")
                why = ("checked" if time_checked else
                       "oversubscribed" if ranks > cores else "dispatch-bound")
                rows.append((model_name, plan_name, ranks, pred_time, step, time_err, why,
                             pred_mem, planned, mem_err, growth, analytic))
                print(f"  {model_name:9} {plan_name:15} step {pred_time * 1e3:7.2f} / "
                      f"{step * 1e3:7.2f} ms ({time_err:+6.1%}, {why}); memory "
                      f"{mib(pred_mem)} / {mib(planned)} MiB ({mem_err:+.1%})"
                      + (f"; analytic model {analytic}" if analytic else ""), flush=True)

        if not args.only:
            # --plan auto on two ranks: a plan the compiler builds and that trains.
            onnx = os.path.join(work, f"GPT_h256-b{GLOBAL_BATCH}.onnx")
            exe = os.path.join(work, "train")
            p = run([dtcc, "compile", onnx, "--train", "--ranks", "2", "--cluster",
                     cluster_for(2), "-o", exe])
            lines = [l for l in p.stderr.splitlines() if l.startswith("plan auto: ")]
            chosen = lines[-1] if lines else "(nothing printed)"
            print("dtcc compile --plan auto --ranks 2:", chosen)
            if not lines:
                failures.append("dtcc compile --ranks 2 did not report its automatic plan")
            measure(exe, 2, tokens, 3)

        print()
        print("Predicted (dtcc plan --cluster <calibrated>: the compiled program, priced) vs "
              "measured, per rank; memory = what the ranks allocate (their static memory "
              "plan); RSS = process growth above start")
        print("| model | plan | ranks | step predicted | step measured | error | time check | "
              "memory predicted | memory allocated | error | RSS growth | analytic model |")
        print("|" + "---|" * 12)
        for (m, plan, ranks, pt, mt, te, why, pm, mm, me, growth, analytic) in rows:
            print(f"| {m} | {plan} | {ranks} | {pt * 1e3:.2f} ms | {mt * 1e3:.2f} ms | "
                  f"{te:+.1%} | {why} | {mib(pm)} MiB | {mib(mm)} MiB | {me:+.1%} | "
                  f"{mib(growth)} MiB | {analytic or '-'} |")
        print()
        print(f"Memory is checked (10%) for every plan; time (30%) for the larger model's plans "
              f"on up to {cores} ranks ('checked'). 'dispatch-bound': the tiny model's steps "
              f"are hundreds of microsecond kernels; 'oversubscribed': more ranks than the "
              f"{cores} cores. RSS growth also counts the loaded program, the token data and "
              "MPI's buffers, so it is shown, not checked.")
        print(f"plan_checks: {time.time() - started:.0f} s")
    finally:
        if args.keep:
            print("work directory:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
