"""The zoo's GPT (learned positions, or ALiBi) against a NumPy reference.

`dtcc zoo gpt` writes an ONNX graph with generated weights; dtcc compiles
it and its first training step reports the loss of the initial weights
(the step's update comes after). This script recomputes it from
the model file's own initializers with an independent NumPy forward pass
(LayerNorm, the exact GELU, causal softmax attention with ALiBi's biases
by BLOOM's formula, tied or own head, mean cross-entropy) and requires
the two to agree within 1e-5 (relative; dtcc computes in fp32), and the
ALiBi models' loss to differ from the same weights' without the biases. ALiBi's slopes are those of
BLOOM's `build_alibi_tensor`, written out here as a second reading of the
paper's rule: for n heads, the 2^floor(log2 n) slopes 2^(-8k / that),
then every other slope of twice it.
"""
import math
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common  # noqa: E402
from e2e_common import Checks, run  # noqa: E402


def alibi_slopes(n):
    below = 2 ** int(math.floor(math.log2(n)))
    slopes = [2.0 ** (-8.0 * k / below) for k in range(1, below + 1)]
    slopes += [2.0 ** (-8.0 * k / (2 * below))
               for k in range(1, 2 * (n - below), 2)]
    return np.array(slopes)


def layer_norm(x, scale, bias, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def forward(w, ids, labels, heads, alibi):
    """Loss and logits of the zoo GPT with weights `w` (float64)."""
    b, s = ids.shape
    x = w["tok_embedding"][ids]
    if not alibi:
        x = x + w["pos_embedding"]
    h = x.shape[-1]
    hd = h // heads
    mask = np.triu(np.full((s, s), -1e9), k=1)
    bias = 0.0
    if alibi:
        bias = alibi_slopes(heads)[:, None, None] * np.arange(s)[None, None, :]
    layers = sum(1 for k in w if k.endswith(".ln1.scale"))
    for l in range(layers):
        p = f"layers.{l}."
        t = layer_norm(x, w[p + "ln1.scale"], w[p + "ln1.bias"])
        qkv = t @ w[p + "attn.qkv.weight"] + w[p + "attn.qkv.bias"]
        q, k, v = (qkv[..., i * h:(i + 1) * h].reshape(b, s, heads, hd)
                   .transpose(0, 2, 1, 3) for i in range(3))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + bias + mask
        scores = scores - scores.max(-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(-1, keepdims=True)
        a = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
        x = x + a @ w[p + "attn.proj.weight"] + w[p + "attn.proj.bias"]
        t = layer_norm(x, w[p + "ln2.scale"], w[p + "ln2.bias"])
        m = gelu(t @ w[p + "mlp.fc1.weight"] + w[p + "mlp.fc1.bias"])
        x = x + m @ w[p + "mlp.fc2.weight"] + w[p + "mlp.fc2.bias"]
    x = layer_norm(x, w["final_ln.scale"], w["final_ln.bias"])
    head = w["head.weight"] if "head.weight" in w else w["tok_embedding"].T
    logits = x @ head
    flat = logits.reshape(b * s, -1)
    flat = flat - flat.max(-1, keepdims=True)
    logp = flat - np.log(np.exp(flat).sum(-1, keepdims=True))
    loss = -logp[np.arange(b * s), labels.reshape(-1)].mean()
    return loss, logits


def main():
    import onnx
    from onnx import numpy_helper

    args, work = e2e_common.start(__doc__, "dtcc-zoo-reference.")
    check = Checks()
    rng = np.random.default_rng(5)
    b, s, vocab, heads = 2, 16, 64, 6
    ids = rng.integers(0, vocab, size=(b, s), dtype=np.int64)
    labels = rng.integers(0, vocab, size=(b, s), dtype=np.int64)
    batches = e2e_common.write_batches([{"ids": ids, "labels": labels}],
                                       os.path.join(work, "batches"))
    # 6 heads: ALiBi's slopes of 4 heads, then two of 8's.
    for name, flags in [("learned", []), ("alibi", ["--alibi"]),
                        ("alibi-tied", ["--alibi", "--tied-embeddings"])]:
        model = os.path.join(work, name + ".onnx")
        run([args.dtcc, "zoo", "gpt", "--layers", "2", "--hidden", "48",
             "--heads", str(heads), "--vocab", str(vocab), "--seq", str(s),
             "--batch", str(b), "--seed", "7", "-o", model, *flags])
        proto = onnx.load(model)
        w = {t.name: numpy_helper.to_array(t).astype(np.float64)
             for t in proto.graph.initializer if t.data_type == 1}
        want_loss, _ = forward(w, ids, labels, heads,
                                         alibi="--alibi" in flags)
        exe = os.path.join(work, name)
        run([args.dtcc, "compile", model, "--train", "-o", exe])
        dump = exe + ".dump"
        r = e2e_common.launch(exe, 1, ["--batches", batches, "--steps", "1",
                                       "--dump-outputs", dump])
        check(r.returncode == 0, f"{name}: the compiled step runs")
        if r.returncode != 0:
            print(r.stdout[-1500:], r.stderr[-1500:])
            continue
        step = os.path.join(dump, "step_1")
        loss = float(e2e_common.read_pb(os.path.join(step, "loss.pb")))
        loss_err = abs(loss - want_loss) / abs(want_loss)
        check(loss_err < 1e-5,
              f"{name}: loss {loss:.7f}, NumPy's {want_loss:.7f} "
              f"(relative {loss_err:.1e})")
        if name == "learned":
            continue
        # Without the biases the same weights give other logits: the check
        # sees ALiBi.
        no_bias_loss, _ = forward({**w, "pos_embedding": np.zeros((s, 48))},
                                  ids, labels, heads, alibi=False)
        # (ten times the agreement required above)
        check(abs(no_bias_loss - want_loss) / abs(want_loss) > 1e-4,
              f"{name}: the biases change the loss ({no_bias_loss:.6f} "
              f"without them)")
    if check.failures:
        print(f"{len(check.failures)} check(s) failed; work dir: {work}")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print("all zoo reference checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
