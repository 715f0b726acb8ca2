"""A fold pass file shaped like an open pull request's, written for fold-inspector's tests.

It has what the loader and ``pr_decisions`` rely on in a pull request's pass file, and no executorch code: it
imports the installed pass and a helper that the installed ``arm_pass_utils`` lacks (``is_carried_quant_state``,
defined in the ``arm_pass_utils.py`` beside this file), and its module-level ``FoldScalarMulIntoConvPass`` keeps
a mul from folding when the mul, or a node its output reaches, carries the marker that helper reads. The
graph-signature check a real guard would make is left out: ``_state_mutation_value_names`` names no outputs.
"""

from executorch.backends.arm._passes.arm_pass_utils import is_carried_quant_state
from executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass import (
    FoldScalarMulIntoConvPass as InstalledFoldPass,
)
from executorch.exir.pass_base import PassResult
from torch.fx import GraphModule, Node


class FoldScalarMulIntoConvPass(InstalledFoldPass):
    """The installed fold, except for muls whose output reaches a node marked as carried quantized state."""

    def call(self, graph_module: GraphModule) -> PassResult:
        nodes = list(graph_module.graph.nodes)
        boundary = self._state_mutation_value_names() | {n.name for n in nodes if is_carried_quant_state(n)}
        # decided once, before the installed loop rewrites the graph; the matcher below reads it
        self._kept_for_state = {n for n in nodes if n.op == "call_function" and
                                self._feeds_state_boundary(n, boundary)}
        try:
            return super().call(graph_module)
        finally:
            self._kept_for_state = set()

    def _match_mul_after_conv(self, node: Node):
        if node in getattr(self, "_kept_for_state", ()):
            return None
        return super()._match_mul_after_conv(node)

    def _state_mutation_value_names(self) -> set[str]:
        """Output values that write state, by the graph signature: none here (this file reads markers only)."""
        return set()

    def _feeds_state_boundary(self, node: Node, boundary: set[str]) -> bool:
        """Whether ``node`` is in ``boundary`` or any node downstream of it is."""
        frontier, visited = [node], set()
        while frontier:
            current = frontier.pop()
            if current.name in boundary:
                return True
            visited.add(current)
            frontier += [u for u in current.users if u not in visited]
        return False
