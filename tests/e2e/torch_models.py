"""PyTorch reference models for dtcc's end-to-end tests and benchmarks.

MLP, GPT (learned positions, LayerNorm, GELU), Llama (RMSNorm, rotary
embeddings, SwiGLU) and MLP-Mixer (token mixing across patches) small
enough for CPU tests; each forward returns the mean cross-entropy loss, as
a training export needs. Buffers (masks, rotary
tables) are registered as buffers, so they are the initializers a dtcc
compile must freeze.

Vision and audio models written as a PyTorch user writes them, from
torch.nn modules: ViT (a strided Conv2d patch embedding, a class token,
nn.TransformerEncoderLayer blocks), ResNet (torchvision's BasicBlock with
BatchNorm2d, the stem's MaxPool, strided stages with 1x1 projection
shortcuts, AdaptiveAvgPool2d; `ResNet(layers=(2, 2, 2, 2), widths=(64,
128, 256, 512), stem=7)` is ResNet-18), UNet (two levels of Conv2d +
GroupNorm down through MaxPool and AvgPool, up through ConvTranspose2d and
bilinear F.interpolate, skip concatenations, per-pixel cross-entropy) and
AudioNet (a raw-waveform classifier: strided Conv1d stem, BatchNorm1d,
MaxPool1d, residual 1-D blocks, AdaptiveAvgPool1d) and MobileNet (a small
MobileNetV3: depthwise convolutions, ReLU6 and a clamp as Clip, Hardswish,
squeeze-and-excitation gated by Hardsigmoid).

Attention written outside nn.Module layers: Swin (a shifted-window
attention in the model's own forward: torch.roll, window partition and
reverse by view/permute/reshape, a relative bias parameter read at the top
level) and PaddedText (nn.Embedding with padding_idx, nn.MultiheadAttention
with a key_padding_mask built from the ids, padded positions zeroed by
torch.where: the exported zeros are a Constant over 1 KiB).

Norms and distances: ProtoNet (nn.utils.weight_norm, F.normalize,
torch.cdist, whose export is a root of a sum of squares, with zero
distances in it).

Recurrent layers: RnnLM (a bidirectional nn.LSTM of two layers, nn.GRU
and nn.RNN with ReLU, exported as ONNX LSTM, GRU and RNN nodes).

Random draws in the forward pass: VAE (a variational autoencoder whose
reparameterization draws torch.randn_like, exported as RandomNormalLike,
with a stochastic-depth decoder block kept per sample by torch.bernoulli
and a dropout-like mask from torch.rand_like: Bernoulli and
RandomUniformLike).

Architectures beyond those (the compiler must not know them by shape):
DenseNet (dense blocks: every layer's output concatenated to its input,
BatchNorm2d + ReLU before each convolution, a transition of 1x1
convolution and AvgPool2d), EffNet (an EfficientNet MBConv block: SiLU,
a depthwise 5x5 convolution, squeeze-and-excitation gated by Sigmoid, a
residual projection, label smoothing written out as PyTorch 1.13 cannot
export it), ConvNeXt (a 4x4 patchify stem, depthwise 7x7 convolutions,
LayerNorm over channels-last via permute, a per-channel layer scale, a
channels-first LayerNorm written as means, a strided downsampling),
Seq2Seq (nn.Transformer, encoder and decoder with cross-attention, a
causal mask from torch.triu, cross-entropy with ignore_index), WaveNet
(dilated causal Conv1d by F.pad, tanh x sigmoid gates, residual and skip
1x1 convolutions, per-time-step cross-entropy), GCN (a graph
convolution: the adjacency normalized in the forward by rsqrt degrees,
batched matmuls, mean and max pooling, BCE with logits and a pos_weight),
Losses (NLL with ignore_index, a Huber loss by torch.where, KL divergence,
cosine similarity, pairwise distances with a triplet margin, a ranking
margin, a focal loss through one_hot, softplus and logsigmoid), SuperRes
(PReLU, PixelShuffle exported as DepthToSpace, a bilinear upsampling
residual, an L1 loss), TasNet (a Conv-TasNet separator: a strided
encoder, a global GroupNorm(1, C), a dilated depthwise Conv1d, a
ConvTranspose1d decoder, the negative SI-SNR through log10) and Pointer
(additive attention scores over a set, masked_fill, cumsum, gather,
logsumexp) and Registration (VoxelMorph's deformable registration of
volumes: Conv3d layers predict a displacement field, F.grid_sample warps
the moving volume trilinearly at the identity grid plus that field, a
5-D GridSample, and the loss adds the field's smoothness to the warped
volume's squared error) and RoiHead (a detector's second stage:
torchvision's roi_align of given boxes over a strided convolutional
feature map, adaptive sampling, a box classifier).

And more of them: Conformer (a half-step feed-forward, attention and the
convolution module: F.glu, a depthwise Conv1d, BatchNorm1d), PointNet (a
predicted 3x3 transform by torch.bmm, max pooling over points), T5Bias
(relative position buckets computed in the forward pass from integer
distances, an nn.Embedding of per-head biases), MoE (top-2 gating by
torch.topk and scatter, experts' weights stacked and applied by
torch.einsum), ModConv (StyleGAN2's modulated convolution: per-sample
weights, a grouped F.conv2d over the batch folded into channels), Capsule
(dynamic routing unrolled) and LinearAttention (causal linear attention by
torch.cumsum of outer products).
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


class ViT(torch.nn.Module):
    """[b, channels, image, image] images -> classes."""

    def __init__(self, image=16, patch=4, channels=3, hidden=32, heads=4, layers=2,
                 mlp=64, classes=10):
        super().__init__()
        tokens = (image // patch) ** 2
        self.patch = torch.nn.Conv2d(channels, hidden, patch, stride=patch)
        self.cls = torch.nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        self.pos = torch.nn.Parameter(torch.randn(1, tokens + 1, hidden) * 0.02)
        self.blocks = torch.nn.ModuleList(torch.nn.TransformerEncoderLayer(
            hidden, heads, mlp, dropout=0.0, activation="gelu", batch_first=True,
            norm_first=True) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x, labels):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return F.cross_entropy(self.head(self.norm(x[:, 0])), labels)


class BasicBlock(torch.nn.Module):
    """torchvision's ResNet BasicBlock."""

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(planes)
        self.relu = torch.nn.ReLU(inplace=True)
        self.conv2 = torch.nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = torch.nn.Sequential(
                torch.nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                torch.nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(torch.nn.Module):
    """torchvision's ResNet of BasicBlocks; stem=7 is its 7x7 stride-2 stem,
    stem=3 a 3x3 stride-1 one for small images (both then MaxPool(3, 2, 1))."""

    def __init__(self, layers=(2, 1, 1), widths=(8, 16, 32), classes=10, stem=3,
                 channels=3):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, widths[0], stem, 2 if stem == 7 else 1,
                                     stem // 2, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(widths[0])
        self.relu = torch.nn.ReLU(inplace=True)
        self.maxpool = torch.nn.MaxPool2d(3, 2, 1)
        stages, inplanes = [], widths[0]
        for i, (blocks, planes) in enumerate(zip(layers, widths)):
            stage = []
            for j in range(blocks):
                stage.append(BasicBlock(inplanes, planes, 2 if i > 0 and j == 0 else 1))
                inplanes = planes
            stages.append(torch.nn.Sequential(*stage))
        self.layers = torch.nn.Sequential(*stages)
        self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(inplanes, classes)

    def forward(self, x, labels):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.avgpool(self.layers(x))
        return F.cross_entropy(self.fc(torch.flatten(x, 1)), labels)


def unet_block(cin, cout, groups=4):
    return torch.nn.Sequential(
        torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.GroupNorm(groups, cout),
        torch.nn.ReLU(),
        torch.nn.Conv2d(cout, cout, 3, padding=1), torch.nn.GroupNorm(groups, cout),
        torch.nn.ReLU())


class UNet(torch.nn.Module):
    """[b, channels, s, s] images -> per-pixel classes [b, s, s]."""

    def __init__(self, channels=3, classes=4, width=8):
        super().__init__()
        self.enc1 = unet_block(channels, width)
        self.enc2 = unet_block(width, 2 * width)
        self.mid = unet_block(2 * width, 4 * width)
        self.up2 = torch.nn.ConvTranspose2d(4 * width, 2 * width, 2, stride=2)
        self.dec2 = unet_block(4 * width, 2 * width)
        self.up1 = torch.nn.Conv2d(2 * width, width, 1)
        self.dec1 = unet_block(2 * width, width)
        self.out = torch.nn.Conv2d(width, classes, 1)

    def forward(self, x, labels):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.avg_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        u1 = F.interpolate(d2, scale_factor=2.0, mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([self.up1(u1), e1], dim=1))
        return F.cross_entropy(self.out(d1), labels)


class BasicBlock1d(torch.nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm1d(planes)
        self.conv2 = torch.nn.Conv1d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm1d(planes)
        self.shortcut = None
        if stride != 1 or inplanes != planes:
            self.shortcut = torch.nn.Sequential(
                torch.nn.Conv1d(inplanes, planes, 1, stride, bias=False),
                torch.nn.BatchNorm1d(planes))

    def forward(self, x):
        identity = x if self.shortcut is None else self.shortcut(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class AudioNet(torch.nn.Module):
    """[b, 1, samples] waveforms -> classes."""

    def __init__(self, classes=6, width=16):
        super().__init__()
        self.stem = torch.nn.Conv1d(1, width, 9, stride=4, padding=4, bias=False)
        self.bn = torch.nn.BatchNorm1d(width)
        self.pool = torch.nn.MaxPool1d(4)
        self.blocks = torch.nn.Sequential(
            BasicBlock1d(width, width), BasicBlock1d(width, 2 * width, 2),
            BasicBlock1d(2 * width, 2 * width))
        self.gap = torch.nn.AdaptiveAvgPool1d(1)
        self.head = torch.nn.Linear(2 * width, classes)

    def forward(self, x, labels):
        x = self.pool(F.relu(self.bn(self.stem(x))))
        x = self.gap(self.blocks(x)).squeeze(-1)
        return F.cross_entropy(self.head(x), labels)


class InvertedResidual(torch.nn.Module):
    """torchvision's MobileNetV2/V3 block: a 1x1 expansion, a depthwise 3x3
    convolution, squeeze-and-excitation (V3) gated by Hardsigmoid, a 1x1
    projection, and the residual where the shapes allow it."""

    def __init__(self, cin, expand, cout, stride, act, se):
        super().__init__()
        hidden = cin * expand
        self.expand = torch.nn.Sequential(
            torch.nn.Conv2d(cin, hidden, 1, bias=False), torch.nn.BatchNorm2d(hidden),
            act())
        self.depthwise = torch.nn.Sequential(
            torch.nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            torch.nn.BatchNorm2d(hidden), act())
        self.se = torch.nn.Sequential(
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Conv2d(hidden, hidden // 4, 1),
            torch.nn.ReLU(), torch.nn.Conv2d(hidden // 4, hidden, 1),
            torch.nn.Hardsigmoid()) if se else None
        self.project = torch.nn.Sequential(
            torch.nn.Conv2d(hidden, cout, 1, bias=False), torch.nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        h = self.depthwise(self.expand(x))
        if self.se is not None:
            h = h * self.se(h)
        h = self.project(h)
        return x + h if self.residual else h


class MobileNet(torch.nn.Module):
    """A small MobileNetV3 as torchvision writes it: a Hardswish stem,
    inverted residual blocks with ReLU6 (Clip 0..6 in ONNX) or Hardswish
    and squeeze-and-excitation, a 1x1 head, and a classifier whose hidden
    layer is clamped to [-2, 2] (Clip with both bounds)."""

    def __init__(self, classes=10, channels=3):
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(channels, 16, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(16),
            torch.nn.Hardswish())
        self.blocks = torch.nn.Sequential(
            InvertedResidual(16, 4, 16, 1, torch.nn.ReLU6, False),
            InvertedResidual(16, 4, 24, 2, torch.nn.Hardswish, True),
            InvertedResidual(24, 3, 24, 1, torch.nn.Hardswish, True))
        self.head = torch.nn.Sequential(
            torch.nn.Conv2d(24, 48, 1, bias=False), torch.nn.BatchNorm2d(48),
            torch.nn.Hardswish(), torch.nn.AdaptiveAvgPool2d(1))
        self.hidden = torch.nn.Linear(48, 32)
        self.fc = torch.nn.Linear(32, classes)

    def forward(self, x, labels):
        x = torch.flatten(self.head(self.blocks(self.stem(x))), 1)
        x = torch.clamp(self.hidden(x), -2.0, 2.0)
        return F.cross_entropy(self.fc(x), labels)


class Swin(torch.nn.Module):
    """[b, 3, 16, 16] images -> classes: one shifted-window attention block
    whose attention core, relative bias and window shuffles sit in the
    model's forward, between its top-level modules."""

    def __init__(self, channels=8, window=2, shift=1, grid=4, heads=2, classes=5):
        super().__init__()
        self.window, self.shift, self.grid, self.heads = window, shift, grid, heads
        self.patch = torch.nn.Conv2d(3, channels, 16 // grid, stride=16 // grid)
        self.ln1 = torch.nn.LayerNorm(channels)
        self.qkv = torch.nn.Linear(channels, 3 * channels)
        self.proj = torch.nn.Linear(channels, channels)
        self.ln2 = torch.nn.LayerNorm(channels)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(channels, 2 * channels),
                                       torch.nn.GELU(),
                                       torch.nn.Linear(2 * channels, channels))
        self.bias = torch.nn.Parameter(0.1 * torch.randn(heads, window ** 2, window ** 2))
        self.head = torch.nn.Linear(channels, classes)

    def forward(self, x, labels):
        x = self.patch(x).flatten(2).transpose(1, 2)
        b, tokens, c = x.shape
        g, w, h = self.grid, self.window, self.heads
        y = torch.roll(self.ln1(x).view(b, g, g, c), (-self.shift, -self.shift), (1, 2))
        y = y.view(b, g // w, w, g // w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, c)
        n = y.shape[0]
        q, k, v = self.qkv(y).reshape(n, w * w, 3, h, c // h).permute(2, 0, 3, 1, 4)
        a = (q * (c // h) ** -0.5) @ k.transpose(-2, -1) + self.bias.unsqueeze(0)
        y = (a.softmax(-1) @ v).transpose(1, 2).reshape(n, w * w, c)
        y = self.proj(y).view(b, g // w, g // w, w, w, c).permute(0, 1, 3, 2, 4, 5)
        y = torch.roll(y.reshape(b, g, g, c), (self.shift, self.shift), (1, 2))
        x = x + y.reshape(b, tokens, c)
        x = x + self.mlp(self.ln2(x))
        return F.cross_entropy(self.head(x.mean(1)), labels)


class PaddedText(torch.nn.Module):
    """[b, seq] token ids, 0 = padding -> classes."""

    def __init__(self, vocab=32, hidden=16, heads=2, seq=8, classes=3):
        super().__init__()
        self.seq = seq
        self.tok = torch.nn.Embedding(vocab, hidden, padding_idx=0)
        self.attn = torch.nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.ln = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, ids, labels):
        pad = ids == 0
        x = self.tok(ids)
        y, _ = self.attn(x, x, x, key_padding_mask=pad, need_weights=False)
        x = self.ln(x + y)
        x = torch.where(pad.unsqueeze(-1), torch.zeros_like(x), x)
        return F.cross_entropy(self.head(x.sum(1)), labels)


class VAE(torch.nn.Module):
    """[b, inputs] -> the negative evidence lower bound: reconstruction
    error plus the KL divergence of q(z | x) from N(0, I), with z drawn by
    the reparameterization trick."""

    def __init__(self, inputs=32, hidden=64, latent=8, keep=0.8):
        super().__init__()
        self.keep = keep
        self.enc = torch.nn.Linear(inputs, hidden)
        self.mu = torch.nn.Linear(hidden, latent)
        self.logvar = torch.nn.Linear(hidden, latent)
        self.dec = torch.nn.Linear(latent, hidden)
        self.block = torch.nn.Linear(hidden, hidden)
        self.out = torch.nn.Linear(hidden, inputs)

    def forward(self, x):
        h = torch.tanh(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
        d = torch.tanh(self.dec(z))
        # Stochastic depth: the residual block kept per sample with
        # probability `keep` (Bernoulli), its units dropped at 1/8
        # (RandomUniformLike below a threshold).
        kept = torch.bernoulli(torch.full((x.shape[0], 1), self.keep)) / self.keep
        units = (torch.rand_like(d) >= 0.125).to(d.dtype) / 0.875
        d = d + kept * units * torch.tanh(self.block(d))
        recon = self.out(d)
        rec = ((recon - x) ** 2).sum(1).mean()
        kl = (-0.5 * (1 + logvar - mu * mu - logvar.exp()).sum(1)).mean()
        return rec + kl


class RnnLM(torch.nn.Module):
    """[b, seq] token ids -> next-token cross-entropy through an embedding,
    a bidirectional two-layer LSTM (batch first), a Linear from both
    directions' features, a GRU, an RNN with ReLU (sequence first) and an
    output layer: PyTorch exports the recurrent layers as ONNX LSTM, GRU
    and RNN nodes (its gate order and bias layout reordered into ONNX's)."""

    def __init__(self, vocab=24, hidden=16, seq=8):
        super().__init__()
        self.seq = seq
        self.tok = torch.nn.Embedding(vocab, hidden)
        self.lstm = torch.nn.LSTM(hidden, hidden, num_layers=2, batch_first=True,
                                  bidirectional=True)
        self.proj = torch.nn.Linear(2 * hidden, hidden)
        self.gru = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.rnn = torch.nn.RNN(hidden, hidden, nonlinearity="relu")
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, ids, labels):
        x, _ = self.lstm(self.tok(ids))
        x, _ = self.gru(torch.tanh(self.proj(x)))
        x, _ = self.rnn(x.transpose(0, 1))
        logits = self.head(x.transpose(0, 1))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


class ProtoNet(torch.nn.Module):
    """[b, inputs] -> classes by the distance to a learned prototype per
    class (a prototypical network): a weight-normalized encoder
    (nn.utils.weight_norm: ReduceL2 of its direction), F.normalize of the
    embeddings, torch.cdist to the prototypes for the logits and between the
    batch's own embeddings (zero distances on the diagonal) for a spread
    penalty."""

    def __init__(self, inputs=12, hidden=16, embed=8, classes=4):
        super().__init__()
        self.enc = torch.nn.utils.weight_norm(torch.nn.Linear(inputs, hidden))
        self.out = torch.nn.Linear(hidden, embed)
        self.protos = torch.nn.Parameter(torch.randn(classes, embed) * 0.5)

    def forward(self, x, labels):
        z = F.normalize(self.out(torch.tanh(self.enc(x))), dim=-1)
        logits = -torch.cdist(z, self.protos) ** 2
        spread = torch.cdist(z, z).mean()
        return F.cross_entropy(logits, labels) - 0.1 * spread


class Recommender(torch.nn.Module):
    """A DLRM-style click model: dense features through a bottom MLP, three
    sparse fields pooled by nn.EmbeddingBag (sum, mean, max over each bag of
    ids), the pairwise dot products of the four feature vectors, a top MLP
    and a logistic loss. PyTorch exports EmbeddingBag as an ONNX Loop over
    the bags (1.13: a scan output; 2.x: a carried sequence)."""

    def __init__(self, rows=40, dim=8, dense=4, hidden=16, bag=5):
        super().__init__()
        self.bag = bag
        self.bags = torch.nn.ModuleList(
            [torch.nn.EmbeddingBag(rows, dim, mode=m) for m in ("sum", "mean", "max")])
        self.bottom = torch.nn.Linear(dense, dim)
        self.top1 = torch.nn.Linear(dim + 6, hidden)
        self.top2 = torch.nn.Linear(hidden, 1)

    def forward(self, dense, ids, clicks):
        d = torch.relu(self.bottom(dense))
        f = torch.stack([d] + [b(ids[:, i]) for i, b in enumerate(self.bags)], 1)
        z = torch.bmm(f, f.transpose(1, 2))
        upper = torch.triu_indices(4, 4, 1)
        pairs = z[:, upper[0], upper[1]]
        logit = self.top2(torch.relu(self.top1(torch.cat([d, pairs], 1)))).squeeze(1)
        return F.binary_cross_entropy_with_logits(logit, clicks)


class Flow(torch.nn.Module):
    """[b, features] -> the negative log-likelihood of a normalizing flow:
    an invertible linear map (its log |det W| from torch.det, exported as
    ONNX Det) and an affine coupling layer (half the features scaled and
    shifted by an MLP of the other half), under a standard normal."""

    def __init__(self, features=8, hidden=16):
        super().__init__()
        self.features = features
        q, _ = torch.linalg.qr(torch.randn(features, features))
        self.w = torch.nn.Parameter(q)
        self.b = torch.nn.Parameter(torch.zeros(features))
        half = features // 2
        self.net = torch.nn.Sequential(torch.nn.Linear(half, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, 2 * half))

    def forward(self, x):
        z = x @ self.w.t() + self.b
        z1, z2 = z.chunk(2, 1)
        s, t = self.net(z1).chunk(2, 1)
        s = torch.tanh(s)
        z = torch.cat([z1, z2 * torch.exp(s) + t], 1)
        logdet = torch.log(torch.abs(torch.det(self.w))) + s.sum(1)
        return (0.5 * (z * z).sum(1) - logdet).mean()


class MaskedLM(torch.nn.Module):
    """[b, seq] token ids with some positions masked -> a masked language
    model's loss, as training scripts write it with boolean indexing:
    cross-entropy over the masked positions' logits and labels
    (`logits[mask]`, `labels[mask]`), plus a penalty on the masked
    positions' features (`(h[mask] ** 2).mean()`). PyTorch exports each
    `x[mask]` as NonZero -> Transpose -> GatherND, rows whose number the
    mask decides."""

    def __init__(self, vocab=32, hidden=16, seq=12):
        super().__init__()
        self.seq = seq
        self.tok = torch.nn.Embedding(vocab, hidden)
        self.pos = torch.nn.Parameter(0.1 * torch.randn(seq, hidden))
        self.mix = torch.nn.Linear(seq, seq)
        self.norm = torch.nn.LayerNorm(hidden)
        self.ff = torch.nn.Linear(hidden, hidden)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, ids, mask, labels):
        x = self.tok(ids) + self.pos
        x = x + self.mix(x.transpose(1, 2)).transpose(1, 2)
        h = torch.tanh(self.ff(self.norm(x)))
        logits = self.head(h)
        loss = F.cross_entropy(logits[mask], labels[mask])
        return loss + 0.1 * (h[mask] ** 2).mean()


class IndexAdd(torch.nn.Module):
    """[b, inputs] rows, some picked by `torch.nonzero(mask)` -> a regression
    loss after the picked rows get a transformed copy of themselves added
    (`index_add`): PyTorch exports the rows as NonZero -> Gather and the
    update as ScatterElements, its shape read from the picked rows."""

    def __init__(self, inputs=8, hidden=12):
        super().__init__()
        self.enc = torch.nn.Linear(inputs, hidden)
        self.upd = torch.nn.Linear(hidden, hidden)
        self.out = torch.nn.Linear(hidden, 1)

    def forward(self, x, mask, y):
        z = self.enc(x)
        idx = torch.nonzero(mask).squeeze(1)
        z = z.index_add(0, idx, torch.tanh(self.upd(z[idx])))
        return ((self.out(torch.relu(z)).squeeze(1) - y) ** 2).mean()


class QatNet(torch.nn.Module):
    """[b, 3, 8, 8] images -> classes, trained as quantization-aware
    training does (torch.ao.quantization.prepare_qat): FakeQuantize modules
    on the input, the activations (per tensor, uint8) and the convolution's
    and head's weights (per channel, int8), their observers calibrated on
    one batch and then frozen, as the fine-tuning phase of QAT runs; and
    torch.fake_quantize_per_tensor_affine with a scale that clamps part of
    its input (the straight-through gradient's zeros). PyTorch exports each
    fake quantization as ONNX QuantizeLinear + DequantizeLinear."""

    def __init__(self, channels=8, classes=4, size=8):
        super().__init__()
        import torch.ao.quantization as tq
        net = torch.nn.Sequential(tq.QuantStub(), torch.nn.Conv2d(3, channels, 3, padding=1),
                                  torch.nn.ReLU(), torch.nn.Flatten(),
                                  torch.nn.Linear(channels * size * size, classes),
                                  tq.DeQuantStub())
        net.qconfig = tq.QConfig(
            activation=tq.FakeQuantize.with_args(observer=tq.MovingAverageMinMaxObserver,
                                                 quant_min=0, quant_max=255),
            weight=tq.default_per_channel_weight_fake_quant)
        net.train()
        self.net = tq.prepare_qat(net)
        gen = torch.Generator().manual_seed(3)
        with torch.no_grad():
            self.net(torch.randn(16, 3, size, size, generator=gen))
        self.net.apply(tq.disable_observer)

    def forward(self, x, labels):
        h = self.net[2](self.net[1](self.net[0](x)))
        h = torch.fake_quantize_per_tensor_affine(h, 0.01, 0, -128, 127)
        logits = self.net[5](self.net[4](self.net[3](h)))
        return F.cross_entropy(logits, labels)


class SpectrogramNet(torch.nn.Module):
    """[b, samples] waveforms -> classes through a learned FIR filter (a
    1-D convolution), a log-power spectrogram (torch.stft of Hann-windowed
    frames, one-sided, not centred) averaged over time, and a linear head;
    the filter's gradient passes back through the STFT. PyTorch 1.13
    cannot export torch.stft (PyTorch 2's exporters write ONNX STFT), so
    export_onnx writes the same model's graph by hand, the module's
    parameters as its initializers: Conv, STFT, Mul and ReduceSum of the
    real and imaginary parts, Log, ReduceMean, Gemm,
    SoftmaxCrossEntropyLoss."""

    def __init__(self, n_fft=32, hop=8, taps=5, samples=256, classes=4):
        super().__init__()
        self.n_fft, self.hop, self.samples = n_fft, hop, samples
        self.register_buffer("window", torch.hann_window(n_fft))
        self.fir = torch.nn.Conv1d(1, 1, taps, padding=taps // 2)
        self.head = torch.nn.Linear(n_fft // 2 + 1, classes)

    def forward(self, x, labels):
        y = self.fir(x.unsqueeze(1)).squeeze(1)
        z = torch.stft(y, self.n_fft, self.hop, window=self.window, center=False,
                       onesided=True, return_complex=False)   # [b, bins, frames, 2]
        h = torch.log((z * z).sum(-1) + 1e-3).mean(-1)          # [b, bins]
        return F.cross_entropy(self.head(h), labels)

    def export_onnx(self, path, batch):
        import numpy as np
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        taps = self.fir.kernel_size[0]
        tensors = {"window": self.window.numpy(),
                   "fir.weight": self.fir.weight.detach().numpy(),
                   "fir.bias": self.fir.bias.detach().numpy(),
                   "head.weight": self.head.weight.detach().numpy(),
                   "head.bias": self.head.bias.detach().numpy(),
                   "hop": np.array(self.hop, np.int64), "one": np.array([1], np.int64),
                   "three": np.array([3], np.int64)}
        node = helper.make_node
        # A float initializer would be a parameter: the constant is a node.
        eps = numpy_helper.from_array(np.array(1e-3, np.float32), "eps")
        nodes = [node("Constant", [], ["eps"], value=eps),
                 node("Unsqueeze", ["x", "one"], ["x1"]),
                 node("Conv", ["x1", "fir.weight", "fir.bias"], ["y1"],
                      kernel_shape=[taps], pads=[taps // 2, taps // 2]),
                 node("Transpose", ["y1"], ["y3"], perm=[0, 2, 1]),
                 node("STFT", ["y3", "hop", "window"], ["z"], onesided=1),
                 node("Mul", ["z", "z"], ["zz"]),
                 node("ReduceSum", ["zz", "three"], ["power"], keepdims=0),
                 node("Add", ["power", "eps"], ["shifted"]),
                 node("Log", ["shifted"], ["logp"]),
                 node("ReduceMean", ["logp"], ["h"], axes=[1], keepdims=0),
                 node("Gemm", ["h", "head.weight", "head.bias"], ["logits"], transB=1),
                 node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"])]
        graph = helper.make_graph(
            nodes, "spectrogram",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, self.samples]),
             helper.make_tensor_value_info("labels", TensorProto.INT64, [batch])],
            [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
            [numpy_helper.from_array(v, k) for k, v in tensors.items()])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                    producer_name="pytorch"), path)


class DenseNet(torch.nn.Module):
    """[b, 3, s, s] images -> classes through one dense block."""

    def __init__(self, classes=5, growth=4, layers=3):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        c = 8
        self.block = nn.ModuleList()
        for _ in range(layers):
            self.block.append(nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(),
                                            nn.Conv2d(c, growth, 3, padding=1, bias=False)))
            c += growth
        self.trans = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(),
                                   nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2))
        self.norm = nn.BatchNorm2d(c // 2)
        self.fc = nn.Linear(c // 2, classes)

    def forward(self, x, labels):
        h = self.stem(x)
        for layer in self.block:
            h = torch.cat([h, layer(h)], 1)
        h = F.relu(self.norm(self.trans(h)))
        return F.cross_entropy(self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1)), labels)


class SqueezeExcite(torch.nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.fc1 = torch.nn.Conv2d(c, c // r, 1)
        self.fc2 = torch.nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.fc2(F.silu(self.fc1(s))))


class EffNet(torch.nn.Module):
    """[b, 3, s, s] images -> classes through one MBConv block."""

    def __init__(self, classes=5, smoothing=0.1):
        super().__init__()
        nn = torch.nn
        self.smoothing = smoothing
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.SiLU())
        self.expand = nn.Sequential(nn.Conv2d(8, 24, 1, bias=False), nn.BatchNorm2d(24), nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(24, 24, 5, 1, 2, groups=24, bias=False),
                                nn.BatchNorm2d(24), nn.SiLU())
        self.se = SqueezeExcite(24)
        self.proj = nn.Sequential(nn.Conv2d(24, 8, 1, bias=False), nn.BatchNorm2d(8))
        self.fc = nn.Sequential(nn.Conv2d(8, 16, 1), nn.SiLU(), nn.AdaptiveAvgPool2d(1),
                                nn.Flatten(), nn.Linear(16, classes))

    def forward(self, x, labels):
        h = self.stem(x)
        h = h + self.proj(self.se(self.dw(self.expand(h))))
        z = self.fc(h)
        # F.cross_entropy(label_smoothing=) as its definition.
        return ((1 - self.smoothing) * F.cross_entropy(z, labels)
                - self.smoothing * F.log_softmax(z, -1).mean())


class LayerNorm2d(torch.nn.Module):
    """ConvNeXt's channels-first LayerNorm, written out."""

    def __init__(self, c, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(c))
        self.bias = torch.nn.Parameter(torch.zeros(c))
        self.eps = eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        v = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(v + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class ConvNeXtBlock(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c, eps=1e-6)
        self.pw1 = torch.nn.Linear(c, 4 * c)
        self.pw2 = torch.nn.Linear(4 * c, c)
        self.gamma = torch.nn.Parameter(0.1 * torch.ones(c))

    def forward(self, x):
        h = self.dw(x).permute(0, 2, 3, 1)
        h = self.pw2(F.gelu(self.pw1(self.norm(h))))
        return x + (self.gamma * h).permute(0, 3, 1, 2)


class ConvNeXt(torch.nn.Module):
    """[b, 3, 16, 16] images -> classes: two stages of one block."""

    def __init__(self, classes=5):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 4, 4), LayerNorm2d(16))
        self.stage1 = ConvNeXtBlock(16)
        self.down = torch.nn.Sequential(LayerNorm2d(16), torch.nn.Conv2d(16, 24, 2, 2))
        self.stage2 = ConvNeXtBlock(24)
        self.norm = torch.nn.LayerNorm(24)
        self.fc = torch.nn.Linear(24, classes)

    def forward(self, x, labels):
        h = self.stage2(self.down(self.stage1(self.stem(x))))
        return F.cross_entropy(self.fc(self.norm(h.mean([-2, -1]))), labels)


class Seq2Seq(torch.nn.Module):
    """[b, src] and [b, 1 + tgt] token ids (0 = padding) -> the decoder's
    next-token cross-entropy, teacher-forced."""

    def __init__(self, vocab=17, hidden=32, heads=4, seq=16):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, hidden)
        self.pos = torch.nn.Parameter(0.02 * torch.randn(1, seq, hidden))
        self.transformer = torch.nn.Transformer(hidden, heads, 1, 1, 2 * hidden,
                                                dropout=0.0, batch_first=True)
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, src, tgt):
        t = tgt.shape[1] - 1
        mask = torch.triu(torch.full((t, t), float("-inf")), 1)
        s = self.tok(src) + self.pos[:, :src.shape[1]]
        d = self.tok(tgt[:, :-1]) + self.pos[:, :t]
        h = self.transformer(s, d, tgt_mask=mask)
        return F.cross_entropy(self.out(h).reshape(-1, self.out.out_features),
                               tgt[:, 1:].reshape(-1), ignore_index=0)


class WaveNet(torch.nn.Module):
    """[b, 1, samples] waveforms -> a class per sample (causal)."""

    def __init__(self, classes=8, channels=16, layers=4):
        super().__init__()
        conv = torch.nn.Conv1d
        self.inp = conv(1, channels, 1)
        self.filt = torch.nn.ModuleList(conv(channels, channels, 2, dilation=2 ** i)
                                        for i in range(layers))
        self.gate = torch.nn.ModuleList(conv(channels, channels, 2, dilation=2 ** i)
                                        for i in range(layers))
        self.res = torch.nn.ModuleList(conv(channels, channels, 1) for _ in range(layers))
        self.skip = torch.nn.ModuleList(conv(channels, channels, 1) for _ in range(layers))
        self.out = conv(channels, classes, 1)

    def forward(self, x, labels):
        h, skip = self.inp(x), 0
        for i, (f, g, r, s) in enumerate(zip(self.filt, self.gate, self.res, self.skip)):
            p = F.pad(h, (2 ** i, 0))
            z = torch.tanh(f(p)) * torch.sigmoid(g(p))
            skip = skip + s(z)
            h = h + r(z)
        return F.cross_entropy(self.out(F.relu(skip)), labels)


class GCN(torch.nn.Module):
    """[b, nodes, features] and [b, nodes, nodes] adjacencies -> multi-label
    graph classes."""

    def __init__(self, features=6, hidden=16, labels=3):
        super().__init__()
        self.l1 = torch.nn.Linear(features, hidden)
        self.l2 = torch.nn.Linear(hidden, hidden)
        self.head = torch.nn.Linear(2 * hidden, labels)
        self.register_buffer("pos_weight", torch.linspace(0.5, 2.0, labels))

    def forward(self, x, adj, y):
        a = adj + torch.eye(adj.shape[-1])
        d = a.sum(-1).clamp(min=1e-6).rsqrt()
        a = d.unsqueeze(-1) * a * d.unsqueeze(-2)
        h = F.relu(a @ self.l1(x))
        h = F.relu(a @ self.l2(h))
        g = torch.cat([h.mean(1), h.amax(1)], -1)
        return F.binary_cross_entropy_with_logits(self.head(g), y, pos_weight=self.pos_weight)


class Losses(torch.nn.Module):
    """[b, inputs], labels and [b, 4] targets -> the sum of the losses
    people write by hand (PyTorch 1.13 exports few of its F.*_loss)."""

    def __init__(self, inputs=8, classes=5):
        super().__init__()
        self.enc = torch.nn.Linear(inputs, 16)
        self.cls = torch.nn.Linear(16, classes)
        self.emb = torch.nn.Linear(16, 4)

    def forward(self, x, labels, target):
        h = torch.tanh(self.enc(x))
        logits, emb = self.cls(h), self.emb(h)
        log_p = F.log_softmax(logits, -1)
        loss = F.nll_loss(log_p, labels, ignore_index=1)
        d = emb - target
        loss = loss + torch.where(d.abs() < 0.5, d * d, d.abs() - 0.25).mean()
        soft = F.softmax(target.sum(-1, keepdim=True) * torch.ones_like(logits), -1)
        loss = loss + F.kl_div(log_p, soft, reduction="batchmean")
        loss = loss + (1 - F.cosine_similarity(emb, target, dim=-1)).mean()
        loss = loss + F.relu(F.pairwise_distance(emb, target)
                             - F.pairwise_distance(emb, emb.flip(0)) + 0.5).mean()
        loss = loss + F.relu(-torch.sign(target[:, 0]) * (emb[:, 0] - emb[:, 1]) + 0.1).mean()
        p = torch.sigmoid(logits)
        pt = torch.where(F.one_hot(labels, logits.shape[1]) > 0, p, 1 - p)
        loss = loss - ((1 - pt) ** 2 * torch.log(pt.clamp(min=1e-6))).mean()
        return (loss + F.softplus(-emb * torch.sign(target)).mean()
                - F.logsigmoid(logits).mean())


class SuperRes(torch.nn.Module):
    """[b, 3, s, s] images -> the L1 error of their 2x upsampling."""

    def __init__(self, channels=16):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.act = torch.nn.PReLU(channels)
        self.c2 = torch.nn.Conv2d(channels, 12, 3, padding=1)
        self.shuffle = torch.nn.PixelShuffle(2)

    def forward(self, x, y):
        base = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        return (self.shuffle(self.c2(self.act(self.c1(x)))) + base - y).abs().mean()


class TasNet(torch.nn.Module):
    """[b, 1, samples] mixtures -> the negative SI-SNR of the separated
    source against [b, 1, samples] targets."""

    def __init__(self, channels=16):
        super().__init__()
        self.enc = torch.nn.Conv1d(1, channels, 8, stride=4)
        self.norm = torch.nn.GroupNorm(1, channels)
        self.act = torch.nn.PReLU()
        self.dconv = torch.nn.Conv1d(channels, channels, 3, padding=2, dilation=2,
                                     groups=channels)
        self.mask = torch.nn.Conv1d(channels, channels, 1)
        self.dec = torch.nn.ConvTranspose1d(channels, 1, 8, stride=4)

    def forward(self, x, y):
        e = F.relu(self.enc(x))
        m = torch.sigmoid(self.mask(self.act(self.dconv(self.norm(e)))))
        out = self.dec(e * m)
        out = out - out.mean(-1, keepdim=True)
        t = y - y.mean(-1, keepdim=True)
        s = (out * t).sum(-1, keepdim=True) * t / (t.pow(2).sum(-1, keepdim=True) + 1e-8)
        snr = s.pow(2).sum(-1) / ((out - s).pow(2).sum(-1) + 1e-8)
        return -(10 * torch.log10(snr + 1e-8)).mean()


class Pointer(torch.nn.Module):
    """[b, n, 4] sets, [b, n] masks and [b, n] targets -> for each element,
    the cross-entropy of pointing at its target among the unmasked ones."""

    def __init__(self, features=4, hidden=16):
        super().__init__()
        self.q = torch.nn.Linear(features, hidden)
        self.k = torch.nn.Linear(features, hidden)
        self.v = torch.nn.Linear(hidden, 1)

    def forward(self, x, mask, labels):
        s = self.v(torch.tanh(self.q(x).unsqueeze(2) + self.k(x).unsqueeze(1))).squeeze(-1)
        s = s.masked_fill(mask.unsqueeze(1) == 0, -1e4)
        picked = torch.gather(s, 2, labels.unsqueeze(-1)).squeeze(-1)
        spread = torch.cumsum(F.softmax(s, -1), -1)[..., -2]
        return (torch.logsumexp(s, -1) - picked).mean() + 0.01 * spread.mean()


class Registration(torch.nn.Module):
    """[b, 1, s, s, s] moving and fixed volumes -> VoxelMorph's loss: the
    moving volume warped (trilinear grid_sample, border padding) by the
    displacement field the network predicts, its mean squared error to the
    fixed one, plus the field's smoothness."""

    def __init__(self, channels=8, size=6):
        super().__init__()
        self.size = size
        self.c1 = torch.nn.Conv3d(2, channels, 3, padding=1)
        self.c2 = torch.nn.Conv3d(channels, channels, 3, padding=1)
        self.flow = torch.nn.Conv3d(channels, 3, 3, padding=1)
        # The identity grid [1, s, s, s, 3] of align_corners: (x, y, z) of
        # voxel (z, y, x).
        axis = torch.linspace(-1.0, 1.0, size)
        z, y, x = torch.meshgrid(axis, axis, axis, indexing="ij")
        self.register_buffer("identity", torch.stack([x, y, z], -1).unsqueeze(0))

    def forward(self, moving, fixed):
        h = F.leaky_relu(self.c1(torch.cat([moving, fixed], 1)), 0.2)
        h = F.leaky_relu(self.c2(h), 0.2)
        flow = 0.1 * self.flow(h)
        grid = self.identity + flow.permute(0, 2, 3, 4, 1)
        warped = F.grid_sample(moving, grid, mode="bilinear", padding_mode="border",
                               align_corners=True)
        smooth = ((flow[:, :, 1:] - flow[:, :, :-1]) ** 2).mean() + \
            ((flow[:, :, :, 1:] - flow[:, :, :, :-1]) ** 2).mean() + \
            ((flow[..., 1:] - flow[..., :-1]) ** 2).mean()
        # F.mse_loss, written out: PyTorch 1.13 does not export it.
        return ((warped - fixed) ** 2).mean() + 0.1 * smooth


class RoiHead(torch.nn.Module):
    """[b, 3, s, s] images, [k, 5] boxes (image index, x1, y1, x2, y2 in
    pixels) and [k] labels -> the cross-entropy of classifying each box from
    torchvision's roi_align of a stride-2 feature map (aligned, the
    sampling grid adapted to each box's size)."""

    def __init__(self, channels=8, classes=4, pool=3):
        super().__init__()
        # Imported here, before any trace (its import calls an op a trace
        # cannot record), and only by this model's users.
        from torchvision.ops import roi_align
        self.roi_align = roi_align
        self.pool = pool
        self.c1 = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.c2 = torch.nn.Conv2d(channels, channels, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(channels * pool * pool, classes)

    def forward(self, x, boxes, labels):
        f = F.relu(self.c2(F.relu(self.c1(x))))
        r = self.roi_align(f, boxes, output_size=self.pool, spatial_scale=0.5,
                      sampling_ratio=-1, aligned=True)
        return F.cross_entropy(self.fc(r.flatten(1)), labels)


class Conformer(torch.nn.Module):
    """[b, t, features] frames -> per-frame cross-entropy through one
    Conformer block: a half-step feed-forward (SiLU), nn.MultiheadAttention,
    the convolution module (a pointwise Conv1d into F.glu, a depthwise
    Conv1d, BatchNorm1d, SiLU, a pointwise Conv1d) and a closing LayerNorm."""

    def __init__(self, features=8, d=16, heads=2, classes=5):
        super().__init__()
        self.inp = torch.nn.Linear(features, d)
        self.ff = torch.nn.Sequential(torch.nn.LayerNorm(d), torch.nn.Linear(d, 4 * d),
                                      torch.nn.SiLU(), torch.nn.Linear(4 * d, d))
        self.attn_norm = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.conv_norm = torch.nn.LayerNorm(d)
        self.pw1 = torch.nn.Conv1d(d, 2 * d, 1)
        # No bias before the batch norm, which would remove it (its gradient
        # is zero in exact arithmetic, rounding noise in either run).
        self.dw = torch.nn.Conv1d(d, d, 5, padding=2, groups=d, bias=False)
        self.bn = torch.nn.BatchNorm1d(d)
        self.pw2 = torch.nn.Conv1d(d, d, 1)
        self.out_norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, x, labels):
        h = self.inp(x)
        h = h + 0.5 * self.ff(h)
        a = self.attn_norm(h)
        h = h + self.attn(a, a, a, need_weights=False)[0]
        c = F.glu(self.pw1(self.conv_norm(h).transpose(1, 2)), dim=1)
        c = self.pw2(F.silu(self.bn(self.dw(c))))
        h = self.out_norm(h + c.transpose(1, 2))
        return F.cross_entropy(self.head(h).flatten(0, 1), labels.flatten())


class PointNet(torch.nn.Module):
    """[b, 3, n] point clouds -> classes: a predicted 3x3 transform applied
    by torch.bmm (its orthogonality a penalty), shared per-point Conv1d
    layers with BatchNorm1d, max pooling over the points (torch.max's values
    and torch.amax)."""

    def __init__(self, classes=4, width=16):
        super().__init__()
        self.t1 = torch.nn.Conv1d(3, width, 1)
        self.t2 = torch.nn.Linear(width, 9)
        self.c1 = torch.nn.Conv1d(3, width, 1)
        self.bn1 = torch.nn.BatchNorm1d(width)
        self.c2 = torch.nn.Conv1d(width, 2 * width, 1)
        self.fc = torch.nn.Linear(2 * width, classes)

    def forward(self, points, labels):
        t = torch.max(F.relu(self.t1(points)), 2)[0]
        m = self.t2(t).view(-1, 3, 3) + torch.eye(3)
        x = F.relu(self.bn1(self.c1(torch.bmm(m, points))))
        x = torch.amax(self.c2(x), dim=2)
        ortho = ((m @ m.transpose(1, 2) - torch.eye(3)) ** 2).sum((1, 2)).mean()
        return F.cross_entropy(self.fc(x), labels) + 0.001 * ortho


class T5Bias(torch.nn.Module):
    """[b, seq] token ids -> next-token cross-entropy through an attention
    block with T5's relative position bias: each query-key distance's bucket
    computed in the forward pass (comparisons, abs, a log of the distance
    cast to int64, torch.min, torch.where) reads a learned nn.Embedding of
    per-head biases; T5's RMSNorm and bias-free projections."""

    def __init__(self, vocab=32, d=16, heads=2, seq=8, buckets=8, max_distance=16):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.rel = torch.nn.Embedding(buckets, heads)
        self.q = torch.nn.Linear(d, d, bias=False)
        self.k = torch.nn.Linear(d, d, bias=False)
        self.v = torch.nn.Linear(d, d, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.norm = torch.nn.Parameter(torch.ones(d))
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.heads, self.seq = heads, seq
        self.buckets, self.max_distance = buckets, max_distance

    def bucket(self, distance):
        half = self.buckets // 2
        out = (distance > 0).long() * half
        distance = distance.abs()
        exact = half // 2
        large = exact + (torch.log(distance.float() / exact + 1e-6)
                         / math.log(self.max_distance / exact) * (half - exact)).long()
        large = torch.min(large, torch.full_like(large, half - 1))
        return out + torch.where(distance < exact, distance, large)

    def forward(self, ids, labels):
        b, s = ids.shape
        h = self.tok(ids)
        pos = torch.arange(s)
        bias = self.rel(self.bucket(pos[None, :] - pos[:, None])).permute(2, 0, 1)
        n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm
        q, k, v = (f(n).view(b, s, self.heads, -1).transpose(1, 2)
                   for f in (self.q, self.k, self.v))
        att = F.softmax(q @ k.transpose(-1, -2) + bias, -1)
        h = h + self.o((att @ v).transpose(1, 2).reshape(b, s, -1))
        return F.cross_entropy(self.head(h).flatten(0, 1), labels.flatten())


class MoE(torch.nn.Module):
    """[b, d] inputs -> classes through a mixture of experts: top-2 gating
    (torch.topk, a softmax of the two scores scattered into the experts'
    weights), every expert's two-layer GELU MLP computed densely by
    torch.einsum over stacked weights, the weighted sum, and a
    load-balancing term through F.one_hot."""

    def __init__(self, d=8, experts=4, hidden=16, classes=5):
        super().__init__()
        self.gate = torch.nn.Linear(d, experts)
        self.w1 = torch.nn.Parameter(torch.randn(experts, d, hidden) * 0.3)
        self.w2 = torch.nn.Parameter(torch.randn(experts, hidden, d) * 0.3)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, x, labels):
        logits = self.gate(x)
        top, idx = torch.topk(logits, 2, dim=-1)
        weights = torch.zeros_like(logits).scatter(-1, idx, F.softmax(top, -1))
        h = F.gelu(torch.einsum("bd,edf->bef", x, self.w1))
        y = x + torch.einsum("be,bed->bd", weights,
                             torch.einsum("bef,efd->bed", h, self.w2))
        load = F.one_hot(idx[:, 0], logits.shape[-1]).float().mean(0)
        balance = (F.softmax(logits, -1).mean(0) * load).sum() * logits.shape[-1]
        return F.cross_entropy(self.head(y), labels) + 0.01 * balance


class ModConv(torch.nn.Module):
    """[b, cin, s, s] features, [b, style] styles and [b, 3, 2s, 2s] targets
    -> the squared error of StyleGAN2's modulated convolution: the weight
    scaled per sample by an affine map of its style and demodulated, all
    samples convolved at once as groups (a Conv whose weight is computed),
    a leaky ReLU, a 1x1 to RGB and a nearest 2x upsampling."""

    def __init__(self, cin=4, cout=6, style=8):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(cout, cin, 3, 3) * 0.3)
        self.affine = torch.nn.Linear(style, cin)
        self.rgb = torch.nn.Conv2d(cout, 3, 1)
        self.cin, self.cout = cin, cout

    def forward(self, x, style, target):
        b = x.shape[0]
        w = self.weight[None] * (self.affine(style) + 1)[:, None, :, None, None]
        w = w * torch.rsqrt(w.pow(2).sum([2, 3, 4]) + 1e-8)[:, :, None, None, None]
        out = F.conv2d(x.reshape(1, -1, *x.shape[2:]), w.reshape(-1, self.cin, 3, 3),
                       padding=1, groups=b)
        out = F.leaky_relu(out.reshape(b, self.cout, *x.shape[2:]), 0.2) * math.sqrt(2)
        image = F.interpolate(self.rgb(out), scale_factor=2, mode="nearest")
        # F.mse_loss, written out: PyTorch 1.13 does not export it.
        return ((image - target) ** 2).mean()


class Capsule(torch.nn.Module):
    """[b, n_in, d_in] capsules -> the margin loss of a capsule layer with
    three iterations of dynamic routing unrolled in the forward pass
    (softmax over the output capsules, the squash nonlinearity, agreement
    updates of the routing logits), lengths by torch.norm."""

    def __init__(self, n_in=6, d_in=4, n_out=3, d_out=8, iterations=3):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(1, n_in, n_out, d_out, d_in) * 0.3)
        self.n_in, self.n_out, self.iterations = n_in, n_out, iterations

    @staticmethod
    def squash(s):
        n2 = (s ** 2).sum(-1, keepdim=True)
        return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)

    def forward(self, u, labels):
        u_hat = (self.W @ u[:, :, None, :, None]).squeeze(-1)
        logits = torch.zeros(u.shape[0], self.n_in, self.n_out)
        for i in range(self.iterations):
            v = self.squash((F.softmax(logits, dim=2)[..., None] * u_hat).sum(1))
            if i < self.iterations - 1:
                logits = logits + (u_hat * v[:, None]).sum(-1)
        lengths = v.norm(dim=-1)
        t = F.one_hot(labels, self.n_out).float()
        return (t * F.relu(0.9 - lengths) ** 2
                + 0.5 * (1 - t) * F.relu(lengths - 0.1) ** 2).sum(1).mean()


class LinearAttention(torch.nn.Module):
    """[b, seq] token ids -> next-token cross-entropy through causal linear
    attention: elu + 1 feature maps, the running key-value sums by
    torch.cumsum of outer products, torch.einsum of three operands."""

    def __init__(self, vocab=16, d=16, seq=8):
        super().__init__()
        self.seq = seq
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.1)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, ids, labels):
        h = self.tok(ids) + self.pos
        q, k, v = self.qkv(h).chunk(3, -1)
        q, k = F.elu(q) + 1, F.elu(k) + 1
        kv = torch.cumsum(k.unsqueeze(-1) * v.unsqueeze(-2), 1)
        z = 1 / (torch.einsum("bsd,bsd->bs", q, torch.cumsum(k, 1)) + 1e-6)
        out = torch.einsum("bsd,bsde,bs->bse", q, kv, z)
        return F.cross_entropy(self.head(h + out).flatten(0, 1), labels.flatten())


MODELS = {"mlp": MLP, "gpt": GPT, "llama": Llama, "mixer": Mixer, "vit": ViT,
          "resnet": ResNet, "unet": UNet, "audio": AudioNet, "swin": Swin,
          "mobilenet": MobileNet,
          "padded-text": PaddedText, "vae": VAE, "rnn-lm": RnnLM, "proto": ProtoNet,
          "qat": QatNet, "spectrogram": SpectrogramNet, "recommender": Recommender,
          "flow": Flow, "masked-lm": MaskedLM,
          "index-add": IndexAdd, "densenet": DenseNet, "effnet": EffNet,
          "convnext": ConvNeXt, "seq2seq": Seq2Seq, "wavenet": WaveNet, "gcn": GCN,
          "losses": Losses, "superres": SuperRes, "tasnet": TasNet, "pointer": Pointer,
          "registration": Registration, "roi-head": RoiHead, "conformer": Conformer,
          "pointnet": PointNet, "t5-bias": T5Bias, "moe": MoE, "modconv": ModConv,
          "capsule": Capsule, "linear-attention": LinearAttention}


def build(name, **sizes):
    return MODELS[name](**sizes)


def images(rng, batch, classes, size=16, teacher_seed=7):
    """Images and the class a fixed linear teacher prefers (learnable)."""
    import numpy as np
    x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    teacher = np.random.default_rng(teacher_seed).standard_normal((3 * size * size, classes))
    return {"x": x, "labels": np.argmax(x.reshape(batch, -1) @ teacher, 1).astype(np.int64)}


def segmentation(rng, batch, classes, size=16):
    """Images whose pixels' classes follow a fixed map of the 3x3
    neighbourhood's channels (learnable by the U-Net)."""
    import numpy as np
    x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    teacher = np.random.default_rng(7).standard_normal((3, 3, 3, classes))
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    scores = np.zeros((batch, size, size, classes))
    for dy in range(3):
        for dx in range(3):
            window = padded[:, :, dy:dy + size, dx:dx + size]
            scores += np.einsum("bchw,ck->bhwk", window, teacher[:, dy, dx])
    return {"x": x, "labels": np.argmax(scores, -1).astype(np.int64)}


def waveforms(rng, batch, classes, samples=256):
    """A tone per class (its own frequency band) at a random phase and
    amplitude, in noise."""
    import numpy as np
    labels = rng.integers(0, classes, batch)
    t = np.arange(samples) / samples
    freq = 6 + 5 * labels[:, None] + rng.uniform(-1, 1, (batch, 1))
    x = rng.uniform(0.5, 1.5, (batch, 1)) * np.sin(
        2 * np.pi * freq * t + rng.uniform(0, 2 * np.pi, (batch, 1)))
    x = x + 0.3 * rng.standard_normal((batch, samples))
    return {"x": x[:, None, :].astype(np.float32), "labels": labels.astype(np.int64)}


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
    if name == "vit":
        return images(rng, batch, model.head.out_features,
                      size=model.patch.kernel_size[0] * math.isqrt(model.pos.shape[1] - 1))
    if name in ("resnet", "mobilenet"):
        return images(rng, batch, model.fc.out_features)
    if name == "unet":
        return segmentation(rng, batch, model.out.out_channels)
    if name == "audio":
        return waveforms(rng, batch, model.head.out_features)
    if name in ("densenet", "effnet", "convnext"):
        return images(rng, batch, model.fc.out_features if name != "effnet"
                      else model.fc[-1].out_features)
    if name == "seq2seq":
        vocab = model.tok.num_embeddings
        tgt = rng.integers(0, vocab, (batch, 9))
        tgt[:, 0] = 1  # the start token
        return {"src": rng.integers(1, vocab, (batch, 10)).astype(np.int64),
                "tgt": tgt.astype(np.int64)}
    if name == "wavenet":
        w = waveforms(rng, batch, model.out.out_channels, samples=32)
        labels = np.repeat(w["labels"][:, None], 32, 1)
        return {"x": w["x"], "labels": labels.astype(np.int64)}
    if name == "gcn":
        nodes = 7
        adj = (rng.random((batch, nodes, nodes)) < 0.3).astype(np.float32)
        adj = np.maximum(adj, adj.transpose(0, 2, 1))
        x = rng.standard_normal((batch, nodes, model.l1.in_features)).astype(np.float32)
        y = (rng.random((batch, model.head.out_features)) < 0.5).astype(np.float32)
        return {"x": x, "adj": adj, "y": y}
    if name == "losses":
        return {"x": rng.standard_normal((batch, model.enc.in_features)).astype(np.float32),
                "labels": rng.integers(0, model.cls.out_features, batch).astype(np.int64),
                "target": rng.standard_normal((batch, 4)).astype(np.float32)}
    if name == "superres":
        return {"x": rng.random((batch, 3, 8, 8)).astype(np.float32),
                "y": rng.random((batch, 3, 16, 16)).astype(np.float32)}
    if name == "tasnet":
        y = rng.standard_normal((batch, 1, 64))
        x = y + 0.5 * rng.standard_normal((batch, 1, 64))
        return {"x": x.astype(np.float32), "y": y.astype(np.float32)}
    if name == "pointer":
        n = 10
        mask = rng.random((batch, n)) < 0.8
        mask[:, 0] = True
        # Each element points at an unmasked one.
        labels = np.stack([rng.choice(np.flatnonzero(m), n) for m in mask])
        return {"x": rng.standard_normal((batch, n, model.q.in_features)).astype(np.float32),
                "mask": mask.astype(np.int64), "labels": labels.astype(np.int64)}
    if name == "conformer":
        # Each frame's class is the one a fixed linear teacher of the frame
        # and its predecessor prefers (learnable).
        x = rng.standard_normal((batch, 10, model.inp.in_features)).astype(np.float32)
        teacher = np.random.default_rng(7).standard_normal((2 * x.shape[2], 5))
        both = np.concatenate([x, np.roll(x, 1, 1)], -1)
        return {"x": x, "labels": np.argmax(both @ teacher, -1).astype(np.int64)}
    if name == "pointnet":
        # Points on one of four shapes, rotated at random: the class is the
        # shape (learnable).
        labels = rng.integers(0, model.fc.out_features, batch)
        scale = np.array([[1, 1, 1], [2, 0.5, 0.5], [1, 1, 0.2], [2, 2, 0.5]])[labels]
        points = rng.standard_normal((batch, 3, 12)) * scale[:, :, None]
        q, _ = np.linalg.qr(rng.standard_normal((batch, 3, 3)))
        return {"points": (q @ points).astype(np.float32), "labels": labels.astype(np.int64)}
    if name == "moe":
        x = rng.standard_normal((batch, model.gate.in_features)).astype(np.float32)
        teacher = np.random.default_rng(7).standard_normal((x.shape[1], 5))
        return {"x": x, "labels": np.argmax(np.tanh(x) @ teacher, 1).astype(np.int64)}
    if name == "modconv":
        return {"x": rng.standard_normal((batch, model.cin, 6, 6)).astype(np.float32),
                "style": rng.standard_normal((batch, model.affine.in_features)).astype(np.float32),
                "target": rng.standard_normal((batch, 3, 12, 12)).astype(np.float32)}
    if name == "capsule":
        # The class is the input capsule pair a fixed teacher prefers
        # (learnable).
        u = rng.standard_normal((batch, model.n_in, model.W.shape[-1])).astype(np.float32)
        teacher = np.random.default_rng(7).standard_normal((u[0].size, model.n_out))
        return {"u": u, "labels": np.argmax(u.reshape(batch, -1) @ teacher, 1).astype(np.int64)}
    if name == "roi-head":
        # Three boxes an image, of 2 to 14 pixels a side, some reaching
        # past the border; the class of a box is the colour channel
        # brightest inside it, or 3 when it is mostly outside (learnable).
        size = 16
        x = rng.random((batch, 3, size, size)).astype(np.float32)
        boxes, labels = [], []
        for b in range(batch):
            for _ in range(3):
                w, h = rng.uniform(2, 14, 2)
                x1, y1 = rng.uniform(-2, size - 2, 2)
                boxes.append([b, x1, y1, x1 + w, y1 + h])
                c0, r0 = int(max(x1, 0)), int(max(y1, 0))
                inside = x[b, :, r0:int(min(y1 + h, size)) + 1, c0:int(min(x1 + w, size)) + 1]
                labels.append(int(inside.mean((1, 2)).argmax()) if inside.size else 3)
        return {"x": x, "boxes": np.array(boxes, np.float32),
                "labels": np.array(labels, np.int64)}
    if name == "registration":
        # A smooth volume and its copy shifted by a voxel (learnable).
        s = model.size
        base = rng.standard_normal((batch, 1, s, s, s))
        fixed = (base + np.roll(base, 1, 2) + np.roll(base, 1, 3) + np.roll(base, 1, 4)) / 2
        return {"moving": np.roll(fixed, 1, 4).astype(np.float32),
                "fixed": fixed.astype(np.float32)}
    if name == "swin":
        return images(rng, batch, model.head.out_features)
    if name == "vae":
        # Points near a 4-dimensional manifold: what a latent of 8 learns.
        inputs = model.enc.in_features
        basis = np.random.default_rng(7).standard_normal((4, inputs))
        z = rng.standard_normal((batch, 4))
        x = np.tanh(z @ basis) + 0.05 * rng.standard_normal((batch, inputs))
        return {"x": x.astype(np.float32)}
    if name == "spectrogram":
        w = waveforms(rng, batch, model.head.out_features, model.samples)
        return {"x": w["x"][:, 0].copy(), "labels": w["labels"]}
    if name == "flow":
        # Correlated, shifted Gaussian data: a linear flow learns to whiten it.
        mix = np.random.default_rng(7).standard_normal((model.features, model.features))
        x = rng.standard_normal((batch, model.features)) @ mix + 1.0
        return {"x": x.astype(np.float32)}
    if name == "recommender":
        # Clicks where a fixed linear teacher of the dense features and
        # the first field's ids (the lower half of the table counting for)
        # says so (learnable).
        dense = rng.standard_normal((batch, model.bottom.in_features)).astype(np.float32)
        rows = model.bags[0].num_embeddings
        ids = rng.integers(0, rows, (batch, len(model.bags), model.bag))
        teacher = np.random.default_rng(7).standard_normal(model.bottom.in_features)
        score = dense @ teacher + (ids[:, 0] < rows // 2).mean(1) - 0.5
        return {"dense": dense, "ids": ids.astype(np.int64),
                "clicks": (score > 0).astype(np.float32)}
    if name == "index-add":
        # Targets a fixed linear teacher gives, larger on the picked rows.
        x = rng.standard_normal((batch, model.enc.in_features)).astype(np.float32)
        mask = rng.random(batch) < 0.5
        mask[0] = True
        teacher = np.random.default_rng(7).standard_normal(model.enc.in_features)
        y = (x @ teacher) * np.where(mask, 1.5, 1.0)
        return {"x": x, "mask": mask, "y": y.astype(np.float32)}
    if name == "masked-lm":
        # A quarter of the positions masked (at least one a sequence), each
        # labelled with its own token (learnable).
        vocab = model.tok.num_embeddings
        ids = rng.integers(0, vocab, (batch, model.seq))
        mask = rng.random((batch, model.seq)) < 0.25
        mask[np.arange(batch), rng.integers(0, model.seq, batch)] = True
        labels = ids
        return {"ids": ids.astype(np.int64), "mask": mask,
                "labels": labels.astype(np.int64)}
    if name == "qat":
        return images(rng, batch, model.net[4].out_features, size=8)
    if name == "proto":
        inputs = model.enc.in_features
        x = rng.standard_normal((batch, inputs)).astype(np.float32)
        teacher = np.random.default_rng(7).standard_normal((inputs, model.protos.shape[0]))
        return {"x": x, "labels": np.argmax(x @ teacher, 1).astype(np.int64)}
    if name == "padded-text":
        # Every sequence keeps at least half its tokens; the rest is padding.
        ids = rng.integers(1, model.tok.num_embeddings, (batch, model.seq))
        for row, n in zip(ids, rng.integers(0, model.seq // 2, batch)):
            row[model.seq - n:] = 0
        return {"ids": ids.astype(np.int64),
                "labels": rng.integers(0, model.head.out_features, batch).astype(np.int64)}
    vocab = model.tok.num_embeddings
    seq = (model.seq if name in ("rnn-lm", "t5-bias", "linear-attention")
           else model.blocks[0].mask.shape[0])
    tokens = rng.integers(0, vocab, (batch, seq + 1)).astype(np.int64)
    return {"ids": tokens[:, :-1].copy(), "labels": tokens[:, 1:].copy()}


# Buffers a training step updates: batch-norm statistics (ONNX
# BatchNormalization's running mean and variance outputs; PyTorch's counter
# is dropped by the export). The other buffers are constants.
STATE_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


# FakeQuantize's buffers: scales and zero points dtcc leaves untrained by
# itself (initializers read only by QuantizeLinear/DequantizeLinear), its
# flags and its observer's statistics, which the export does not carry.
QUANT_BUFFERS = (".scale", ".zero_point", "_enabled", ".min_val", ".max_val", ".eps")


def frozen_buffers(model):
    """The buffers a dtcc compile freezes (masks, rotary tables)."""
    return [n for n, _ in model.named_buffers()
            if not n.endswith(STATE_BUFFERS) and not n.endswith(QUANT_BUFFERS)]


def export(name, model, batch, path, sample=None):
    """Exports `model` -> loss in training mode at opset 17, traced on
    `sample` (by default example inputs of `batch`); its input names.
    Tracing runs the model, which moves batch-norm running statistics: the
    model and the file both keep the state from before it."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    if sample is None:
        sample = example_inputs(name, model, batch, np.random.default_rng(0))
    names = list(sample)
    if hasattr(model, "export_onnx"):  # written by hand (PyTorch cannot)
        model.export_onnx(path, sample[names[0]].shape[0])
        return names
    state = model.state_dict()
    initial = type(state)((k, v.clone()) for k, v in state.items())
    # Modules read their state's version (observers renamed buffers).
    initial._metadata = getattr(state, "_metadata", None)
    torch.onnx.export(model, tuple(torch.from_numpy(sample[n]) for n in names), path,
                      input_names=names, output_names=["loss"], opset_version=17,
                      do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    model.load_state_dict(initial)
    if any(n.endswith(STATE_BUFFERS) for n in initial):
        m = onnx.load(path)
        for t in m.graph.initializer:
            if t.name in initial:
                t.CopyFrom(numpy_helper.from_array(initial[t.name].numpy(), t.name))
        onnx.save(m, path)
    return names
