"""Models of up to three sites that the advice's code never saw (tests/test_advise.py measures every set of each).

What Vela does to a mul depends on what follows it and what came before: an activation fused into the operation
before it (relu, relu6's clamp, a sigmoid's table), a residual add, a mul chained into a convolution, a depthwise
conv's own layout. Each model puts its sites in one of those places; the seeds are fixed.
"""

import torch


def _input(channels: int, size: int, seed: int):
    return (torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(seed)),)


class ReluReluNone(torch.nn.Module):
    """Three 3x3/3x3/1x1 convs whose muls feed relu, relu, and the output."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(11)
        self.a = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.b = torch.nn.Conv2d(16, 24, 3, padding=1)
        self.c = torch.nn.Conv2d(24, 8, 1)

    def forward(self, x):
        x = torch.relu(self.a(x) * 0.75)
        x = torch.relu(self.b(x) * 1.5)
        return self.c(x) * 0.25

    def example_inputs(self):
        return _input(3, 20, 12)


class ClampResidualSigmoid(torch.nn.Module):
    """A depthwise conv's mul feeds relu6 (a clamp), a 3x3 conv's mul a residual add, a 1x1 conv's mul a sigmoid."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(13)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.b = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.c = torch.nn.Conv2d(16, 8, 1)

    def forward(self, x):
        y = torch.clamp(self.dw(x) * 0.5, 0, 6)
        y = y + self.b(y) * 0.3
        return torch.sigmoid(self.c(y) * 2.0)

    def example_inputs(self):
        return _input(16, 12, 14)


class ChainAndWideScale(torch.nn.Module):
    """``conv(x) * a * b`` (the second mul folds only once the first has) then a conv whose mul has a per-channel
    scale over three orders of magnitude (folding it moves the conv output's quantization range)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(15)
        self.a = torch.nn.Conv2d(4, 12, 3, padding=1)
        self.b = torch.nn.Conv2d(12, 12, 3, padding=1)
        self.register_buffer("wide", torch.logspace(-1.5, 1.5, 12).reshape(1, 12, 1, 1))

    def forward(self, x):
        y = torch.relu(self.a(x) * 0.5 * 1.25)
        return self.b(y) * self.wide

    def example_inputs(self):
        return _input(4, 16, 16)


class ResidualTanhResidual(torch.nn.Module):
    """3x3 convs whose muls feed a residual add, a tanh and a residual add (the last conv has no bias). On the
    Ethos-U85 the sites' own rows in Vela's table overstate what folding them saves."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(17)
        self.a = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.b = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.c = torch.nn.Conv2d(32, 32, 3, padding=1, bias=False)

    def forward(self, x):
        x = x + self.a(x) * 0.5
        x = torch.tanh(self.b(x) * 0.5)
        return x + self.c(x) * 0.5

    def example_inputs(self):
        return _input(16, 12, 18)
