#!/usr/bin/python3
"""Models dtcc had not seen, as PyTorch 2's exporter writes them: trained
by PyTorch 2 and by dtcc from the same weights on the same batches.

Each model below (a deformable convolution, diffusers' UNets and VAE, a
DLRM with nn.EmbeddingBag, message passing with index_add, a mixture of
experts, a selective state-space scan, a normalizing flow's det, losses
with label smoothing, a detached target, single ops) is exported with
`torch.onnx.export(..., dynamo=True, optimize=False)` in train() mode,
then trained --steps AdamW steps (lr 1e-3, no weight decay, constant
schedule) by PyTorch and by `dtcc compile --train` on one thread: the
largest relative difference of the losses, or where either side failed.

`--f64 NAME,...` judges torchvision's batch-normalized classifiers (their
dropout and stochastic depth at 0) in float64 instead, where rounding
does not decide: the loss and every parameter's gradient of step 1
(`--export-gradients`, lr 0) against PyTorch's f64 step.

The packages (PyTorch 2, torchvision, diffusers, onnxscript) are installed
with pip into a virtual environment under the benchmarks' cache (or
--venv), never into the system or the test path; this file is also the
child process run there (`pt2_models.py child SPEC.json`).

    /usr/bin/python3 bench/pt2_models.py --dtcc build/bin/dtcc [--models a,b]
    /usr/bin/python3 bench/pt2_models.py --dtcc build/bin/dtcc --f64 resnet18,densenet121
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cpu_compare  # noqa: E402

# Layered on the benchmarks' PyTorch 2 environment (cpu_compare.py's).
REQUIREMENTS = ("onnxscript==0.7.2", "onnx==1.23.2", "torchvision==0.29.2",
                "diffusers==0.42.1")


# ------------------------------------------------------------ the models
# (built in the child, where torch is PyTorch 2)

def models():
    """name: a function returning (module, batches); each batch a tuple of
    the module's inputs."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def batches(make, steps):
        return [make() for _ in range(steps)]

    def deform(steps):
        import torchvision

        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.c1 = nn.Conv2d(3, 8, 3, padding=1)
                s.off = nn.Conv2d(8, 2 * 2 * 9, 3, padding=1)
                s.msk = nn.Conv2d(8, 2 * 9, 3, padding=1)
                s.dc = torchvision.ops.DeformConv2d(8, 16, 3, padding=1)
                s.fc = nn.Linear(16, 10)

            def forward(s, x, y):
                h = F.relu(s.c1(x))
                h = F.relu(s.dc(h, s.off(h) * 0.5, torch.sigmoid(s.msk(h))))
                return F.cross_entropy(s.fc(h.mean((2, 3))), y)
        return M(), batches(lambda: (torch.randn(4, 3, 12, 12),
                                     torch.randint(0, 10, (4,))), steps)

    def unet(steps):
        from diffusers import UNet2DModel

        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.u = UNet2DModel(sample_size=16, in_channels=3, out_channels=3,
                                  layers_per_block=1, block_out_channels=(16, 32),
                                  norm_num_groups=8, attention_head_dim=8,
                                  down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                  up_block_types=("AttnUpBlock2D", "UpBlock2D"))

            def forward(s, x, t, noise):
                return F.mse_loss(s.u(x, t).sample, noise)
        return M(), batches(lambda: (torch.randn(2, 3, 16, 16), torch.randint(0, 1000, (2,)),
                                     torch.randn(2, 3, 16, 16)), steps)

    def unet_cond(steps):
        from diffusers import UNet2DConditionModel

        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.u = UNet2DConditionModel(
                    sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
                    block_out_channels=(16, 32), norm_num_groups=8, cross_attention_dim=12,
                    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), attention_head_dim=4)

            def forward(s, x, t, text, noise):
                return F.mse_loss(s.u(x, t, encoder_hidden_states=text).sample, noise)
        return M(), batches(lambda: (torch.randn(2, 4, 8, 8), torch.randint(0, 1000, (2,)),
                                     torch.randn(2, 5, 12), torch.randn(2, 4, 8, 8)), steps)

    def vae_kl(steps):
        from diffusers import AutoencoderKL

        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.v = AutoencoderKL(
                    in_channels=3, out_channels=3, block_out_channels=(16, 32),
                    down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                    up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
                    layers_per_block=1, latent_channels=4, norm_num_groups=8,
                    sample_size=16)

            def forward(s, x, eps):
                post = s.v.encode(x).latent_dist
                rec = s.v.decode(post.mean + post.std * eps).sample
                return F.mse_loss(rec, x) + 1e-3 * post.kl().mean()
        return M(), batches(lambda: (torch.randn(2, 3, 16, 16), torch.randn(2, 4, 8, 8)), steps)

    def dlrm(steps):
        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.bags = nn.ModuleList([nn.EmbeddingBag(50, 8, mode=m)
                                        for m in ("sum", "mean", "max")])
                s.bot = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
                s.top = nn.Sequential(nn.Linear(8 + 6, 16), nn.ReLU(), nn.Linear(16, 1))

            def forward(s, dense, ids, y):
                d = s.bot(dense)
                f = torch.stack([d] + [b(ids[:, i]) for i, b in enumerate(s.bags)], 1)
                z = torch.bmm(f, f.transpose(1, 2))
                iu = torch.triu_indices(4, 4, 1)
                logit = s.top(torch.cat([d, z[:, iu[0], iu[1]]], 1)).squeeze(1)
                return F.binary_cross_entropy_with_logits(logit, y)
        return M(), batches(lambda: (torch.randn(6, 4), torch.randint(0, 50, (6, 3, 5)),
                                     torch.rand(6).round()), steps)

    def gnn(steps):
        edges = torch.randint(0, 10, (2, 30))

        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.register_buffer("src", edges[0])
                s.register_buffer("dst", edges[1])
                s.l1, s.l2, s.out = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 3)

            def conv(s, h, lin):
                msg = lin(h)[s.src]
                agg = torch.zeros(h.shape[0], msg.shape[1]).index_add(0, s.dst, msg)
                deg = torch.zeros(h.shape[0]).index_add(
                    0, s.dst, torch.ones(s.dst.shape[0])).clamp(min=1)
                return F.relu(agg / deg[:, None] + lin(h))

            def forward(s, x, y):
                return F.cross_entropy(s.out(s.conv(s.conv(x, s.l1), s.l2)), y)
        return M(), batches(lambda: (torch.randn(10, 8), torch.randint(0, 3, (10,))), steps)

    def moe(steps):
        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.gate = nn.Linear(16, 4)
                s.w1 = nn.Parameter(torch.randn(4, 16, 32) * 0.1)
                s.w2 = nn.Parameter(torch.randn(4, 32, 16) * 0.1)
                s.head = nn.Linear(16, 5)

            def forward(s, x, y):
                g = F.softmax(s.gate(x), -1)
                v, i = torch.topk(g, 2, -1)
                dense = torch.zeros_like(g).scatter(-1, i, v / v.sum(-1, keepdim=True))
                h = torch.einsum("te,tf,efh->th", dense, x, s.w1)
                out = torch.einsum("te,th,ehf->tf", dense, F.gelu(h), s.w2)
                aux = (g.mean(0) * dense.gt(0).float().mean(0)).sum() * 4
                return F.cross_entropy(s.head(out + x), y) + 0.01 * aux
        return M(), batches(lambda: (torch.randn(12, 16), torch.randint(0, 5, (12,))), steps)

    def ssm(steps):
        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.inp, s.dt = nn.Linear(8, 32), nn.Linear(16, 16)
                s.A = nn.Parameter(-torch.rand(16))
                s.B, s.C, s.out = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 8)
                s.conv = nn.Conv1d(16, 16, 4, groups=16, padding=3)

            def forward(s, x, y):
                u, z = s.inp(x).chunk(2, -1)
                u = F.silu(s.conv(u.transpose(1, 2))[..., :x.shape[1]].transpose(1, 2))
                dt, b, c = F.softplus(s.dt(u)), s.B(u), s.C(u)
                h, ys = torch.zeros(x.shape[0], 16), []
                for t in range(x.shape[1]):
                    h = torch.exp(dt[:, t] * s.A) * h + dt[:, t] * b[:, t] * u[:, t]
                    ys.append(h * c[:, t])
                yv = torch.stack(ys, 1) * F.silu(z)
                yv = torch.cumsum(yv, 1) / torch.arange(1, x.shape[1] + 1)[None, :, None]
                return F.mse_loss(s.out(F.rms_norm(yv, (16,))), y)
        return M(), batches(lambda: (torch.randn(3, 6, 8), torch.randn(3, 6, 8)), steps)

    def flow_det(steps):
        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.l = nn.Linear(9, 9)

            def forward(s, x, y):
                a = s.l(x).reshape(-1, 3, 3) + 3 * torch.eye(3)
                return (torch.linalg.det(a) - y).pow(2).mean()
        return M(), batches(lambda: (torch.randn(4, 9), torch.randn(4)), steps)

    def batch_norm(steps):
        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.inp, s.bn, s.out = nn.Linear(10, 16), nn.BatchNorm1d(16), nn.Linear(16, 6)

            def forward(s, x, y):
                h = s.inp(x)
                h = h + s.bn(h.transpose(1, 2)).transpose(1, 2)
                return F.cross_entropy(s.out(h.mean(1)), y)
        return M(), batches(lambda: (torch.randn(4, 9, 10), torch.randint(0, 6, (4,))), steps)

    def label_smoothing(steps):
        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.c = nn.Conv2d(3, 5, 1)
                s.l = nn.Linear(8, 12)

            def forward(s, x, y, v, t):
                w = torch.linspace(0.5, 1.5, 5)
                h = s.c(x)
                per_pixel = F.cross_entropy(h, y, weight=w, ignore_index=1, label_smoothing=0.3)
                summed = F.cross_entropy(h, y, label_smoothing=0.2, reduction="sum")
                rows = F.cross_entropy(s.l(v), t, label_smoothing=0.1)
                return per_pixel + 0.01 * summed + rows
        return M(), batches(lambda: (torch.randn(2, 3, 4, 4), torch.randint(0, 5, (2, 4, 4)),
                                     torch.randn(6, 8), torch.randint(0, 12, (6,))), steps)

    def detached_target(steps):
        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.l = nn.Linear(6, 12)

            def forward(s, x, y):
                h = s.l(x)
                return F.poisson_nll_loss(h, h.detach().abs()) + F.mse_loss(h, y)
        return M(), batches(lambda: (torch.randn(5, 6), torch.randn(5, 12)), steps)

    def masked_rows(steps):
        # Boolean indexing (NonZero: rows the mask decides) read by a mean,
        # a max and a BCE over the masked positions (PyTorch 2.15's exporter
        # fails on a cross-entropy over them).
        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.l = nn.Linear(6, 8)
                s.o = nn.Linear(8, 1)

            def forward(s, x, m, y):
                h = torch.tanh(s.l(x))
                rows = h[m]
                p = s.o(rows).squeeze(-1)
                return ((rows ** 2).mean() + rows.amax(0).sum() * 0.1
                        + F.binary_cross_entropy_with_logits(p, y[m]))
        return M(), batches(lambda: (torch.randn(4, 7, 6), torch.rand(4, 7) < 0.4,
                                     (torch.rand(4, 7) < 0.5).float()), steps)

    def masked_index_add(steps):
        # Rows picked by torch.nonzero, transformed and added back in place
        # (index_add: ScatterND through NonZero's rows).
        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.l = nn.Linear(8, 8)
                s.r = nn.Linear(8, 8)

            def forward(s, x, m):
                z = s.l(x)
                idx = torch.nonzero(m).squeeze(1)
                out = z.index_add(0, idx, torch.tanh(s.r(z[idx])))
                return (out ** 2).mean()
        return M(), batches(lambda: (torch.randn(9, 8), torch.rand(9) < 0.5), steps)

    # Single ops between two layers (each exported by PyTorch 2.15; the ones
    # its exporter fails on are left out: erfinv, lgamma, digamma, hypot,
    # cumprod, kthvalue, median, cummax, pdist, distributions' log_prob).
    single = {
        "activations": lambda h, x: (
            F.softplus(h, beta=2, threshold=5) + F.gelu(h, approximate="tanh") + F.mish(h)
            + F.hardshrink(h, 0.3) + F.softshrink(h, 0.3) + F.tanhshrink(h) + F.celu(h, 0.7)
            + F.selu(h) + F.elu(h, 0.5) + F.logsigmoid(h) + F.softsign(h)
            + F.hardtanh(h, -0.5, 0.5) + F.relu6(h) + F.leaky_relu(h, 0.1) + F.silu(h)
            + F.hardswish(h)),
        "elementwise": lambda h, x: (
            torch.atan2(h, x.sum(1, keepdim=True) + 2) + torch.log1p(h.abs())
            + torch.expm1(h * 0.1) + torch.sinh(h * 0.1) + torch.cosh(h * 0.1) + torch.asinh(h)
            + torch.atan(h) + torch.frac(h) + torch.xlogy(h.abs(), h.abs() + 1)
            + h.masked_fill(h > 0.5, -1.0) + torch.where(h > 0, h, 0.1 * h)
            + torch.clamp(h, min=x[:, :1], max=x[:, 1:2] + 2)),
        "rearrangements": lambda h, x: (
            torch.roll(h, 2, 1) + torch.flip(h, [1]) + torch.logcumsumexp(h, 1)
            + F.pad(torch.diff(h, dim=1), (1, 0))
            + torch.tril(h.reshape(-1, 3, 4), diagonal=1).reshape(h.shape)
            + torch.repeat_interleave(h[:, :6], 2, dim=1)
            + torch.kron(h[:, :2], torch.ones(1, 6))
            + h.index_put((torch.tensor([0, 2]),), torch.ones(2, 12), accumulate=True)),
        "reductions": lambda h, x: (
            torch.logsumexp(h, 1, keepdim=True) + torch.std(h, 1, keepdim=True)
            + torch.var_mean(h, 1, keepdim=True)[0] + torch.norm(h, p=3, dim=1, keepdim=True)
            + torch.amax(h, 1, keepdim=True) + torch.nanmean(h, 1, keepdim=True)
            + torch.quantile(h, 0.3, dim=1, keepdim=True)),
        "sorting": lambda h, x: (
            torch.sort(h, 1)[0] + h.gather(1, torch.argsort(h, 1, descending=True))),
        "losses": lambda h, x: (
            F.cosine_embedding_loss(h, h.flip(0), torch.tensor([1, -1, 1, -1, 1]))
            + F.multilabel_soft_margin_loss(h, (x[:, :1] > 0).float().expand(-1, 12))
            + F.soft_margin_loss(h, torch.sign(h.detach()))
            + F.hinge_embedding_loss(h, torch.sign(h.detach() + 0.1))
            + F.multi_margin_loss(h, torch.tensor([0, 3, 5, 7, 11]))
            + F.binary_cross_entropy(torch.sigmoid(h), torch.sigmoid(x[:, :1]).expand(-1, 12))),
    }

    def ops(kind):
        def make(steps):
            class M(nn.Module):
                def __init__(s):
                    super().__init__()
                    s.l = nn.Linear(6, 12)

                def forward(s, x, y):
                    return F.mse_loss(single[kind](s.l(x), x).expand(5, 12), y)
            return M(), batches(lambda: (torch.randn(5, 6), torch.randn(5, 12)), steps)
        return make

    out = {"deform-conv": deform, "unet": unet, "unet-cond": unet_cond, "vae-kl": vae_kl,
           "dlrm": dlrm, "gnn": gnn, "moe": moe, "ssm": ssm, "det": flow_det,
           "batch-norm": batch_norm, "label-smoothing": label_smoothing,
           "detached-target": detached_target, "masked-rows": masked_rows,
           "masked-index-add": masked_index_add}
    out.update({"ops-" + k: ops(k) for k in single})
    return out


MODEL_NAMES = ("deform-conv", "unet", "unet-cond", "vae-kl", "dlrm", "gnn", "moe", "ssm",
               "det", "batch-norm", "label-smoothing", "detached-target", "masked-rows",
               "masked-index-add", "ops-activations",
               "ops-elementwise", "ops-rearrangements", "ops-reductions", "ops-sorting",
               "ops-losses")


# ------------------------------------------------------------ the child

def export(model, sample, path):
    import copy
    import torch
    torch.onnx.export(copy.deepcopy(model), sample, path, dynamo=True, optimize=False,
                      input_names=[f"in{i}" for i in range(len(sample))],
                      output_names=["loss"])


def write_batches(batches, root):
    from onnx import numpy_helper
    for i, b in enumerate(batches):
        d = os.path.join(root, f"{i:05d}")
        os.makedirs(d, exist_ok=True)
        for j, t in enumerate(b):
            with open(os.path.join(d, f"in{j}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(t.numpy(), f"in{j}").SerializeToString())


def child(spec_path):
    import warnings
    import numpy as np
    import torch
    warnings.filterwarnings("ignore")
    spec = json.load(open(spec_path))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    work, out = spec["work"], {}
    if spec.get("f64"):
        import torch.nn as nn
        import torch.nn.functional as F
        import torchvision
        name = spec["name"]
        kw = {"num_classes": 10}
        if name.startswith(("mobilenet", "efficientnet", "mnasnet")):
            kw["dropout"] = 0.0
        if name.startswith(("efficientnet", "convnext")):
            kw["stochastic_depth_prob"] = 0.0

        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.m = getattr(torchvision.models, name)(**kw)

            def forward(s, x, y):
                return F.cross_entropy(s.m(x), y)
        model = M().double().train()
        batch = (torch.randn(4, 3, 64, 64, dtype=torch.float64), torch.randint(0, 10, (4,)))
        try:
            export(model, batch, os.path.join(work, "model.onnx"))
        except Exception as e:
            out["error"] = f"PyTorch's export: {type(e).__name__}"
            json.dump(out, open(os.path.join(work, "torch.json"), "w"))
            return
        write_batches([batch], os.path.join(work, "batches"))
        loss = model(*batch)
        loss.backward()
        out["loss"] = loss.item()
        np.savez(os.path.join(work, "grads.npz"),
                 **{n: p.grad.numpy() for n, p in model.named_parameters()})
        json.dump(out, open(os.path.join(work, "torch.json"), "w"))
        return
    model, batches = models()[spec["name"]](spec["steps"])
    model.train()
    try:
        export(model, batches[0], os.path.join(work, "model.onnx"))
    except Exception as e:
        out["error"] = f"PyTorch's export: {type(e).__name__}"
        json.dump(out, open(os.path.join(work, "torch.json"), "w"))
        return
    write_batches(batches, os.path.join(work, "batches"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    losses = []
    for b in batches:
        opt.zero_grad()
        loss = model(*b)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out["losses"] = losses
    json.dump(out, open(os.path.join(work, "torch.json"), "w"))


# ------------------------------------------------------------ the parent

def read_pb(path):
    import numpy as np
    import onnx
    from onnx import numpy_helper
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return np.asarray(numpy_helper.to_array(t))


def dtcc_run(args, work, flags, steps):
    """Compiles work/model.onnx for training with `flags` and runs `steps`
    steps of its batches, dumping the outputs: the dump directory, or an
    error string."""
    exe = os.path.join(work, "train")
    proc = subprocess.run([args.dtcc, "compile", os.path.join(work, "model.onnx"), "--train",
                           "-o", exe] + flags, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        return "dtcc compile: " + " | ".join(lines[:2])[:240]
    dump = os.path.join(work, "dump")
    proc = subprocess.run([exe, "--batches", os.path.join(work, "batches"), "--steps",
                           str(steps), "--dump-outputs", dump], capture_output=True,
                          text=True, env=cpu_compare.thread_env(1))
    if proc.returncode != 0:
        return "dtcc run: " + proc.stderr.strip()[-240:]
    return dump


def run_one(args, python, root, name, f64):
    work = os.path.join(root, name)
    os.makedirs(work, exist_ok=True)
    spec = {"name": name, "work": work, "steps": args.steps, "f64": f64}
    path = os.path.join(work, "spec.json")
    json.dump(spec, open(path, "w"))
    proc = subprocess.run([python, os.path.abspath(__file__), "child", path],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return f"PyTorch failed: {proc.stderr.strip()[-240:]}"
    ref = json.load(open(os.path.join(work, "torch.json")))
    if "error" in ref:
        return ref["error"]
    if f64:
        import numpy as np
        dump = dtcc_run(args, work, ["--optimizer", "sgd", "--lr", "0", "--export-gradients"], 1)
        if not os.path.isdir(dump):
            return dump
        loss = float(read_pb(os.path.join(dump, "step_1", "loss.pb")))
        grads = np.load(os.path.join(work, "grads.npz"))
        floor = 1e-6 * max(float(np.abs(grads[n]).max()) for n in grads.files)
        worst, which = 0.0, ""
        for n in grads.files:
            g = read_pb(os.path.join(dump, "step_1", "grad_" + n.replace("/", "_") + ".pb"))
            err = float(np.abs(g - grads[n]).max()) / max(float(np.abs(grads[n]).max()), floor)
            if err > worst:
                worst, which = err, n
        return (f"loss {abs(loss - ref['loss']) / abs(ref['loss']):.1e}, "
                f"gradients {worst:.1e} ({which})")
    dump = dtcc_run(args, work, ["--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0",
                                 "--schedule", "constant", "--warmup", "0"], args.steps)
    if not os.path.isdir(dump):
        return dump
    got = [float(read_pb(os.path.join(dump, f"step_{s}", "loss.pb")))
           for s in range(1, args.steps + 1)]
    worst = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(got, ref["losses"]))
    return f"{worst:.2e} (first loss PyTorch {ref['losses'][0]:.7f}, dtcc {got[0]:.7f})"


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "child":
        return child(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--models", default=",".join(MODEL_NAMES))
    ap.add_argument("--f64", default="", help="torchvision classifiers to judge in f64 "
                    "instead (e.g. resnet18,densenet121)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--venv", default=None,
                    help="an environment with PyTorch 2 and " + ", ".join(REQUIREMENTS)
                    + " (default: one made under the benchmarks' cache)")
    args = ap.parse_args()
    if args.venv:
        python = os.path.join(args.venv, "bin", "python")
    else:
        python = cpu_compare.ensure_venv(
            os.path.join(cpu_compare.cache_dir(), "pt2-models-venv"), REQUIREMENTS,
            base=cpu_compare.default_venv(), note="PyTorch 2 from the benchmarks' environment")
    names = [(n, True) for n in args.f64.split(",") if n] or \
        [(n, False) for n in args.models.split(",") if n]
    unknown = [n for n, f64 in names if not f64 and n not in MODEL_NAMES]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(MODEL_NAMES)}")
    root = tempfile.mkdtemp(prefix="dtcc-pt2-")
    try:
        print("| model | " + ("f64 step 1 against PyTorch 2" if args.f64 else
                             f"largest relative loss difference, {args.steps} AdamW steps") + " |")
        print("|---|---|")
        for name, f64 in names:
            print(f"| {name} | {run_one(args, python, root, name, f64)} |", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
