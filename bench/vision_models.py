#!/usr/bin/python3
"""Models dtcc has not seen: torchvision's and timm's vision models, trained.

Each model of the tables below is built by torchvision or timm (PyPI;
their Python code, installed without their pinned PyTorch, runs on
Debian's PyTorch 1.13) with 10 classes, every dropout, stochastic depth
and drop path at probability 0 (so that both systems compute the same
step), exported by PyTorch 1.13 in training mode (opset 17: batch norms
update their running statistics) with a cross-entropy loss (per pixel for
segmentation), in f32 and in f64, and compiled with `dtcc compile
--train`. Both systems then train the f32 export from the same weights on
the same batches with AdamW (lr 1e-3, no weight decay, constant schedule)
at the same thread count: step times and losses, reported.

Judged in f64, where rounding does not decide: dtcc's step 1 of the f64
export (--export-gradients, lr 0) against PyTorch's f64 step, the loss and
every parameter's gradient within --rtol; with --mesh, three f64 SGD steps
on each mesh against dtcc's one-device steps. (In f32 these batch-
normalized networks are ill-conditioned: PyTorch's own f32 gradients are
percents from its f64 ones, and Adam's first step amplifies that.)

With --cuda-kit DIR each model also becomes two cases of
tests/e2e/cuda_checks.py (`--check DIR` on a GPU machine, after
scripts/gpu_kit.sh): the f32 and the f64 export compiled for the CPU and
for CUDA with SGD (lr 1e-2), and the CPU's losses of the steps, which the
GPU's must equal within CUDA_RTOL and CUDA_RTOL_F64.

The packages are installed with pip into a virtual environment under a
cache directory that also sees Debian's packages, created on first use;
never into the system or the test path.

This file is also the child process (`vision_models.py child SPEC.json`),
run in that environment once per model.
"""
import argparse
import atexit
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cpu_compare  # noqa: E402
import hf_models  # noqa: E402

sys.path.insert(0, os.path.join(hf_models.REPO, "tests", "e2e"))
import cuda_checks  # noqa: E402
import e2e_common  # noqa: E402

# torchvision 0.15 is the oldest on PyPI for Python 3.11; its models' Python
# code runs on PyTorch 1.13 (its compiled operators, unused here, do not
# load). timm (PyTorch Image Models) 0.9 runs on it too; both are installed
# without their dependencies (PyTorch 2), the rest with theirs.
REQUIREMENTS = ("torchvision==0.15.2", "timm==0.9.16", "pillow", "pyyaml",
                "safetensors", "huggingface_hub")
NO_DEPS = ("torchvision==0.15.2", "timm==0.9.16")
# --exporter dynamo: PyTorch 2's exporter on the benchmarks' PyTorch 2
# environment (cpu_compare.py's), with the torchvision and timm of its time.
DYNAMO_REQUIREMENTS = ("onnxscript==0.7.2", "onnx==1.23.2", "torchvision==0.29.2",
                       "timm==1.0.31", "pillow", "pyyaml", "safetensors",
                       "huggingface_hub")
CLASSES = 10
# Meshes train the f64 export this many SGD steps of this learning rate
# (SGD moves a weight whose gradient is zero but for rounding by as little;
# Adam by about lr).
SGD_STEPS, SGD_LR = 3, 1e-2
# dtcc compile's flags for those steps (with --optimizer sgd).
SGD_SCHEDULE = ["--lr", str(SGD_LR), "--weight-decay", "0", "--schedule", "constant",
                "--warmup", "0"]
# The GPU's f32 losses against the CPU's (--cuda-kit): cuda_checks.py's
# tolerance for convolutional nets (cuDNN's algorithms add in other orders).
CUDA_RTOL = 1e-4
# In f64, where the batch-normalized nets' conditioning does not decide
# (MNASNet's and ShuffleNet's f32 SGD steps drift apart by percents on
# the two backends, as PyTorch's own f32 steps drift from its f64 ones).
CUDA_RTOL_F64 = 1e-9

# name: (torchvision.models function or class (segmentation.* and video.*
# in those modules), its arguments, the image side or the input's shape
# without the batch). Segmentation models train a cross-entropy per pixel
# on their "out" (their backbones built without pretrained weights).
# The full-size models at a small image (AlexNet and VGG at 224 x 224:
# PyTorch 1.13 exports their adaptive average pools only where the output
# size divides the input's); the transformers (ViT, MaxViT) in a small
# configuration of their own classes, whose defaults need 224 x 224. Not
# here: swin_v2_t (PyTorch 1.13 cannot export its `aten::zero`) and s3d
# (its last pool's 2 x 7 x 7 window needs 224 x 224 frames).
MODELS = {
    "resnet18": ("resnet18", {}, 64),
    "resnet50": ("resnet50", {}, 64),
    "resnext50_32x4d": ("resnext50_32x4d", {}, 64),
    "wide_resnet50_2": ("wide_resnet50_2", {}, 32),
    "mobilenet_v2": ("mobilenet_v2", {}, 64),
    "mobilenet_v3_small": ("mobilenet_v3_small", {}, 64),
    "mobilenet_v3_large": ("mobilenet_v3_large", {}, 64),
    "efficientnet_b0": ("efficientnet_b0", {}, 64),
    "efficientnet_v2_s": ("efficientnet_v2_s", {}, 64),
    "mnasnet0_5": ("mnasnet0_5", {}, 64),
    "shufflenet_v2_x0_5": ("shufflenet_v2_x0_5", {}, 64),
    "squeezenet1_1": ("squeezenet1_1", {}, 64),
    "regnet_x_400mf": ("regnet_x_400mf", {}, 64),
    "regnet_y_400mf": ("regnet_y_400mf", {}, 64),
    "densenet121": ("densenet121", {}, 64),
    "googlenet": ("googlenet", dict(aux_logits=False, init_weights=True), 64),
    "inception_v3": ("inception_v3", dict(aux_logits=False, init_weights=True), 80),
    "alexnet": ("alexnet", {}, 224),
    "vgg11_bn": ("vgg11_bn", {}, 224),
    "convnext_tiny": ("convnext_tiny", {}, 64),
    "swin_t": ("swin_t", {}, 64),
    "vit": ("VisionTransformer", dict(image_size=32, patch_size=8, num_layers=2,
                                      num_heads=4, hidden_dim=64, mlp_dim=128), 32),
    "maxvit": ("MaxVit", dict(input_size=(64, 64), stem_channels=16,
                              partition_size=4, block_channels=[32, 64],
                              block_layers=[1, 1], head_dim=16,
                              stochastic_depth_prob=0.0), 64),
    "fcn_resnet50": ("segmentation.fcn_resnet50", dict(weights_backbone=None), 64),
    "deeplabv3_mobilenet_v3_large": ("segmentation.deeplabv3_mobilenet_v3_large",
                                     dict(weights_backbone=None), 64),
    "lraspp_mobilenet_v3_large": ("segmentation.lraspp_mobilenet_v3_large",
                                  dict(weights_backbone=None), 64),
    "r3d_18": ("video.r3d_18", {}, (3, 8, 32, 32)),
    "mc3_18": ("video.mc3_18", {}, (3, 8, 32, 32)),
    "r2plus1d_18": ("video.r2plus1d_18", {}, (3, 8, 32, 32)),
    "swin3d_t": ("video.swin3d_t", {}, (3, 8, 64, 64)),
}

# timm's models ("timm:<name>"), at 64 x 64 (img_size where the model's
# position tables or windows are sized by it). Not here, as PyTorch 1.13
# cannot export them: volo_d1_224 (`aten::col2im`), convmixer_768_32
# (`aten::_convolution_mode`), convit_tiny (in f64: its float constants),
# halonet26t (an assertion of its own when traced).
_SMALL = dict(img_size=64)
TIMM = {
    "mixer_s16_224": _SMALL, "resmlp_12_224": _SMALL, "gmlp_ti16_224": _SMALL,
    "vit_small_patch16_224": _SMALL, "deit_tiny_distilled_patch16_224": _SMALL,
    "cait_xxs24_224": _SMALL, "xcit_nano_12_p16_224": _SMALL,
    "pit_ti_224": _SMALL, "tnt_s_patch16_224": _SMALL, "levit_128s": _SMALL,
    "eva02_tiny_patch14_224": _SMALL, "coatnet_nano_rw_224": _SMALL,
    "visformer_tiny": _SMALL, "pvt_v2_b0": {},
    "edgenext_xx_small": {}, "mobilevitv2_050": {}, "efficientvit_b0": {},
    "fastvit_t8": {}, "sequencer2d_s": {}, "nfnet_l0": {}, "regnetz_b16": {},
    "ghostnet_100": {}, "hrnet_w18_small": {}, "dla34": {}, "dpn68": {},
    "res2net50_26w_4s": {}, "cspresnet50": {}, "rexnet_100": {},
    "repvgg_a0": {}, "inception_next_tiny": {},
    # Added in the thirty-eighth session.
    "convnext_atto": {}, "deit3_small_patch16_224": _SMALL,
    "nest_tiny": _SMALL, "coat_lite_tiny": _SMALL, "efficientformerv2_s0": _SMALL,
    "resnest14d": {}, "skresnet18": {}, "selecsls42b": {},
    "ese_vovnet19b_dw": {}, "mobileone_s0": {}, "tinynet_e": {},
    "mixnet_s": {}, "lcnet_050": {}, "efficientnet_b0": {}, "davit_tiny": {},
    "hardcorenas_a": {}, "semnasnet_075": {}, "mvitv2_tiny": _SMALL,
}
MODELS.update({f"timm-{n}": (f"timm:{n}", kw, 64) for n, kw in TIMM.items()})


def input_shape(name):
    """A model's input without the batch: (3, side, side) for an image."""
    shape = MODELS[name][2]
    return (3, shape, shape) if isinstance(shape, int) else tuple(shape)


# ------------------------------------------------------------ the child

def child(spec_path):
    """Builds the model, exports it, writes the batches and trains it in
    PyTorch; writes the results beside the spec."""
    warnings.filterwarnings("ignore")  # torchvision's image extension, unused
    import torch
    import torchvision
    import numpy as np
    import onnx
    from onnx import numpy_helper
    spec = json.load(open(spec_path))
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    fn, kwargs, _ = MODELS[spec["name"]]
    shape = input_shape(spec["name"])
    if fn.startswith("timm:"):
        import timm
        # drop_rate: some (GhostNet) drop out with F.dropout, not a module.
        model = timm.create_model(fn[len("timm:"):], pretrained=False,
                                  num_classes=CLASSES, drop_rate=0.0, **kwargs)
    else:
        build = torchvision.models
        for part in fn.split("."):
            build = getattr(build, part)
        model = build(num_classes=CLASSES, **kwargs)
    # A label per pixel for segmentation, per sample otherwise.
    labels = shape[1:] if fn.startswith("segmentation.") else ()
    for m in model.modules():
        # Dropout, torchvision's StochasticDepth and timm's DropPath at 0: both
        # systems' steps the same.
        if isinstance(m, torch.nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
        if type(m).__name__ == "DropPath":
            m.drop_prob = 0.0

    class Loss(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x, y):
            out = self.m(x)
            if isinstance(out, dict):  # segmentation models
                out = out["out"]
            return torch.nn.functional.cross_entropy(out, y)

    wrapped = Loss(model).train()
    dynamo = spec.get("exporter") == "dynamo"
    if dynamo:
        # PyTorch 2's exporter writes batch norms in inference mode even from
        # a module in train() (dtcc warns): the reference computes what the
        # graph says, the running statistics fixed.
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.eval()
    initial = copy.deepcopy(wrapped)
    work, steps = spec["work"], spec["steps"]
    out = {"params": sum(p.numel() for p in model.parameters())}
    batches = []
    for i in range(steps):
        g = torch.Generator().manual_seed(100 + i)
        batches.append((torch.randn((spec["batch"],) + shape, generator=g),
                        torch.randint(0, CLASSES, (spec["batch"],) + labels,
                                      generator=g)))

    def export(module, dtype, sub):
        """The model in `dtype` as sub/model.onnx, with sub/batches/ (the
        batches in `dtype`; f64: the first SGD_STEPS)."""
        path = os.path.join(work, sub, "model.onnx")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        use = batches if dtype == torch.float32 else batches[:SGD_STEPS]
        if dynamo:
            torch.onnx.export(copy.deepcopy(module),
                              (use[0][0].to(dtype), use[0][1]), path,
                              dynamo=True, optimize=False,
                              input_names=["x", "y"], output_names=["loss"])
        else:
            torch.onnx.export(module, (use[0][0].to(dtype), use[0][1]), path,
                              input_names=["x", "y"], output_names=["loss"],
                              opset_version=17, do_constant_folding=False,
                              training=torch.onnx.TrainingMode.TRAINING)
        for i, (x, y) in enumerate(use):
            d = os.path.join(work, sub, "batches", f"{i:05d}")
            os.makedirs(d, exist_ok=True)
            for name, t in (("x", x.to(dtype)), ("y", y)):
                with open(os.path.join(d, name + ".pb"), "wb") as f:
                    f.write(numpy_helper.from_array(t.numpy(), name).SerializeToString())
        return path

    try:
        path = export(wrapped, torch.float32, "")
        export(copy.deepcopy(initial).double(), torch.float64, "f64")
    except Exception as e:  # the exporter's failure, not dtcc's
        out["error"] = f"PyTorch's export: {type(e).__name__}: {e}"[:300]
        json.dump(out, open(os.path.join(work, "torch.json"), "w"))
        return
    out["nodes"] = len(onnx.load(path, load_external_data=False).graph.node)

    def train(dtype):
        w = copy.deepcopy(initial).to(dtype)
        opt = torch.optim.AdamW(w.parameters(), lr=1e-3, weight_decay=0.0)
        losses, times = [], []
        for x, y in batches:
            start = time.perf_counter()
            opt.zero_grad()
            loss = w(x.to(dtype), y)
            loss.backward()
            opt.step()
            times.append((time.perf_counter() - start) * 1e3)
            losses.append(loss.item())
        return losses, times

    # SGD_STEPS of SGD in f64, what meshes are judged against; step 1's
    # loss and every parameter's gradient are the one-device reference.
    w = copy.deepcopy(initial).double()
    opt = torch.optim.SGD(w.parameters(), lr=SGD_LR)
    sgd64 = []
    for x, y in batches[:SGD_STEPS]:
        opt.zero_grad()
        step = w(x.double(), y)
        step.backward()
        if not sgd64:
            np.savez(os.path.join(work, "f64", "grads.npz"),
                     **{n: p.grad.numpy() for n, p in w.named_parameters()
                        if p.grad is not None})
        opt.step()
        sgd64.append(step.item())
    losses, times = train(torch.float32)
    out.update(losses=losses, times=times, loss64=sgd64[0],
               losses64=train(torch.float64)[0], sgd64=sgd64)
    json.dump(out, open(os.path.join(work, "torch.json"), "w"))


# ------------------------------------------------------------ the parent

def rel(a, b):
    return abs(a - b) / abs(b) if b else abs(a - b)


def compile_f64(args, sub, exe, flags):
    """`dtcc compile sub/model.onnx --train --optimizer sgd <flags> -o exe`
    (the f64 export); None, or {"error": ...} with its first lines."""
    proc = subprocess.run(
        [args.dtcc, "compile", os.path.join(sub, "model.onnx"), "--train",
         "--optimizer", "sgd", "-o", exe] + flags + args.dtcc_flag,
        capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    return {"error": "dtcc compile (f64): " + " / ".join(lines[:3])[:300]}


def f64_check(args, work):
    """dtcc's step 1 on the f64 export (compiled with --export-gradients and
    a learning rate of 0; one step with --dump-outputs) against PyTorch's in
    f64: {"loss": relative difference, "grad": the worst parameter's max
    |g - g64| / max(max |g64|, 1e-6 x the largest gradient's), "name": that
    parameter}, or {"error": ...}."""
    sub = os.path.join(work, "f64")
    exe, dump = os.path.join(sub, "train"), os.path.join(sub, "dump")
    failed = compile_f64(args, sub, exe, ["--lr", "0", "--export-gradients"])
    if failed:
        return failed
    try:  # the program and the dump hold the f64 weights: GBs for large models
        proc = subprocess.run([exe, "--batches", os.path.join(sub, "batches"),
                               "--steps", "1", "--dump-outputs", dump],
                              capture_output=True, text=True,
                              env=cpu_compare.thread_env(args.threads))
        if proc.returncode != 0:
            return {"error": "dtcc run (f64): " + proc.stderr.strip()[-300:]}
        loss = float(e2e_common.read_pb(os.path.join(dump, "step_1", "loss.pb")))
        reference = json.load(open(os.path.join(work, "torch.json")))["loss64"]
        return compare_f64(dump, loss, reference, os.path.join(sub, "grads.npz"))
    finally:
        os.remove(exe)
        shutil.rmtree(dump, ignore_errors=True)


def compare_f64(dump, loss, reference, grads_path):
    """dtcc's f64 step 1 (`loss`, the gradients in `dump`) against PyTorch's
    (`reference`, the gradients in `grads_path`): f64_check's result."""
    import numpy as np
    worst = {"loss": rel(loss, reference), "grad": 0.0, "name": ""}
    grads = np.load(grads_path)
    # A gradient a million times below the model's largest is zero at its
    # scale: with batch norms, many are zero but for rounding (a norm's bias
    # whose output feeds another norm through a convolution).
    floor = 1e-6 * max(float(np.abs(grads[n]).max()) for n in grads.files)
    for name in grads.files:
        path = os.path.join(dump, "step_1", "grad_" + name.replace("/", "_") + ".pb")
        if not os.path.exists(path):
            return {"error": f"dtcc wrote no gradient for {name}"}
        ref = grads[name]
        err = e2e_common.as_error(float(np.abs(e2e_common.read_pb(path) - ref).max()) / max(
            float(np.abs(ref).max()), floor, 1e-300))
        if err > worst["grad"]:
            worst.update(grad=err, name=name)
    return worst


def sgd_losses(args, work, mesh=None):
    """The f64 export compiled with SGD (on `mesh`: "dp=2", "tp=2 --zero 3",
    ...; None: one device), SGD_STEPS steps (on a mesh under mpirun, one
    thread a rank): the losses, or {"error": ...}."""
    sub = os.path.join(work, "f64")
    tag = "sgd" if mesh is None else (
        mesh.replace(" ", "").replace("=", "").replace(",", "-").replace("--", "-"))
    exe, dump = os.path.join(sub, "train-" + tag), os.path.join(sub, "dump-" + tag)
    failed = compile_f64(args, sub, exe,
                         SGD_SCHEDULE + ([] if mesh is None else ["--mesh"] + mesh.split()))
    if failed:
        return failed
    ranks = 1 if mesh is None else hf_models.mesh_ranks(mesh)
    try:
        proc = e2e_common.launch(exe, ranks, ["--batches", os.path.join(sub, "batches"),
                                              "--steps", str(SGD_STEPS),
                                              "--dump-outputs", dump], timeout=1200)
        if proc.returncode != 0:
            return {"error": "dtcc run: " + proc.stderr.strip()[-300:]}
        return [float(x) for x in e2e_common.step_losses(dump, SGD_STEPS)]
    finally:
        os.remove(exe)
        shutil.rmtree(dump, ignore_errors=True)


def mesh_check(args, work, mesh, single):
    """SGD on `mesh` against dtcc's one-device run (`single`, sgd_losses)
    and PyTorch's f64 SGD: {"diff": the largest relative difference of a
    step's loss from one device's, "torch": from PyTorch's}, or {"error":
    ...}."""
    if isinstance(single, dict):
        return {"error": "one device: " + single["error"]}
    got = sgd_losses(args, work, mesh)
    if isinstance(got, dict):
        return got
    want = json.load(open(os.path.join(work, "torch.json")))["sgd64"]
    return {"diff": max(rel(g, w) for g, w in zip(got, single)),
            "torch": max(rel(g, w) for g, w in zip(got, want))}


def cuda_case(args, work, name, sub=""):
    """`name`'s export and batches (f32; sub "f64": the f64 export's) as a
    case of cuda_checks.py in args.cuda_kit, named `name` (`name`-f64):
    its manifest entry, or {"error": ...}. Compiled for both targets with
    SGD; the CPU's losses of the steps (f32: args.steps, f64: SGD_STEPS),
    which the GPU's must equal within CUDA_RTOL (f64: CUDA_RTOL_F64)."""
    root = os.path.abspath(args.cuda_kit)
    case = name + ("-" + sub if sub else "")
    d = os.path.join(root, case)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    shutil.copy(os.path.join(work, sub, "model.onnx"), d)
    shutil.copytree(os.path.join(work, sub, "batches"), os.path.join(d, "batches"))
    flags = ["--train", "--optimizer", "sgd"] + SGD_SCHEDULE + args.dtcc_flag
    try:
        return cuda_checks.prepare_case(
            os.path.abspath(args.dtcc), root, case, flags,
            ["--batches", os.path.join(case, "batches")],
            CUDA_RTOL_F64 if sub else CUDA_RTOL, steps=SGD_STEPS if sub else args.steps)
    except (RuntimeError, SystemExit, subprocess.TimeoutExpired) as e:
        return {"error": str(e)[:300]}
    finally:  # the GPU machine needs the program and the batches alone
        for f in ("model.onnx", "train_cpu"):
            if os.path.exists(os.path.join(d, f)):
                os.remove(os.path.join(d, f))
        shutil.rmtree(os.path.join(d, "cpu.dump"), ignore_errors=True)


def judged(args, d, f):
    """dtcc ran every f32 step, and its f64 step 1 (loss and every
    gradient) is PyTorch's within --rtol."""
    return (len(d["losses"]) == args.steps and "error" not in f
            and f["loss"] <= args.rtol and f["grad"] <= args.rtol)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated, of: " + ", ".join(MODELS))
    ap.add_argument("--dtcc", default=os.path.join(hf_models.REPO, "build", "bin", "dtcc"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1,
                    help="steps not timed (default 1)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rtol", type=float, default=1e-6,
                    help="tolerance of the f64 step 1 against PyTorch's: the "
                         "loss's relative difference and, per parameter, max "
                         "|g - g64| / max |g64| (default 1e-6)")
    ap.add_argument("--dtcc-flag", action="append", default=[],
                    metavar="FLAG", help="an extra flag for dtcc compile")
    ap.add_argument("--mesh", action="append", default=[],
                    help="also train the f64 export on this mesh under mpirun, "
                         "one thread a rank, SGD, against dtcc's one-device "
                         "steps and PyTorch's f64 SGD steps (repeatable; a "
                         "--mesh value, optionally with flags: 'dp=2', 'tp=2', "
                         "'pp=2', 'dp=2 --zero 3')")
    ap.add_argument("--exporter", choices=("torchscript", "dynamo"),
                    default="torchscript",
                    help="torchscript: Debian's PyTorch 1.13 exports in "
                         "training mode (opset 17); dynamo: PyTorch 2's "
                         "torch.onnx.export(..., dynamo=True, optimize=False) "
                         "in the benchmarks' PyTorch 2 environment, which "
                         "trains the reference too, its batch norms in eval() "
                         "as the exporter writes them")
    ap.add_argument("--venv", default=None,
                    help="the environment (default: tv-venv, or "
                         "tv-dynamo-venv with --exporter dynamo, under "
                         + cpu_compare.cache_dir() + ")")
    ap.add_argument("--cuda-kit", metavar="DIR",
                    help="also write each model as two cases of tests/e2e/"
                         "cuda_checks.py --check DIR (its f32 and f64 exports "
                         "compiled for the CPU and CUDA, SGD, the CPU's losses)")
    ap.add_argument("--work", default=None,
                    help="keep each model's files here (default: a "
                         "temporary directory)")
    args = ap.parse_args()
    names = hf_models.model_names(ap, args, MODELS)
    python = hf_models.exporter_python(
        args, "tv", REQUIREMENTS, DYNAMO_REQUIREMENTS,
        "torchvision's Python code without its PyTorch; Debian's PyTorch 1.13",
        "onnxscript, onnx, torchvision and timm; the benchmarks' PyTorch 2",
        no_deps=NO_DEPS)
    root = args.work or tempfile.mkdtemp(prefix="dtcc-vision-")
    if not args.work:
        atexit.register(shutil.rmtree, root, True)
    rows, mesh_rows, agreed, failed = [], [], 0, []
    cuda_cases = {}
    for name in names:
        work, torch_out = hf_models.torch_child(python, __file__, root, name,
                                                args.threads, steps=args.steps,
                                                batch=args.batch,
                                                exporter=args.exporter)
        if "failed" in torch_out:
            rows.append((name, {}, {"error": torch_out["failed"]}, {}))
            failed.append(name)
            continue
        dtcc_out = torch_out if "error" in torch_out else hf_models.run_dtcc(args, work)
        if os.path.exists(os.path.join(work, "train")):
            os.remove(os.path.join(work, "train"))
        if args.cuda_kit and "error" not in dtcc_out:
            cuda_cases[name] = cuda_case(args, work, name)
            cuda_cases[name + "-f64"] = cuda_case(args, work, name, "f64")
        f64 = {} if "error" in dtcc_out else f64_check(args, work)
        meshes = {}
        if args.mesh and f64 and "error" not in f64:
            single = sgd_losses(args, work)
            meshes = {m: mesh_check(args, work, m, single) for m in args.mesh}
        rows.append((name, torch_out, dtcc_out, f64))
        mesh_rows.append((name, meshes))
        agreed += hf_models.tally(
            name, failed, "error" not in dtcc_out and judged(args, dtcc_out, f64)
            and all(r.get("diff", 1) <= args.rtol for r in meshes.values()))

    if args.exporter == "dynamo":
        made = ("torchvision and timm models (PyTorch 2's environment), "
                f"{CLASSES} classes, exported by PyTorch 2's torch.onnx.export("
                "dynamo=True, optimize=False), batch norms in eval() (as exported)")
    else:
        made = (f"torchvision {REQUIREMENTS[0].split('==')[1]} and timm "
                f"{REQUIREMENTS[1].split('==')[1]} models, {CLASSES} classes, "
                "exported by PyTorch 1.13 (training mode, opset 17)")
    print(f"{made}; batch {args.batch}; "
          f"AdamW lr 1e-3; {args.steps} steps, {args.threads} thread(s); step "
          f"times: medians after {args.warmup}; dtcc {cpu_compare.git_version()}")
    print()
    print("Judged: step 1 of the model exported in f64 (dtcc compiled with "
          "--export-gradients, lr 0), against PyTorch's f64 step: the loss and "
          "every parameter's gradient (the worst parameter's max |g - g64| / "
          "max |g64|, or over 1e-6 x the model's largest gradient where that "
          f"is larger: a zero but for rounding), within {args.rtol:g}. This does not depend on how well "
          "the f32 step is conditioned; with batch norms over a few values per "
          "channel PyTorch's own f32 gradients are percents from its f64 ones. "
          "Reported: the f32 training's step-1 loss against PyTorch f64 (dtcc "
          "/ PyTorch f32), and the later steps' largest relative difference "
          "from PyTorch f32 (dtcc / PyTorch f64): Adam's first step moves each "
          "weight by about lr whatever its gradient's size, so rounding-level "
          "differences grow.")
    print()
    print("| model | input | params | ONNX nodes | dtcc compile | f64 step 1: loss, "
          "worst gradient (parameter) | judged | f32 step 1 loss: dtcc / PyTorch "
          "f32 | f32 steps 2-N: dtcc / PyTorch f64 | PyTorch " + ("2" if args.exporter == "dynamo" else "1.13") + " eager ms/step | "
          "dtcc ms/step | dtcc faster |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, t, d, f in rows:
        side = "x".join(str(d) for d in input_shape(name)[1:])
        if "error" in d:
            params = f"{t['params']:,}" if "params" in t else "-"
            print(f"| {name} | {side} | {params} | {t.get('nodes', '-')} | "
                  f"{hf_models.error_cell(d)} | | | | | | | |")
            continue
        f64 = (hf_models.error_cell(f) if "error" in f else
               f"{f['loss']:.1e}, {f['grad']:.1e} ({f['name']})")
        loss1 = (f"{rel(d['losses'][0], t['loss64']):.1e} / "
                 f"{rel(t['losses'][0], t['loss64']):.1e}")
        later_d = max((rel(a, b) for a, b in zip(d["losses"][1:], t["losses"][1:])),
                      default=0)
        later_t = max((rel(a, b) for a, b in zip(t["losses64"][1:], t["losses"][1:])),
                      default=0)
        tm = statistics.median(t["times"][args.warmup:])
        dm = statistics.median(d["times"][args.warmup:])
        print(f"| {name} | {side} | {t['params']:,} | {t['nodes']} | "
              f"{d['compile_s']:.1f} s | {f64} | "
              f"{'agree' if judged(args, d, f) else 'DIFFER'} | {loss1} | "
              f"{later_d:.1e} / {later_t:.1e} | {tm:.1f} | {dm:.1f} | {tm / dm:.2f}x |")
    if args.mesh:
        print()
        print(f"On meshes (MPI ranks, one thread each), the f64 export with SGD "
              f"(lr {SGD_LR:g}), steps 1-{SGD_STEPS}: the largest relative "
              f"difference of a step's loss from dtcc's one-device run (judged "
              f"within {args.rtol:g}; the one-device step 1 is judged above), and "
              f"from PyTorch's f64 SGD (reported: ONNX keeps a batch norm's "
              f"epsilon as a float, 2.5e-8 from PyTorch's 1e-5, which these "
              f"steps amplify where the loss jumps)")
        print()
        print("| model | " + " | ".join(f"`--mesh {m}`" for m in args.mesh) + " |")
        print("|---|" + "---|" * len(args.mesh))
        for name, meshes in mesh_rows:
            cells = []
            for m in args.mesh:
                r = meshes.get(m, {"error": "-"})
                cells.append(hf_models.error_cell(r)[:160] if "error" in r else
                             f"{'agree' if r['diff'] <= args.rtol else 'DIFFER'} "
                             f"({r['diff']:.1e}; PyTorch {r['torch']:.1e})")
            print(f"| {name} | " + " | ".join(cells) + " |")
    if args.cuda_kit:
        manifest_path = os.path.join(args.cuda_kit, "manifest.json")
        manifest = (json.load(open(manifest_path)) if os.path.exists(manifest_path)
                    else {})
        for name, case in cuda_cases.items():
            if "error" in case:
                print(f"cuda kit: {name} not prepared: {case['error']}")
            else:
                manifest[name] = case
        with open(manifest_path, "w") as f:
            json.dump(manifest, f, indent=1)
        print(f"cuda kit: {len(manifest)} case(s) in {manifest_path} "
              "(tests/e2e/cuda_checks.py --check on a GPU machine)")
    print()
    print(f"{agreed} of {len(names)} models compute step 1 as PyTorch does "
          f"(in f64: the loss and every gradient within {args.rtol:g}"
          + (", and their SGD steps on every mesh as on one device" if args.mesh
             else "") + ")"
          + (f"; not: {', '.join(failed)}" if failed else ""))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        child(sys.argv[2])
    else:
        main()
