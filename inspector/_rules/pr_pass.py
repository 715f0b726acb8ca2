"""executorch PR #21234's own pass file as a fold rule, and what its own functions decide on a graph.

The rule ``state-aware`` is this project's re-implementation of the guard PR #21234 proposes
(``StateGuard(top_level_markers=True)`` hiding muls from the installed pass). Here the PR's code itself runs:
``pr_rule(path)`` loads the PR's ``fold_scalar_mul_into_conv_pass.py`` against the installed executorch (the door
``_doors/pr_pass_loader.py``: the helper it imports and the installed release lacks is taken from the PR's
``arm_pass_utils.py`` beside it) and registers it as a pass-class rule (``Rule.from_pass``), labelled "PR #21234's
pass file (...)". ``pr_decisions(pr, graph_module, exported_program)`` runs the PR's pass on a private copy of a
graph, recording what each of its own functions answered for every site, in the order its ``call`` asks them.

The PR's files do not ship with the project: the user fetches the two of them from the PR's head commit, and
``scripts/check_pr_21234.py DIR`` checks them (the PR's decisions on graphs from ExecuTorch's own flows, against
``state-aware``) and prints how to get them when they are missing.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from torch.fx import GraphModule, Node

from .._base.copies import private_copy
from .._base.errors import InspectorError, quoted
from .._doors import pr_pass_loader as _loader
from .._sites import graph as _graph
from .rules import Rule, register

PR = 21234
NAME = "pr-21234"  # the rule's default name: what users type (--rule pr-21234)

# The checks of the PR's ``call`` that keep a site from folding, in the order it makes them (its own method names).
NOT_ALLOWED = "allowed_to_transform"  # the quantizer opted the node out of transform-for-annotation
NOT_MATCHED = "_match_mul_after_conv"  # not a mul of a lone, non-transposed conv by a constant float channel scale
SIGNATURE = "_feeds_state_boundary:signature"  # reaches a BUFFER_MUTATION / USER_INPUT_MUTATION output
MARKER = "_feeds_state_boundary:marker"  # reaches a node its is_carried_quant_state reads as marked
NOT_FOLDED = "_fold_scale_into_conv"  # matched, but the weight or bias is not a constant it can scale
GUARD = (SIGNATURE, MARKER)


def pr_label(where: str) -> str:
    """What a rule or column made from the PR's pass file is called: "PR #21234's pass file (WHERE)"."""
    return f"PR #{PR}'s pass file ({where})"


def pr_rule(path: str | Path, *, name: str = NAME, commit: str | None = None, helpers=(),
            register_it: bool = True) -> Rule:
    """A rule that runs PR #21234's own pass file where the installed pass would run.

    Args:
        path: the PR's ``fold_scalar_mul_into_conv_pass.py``, as the user fetched it.
        name: the rule's name (default ``pr-21234``).
        commit: the commit the file is from, shown in the label instead of the path (default: the path).
        helpers: the PR's helper files (default: ``arm_pass_utils.py`` beside ``path``, fetched with it).
        register_it: register the rule, so that every entry point offers it (default True).
    """
    loaded = _loader.load_pass_file(path, helpers=helpers)
    label = pr_label(commit or str(path))
    rule = Rule.from_pass(loaded.pass_class, name=name, source=label, register_it=False,
                          help=f"executorch PR #{PR}'s own pass file run instead of the installed pass "
                               "(an open pull request, in no release)")
    return register(rule, replace=True) if register_it else rule


@dataclass(frozen=True, kw_only=True)
class PrDecision:
    """What PR #21234's own functions decided for one site of a graph."""

    site: str  # the site id (stable across stages)
    mul: str  # the site's mul node, in the graph given
    decision: str  # "fold" or "skip"
    checks: tuple[str, ...]  # the PR's checks that kept it from folding (NOT_ALLOWED, ..., NOT_FOLDED); () for a fold
    reached: tuple[str, ...]  # the state boundaries its guard found downstream of the mul (names; () if not asked)

    @property
    def guarded(self) -> bool:
        """The PR's state guard is what kept the site from folding."""
        return any(c in GUARD for c in self.checks)


def pr_decisions(pr: Rule | _loader.LoadedPassFile | type, graph_module: GraphModule,
                 exported_program=None) -> tuple[PrDecision, ...]:
    """Per site of ``graph_module`` (in graph order), what the PR's pass decides, by its own functions.

    Args:
        pr: the rule ``pr_rule`` made, the loaded pass file, or the PR's pass class.
        graph_module: the graph the pass receives (never changed: the pass runs on a private copy).
        exported_program: the program the pass is built with (None: transform-for-annotation, ``tfa_pass=True``).

    The PR's ``call`` runs as it is; a subclass records what ``allowed_to_transform``, ``_match_mul_after_conv``,
    ``_feeds_state_boundary`` and ``_fold_scale_into_conv`` answered for each mul, and when the guard fires, asks
    ``_feeds_state_boundary`` again with the signature's names (``_state_mutation_value_names``) and with the names
    the PR's ``is_carried_quant_state`` reads as marked, apart, to say which of the two fired.
    """
    pass_class = _pass_class(pr)
    cands = _graph.candidates(graph_module.graph)
    ids = dict(zip((c.mul.name for c in cands), _graph.site_ids(cands)))
    gm, program = _private(graph_module, exported_program)
    marked = _loader.pass_file_namespace(pass_class).get("is_carried_quant_state")
    if not callable(marked):
        raise InspectorError(f"the pass class {pass_class.__name__} reads no is_carried_quant_state: "
                             f"not PR #{PR}'s pass file")
    heard: dict[str, dict] = {name: {"checks": [], "reached": ()} for name in ids}
    metas = {id(n.meta): n.name for n in gm.graph.nodes}

    class Recording(pass_class):  # type: ignore[misc, valid-type]
        def allowed_to_transform(self, meta, *args, **kwargs):
            allowed = super().allowed_to_transform(meta, *args, **kwargs)
            name = metas.get(id(meta))
            if not allowed and name in heard:
                heard[name]["checks"].append(NOT_ALLOWED)
            return allowed

        def _match_mul_after_conv(self, node: Node):
            match = super()._match_mul_after_conv(node)
            if match is None and node.name in heard:
                heard[node.name]["checks"].append(NOT_MATCHED)
            return match

        def _feeds_state_boundary(self, node: Node, state_names):
            feeds = super()._feeds_state_boundary  # the PR's own walk (bound here: a comprehension has no super())
            fires = feeds(node, state_names)
            if fires and node.name in heard:
                signature = self._state_mutation_value_names()
                markers = {n.name for n in node.graph.nodes if marked(n)}
                heard[node.name]["checks"] += [c for c, names in ((SIGNATURE, signature), (MARKER, markers))
                                               if feeds(node, names)]
                heard[node.name]["reached"] = tuple(sorted(n for n in state_names if feeds(node, {n})))
            return fires

        def _fold_scale_into_conv(self, graph, conv_node, mul_node, channel_scale):
            name = mul_node.name  # the mul is erased by a fold
            result = super()._fold_scale_into_conv(graph, conv_node, mul_node, channel_scale)
            if result is None and name in heard:
                heard[name]["checks"].append(NOT_FOLDED)
            return result

    fold_pass = Recording(program) if program is not None else Recording(tfa_pass=True)
    fold_pass.call(gm)
    left = {n.name for n in gm.graph.nodes}
    return tuple(PrDecision(site=ids[name], mul=name, decision="skip" if name in left else "fold",
                            checks=tuple(heard[name]["checks"]), reached=heard[name]["reached"])
                 for name in ids)


def _pass_class(pr) -> type:
    if isinstance(pr, Rule):
        if pr.pass_class is None:
            raise InspectorError(f"rule {quoted(pr.name)} runs the installed pass, not a pass file")
        return pr.pass_class
    if isinstance(pr, _loader.LoadedPassFile):
        return pr.pass_class
    if isinstance(pr, type):
        return pr
    raise InspectorError(f"pr_decisions needs the rule pr_rule made or a loaded pass file, got {quoted(pr)}")


def _private(graph_module: GraphModule, program):
    """A private (graph module, program) pair the pass may rewrite (the copied program owns the copied module)."""
    if program is None:
        return private_copy(graph_module), None
    program, graph_module = copy.deepcopy((program, graph_module))
    return graph_module, program

