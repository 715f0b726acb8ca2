"""A pass class of the user's, run where the installed fold pass would run, and held to the fold.

A rule made with ``Rule.from_pass(cls)`` runs ``cls`` (a patched copy of the pass from a fork
or from an open pull request) instead of the installed ``FoldScalarMulIntoConvPass``: in every
stage the inspector decides and inside a comparison's quantize -> lower flow. It has the
installed pass's constructor (``cls(exported_program)`` / ``cls(tfa_pass=True)``) and is run
through a subclass that

- sets the variant's markers on the graph it receives (as the installed pass's wrapper does);
- records which sites it folded from the graph it leaves: a site's mul gone, and what read the
  mul reading its conv instead (the conv's weight then holds the scaled values: another weight
  node, or at tfa the same get_attr written in place; a scale of exactly 1 leaves them equal);
- refuses, in one line, what a fold never does: a node that is neither a site's mul, nor what
  only fed removed nodes, nor a folded conv's old weight or bias disappears; a node appears that
  feeds anything but a folded conv; a mul disappears without its users reading its conv;
  the graph fails ``graph.lint()``; the class raises or does not take the constructor.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.fx import GraphModule, Node

from .._sites import graph as _graph
from .fold_runs import start_run
from .._base.errors import InspectorError, describe, quoted


def user_pass_class(rule, markers: tuple[str, ...], log) -> type:
    """A subclass of ``rule.pass_class`` that runs it as above and reports a ``FoldRun`` to ``log``."""
    base = rule.pass_class
    name = quoted(rule.name)

    class Run(base):  # type: ignore[misc, valid-type]
        __doc__ = f"{base.__name__}, the pass of rule {rule.name}, held to the fold."

        def __init__(self, *args, **kwargs):
            try:
                super().__init__(*args, **kwargs)
            except Exception as exc:  # the user's class: one line naming it
                raise InspectorError(
                    f"the pass class of rule {name} does not take the installed pass's constructor "
                    f"({base.__name__}(exported_program) or {base.__name__}(tfa_pass=True)): {describe(exc)}"
                ) from exc
            self._inspector_program = args[0] if args else kwargs.get("exported_program")

        def call(self, graph_module: GraphModule):
            run = start_run(graph_module, self._inspector_program, markers, log)
            before = _Snapshot.of(graph_module, _graph.candidates(graph_module.graph))
            try:
                result = super().call(graph_module)
            except InspectorError:
                raise
            except Exception as exc:  # the user's pass raised: one line naming it
                raise InspectorError(f"the pass of rule {name} raised: {describe(exc)}") from exc
            try:
                graph_module.graph.lint()
            except Exception as exc:
                raise InspectorError(f"the pass of rule {name} left a graph that fails graph.lint(): "
                                     f"{describe(exc)}") from exc
            run.folded = before.folded_in(graph_module, rule.name)
            run.folded_ids = [run.site_ids[m] for m in run.folded]
            if log is not None:
                log.add(run)
            return result

    Run.__name__ = Run.__qualname__ = f"{base.__name__}[{rule.name}]"
    return Run


@dataclass(kw_only=True)
class _Snapshot:
    """The graph before a user's pass ran: enough to tell what it folded and what else it changed."""

    names: list[str]  # every node, in graph order
    users: dict[str, set[str]]  # node name -> its users' names
    muls: dict[str, str]  # site mul -> its conv
    reads: dict[str, tuple]  # conv -> (weight name, bias name)

    @classmethod
    def of(cls, gm: GraphModule, cands) -> _Snapshot:
        nodes = list(gm.graph.nodes)
        reads = {c.conv.name: _reads(c.conv) for c in cands}
        return cls(names=[n.name for n in nodes], users={n.name: {u.name for u in n.users} for n in nodes},
                   muls={c.mul.name: c.conv.name for c in cands}, reads=reads)

    def folded_in(self, gm: GraphModule, rule: str) -> list[str]:
        """The site muls the pass folded, in graph order; raises on a change no fold makes."""
        by_name = {n.name: n for n in gm.graph.nodes}
        removed = set(self.names) - set(by_name)
        added = set(by_name) - set(self.names)
        folded, convs = [], set()
        for mul in self.names:
            conv = self.muls.get(mul)
            if conv is None or mul not in removed:
                continue
            node = by_name.get(conv)
            readers = [by_name[u] for u in self.users[mul] if u in by_name]
            if node is None or not all(node in u.all_input_nodes for u in readers):
                raise InspectorError(f"the pass of rule {quoted(rule)} removed {mul} without its users reading "
                                     f"{conv} instead: that is not a fold")
            folded.append(mul)
            convs.add(conv)
        allowed = set(folded)
        grew = True
        while grew:  # what only fed removed nodes, or was a folded conv's old weight or bias
            grew = False
            for name in removed - allowed:
                if all(u in allowed or (u in convs and name in self.reads.get(u, ())) for u in self.users[name]):
                    allowed.add(name)
                    grew = True
        stray = [n for n in self.names if n in removed - allowed]
        if stray:
            raise InspectorError(f"the pass of rule {quoted(rule)} removed {stray[0]}, which is neither a site's mul "
                                 "nor its conv's weight or bias: a rule may only fold")
        kept = set()
        grew = True
        while grew:  # new constants feed the folded convs (or other new nodes that do)
            grew = False
            for name in added - kept:
                if all(u.name in convs or u.name in kept for u in by_name[name].users) and by_name[name].users:
                    kept.add(name)
                    grew = True
        # Name the node that is really extra first: a new constant only looks stray when the extra
        # node reads it.
        stray = sorted((n for n in gm.graph.nodes if n.name in added - kept),
                       key=lambda n: n.op in ("placeholder", "get_attr"))
        stray = [n.name for n in stray]
        if stray:
            raise InspectorError(f"the pass of rule {quoted(rule)} added {stray[0]}, which feeds no folded conv: "
                                 "a rule may only fold")
        return folded


def _reads(conv: Node) -> tuple:
    return tuple(a.name if isinstance(a, Node) else None for a in conv.args[1:3])
