"""A sweep drawn: Markdown (a pull-request comment), an HTML page or fragment, JSON and CSV (local paths
redacted), and its plot. The record (``_sweep/results.py``'s ``Sweep``) holds the numbers; this draws them."""

from __future__ import annotations

import json

from .._base.formats import MISSING, cycles, cycles_change, db, db_change, plot_db, seconds
from .._numbers.measures import in_registry_order, metrics
from .._sweep.records import compilers, costed_accelerator, cycles_by_rule
from .._sweep.records import NUMBERS_STAGE, UNCHANGED_DB, sqnr_by_rule
from .._sweep.results import FORMATS
from .._base.errors import InspectorError, quoted
from .markup import GITHUB_COMMENT_LIMIT, escape as _e, markdown_table, md_code, page as html_page
from .report import Redactor

__all__ = ["sweep_comment", "sweep_csv", "sweep_format", "sweep_html", "sweep_json", "sweep_markdown", "sweep_page",
           "sweep_plot"]


def sweep_json(s) -> str:
    """The sweep's JSON (``Sweep.to_dict``), local paths redacted."""
    return json.dumps(Redactor().value(s.to_dict()), indent=2, allow_nan=False)


def sweep_csv(s) -> str:
    """One line per model x stage x rule (``Sweep.to_dataframe("rows")``), local paths redacted."""
    return Redactor()(s.to_dataframe("rows").to_csv(index=False))


def sweep_format(s, fmt: str) -> str:
    """The sweep in one of ``FORMATS`` (md, html, json, csv)."""
    if fmt not in FORMATS:
        raise InspectorError(f"unknown format {quoted(fmt)}; choose one of: {', '.join(FORMATS)}")
    writers = {"md": lambda: sweep_comment(s), "html": lambda: sweep_page(s), "json": lambda: sweep_json(s),
               "csv": lambda: sweep_csv(s)}
    return writers[fmt]()


def sweep_comment(s, limit: int = GITHUB_COMMENT_LIMIT) -> str:
    """A comment for a pull request (``sweep_markdown``), local paths redacted."""
    return Redactor()(sweep_markdown(s, limit))


def sweep_page(s) -> str:
    """A self-contained HTML page, local paths redacted."""
    return Redactor(html=True)(sweep_html(s))


# ---------------------------------------------------------------- Markdown and HTML


def _steps_text(s) -> str:
    steps = sorted({v.steps for v in s.variants if v.steps}) or [s.steps]
    return f"{steps[0]} step(s)" if len(steps) == 1 else f"{steps[0]} to {steps[-1]} steps (per model)"


def _md(text) -> str:
    return md_code(str(text), cell=True, limit=120)


def simulated_pairs(s) -> set:
    """The (model, rule) pairs whose numbers are the simulation's in a sweep that mixes engines (one
    whose differing models were confirmed on TOSA); empty when every number comes from one engine."""
    engines = {(v.target, v.rule): v.engine for v in s.variants if not v.error}
    if len(set(engines.values())) < 2:
        return set()
    return {pair for pair, engine in engines.items() if not engine.authority}


def _sqnr_cell(sim: set, target: str, rule: str, value) -> str:
    return db(value) + (" (sim)" if (target, rule) in sim else "")


def _task_cell(name: str, value) -> str:
    metric = metrics.by_key(name)
    return metric.format(value) if metric is not None else (MISSING if value is None else f"{value:.4g}")


def advice_rows(s) -> list[dict[str, str]]:
    """Per advised model and accelerator: what the advice folds, its cycles and dB, and what each rule gives up."""
    rows = []
    for a in s.advice:
        row = {"model": a.target, "accelerator": a.accelerator.name, "budget dB": f"{a.budget_db:g}",
               "advice folds": f"{len(a.folded)}/{len(a.sites)}", "cycles (Vela)": cycles(a.recommended.vela_cycles),
               "dB (TOSA)": db(a.recommended.tosa_db)}
        for rule in ("upstream", "state-aware"):
            x = next((x for x in a.against if x.rule == rule), None)
            row[f"`{rule}` gives up"] = ("–" if x is None else
                                         f"{cycles_change(x.cycles_saved)} cycles, {db_change(x.db_change)} dB")
        rows.append(row)
    return rows


def sweep_markdown(s, limit: int) -> str:
    head = [f"### Fold rules over {len(s.models)} models: " + " vs ".join(f"`{p}`" for p in s.rules),
            "", f"Stages: {', '.join(s.stages)}" + (f"; TOSA INT reference, {_steps_text(s)}." if s.steps else "."),
            "", *[f"- {line}" for line in s.summary()], ""]
    changed = s.changed
    others = s.rules[1:]
    table: list[str] = []
    if changed:
        header = ["model", "stage", "site", *[f"`{p}`" for p in s.rules]]
        priced = any(c.cycles_delta for c in changed)
        if s.steps:
            header += [f"SQNR `{s.rules[0]}`", *[f"Δ dB `{p}`" for p in others]]
        if priced:
            header += [f"Δ cycles `{p}`" for p in others]
        cells_of = []
        for c in changed:
            cells = [_md(c.target), c.stage, _md(c.site)]
            for p in s.rules:
                decision = c.decisions.get(p, "–")
                reasons = c.reasons.get(p, [])
                cells.append(decision + (f" ({', '.join(reasons)})" if reasons else ""))
            if s.steps:
                cells.append(db((c.sqnr_db_last or {}).get(s.rules[0])))
                cells += [db_change((c.sqnr_delta_db or {}).get(p)) for p in others]
            if priced:
                cells += [cycles_change((c.cycles_delta or {}).get(p)) for p in others]
            cells_of.append(cells)
        table += ["#### Sites whose decision differs", "", *markdown_table(header, cells_of)]
    else:
        table += ["No site's decision differs between the rules.", ""]
    on = costed_accelerator(s.variants)
    spent = cycles_by_rule(s.variants, on) if on else {}
    tasks = in_registry_order(n for v in s.variants for n in v.measures)  # the task's own numbers (accuracy, ...)
    task_of = {(v.target, v.rule): v.measures for v in s.variants
               if v.accelerator == s.accelerators[0] and not v.error and v.variant == v.rule}
    header = ["model", *[f"folded `{p}`" for p in s.rules], *([f"SQNR `{p}`" for p in s.rules] if s.steps else []),
              *[f"{n} `{p}`" for n in tasks for p in s.rules],
              *([f"cycles `{p}` on {on}" for p in s.rules] if spent else [])]
    model_cells = []
    shown = NUMBERS_STAGE if NUMBERS_STAGE in s.stages else s.stages[-1]
    rows = {(r.target, r.rule): r for r in s.rows if r.stage == shown}
    sqnr = sqnr_by_rule(s.variants, s.accelerators[0])
    sim = simulated_pairs(s)
    for m in s.models:
        if m.error:
            model_cells.append([_md(m.target), f"failed: {_md(m.error)}"])
            continue
        cells = [_md(m.target)]
        for p in s.rules:
            r = rows.get((m.target, p))
            cells.append("error" if r is None or r.error else f"{len(r.folded)}/{r.sites}")
        if s.steps:
            cells += [_sqnr_cell(sim, m.target, p, sqnr.get(m.target, {}).get(p)) for p in s.rules]
        cells += [_task_cell(n, task_of.get((m.target, p), {}).get(n)) for n in tasks for p in s.rules]
        if spent:
            cells += [cycles(spent.get(m.target, {}).get(p)) for p in s.rules]
        model_cells.append(cells)
    models = ["", "#### Models", "", f"Folded sites out of all sites at {shown}" + (
        "; SQNR (dB) at the last step on the TOSA INT reference, whose flow folds at tfa" if s.steps else "")
        + ("; (sim): the simulation's number, not confirmed on TOSA (the rules decide alike there)." if sim else "."),
        "", *markdown_table(header, model_cells),
        *(["", f"Cycles on {on}: Vela's estimate, compiler {_md(compilers(s.variants)[on])}."] if spent else [])]
    if s.advice:
        models += ["", "#### Which sites should fold (the advice)", "",
                   "Per model and Ethos-U: the set within the budget that buys the most cycles (searched on the "
                   "simulation, confirmed on TOSA with Vela), and what each rule gives up against it.", ""]
        models += markdown_table(list(advice_rows(s)[0]), [[_md(v) for v in r.values()] for r in advice_rows(s)])
        known = compilers(s.variants)
        said = [f"{a}: {_md(known[a])}" for a in dict.fromkeys(a.accelerator for a in s.advice) if a in known]
        models += ["", "Compiler: " + "; ".join(said) + "."] if said else []
    failed_variants = [v for v in s.variants if v.error]
    if failed_variants:
        models += ["", "#### Variants that did not run", ""]
        models += [f"- {_md(v.target)} `{v.variant}`: {_md(v.error)}" for v in failed_variants]
    tail = ["", f"<sub>fold-inspector sweep, {s.executor} executor, {seconds(s.seconds)}.</sub>", ""]
    text = "\n".join(head + table + models + tail)
    if len(text) <= limit:
        return text
    # Too long for one comment: keep the summary and as many changed sites as fit.
    note = "\n_{n} more changed site(s) left out to fit one GitHub comment; the JSON (--format json) has them all._\n"
    kept = list(table)
    while len(kept) > 4:
        kept.pop()
        left = len(table) - len(kept)
        text = "\n".join(head + kept) + note.format(n=left) + "\n".join(tail)
        if len(text) <= limit:
            return text
    return "\n".join(head)[: limit - 200] + note.format(n=len(changed)) + "\n".join(tail)


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:.2em .5em;font-size:13px;
text-align:left;vertical-align:top}th{background:#f3f3f3}.fold{color:#1b5e20}.skip{color:#b71c1c}
.better{color:#1b5e20}.worse{color:#b71c1c}code{font-size:12px}"""


def sweep_html(s, page: bool = True) -> str:
    parts = [f"<h2>Fold rules over {len(s.models)} models: {' vs '.join(_e(p) for p in s.rules)}</h2>",
             "<ul>" + "".join(f"<li>{_e(line)}</li>" for line in s.summary()) + "</ul>"]
    changed = s.changed
    if changed:
        head = "".join(f"<th>{_e(p)}</th>" for p in s.rules)
        if s.steps:
            head += f"<th>SQNR {_e(s.rules[0])}</th>" + "".join(f"<th>Δ dB {_e(p)}</th>" for p in s.rules[1:])
        body = []
        for c in changed:
            cells = [f"<td>{_e(c.target)}</td><td>{_e(c.stage)}</td><td><code>{_e(c.site)}</code></td>"]
            for p in s.rules:
                d = c.decisions.get(p, "–")
                reasons = ", ".join(c.reasons.get(p, []))
                cells.append(f"<td class='{_e(d)}'>{_e(d)}" + (f"<br><small>{_e(reasons)}</small>" if reasons else "")
                             + "</td>")
            if s.steps:
                cells.append(f"<td>{_e(db((c.sqnr_db_last or {}).get(s.rules[0])))}</td>")
                for p in s.rules[1:]:
                    d = (c.sqnr_delta_db or {}).get(p)
                    cls = "" if d is None or abs(d) < UNCHANGED_DB else "better" if d > 0 else "worse"
                    cells.append(f"<td class='{cls}'>{_e(db_change(d))}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        parts.append("<h3>Sites whose decision differs</h3><table><tr><th>model</th><th>stage</th><th>site</th>"
                     f"{head}</tr>{''.join(body)}</table>")
    else:
        parts.append("<p>No site's decision differs between the rules.</p>")
    rows = []
    sqnr = sqnr_by_rule(s.variants, s.accelerators[0])
    sim = simulated_pairs(s)
    for r in s.rows:
        v = sqnr.get(r.target, {}).get(r.rule)
        status = _e(r.error) if r.error else f"{len(r.folded)} folded / {r.sites} sites"
        rows.append(f"<tr><td>{_e(r.target)}</td><td>{_e(r.stage)}</td><td>{_e(r.rule)}</td>"
                    f"<td>{status}</td>" + (f"<td>{_e(_sqnr_cell(sim, r.target, r.rule, v))}</td>"
                                            if s.steps else "") + "</tr>")
    failed = [m for m in s.models if m.error]
    rows += [f"<tr><td>{_e(m.target)}</td><td colspan='4'>failed: {_e(m.error)}</td></tr>" for m in failed]
    parts.append("<h3>Every model, stage and rule</h3><table><tr><th>model</th><th>stage</th><th>rule</th>"
                 "<th>decisions</th>" + ("<th>SQNR (dB, last step)</th>" if s.steps else "") + "</tr>"
                 + "".join(rows) + "</table>")
    bad = [v for v in s.variants if v.error]
    if bad:
        parts.append("<h3>Variants that did not run</h3><ul>" + "".join(
            f"<li>{_e(v.target)} <code>{_e(v.variant)}</code>: {_e(v.error)}</li>" for v in bad) + "</ul>")
    parts.append(f"<p><small>fold-inspector sweep, {_e(s.executor)} executor, {seconds(s.seconds)}.</small></p>")
    inner = "\n".join(parts)
    if not page:
        return f"<div class='fi-sweep'><style>{_CSS}</style>{inner}</div>"
    return html_page("fold-inspector sweep", inner, style=_CSS)


def sweep_plot(s):
    """A bar per changed site: the SQNR delta of each rule against the baseline (a matplotlib Figure,
    without pyplot's global state)."""
    from .plots import figure  # an image in any kernel; matplotlib only when a plot is asked for

    changed = [c for c in s.changed if c.sqnr_delta_db]  # tfa changes: the ones with numbers
    fig = figure(figsize=(8, max(2.0, 0.35 * len(changed) + 1)))
    ax = fig.subplots()
    if not changed:
        ax.text(0.5, 0.5, "no changed site with a comparison", ha="center", va="center")
        ax.set_axis_off()
        return fig
    others = s.rules[1:]
    height = 0.8 / max(1, len(others))
    labels = [f"{c.target} · {c.stage} · {c.site[:40]}" for c in changed]
    for j, rule in enumerate(others):
        values = [plot_db(c.sqnr_delta_db.get(rule)) for c in changed]
        ax.barh([i + j * height for i in range(len(changed))], values, height=height, label=rule)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks([i + height * (len(others) - 1) / 2 for i in range(len(changed))], labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"SQNR at the last step minus {s.rules[0]}'s (dB)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
