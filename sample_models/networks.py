"""Sample blocks shaped like the networks people use: ResNet, MobileNetV2, squeeze-excitation,
NF-ResNet, ConvNeXt. Written here (no timm or torchvision), with realistic channel counts and
weights initialised the way trained networks look (fan-in scaled convs, BatchNorm statistics
that are not the identity), so quantization sees realistic ranges.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._base import FOLD, QUANTIZED, SampleModel, Verdict, seeded_input, skip


def trained_like(module: nn.Module, seed: int) -> nn.Module:
    """Seeded weights with trained-network statistics: conv/linear weights of variance 1/fan_in,
    small biases, BatchNorm with gamma ~ 1, beta ~ 0, running mean ~ 0 and running var ~ 1."""
    gen = torch.Generator().manual_seed(seed)

    def uniform(shape, scale, centre=0.0):
        return (torch.rand(shape, generator=gen) * 2 - 1) * scale + centre

    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(uniform(m.weight.shape, (3.0 / fan_in) ** 0.5))
                if m.bias is not None:
                    m.bias.copy_(uniform(m.bias.shape, 0.05))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(uniform(m.weight.shape, 0.2, 1.0))
                m.bias.copy_(uniform(m.bias.shape, 0.1))
                m.running_mean.copy_(uniform(m.running_mean.shape, 0.1))
                m.running_var.copy_(uniform(m.running_var.shape, 0.3, 1.0))
                m.num_batches_tracked.fill_(1000)
            elif isinstance(m, nn.LayerNorm):
                m.weight.copy_(uniform(m.weight.shape, 0.2, 1.0))
                m.bias.copy_(uniform(m.bias.shape, 0.1))
    return module


class ResNetBasicBlock(SampleModel):
    """A ResNet basic block with BatchNorm and a strided 1x1 downsample: no conv->mul site at all.

    Real networks are mostly like this; the inspector must analyse and compare them
    (BatchNorm's 0-dim ``num_batches_tracked`` buffer included) and report no sites.
    """

    SEED = 101

    def __init__(self, cin: int = 32, cout: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=2, bias=False), nn.BatchNorm2d(cout))
        trained_like(self, self.SEED)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.downsample(x))

    def example_inputs(self):
        return (seeded_input(1, 32, 32, 32),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return ()


class MobileNetV2InvertedResidual(SampleModel):
    """A MobileNetV2 inverted residual (1x1 expand, 3x3 depthwise, 1x1 project, BatchNorm, ReLU6)
    with a per-channel scale on the projection conv: the scale folds into the projection.

    The scale spans 0.05..2 (ratio 40), as after pruning-aware or distillation scaling.
    """

    SEED = 102

    def __init__(self, channels: int = 32, expand: int = 6) -> None:
        super().__init__()
        hidden = channels * expand
        self.expand = nn.Conv2d(channels, hidden, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(hidden)
        self.depthwise = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False)
        self.bn2 = nn.BatchNorm2d(hidden)
        self.project = nn.Conv2d(hidden, channels, 1)
        trained_like(self, self.SEED)
        gen = torch.Generator().manual_seed(self.SEED)
        self.register_buffer("channel_scale", (0.05 + 1.95 * torch.rand(1, channels, 1, 1, generator=gen)))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu6(self.bn1(self.expand(x)))
        out = F.relu6(self.bn2(self.depthwise(out)))
        return x + self.project(out) * self.channel_scale

    def example_inputs(self):
        return (seeded_input(1, 32, 28, 28),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return () if stage == "lowering" else (FOLD,)


class SqueezeExcitation(SampleModel):
    """A squeeze-and-excitation gate on a conv output, computed from the block input:
    the scale is the model's own activation (``scale-not-constant``), never foldable."""

    SEED = 103

    def __init__(self, channels: int = 64, reduction: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.fc1 = nn.Conv2d(channels, channels // reduction, 1)
        self.fc2 = nn.Conv2d(channels // reduction, channels, 1)
        trained_like(self, self.SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)))))
        return self.conv(x) * gate

    def example_inputs(self):
        return (seeded_input(1, 64, 16, 16),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return (QUANTIZED,) if stage == "lowering" else (skip("scale-not-constant"),)


class ScaledStdConv2d(nn.Conv2d):
    """timm's ScaledStdConv2d: the weight is standardized in ``forward`` (not a constant in the graph)."""

    def __init__(self, cin: int, cout: int, kernel: int, padding: int = 0, eps: float = 1e-6) -> None:
        super().__init__(cin, cout, kernel, padding=padding)
        self.gain = nn.Parameter(torch.ones(cout, 1, 1, 1))
        self.scale = self.weight[0].numel() ** -0.5
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        var = w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
        weight = (w - mean) * torch.rsqrt(var + self.eps) * (self.gain * self.scale)
        return F.conv2d(x, weight, self.bias, padding=self.padding)


class NFResNetBlock(SampleModel):
    """A normalizer-free ResNet block (NF-ResNet): scaled weight standardization in ``forward``,
    then ``out * alpha + shortcut``.

    The same model gets different answers at different stages: at aten and edge the conv
    weight is computed at run time (``weight-not-constant``), but the quantizer's own
    transform-for-annotation passes constant-fold the standardized weight first, so at
    tfa - where the INT flow folds - the installed pass folds it (measured on timm's
    nf_resnet26: 8 sites, 0 folds at aten/edge, 8 at tfa).
    """

    SEED = 104

    def __init__(self, channels: int = 64, alpha: float = 0.2, beta: float = 1.0) -> None:
        super().__init__()
        self.alpha, self.beta = alpha, beta
        self.conv1 = ScaledStdConv2d(channels, channels, 3, padding=1)
        self.conv2 = ScaledStdConv2d(channels, channels, 3, padding=1)
        trained_like(self, self.SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(F.gelu(x) * self.beta)
        out = self.conv2(F.gelu(out))
        return out * self.alpha + x

    def example_inputs(self):
        return (seeded_input(1, 64, 16, 16),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return {"tfa": (FOLD,), "lowering": ()}.get(stage, (skip("weight-not-constant"),))  # folded at tfa


class ConvNeXtBlock(SampleModel):
    """A ConvNeXt block with 1x1-conv MLP (timm's ``conv_mlp``): 7x7 depthwise conv, LayerNorm over
    channels, 4x pointwise expansion, GELU, pointwise projection, then a per-channel layer scale
    ``gamma`` on that conv output: the layer scale folds into the projection.

    ``gamma`` starts at 1e-6 in ConvNeXt and grows in training; here it spans 1e-3..2
    (ratio 2,000: flagged ``wide-dynamic-range-scale``).
    """

    SEED = 105

    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pwconv1 = nn.Conv2d(dim, 4 * dim, 1)
        self.pwconv2 = nn.Conv2d(4 * dim, dim, 1)
        trained_like(self, self.SEED)
        self.gamma = nn.Parameter(torch.logspace(-3, 0.301, dim).reshape(1, dim, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.dwconv(x)
        out = self.norm(out.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        out = self.pwconv2(F.gelu(self.pwconv1(out)))
        return x + out * self.gamma

    def example_inputs(self):
        return (seeded_input(1, 64, 14, 14),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return () if stage == "lowering" else (FOLD,)


class NFNetBlock(SampleModel):
    """An NFNet-style block: weight-standardized convs, a squeeze-excitation gate on the last conv, then
    ``* skipinit_gain`` and ``* alpha``: sites that follow an unfolded mul (as in timm's nfnet_l0).

    The gate is computed from the conv's own output (the conv has other users, the scale is not
    a constant), so that mul stays; the two scalar muls after it multiply it, not the conv, and
    cannot fold either (``follows-unfolded-mul``).
    """

    SEED = 106

    def __init__(self, channels: int = 64, alpha: float = 0.2, beta: float = 1.0) -> None:
        super().__init__()
        self.alpha, self.beta = alpha, beta
        self.conv1 = ScaledStdConv2d(channels, channels, 1)
        self.conv2 = ScaledStdConv2d(channels, channels, 3, padding=1)
        self.se_reduce = nn.Conv2d(channels, channels // 4, 1)
        self.se_expand = nn.Conv2d(channels // 4, channels, 1)
        self.skipinit_gain = nn.Parameter(torch.tensor(1.0))
        trained_like(self, self.SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(F.gelu(x) * self.beta)
        out = self.conv2(F.gelu(out))
        gate = torch.sigmoid(self.se_expand(F.relu(self.se_reduce(out.mean((2, 3), keepdim=True)))))
        out = out * (2.0 * gate)
        out = out * self.skipinit_gain
        return out * self.alpha + x

    def example_inputs(self):
        return (seeded_input(1, 64, 16, 16),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        weight = {"tfa": (), "lowering": ("weight-not-float", "bias-not-float")}.get(stage, ("weight-not-constant",))
        gate, late = (("quantized-graph",),) * 2 if stage == "lowering" else (("conv-has-other-users", "scale-not-constant"), ())
        return (skip(*gate, *weight), skip("follows-unfolded-mul", *late, *weight), skip("follows-unfolded-mul", *late, *weight))

    def expected(self, stage: str, rule: str) -> tuple[Verdict, ...]:
        if rule == "off":
            first, *rest = self.expected_upstream(stage)
            return (skip("rule-off", *first[1]), *(skip("rule-off", *codes) for _, codes in rest))
        return self.expected_upstream(stage)


class StreamingKeywordSpotter(SampleModel):
    """A streaming keyword-spotting CNN: it keeps its context in registered buffers across calls, and
    of its four sites only one reaches a buffer write.

    Each call gets 4 new frames of 40 mel bins. The last 2 raw frames are kept as context (no site
    reaches that write); a summary branch keeps an exponential average of a scaled conv output (that
    site feeds carried state: the strict rule skips it at every stage, ``state-aware`` at edge).
    """

    SEED = 107

    def __init__(self, mels: int = 40, channels: int = 32, keywords: int = 12) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, (3, 3), padding=(1, 0))
        self.dw = nn.Conv2d(channels, channels, (3, 3), padding=1, groups=channels)
        self.head = nn.Conv2d(channels, keywords, 1)
        self.summary_conv = nn.Conv2d(1, 8, (mels, 3))
        trained_like(self, self.SEED)
        gen = torch.Generator().manual_seed(self.SEED)
        self.register_buffer("dw_scale", 0.5 + torch.rand(1, channels, 1, 1, generator=gen))
        self.register_buffer("summary_scale", 0.5 + torch.rand(1, 8, 1, 1, generator=gen))
        self.register_buffer("context", torch.zeros(1, 1, mels, 2))
        self.register_buffer("summary", torch.zeros(1, 8, 1, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        frames = torch.cat([self.context, x], dim=3)
        self.context.copy_(frames[:, :, :, -2:])
        h = F.relu(self.conv1(frames) * 0.5)
        h = F.relu(self.dw(h) * self.dw_scale)
        logits = self.head(h.mean(dim=(2, 3), keepdim=True)) * 4.0
        summary = self.summary_conv(frames) * self.summary_scale
        self.summary.copy_(self.summary * 0.75 + summary.mean(dim=3, keepdim=True) * 0.25)
        return logits.flatten(1), self.summary.flatten(1)

    def example_inputs(self):
        return (seeded_input(1, 1, 40, 4),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return (FOLD, FOLD, FOLD, FOLD)

    def expected(self, stage: str, rule: str) -> tuple[Verdict, ...]:
        if rule == "off" or stage == "lowering":  # lowering (the INT flow): all four folded at tfa, none left
            return (skip("rule-off"),) * 4 if stage != "lowering" else ()
        guarded = rule == "state-aware-strict" or (rule == "state-aware" and stage == "edge")
        return (FOLD, FOLD, FOLD, skip("feeds-buffer-mutation") if guarded else FOLD)
