"""Helpers shared by the end-to-end checks."""
import math
import os
import re
import subprocess
import sys

import numpy as np

# mpirun as root in containers, over TCP only, more ranks than cores.
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_btl": "self,tcp",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "DTCC_COLLECTIVE_TIMEOUT": "60",
}


def run(cmd, timeout=None):
    """Runs `cmd` (for at most `timeout` seconds); its stdout, or exit with
    its output on failure."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"error: {' '.join(cmd)} exited {p.returncode}")
    return p.stdout


# The units `dtcc explain` prints sizes in.
EXPLAIN_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def explain_collectives(dtcc, exe):
    """[(phase, kind, axis, tensor bytes, bytes sent, rounding of bytes
    sent)] of every collective `dtcc explain` lists; the rounding is half
    the last printed digit (explain prints 12.3 KiB: up to 51 B off)."""
    text = run([dtcc, "explain", exe])
    out = []
    for m in re.finditer(r"^  \d+\s+\S+\s+(\w+)\s+(\w+)\s+(forward|backward|optimizer)\s+"
                         r"([\d.]+) (\w+)\s+([\d.]+) (\w+)", text, re.M):
        sent, unit = m.group(6), EXPLAIN_UNITS[m.group(7)]
        decimals = len(sent.split(".")[1]) if "." in sent else 0
        out.append((m.group(3), m.group(1), m.group(2),
                    float(m.group(4)) * EXPLAIN_UNITS[m.group(5)],
                    float(sent) * unit, 0.5 * unit * 10 ** -decimals))
    return out


def text_tokens(path):
    """Byte tokens of the license texts every Debian system has."""
    root = "/usr/share/common-licenses"
    data = b"".join(open(os.path.join(root, f), "rb").read()
                    for f in sorted(os.listdir(root))
                    if os.path.isfile(os.path.join(root, f)))
    np.frombuffer(data, dtype=np.uint8).astype(np.uint16).tofile(path)


class Checks:
    """Prints each check as ok/FAIL and remembers the failures."""

    def __init__(self):
        self.failures = []

    def __call__(self, ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            self.failures.append(what)


def start(doc, prefix):
    """The --dtcc argument and a fresh work directory of a check script."""
    import argparse
    import tempfile
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    return ap.parse_args(), tempfile.mkdtemp(prefix=prefix)


# Step files, trained steps' losses and ranks: torch_parity.py's helpers.

def lr_at(step, base, warmup, total):
    """dgraph.lr_schedule with kind=cosine, min_lr=0."""
    import math
    if step < warmup:
        return base * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1 + math.cos(math.pi * p))


def write_pb(path, name, array):
    from onnx import numpy_helper
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def read_pb(path):
    import onnx
    from onnx import numpy_helper
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def step_losses(dump, steps):
    """The loss of steps 1..steps from a --dump-outputs directory."""
    return np.array([float(read_pb(os.path.join(dump, f"step_{s}", "loss.pb")))
                     for s in range(1, steps + 1)])


def free_port():
    """A TCP port for rank 0 of a torchrun-style launch on this machine:
    below the kernel's ephemeral range (net.ipv4.ip_local_port_range), which
    the ranks' own connections use, at random, and free now (no socket bound
    to it, TIME_WAIT included: the probe has no SO_REUSEADDR). What
    runtime/comm/TcpPort.h's pickFreeTcpPort chooses for `dtcc run`."""
    import random
    import socket
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(256):
        port = random.randint(max(1024, low - 16384), low - 1)
        with socket.socket() as sock:
            try:
                sock.bind(("", port))
                return port
            except OSError:
                continue
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def write_batches(batches, root):
    """Step directories of TensorProto files for the runner's --batches."""
    for step, batch in enumerate(batches):
        d = os.path.join(root, f"{step:04d}")
        os.makedirs(d)
        for name, value in batch.items():
            write_pb(os.path.join(d, name + ".pb"), name, value)
    return root


def launch(exe, ranks, args, timeout=300, cwd=None):
    """Runs a compiled trainer on `ranks` ranks (mpirun, oversubscribed, one
    OpenBLAS thread each; one rank runs directly), in `cwd` if given: the
    CompletedProcess."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    cmd = [exe] + args
    if ranks > 1:
        env.update(MPI_ENV)
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


def as_error(x):
    """`x` as an error to compare, infinite where it is NaN: a comparison
    with a NaN is false, so `err > worst` or `err > tol` (and max()) would
    let a NaN result pass."""
    x = float(x)
    return math.inf if math.isnan(x) else x


def relative_error(got, want):
    """Worst |got - want| / |want| over the steps (infinite at a NaN), and
    its step (from 1)."""
    rel = np.abs(np.asarray(got) - want) / np.maximum(np.abs(want), 1e-12)
    rel = np.where(np.isnan(rel), np.inf, rel)
    return float(rel.max()), int(rel.argmax()) + 1


def finish(work, keep, failures):
    """Removes the work directory (or says where it is kept) and prints the
    verdict: the script's exit status."""
    import shutil
    if keep:
        print("work dir:", work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"\n{len(failures)} check(s) failed")
        return 1
    print("\nall checks passed")
    return 0


def param_error(params, ref_params):
    """The worst |param - reference| over every float tensor, relative to
    that tensor's largest reference magnitude (name -> array, both)."""
    worst = 0.0
    for k, v in ref_params.items():
        if v.dtype.kind == "f":
            scale = max(float(np.max(np.abs(v))), 1e-12)
            worst = max(worst, as_error(np.max(np.abs(params[k] - v)) / scale))
    return worst
