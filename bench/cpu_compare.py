#!/usr/bin/python3
"""One training step on CPU in dtcc and its peers, on the same computation.

The shared machinery of bench/train_gpt_cpu.py and bench/train_resnet_cpu.py
(issue 15, items 6 and 7). For one model, batch and thread count it trains,
from the same initial weights on the same batches with the same optimizer
(AdamW, weight decay, global-norm clipping, constant learning rate):

  dtcc          the executable `dtcc compile --train` builds from the ONNX file
  torch2-eager  PyTorch 2.x from PyPI, eagerly
  torch2-compile  the same with torch.compile (inductor); its first steps,
                which compile, are the warm-up
  ort-training  ONNX Runtime Training (its artifacts API) on the ONNX file
  torch1-eager  PyTorch 1.13 from Debian (/usr/bin/python3), eagerly, for
                continuity with the earlier tables

The ONNX file is PyTorch 1.13's export (training mode, opset 17), prepared
for ONNX Runtime's gradient builder: LayerNormalization's mean and inverse
standard deviation outputs and SoftmaxCrossEntropyLoss's log-probability
output are declared (unused outputs for everyone else). dtcc and ONNX
Runtime take their initial weights from its initializers, the PyTorch runs
from the state dict exported beside it (the same numbers).

PyTorch 2.x, ONNX Runtime Training and an onnx older than 1.17 (ONNX Runtime
1.19's artifact generator needs it) are installed with pip into a virtual
environment under a cache directory (VENV_REQUIREMENTS; created on first
use, reused after), never into the system or the test path.

Each system runs in its own process (peak RSS is that process's VmHWM) with
OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, torch.set_num_threads and ONNX
Runtime's intra-op threads all set to the thread count. Step times are
wall-clock times of whole steps (forward, backward, clipping, update;
dtcc's as its training loop logs them, which includes reading the step's
batch from its .pb files); the first --warmup steps are not timed.
After the timed runs dtcc runs 6 steps with --profile: its matrix products'
time per step is printed as the floor of dtcc's step (every other kernel
free) against the reference's step, which bounds the speed-up the other
kernels' fusion can buy on the machine. `--dtcc-flag=FLAG` (repeatable)
adds a flag to dtcc compile (e.g. --no-fuse).

This file is also the child process: `cpu_compare.py child SPEC.json`.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import e2e_common  # noqa: E402

DEBIAN_PYTHON = "/usr/bin/python3"
# The newest releases that install for Debian's Python 3.11 and work
# (2026-11-23): onnxruntime-training's last release is 1.19.2; its artifact
# generator fails with onnx >= 1.17. PyPI's torch wheel for x86-64 Linux is
# the CUDA build (it pulls the CUDA libraries' wheels); it runs on the CPU.
VENV_REQUIREMENTS = ("torch==2.15.0", "onnxruntime-training==1.19.2", "onnx==1.16.2")
SYSTEMS = ("dtcc", "torch2-eager", "torch2-compile", "ort-training", "torch1-eager")
LABELS = {"dtcc": "dtcc", "torch2-eager": "PyTorch 2 eager",
          "torch2-compile": "torch.compile", "ort-training": "ORT Training",
          "torch1-eager": "PyTorch 1.13 eager"}
REFERENCE = "torch2-eager"
UNITS = {"B": 1 / 1024, "KiB": 1, "MiB": 1024, "GiB": 1 << 20}


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dtcc-bench")


def default_venv():
    return os.environ.get("DTCC_BENCH_VENV") or os.path.join(cache_dir(), "venv")


def ensure_venv(path, requirements=VENV_REQUIREMENTS, system_site_packages=False,
                note="about 4 GB: PyPI's torch wheel brings the CUDA libraries",
                no_deps=(), base=None):
    """The virtual environment's python, creating the environment (and
    installing `requirements` from PyPI) unless it already has them.
    `system_site_packages`: the environment also sees Debian's packages
    (its PyTorch 1.13, onnx and numpy). `no_deps`: requirements installed
    without their dependencies (a package pinned to a newer PyTorch whose
    Python code runs on Debian's). `base`: another environment made by this
    function (default_venv(): PyTorch 2.x) whose packages this one also
    sees, after its own (a .pth file), so that its PyTorch is not
    installed twice."""
    python = os.path.join(path, "bin", "python")
    stamp = os.path.join(path, "dtcc-bench-requirements.txt")
    wanted = "\n".join(requirements) + "\n"
    if base:
        ensure_venv(base)
        wanted += "base " + base + "\n"
    if os.path.exists(python) and os.path.exists(stamp) and open(stamp).read() == wanted:
        return python
    print(f"creating {path} with {' '.join(requirements)} (pip, from PyPI; {note})",
          file=sys.stderr)
    if not os.path.exists(python):
        subprocess.run([DEBIAN_PYTHON, "-m", "venv", path]
                       + (["--system-site-packages"] if system_site_packages else []),
                       check=True)
    if base:
        site = subprocess.run(
            [os.path.join(base, "bin", "python"), "-c",
             "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True).stdout.strip()
        own = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(own, "zz-dtcc-bench-base.pth"), "w") as f:
            f.write(site + "\n")
    plain = [r for r in requirements if r not in no_deps]
    if plain:
        subprocess.run([python, "-m", "pip", "install", "--quiet", *plain],
                       check=True)
    if no_deps:
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps",
                        *no_deps], check=True)
    with open(stamp, "w") as f:
        f.write(wanted)
    return python


def vm_hwm_kib():
    """This process's peak RSS (VmHWM: unlike getrusage's maximum it does
    not inherit the peak of the process that exec'd this one)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


# ---------------------------------------------------------------- workloads

def build_model(spec):
    import torch
    import torch_models
    torch.manual_seed(0)
    return torch_models.build(spec["kind"], **spec["model"])


def make_batches(spec, count):
    """`count` steps of inputs, {name: [count, ...] array}."""
    rng = np.random.default_rng(0)
    b = spec["batch"]
    if spec["kind"] in ("gpt", "llama"):
        seq, vocab = spec["model"]["seq"], spec["model"]["vocab"]
        tokens = np.stack([rng.integers(0, vocab, (b, seq + 1)) for _ in range(count)])
        return {"ids": tokens[:, :, :-1].astype(np.int64).copy(),
                "labels": tokens[:, :, 1:].astype(np.int64).copy()}
    if spec["kind"] in ("resnet", "mobilenet"):
        size, classes = spec["size"], spec["model"]["classes"]
        xs, ys = [], []
        for _ in range(count):
            xs.append(rng.standard_normal((b, 3, size, size)).astype(np.float32))
            ys.append(rng.integers(0, classes, b).astype(np.int64))
        return {"x": np.stack(xs), "labels": np.stack(ys)}
    raise ValueError(f"unknown workload kind {spec['kind']!r}")


def prepare_for_ort(model):
    """Declares the outputs ONNX Runtime's gradient builder reads: its
    LayerNormalization gradient takes the forward's mean and inverse
    standard deviation, its SoftmaxCrossEntropyLoss gradient the log
    probabilities. Returns the nodes changed."""
    changed = []
    for node in model.graph.node:
        extra = {"LayerNormalization": ("mean", "inv_std_dev"),
                 "SoftmaxCrossEntropyLoss": ("log_prob",)}.get(node.op_type, ())
        # Only missing trailing outputs: an output already there is kept.
        missing = extra[len(node.output) - 1:] if len(node.output) <= len(extra) else ()
        for name in missing:
            node.output.append(f"{node.name or node.op_type}/{name}")
        if missing:
            changed.append(node.op_type)
    return changed


def export_child(spec):
    """Debian's PyTorch 1.13: the ONNX file, the state dict and the batches."""
    import onnx
    import torch_models
    from onnx import numpy_helper
    work = spec["work"]
    model = build_model(spec)
    batches = make_batches(spec, spec["steps"])
    sample = {name: batches[name][0] for name in spec["inputs"]}
    path = os.path.join(work, "model.onnx")
    torch_models.export(spec["kind"], model, spec["batch"], path, sample)
    m = onnx.load(path)
    changed = prepare_for_ort(m)
    onnx.checker.check_model(m)
    onnx.save(m, path)
    np.savez(os.path.join(work, "init.npz"),
             **{k: v.numpy() for k, v in model.state_dict().items()})
    np.savez(os.path.join(work, "batches.npz"), **batches)
    for step in range(spec["steps"]):
        d = os.path.join(work, "batches", f"{step:05d}")
        os.makedirs(d)
        for name in spec["inputs"]:
            with open(os.path.join(d, name + ".pb"), "wb") as f:
                f.write(numpy_helper.from_array(batches[name][step], name)
                        .SerializeToString())
    return {"params": sum(p.numel() for p in model.parameters()),
            "frozen": torch_models.frozen_buffers(model),
            "state": [n for n, _ in model.named_buffers()
                      if n.endswith(torch_models.STATE_BUFFERS)],
            "prepared": {op: changed.count(op) for op in sorted(set(changed))}}


# ---------------------------------------------------------------- the systems

def torch_child(spec, compiled):
    import torch
    torch.set_num_threads(spec["threads"])
    startup = vm_hwm_kib()
    model = build_model(spec)
    init = np.load(os.path.join(spec["work"], "init.npz"))
    model.load_state_dict({k: torch.from_numpy(init[k]) for k in init.files}, strict=True)
    model.train()
    forward = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=spec["lr"], betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=spec["weight_decay"])
    data = np.load(os.path.join(spec["work"], "batches.npz"))
    batches = {n: torch.from_numpy(data[n]) for n in spec["inputs"]}
    times, losses = [], []
    # Mixed precision as PyTorch runs it on CPUs: autocast to bf16 (its
    # matrix products in bf16 on oneDNN, fp32 parameters and optimizer).
    autocast = spec.get("torch_autocast")
    for step in range(spec["steps"]):
        inputs = [batches[n][step] for n in spec["inputs"]]
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if autocast:
            with torch.autocast("cpu", dtype=getattr(torch, autocast)):
                loss = forward(*inputs)
        else:
            loss = forward(*inputs)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec["clip"])
        opt.step()
        times.append(1e3 * (time.perf_counter() - start))
        losses.append(float(loss))
    return {"times_ms": times, "losses": losses, "peak_kib": vm_hwm_kib(),
            "startup_kib": startup, "version": f"torch {torch.__version__}"}


class _TorchAdamW:
    """ONNX Runtime's AdamWOptimizer node in adam_mode 0: weight decay before
    the update, as torch.optim.AdamW and dtcc (onnxblock's AdamW block
    writes adam_mode 1, Hugging Face's order)."""

    @staticmethod
    def block(weight_decay, clip):
        from onnxruntime.training import onnxblock
        from onnxruntime.training.onnxblock.optim import optim

        class TorchOrder(optim.AdamWOptimizer):
            def build(self, *names):
                return self._build_optimizer_node(
                    list(names), optim._graph_utils.generate_graph_name("adamw.updated_flag"),
                    "AdamWOptimizer",
                    {"alpha": self._betas[0], "beta": self._betas[1], "epsilon": self._eps,
                     "weight_decay": self._weight_decay, "correct_bias": 1, "adam_mode": 0})

        block = onnxblock.optim.AdamW(betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay,
                                      clip_grad=onnxblock.optim.ClipGradNorm(clip))
        block._adamw = TorchOrder(betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay)
        return block


def ort_artifacts(spec):
    """ONNX Runtime Training's artifacts for the ONNX file, made once per
    workload (the gradient graph does not depend on the thread count)."""
    import onnx
    from onnxruntime.training import artifacts
    out = os.path.join(spec["work"], "ort")
    if os.path.exists(os.path.join(out, "done")):
        return out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    model = onnx.load(os.path.join(spec["work"], "model.onnx"))
    # Batch-norm statistics are not trained either (ONNX Runtime's Module
    # leaves them at their initial values: the training-mode losses do not
    # read them).
    frozen = set(spec["frozen"]) | set(spec["state"])
    names = [t.name for t in model.graph.initializer]
    # Initializers that are not floating point (shapes, indices) take no
    # gradient.
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE}
    trainable = [t.name for t in model.graph.initializer
                 if t.name not in frozen and t.data_type in float_types]
    artifacts.generate_artifacts(
        model, requires_grad=trainable,
        frozen_params=[n for n in names if n not in trainable], loss=None,
        optimizer=_TorchAdamW.block(spec["weight_decay"], spec["clip"]),
        artifact_directory=out)
    open(os.path.join(out, "done"), "w").close()
    return out


def ort_child(spec):
    import onnxruntime
    from onnxruntime.training.api import CheckpointState, Module, Optimizer
    startup = vm_hwm_kib()
    d = ort_artifacts(spec)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = spec["threads"]
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    state = CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
    # No eval model: ONNX Runtime 1.19 writes the eval model's
    # BatchNormalization with training_mode 0 and its 3 outputs, which it
    # then refuses to load; these runs never evaluate.
    module = Module(os.path.join(d, "training_model.onnx"), state, device="cpu",
                    session_options=options)
    opt = Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
    opt.set_learning_rate(spec["lr"])
    module.train()
    data = np.load(os.path.join(spec["work"], "batches.npz"))
    batches = {n: data[n] for n in spec["inputs"]}
    times, losses = [], []
    for step in range(spec["steps"]):
        inputs = [batches[n][step] for n in spec["inputs"]]
        start = time.perf_counter()
        loss = module(*inputs)
        opt.step()
        module.lazy_reset_grad()
        times.append(1e3 * (time.perf_counter() - start))
        losses.append(float(np.asarray(loss).reshape(-1)[0]))
    return {"times_ms": times, "losses": losses, "peak_kib": vm_hwm_kib(),
            "startup_kib": startup,
            "version": f"onnxruntime-training {onnxruntime.__version__}"}


def child_main(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    what = spec["system"]
    try:
        if what == "export":
            result = export_child(spec)
        elif what in ("torch2-eager", "torch1-eager"):
            result = torch_child(spec, compiled=False)
        elif what == "torch2-compile":
            result = torch_child(spec, compiled=True)
        elif what == "ort-training":
            result = ort_child(spec)
        else:
            raise ValueError(f"unknown system {what!r}")
    except Exception as e:  # reported in the table, not a crash of the driver
        if what == "export":
            raise
        msg = f"{type(e).__name__}: {e}"
        # ONNX Runtime's messages open with a C++ signature: keep its error.
        msg = msg[msg.find("[ONNXRuntimeError]"):] if "[ONNXRuntimeError]" in msg else msg
        result = {"error": " ".join(line.strip() for line in msg.splitlines())[:600]}
    print("RESULT " + json.dumps(result))


def run_child(python, spec, system, threads, env):
    path = os.path.join(spec["work"], f"spec_{system}_{threads}.json")
    with open(path, "w") as f:
        json.dump(dict(spec, system=system, threads=threads), f)
    proc = subprocess.run([python, os.path.abspath(__file__), "child", path],
                          capture_output=True, text=True, env=env)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)[:400]}
    return json.loads(lines[-1][len("RESULT "):])


# OpenBLAS's kernels for AVX-512 and for AVX2 CPUs (its core names).
AVX512_CORES = {"SkylakeX", "Cooperlake", "SapphireRapids"}
AVX2_CORES = AVX512_CORES | {"Haswell", "Zen"}
EXTRA_ENV = {}


def openblas_core(env=None):
    """The core OpenBLAS (Debian's, which dtcc and PyTorch 1.13 use) picks
    for this CPU, as it reports it."""
    proc = subprocess.run([DEBIAN_PYTHON, "-c", "import numpy"], capture_output=True,
                          text=True, env=dict(env or os.environ, OPENBLAS_VERBOSE="2"))
    m = re.search(r"Core: (\w+)", proc.stderr)
    return m.group(1) if m else "?"


# The environment's own OPENBLAS_CORETYPE, read once: every workload of a
# run chooses from the same starting point (the first used to take it as
# the caller's choice and remove it, so the second ran OpenBLAS's).
INHERITED_CORETYPE = os.environ.pop("OPENBLAS_CORETYPE", None)


def choose_openblas_core(choice):
    """Sets OPENBLAS_CORETYPE for every run and says what was chosen.
    `auto`: the widest kernels this CPU runs, as dtcc's runtime picks them
    when OPENBLAS_CORETYPE is unset (OpenBLAS 0.3.21 does not know newer
    CPUs, Intel family 6 model 207 among them, and falls back to SSE3
    kernels 4-5x slower at sgemm). An OPENBLAS_CORETYPE inherited from the
    environment is not the benchmark's choice: where it names narrower
    kernels than that (some images set Haswell: half the AVX-512 kernels'
    sgemm rate on a Zen 5) it is overridden, and the line says so; pass it
    as --openblas-coretype to keep it. `detected` leaves OpenBLAS alone."""
    EXTRA_ENV.pop("OPENBLAS_CORETYPE", None)
    detected = openblas_core()
    if choice == "detected":
        return f"OpenBLAS core {detected} (as OpenBLAS detects this CPU)"
    note = ""
    if choice == "auto":
        flags = cpu_flags()
        if "avx512f" in flags and detected not in AVX512_CORES:
            choice = "SkylakeX"
        elif "avx2" in flags and detected not in AVX2_CORES:
            choice = "Haswell"
        else:
            choice = detected
        if INHERITED_CORETYPE and INHERITED_CORETYPE != choice:
            note = (f"; the environment's OPENBLAS_CORETYPE={INHERITED_CORETYPE} "
                    f"overridden, --openblas-coretype {INHERITED_CORETYPE} keeps it")
        if choice == detected:
            return f"OpenBLAS core {detected} (as OpenBLAS detects this CPU{note})"
    EXTRA_ENV["OPENBLAS_CORETYPE"] = choice
    used = openblas_core(dict(os.environ, **EXTRA_ENV))
    return (f"OpenBLAS core {used} (OPENBLAS_CORETYPE={choice}; OpenBLAS itself detects "
            f"{detected} on this CPU{note})")


def thread_env(threads):
    return dict(os.environ, **EXTRA_ENV, OMP_NUM_THREADS=str(threads),
                OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_dir(), "inductor"))


def dtcc_compile(dtcc, spec):
    exe = os.path.join(spec["work"], "train")
    cmd = [dtcc, "compile", os.path.join(spec["work"], "model.onnx"), "--train",
           "--optimizer", "adamw", "--lr", str(spec["lr"]), "--beta1", "0.9",
           "--beta2", "0.999", "--adam-eps", "1e-8", "--weight-decay",
           str(spec["weight_decay"]), "--grad-clip", str(spec["clip"]),
           "--schedule", "constant", "--warmup", "0", "-o", exe]
    if spec["frozen"]:
        cmd += ["--frozen", ",".join(spec["frozen"])]
    cmd += spec.get("dtcc_flags", []) + spec.get("extra_dtcc_flags", [])
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, "dtcc compile failed: " + " | ".join(
            proc.stderr.strip().splitlines()[-4:])[:600]
    return exe, f"{time.perf_counter() - start:.1f} s"


def dtcc_run(exe, spec, threads):
    proc = subprocess.run([exe, "--batches", os.path.join(spec["work"], "batches"),
                           "--steps", str(spec["steps"]), "--log-every", "1"],
                          capture_output=True, text=True, env=thread_env(threads))
    if proc.returncode != 0:
        return {"error": " | ".join((proc.stderr + proc.stdout).strip().splitlines()[-3:])}
    out = proc.stdout
    steps = [(int(m.group(1)), float(m.group(2)), float(m.group(3))) for m in
             re.finditer(r"step\s+(\d+)/\d+\s+loss ([-\d.e+]+).* step ([\d.]+) ms", out)]
    if len(steps) != spec["steps"]:
        return {"error": f"expected {spec['steps']} logged steps, read {len(steps)}: "
                         + " | ".join(out.strip().splitlines()[-3:])}
    m = re.search(r"process peak RSS ([\d.]+) (\w+) \(([\d.]+) (\w+) before", out)
    planned = re.search(r"peak memory ([\d.]+ \w+)", out)
    return {"times_ms": [ms for _, _, ms in steps], "losses": [loss for _, loss, _ in steps],
            "peak_kib": float(m.group(1)) * UNITS[m.group(2)],
            "startup_kib": float(m.group(3)) * UNITS[m.group(4)],
            "planned": planned.group(1) if planned else "?",
            "matmul_ms": dtcc_matmul_ms(exe, spec, threads)}


def dtcc_matmul_ms(exe, spec, threads):
    """Milliseconds per step dtcc's matrix products take (a separate run
    with --profile, its kernel time over the steps after the first): the
    floor of dtcc's step with every other kernel free. None if unread."""
    steps = 6
    proc = subprocess.run([exe, "--batches", os.path.join(spec["work"], "batches"),
                           "--steps", str(steps), "--log-every", str(steps), "--profile"],
                          capture_output=True, text=True, env=thread_env(threads))
    m = re.search(r"^\s+matmul\s+([\d.]+) ms\s+(\d+) calls", proc.stdout, re.M)
    # The runner's profile leaves out the first step.
    return float(m.group(1)) / (steps - 1) if proc.returncode == 0 and m else None


# ---------------------------------------------------------------- the driver

def add_arguments(ap, steps, warmup):
    ap.add_argument("--dtcc", default=os.path.join(REPO, "build", "bin", "dtcc"))
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--steps", type=int, default=steps, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=warmup,
                    help="untimed steps first (torch.compile compiles in them)")
    ap.add_argument("--runs", type=int, default=1,
                    help="runs of every system, interleaved (dtcc, the others, dtcc, ...)")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help=f"comma-separated subset of {','.join(SYSTEMS)}")
    ap.add_argument("--check-steps", type=int, default=5,
                    help="first steps whose losses must agree")
    ap.add_argument("--venv", default=default_venv(),
                    help="virtual environment for PyTorch 2.x and ONNX Runtime Training "
                         "(created if missing; default $DTCC_BENCH_VENV or "
                         "$XDG_CACHE_HOME/dtcc-bench/venv)")
    ap.add_argument("--quick", action="store_true",
                    help="3 timed steps after 2, one run: checks that everything runs")
    ap.add_argument("--dtcc-flag", action="append", default=[], metavar="FLAG",
                    help="one more flag for dtcc compile (repeatable; e.g. --dtcc-flag=--no-fuse)")
    ap.add_argument("--keep", help="keep the work files (ONNX, executables) in this folder")
    ap.add_argument("--openblas-coretype", default="auto",
                    help="OPENBLAS_CORETYPE for every run (dtcc and PyTorch 1.13 use "
                         "Debian's OpenBLAS): auto (the widest kernels the CPU runs, "
                         "as dtcc's runtime picks them; an OPENBLAS_CORETYPE in the "
                         "environment is not kept), detected (OpenBLAS's own choice), "
                         "or a core name")


def quick(args):
    if args.quick:
        args.steps, args.warmup, args.runs = 3, 2, 1
        args.check_steps = min(args.check_steps, 5)


def pct(values, q):
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def run_workload(args, spec, title, tolerance, tolerance_note):
    """Runs every system on `spec` at every thread count; prints the table.
    `tolerance(step)` is the relative difference allowed between a system's
    loss at `step` (from 1) and the reference's, `tolerance_note` says it and
    why. Returns the rows ({system, threads, median, ...}) for the caller."""
    import tempfile
    systems = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        sys.exit(f"unknown --systems {','.join(unknown)}; expected some of {','.join(SYSTEMS)}")
    threads_list = [int(t) for t in args.threads.split(",")]
    venv_python = None
    if any(s in ("torch2-eager", "torch2-compile", "ort-training") for s in systems):
        venv_python = ensure_venv(args.venv)
    work = args.keep or tempfile.mkdtemp(prefix="dtcc-bench-")
    if args.keep:
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
    spec = dict(spec, work=os.path.abspath(work), steps=args.warmup + args.steps,
                extra_dtcc_flags=args.dtcc_flag)
    try:
        return _run_workload(args, spec, title, tolerance, tolerance_note, systems,
                             threads_list, venv_python)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def cpu_flags():
    """The CPU's feature flags, as /proc/cpuinfo lists them."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def dtcc_f32_products(blas):
    """Where dtcc's f32 matrix products run (runtime/device/cpu/
    MatmulKernels.cpp): oneDNN's brgemm matmul where the CPU has AVX-512
    (oneDNN's avx512_core), the rest on OpenBLAS; DTCC_CPU_MATMUL=blas or
    =dnnl chooses."""
    env = os.environ.get("DTCC_CPU_MATMUL", "")
    flags = cpu_flags()
    avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
    if env == "dnnl" or (env != "blas" and avx512):
        return (f"f32 products on Debian's oneDNN where its brgemm kernels take them "
                f"(DTCC_CPU_MATMUL=blas: none), the rest on Debian's {blas}")
    return f"Debian's {blas}"


def _run_workload(args, spec, title, tolerance, tolerance_note, systems, threads_list,
                  venv_python):
    exported = run_child(DEBIAN_PYTHON, spec, "export", 1, os.environ)
    if "error" in exported:
        sys.exit(f"export failed: {exported['error']}")
    spec["frozen"], spec["state"] = exported["frozen"], exported["state"]
    exe, dtcc_note = (None, None)
    if "dtcc" in systems:
        exe, dtcc_note = dtcc_compile(args.dtcc, spec)
    pythons = {"torch1-eager": DEBIAN_PYTHON, "torch2-eager": venv_python,
               "torch2-compile": venv_python, "ort-training": venv_python}
    versions = {"dtcc": "dtcc " + git_version()}
    blas = choose_openblas_core(args.openblas_coretype)
    print(f"{title}: {exported['params']:,} parameters; AdamW (lr {spec['lr']}, weight "
          f"decay {spec['weight_decay']}), global-norm clipping {spec['clip']}; "
          f"{args.steps} timed steps after {args.warmup}, {args.runs} run(s); ONNX file "
          f"prepared for ORT: outputs declared on "
          + ", ".join(f"{n} {op}" for op, n in exported["prepared"].items()))
    rows = []
    for threads in threads_list:
        results = {s: [] for s in systems}
        for _ in range(args.runs):
            for system in systems:
                if system == "dtcc":
                    r = dtcc_run(exe, spec, threads) if exe else {"error": dtcc_note}
                else:
                    r = run_child(pythons[system], spec, system, threads,
                                  thread_env(threads))
                versions.setdefault(system, r.get("version"))
                results[system].append(r)
        rows += table(args, spec, threads, results, tolerance, tolerance_note)
    print("versions: " + "; ".join(f"{LABELS[s]}: {v}" for s, v in versions.items() if v)
          + (f"; dtcc compile {dtcc_note}" if exe else ""))
    print(f"BLAS: dtcc: {dtcc_f32_products(blas)}; PyTorch 1.13: Debian's {blas}; "
          f"PyTorch 2 and ORT: their own (MKL and oneDNN; MLAS)")
    print()
    return rows


def git_version():
    proc = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                          capture_output=True, text=True)
    return proc.stdout.strip() or "?"


def table(args, spec, threads, results, tolerance, tolerance_note):
    w = args.warmup
    k = min(args.check_steps, spec["steps"])
    print(f"\n{threads} thread(s)")
    print(f"{'system':20} {'ms/step':>9} {'q1-q3':>17} {'runs':>22} {'dtcc faster':>11} "
          f"{'peak RSS':>10} {'growth':>10}  losses of steps 1-{k}")
    # The reference: PyTorch 2 eager, else another of dtcc's peers that ran.
    order = [REFERENCE, "torch1-eager", "torch2-compile", "ort-training", "dtcc"]
    reference = next((s for s in order
                      if any("error" not in r for r in results.get(s, []))), None)
    ref = next((r for r in results.get(reference, []) if "error" not in r), None)
    dtcc_ms = None
    rows = []
    for system, runs in results.items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            print(f"{LABELS[system]:20} failed: {runs[0]['error']}")
            rows.append({"system": system, "threads": threads, "error": runs[0]["error"]})
            continue
        timed = [t for r in ok for t in r["times_ms"][w:]]
        per_run = [statistics.median(r["times_ms"][w:]) for r in ok]
        med = statistics.median(timed)
        if system == "dtcc":
            dtcc_ms = med
        losses = ok[0]["losses"][:k]
        check = ""
        if ref is not None and system != reference:
            diffs = [e2e_common.as_error(abs(a - b) / abs(b))
                     for a, b in zip(losses, ref["losses"][:k])]
            bad = [i + 1 for i, d in enumerate(diffs) if d > tolerance(i + 1)]
            check = (f"  max rel diff {max(diffs):.1e} "
                     + (f"DIFFERS at step {', '.join(map(str, bad))}" if bad else "ok"))
        elif system == reference:
            check = "  (reference)"
        peak = max(r["peak_kib"] for r in ok) / 1024
        growth = max(r["peak_kib"] - r["startup_kib"] for r in ok) / 1024
        faster = f"{med / dtcc_ms:.2f}x" if dtcc_ms and system != "dtcc" else ""
        runs_text = ", ".join(f"{m:.1f}" for m in per_run)
        print(f"{LABELS[system]:20} {med:9.2f} {pct(timed, .25):8.2f}-{pct(timed, .75):8.2f} "
              f"{runs_text:>22} {faster:>11} {peak:6.1f} MiB {growth:6.1f} MiB  "
              + " ".join(f"{l:.5f}" for l in losses) + check)
        rows.append({"system": system, "threads": threads, "median": med, "runs": per_run,
                     "peak_mib": peak, "losses": losses})
        if system == "torch2-compile":
            print(f"{'':20} (first step, compiling: {ok[0]['times_ms'][0] / 1e3:.1f} s)")
        if system == "dtcc":
            print(f"{'':20} (planned peak {ok[0]['planned']})")
            matmul = [r["matmul_ms"] for r in ok if r.get("matmul_ms")]
            if matmul:
                rows[-1]["matmul_ms"] = statistics.median(matmul)
    if reference:
        print(f"losses: each system's first {k} against {LABELS[reference]}'s, relative "
              f"tolerance {tolerance_note}")
    if dtcc_ms:
        goals = []
        for system, need in (("torch2-eager", 1.5), ("torch2-compile", 1.0),
                             ("ort-training", 1.0)):
            row = next((r for r in rows if r["system"] == system and "median" in r), None)
            if row:
                ratio = row["median"] / dtcc_ms
                goals.append(f"{LABELS[system]} {ratio:.2f}x (goal > {need:g}x: "
                             f"{'met' if ratio > need else 'not met'})")
        if goals:
            print("dtcc's step against " + "; ".join(goals))
        # How far the matrix products alone let dtcc go: the step's floor
        # with every other kernel free, against the reference's step.
        dtcc_row = next((r for r in rows if r["system"] == "dtcc" and "median" in r), None)
        ref_row = next((r for r in rows if r["system"] == reference and "median" in r), None)
        if dtcc_row and dtcc_row.get("matmul_ms") and ref_row and reference != "dtcc":
            mm = dtcc_row["matmul_ms"]
            line = (f"dtcc's matrix products (--profile run): {mm:.1f} ms/step, "
                    f"{100 * mm / dtcc_ms:.0f}% of its step")
            # A floor only where the products are a real part of the step
            # (a CNN's classifier is not).
            if mm >= 0.1 * dtcc_ms:
                line += (f"; with every other kernel free its step would be "
                         f"{ref_row['median'] / mm:.2f}x {LABELS[reference]}'s")
            print(line)
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        child_main(sys.argv[2])
    else:
        sys.exit(__doc__)
