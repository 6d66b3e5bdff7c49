"""Helpers shared by the end-to-end checks."""
import os
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


def run(cmd):
    """Runs `cmd`; its stdout, or exit with its output on failure."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"error: {' '.join(cmd)} exited {p.returncode}")
    return p.stdout


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


# Training a PyTorch model and its dtcc compile on the same batches, and a
# plan on ranks against one device: the harness of the model checks.

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


def checkpoint(ckpt_dir):
    """name -> array of every variable in a dtcc checkpoint."""
    import json
    manifest = json.load(open(os.path.join(ckpt_dir, "checkpoint.json")))
    dtypes = {1: np.float32, 7: np.int64, 6: np.int32, 11: np.float64}
    out = {}
    for v in manifest["variables"]:
        dtype = dtypes[int(v.get("dtype", 1))]
        shape = [int(d) for d in v.get("shape", [])]
        data = np.fromfile(os.path.join(ckpt_dir, v["file"]), dtype=dtype)
        out[v["name"]] = data.reshape(shape)
    return out


class Recipe:
    """AdamW with decoupled weight decay, global-norm clipping and linear
    warmup + cosine decay: dtcc's flags and PyTorch's optimizer for it."""

    def __init__(self, steps=20, lr=1e-3, warmup=5, weight_decay=0.1, clip=1.0,
                 betas=(0.9, 0.95), eps=1e-8):
        self.steps, self.lr, self.warmup = steps, lr, warmup
        self.weight_decay, self.clip, self.betas, self.eps = weight_decay, clip, betas, eps

    def flags(self):
        return ["--train", "--optimizer", "adamw", "--lr", str(self.lr),
                "--beta1", str(self.betas[0]), "--beta2", str(self.betas[1]),
                "--adam-eps", str(self.eps), "--weight-decay", str(self.weight_decay),
                "--grad-clip", str(self.clip), "--warmup", str(self.warmup),
                "--schedule", "cosine"]

    def torch_optimizer(self, model):
        import torch
        opt = torch.optim.AdamW(model.parameters(), lr=self.lr, betas=self.betas,
                                eps=self.eps, weight_decay=self.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: lr_at(s, 1.0, self.warmup, self.steps))
        return opt, sched


def export_for_training(model, sample, path):
    """Exports `model(*sample.values())` -> loss in training mode (opset 17,
    inputs named by `sample`'s keys). Tracing runs the model, which moves
    batch-norm running statistics: the model and the file both keep the
    state from before it."""
    import onnx
    import torch
    from onnx import numpy_helper
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    names = list(sample)
    torch.onnx.export(model, tuple(torch.from_numpy(sample[n]) for n in names), path,
                      input_names=names, output_names=["loss"], opset_version=17,
                      do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    model.load_state_dict(initial)
    m = onnx.load(path)
    for t in m.graph.initializer:
        if t.name in initial:
            t.CopyFrom(numpy_helper.from_array(initial[t.name].numpy(), t.name))
    onnx.save(m, path)
    return m


def write_batches(batches, root):
    """Step directories of TensorProto files for the runner's --batches."""
    for step, batch in enumerate(batches):
        d = os.path.join(root, f"{step:04d}")
        os.makedirs(d)
        for name, value in batch.items():
            write_pb(os.path.join(d, name + ".pb"), name, value)
    return root


def train_torch(model, batches, recipe):
    """Trains `model` in PyTorch on `batches`: (losses, step 1's gradients
    by parameter name, before clipping)."""
    import torch
    opt, sched = recipe.torch_optimizer(model)
    model.train()
    losses, grads = [], {}
    for step, batch in enumerate(batches, 1):
        opt.zero_grad()
        loss = model(*(torch.from_numpy(v) for v in batch.values()))
        loss.backward()
        losses.append(float(loss))
        if step == 1:
            grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip)
        opt.step()
        sched.step()
    return np.array(losses), grads


def gradient_errors(dump, grads):
    """Step 1's gradients from a dtcc run with --export-gradients against
    `grads`: (worst name, worst error of the tensor's largest magnitude,
    names dtcc wrote no gradient for)."""
    worst, missing = ("", 0.0), []
    for name, ref in grads.items():
        path = os.path.join(dump, "step_1", "grad_" + name.replace("/", "_") + ".pb")
        if not os.path.exists(path):
            missing.append(name)
            continue
        err = float(np.abs(read_pb(path) - ref).max() / max(np.abs(ref).max(), 1e-30))
        if err > worst[1]:
            worst = (name, err)
    return worst[0], worst[1], missing


def launch(exe, ranks, args, timeout=300):
    """Runs a compiled trainer on `ranks` ranks (mpirun, oversubscribed, one
    OpenBLAS thread each; one rank runs directly): the CompletedProcess."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    cmd = [exe] + args
    if ranks > 1:
        env.update(MPI_ENV)
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def train_dtcc(dtcc, onnx_path, batches, steps, flags, exe, ranks=1):
    """Compiles `onnx_path` with `flags` into `exe` and trains `steps` steps
    of `batches` on `ranks` ranks: (losses, compile's stderr), or raises
    RuntimeError with what failed."""
    p = subprocess.run([dtcc, "compile", onnx_path, "-o", exe] + flags,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"dtcc compile exited {p.returncode}:\n{p.stderr[-3000:]}")
    dump = exe + ".dump"
    r = launch(exe, ranks, ["--batches", batches, "--steps", str(steps),
                            "--log-every", str(steps), "--dump-outputs", dump])
    if r.returncode != 0:
        raise RuntimeError(f"{os.path.basename(exe)} on {ranks} rank(s) exited "
                           f"{r.returncode}:\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    return step_losses(dump, steps), p.stderr


def relative_error(got, want):
    """Worst |got - want| / |want| over the steps, and its step (from 1)."""
    rel = np.abs(np.asarray(got) - want) / np.maximum(np.abs(want), 1e-12)
    return float(rel.max()), int(rel.argmax()) + 1
