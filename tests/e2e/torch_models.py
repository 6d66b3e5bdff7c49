"""PyTorch reference models for dtcc's end-to-end tests and benchmarks.

MLP, GPT (learned positions, LayerNorm, GELU), Llama (RMSNorm, rotary
embeddings, SwiGLU) and MLP-Mixer (token mixing across patches) small
enough for CPU tests; each forward returns the
mean cross-entropy loss, as a training export needs. Buffers (masks, rotary
tables) are registered as buffers, so they are the initializers a dtcc
compile must freeze.
"""
import math

import torch
import torch.nn.functional as F


class MLP(torch.nn.Module):
    def __init__(self, inputs=32, hidden=64, classes=10, layers=3):
        super().__init__()
        dims = [inputs] + [hidden] * (layers - 1) + [classes]
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, x, labels):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        return F.cross_entropy(x, labels)


class GPTBlock(torch.nn.Module):
    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.proj = torch.nn.Linear(hidden, hidden)
        self.ln2 = torch.nn.LayerNorm(hidden)
        self.fc1 = torch.nn.Linear(hidden, 4 * hidden)
        self.fc2 = torch.nn.Linear(4 * hidden, hidden)
        mask = torch.triu(torch.full((seq, seq), -1e9), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        shape = (b, s, self.heads, h // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.heads) + self.mask
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, vocab=64, seq=16, hidden=32, heads=4, layers=2):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, hidden)
        self.pos = torch.nn.Parameter(torch.randn(seq, hidden) * 0.02)
        self.blocks = torch.nn.ModuleList(GPTBlock(hidden, heads, seq) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def logits(self, ids):
        x = self.tok(ids) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))

    def forward(self, ids, labels):
        logits = self.logits(ids)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaBlock(torch.nn.Module):
    def __init__(self, hidden, heads, ffn, seq):
        super().__init__()
        self.heads = heads
        self.norm1 = RMSNorm(hidden)
        self.q = torch.nn.Linear(hidden, hidden, bias=False)
        self.k = torch.nn.Linear(hidden, hidden, bias=False)
        self.v = torch.nn.Linear(hidden, hidden, bias=False)
        self.o = torch.nn.Linear(hidden, hidden, bias=False)
        self.norm2 = RMSNorm(hidden)
        self.gate = torch.nn.Linear(hidden, ffn, bias=False)
        self.up = torch.nn.Linear(hidden, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, hidden, bias=False)
        hd = hidden // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        angles = torch.outer(torch.arange(seq).float(), inv)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), -1e9), diagonal=1))

    def rotate(self, x):
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.cos + rotated * self.sin

    def forward(self, x):
        b, s, h = x.shape
        y = self.norm1(x)
        shape = (b, s, self.heads, h // self.heads)
        q, k, v = (p(y).reshape(shape).transpose(1, 2) for p in (self.q, self.k, self.v))
        q, k = self.rotate(q), self.rotate(k)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.heads) + self.mask
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.o(y)
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Llama(torch.nn.Module):
    def __init__(self, vocab=64, seq=16, hidden=32, heads=4, layers=2, ffn=64):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, hidden)
        self.blocks = torch.nn.ModuleList(
            LlamaBlock(hidden, heads, ffn, seq) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids, labels):
        x = self.tok(ids)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


class MixerBlock(torch.nn.Module):
    """Token mixing (an MLP across the patches of each channel), then
    channel mixing. Token mixing is either written as in MLP-Mixer's
    reference code, Linear layers on the transposed activation (a MatMul of
    a 3-D activation by a 2-D weight, whose gradient is a 2-D x 3-D
    MatMul), or with the weights on the left (`W @ x`: 2-D x 3-D MatMuls in
    the forward pass). The second token-mixing layer has no bias: a bias
    per patch is removed by the LayerNorms over channels after it, so its
    gradient would be rounding noise."""

    def __init__(self, patches, channels, token_hidden, channel_hidden, weights_left):
        super().__init__()
        self.weights_left = weights_left
        self.ln1 = torch.nn.LayerNorm(channels)
        self.token1 = torch.nn.Linear(patches, token_hidden)
        self.token2 = torch.nn.Linear(token_hidden, patches, bias=False)
        self.ln2 = torch.nn.LayerNorm(channels)
        self.channel1 = torch.nn.Linear(channels, channel_hidden)
        self.channel2 = torch.nn.Linear(channel_hidden, channels)

    def forward(self, x):
        y = self.ln1(x)
        if self.weights_left:
            y = F.gelu(self.token1.weight @ y + self.token1.bias[:, None])
            y = self.token2.weight @ y
        else:
            y = self.token2(F.gelu(self.token1(y.transpose(1, 2)))).transpose(1, 2)
        x = x + y
        return x + self.channel2(F.gelu(self.channel1(self.ln2(x))))


class Mixer(torch.nn.Module):
    def __init__(self, patches=16, patch_dim=12, channels=32, token_hidden=24,
                 channel_hidden=64, classes=10, layers=2):
        super().__init__()
        self.embed = torch.nn.Linear(patch_dim, channels)
        self.blocks = torch.nn.ModuleList(
            MixerBlock(patches, channels, token_hidden, channel_hidden,
                       weights_left=i % 2 == 1)
            for i in range(layers))
        self.ln = torch.nn.LayerNorm(channels)
        self.head = torch.nn.Linear(channels, classes)

    def forward(self, x, labels):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return F.cross_entropy(self.head(self.ln(x).mean(dim=1)), labels)


def build(name, **sizes):
    return {"mlp": MLP, "gpt": GPT, "llama": Llama, "mixer": Mixer}[name](**sizes)


def example_inputs(name, model, batch, rng):
    """A batch of (input, labels) numpy arrays for `model`."""
    import numpy as np
    if name == "mlp":
        x = rng.standard_normal((batch, model.layers[0].in_features)).astype(np.float32)
        labels = rng.integers(0, model.layers[-1].out_features, batch).astype(np.int64)
        return {"x": x, "labels": labels}
    if name == "mixer":
        patches = model.blocks[0].token1.in_features
        x = rng.standard_normal((batch, patches, model.embed.in_features)).astype(np.float32)
        labels = rng.integers(0, model.head.out_features, batch).astype(np.int64)
        return {"x": x, "labels": labels}
    vocab = model.tok.num_embeddings
    seq = model.blocks[0].mask.shape[0]
    tokens = rng.integers(0, vocab, (batch, seq + 1)).astype(np.int64)
    return {"ids": tokens[:, :-1].copy(), "labels": tokens[:, 1:].copy()}


def export(name, model, batch, path):
    import numpy as np
    sample = example_inputs(name, model, batch, np.random.default_rng(0))
    names = list(sample)
    torch.onnx.export(model, tuple(torch.from_numpy(sample[n]) for n in names), path,
                      input_names=names, output_names=["loss"], opset_version=17,
                      do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    return names
