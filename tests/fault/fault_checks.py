#!/usr/bin/python3
"""Long runs survive failures: supervised jobs against uninterrupted ones.

Every case compiles a small GPT (dtcc zoo) and runs it under the compiled
program's supervisor (`--supervise`), as separate hosts in network
namespaces (scripts/netbed.sh) where the case needs a network, and checks
the job's per-step losses (--dump-outputs) against an independent run:

  plans      DP2, TP2, PP2 (1F1B, 2 micro-batches) over 2 hosts and
             DP2xTP2 over 4 hosts, one rank per host, links rate-limited
             (tc; netem delay too where the kernel has it): every step's
             loss within 1e-5 relative of one device's.
  kill       DP2 over 2 hosts and TP2xPP2 over 4; a random rank other
             than 0 is killed (SIGKILL) at a random step.
  link-cut   DP2 over 2 hosts; one host's link goes down for a few seconds
             mid-run (the ranks time out in a collective; the first
             restarts may find the link still down).
  disk-full  DP2 on one host; the checkpoint directory is a small tmpfs
             filled to capacity: saves fail with a message and leave
             nothing behind; once space is freed, a rank is killed.
  hang       DP2 on one host; a rank is stopped (SIGSTOP): the supervisor's
             --hang-timeout finds the job hung before the collective
             timeout does.
  limits     a job that fails before training is not restarted, a rank
             count the program was not compiled for is refused, and a
             failure beyond --max-restarts ends the job with status 1.
  truncate   DP2 on one host; the newest checkpoint's file is truncated,
             then a rank is killed: the restart skips that checkpoint,
             naming the file, and resumes from the one before.
  elastic    `dtcc run --min-ranks 2 --max-ranks 4 --ranks-available FILE`
             of DP4 and of DP2xTP2 on one host; at a random step FILE drops
             to 2 and a rank is killed: the job is recompiled for 2 ranks
             (DP2; TP2), resumes from the newest checkpoint and finishes.
             Its steps after the checkpoint equal the 2-rank program's run
             uninterrupted from that checkpoint bit for bit; all steps are
             within 1e-5 relative of the 4-rank program's uninterrupted run
             (bit for bit up to the checkpoint; after it the gradients are
             summed in another fp32 order). A count the mesh cannot use
             (3 for dp=2,tp=2) is refused with a message.
  coordinate two node supervisors on this host (separate processes, DP2,
             one rank each, a 30 s collective timeout): a rank on node 1 is
             killed, then (another job) stopped with only node 1 watching
             for hangs. Node 1's supervisor tells node 0's, which stops its
             rank at once; both restart once, together, losing under 10 s,
             and the losses equal an uninterrupted run's bit for bit.

In the fault cases the job must finish, its losses must equal an
uninterrupted run's of the same program bit for bit (the resumed steps see
the same data), and the steps lost (the supervisor's report) must be at
most the checkpoint interval (twice it for `truncate`, which loses one
checkpoint on purpose). Exits 77 (skipped) when namespaces or mounts
cannot be made here, saying why.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import e2e_common  # noqa: E402

NETBED = os.path.join(ROOT, "scripts", "netbed.sh")
SKIP = 77
TRAIN_FLAGS = ["--train", "--optimizer", "adamw", "--lr", "3e-3",
               "--weight-decay", "0.1", "--grad-clip", "1.0", "--warmup", "3",
               "--schedule", "cosine", "--adam-eps", "1e-6"]
STEPS = 120
INTERVAL = 10
TIMEOUT = "4"  # DTCC_COLLECTIVE_TIMEOUT of the fault cases, seconds


class Skip(Exception):
    pass


def sh(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {p.returncode}\n"
                         + p.stdout[-2000:] + p.stderr[-2000:])
    return p.stdout


def rank_env():
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1",
               DTCC_COLLECTIVE_TIMEOUT=TIMEOUT)
    for k in list(env):
        if k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_")) or k in (
                "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NNODES",
                "NODE_RANK"):
            env.pop(k)
    return env


class Bed:
    """The namespaces of one case (scripts/netbed.sh), removed at exit."""

    def __init__(self, hosts, shape):
        p = subprocess.run([NETBED, "check"], capture_output=True, text=True)
        if p.returncode != 0:
            raise Skip(p.stderr.strip() or "network namespaces unavailable")
        self.name = f"dtccf{os.getpid() % 100000}"
        subprocess.run([NETBED, "down", self.name], capture_output=True)
        features = sh([NETBED, "features"]).split()
        args = []
        if "netem" in features:
            args += ["--delay", "1ms"] + (["--rate", "200mbit"] if shape else [])
        elif "tbf" in features and shape:
            args += ["--rate", "200mbit"]
        self.shaping = " ".join(args) or "none"
        if "netem" not in features:
            self.shaping += " (no sch_netem in this kernel: no delay or loss)"
        sh([NETBED, "up", self.name, str(hosts)] + args)
        self.hosts = hosts

    def addr(self, i):
        return f"10.77.0.{i + 1}"

    def prefix(self, i):
        return [NETBED, "exec", self.name, str(i)]

    def close(self):
        subprocess.run([NETBED, "down", self.name], capture_output=True)


class Job:
    """A supervised job: one supervisor per host (or one for all ranks)."""

    def __init__(self, exe, args, work, tag, bed=None, ranks=2, extra=()):
        self.procs = []
        self.reports = []
        self.logs = []
        env = rank_env()
        hosts = bed.hosts if bed else 1
        for h in range(hosts):
            report = os.path.join(work, f"{tag}.report{h}.json")
            out = open(os.path.join(work, f"{tag}.out{h}"), "w+")
            err = open(os.path.join(work, f"{tag}.err{h}"), "w+")
            cmd = [exe, "--supervise", "--supervisor-report", report,
                   "--restart-backoff", "0.5", "--max-restarts", "5"] + list(extra)
            if bed:
                cmd = bed.prefix(h) + cmd + [
                    "--nnodes", str(hosts), "--node-rank", str(h),
                    "--ranks", str(ranks // hosts), "--master-addr", bed.addr(0),
                    "--master-port", "29411"]
            else:
                cmd += ["--ranks", str(ranks)]
            self.procs.append(subprocess.Popen(cmd + args, stdout=out, stderr=err,
                                               env=env, cwd=work))
            self.reports.append(report)
            self.logs.append((out, err))

    def output(self, h=0):
        out, err = self.logs[h]
        out.flush()
        with open(out.name) as f:
            o = f.read()
        with open(err.name) as f:
            return o, f.read()

    def wait_for(self, pattern, timeout=60):
        """Waits until host 0's output matches; the match."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            o, e = self.output(0)
            m = re.search(pattern, o + e)
            if m:
                return m
            if all(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.02)
        o, e = self.output(0)
        raise SystemExit(f"error: no '{pattern}' in the job's output\n{o[-1500:]}{e[-1500:]}")

    def ranks_of(self, h):
        """Pids of host h's rank processes (the supervisor's children)."""
        return children(self.procs[h].pid)

    def finish(self, timeout=120):
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=timeout))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(None)
        reports = []
        for r in self.reports:
            try:
                reports.append(json.load(open(r)))
            except (OSError, ValueError):
                reports.append(None)
        return codes, reports


def children(pid):
    """Descendant pids of `pid` that are ranks (not supervisors)."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            kids = open(f"/proc/{pid}/task/{t}/children").read().split()
        except OSError:
            continue
        for k in kids:
            k = int(k)
            try:
                cmdline = open(f"/proc/{k}/cmdline").read()
            except OSError:
                continue
            if "--supervise" in cmdline:
                out += children(k)
            else:
                out.append(k)
    return out


def losses(dump, steps=STEPS):
    return e2e_common.step_losses(dump, steps)


class Case:
    def __init__(self, dtcc, work):
        self.dtcc = dtcc
        self.work = work
        self.tokens = os.path.join(work, "tokens.bin")
        np.random.default_rng(0).integers(0, 64, size=200_000,
                                          dtype=np.uint16).tofile(self.tokens)
        self.failures = []
        # Checkpoints on memory (tmpfs) where there is one: the bound on lost
        # steps holds when a save is written within half an interval, which
        # the per-file fsyncs of an overlay file system here do not allow
        # (0.4 s for 89 files, against 50 ms of steps).
        shm = "/dev/shm"
        self.fast = (tempfile.mkdtemp(prefix="dtcc-fault-ckpt.", dir=shm)
                     if os.path.isdir(shm) and os.access(shm, os.W_OK) else work)

    def check(self, ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            self.failures.append(what)

    def compile(self, name, flags, batch=8):
        onnx = os.path.join(self.work, f"gpt-b{batch}.onnx")
        if not os.path.exists(onnx):
            sh([self.dtcc, "zoo", "gpt", "--layers", "2", "--hidden", "32",
                "--heads", "4", "--vocab", "64", "--seq", "16", "--batch",
                str(batch), "-o", onnx])
        exe = os.path.join(self.work, name)
        sh([self.dtcc, "compile", onnx] + TRAIN_FLAGS + flags + ["-o", exe])
        return exe

    def data(self, dump, steps=STEPS):
        return ["--data", self.tokens, "--steps", str(steps), "--seed", "7",
                "--log-every", "1", "--dump-outputs", dump]

    def one_device(self, steps=STEPS):
        exe = self.compile("gpt-1", [])
        dump = os.path.join(self.work, "ref1.dump")
        sh([exe] + self.data(dump, steps), env=rank_env())
        return losses(dump, steps)

    def uninterrupted(self, exe, tag, bed=None, ranks=2):
        """The losses of `exe` run under the supervisor with no fault."""
        dump = os.path.join(self.work, tag + ".dump")
        job = Job(exe, self.data(dump), self.work, tag, bed, ranks)
        codes, _ = job.finish()
        if codes != [0] * len(codes):
            o, e = job.output(0)
            raise SystemExit(f"error: the uninterrupted {tag} run failed {codes}\n{o[-1500:]}{e[-1500:]}")
        return losses(dump)

    def faulty(self, exe, tag, inject, bed=None, ranks=2, ckpt=None, lost_max=INTERVAL,
               expect_cause=None, extra=()):
        """Runs `exe` supervised with checkpoints, calls inject(job), and checks
        the outcome against an uninterrupted run. Returns (job, reports)."""
        want = self.uninterrupted(exe, tag + "-ref", bed, ranks)
        dump = os.path.join(self.work, tag + ".dump")
        ckpt = ckpt or os.path.join(self.fast, tag + ".ckpt")
        args = self.data(dump) + ["--checkpoint-dir", ckpt, "--save-every",
                                  str(INTERVAL), "--keep-checkpoints", "3"]
        t0 = time.time()
        job = Job(exe, args, self.work, tag, bed, ranks, extra)
        inject(job)
        codes, reports = job.finish()
        elapsed = time.time() - t0
        o, e = job.output(0)
        ok = codes == [0] * len(codes)
        self.check(ok, f"{tag}: the job finishes (supervisors exit {codes}, {elapsed:.1f} s)")
        if not ok:
            print(o[-2000:] + e[-3000:])
            return job, reports
        got = losses(dump)
        same = np.array_equal(got, want)
        worst = float(np.max(np.abs(got - want)))
        self.check(same, f"{tag}: all {STEPS} losses equal the uninterrupted "
                   f"run's bit for bit (worst difference {worst:.2e})")
        r = reports[0]
        restarts = r["restarts"] if r else -1
        lost = [f["steps_lost"] for f in r["failures"]] if r else []
        self.check(restarts >= 1 and all(0 <= l <= lost_max for l in lost),
                   f"{tag}: {restarts} restart(s), steps lost {lost} "
                   f"(at most {lost_max}), time lost {r['seconds_lost'] if r else '?'} s; "
                   f"causes: {[f['cause'] for f in r['failures']] if r else '?'}")
        if expect_cause:
            causes = [f"host {h}: {f['cause']}" for h, rep in enumerate(reports)
                      if rep for f in rep["failures"]]
            self.check(any(re.search(expect_cause, c) for c in causes),
                       f"{tag}: a supervisor's report names the cause "
                       f"(/{expect_cause}/): {causes}")
        return job, reports


def kill_at_random_step(case, job, host, rng):
    """SIGKILLs one of host `host`'s ranks halfway through an interval."""
    step = rng.randrange(2, STEPS // INTERVAL - 3) * INTERVAL + INTERVAL // 2
    job.wait_for(rf"step +{step}/{STEPS}")
    pids = job.ranks_of(host)
    if not pids:
        raise SystemExit(f"error: host {host} has no rank to kill")
    victim = rng.choice(pids)
    os.kill(victim, signal.SIGKILL)
    print(f"      killed rank process {victim} on host {host} at step {step}")
    return step


def case_plans(case, args):
    bed = Bed(4, shape=True)
    try:
        print(f"      links shaped: {bed.shaping}")
        ref = case.one_device()
        plans = [("DP2", ["--mesh", "dp=2"], 8, 2),
                 ("TP2", ["--mesh", "tp=2"], 8, 2),
                 ("PP2 1F1B", ["--mesh", "pp=2", "--pipeline-schedule", "1f1b",
                               "--micro-batches", "2"], 4, 2),
                 ("DP2xTP2", ["--mesh", "dp=2,tp=2"], 8, 4)]
        for name, flags, batch, ranks in plans:
            exe = case.compile("gpt-" + name.replace(" ", "_"), flags, batch)
            hosts = Bed.__new__(Bed)
            hosts.__dict__.update(bed.__dict__, hosts=ranks)
            t0 = time.time()
            got = case.uninterrupted(exe, name.replace(" ", "_"), hosts, ranks)
            rel = float(np.max(np.abs(got - ref) / np.abs(ref)))
            case.check(rel <= 1e-5, f"{name} over {ranks} hosts: {STEPS} losses "
                       f"within 1e-5 of one device's (worst {rel:.2e}, "
                       f"{time.time() - t0:.1f} s)")
    finally:
        bed.close()


def case_kill(case, args):
    bed = Bed(4, shape=True)
    try:
        rng = random.Random(args.seed)
        # DP2 over 2 hosts, then TP2xPP2 over 4 (every rank writes blocks of
        # its stage's variables: four ranks' parts make each checkpoint).
        for tag, flags, batch, ranks in [
                ("kill", ["--mesh", "dp=2"], 8, 2),
                ("kill-tp2xpp2", ["--mesh", "tp=2,pp=2", "--micro-batches", "2"], 4, 4)]:
            exe = case.compile("gpt-" + tag, flags, batch)
            hosts = Bed.__new__(Bed)
            hosts.__dict__.update(bed.__dict__, hosts=ranks)
            victim = rng.randrange(1, ranks)
            case.faulty(exe, tag,
                        lambda job: kill_at_random_step(case, job, victim, rng),
                        bed=hosts, ranks=ranks,
                        expect_cause=rf"host {victim}: rank {victim} killed by signal 9")
    finally:
        bed.close()


def case_link_cut(case, args):
    bed = Bed(2, shape=False)
    try:
        exe = case.compile("gpt-dp2", ["--mesh", "dp=2"])
        rng = random.Random(args.seed)

        def cut(job):
            step = rng.randrange(2, STEPS // INTERVAL - 3) * INTERVAL + INTERVAL // 2
            job.wait_for(rf"step +{step}/{STEPS}")
            sh([NETBED, "cut", bed.name, "1"])
            print(f"      cut host 1's link at step {step}")
            time.sleep(float(TIMEOUT) + 2)
            sh([NETBED, "heal", bed.name, "1"])
            print("      link back up")

        case.faulty(exe, "link-cut", cut, bed=bed,
                    expect_cause=r"rank \d (exited with status|killed by signal)")
    finally:
        bed.close()


def case_disk_full(case, args):
    mnt = os.path.join(case.work, "small-disk")
    os.makedirs(mnt)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise Skip(f"cannot mount a small tmpfs ({p.stderr.strip()}): needs root")
    try:
        exe = case.compile("gpt-dp2", ["--mesh", "dp=2"])
        rng = random.Random(args.seed)
        filler = os.path.join(mnt, "filler")
        ckpt = os.path.join(mnt, "ckpt")

        def fill_then_kill(job):
            # Fill the disk to capacity (writes until ENOSPC).
            with open(filler, "wb") as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:
                    pass
            # Rank 0's verdict, not the first one: rank 0 removes the shared
            # temporary directory after its own save fails, and rank 1's line
            # may come before that (the check below then saw the directory).
            job.wait_for(r"rank 0: warning: checkpoint of step \d+ not saved: "
                         r".*No space left on device")
            left = [n for n in os.listdir(ckpt) if not n.startswith("step_")]
            case.check(not left, f"disk-full: a failed save leaves nothing behind ({left})")
            os.unlink(filler)
            print("      disk full: saves failed as expected; space freed")
            saved = job.wait_for(r"saved checkpoint \S+ \(step (\d+),")
            first = int(saved.group(1))
            step = (first // INTERVAL + 1) * INTERVAL + INTERVAL // 2
            if step >= STEPS:
                raise SystemExit("error: the run ended before the kill")
            job.wait_for(rf"step +{step}/{STEPS}")
            victim = rng.choice(job.ranks_of(0))
            os.kill(victim, signal.SIGKILL)
            print(f"      killed rank process {victim} at step {step}")

        job, _ = case.faulty(exe, "disk-full", fill_then_kill, ckpt=ckpt)
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)


def case_truncate(case, args):
    exe = case.compile("gpt-dp2", ["--mesh", "dp=2"])
    rng = random.Random(args.seed)
    ckpt = os.path.join(case.fast, "truncate.ckpt")
    seen = {}

    def truncate_then_kill(job):
        step = rng.randrange(3, STEPS // INTERVAL - 3) * INTERVAL
        job.wait_for(rf"saved checkpoint \S+step_0*{step} ")
        victim_file = os.path.join(ckpt, f"step_{step:08d}", "0.bin")
        size = os.path.getsize(victim_file)
        os.truncate(victim_file, size // 2)
        os.kill(rng.choice(job.ranks_of(0)), signal.SIGKILL)
        print(f"      truncated {victim_file} to {size // 2} bytes and killed a rank")
        seen["file"] = victim_file

    job, _ = case.faulty(exe, "truncate", truncate_then_kill, ckpt=ckpt,
                         lost_max=2 * INTERVAL)
    o, e = job.output(0)
    msg = next((l for l in e.splitlines() if "skipping checkpoint" in l), "")
    case.check(seen.get("file", "?") in msg and "truncated" in msg,
               f"truncate: the restart names the file and the reason: {msg.strip()}")


def case_hang(case, args):
    exe = case.compile("gpt-dp2", ["--mesh", "dp=2"])
    rng = random.Random(args.seed)

    def freeze(job):
        step = rng.randrange(2, STEPS // INTERVAL - 3) * INTERVAL + INTERVAL // 2
        job.wait_for(rf"step +{step}/{STEPS}")
        victim = rng.choice(job.ranks_of(0))
        os.kill(victim, signal.SIGSTOP)
        print(f"      stopped rank process {victim} (SIGSTOP) at step {step}")

    # The supervisor's --hang-timeout (2 s) fires before the ranks'
    # collective timeout (4 s): the job is restarted as hung.
    case.faulty(exe, "hang", freeze, extra=("--hang-timeout", "2"),
                expect_cause=r"no rank made progress for 2 s")


def case_limits(case, args):
    exe = case.compile("gpt-dp2", ["--mesh", "dp=2"])
    env = rank_env()
    # A job that fails before training starts is not restarted.
    report = os.path.join(case.work, "config.json")
    p = subprocess.run([exe, "--supervise", "--supervisor-report", report,
                        "--data", os.path.join(case.work, "missing.bin"),
                        "--steps", "5"], capture_output=True, text=True,
                       env=env, cwd=case.work, timeout=60)
    r = json.load(open(report))
    case.check(p.returncode == 1 and r["outcome"] == "failed" and r["restarts"] == 0
               and "not restarting" in p.stderr and "missing.bin" in p.stderr,
               "limits: a job that fails before training (missing token file) is "
               f"not restarted (exit {p.returncode}, {r['restarts']} restarts)")
    # A rank count the program was not compiled for.
    p = subprocess.run([exe, "--supervise", "--ranks", "3", "--data", case.tokens,
                        "--steps", "5"], capture_output=True, text=True, env=env)
    case.check(p.returncode == 1 and "compiled for 2 ranks but 1 node(s) x --ranks 3"
               in p.stderr, "limits: --ranks 3 for a 2-rank program: "
               + p.stderr.strip().splitlines()[-1])
    # Failures beyond --max-restarts end the job with status 1.
    rng = random.Random(args.seed)
    dump = os.path.join(case.work, "limits.dump")
    job = Job(exe, case.data(dump) + ["--checkpoint-dir",
                                      os.path.join(case.fast, "limits.ckpt"),
                                      "--save-every", str(INTERVAL)],
              case.work, "limits", extra=("--max-restarts", "1"))
    for kill in range(2):
        step = 25 + 30 * kill
        job.wait_for(rf"step +{step}/{STEPS}")
        os.kill(rng.choice(job.ranks_of(0)), signal.SIGKILL)
    codes, reports = job.finish()
    r = reports[0]
    o, e = job.output(0)
    case.check(codes == [1] and r and r["outcome"] == "failed" and r["restarts"] == 1
               and len(r["failures"]) == 2 and "giving up: 1 restart used" in e,
               f"limits: a second failure with --max-restarts 1 ends the job "
               f"(exit {codes}, outcome {r and r['outcome']}, "
               f"{r and len(r['failures'])} failures)")


def case_elastic(case, args):
    """`dtcc run` elastic: a 4-rank job (DP4, DP2xTP2) loses a rank and the
    ranks available drop to 2; the job is replanned for 2 (DP2; TP2) and
    resumes from the newest checkpoint."""
    rng = random.Random(args.seed)
    onnx = os.path.join(case.work, "gpt-b8.onnx")
    case.compile("gpt-1", [])  # writes the model
    env = rank_env()
    # No plan fits a count the mesh's other axes do not divide.
    p = subprocess.run([case.dtcc, "run", "--supervise", "--min-ranks", "3",
                        "--max-ranks", "3", "--work-dir", case.work, onnx,
                        "--mesh", "dp=2,tp=2", "--", "--data", case.tokens,
                        "--steps", "5"], capture_output=True, text=True,
                       env=env, timeout=60)
    case.check(p.returncode == 1 and "no plan for 3 ranks" in p.stderr,
               "elastic: 3 ranks for --mesh dp=2,tp=2 is refused: "
               + (p.stderr.strip().splitlines() or ["(nothing)"])[-1])

    # DP4, and DP2xTP2 (replanned as TP2: one replica, no dp axis).
    for tag, mesh in [("elastic-dp4", "dp=4"), ("elastic-dp2xtp2", "dp=2,tp=2")]:
        elastic_run(case, rng, onnx, env, tag, mesh)


def elastic_run(case, rng, onnx, env, tag, mesh):
    """One elastic job of `mesh` on 4 ranks that must go on on 2."""
    avail = os.path.join(case.work, tag + ".available")
    with open(avail, "w") as f:
        f.write("4\n")
    bin_dir = os.path.join(case.work, tag + "-bin")
    os.makedirs(bin_dir)
    ckpt = os.path.join(case.fast, tag + ".ckpt")
    dump = os.path.join(case.work, tag + ".dump")
    report = os.path.join(case.work, tag + ".report.json")
    out = open(os.path.join(case.work, tag + ".out"), "w+")
    err = open(os.path.join(case.work, tag + ".err"), "w+")
    cmd = ([case.dtcc, "run", "--supervise", "--min-ranks", "2", "--max-ranks",
            "4", "--ranks-available", avail, "--work-dir", bin_dir, onnx]
           + TRAIN_FLAGS + ["--mesh", mesh, "--",
                            "--supervisor-report", report, "--restart-backoff",
                            "0.5", "--max-restarts", "3"]
           + case.data(dump) + ["--checkpoint-dir", ckpt, "--save-every",
                                str(INTERVAL), "--keep-checkpoints", "0"])
    t0 = time.time()
    job = Job.__new__(Job)
    job.procs = [subprocess.Popen(cmd, stdout=out, stderr=err, env=env,
                                  cwd=case.work)]
    job.reports = [report]
    job.logs = [(out, err)]
    step = rng.randrange(2, STEPS // INTERVAL - 3) * INTERVAL + INTERVAL // 2
    job.wait_for(rf"step +{step}/{STEPS}", timeout=120)
    with open(avail, "w") as f:
        f.write("2\n")
    pids = job.ranks_of(0)
    victim = rng.choice(sorted(pids)[1:]) if len(pids) > 1 else None
    if victim is None:
        raise SystemExit(f"error: the job has ranks {pids}, expected 4")
    os.kill(victim, signal.SIGKILL)
    print(f"      at step {step}: ranks available 4 -> 2, killed rank process {victim}")
    codes, reports = job.finish()
    o, e = job.output(0)
    ok = codes == [0]
    case.check(ok, f"{tag}: the job finishes (dtcc run exits {codes}, "
               f"{time.time() - t0:.1f} s)")
    if not ok:
        print(o[-2000:] + e[-4000:])
        return
    r = reports[0]
    f = r["failures"][0] if r and r["failures"] else {}
    case.check(r["restarts"] == 1 and f.get("ranks") == 4
               and f.get("restart_ranks") == 2 and r["world_size"] == 2
               and "restarted on 2 ranks (was 4)" in e,
               f"{tag}: the report names the restart on 2 ranks (was 4): "
               f"{r['restarts']} restart(s), failure {f}")
    resumed = f.get("resumed_from", -1)
    lost = f.get("steps_lost", -1)
    case.check(0 <= lost <= INTERVAL and resumed >= 0,
               f"{tag}: {lost} steps lost (at most {INTERVAL}), resumed from "
               f"step {resumed}, {r['seconds_lost']} s lost")
    got = losses(dump)

    # The same 2-rank program (DP2, or TP2 for DP2xTP2) run uninterrupted
    # from the checkpoint the job resumed from: the job's steps after it,
    # bit for bit (the same program on the same state and batches).
    from_ckpt = os.path.join(case.fast, tag + "-from.ckpt")
    os.makedirs(from_ckpt)
    shutil.copytree(os.path.join(ckpt, f"step_{resumed:08d}"),
                    os.path.join(from_ckpt, f"step_{resumed:08d}"))
    dp2 = os.path.join(bin_dir, "train-r2")
    ref2 = os.path.join(case.work, tag + "-ref2.dump")
    sh([dp2, "--supervise", "--ranks", "2"] + case.data(ref2)
       + ["--checkpoint-dir", from_ckpt], env=env, cwd=case.work)
    want2 = np.array([float(e2e_common.read_pb(os.path.join(
        ref2, f"step_{s}", "loss.pb"))) for s in range(resumed + 1, STEPS + 1)])
    tail = got[resumed:]
    case.check(np.array_equal(tail, want2),
               f"{tag}: steps {resumed + 1}-{STEPS} equal an uninterrupted "
               f"2-rank run's from the step-{resumed} checkpoint bit for bit "
               f"(worst {float(np.max(np.abs(tail - want2))):.2e})")

    # The 4-rank program run uninterrupted: the steps before the failure
    # are its own (bit for bit); after it the 2-rank plan sums each gradient
    # in another order (2 ranks' partial sums instead of 4, or one replica's
    # whole batch), fp32 rounding of its own: within 1e-5 relative, the
    # bound the plans case holds every plan to against one device.
    ref4 = os.path.join(case.work, tag + "-ref4.dump")
    sh([os.path.join(bin_dir, "train-r4"), "--supervise", "--ranks", "4"]
       + case.data(ref4), env=env, cwd=case.work)
    want4 = losses(ref4)
    head_same = np.array_equal(got[:resumed], want4[:resumed])
    rel = float(np.max(np.abs(got - want4) / np.abs(want4)))
    case.check(head_same and rel <= 1e-5,
               f"{tag}: against an uninterrupted 4-rank run ({mesh}): steps 1-{resumed} "
               f"bit for bit ({head_same}), all {STEPS} within 1e-5 relative "
               f"(worst {rel:.2e})")


def case_coordinate(case, args):
    """Two node supervisors on this machine (separate processes, one DP2
    rank each, rank 0 at 127.0.0.1) with a collective timeout of 30 s: a
    failure on node 1 stops node 0's ranks through the supervisors'
    rendezvous, well before that timeout, and both restart together; a
    node lost whole (its supervisor too) is named as the failure's cause."""
    timeout = 30
    rng = random.Random(args.seed)
    exe = case.compile("gpt-dp2", ["--mesh", "dp=2"])
    env = dict(rank_env(), DTCC_COLLECTIVE_TIMEOUT=str(timeout))
    # The reference: the same program uninterrupted under one supervisor.
    ref = os.path.join(case.work, "coord-ref.dump")
    sh([exe, "--supervise", "--ranks", "2"] + case.data(ref), env=env,
       cwd=case.work)
    want = losses(ref)

    def launch(tag, dump, ckpt, node_flags):
        port = e2e_common.free_port()
        job = Job.__new__(Job)
        job.procs, job.reports, job.logs = [], [], []
        for h in range(2):
            report = os.path.join(case.work, f"{tag}.report{h}.json")
            out = open(os.path.join(case.work, f"{tag}.out{h}"), "w+")
            err = open(os.path.join(case.work, f"{tag}.err{h}"), "w+")
            cmd = ([exe, "--supervise", "--supervisor-report", report,
                    "--restart-backoff", "0.5", "--max-restarts", "3",
                    "--nnodes", "2", "--node-rank", str(h), "--ranks", "1",
                    "--master-addr", "127.0.0.1", "--master-port", str(port)]
                   + node_flags[h] + case.data(dump)
                   + ["--checkpoint-dir", ckpt, "--save-every", str(INTERVAL)])
            job.procs.append(subprocess.Popen(cmd, stdout=out, stderr=err,
                                              env=env, cwd=case.work))
            job.reports.append(report)
            job.logs.append((out, err))
        return job, port

    def nodes(tag, inject, node_flags):
        dump = os.path.join(case.work, tag + ".dump")
        ckpt = os.path.join(case.fast, tag + ".ckpt")
        # free_port's port is free when it returns, not when node 0's
        # supervisor binds it: another process (ctest runs tests side by
        # side) can take it in between. Such a start is made again on
        # another port; any other failure stands.
        for attempt in range(3):
            job, port = launch(tag, dump, ckpt, node_flags)
            t0 = time.time()
            try:
                inject(job)
                break
            except SystemExit:
                taken = any("Address already in use" in job.output(h)[1]
                            for h in range(2))
                if not taken or attempt == 2:
                    raise
                job.finish(timeout=10)
                shutil.rmtree(ckpt, ignore_errors=True)
                if os.path.exists(dump):
                    os.remove(dump)
                print(f"      {tag}: port {port} was taken before node 0's "
                      "supervisor could listen on it; starting again on another")
        codes, reports = job.finish()
        elapsed = time.time() - t0
        ok = codes == [0, 0] and all(reports)
        case.check(ok, f"{tag}: both node supervisors finish (exit {codes}, "
                   f"{elapsed:.1f} s)")
        if not ok:
            for h in range(2):
                o, e = job.output(h)
                print(f"--- node {h}\n" + e[-2500:])
            return None
        got = losses(dump)
        case.check(np.array_equal(got, want),
                   f"{tag}: all {STEPS} losses equal the uninterrupted run's "
                   f"bit for bit (worst {float(np.max(np.abs(got - want))):.2e})")
        restarts = [r["restarts"] for r in reports]
        lost = [f["steps_lost"] for r in reports for f in r["failures"]]
        secs = [r["seconds_lost"] for r in reports]
        causes = [f"node {h}: {f['cause']}" for h, r in enumerate(reports)
                  for f in r["failures"]]
        case.check(restarts == [1, 1] and all(0 <= l <= INTERVAL for l in lost)
                   and all(t < timeout / 3 for t in secs),
                   f"{tag}: both nodes restarted once together ({restarts}), "
                   f"steps lost {lost} (at most {INTERVAL}), time lost {secs} s "
                   f"(under {timeout / 3:.0f} s; the collective timeout is "
                   f"{timeout} s); causes {causes}")
        return job, reports

    def kill_on_node1(job):
        kill_at_random_step(case, job, 1, rng)

    r = nodes("coord-kill", kill_on_node1, [[], []])
    if r:
        _, reports = r
        c = reports[0]["failures"][0]["cause"]
        # First, whatever node 0's own rank saw of it: a rank that lost its
        # peer waits for the cause before it stands as one.
        case.check(c.startswith("node 1: rank 1 killed by signal 9"),
                   f"coord-kill: node 0's report names node 1's failure first: {c}")

    # Only node 1 watches for hangs: node 0's rank waits in a collective for
    # the stopped one, and only node 1's message can end that before the
    # collective timeout.
    def stop_on_node1(job):
        step = rng.randrange(2, STEPS // INTERVAL - 3) * INTERVAL + INTERVAL // 2
        job.wait_for(rf"step +{step}/{STEPS}")
        victim = job.ranks_of(1)[0]
        os.kill(victim, signal.SIGSTOP)
        print(f"      stopped node 1's rank (SIGSTOP) at step {step}")

    r = nodes("coord-hang", stop_on_node1, [[], ["--hang-timeout", "2"]])
    if r:
        _, reports = r
        c = reports[0]["failures"][0]["cause"]
        case.check(c.startswith("node 1: no rank made progress for 2 s"),
                   f"coord-hang: node 0 stopped its ranks for node 1's hang: {c}")

    # A node lost whole: its supervisor and its rank SIGKILLed together (a
    # machine that died). Nothing reports the failure; node 0's rank loses
    # its peer, and after waiting for a cause that does not come, the lost
    # peer stands as the failure, after the supervisor that went away.
    # Without restarts (the lost node is not coming back), node 0 fails.
    dump = os.path.join(case.work, "coord-lost.dump")
    ckpt = os.path.join(case.fast, "coord-lost.ckpt")
    job, _ = launch("coord-lost", dump, ckpt, [["--max-restarts", "0"], []])
    step = rng.randrange(2, STEPS // INTERVAL - 3) * INTERVAL + INTERVAL // 2
    job.wait_for(rf"step +{step}/{STEPS}")
    ranks = job.ranks_of(1)
    job.procs[1].kill()
    for pid in ranks:
        os.kill(pid, signal.SIGKILL)
    print(f"      killed node 1's supervisor and rank (SIGKILL) at step {step}")
    t0 = time.time()
    codes, reports = job.finish(timeout=60)
    elapsed = time.time() - t0
    cause = reports[0]["failures"][0]["cause"] if reports[0] else ""
    case.check(codes[0] == 1 and elapsed < timeout,
               f"coord-lost: node 0 fails on its own (exit {codes[0]}) in "
               f"{elapsed:.1f} s, before the collective timeout ({timeout} s)")
    case.check(cause.startswith("node 1's supervisor disconnected before its "
                                "ranks finished") and "(it lost a peer)" in cause,
               f"coord-lost: the cause is the supervisor that went away, then "
               f"the lost peer: {cause}")


CASES = {"coordinate": case_coordinate, "elastic": case_elastic, "limits": case_limits, "hang": case_hang, "plans": case_plans, "kill": case_kill, "link-cut": case_link_cut,
         "disk-full": case_disk_full, "truncate": case_truncate}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--seed", type=int, default=None,
                    help="the random fault's seed (default: from the clock, printed)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int(time.time()) % 100000
    print(f"case {args.case}, seed {args.seed} (rerun with --seed {args.seed})")
    work = tempfile.mkdtemp(prefix=f"dtcc-fault-{args.case}.")
    case = Case(os.path.abspath(args.dtcc), work)
    try:
        CASES[args.case](case, args)
    except Skip as s:
        print(f"skipped: {s}")
        return SKIP
    finally:
        if args.keep:
            print("work dir:", work, case.fast)
        else:
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(case.fast, ignore_errors=True)
    if case.failures:
        print(f"\n{len(case.failures)} check(s) failed")
        return 1
    print("\nall checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
