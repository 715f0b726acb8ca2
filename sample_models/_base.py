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


def quantized(*conv_facts: str) -> Verdict:
    """An expected site at stage lowering in the INT flow (tosa-int): the quantized graph, its mul on RESCALEd
    integers, its conv's weight int8 and bias int32; ``conv_facts``: what else holds of its conv
    (``transposed-conv``). A site the tfa call folded is not in that graph at all."""
    return skip("quantized-graph", *conv_facts, "weight-not-float", "bias-not-float")


QUANTIZED: Verdict = quantized()


class SampleModel(nn.Module):
    """Base of every sample: seeded weights, example inputs, expected verdicts.

    Subclasses set ``SEED`` and implement ``example_inputs()`` and
    ``expected_upstream(stage)``; ``expected(stage, rule)`` derives the other
    rules unless a subclass overrides it. A trained sample may also carry real
    data: ``example_stream()`` (one input tuple per call, for a model that
    carries state from call to call) and ``held_out()`` (a classifier's inputs
    and true labels).
    """

    SEED = 0
    # Which output index feeds which input index on the next call (functional state).
    RECURRENT: dict[int, int] = {}

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        """What the installed pass decides at ``stage``, one verdict per site."""
        raise NotImplementedError

    def example_stream(self) -> list[tuple[torch.Tensor, ...]] | None:
        """Real inputs in order, one tuple per call (each shaped like ``example_inputs()``), for a model whose
        state carries from call to call; ``None`` when the sample has no such stream. Feed them to a model
        whose state is fresh (built anew, or after its ``reset()``)."""
        return None

    def held_out(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """A trained classifier's held-out inputs and their true labels (data it never trained on), for
        its task accuracy; ``None`` when the sample has none. The sample's ``predict(inputs)`` gives its
        labels in float."""
        return None

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
