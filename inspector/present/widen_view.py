"""How ``layers`` and ``widen`` read: text, Markdown, HTML and a plot, from one set of rows.

Imported once (by ``inspector``) for what it does: it registers the drawings ``widen_bundle`` and ``widen_plot`` in the
ground floor's table, which ``Layers`` and ``Widening`` ask.
"""

from __future__ import annotations

from .._base import display as _display
from .._base.formats import MISSING, cycles, db
from .._advise.widen_records import NOT_COUNTED, Layers, Widening
from .markup import escape, markdown_table
from .plots import figure


def _num(v, unit: str = "") -> str:
    if v is None:
        return MISSING
    return db(v) if unit == "dB" else f"{v:.4g}"


def layers_rows(table: Layers) -> list[list[str]]:
    """One row per layer: node, op, where, cycles, SQNR, max |error|, dB entering (each model-derived string raw)."""
    out = []
    for x in table.layers:
        out.append([x.node or f"({x.vela_name})", x.op, x.where.upper(),
                    "not counted" if x.cycles is None else cycles(x.cycles), _num(x.sqnr_db, "dB"),
                    _num(x.max_abs_error), _num(x.drop_db, "dB") + (" *" if x.entry_point else "")])
    return out


LAYER_HEAD = ["node", "op", "where", "cycles (Vela)", "SQNR (worst step)", "max |error|", "dB entering"]
POINT_HEAD = ["overrides", "cycles", "value", "measured", "within", "frontier", "on CPU"]


def points_rows(w: Widening) -> list[list[str]]:
    return [[p.label + (" <- pick" if p == w.pick else ""), cycles(p.cycles) if p.cycles is not None else MISSING,
             _num(p.value), "measured" if p.measured else "predicted", "yes" if p.within else "no",
             "yes" if p.frontier else "", str(p.on_cpu)] for p in w.points]


def _text_table(head, rows) -> str:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths))
    return "\n".join([line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def layers_text(table: Layers) -> str:
    lines = [f"{table.target} on {table.accelerator} at {table.quantization}: Vela {table.cycles:,} cycles in all "
             f"({table.compiler}); the rows add up to {table.counted:,}. Error: the worst of {table.steps} step(s); "
             "* an entry point of the error.", _text_table(LAYER_HEAD, layers_rows(table))]
    if any(x.where == "cpu" for x in table.layers):
        lines.append(f"CPU: {NOT_COUNTED}")
    return "\n".join(lines + list(table.notes))


def _with(w: Widening, name: str) -> str:
    """``; widened with a, b``: the other nodes of a candidate's group (its pattern and its tensor's readers)."""
    others = [n for n in dict(w.groups).get(name, ()) if n != name]
    return f"; widened with {', '.join(others)}" if others else ""


def widening_text(w: Widening) -> str:
    return "\n".join([w.answer() + ".", f"budget {w.budget} ({w.better} is better); search: {w.search}, "
                      f"{w.lowerings} lowering(s), {w.simulated} set(s) on the simulation; candidates: "
                      + ", ".join(f"{n} ({why}{_with(w, n)})" for n, why in w.why),
                      _text_table(POINT_HEAD, points_rows(w)), "", "The quantizer configuration of the pick:",
                      w.config, *w.notes])


def widening_markdown(w: Widening) -> str:
    """The report's section: the answer, the points, the configuration to paste."""
    esc = lambda s: escape(str(s)).replace("|", "\\|")
    table = lambda head, rows: "\n".join(markdown_table(head, [[esc(c) for c in r] for r in rows]))
    return "\n\n".join(["## Which layers need more bits", esc(w.answer()) + ".",
                        table(POINT_HEAD, points_rows(w)), "Per layer (the baseline):",
                        table(LAYER_HEAD, layers_rows(w.layers)), "The quantizer configuration of the pick:",
                        "```python\n" + w.config + "```", *(f"- {esc(n)}" for n in w.notes)])


def _html(head, rows) -> str:
    return ("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>" for r in rows) + "</table>")


def widening_html(w: Widening) -> str:
    """The report's section as HTML: the answer, the points, the per-layer table, the configuration to paste."""
    notes = "".join(f"<li>{escape(n)}</li>" for n in (*w.notes, *w.layers.notes))
    return ("<h2>Which layers need more bits</h2>" + f"<p>{escape(w.answer())}.</p>" + _html(POINT_HEAD, points_rows(w))
            + f"<p>{escape(layers_text(w.layers).splitlines()[0])}</p>" + _html(LAYER_HEAD, layers_rows(w.layers))
            + "<p>The quantizer configuration of the pick:</p>" + f"<pre>{escape(w.config)}</pre>"
            + (f"<ul>{notes}</ul>" if notes else ""))


def bundle(record) -> dict:
    if isinstance(record, Layers):
        html = f"<p>{escape(layers_text(record).splitlines()[0])}</p>" + _html(LAYER_HEAD, layers_rows(record))
        return {"text/plain": layers_text(record), "text/html": html}
    html = (f"<p>{escape(record.answer())}.</p>" + _html(POINT_HEAD, points_rows(record))
            + f"<pre>{escape(record.config)}</pre>")
    return {"text/plain": widening_text(record), "text/html": html}


def plot(record):
    """A matplotlib Figure without pyplot's state (``plots.figure``): a table's cycles and error, or a widening's points."""
    if isinstance(record, Layers):
        rows = [x for x in record.layers if x.node is not None]
        fig = figure(figsize=(max(6, 0.5 * len(rows)), 3.5))
        ax = fig.add_subplot()
        ax.bar(range(len(rows)), [x.cycles or 0 for x in rows],
               color=["#bbb" if x.where == "cpu" else "#4c72b0" for x in rows])
        ax.set_ylabel("Vela cycles (grey: CPU, not counted)")
        ax.set_xticks(range(len(rows)), [x.node for x in rows], rotation=60, ha="right", fontsize=7)
        twin = ax.twinx()
        twin.plot(range(len(rows)), [x.drop_db if x.drop_db is not None else float("nan") for x in rows], "o",
                  color="#c44e52")
        twin.set_ylabel("dB entering (attribution)")
        ax.set_title(f"{record.target} on {record.accelerator}: cost beside error")
    else:
        fig = figure(figsize=(6, 4))
        ax = fig.add_subplot()
        for measured, marker in ((True, "o"), (False, "x")):
            pts = [p for p in record.points if p.measured == measured and p.value is not None and p.cycles is not None]
            ax.scatter([p.cycles for p in pts], [p.value for p in pts], marker=marker,
                       label="measured (TOSA, Vela)" if measured else "predicted")
        ax.scatter([record.pick.cycles], [record.pick.value], s=160, facecolors="none", edgecolors="#c44e52",
                   label="pick")
        ax.axhline(record.limit, color="#999", linestyle="--", label=f"budget {record.budget}")
        ax.set_xlabel("Vela cycles")
        ax.set_ylabel(record.metric)
        ax.legend(fontsize=7)
        ax.set_title(f"{record.target}: which layers need more bits")
    fig.tight_layout()
    return fig


_display.provide(widen_bundle=bundle, widen_plot=plot)

__all__ = ["layers_text", "widening_html", "widening_markdown", "widening_text"]
