"""What a picture of an analysis is drawn from: a graph and its ``Verdicts``.

The decider decides and supplies graphs: the pristine stage graph, the whole after-graph, and
the region around a site a focused picture shows (the pass run on it for the after side, the
pristine graph's part for the before side). This module chooses among them and says what to
draw: a focused picture comes from its region when the region holds every node the picture walks
through (``render.focus_walk``), else from the whole graph. The renderer is never told which.
"""

from __future__ import annotations

from collections.abc import Iterable

from .render import WHICH, Border, Verdicts, focus_walk
from .._base.errors import InspectorError, quoted


def picture(decider, analysis, which: str, *, errors=None, step: int | None = None, focus: str | None = None,
            hops: int = 2, hide: Iterable[str] = ("constants",)):
    """(graph, ``Verdicts``) to draw ``which`` graph of ``analysis`` (decided by ``decider``, a
    ``_decide.decide.Decider``). ``errors``: a variant of an attribution (anything with ``by_node``)
    or a dict of records by node name, drawn as the measured-error layer at ``step``."""
    if which not in WHICH:
        raise InspectorError(f"unknown graph {quoted(which)}; choose one of: {', '.join(WHICH)}")
    caption = tuple(analysis.caption(which))
    marked = frozenset(analysis.marked)
    region = None
    # A focused picture comes from the part of the graph it shows, also when the whole after-graph
    # is at hand: drawing reads every node of the graph it is given.
    if which == "after" and focus is not None and errors is None \
            and not analysis.rule.is_users:  # a user's pass or guard is not known to be local
        region = decider.focus_region(analysis, focus, hops)
    elif which == "before" and focus is not None and errors is None:
        region = decider.pristine_region(focus, hops)
    if region is not None:
        border = Border(outside_users=region.outside_users, held=decider.layout.held)
        signature = region.program.graph_signature if region.program is not None else None
        verdicts = Verdicts(sites=analysis.sites, after=which == "after", signature=signature, caption=caption,
                            marked=marked, border=border)
        walk = focus_walk(region.graph_module, verdicts, focus, hops=hops, hide=hide)
        if all(_holds(region, step_) for step_ in walk):
            return region.graph_module, verdicts
    if which == "after":
        gm, program = decider.after(analysis)
    else:  # the pristine stage graph; the markers the pass saw are named in the verdicts
        gm, program = decider.stage_graph.graph_module, decider.stage_graph.program
    signature = program.graph_signature if program is not None else None
    layer = {}
    if errors is not None and not isinstance(errors, dict):
        layer = errors.by_node(gm, analysis.sites, after=which == "after", step=step)
    elif errors:
        layer = dict(errors)
    if errors is not None and hasattr(errors, "label"):
        caption += (f"coloured by SQNR of variant {errors.label}"
                    + (f" at step {step + 1}" if step is not None else ", last step"),)
    return gm, Verdicts(sites=analysis.sites, after=which == "after", signature=signature, caption=caption,
                        errors=layer, marked=marked)


def _holds(region, step) -> bool:
    """A region draws a focused picture's node as the whole graph would: the node does not stand
    for the outside, and unless all its neighbours are in the region, the walk stops at it and it
    is not a constant (a fold outside the region may take users from a constant)."""
    if step.name in region.stand_ins:
        return False
    return step.name in region.complete or not (step.walks_on or step.constant)


__all__ = ["picture"]
