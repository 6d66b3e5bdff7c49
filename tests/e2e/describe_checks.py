"""The planner's description of models exported by PyTorch, read from their
IR (compiler/DescribeModel.h), against figures counted here from the
torch modules themselves.

A GPT (LayerNorm, fused qkv with biases, learned positions) and a Llama
(RMSNorm, SwiGLU, no biases, rotary tables as buffers) are exported by
torch.onnx (opset 17, training mode) and planned with `dtcc plan --json
--frozen <buffers>`; an MLP on cpu-local. Checked:
  - the sizes (layers, hidden, heads, kv heads, ffn, vocabulary, sequence,
    gated MLP, norm, biases, learned positions, tied head) against the
    modules' attributes;
  - the parameters against sum(p.numel()) and their bytes against 4 bytes
    each (float32);
  - each layer's forward FLOPs against 2 x tokens x (in x out) of every
    nn.Linear in the block plus the attention's scores and context
    (2 x 2 x batch x seq x seq x hidden), and the whole forward pass
    against the layers plus the logits (or, for the MLP, its Linears);
  - `dtcc compile --plan auto` on a GPU cluster plans the exported GPT with
    the planner's transformer model (it is described, not just counted) as
    the pre-filter, and prices the plans it proposes from their compiled
    programs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models as tm  # noqa: E402

BATCH = 3


def linears(module):
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


def linear_flops(module, rows):
    return sum(2 * rows * m.in_features * m.out_features for m in linears(module))


def expected_transformer(model):
    block = model.blocks[0]
    hidden = model.tok.embedding_dim
    seq = block.mask.shape[0]
    tokens = BATCH * seq
    gated = hasattr(block, "gate")
    attention = 2 * 2 * BATCH * seq * seq * hidden
    layer = [linear_flops(b, tokens) + attention for b in model.blocks]
    head = 2 * tokens * hidden * model.head.out_features
    return {
        "layers": len(model.blocks),
        "hidden": hidden,
        "heads": block.heads,
        "kvHeads": block.heads,
        "ffnHidden": (block.gate if gated else block.fc1).out_features,
        "vocab": model.tok.num_embeddings,
        "seq": seq,
        "gatedMlp": gated,
        "tiedEmbeddings": False,
        "norm": "rmsnorm" if gated else "layernorm",
        "linearBias": any(m.bias is not None for m in linears(block)),
        "learnedPositions": hasattr(model, "pos"),
        "graph": {
            "batch": BATCH,
            "parameters": sum(p.numel() for p in model.parameters()),
            "parameterBytes": 4 * sum(p.numel() for p in model.parameters()),
            "layerForwardFlops": layer,
            "forwardFlops": sum(layer) + head,
        },
    }


def compare(what, got, want, failures):
    for key, value in want.items():
        if isinstance(value, dict):
            compare(what + "." + key, got.get(key, {}), value, failures)
        elif got.get(key) != value:
            failures.append(f"{what}.{key}: got {got.get(key)!r}, expected {value!r}")


def plan_json(dtcc, path, flags):
    p = subprocess.run([dtcc, "plan", path, "--json"] + flags,
                       capture_output=True, text=True)
    if p.returncode not in (0, 2):
        raise SystemExit(f"dtcc plan {path} failed:\n{p.stderr}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtcc", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    failures = []
    work = tempfile.mkdtemp(prefix="dtcc-describe-")
    models = {
        "gpt": tm.GPT(vocab=48, seq=12, hidden=32, heads=4, layers=3),
        "llama": tm.Llama(vocab=40, seq=10, hidden=24, heads=3, layers=2, ffn=40),
    }
    for name, model in models.items():
        path = os.path.join(work, name + ".onnx")
        tm.export(name, model, BATCH, path)
        frozen = ",".join(tm.frozen_buffers(model))
        report = plan_json(args.dtcc, path, ["--global-batch", "8", "--frozen", frozen])
        want = expected_transformer(model)
        compare(name, report["model"], want, failures)
        print(f"{name}: {json.dumps(report['model'])}")

    # Not a transformer: an MLP, its figures only (cpu-local compiles it).
    mlp = tm.MLP(inputs=20, hidden=24, classes=6, layers=3)
    path = os.path.join(work, "mlp.onnx")
    tm.export("mlp", mlp, BATCH, path)
    report = plan_json(args.dtcc, path, ["--cluster", "cpu-local", "--ranks", "1"])
    params = sum(p.numel() for p in mlp.parameters())
    compare("mlp", report["model"], {
        "layers": 0,
        "graph": {"batch": BATCH, "parameters": params, "parameterBytes": 4 * params,
                  "forwardFlops": linear_flops(mlp, BATCH)}}, failures)
    print(f"mlp: {json.dumps(report['model'])}")

    # --plan auto plans the exported GPT with the transformer model.
    gpt = os.path.join(work, "gpt.onnx")
    p = subprocess.run([args.dtcc, "compile", gpt, "--train", "--frozen",
                        ",".join(tm.frozen_buffers(models["gpt"])), "--plan", "auto",
                        "--cluster", "dgx-h100", "--ranks", "2", "--compile-to", "shard",
                        "-o", os.path.join(work, "gpt.mlir")],
                       capture_output=True, text=True)
    print(p.stderr.strip())
    if p.returncode != 0:
        failures.append("dtcc compile --plan auto of the exported GPT failed")
    elif ("on dgx-h100, priced by its compiled program (gpt.onnx compiled "
          "whole for cuda" not in p.stderr
          or "the analytic search proposed" not in p.stderr):
        failures.append("--plan auto did not plan the exported GPT with the "
                        "transformer model, priced by its compiled program")

    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
