"""An advice drawn: text, HTML, a Markdown reply for an issue or a pull request, the frontier's plot.

Every dB says its engine (the simulation searched, the TOSA reference model confirmed); every cycle count says
whether Vela counted it or it is predicted from the sites' prices.
"""

from __future__ import annotations

from .._base.formats import GITHUB_COMMENT_LIMIT, MISSING, cycles, cycles_change, db, db_change, plot_db
from .._cost.records import ESTIMATE
from .markup import escape, markdown_table, md_code
from .report import Redactor
from .tables import html_table, text_table


def _table_html(rows: list[dict[str, str]]) -> str:
    return html_table("fi-rows", "", rows) if rows else "<p><i>none</i></p>"


def _names(sites) -> str:
    return ", ".join(sites) if sites else "nothing"


def _markers(markers) -> str:
    return "none pick this set (use Advice.rule())" if markers is None else _names(markers)


def site_rows(a) -> list[dict[str, str]]:
    """Per site: the cycles folding it buys, and its dB in each direction (simulation)."""
    return [{"site": s.site, "folding buys (cycles, Vela)": cycles(s.cycles),
             "dB folded alone (sim)": db_change(s.db_folded_alone), "dB kept alone (sim)": db_change(s.db_kept_alone),
             "advised": "fold" if s.site in a.folded else "keep", "price from": s.how} for s in a.sites]


def point_rows(a) -> list[dict[str, str]]:
    """Per set measured: its predicted cycles, its dB (simulation, and from the sites alone), TOSA where run."""
    return [{"folded": _names(p.folded), "cycles (predicted)": cycles(p.cycles), "Vela cycles": cycles(p.vela_cycles),
             "markers": _markers(p.markers) if p.markers else "–" if p.markers is None else "nothing", "worst dB (sim)": db(p.db), "dB from the sites": db(p.db_predicted), "TOSA dB": db(p.tosa_db),
             "within budget": "yes" if p.within else "no",
             "": ("recommended" if p == a.recommended else "frontier" if p.frontier else "")}
            for p in sorted(a.points, key=lambda p: (p.cycles is None, p.cycles or 0))]


def against_rows(a) -> list[dict[str, str]]:
    """The recommendation against upstream and off (TOSA and Vela)."""
    r = a.recommended
    rows = [{"variant": "advice", "folded": str(len(r.folded)), "Vela cycles": cycles(r.vela_cycles),
             "TOSA dB": db(r.tosa_db), "advice saves (cycles)": MISSING, "advice dB change": MISSING}]
    return rows + [{"variant": x.rule, "folded": str(len(x.folded)), "Vela cycles": cycles(x.cycles),
                    "TOSA dB": db(x.tosa_db), "advice saves (cycles)": cycles_change(x.cycles_saved),
                    "advice dB change": db_change(x.db_change)} for x in a.against]


def headline(a) -> str:
    """One sentence: what to fold, what it buys, what it costs."""
    up, off = a.versus("upstream"), a.versus("off")
    return (f"Fold {len(a.folded)} of {len(a.sites)} site(s) on {a.accelerator} within {a.budget_db:g} dB: "
            f"{cycles(a.recommended.vela_cycles)} cycles (Vela) at {db(a.recommended.tosa_db)} dB (TOSA); "
            f"upstream {cycles_change(-up.cycles_saved if up.cycles_saved is not None else None)} cycles, "
            f"{db_change(-up.db_change if up.db_change is not None else None)} dB; off "
            f"{cycles_change(-off.cycles_saved if off.cycles_saved is not None else None)} cycles, "
            f"{db_change(-off.db_change if off.db_change is not None else None)} dB against it.")


def _gap_line(a) -> str:
    g = a.prediction_gap
    return (f"prediction vs confirmation at the recommendation: TOSA - simulation {db_change(g['db'])} dB, "
            f"Vela - predicted {cycles_change(g['cycles'])} cycles; simulation - sum of the sites alone "
            f"{db_change(g['db_from_sites'])} dB")


def advice_text(a) -> str:
    lines = [f"{a.target} on {a.accelerator}: which sites should fold (budget {a.budget_db:g} dB, {a.search} search, "
             f"{len(a.points)} set(s) measured on the simulation, confirmed on TOSA)",
             headline(a), f"fold: {_names(a.folded)}", f"markers for state-aware: {_markers(a.markers)}", "",
             "per site:", *(text_table(site_rows(a)) or ["(no site)"]), "", "sets measured:",
             *text_table(point_rows(a)), "", "against the rules:", *text_table(against_rows(a)), "", _gap_line(a),
             f"cycles: {ESTIMATE}", *(f"note: {n}" for n in a.notes)]
    return "\n".join(lines)


def advice_html(a) -> str:
    notes = "".join(f"<div class='fi-note'>note: {escape(n)}</div>" for n in a.notes)
    head = (f"<b>{escape(a.target)}</b> on <code>{escape(a.accelerator)}</code>: which sites should fold "
            f"(budget {escape(f'{a.budget_db:g}')} dB, {escape(a.search)} search)"
            f"<div class='fi-advice-headline'>{escape(headline(a))}</div>"
            f"<div>fold: <code>{escape(_names(a.folded))}</code>; markers for state-aware: "
            f"<code>{escape(_markers(a.markers))}</code></div>")
    tail = ("<h4>Each site's price</h4>" + _table_html(site_rows(a)) + "<h4>Every set measured</h4>"
            + _table_html(point_rows(a)) + f"<div>{escape(_gap_line(a))}</div>"
            + f"<small>cycles: {escape(ESTIMATE)}</small>" + notes)
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
               f"(budget {a.budget_db:g} dB, {a.search} search; dB searched on the simulation, confirmed on the "
               "TOSA reference model)", "", redact(headline(a)), "",
               f"- fold: {md_code(redact(_names(a.folded)))}",
               f"- markers for `state-aware`: {md_code(redact(_markers(a.markers)))}", ""]
        out += markdown_table(list(against_rows(a)[0]), cell(against_rows(a)))
        out += ["", "Per site:", ""] + (markdown_table(list(site_rows(a)[0]), cell(site_rows(a))) if a.sites
                                        else ["(no site)"])
        if shown:
            out += ["", f"Sets measured ({len(shown)} of {len(points)}):", ""]
            out += markdown_table(list(shown[0]), cell(shown))
        out += ["", f"- {md_code(redact(_gap_line(a)))}", f"- cycles: {ESTIMATE}"]
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
    from matplotlib.figure import Figure  # lazy: matplotlib only when a plot is asked for

    fig = None
    if ax is None:
        fig = Figure(figsize=(7, 4), layout="constrained")
        ax = fig.add_subplot()
    pts = [p for p in a.points if p.cycles is not None and p.db is not None]
    ax.scatter([p.cycles for p in pts], [plot_db(p.db) for p in pts], s=18, color="#9aa0a6", label="a set (sim)")
    front = sorted((p for p in pts if p.frontier), key=lambda p: p.cycles)
    if front:
        ax.plot([p.cycles for p in front], [plot_db(p.db) for p in front], color="#1a73e8", marker="o",
                label="frontier (sim)")
    r = a.recommended
    if r.cycles is not None and r.db is not None:
        ax.scatter([r.cycles], [plot_db(r.db)], s=90, facecolors="none", edgecolors="#d93025", linewidths=2,
                   label="advice")
    here = next((p for p in pts if current is not None and set(p.folded) == set(current)), None)
    if here is not None:
        ax.scatter([here.cycles], [plot_db(here.db)], marker="*", s=160, color="#188038", zorder=5,
                   label="current decisions")
    for x in a.against:
        if x.cycles is not None and x.tosa_db is not None:
            ax.scatter([x.cycles], [plot_db(x.tosa_db)], marker="x", s=60, label=f"{x.rule} (TOSA, Vela)")
    if a.best_db is not None:
        ax.axhline(plot_db(a.best_db - a.budget_db), color="#d93025", linestyle=":", linewidth=1,
                   label=f"budget ({a.budget_db:g} dB)")
    ax.set_xlabel(f"cycles on {a.accelerator} (predicted from the sites' prices)")
    ax.set_ylabel("worst output SQNR (dB)")
    ax.set_title(f"{a.target}: which sites should fold")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig if fig is not None else ax.figure


__all__ = ["advice_html", "advice_markdown", "advice_text", "against_rows", "headline", "plot_advice", "point_rows",
           "site_rows"]
