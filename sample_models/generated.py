"""Generated large graphs for scaling tests and benchmarks (no export needed).

``tfa_blocks(blocks)`` builds the kind of GraphModule the fold sees at tfa: weights
as ``get_attr``, ``conv2d(x) -> mul`` repeated side by side (every block reads the
input, every block's result is an output), every fourth block writing into a
buffer with ``copy_`` and every fifth conv having a second user. About 4.5 nodes
per block, so ``tfa_blocks(2300)`` has more than 10,000 nodes.
"""

from __future__ import annotations

import torch
from torch import fx, nn


def tfa_blocks(blocks: int, channels: int = 2, size: int = 4) -> fx.GraphModule:
    root = nn.Module()
    gen = torch.Generator().manual_seed(0)
    graph = fx.Graph()
    aten = torch.ops.aten
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(1, channels, size, size, device="meta")
    root.register_buffer("state", torch.zeros(1, channels, size, size))
    state = graph.get_attr("state")
    ends = []
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
        ends.append(mul)
    graph.output(tuple(ends))
    return fx.GraphModule(root, graph)
