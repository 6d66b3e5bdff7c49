"""The demo's inference model: a small GPT exported from PyTorch.

  demo_model.py export DIR   writes DIR/model.onnx (the GPT's logits),
                             DIR/ids.pb and DIR/expected.pb (PyTorch's logits)
  demo_model.py compare DIR  compares DIR/out/logits.pb with expected.pb

The GPT is tests/e2e/torch_models.py's, with fixed seeds, so every run is
the same. Uses Debian's python3-torch.
"""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "tests", "e2e"))
import torch_models  # noqa: E402

VOCAB, SEQ, BATCH = 96, 16, 2


class Logits(torch.nn.Module):
    """The GPT's logits, without the loss: what an inference export holds."""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, ids):
        return self.gpt.logits(ids)


def export(out):
    torch.manual_seed(0)
    model = Logits(torch_models.GPT(vocab=VOCAB, seq=SEQ, hidden=64, heads=4,
                                    layers=2)).eval()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    with torch.no_grad():
        logits = model(ids)
    torch.onnx.export(model, (ids,), os.path.join(out, "model.onnx"),
                      input_names=["ids"], output_names=["logits"], opset_version=17)
    for name, t in (("ids", ids), ("expected", logits)):
        with open(os.path.join(out, name + ".pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy(), name).SerializeToString())


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
