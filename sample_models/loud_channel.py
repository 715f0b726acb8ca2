"""A network whose drift one layer causes: a 1x1 convolution with one loud channel that nothing downstream reads.

``OneLoudChannel`` is for ``inspector.widen`` (notebook 11, docs/widen.md): a heavy front (two 3x3 convolutions at
16x16) feeds ``mix``, a 1x1 convolution whose output channel 0 is 200 times louder than the others, and ``head``
reads only the quiet channels. At 8-bit activations one per-tensor range, set by the loud channel, cannot hold the
quiet ones: ``mix``'s output is where the error enters, and ``head`` reads it back at 8 bits. Sixteen-bit activations
everywhere fix it, at the price of the heavy front too. It has no conv->mul site (nothing for the fold to do). Load it
as ``sample_models/loud_channel.py:OneLoudChannel``.
"""

from __future__ import annotations

import torch
from torch import nn


class OneLoudChannel(nn.Module):
    """stem (3x3, 8->32) -> relu -> body (3x3, 32->32) -> relu -> mix (1x1, 32->4, channel 0 loud) -> head (1x1, 4->4)."""

    LOUD = 200.0  # how much louder mix's channel 0 is than the others

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.stem = nn.Conv2d(8, 32, 3, padding=1)
        self.body = nn.Conv2d(32, 32, 3, padding=1)
        self.mix = nn.Conv2d(32, 4, 1)
        self.head = nn.Conv2d(4, 4, 1)
        with torch.no_grad():
            for m in (self.stem, self.body, self.mix, self.head):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / m.weight[0].numel() ** 0.5)
                m.bias.zero_()
            self.mix.weight[0] *= self.LOUD  # sets the int8 range of mix's output
            self.head.weight[:, 0] = 0.0  # the head never reads the loud channel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.mix(torch.relu(self.body(torch.relu(self.stem(x))))))

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        return (torch.randn(1, 8, 16, 16, generator=torch.Generator().manual_seed(1)),)
