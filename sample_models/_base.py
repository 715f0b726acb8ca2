"""Shared scaffolding for the sample models: fixed weights and expected decisions."""

from __future__ import annotations

import torch
from torch import nn

# One expected verdict: (decision, reason codes in the order the inspector lists them).
Verdict = tuple[str, tuple[str, ...]]

FOLD: Verdict = ("fold", ())


def skip(*codes: str) -> Verdict:
    """An expected skip with its reason codes, first reason first."""
    return ("skip", tuple(codes))


class SampleModel(nn.Module):
    """Base of every sample: seeded weights, example inputs, expected verdicts.

    Subclasses set ``SEED`` and implement ``example_inputs()`` and
    ``expected_upstream(stage)``; ``expected(stage, rule)`` derives the other
    rules unless a subclass overrides it.
    """

    SEED = 0
    # Which output index feeds which input index on the next call (functional state).
    RECURRENT: dict[int, int] = {}

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        """What the installed pass decides at ``stage``, one verdict per site."""
        raise NotImplementedError

    def expected(self, stage: str, rule: str) -> tuple[Verdict, ...]:
        """Expected verdicts per site at ``stage`` under ``rule``, in graph order."""
        upstream = self.expected_upstream(stage)
        if rule == "off":
            return tuple(("skip", ("rule-off", *codes)) for _, codes in upstream)
        return upstream


def seeded(module: nn.Module, seed: int) -> nn.Module:
    """Re-initialise every parameter of ``module`` from ``seed`` (same weights on every machine)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.rand(p.shape, generator=gen) * 2 - 1)
    return module


def seeded_input(*shape: int, seed: int = 1234) -> torch.Tensor:
    """A fixed input tensor in [-1, 1)."""
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) * 2 - 1
