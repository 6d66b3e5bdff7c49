#!/usr/bin/python3
"""ONNX GridSample compiled by dtcc against torch.nn.functional.grid_sample.

In float64, one ONNX model holds a GridSample node per case, each with its
own image X and grid:

  2-D   every mode (bilinear, nearest, bicubic) x padding_mode (zeros,
        border, reflection) x align_corners (0, 1): X [2, 3, 5, 6], grid
        [2, 4, 7, 2], against PyTorch's grid_sample;
  3-D   bilinear (trilinear) and nearest x every padding x align_corners
        (PyTorch has no 3-D bicubic): X [2, 3, 4, 5, 6], grid
        [2, 3, 4, 5, 3], against PyTorch's 5-D grid_sample;
  1-D   every mode x padding x align_corners: X [2, 3, 7], grid [2, 9, 1]
        (ONNX's N-D form), against PyTorch's 2-D grid_sample of the
        signal as an image of one row, sampled at y = 0 (that row's
        centre under either convention, where every mode's y weights are
        exactly (0, 1, 0, 0)), its grid gradient's x part.

The grids mix seeded random points in [-1.4, 1.4] with points placed on
the borders (-1, 1), at the centre (0: a rounding tie of nearest for an
even size without align_corners), far outside (+-1.5, +-3.75: reflection
folds them several times) and on pixel centres. Checks, per node:

  forward   dtcc's output (the model compiled for inference) against
            PyTorch 1.13's grid_sample;
  gradients loss = sum(Y * R) with fixed random R, compiled with --train
            --export-gradients (SGD, learning rate 0): dtcc's gradients of
            X and of the grid against torch.autograd's.

Each within --rtol (1e-10) of the largest magnitude of PyTorch's tensor (at
least 1). Exits non-zero on any difference, printing the worst errors.
"""
import argparse
import itertools
import os
import re
import sys
import tempfile

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

import e2e_common

MODES = ["bilinear", "nearest", "bicubic"]
PADDINGS = ["zeros", "border", "reflection"]
# Per spatial rank: X's shape, the grid's, and the modes PyTorch samples.
SHAPES = {
    2: ((2, 3, 5, 6), (2, 4, 7, 2), MODES),
    3: ((2, 3, 4, 5, 6), (2, 3, 4, 5, 3), ["bilinear", "nearest"]),
    1: ((2, 3, 7), (2, 9, 1), MODES),
}
# Points (x first) on the borders, at the centre, far outside, between.
SPECIAL = {
    2: [(-1.0, -1.0), (1.0, 1.0), (-1.0, 1.0), (1.0, -1.0), (0.0, 0.0),
        (1.5, -1.5), (-3.75, 3.75), (0.5, -0.25), (-0.5, 0.75), (1.25, 0.0),
        (0.0, -1.0), (-1.0, 0.5)],
    3: [(-1.0, -1.0, -1.0), (1.0, 1.0, 1.0), (-1.0, 1.0, 0.0), (0.0, 0.0, 0.0),
        (1.5, -1.5, 0.25), (-3.75, 3.75, -2.5), (0.5, -0.25, 1.25),
        (0.0, -1.0, 1.0), (2.25, 0.5, -0.75), (0.3, 0.1, -3.5)],
    1: [(-1.0,), (1.0,), (0.0,), (1.5,), (-3.75,), (0.25,), (-1.25,), (2.6,)],
}


def make_grid(rng, dims, x_shape, grid_shape):
    """Random points with the special ones and pixel centres spliced in."""
    g = rng.uniform(-1.4, 1.4, size=grid_shape)
    flat = g.reshape(-1, dims)
    special = SPECIAL[dims]
    for i, p in enumerate(special):
        flat[i] = p
    # Pixel centres of either convention along x (align_corners 1:
    # -1 + 2i/(W-1); 0: -1 + (2i+1)/W) and y (the other one).
    width = x_shape[-1]
    k = len(special)
    for i in range(min(width, 6, len(flat) - k)):
        flat[k + i, 0] = -1 + 2 * i / (width - 1)
        if dims > 1:
            flat[k + i, 1] = -1 + (2 * i + 1) / x_shape[-2]
    return g


def torch_sample(x, grid, mode, padding, align):
    """PyTorch's grid_sample of x at grid, N-D; 1-D as a one-row image."""
    if grid.shape[-1] != 1:
        return F.grid_sample(x, grid, mode=mode, padding_mode=padding,
                             align_corners=bool(align))
    image = x.unsqueeze(2)
    points = torch.cat([grid, torch.zeros_like(grid)], dim=-1).unsqueeze(1)
    return F.grid_sample(image, points, mode=mode, padding_mode=padding,
                         align_corners=bool(align)).squeeze(2)


def safe(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def run(cmd):
    e2e_common.run(cmd, timeout=300)


def build(cases, train):
    """The model: per case X_i, G_i (initializers) -> Y_i; with `train`,
    the loss sum_i sum(Y_i * R_i) as its one output."""
    nodes, inits, outputs, frozen = [], [], [], []
    for i, c in enumerate(cases):
        inits.append(numpy_helper.from_array(c["x"], f"X_{i}"))
        inits.append(numpy_helper.from_array(c["grid"], f"G_{i}"))
        nodes.append(helper.make_node(
            "GridSample", [f"X_{i}", f"G_{i}"], [f"Y_{i}"], name=f"sample_{i}",
            mode=c["mode"], padding_mode=c["padding"],
            align_corners=c["align"]))
        y_shape = list(c["y"].shape)
        if train:
            inits.append(numpy_helper.from_array(c["r"], f"R_{i}"))
            frozen.append(f"R_{i}")
            nodes.append(helper.make_node("Mul", [f"Y_{i}", f"R_{i}"], [f"M_{i}"]))
            nodes.append(helper.make_node("ReduceSum", [f"M_{i}"], [f"S_{i}"],
                                          keepdims=0))
        else:
            outputs.append(helper.make_tensor_value_info(f"Y_{i}", TensorProto.DOUBLE,
                                                         y_shape))
    if train:
        nodes.append(helper.make_node("Sum", [f"S_{i}" for i in range(len(cases))],
                                      ["loss"]))
        outputs = [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])]
    graph = helper.make_graph(nodes, "grid_sample_parity", [], outputs, inits)
    # Opset 16's GridSample is 2-D; opset 20's N-D (modes "linear" and
    # "cubic" there, the names of 16 here: dtcc reads either at 16).
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)],
                              producer_name="grid_sample_parity")
    return model, frozen


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtcc", required=True)
    ap.add_argument("--runner", help="dtcc-runner (default: beside --dtcc)")
    ap.add_argument("--rtol", type=float, default=1e-10)
    args = ap.parse_args()
    runner = args.runner or os.path.join(os.path.dirname(args.dtcc), "dtcc-runner")
    torch.set_default_dtype(torch.float64)

    rng = np.random.default_rng(16)
    cases = []
    for dims, (x_shape, grid_shape, modes) in SHAPES.items():
        for mode, padding, align in itertools.product(modes, PADDINGS, [0, 1]):
            x = rng.standard_normal(x_shape)
            grid = make_grid(rng, dims, x_shape, grid_shape)
            if dims == 3 and mode == "nearest":
                # PyTorch 1.13's 3-D nearest rounds halves away from zero
                # (std::round; its 2-D one, PyTorch 2.1's 3-D one, ONNX's
                # reference and dtcc round them to even): off the ties.
                grid = grid + 1e-7
            xt = torch.tensor(x, requires_grad=True)
            gt = torch.tensor(grid, requires_grad=True)
            y = torch_sample(xt, gt, mode, padding, align)
            r = rng.standard_normal(tuple(y.shape))
            (y * torch.tensor(r)).sum().backward()
            cases.append({"dims": dims, "mode": mode, "padding": padding,
                          "align": align, "x": x, "grid": grid, "r": r,
                          "y": y.detach().numpy(), "dx": xt.grad.numpy(),
                          "dgrid": gt.grad.numpy()})

    failures = []

    def check(i, what, want, got):
        c = cases[i]
        scale = max(1.0, float(np.abs(want).max()))
        err = float(np.abs(got - want).max()) / scale if got is not None else np.inf
        tag = (f"{c['dims']}-D {c['mode']:8s} {c['padding']:10s} align {c['align']} "
               f"{what:6s}")
        ok = err <= args.rtol
        print(f"{tag} max error {err:.2e} (of {scale:.3g}) {'ok' if ok else 'FAILED'}")
        if not ok:
            failures.append(tag)

    with tempfile.TemporaryDirectory() as work:
        fwd, _ = build(cases, train=False)
        fwd_path, fwd_exe = os.path.join(work, "fwd.onnx"), os.path.join(work, "fwd")
        onnx.save(fwd, fwd_path)
        run([args.dtcc, "compile", fwd_path, "-o", fwd_exe])
        fwd_out = os.path.join(work, "fwd_out")
        run([fwd_exe, "--output-dir", fwd_out])

        train, frozen = build(cases, train=True)
        train_path = os.path.join(work, "train.onnx")
        prog = os.path.join(work, "train.program")
        onnx.save(train, train_path)
        run([args.dtcc, "compile", train_path, "--train", "--optimizer", "sgd",
             "--lr", "0", "--export-gradients", "--compile-to", "program",
             "-o", prog, "--frozen", ",".join(frozen)])
        train_out = os.path.join(work, "train_out")
        run([runner, "--program", prog, "--function", "train_step",
             "--output-dir", train_out])

        def load(out_dir, name):
            path = os.path.join(out_dir, safe(name) + ".pb")
            return (e2e_common.read_pb(path).astype(np.float64)
                    if os.path.exists(path) else None)

        for i, c in enumerate(cases):
            check(i, "y", c["y"], load(fwd_out, f"Y_{i}"))
            check(i, "dx", c["dx"], load(train_out, f"grad/X_{i}"))
            check(i, "dgrid", c["dgrid"], load(train_out, f"grad/G_{i}"))
    if failures:
        print(f"grid-sample-parity: {len(failures)} differences from PyTorch")
        return 1
    print(f"grid-sample-parity: {len(cases)} cases x (y, dx, dgrid) match PyTorch "
          f"within {args.rtol:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
