"""The built-in sample models: each teaches one behaviour of FoldScalarMulIntoConvPass.

Every model has fixed weights, ``example_inputs()``, and ``expected(stage, rule)``:
the decision and reason codes the inspector must report for each site, in graph order.
The expectations are written from the pass's rules (docs/stack-facts.md, "Which patterns fold") and checked
against the real installed pass by the test suite.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: F401 - kept: removing it would shift every site id (file:line)
from torch import nn

from ._base import FOLD, QUANTIZED, SampleModel, Verdict, quantized, seeded, seeded_input, skip



class ConvMulChannelScale(SampleModel):
    """``conv(x) * s`` with a learnable per-channel (1, C, 1, 1) scale: folds at every stage."""

    SEED = 1

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.scale = nn.Parameter(torch.ones(1, 4, 1, 1))
        seeded(self, self.SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * self.scale

    def example_inputs(self):
        return (seeded_input(1, 3, 8, 8),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return () if stage == "lowering" else (FOLD,)


class ConvMulScalar(SampleModel):
    """``0.25 * conv(x)``: a Python scalar on the left folds at every stage."""

    SEED = 2

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        seeded(self, self.SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.25 * self.conv(x)

    def example_inputs(self):
        return (seeded_input(1, 3, 8, 8),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return () if stage == "lowering" else (FOLD,)


class ConvMulMultipleUsers(SampleModel):
    """``y * 0.25 + y``: the conv output has a second user, so the pass cannot rewrite it."""

    SEED = 3

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        seeded(self, self.SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y * 0.25 + y

    def example_inputs(self):
        return (seeded_input(1, 3, 8, 8),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return (QUANTIZED,) if stage == "lowering" else (skip("conv-has-other-users"),)


class ConvMulWidthScale(SampleModel):
    """A (C,) scale broadcasts over the last (width) axis, not over channels: not foldable.

    Width equals the channel count on purpose, so the element count matches and only
    the broadcast axis tells the two apart.
    """

    SEED = 4

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.register_buffer("scale", torch.tensor([0.5, 1.0, 2.0, 4.0]))
        seeded(self, self.SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * self.scale

    def example_inputs(self):
        return (seeded_input(1, 3, 6, 4),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return (QUANTIZED,) if stage == "lowering" else (skip("scale-not-channelwise"),)


class ConvMulWideDynamicRangeScale(SampleModel):
    """Per-channel scale from 1e-3 to 100 (five orders of magnitude): folds, flagged as a risk.

    After the fold one channel's output is 1e5 times smaller than another's inside one
    per-tensor quantized range; whether that hurts is what the TOSA reference run shows.
    """

    SEED = 5

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        seeded(self, self.SEED)
        self.register_buffer("scale", torch.tensor([1e-3, 1.0, 30.0, 100.0]).reshape(1, 4, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * self.scale

    def example_inputs(self):
        return (seeded_input(1, 3, 8, 8),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return () if stage == "lowering" else (FOLD,)


class StatefulConvMul(SampleModel):
    """``state <- conv(x + state) * 0.25`` written back into a registered buffer with ``copy_``.

    The installed pass folds it everywhere. ``state-aware`` skips it only at edge,
    where the graph signature records the write as a BUFFER_MUTATION. At aten
    (torch 2.13 keeps the ``copy_`` in the exported graph) and at tfa, where the INT
    flow really folds, only ``state-aware-strict`` sees the in-place write.
    """

    SEED = 6

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        seeded(self, self.SEED)
        self.register_buffer("state", torch.zeros(1, 4, 8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x + self.state) * 0.25
        self.state.copy_(y)
        return y

    def example_inputs(self):
        return (seeded_input(1, 4, 8, 8),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return () if stage == "lowering" else (FOLD,)

    def expected(self, stage: str, rule: str) -> tuple[Verdict, ...]:
        guarded = stage != "lowering" and (rule == "state-aware-strict" or (rule == "state-aware" and stage == "edge"))
        if guarded:
            return (skip("feeds-buffer-mutation"),)
        return super().expected(stage, rule)


class FunctionalRecurrentConvMul(SampleModel):
    """State passed in and returned: ``h' = conv(x + h) * 0.25``; returns ``(h' + x, h')``.

    No graph signature records that output 1 is fed back as input 1, so no structural
    guard can see it: only a ``carried_quant_state`` marker on the site stops the fold
    under the state-aware rules. ``RECURRENT`` declares the feedback for the runner.
    """

    SEED = 7
    RECURRENT = {1: 1}

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        seeded(self, self.SEED)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h_next = self.conv(x + h) * 0.25
        return h_next + x, h_next

    def example_inputs(self):
        return (seeded_input(1, 4, 8, 8), torch.zeros(1, 4, 8, 8))

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return () if stage == "lowering" else (FOLD,)


class Conv1dMul(SampleModel):
    """``conv1d(x) * 0.5``: the INT flow never folds it; only the FP flow (tosa-fp) does, in lowering.

    At tfa ``aten.conv1d`` is not in the pass's op set (``conv-op-not-matched``), and the lowering call gets the
    quantized graph (``quantized-graph``). Only a float program (edge, or lowering on tosa-fp) folds it.
    """

    SEED = 8

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3, padding=1)
        seeded(self, self.SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * 0.5

    def example_inputs(self):
        return (seeded_input(1, 3, 16),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return {"edge": (FOLD,), "lowering": (QUANTIZED,)}.get(stage, (skip("conv-op-not-matched"),))


class ConvTransposeMul(SampleModel):
    """A transposed convolution times a scalar: never folded (``transposed-conv``)."""

    SEED = 9

    def __init__(self) -> None:
        super().__init__()
        self.deconv = nn.ConvTranspose2d(4, 3, 3, stride=2)
        seeded(self, self.SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x) * 0.5

    def example_inputs(self):
        return (seeded_input(1, 4, 5, 5),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return {"edge": (skip("transposed-conv"),), "lowering": (quantized("transposed-conv"),)}.get(  # edge: convolution
            stage, (skip("conv-op-not-matched", "transposed-conv"),))  # aten.conv_transpose2d is not in the op set


class ConvMulChain(SampleModel):
    """``conv(x) * a * b``: the second mul only becomes foldable once the first one folded."""

    SEED = 10

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        seeded(self, self.SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * 0.5 * 3.0

    def example_inputs(self):
        return (seeded_input(1, 3, 8, 8),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return () if stage == "lowering" else (FOLD, FOLD)

    def expected(self, stage: str, rule: str) -> tuple[Verdict, ...]:
        if rule == "off" and stage != "lowering":
            return (skip("rule-off"), skip("rule-off", "follows-unfolded-mul"))
        return super().expected(stage, rule)


class ConvMulInputScale(SampleModel):
    """``conv(x) * gate`` where the gate is a model input: the scale is not a constant."""

    SEED = 11

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        seeded(self, self.SEED)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * gate

    def example_inputs(self):
        return (seeded_input(1, 3, 8, 8), seeded_input(1, 4, 1, 1, seed=99))

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return (QUANTIZED,) if stage == "lowering" else (skip("scale-not-constant"),)


class SharedConvMul(SampleModel):
    """One conv module called twice, each output scaled differently.

    At tfa both convs read the same ``get_attr`` weight, which the pass will not
    overwrite in place (``weight-shared``). With an exported program (aten, edge) it
    folds both, but names the scaled weight after the shared original and reuses the
    first one it made: both convs end up with the first scale, and the folded graph
    no longer computes the same float output. The inspector flags this as the risk
    ``folded-weight-reused``.
    """

    SEED = 12

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        seeded(self, self.SEED)

    def forward(self, x: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * 0.5 + self.conv(x2) * 2.0

    def example_inputs(self):
        return (seeded_input(1, 3, 8, 8), seeded_input(1, 3, 8, 8, seed=77))

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        if stage == "tfa":
            return (skip("weight-shared"), skip("weight-shared"))
        return (QUANTIZED, QUANTIZED) if stage == "lowering" else (FOLD, FOLD)


class ConvBatchNormMul(SampleModel):
    """``bn(conv(x)) * 0.5``: no site at aten or edge (the mul follows BatchNorm), but the quantizer's
    ``prepare_pt2e`` fuses BatchNorm into the conv before transform-for-annotation: at tfa the mul
    follows the conv directly, and the installed pass folds it."""

    SEED = 13

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        seeded(self, self.SEED)
        with torch.no_grad():
            self.bn.running_var.fill_(1.5)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x)) * 0.5

    def example_inputs(self):
        return (seeded_input(1, 3, 8, 8),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return (FOLD,) if stage == "tfa" else ()


class StatefulWideScale(SampleModel):
    """``state <- 0.75 state + conv(x) * s`` in a buffer, with a per-channel scale from 1 to 1000 that
    balances the conv's channels: here folding changes the quantized numbers a lot.

    The conv's output channels span three orders of magnitude (trained that way: the scale
    undoes it). Unfolded, the conv output is quantized per tensor before the scale, so its
    small channels are rounded away and the scale multiplies the rounding error by up to 1000,
    straight into the carried state. Folded, the scale lives in the per-channel quantized
    weights and the conv output is balanced. ``stateful_conv_mul`` (scale 0.25) is the
    counter-example where folding is numerically neutral.
    """

    SEED = 14

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        seeded(self, self.SEED)
        magnitude = torch.tensor([1.0, 0.1, 0.01, 0.001])
        with torch.no_grad():
            self.conv.weight.mul_(magnitude.reshape(4, 1, 1, 1))
            self.conv.bias.mul_(magnitude)
        self.register_buffer("scale", (1.0 / magnitude).reshape(1, 4, 1, 1))
        self.register_buffer("state", torch.zeros(1, 4, 8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x) * self.scale
        new = self.state * 0.75 + y
        self.state.copy_(new)
        return new

    def example_inputs(self):
        return (seeded_input(1, 4, 8, 8),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return () if stage == "lowering" else (FOLD,)

    def expected(self, stage: str, rule: str) -> tuple[Verdict, ...]:
        guarded = stage != "lowering" and (rule == "state-aware-strict" or (rule == "state-aware" and stage == "edge"))
        if guarded:
            return (skip("feeds-buffer-mutation"),)
        return super().expected(stage, rule)


class ConvViewScale(SampleModel):
    """A per-channel scale applied through a view of the conv output: never folded (``scale-behind-view``).

    ``(y.view(b, g, c // g, h, w) * s).view(b, c, h, w)``, the shape of the streaming pitch tracker PESTO's
    front end: the conv's channels are grouped and each group scaled. The mul reads a view of the conv output,
    not the conv, and the pass only matches a mul on the conv itself, so it never folds it at any stage,
    although the scale is a constant per output channel.
    """

    SEED = 15

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        seeded(self, self.SEED)
        self.register_buffer("scale", torch.linspace(0.25, 2.0, 8).reshape(1, 2, 4, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        b, c, h, w = y.shape
        return (y.view(b, 2, c // 2, h, w) * self.scale).view(b, c, h, w)

    def example_inputs(self):
        return (seeded_input(1, 3, 8, 8),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return (quantized("scale-behind-view"),) if stage == "lowering" else (skip("scale-behind-view"),)
