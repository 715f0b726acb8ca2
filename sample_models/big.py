"""A benchmark-sized model: many 64-channel convolutions at 56x56, some followed by a scale."""

from __future__ import annotations

import torch
from torch import nn

from ._base import seeded_input


class ConvStack(nn.Module):
    """``convs`` 3x3 convolutions (``channels`` in and out); every other one is scaled per channel."""

    def __init__(self, convs: int = 50, channels: int = 64, size: int = 56, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.size = size
        self.channels = channels
        self.convs = nn.ModuleList(nn.Conv2d(channels, channels, 3, padding=1) for _ in range(convs))
        with torch.no_grad():
            for conv in self.convs:
                conv.weight.copy_((torch.rand(conv.weight.shape, generator=gen) - 0.5) * (2 / (3 * channels ** 0.5)))
                conv.bias.copy_((torch.rand(conv.bias.shape, generator=gen) - 0.5) * 0.1)
        scales = torch.rand(convs, 1, channels, 1, 1, generator=gen) + 0.5
        self.register_buffer("scales", scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if i % 2 == 0:
                x = x * self.scales[i]
            x = torch.relu(x)
        return x

    def example_inputs(self):
        return (seeded_input(1, self.channels, self.size, self.size),)
