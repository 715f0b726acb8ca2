"""An advice drawn: text, HTML, a Markdown reply for an issue or a pull request, the frontier's plot.

Every dB says its engine (the simulation searched, the TOSA reference model confirmed); every cycle count says
whether Vela counted it or it is predicted from the sites' prices.
"""

from __future__ import annotations

from .._base.formats import GITHUB_COMMENT_LIMIT, MISSING, cycles, cycles_change, db, db_change, plot_db
from .._cost.records import ESTIMATE
from .._numbers.measures import metrics
from .markup import escape, markdown_table, md_code
from .report import Redactor
from .tables import html_table, text_table


def _table_html(rows: list[dict[str, str]]) -> str:
    return html_table("fi-rows", "", rows) if rows else "<p><i>none</i></p>"


def _names(sites) -> str:
    return ", ".join(sites) if sites else "nothing"


def _markers(markers) -> str:
    return "none pick this set (use Advice.rule())" if markers is None else _names(markers)


class _Budget:
    """How the advice's budget measurement is written: dB and ``db()`` for SQNR; another measurement by its own
    format and name (a measurement this process does not know: plain numbers)."""

    def __init__(self, a):
        self.metric = metrics.by_key(a.metric)
        self.unit = "dB" if a.metric == "sqnr" else a.metric
        self.unit_md = self.unit if a.metric == "sqnr" else md_code(a.metric)  # a user's name is shown literally
        self.lower = self.metric is not None and self.metric.better == "lower"

    def value(self, v) -> str:
        if self.unit == "dB":
            return db(v)
        return self.metric.format(v) if self.metric is not None else (MISSING if v is None else f"{v:.4g}")

    def change(self, v) -> str:
        if self.unit == "dB":
            return db_change(v)
        return MISSING if v is None else f"{v:+.4g}"


def site_rows(a) -> list[dict[str, str]]:
    """Per site: the cycles folding it buys, and its effect on the budget's measurement in each direction (sim)."""
    b = _Budget(a)
    return [{"site": s.site, "folding buys (cycles, Vela)": cycles(s.cycles),
             f"{b.unit} folded alone (sim)": b.change(s.db_folded_alone),
             f"{b.unit} kept alone (sim)": b.change(s.db_kept_alone),
             "advised": "fold" if s.site in a.folded else "keep", "price from": s.how} for s in a.sites]


def point_rows(a) -> list[dict[str, str]]:
    """Per set: its cycles (Vela's where it was lowered, else predicted) and its dB (simulation; TOSA where lowered),
    with the gap between prediction and measurement at every point measured."""
    b = _Budget(a)
    return [{"folded": _names(p.folded), "cycles": cycles(p.cycles), "cycles from": _from(p),
             "predicted cycles": cycles(p.predicted_cycles), "Vela - predicted": cycles_change(p.gap["cycles"]),
             "markers": _markers(p.markers) if p.markers else "–" if p.markers is None else "nothing",
             f"worst {b.unit} (sim)": b.value(p.db), f"TOSA {b.unit}": b.value(p.tosa_db),
             f"TOSA - sim ({b.unit})": b.change(p.gap["db"]), f"{b.unit} from the sites": b.value(p.db_predicted),
             "within budget": "yes" if p.within else "no",
             "": ("recommended" if p == a.recommended else "frontier" if p.frontier else "")}
            for p in sorted(a.points, key=lambda p: (p.cycles is None, p.cycles or 0))]


def _from(p) -> str:
    return {"vela": "Vela (lowered)", "predicted": "predicted"}.get(p.cycles_from, MISSING)


def against_rows(a) -> list[dict[str, str]]:
    """The recommendation against the rules users run (TOSA and Vela): the advice minus each rule."""
    r, b = a.recommended, _Budget(a)
    rows = [{"variant": "advice", "folded": str(len(r.folded)), "Vela cycles": cycles(r.vela_cycles),
             f"TOSA {b.unit}": b.value(r.tosa_db), "advice - it (cycles)": MISSING, f"advice - it ({b.unit})": MISSING}]
    return rows + [{"variant": x.rule, "folded": str(len(x.folded)), "Vela cycles": cycles(x.cycles),
                    f"TOSA {b.unit}": b.value(x.tosa_db), "advice - it (cycles)": cycles_change(_negated(x.cycles_saved)),
                    f"advice - it ({b.unit})": b.change(x.db_change)} for x in a.against]


def _negated(value):
    return None if value is None else -value


def headline(a) -> str:
    """One sentence: what to fold, what it buys, what it costs; each rule read as "the advice against it" (fewer
    cycles are negative, more dB positive)."""
    b = _Budget(a)
    versus = "; ".join(f"against {x.rule}: {cycles_change(_negated(x.cycles_saved))} cycles, "
                       f"{b.change(x.db_change)} {b.unit}" for x in a.against if x.rule in ("upstream", "off"))
    return (f"Fold {len(a.folded)} of {len(a.sites)} site(s) on {a.accelerator} within {a.budget_db:g} {b.unit}: "
            f"{cycles(a.recommended.vela_cycles)} cycles (Vela) at {b.value(a.recommended.tosa_db)} {b.unit} (TOSA); "
            f"{versus}.")


def _gap_line(a) -> str:
    g, b = a.prediction_gap, _Budget(a)
    return (f"prediction vs measurement at the recommendation: TOSA - simulation {b.change(g['db'])} {b.unit}, "
            f"Vela - predicted {cycles_change(g['cycles'])} cycles; simulation - sum of the sites alone "
            f"{b.change(g['db_from_sites'])} {b.unit}")


def _compiler_line(a) -> str:
    return f"cycles: {ESTIMATE}; compiler {a.compiler or 'not recorded'}"


def _check_line(a) -> str:
    c = a.check
    if c is None:
        return "prices: not checked (an advice written before they were)"
    return (f"prices {'add up' if c.adds_up else 'do not add up'} ({c.how}); {a.lowerings} set(s) lowered for "
            f"{a.accelerator}, run on TOSA and priced by Vela")


def advice_text(a) -> str:
    lines = [f"{a.target} on {a.accelerator}: which sites should fold (budget {a.budget_db:g} {_Budget(a).unit}, "
             f"{a.search} search, "
             f"{len(a.points)} set(s) measured on the simulation, the pick from those measured on TOSA and Vela)",
             headline(a), _check_line(a), f"fold: {_names(a.folded)}", f"markers for state-aware: {_markers(a.markers)}", "",
             "per site:", *(text_table(site_rows(a)) or ["(no site)"]), "", "sets measured:",
             *text_table(point_rows(a)), "", "against the rules:", *text_table(against_rows(a)), "", _gap_line(a),
             _compiler_line(a), *(f"note: {n}" for n in a.notes)]
    return "\n".join(lines)


def advice_html(a) -> str:
    notes = "".join(f"<div class='fi-note'>note: {escape(n)}</div>" for n in a.notes)
    head = (f"<b>{escape(a.target)}</b> on <code>{escape(a.accelerator)}</code>: which sites should fold "
            f"(budget {escape(f'{a.budget_db:g} {_Budget(a).unit}')}, {escape(a.search)} search)"
            f"<div class='fi-advice-headline'>{escape(headline(a))}</div>"
            f"<div>fold: <code>{escape(_names(a.folded))}</code>; markers for state-aware: "
            f"<code>{escape(_markers(a.markers))}</code></div>")
    tail = ("<h4>Each site's price</h4>" + _table_html(site_rows(a)) + "<h4>Every set measured</h4>"
            + _table_html(point_rows(a)) + f"<div>{escape(_gap_line(a))}</div><div>{escape(_check_line(a))}</div>"
            + f"<small class='fi-compiler'>{escape(_compiler_line(a))}</small>" + notes)
    return html_table("fi-advice", head, against_rows(a), tail)


def advice_markdown(a, limit: int | None = None) -> str:
    """A reply for an issue or a pull request, local paths redacted, no longer than ``limit`` characters
    (GitHub's comment limit by default): the sets measured are cut first, said so."""
    limit = GITHUB_COMMENT_LIMIT if limit is None else limit
    redact = Redactor()

    def cell(rows):
        return [[md_code(redact(r[c]), cell=True) for c in rows[0]] for r in rows]

    def document(n_points: int) -> str:
        points = point_rows(a)
        shown = points[:n_points]
        out = [f"**Which sites should fold: {md_code(redact(a.target))} on {md_code(a.accelerator)}** "
               f"(budget {a.budget_db:g} {_Budget(a).unit_md}, {a.search} search; searched on the simulation, "
               "confirmed on the TOSA reference model)", "", redact(headline(a)), "",
               f"- fold: {md_code(redact(_names(a.folded)))}",
               f"- markers for `state-aware`: {md_code(redact(_markers(a.markers)))}", ""]
        out += markdown_table(list(against_rows(a)[0]), cell(against_rows(a)))
        out += ["", "Per site:", ""] + (markdown_table(list(site_rows(a)[0]), cell(site_rows(a))) if a.sites
                                        else ["(no site)"])
        if shown:
            out += ["", f"Sets measured ({len(shown)} of {len(points)}):", ""]
            out += markdown_table(list(shown[0]), cell(shown))
        out += ["", f"- {md_code(redact(_gap_line(a)))}", f"- {md_code(redact(_check_line(a)))}",
                f"- {_compiler_line(a)}"]
        out += [f"- {md_code(redact(n))}" for n in a.notes]
        return "\n".join(out) + "\n"

    n = len(a.points)
    text = document(n)
    while len(text) > limit and n > 0:
        n = max(0, n - max(1, n // 4))
        text = document(n)
    return text if len(text) <= limit else text[: max(0, limit - 2)] + "…\n"


def plot_advice(a, ax=None, current=None):
    """Cycles against dB: every set measured, the frontier joined, the recommendation and the budget marked."""
    from .plots import figure  # an image in any kernel; matplotlib only when a plot is asked for

    fig = None
    if ax is None:
        fig = figure(figsize=(7, 4), layout="constrained")
        ax = fig.add_subplot()
    def where(p):  # each point at its best figures: Vela's cycles and TOSA's dB where it was lowered
        return p.cycles, plot_db(p.tosa_db if p.tosa_db is not None else p.db)

    pts = [p for p in a.points if p.cycles is not None and (p.db is not None or p.tosa_db is not None)]
    for measured, style in ((False, dict(s=18, color="#9aa0a6", label="a set (sim dB, predicted cycles)")),
                            (True, dict(s=30, color="#5f6368", marker="s", label="a set lowered (TOSA dB, Vela)"))):
        shown = [where(p) for p in pts if p.measured == measured]
        if shown:
            ax.scatter([x for x, _ in shown], [y for _, y in shown], **style)
    front = sorted((p for p in pts if p.frontier), key=lambda p: p.cycles)
    if front:
        ax.plot([where(p)[0] for p in front], [where(p)[1] for p in front], color="#1a73e8", marker="o",
                label="frontier")
    r = a.recommended
    if r.cycles is not None:
        ax.scatter(*[[v] for v in where(r)], s=90, facecolors="none", edgecolors="#d93025", linewidths=2,
                   label="advice (TOSA, Vela)")
    here = next((p for p in pts if current is not None and set(p.folded) == set(current)), None)
    if here is not None:
        ax.scatter(*[[v] for v in where(here)], marker="*", s=160, color="#188038", zorder=5,
                   label="current decisions")
    for x in a.against:
        if x.cycles is not None and x.tosa_db is not None:
            ax.scatter([x.cycles], [plot_db(x.tosa_db)], marker="x", s=60, label=f"{x.rule} (TOSA, Vela)")
    if a.best_db is not None:
        b = _Budget(a)
        ax.axhline(plot_db(a.best_db + a.budget_db if b.lower else a.best_db - a.budget_db), color="#d93025",
                   linestyle=":", linewidth=1,
                   label=f"budget ({a.budget_db:g} {b.unit} {'above' if b.lower else 'below'} TOSA's best)")
    ax.set_xlabel(f"cycles on {a.accelerator} (Vela where lowered, else predicted from the sites' prices)")
    ax.set_ylabel("worst output SQNR (dB)" if a.metric == "sqnr" else f"{a.metric}, its worst output and step")
    ax.set_title(f"{a.target}: which sites should fold")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig if fig is not None else ax.figure


__all__ = ["advice_html", "advice_markdown", "advice_text", "against_rows", "headline", "plot_advice", "point_rows",
           "site_rows"]
