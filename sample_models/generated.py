"""Generated large graphs for scaling tests and benchmarks (no export needed).

``tfa_blocks(blocks)`` builds the kind of GraphModule the fold sees at tfa: weights
as ``get_attr``, ``conv2d(x) -> mul`` repeated side by side (every block reads the
input; the blocks' results are summed into the one output, as a network's branches
are), every fourth block writing into a buffer with ``copy_`` and every fifth conv
having a second user. About 5.5 nodes per block, so ``tfa_blocks(1850)`` has more
than 10,000 nodes.

(An earlier version returned every block's result as an output of its own. No real
network has thousands of outputs, and torch.fx rewrites a node's whole argument list
each time the pass replaces one of its inputs, so that shape made every fold cost
time proportional to the number of outputs.)
"""

from __future__ import annotations

import torch
from torch import fx, nn

from ._base import FOLD, QUANTIZED, SampleModel, Verdict, seeded, seeded_input, skip


def tfa_blocks(blocks: int, channels: int = 2, size: int = 4, *, join: str = "sum") -> fx.GraphModule:
    """``join="sum"``: the blocks' results are summed into one output (a deep graph, like a
    network); ``join="outputs"``: every block's result is an output of its own (a wide, shallow
    graph: what the whole-graph drawing benchmark lays out)."""
    if join not in ("sum", "outputs"):
        raise ValueError(f"join must be 'sum' or 'outputs', got {join!r}")
    root = nn.Module()
    gen = torch.Generator().manual_seed(0)
    graph = fx.Graph()
    aten = torch.ops.aten
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(1, channels, size, size, device="meta")
    root.register_buffer("state", torch.zeros(1, channels, size, size))
    state = graph.get_attr("state")
    total, ends = x, []
    for i in range(blocks):
        root.register_parameter(f"w{i}", nn.Parameter(torch.rand(channels, channels, 3, 3, generator=gen) - 0.5))
        root.register_parameter(f"b{i}", nn.Parameter(torch.rand(channels, generator=gen) - 0.5))
        w, b = graph.get_attr(f"w{i}"), graph.get_attr(f"b{i}")
        conv = graph.call_function(aten.conv2d.default, (x, w, b, [1, 1], [1, 1]))
        conv.meta["val"] = torch.empty(1, channels, size, size, device="meta")
        mul = graph.call_function(aten.mul.Tensor, (conv, 0.5))
        mul.meta["val"] = conv.meta["val"]
        if i % 5 == 4:  # a second user of the conv: not foldable
            mul = graph.call_function(aten.add.Tensor, (mul, conv))
            mul.meta["val"] = conv.meta["val"]
        if i % 4 == 3:  # carried state: written back into the buffer
            graph.call_function(aten.copy_.default, (state, mul))
        if join == "outputs":
            ends.append(mul)
            continue
        total = graph.call_function(aten.add.Tensor, (total, mul))
        total.meta["val"] = conv.meta["val"]
    graph.output(tuple(ends) if join == "outputs" else (total,))
    return fx.GraphModule(root, graph)


class GeneratedBlocks(SampleModel):
    """A generated network of 200 parallel conv blocks (over 1,000 nodes, 200 sites), for big graphs.

    Every block scales a 3x3 conv of the input by a constant; every fifth block's conv has a
    second user (``y * s + y``), and every fourth block writes its result into a state buffer of
    its own, which the strict rule protects.
    """

    SEED = 108
    RECURRENT: dict[int, int] = {}

    def __init__(self, blocks: int = 200, channels: int = 4, size: int = 8) -> None:
        super().__init__()
        self.blocks, self.channels, self.size = blocks, channels, size
        self.convs = nn.ModuleList(nn.Conv2d(channels, channels, 3, padding=1) for _ in range(blocks))
        seeded(self, self.SEED)
        for i in range(blocks):
            if i % 4 == 3:
                self.register_buffer(f"state_{i}", torch.zeros(1, channels, size, size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = x
        for i, conv in enumerate(self.convs):
            y = conv(x)
            out = y * (0.5 + (i % 7) / 10)
            if i % 5 == 4:
                out = out + y  # a second user of the conv
            if i % 4 == 3:
                getattr(self, f"state_{i}").copy_(out)  # carried state
            total = total + out
        return total

    def example_inputs(self):
        return (seeded_input(1, self.channels, self.size, self.size),)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        if stage == "lowering":  # the INT flow: the blocks that fold at tfa are gone, the others are quantized
            return tuple(QUANTIZED for i in range(self.blocks) if i % 5 == 4)
        return tuple(skip("conv-has-other-users") if i % 5 == 4 else FOLD for i in range(self.blocks))

    def expected(self, stage: str, rule: str) -> tuple[Verdict, ...]:
        if stage == "lowering":
            return super().expected(stage, rule)
        guarded = rule == "state-aware-strict" or (rule == "state-aware" and stage == "edge")
        out = []
        for i in range(self.blocks):
            codes = ("conv-has-other-users",) if i % 5 == 4 else ()
            if guarded and i % 4 == 3:
                codes = ("feeds-buffer-mutation", *codes)
            if rule == "off":
                codes = ("rule-off", *codes)
            out.append(skip(*codes) if codes else FOLD)
        return tuple(out)
