"""A stateful model the verdict's notebook never saw (tests/test_verdict.py): a site whose mul output feeds its state."""

import torch


class LeakyGainState(torch.nn.Module):
    """``state <- 0.5 * state + conv(x) * gain`` (a per-channel gain), written back with ``copy_``; returns a pooled
    relu of the state. The site's mul output reaches the buffer write through the add."""

    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(21234)
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        with torch.no_grad():
            self.conv.weight.copy_(torch.randn(self.conv.weight.shape, generator=generator) * 0.3)
            self.conv.bias.copy_(torch.randn(self.conv.bias.shape, generator=generator) * 0.1)
        self.register_buffer("gain", torch.tensor([0.5, 2.0, 0.25, 1.5, 3.0, 0.75]).reshape(1, 6, 1, 1))
        self.register_buffer("state", torch.zeros(1, 6, 8, 8))

    def forward(self, x):
        state = 0.5 * self.state + self.conv(x) * self.gain
        self.state.copy_(state)
        return torch.relu(state).mean(dim=(2, 3))

    def example_inputs(self):
        return (torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1)),)
