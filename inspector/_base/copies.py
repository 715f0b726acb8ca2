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

import contextlib
import copy
import gc
import threading
from typing import Any
from collections.abc import Callable, Iterable

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


def copy_parameters_aside(parameters: Iterable[torch.nn.Parameter]) -> Callable[[], dict[int, torch.nn.Parameter]]:
    """Start deep-copying ``parameters`` in a background thread; the returned function waits for it
    and gives ``{id(original): copy}`` (or raises what the copy raised).

    A tensor copy releases the GIL, so the weights (140 MB in nfnet_l0) are copied while the
    calling thread does Python work that only reads them, such as an export on fake tensors."""
    originals = list(parameters)
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["copies"] = {id(p): copy.deepcopy(p) for p in originals}
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            done["error"] = exc

    thread = threading.Thread(target=run, name="fold-inspector-copy-weights", daemon=True)
    thread.start()

    def wait() -> dict[int, torch.nn.Parameter]:
        thread.join()
        if "error" in done:
            raise done["error"]
        return done["copies"]

    return wait


def swap_parameters(module: torch.nn.Module, copies: dict[int, torch.nn.Parameter]) -> None:
    """Put ``copies[id(p)]`` in place of every parameter ``p`` of ``module`` that has one (weights
    tied between modules stay tied: both get the same copy)."""
    for sub in module.modules():
        for name, p in sub._parameters.items():
            if p is not None and id(p) in copies:
                sub._parameters[name] = copies[id(p)]


@contextlib.contextmanager
def no_gc_pauses():
    """No cyclic garbage collection inside (process-wide; restored as it was after).

    Copies, the fold pass and ``to_edge`` allocate hundreds of thousands of objects, and the cyclic
    collector would walk the whole heap (the caller's included) several times meanwhile: about 30%
    of a re-decide at 10,000 nodes, and two full collections (about 1 s) in the first edge analysis
    of nfnet_l0. Nothing inside needs a garbage cycle collected before the call returns; the
    collector runs again as soon as it does."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
