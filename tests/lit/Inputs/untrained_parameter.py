"""Parameters without a gradient path to the loss, against PyTorch 1.13:
a learned threshold read only by a comparison (`h * (h > thr)`) has .grad
None in PyTorch, whose AdamW then skips it (no update, no weight decay); a
layer behind a ReLU that is dead for every input has a zero .grad, which
AdamW still decays. The model is trained 20 steps with the AdamW recipe of
tests/e2e/torch_parity.py (weight decay 0.1) in PyTorch and in dtcc, on one
device and under each plan given: the losses and the checkpointed
parameters must agree, thr must keep its initial value exactly, and
`dtcc explain` must list it as not trained.

Usage: untrained_parameter.py WORKDIR [PLAN ...] (torch_parity's plan
names). Prints "ok <what>" or "FAIL <what>: <why>"; exits non-zero if any
failed.
"""
import os
import subprocess
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
import e2e_common  # noqa: E402
import torch_parity  # noqa: E402
from torch_parity import Settings, recipe_flags, train_torch  # noqa: E402

WORK = sys.argv[1]
PLANS = sys.argv[2:]
STEPS = 20
os.makedirs(WORK, exist_ok=True)
FAILED = []


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(16, 32)
        self.thr = nn.Parameter(torch.full((32,), 0.05))
        self.dead = nn.Linear(16, 4)
        self.head = nn.Linear(32, 4)

    def forward(self, x, labels):
        h = self.l1(x)
        h = h * (h > self.thr).float()
        # Dead for every input: a zero gradient that exists (decayed).
        off = F.relu(self.dead(x) - 1e3)
        return F.cross_entropy(self.head(h) + off, labels)


def batch(rng, n):
    return {"x": rng.standard_normal((n, 16)).astype(np.float32),
            "labels": rng.integers(0, 4, n).astype(np.int64)}


def report(ok, what, why=""):
    print(f"ok {what}" if ok else f"FAIL {what}: {why}")
    if not ok:
        FAILED.append(what)


torch.manual_seed(0)
torch.set_num_threads(1)
s = Settings(batch=8, lr=1e-2)
model = Gate()
init = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
onnx_path = os.path.join(WORK, "gate.onnx")
torch.onnx.export(model, (torch.zeros(8, 16), torch.zeros(8, dtype=torch.int64)),
                  onnx_path, input_names=["x", "labels"], output_names=["loss"],
                  opset_version=17, do_constant_folding=False,
                  training=torch.onnx.TrainingMode.TRAINING)
rng = np.random.default_rng(1)
batches = [batch(rng, s.batch) for _ in range(STEPS)]
root = e2e_common.write_batches(batches, os.path.join(WORK, "batches"))
want, _ = train_torch(model, ["x", "labels"], batches, s, STEPS, torch.float32)
final = {n: p.detach().numpy() for n, p in model.named_parameters()}
assert np.array_equal(final["thr"], init["thr"])  # PyTorch leaves it alone
assert not np.array_equal(final["dead.weight"], init["dead.weight"])  # decayed

for plan in [""] + PLANS:
    label, ranks, plan_flags = torch_parity.PLANS[plan] if plan else ("1dev", 1, [])
    exe = os.path.join(WORK, plan or "one")
    p = subprocess.run(["dtcc", "compile", onnx_path, "-o", exe] + recipe_flags(s) + plan_flags,
                       capture_output=True, text=True)
    if p.returncode:
        report(False, label, "compile: " + p.stderr[-2000:])
        continue
    report("parameter 'thr' has no gradient path to the loss" in p.stderr,
           f"{label} warning", p.stderr[-500:])
    e = subprocess.run(["dtcc", "explain", exe], capture_output=True, text=True)
    report("optimizer state): thr\n" in e.stdout and "  thr " not in e.stdout,
           f"{label} explain", e.stdout[:1500])
    dump, ckpt = exe + ".dump", exe + ".ckpt"
    r = e2e_common.launch(exe, ranks, ["--batches", root, "--steps", str(STEPS),
                                       "--log-every", str(STEPS), "--dump-outputs", dump,
                                       "--save", ckpt])
    if r.returncode:
        report(False, label, f"run: {r.stdout[-1000:]}{r.stderr[-1500:]}")
        continue
    got = e2e_common.step_losses(dump, STEPS)
    err, at = e2e_common.relative_error(got, want)
    report(err <= 1e-5, f"{label} losses", f"worst relative error {err:.2e} at step {at}")
    import json
    manifest = json.load(open(os.path.join(ckpt, "checkpoint.json")))
    params = {}
    for v in manifest["variables"]:
        if int(v.get("dtype", 1)) == 1:
            params[v["name"]] = np.fromfile(os.path.join(ckpt, v["file"]), np.float32).reshape(
                [int(d) for d in v.get("shape", [])])
    report(np.array_equal(params["thr"], init["thr"]), f"{label} thr unchanged",
           f"max change {np.abs(params['thr'] - init['thr']).max():.3e}")
    report(not any(k.startswith("thr/") for k in params), f"{label} no state for thr",
           str([k for k in params if k.startswith("thr/")]))
    derr = e2e_common.param_error(params, {k: final[k] for k in ("dead.weight", "dead.bias", "l1.weight")})
    report(derr <= 1e-5, f"{label} parameters", f"worst error {derr:.2e} of PyTorch's")

sys.exit(1 if FAILED else 0)
