"""The planner's description of models exported by PyTorch, read from their
IR (compiler/DescribeModel.h), against figures counted here from the
torch modules themselves.

A GPT (LayerNorm, fused qkv with biases, learned positions) and a Llama
(RMSNorm, SwiGLU, no biases, rotary tables as buffers) are exported by
torch.onnx (opset 17, training mode) and planned with `dtcc plan --json
--frozen <buffers>`; an MLP on cpu-local and on dgx-h100. Checked:
  - the sizes (layers, hidden, heads, kv heads, ffn, vocabulary, sequence,
    gated MLP, norm, biases, learned positions, tied head) against the
    modules' attributes;
  - the parameters against sum(p.numel()) and their bytes against 4 bytes
    each (float32);
  - each layer's forward FLOPs against 2 x tokens x (in x out) of every
    nn.Linear in the block plus the attention's scores and context
    (2 x 2 x batch x seq x seq x hidden), and the whole forward pass
    against the layers plus the logits (or, for the MLP, its Linears);
  - a GPT with what HuggingFace's encoders and decoders add outside their
    layers (an embedding LayerNorm as BLOOM's, a token-type table as BERT's,
    a dense + LayerNorm transform before the head as BERT's masked-LM head,
    a bias on the logits), whose attention multiplies [batch x heads, seq,
    seq] as OPT's does and whose Linears are read transposed: the same
    sizes, and those parameters on the side of the layers that reads them
    (embeddingExtraParams, headExtraParams); with a head transform wider
    than a layer's worth it is not described;
  - a GPT of GPT-J's blocks (one LayerNorm before attention and MLP side by
    side, attention without biases) whose scores are laid out [batch, seq,
    heads, seq] as GPT-BigCode's: its layers' vector parameters as the
    graph holds them (layerVectorParams);
  - the MLP on a GPU cluster is planned from its compiled training step
    (every plan compiled for CUDA and priced), not its parameter count;
  - `dtcc compile --plan auto` on a GPU cluster plans the exported GPT with
    the planner's transformer model (it is described, not just counted) as
    the pre-filter, and prices the plans it proposes from their compiled
    programs.
"""
import argparse
import atexit
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models as tm  # noqa: E402

BATCH = 3


def linears(module):
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


def linear_flops(module, rows):
    return sum(2 * rows * m.in_features * m.out_features for m in linears(module))


class ExtrasBlock(tm.GPTBlock):
    """GPTBlock whose attention multiplies [batch x heads, seq, seq] (OPT)."""

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        shape = (b, s, self.heads, h // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2).reshape(b * self.heads, s, -1)
                   for t in (q, k, v))
        att = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(h // self.heads) + self.mask
        y = torch.bmm(att.softmax(dim=-1), v)
        y = y.reshape(b, self.heads, s, -1).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ParallelBlock(tm.GPTBlock):
    """GPT-J's block: one LayerNorm before attention and MLP side by side,
    attention without biases; its scores laid out [batch, seq, heads, seq]
    as GPT-BigCode's multi-query attention lays them out."""

    def __init__(self, hidden, heads, seq):
        super().__init__(hidden, heads, seq)
        self.ln2 = None
        self.qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False)
        self.proj = torch.nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        b, s, h = x.shape
        d = h // self.heads
        y = self.ln1(x)
        q, k, v = self.qkv(y).split(h, dim=2)
        q4 = q.reshape(b, s, self.heads, d)
        k4 = k.reshape(b, s, self.heads, d).permute(0, 2, 3, 1)   # [b, heads, d, s]
        att = torch.einsum("bqhd,bhdk->bqhk", q4, k4) / math.sqrt(d)
        att = att + self.mask[None, :, None, :]
        p = att.softmax(dim=-1)                                   # [b, seq, heads, seq]
        v4 = v.reshape(b, s, self.heads, d).transpose(1, 2)       # [b, heads, s, d]
        ctx = torch.einsum("bqhk,bhkd->bqhd", p, v4).reshape(b, s, h)
        return x + self.proj(ctx) + self.fc2(F.gelu(self.fc1(y)))


class ParallelGPT(tm.GPT):
    def __init__(self, vocab, seq, hidden, heads, layers):
        super().__init__(vocab=vocab, seq=seq, hidden=hidden, heads=heads, layers=layers)
        self.blocks = torch.nn.ModuleList(ParallelBlock(hidden, heads, seq)
                                          for _ in range(layers))


class ExtrasGPT(tm.GPT):
    """A GPT with parameters outside its layers that the planner's formulas
    do not count: embedding LayerNorm and token types before the layers, a
    masked-LM transform and a logits bias after them."""

    def __init__(self, vocab, seq, hidden, heads, layers):
        super().__init__(vocab=vocab, seq=seq, hidden=hidden, heads=heads, layers=layers)
        self.blocks = torch.nn.ModuleList(ExtrasBlock(hidden, heads, seq)
                                          for _ in range(layers))
        self.types = torch.nn.Embedding(2, hidden)
        self.emb_ln = torch.nn.LayerNorm(hidden)
        self.transform = torch.nn.Linear(hidden, hidden)
        self.transform_ln = torch.nn.LayerNorm(hidden)
        self.bias = torch.nn.Parameter(torch.zeros(vocab))
        # The planner's before/after split, as this module holds them.
        self.before = [self.types, self.emb_ln]
        self.after = [self.transform, self.transform_ln]

    def logits(self, ids):
        x = self.emb_ln(self.tok(ids) + self.pos + self.types(torch.zeros_like(ids)))
        for block in self.blocks:
            x = block(x)
        x = self.transform_ln(F.gelu(self.transform(self.ln(x))))
        return self.head(x) + self.bias


def count(modules):
    return sum(p.numel() for m in modules for p in m.parameters())


def expected_transformer(model):
    block = model.blocks[0]
    hidden = model.tok.embedding_dim
    seq = block.mask.shape[0]
    tokens = BATCH * seq
    gated = hasattr(block, "gate")
    attention = 2 * 2 * BATCH * seq * seq * hidden
    layer = [linear_flops(b, tokens) + attention for b in model.blocks]
    head = 2 * tokens * hidden * model.head.out_features
    head += sum(linear_flops(m, tokens) for m in getattr(model, "after", []))
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
        "layerVectorParams": (sum(p.numel() for p in block.parameters() if p.dim() == 1)
                              if isinstance(block, ParallelBlock) else None),
        "embeddingExtraParams": count(getattr(model, "before", [])) or None,
        "headExtraParams": (count(getattr(model, "after", [])) + model.bias.numel()
                            if hasattr(model, "after") else None),
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
    atexit.register(shutil.rmtree, work, True)
    models = {
        "gpt": tm.GPT(vocab=48, seq=12, hidden=32, heads=4, layers=3),
        "llama": tm.Llama(vocab=40, seq=10, hidden=24, heads=3, layers=2, ffn=40),
        "gpt-extras": ExtrasGPT(vocab=44, seq=12, hidden=32, heads=4, layers=2),
        "gpt-parallel": ParallelGPT(vocab=40, seq=10, hidden=32, heads=4, layers=2),
    }
    for name, model in models.items():
        path = os.path.join(work, name + ".onnx")
        tm.export(name.split("-")[0], model, BATCH, path)
        frozen = ",".join(tm.frozen_buffers(model))
        report = plan_json(args.dtcc, path, ["--global-batch", "8", "--frozen", frozen])
        want = expected_transformer(model)
        compare(name, report["model"], want, failures)
        print(f"{name}: {json.dumps(report['model'])}")

    # More than a layer's worth outside the layers (a head transform 8x
    # wide) is a model the formulas do not describe.
    wide = ExtrasGPT(vocab=44, seq=12, hidden=32, heads=4, layers=2)
    wide.transform = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.GELU(),
                                         torch.nn.Linear(256, 32))
    path = os.path.join(work, "gpt-wide.onnx")
    tm.export("gpt", wide, BATCH, path)
    report = plan_json(args.dtcc, path, ["--global-batch", str(BATCH), "--ranks", "1",
                                         "--frozen", ",".join(tm.frozen_buffers(wide))])
    if report["model"].get("layers") != 0 or "outside its layers" not in report.get(
            "modelSource", ""):
        failures.append("gpt-wide: described as a transformer with "
                        f"{report['model'].get('layers')} layers ({report.get('modelSource')})")
    print(f"gpt-wide: {report.get('modelSource')}")

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
    # On GPUs too a model the formulas do not describe is planned from its
    # compiled training step, as `dtcc compile --plan auto` plans it (it
    # was planned from its parameter count: data parallelism and a ZeRO
    # stage, activations unmodelled).
    report = plan_json(args.dtcc, path, ["--cluster", "dgx-h100", "--ranks", "2"])
    compiled = report.get("compiledProgram", {})
    if report.get("pricedBy") != "compiled program" or "mesh" not in compiled:
        failures.append("mlp on dgx-h100: not planned from its compiled program "
                        f"(priced by {report.get('pricedBy')!r})")
    elif not any("CUDA backend" in n for n in report.get("notes", [])):
        failures.append(f"mlp on dgx-h100: not compiled for CUDA: {report.get('notes')}")
    print(f"mlp on dgx-h100: {compiled.get('mesh')} ZeRO-{compiled.get('zeroStage')}, "
          f"priced by {report.get('pricedBy')}")
    # Its report counts samples, not tokens (it has no sequence).
    text = subprocess.run([args.dtcc, "plan", path, "--cluster", "dgx-h100", "--ranks", "2"],
                          capture_output=True, text=True).stdout
    counts = [l.strip() for l in text.splitlines()
              if l.strip().startswith(("micro-batches", "throughput", "global batch"))]
    if (len(counts) != 3 or "samples/s" not in text or
            any("token" in l or "sequence" in l for l in counts)):
        failures.append(f"mlp on dgx-h100: the report counts tokens or sequences: {counts}")
    # A file is compiled as it is: a global batch other than its batch times
    # --micro-batches is refused, not ignored; a schedule named is the one
    # the search compiles (it tried all four whatever was named).
    p = subprocess.run([args.dtcc, "plan", path, "--cluster", "dgx-h100", "--ranks", "2",
                        "--global-batch", str(2 * BATCH + 1)], capture_output=True, text=True)
    if p.returncode == 0 or "is compiled as it is" not in p.stderr:
        failures.append(f"mlp on dgx-h100, --global-batch {2 * BATCH + 1}: not refused "
                        f"(exit {p.returncode}: {p.stderr.strip()[-200:]})")
    report = plan_json(args.dtcc, path, ["--cluster", "dgx-h100", "--ranks", "2",
                                         "--micro-batches", "2", "--global-batch",
                                         str(2 * BATCH), "--pipeline-schedule", "gpipe"])
    plans = [report["summary"]] + [a["summary"] for a in report.get("alternatives", [])]
    others = [s for s in plans if any(k in s for k in ("1f1b", "zb-h1", "interleaved"))]
    if report.get("globalBatch") != 2 * BATCH or others:
        failures.append(f"mlp on dgx-h100 with 2 gpipe micro-batches: global batch "
                        f"{report.get('globalBatch')}, other schedules {others}")

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
