"""A journey drawn: its timeline as text and HTML, and the picture of one step (the site's neighbourhood
before and after the pass). The records (``_journey/records.py``) hold what each pass did; this draws them."""

from __future__ import annotations

from dataclasses import replace

from .._base.formats import MISSING, db, error
from .._journey.records import Change, Journey, Step
from .._base.errors import InspectorError
from .markup import escape as e
from .render import Verdicts, render_pair


def change_text(c: Change) -> str:
    """One line: what the pass did to the node."""
    return f"{c.kind} {c.role} {c.node}: {c.detail}"


def step_text(s: Step) -> str:
    """The step's line and one line per change."""
    head = f"{s.phase:<24} {s.name}"
    if not s.changes:
        return head + "  (did not touch the site)"
    return head + "".join(f"\n{'':27}{change_text(c)}" for c in s.changes)


def _sqnr(v) -> str:
    """An SQNR against float as every table writes it (``inf`` for an exact match), with its unit."""
    return MISSING if v is None else f"{db(v)} dB"


def journey_text(j: Journey) -> str:
    """A compact timeline: every step that touched the site, the ending, the numbers."""
    lines = [f"journey of site {j.site} in {j.target} under {j.variant} "
             f"({j.decision}; conv {j.conv}, mul {j.mul})",
             f"{len(j.passes)} passes ran; {len(j.touched())} steps touched the site, "
             f"{j.untouched} passes did not"]
    for s in j.steps:
        lines.append(f"[{s.index:>3}] " + step_text(s))
    lines.append(f"end: {j.ending.detail}")
    if j.ending.vela:
        lines.append(f"Vela: {j.ending.vela}" + (f" [{j.cost.compiler}]" if j.cost is not None else ""))
    for p in j.numbers:
        lines.append(f"  {p.point:<32} site {_sqnr(p.site_sqnr_db)} (max |err| {error(p.site_max_abs)}), "
                     f"output {_sqnr(p.output_sqnr_db)}  [{p.engine}]" + (f"  {p.note}" if p.note else ""))
    lines.extend(f"moved: {m}" for m in j.moved)
    lines.extend(f"note: {n}" for n in j.notes)
    return "\n".join(lines)


def journey_html(j: Journey) -> str:
    """The timeline as an HTML fragment (every name from the model escaped)."""
    rows = []
    for s in j.steps:
        changes = "<br>".join(e(change_text(c)) for c in s.changes) or "<i>did not touch the site</i>"
        rows.append(f"<tr><td>{s.index}</td><td>{e(s.phase)}</td><td><code>{e(s.name)}</code></td>"
                    f"<td>{changes}</td></tr>")
    points = "".join(f"<tr><td>{e(p.point)}</td><td>{e(_sqnr(p.site_sqnr_db))}</td><td>{e(error(p.site_max_abs))}</td>"
                     f"<td>{e(_sqnr(p.output_sqnr_db))}</td><td>{e(p.engine)}</td><td>{e(p.note)}</td></tr>"
                     for p in j.numbers)
    notes = "".join(f"<li>{e(n)}</li>" for n in (*j.moved, *j.notes))
    compiler = f"<br><small class='fi-compiler'>compiler: {e(j.cost.compiler)}</small>" if j.cost is not None else ""
    vela = f"<p class='fi-vela'><b>Vela:</b> {e(j.ending.vela)}{compiler}</p>" if j.ending.vela else ""
    return (f"<div class='journey'><h3>Journey of site <code>{e(j.site)}</code> in {e(j.target)} "
            f"under <code>{e(j.variant)}</code></h3>"
            f"<p>{len(j.passes)} passes ran; {len(j.touched())} steps touched the site, "
            f"{j.untouched} passes did not.</p>"
            f"<table><tr><th>#</th><th>phase</th><th>pass</th><th>what it did to the site</th></tr>{''.join(rows)}"
            f"</table><p><b>End:</b> {e(j.ending.detail)}</p>"
            + vela +
            f"<table><tr><th>point</th><th>site SQNR</th><th>site max |err|</th><th>output SQNR</th>"
            f"<th>engine</th><th>note</th></tr>{points}</table><ul>{notes}</ul></div>")


def journey_picture(j: Journey, step: int | Step):
    """The site's neighbourhood before and after ``step`` (a touched step or its index), drawn by the
    renderer with the site's marks: a ``graphviz.Digraph``."""
    chosen = j.steps[step] if isinstance(step, int) else step
    if chosen.graph_before is None or chosen.graph_after is None or j.site_record is None:
        raise InspectorError(f"no picture of step {chosen.index} ({chosen.name}): it did not touch the site, "
                             "or the journey was read from JSON")
    names = _names_at(j.steps, chosen, j.conv, j.mul)
    before = replace(j.site_record, conv=names[0][0], mul=names[0][1], decision="skip", reasons=())
    after = replace(j.site_record, conv=names[1][0], mul=names[1][1], decision="skip", reasons=())
    caption = (f"{j.target}, site {j.site}, rule {j.variant}", f"step {chosen.index}: {chosen.phase} / {chosen.name}")
    return render_pair(chosen.graph_before, chosen.graph_after, (Verdicts(sites=(before,)), Verdicts(sites=(after,))),
                       caption=caption, focus=j.site, hops=2)


def _names_at(steps, chosen: Step, conv: str, mul: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The conv and mul names before and after ``chosen``, replaying the steps' removals and creations."""
    now = [conv, mul]
    before = tuple(now)
    for s in steps:
        if s.index == chosen.index:
            before = tuple(now)
        for c in s.changes:
            if c.kind == "created" and c.role in ("conv", "mul"):
                now[0 if c.role == "conv" else 1] = c.node
            if c.kind == "removed" and c.role == "mul" and c.node == now[1]:
                now[1] = ""
        if s.index == chosen.index:
            return before, tuple(now)  # type: ignore[return-value]
    return before, tuple(now)  # type: ignore[return-value]


__all__ = ["change_text", "journey_html", "journey_picture", "journey_text", "step_text"]
