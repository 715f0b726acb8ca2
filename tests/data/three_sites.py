"""Three independent conv->mul sites in a row (tests/test_advise.py enumerates their 2^3 sets)."""

import torch


class ThreeSites(torch.nn.Module):
    """conv * scale three times, a relu between: each mul folds on its own."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.c = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        x = torch.relu(self.a(x) * 0.5)
        x = torch.relu(self.b(x) * 3.0)
        return self.c(x) * 0.125

    def example_inputs(self):
        return (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)
