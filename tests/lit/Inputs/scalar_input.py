"""A scalar (0-D) graph input under data and pipeline parallelism, against
PyTorch 1.13 and one device: a classifier whose logits are divided by a
temperature fed as a 0-D input (a different value at every step). A scalar
has no batch dimension, so every rank (and every micro-batch) takes the
whole value. Trained 6 AdamW steps (tests/e2e/torch_parity.py's recipe) in
PyTorch, on one device and under each plan given; the losses must agree.

Usage: scalar_input.py WORKDIR [PLAN ...] (torch_parity's plan names, or
"dp2-mb2": dp=2 with 2 accumulated micro-batches). Prints "ok <plan>" or
"FAIL <plan>: <why>"; exits non-zero if any failed.
"""
import os
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
from torch_parity import Settings, recipe_flags, train_dtcc, train_torch  # noqa: E402

WORK = sys.argv[1]
PLANS = dict(torch_parity.PLANS, **{"dp2-mb2": ("dp=2 micro-batches=2", 2,
                                                 ["--mesh", "dp=2", "--micro-batches", "2"])})
STEPS = 6
os.makedirs(WORK, exist_ok=True)


class Tempered(nn.Module):
    def __init__(self, vocab=32, d=8, classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, classes)

    def forward(self, ids, temp, labels):
        logits = self.head(self.emb(ids).mean(1))
        return F.cross_entropy(logits / temp, labels)


def batch(rng, n, step):
    return {"ids": rng.integers(0, 32, (n, 8)).astype(np.int64),
            "temp": np.array(0.5 + 0.25 * step, dtype=np.float32),
            "labels": rng.integers(0, 3, n).astype(np.int64)}


torch.manual_seed(0)
torch.set_num_threads(1)
s = Settings(batch=8, lr=1e-2)
model = Tempered()
names = ["ids", "temp", "labels"]
onnx_path = os.path.join(WORK, "tempered.onnx")
rng = np.random.default_rng(1)
batches = [batch(rng, s.batch, k) for k in range(STEPS)]
torch.onnx.export(model, tuple(torch.from_numpy(batches[0][n]) for n in names), onnx_path,
                  input_names=names, output_names=["loss"], opset_version=17,
                  do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
# With 2 accumulated micro-batches the program's inputs are one of them: the
# same model exported at half the batch (the step's loss and gradients, the
# means over equal halves, are the whole batch's).
half_path = os.path.join(WORK, "tempered_half.onnx")
torch.onnx.export(model, tuple(torch.from_numpy(batches[0][n][:s.batch // 2] if batches[0][n].ndim
                                                else batches[0][n]) for n in names), half_path,
                  input_names=names, output_names=["loss"], opset_version=17,
                  do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
root = e2e_common.write_batches(batches, os.path.join(WORK, "batches"))
want, _ = train_torch(model, names, batches, s, STEPS, torch.float32)

failed = []
one = None
for plan in [""] + sys.argv[2:]:
    label, ranks, flags = PLANS[plan] if plan else ("1dev", 1, [])
    try:
        got, _, _ = train_dtcc("dtcc", half_path if "--micro-batches" in flags else onnx_path, root, STEPS, recipe_flags(s) + flags,
                               os.path.join(WORK, plan or "one"), ranks)
    except RuntimeError as e:
        failed.append(label)
        print(f"FAIL {label}: {e}")
        continue
    err, at = e2e_common.relative_error(got, want)
    one = got if one is None else one
    err1, _ = e2e_common.relative_error(got, one)
    if err > 1e-5 or err1 > 1e-5:
        failed.append(label)
        print(f"FAIL {label}: worst relative error {err:.2e} at step {at} "
              f"against PyTorch, {err1:.2e} against one device")
    else:
        print(f"ok {label}")
sys.exit(1 if failed else 0)
