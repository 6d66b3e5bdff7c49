"""The demo's model: a small GPT-style transformer exported from PyTorch.

  demo_model.py export DIR   writes DIR/model.onnx, DIR/ids.pb and
                             DIR/expected.pb (PyTorch's logits)
  demo_model.py compare DIR  compares DIR/out/logits.pb with expected.pb

Uses Debian's python3-torch; fixed seeds, so every run is the same.
"""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

VOCAB, SEQ, HIDDEN, HEADS, LAYERS, BATCH = 96, 16, 64, 4, 2, 2


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(HIDDEN)
        self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN)
        self.ln2 = torch.nn.LayerNorm(HIDDEN)
        self.fc1 = torch.nn.Linear(HIDDEN, 4 * HIDDEN)
        self.fc2 = torch.nn.Linear(4 * HIDDEN, HIDDEN)
        mask = torch.triu(torch.full((SEQ, SEQ), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(HIDDEN, dim=2)
        shape = (b, s, HEADS, h // HEADS)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (h // HEADS) ** 0.5 + self.mask
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class TinyGPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, HIDDEN)
        self.pos = torch.nn.Parameter(torch.randn(SEQ, HIDDEN) * 0.02)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = torch.nn.LayerNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def export(out):
    torch.manual_seed(0)
    model = TinyGPT().eval()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    with torch.no_grad():
        logits = model(ids)
    torch.onnx.export(model, (ids,), os.path.join(out, "model.onnx"),
                      input_names=["ids"], output_names=["logits"], opset_version=17)
    for name, t in (("ids", ids), ("expected", logits)):
        proto = numpy_helper.from_array(t.numpy(), name)
        with open(os.path.join(out, name + ".pb"), "wb") as f:
            f.write(proto.SerializeToString())


def compare(out):
    def load(path):
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)
    expected = load(os.path.join(out, "expected.pb"))
    actual = load(os.path.join(out, "out", "logits.pb"))
    err = np.abs(actual - expected).max()
    scale = np.abs(expected).max()
    print(f"dtcc vs PyTorch: logits {list(actual.shape)}, max abs difference "
          f"{err:.2e} (largest logit {scale:.2f})")
    if not err <= 1e-4 * max(scale, 1.0):
        print("error: dtcc's logits differ from PyTorch's")
        sys.exit(1)


if __name__ == "__main__":
    {"export": export, "compare": compare}[sys.argv[1]](sys.argv[2])
