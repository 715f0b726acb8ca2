"""Private copies of graphs the quantizer built, without the deep copy's one refusal.

``copy.deepcopy`` refuses a tensor that is not a graph leaf ("Only Tensors created explicitly by
the user (graph leaves) support the deepcopy protocol"). The quantizer's own passes make such
tensors: its constant folding turns ``gamma.reshape(1, -1, 1, 1)`` of a parameter (a layer
scale, as in ConvNeXt) into a get_attr constant that still carries its autograd history. The
installed pass and the rest of ``prepare_pt2e`` never copy the graph, so they run; a copy the
inspector makes to observe must not stop them. Such a tensor is copied as a detached clone
(the same values, dtype and ``requires_grad``; a copy has no use for the history).
"""

from __future__ import annotations

import copy
from typing import Any, Iterable

import torch


def private_copy(obj: Any, shared: Iterable[torch.Tensor] = ()) -> Any:
    """A deep copy of ``obj`` (a GraphModule, or anything holding modules) that also copies the
    non-leaf tensors a module holds, which ``copy.deepcopy`` refuses; the ``shared`` tensors are
    not copied (the copy holds the same ones)."""
    memo: dict[int, Any] = {id(t): t for t in shared}
    modules = obj.modules() if isinstance(obj, torch.nn.Module) else ()
    for module in modules:
        values = [*module._parameters.values(), *module._buffers.values(), *vars(module).values()]
        for value in values:
            if isinstance(value, torch.Tensor) and not value.is_leaf and id(value) not in memo:
                memo[id(value)] = value.detach().clone().requires_grad_(value.requires_grad)
    return copy.deepcopy(obj, memo)
