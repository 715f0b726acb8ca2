"""One source for what a site's row says, drawn as text, as an HTML table and in the widget.

``site_rows`` turns an analysis (and optionally a comparison) into frozen ``SiteRow``
records; the text table, the HTML table, the report and the widget all draw from
them, with the colours of the graph (``styles.STYLES``). Every model-derived string
is escaped for HTML here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._sites.reasons import Reason, Risk
from .._rules.rules import rules
from .._base.formats import MISSING, cycles, cycles_change, db, db_change, error, quantization_steps, share
from .._cost.records import ESTIMATE
from .._cost.accelerators import TOSA_INT
from .._numbers.measures import cost_value, in_registry_order, metrics
from .markup import escape
from .styles import STYLES, site_kind


@dataclass(frozen=True, kw_only=True)
class SiteRow:
    """What one site's row shows, in every presentation."""

    site: str  # the stable site id
    decision: str  # fold | skip
    kind: str  # folded | skipped | near-miss: its key in styles.STYLES (the colour)
    marked: bool  # the mul carries the carried-state marker
    mismatch: str | None  # the explainer disagrees with the pass (never expected)
    conv: str  # the conv node's name
    conv_op: str  # e.g. "aten.conv2d.default"
    mul: str  # the mul node's name
    scale: str  # the scale, summarised ("channel [1, 4, 1, 1] |s| 0.001..100")
    reasons: tuple[Reason, ...]  # why it was skipped, the pass's first reason first
    risks: tuple[Risk, ...]  # warnings that do not change the decision
    folded_where: str  # per variant of the last reference run: where it folded ("" without one)
    price: str = ""  # on an NPU: what folding it buys in cycles (Vela's estimate; "" without a costed run)

    @property
    def colour(self) -> str:
        return STYLES[self.kind]["color"]

    def cells(self) -> dict[str, str]:
        """The row as plain-text cells (the text table's columns)."""
        decision = self.decision + (" (MISMATCH)" if self.mismatch else "") + (" [marked]" if self.marked else "")
        return {
            "site": self.site,
            "decision": decision,
            "conv -> mul": f"{self.conv} ({self.conv_op.removeprefix('aten.')}) -> {self.mul}",
            "scale": self.scale,
            "reasons": "; ".join(f"{r.code}: {r.detail}" for r in self.reasons) or "-",
            "risks": "; ".join(r.code for r in self.risks) or "-",
        }

    # -- HTML fragments (escaped), shared by the table and the widget

    def decision_html(self) -> str:
        out = (f"<span class='fi-decision fi-{escape(self.decision)}' style='color:{self.colour};font-weight:600'>"
               f"{escape(self.decision)}</span>")
        if self.mismatch:
            out += f"<br><span class='fi-mismatch'>MISMATCH: {escape(self.mismatch)}</span>"
        return out

    def reasons_html(self) -> str:
        return "<br>".join(f"<code>{escape(r.code)}</code> {escape(r.message)}<br><small>{escape(r.detail)}</small>"
                           for r in self.reasons) or "&ndash;"

    def risks_html(self) -> str:
        return "<br>".join(f"&#9888; <code>{escape(r.code)}</code> <small>{escape(r.detail)}</small>"
                           for r in self.risks) or "&ndash;"

    def details_html(self) -> str:
        """Reasons, risks, scale, the nodes, and where it folded in the last run: the widget's cell."""
        risks = "".join("<br>" + line for line in self.risks_html().split("<br>")) if self.risks else ""
        where = f"<br><small>in the quantized flow: {escape(self.folded_where)}</small>" if self.folded_where else ""
        where += f"<br><small class='fi-price'>{escape(self.price)}</small>" if self.price else ""
        return (f"<span class='fi-reasons'>{self.reasons_html()}{risks}<br><small>scale: {escape(self.scale)}; "
                f"{escape(self.conv)} &rarr; {escape(self.mul)}</small>{where}</span>")


def site_rows(analysis, comparison=None, *, sites=None, where: dict | None = None,
              prices: dict | None = None) -> list[SiteRow]:
    """One ``SiteRow`` per site of ``analysis`` (or per site of ``sites``, some of them); with
    ``comparison``, where each site folded (``where``: its ``folded_where()``, when the caller has it) and, on an
    NPU, what folding it buys (``prices``: ``site_prices(comparison)``, when the caller has it)."""
    if where is None:
        where = comparison.folded_where() if comparison is not None else {}
    if prices is None:
        prices = site_prices(comparison)
    return [
        SiteRow(site=s.id, decision=s.decision, kind=site_kind(s), marked=s.marked, mismatch=s.mismatch,
                conv=s.conv, conv_op=s.conv_op, mul=s.mul, scale=s.scale.short(), reasons=s.reasons,
                risks=s.risks, folded_where=where.get(s.id, ""), price=prices.get(s.id, ""))
        for s in (analysis.sites if sites is None else sites)
    ]


def site_prices(comparison) -> dict[str, str]:
    """Per site, what folding it buys on the comparison's accelerator, in words ({} without a costed run)."""
    if comparison is None or not _costed(comparison):
        return {}
    t = comparison.tradeoff()
    return {p.site: (f"folding it buys {cycles(p.bought)} cycles on {t.accelerator} (Vela's estimate)"
                     if p.bought is not None else f"on {t.accelerator}: {p.how}") for p in t.sites}


def analysis_text(analysis) -> str:
    head = f"{analysis.name}  stage={analysis.stage}  rule={analysis.rule.name}"
    if analysis.markers:
        head += f"  markers={', '.join(analysis.markers)}"
    rows = [r.cells() for r in site_rows(analysis)]
    if not rows:
        return "\n".join([head, "no conv->mul sites", *(f"note: {n}" for n in analysis_notes(analysis))])
    cols = list(rows[0])
    widths = {c: min(60, max(len(c), *(len(r[c]) for r in rows))) for c in cols}

    def line(values):
        return "  ".join(_clip(v, widths[c]).ljust(widths[c]) for c, v in zip(cols, values)).rstrip()

    out = [head, line(cols), line(["-" * widths[c] for c in cols])]
    out += [line([r[c] for c in cols]) for r in rows]
    out.append(analysis.summary())
    out += [f"note: {n}" for n in analysis_notes(analysis)]
    return "\n".join(out)


def analysis_notes(analysis) -> list[str]:
    """What an analysis's reader must know: its own notes, and markers set under a rule that reads none."""
    ignored = marker_note(analysis.rule, analysis.markers)
    return [*analysis.notes, *([ignored] if ignored else [])]


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


_STYLE = (
    "<style>.fi-table td,.fi-table th{padding:2px 8px;text-align:left;vertical-align:top}"
    ".fi-mismatch{color:#c00;font-weight:700}</style>"
)


def analysis_html(analysis, comparison=None) -> str:
    head = (f"<b>{escape(analysis.name)}</b> stage <code>{escape(analysis.stage)}</code>, "
            f"rule <code>{escape(analysis.rule.name)}</code>")
    if analysis.markers:
        head += ", markers " + ", ".join(f"<code>{escape(m)}</code>" for m in analysis.markers)
    rows = site_rows(analysis, comparison)
    if not rows:
        notes = "".join(f"<p class='fi-note'>note: {escape(n)}</p>" for n in analysis_notes(analysis))
        return f"<div class='fi-analysis'>{head}<p>no conv-&gt;mul sites</p>{notes}</div>"
    cells = [
        f"<tr class='fi-site-{escape(r.decision)}'><td><code>{escape(r.site)}</code>{' &#9873;' if r.marked else ''}</td>"
        f"<td>{r.decision_html()}</td><td>{escape(r.conv)} <small>({escape(r.conv_op)})</small> &rarr; {escape(r.mul)}</td>"
        f"<td>{escape(r.scale)}</td><td>{r.reasons_html()}</td><td>{r.risks_html()}</td></tr>"
        for r in rows
    ]
    table = (
        "<table class='fi-table'><thead><tr><th>site</th><th>decision</th><th>conv &rarr; mul</th>"
        "<th>scale</th><th>reasons</th><th>risks</th></tr></thead><tbody>" + "".join(cells) + "</tbody></table>"
    )
    notes = "".join(f"<p class='fi-note'>note: {escape(n)}</p>" for n in analysis_notes(analysis))
    return f"<div class='fi-analysis'>{_STYLE}{head}{table}<p>{escape(analysis.summary())}</p>{notes}</div>"


def stale_html(results_for, accelerator: str | None = None) -> str:
    """The banner over results computed for another (stage, rule, markers), or lowered for another accelerator."""
    stage, rule, markers = results_for
    lowered = f", lowered for {escape(accelerator)}" if accelerator else ""
    return ("<div class='fi-stale' style='background:#fff3cd;padding:4px'>&#9888; stale: these results were "
            f"computed for stage {escape(stage)}, rule {escape(rule)}, markers "
            f"{escape(', '.join(markers) or 'none')}{lowered}; run the reference again</div>")


def comparison_rows(comparison) -> list[dict[str, str]]:
    """One dict of display strings per (variant, output) at the last step."""
    rows = []
    last = comparison.steps - 1
    # The quantization column shows once variants differ in it (else the heading says it).
    mixed = len({(r.quantization, r.variant.overrides) for r in comparison.results}) > 1
    costed = any(r.cost is not None for r in comparison.results)  # Vela's cycles, on an NPU accelerator
    cost_columns = [c for c in metrics("cost") if c.builtin]  # cycles, NPU ops, SRAM, flash
    names = in_registry_order(n for r in comparison.measured for n in r.measured_names)
    tags = _variant_tags(comparison)
    for r in comparison.measured:
        outputs = sorted({m.output for m in r.metrics})
        for o in outputs:
            m = r.at_step(last, o)
            first = r.at_step(0, o)
            rows.append({
                "variant": r.variant.label + "".join(f" ({tag})" for tag in tags.get(id(r), ())),
                **({"quantization": r.quantization + (" + overrides" if r.variant.overrides else "")} if mixed else {}),
                "folds tfa/lower": f"{r.folds['tfa']}/{r.folds['lowering']}",
                "output": str(o),
                **_measured_cells(r, o, first, names),
                "min ch SQNR": db(min(m.sqnr_per_channel_db) if m.sqnr_per_channel_db else None),
                **({c.heading: c.format(cost_value(c, r.cost)) for c in cost_columns} if costed else {}),
            })
    return rows


def _measured_cells(r, output: int, first, names) -> dict[str, str]:
    """Every output measurement a result holds, each in its own format (at the last step; a share over the frames,
    such as accuracy, over all of them); the SQNR at the first step beside the last's (the drift in one glance)."""
    cells = {}
    for name in names:
        metric = metrics.by_key(name)
        value = r.summary(name, output)
        cells[metric.heading if metric is not None else name] = metric.format(value) if metric is not None \
            else error(value)
        if name == "sqnr":
            cells["SQNR step 1"] = db(first.sqnr_db)
    return cells


def tradeoff_rows(t) -> list[dict[str, str]]:
    """Per variant: Vela's cycles beside the worst output's SQNR, and against the baseline (off)."""
    return [{"variant": v.label, "folded sites": str(len(v.folded)), "cycles": cycles(v.cycles),
             "NPU ops": MISSING if v.npu_ops is None else str(v.npu_ops), "SQNR dB (last step)": db(v.sqnr_db),
             "worst dB": db(v.worst_db),
             **({f"cycles vs {t.baseline}": cycles_change(-v.saved if v.saved is not None else None),
                 f"dB vs {t.baseline}": db_change(v.db_change)} if t.baseline else {})}
            for v in t.variants]


def price_rows(t) -> list[dict[str, str]]:
    """Per site: the cycles folding it buys (its mul's rows where it is not folded), and where that comes from."""
    base = next((v for v in t.variants if v.label == t.baseline), None)
    total = base.cycles if base is not None else None
    return [{"site": p.site, "folding buys (cycles)": cycles(p.bought),
             f"of {t.baseline or 'the baseline'}": share(p.bought / total if p.bought is not None and total else None),
             "folded in": ", ".join(p.folded_in) or "none", "from": p.how} for p in t.sites]


def tradeoff_text(t) -> str:
    lines = [f"{t.target} on {t.accelerator}: what the fold buys (cycles: {ESTIMATE})",
             f"compiler: {t.compiler}", *text_table(tradeoff_rows(t)), "", "per site:",
             *(text_table(price_rows(t)) or ["(no site)"]),
             *(f"note: {n}" for n in t.notes)]
    return "\n".join(lines)


def tradeoff_html(t) -> str:
    notes = "".join(f"<div class='fi-note'>note: {escape(n)}</div>" for n in t.notes)
    head = (f"<b>{escape(t.target)}</b> on <code>{escape(t.accelerator)}</code>: what the fold buys"
            f"<br><small>cycles: {escape(ESTIMATE)}</small>{compiler_html(t.compiler)}")
    return html_table("fi-tradeoff", head, tradeoff_rows(t),
                      "<h4>What folding each site buys</h4>" + _table_html(price_rows(t)) + notes)


def text_table(rows: list[dict[str, str]]) -> list[str]:
    """Rows of display strings as aligned text lines: the header, a rule, one line per row."""
    if not rows:
        return []
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    return (["  ".join(c.ljust(widths[c]) for c in cols).rstrip(), "  ".join("-" * widths[c] for c in cols)]
            + ["  ".join(r[c].ljust(widths[c]) for c in cols).rstrip() for r in rows])


def html_table(kind: str, head: str, rows: list[dict[str, str]], tail: str = "") -> str:
    """``head`` (HTML), the rows as an escaped table, then ``tail`` (HTML), in a div of class ``kind``."""
    if not rows:
        return f"<div class='{kind}'>{head}{tail}</div>"
    cols = list(rows[0])
    body = "".join("<tr>" + "".join(f"<td>{escape(r[c])}</td>" for c in cols) + "</tr>" for r in rows)
    header = "".join(f"<th>{escape(c)}</th>" for c in cols)
    return (f"<div class='{kind}'>{_STYLE}{head}<table class='fi-table'><thead><tr>{header}</tr></thead>"
            f"<tbody>{body}</tbody></table>{tail}</div>")


def _costed(comparison) -> bool:
    return any(r.cost is not None for r in comparison.measured)


def compiler_of(comparison) -> str:
    """The compiler settings a comparison's cycles were made under (``Cost.compiler``; "" without a cost)."""
    return next((r.cost.compiler for r in comparison.measured if r.cost is not None), "")


def compiler_html(compiler: str) -> str:
    """The compiler line under a table of cycles ("" for none), escaped."""
    return f"<br><small class='fi-compiler'>compiler: {escape(compiler)}</small>" if compiler else ""


def _accelerator_text(comparison) -> str:
    return "" if comparison.accelerator == TOSA_INT else f", lowered for {comparison.accelerator}"


def frame_rows(comparison) -> list[dict[str, str]]:
    """Per frame of a stream (per step of a recurrent run): each variant's worst output SQNR and its shares over the
    frames (a decision changed, accuracy) at that frame."""
    means = [m for m in (metrics.by_key(n) for n in in_registry_order(
        n for r in comparison.measured for n in r.measured_names)) if m is not None and m.over_steps == "mean"]
    rows = []
    for step in range(comparison.steps):
        row = {"frame" if comparison.stream else "step": str(step + 1)}
        for r in comparison.measured:
            at = [m for m in r.metrics if m.step == step]
            row[f"{r.variant.label} SQNR"] = db(min((m.sqnr_db for m in at), default=None))
            for metric in means:
                row[f"{r.variant.label} {metric.name}"] = metric.format(metric.worst(m.value(metric.name) for m in at))
        rows.append(row)
    return rows


FRAMES_SHOWN = 12  # frames a text table shows (the first and last); HTML and DataFrames have them all


def _frames_text(comparison) -> list[str]:
    if comparison.steps < 2:
        return []
    rows = frame_rows(comparison)
    cut = len(rows) > FRAMES_SHOWN
    shown = rows[: FRAMES_SHOWN // 2] + rows[-(FRAMES_SHOWN // 2):] if cut else rows
    return ["", f"per {'frame' if comparison.stream else 'step'}" + (
        f" (the first and last {FRAMES_SHOWN // 2} of {len(rows)}; every one: to_dataframe())" if cut else "") + ":",
        *text_table(shown)]


def _frames_html(comparison) -> str:
    if comparison.steps < 2:
        return ""
    table = html_table("fi-frames", f"<b>per {'frame' if comparison.stream else 'step'}</b>", frame_rows(comparison))
    return f"<details class='fi-per-frame'><summary>per {'frame' if comparison.stream else 'step'} " \
           f"({comparison.steps})</summary><div style='max-height:24em;overflow:auto'>{table}</div></details>"


def comparison_text(comparison) -> str:
    head = (f"{comparison.target}: {comparison.engine_text} vs float{_accelerator_text(comparison)}, "
            f"{comparison.steps} step(s){' (metrics at the last step)' if comparison.steps > 1 else ''}")
    rows = comparison_rows(comparison)
    errors = [f"{r.variant.label}: not run: {r.error}" for r in comparison.errors]
    if not rows:
        return "\n".join([head, *errors])
    lines = [head, *text_table(rows), *errors, *(f"note: {n}" for n in comparison_notes(comparison)),
             *([f"engine: {comparison.engine_note}"] if comparison.engine_note else []),
             *([f"stream: {comparison.stream}"] if comparison.stream else []),
             f"calibration: {comparison.calibration}", f"quantization: {comparison.quantization}",
             *([f"compiler: {compiler_of(comparison)}"] if _costed(comparison) else []),
             *(f"cost: {r.cost_error}" for r in comparison.measured if r.cost_error)]
    lines += _frames_text(comparison)
    if _costed(comparison):
        lines += ["", tradeoff_text(comparison.tradeoff())]
    return "\n".join(lines)


def comparison_html(comparison) -> str:
    head = (f"<b>{escape(comparison.target)}</b>: {escape(comparison.engine_text)} vs float"
            f"{escape(_accelerator_text(comparison))}, {comparison.steps} step(s)"
            + (f"<br><small>stream: {escape(comparison.stream)}</small>" if comparison.stream else "")
            + f"<br><small>calibration: {escape(comparison.calibration)}; quantization: {escape(comparison.quantization)}</small>"
            f"{compiler_html(compiler_of(comparison))}")
    tail = "".join(f"<div class='fi-error'>{escape(r.variant.label)}: not run: {escape(r.error)}</div>"
                   for r in comparison.errors)
    tail += "".join(f"<div class='fi-note'>note: {escape(n)}</div>" for n in comparison_notes(comparison))
    if comparison.engine_note:
        tail += f"<div class='fi-note fi-engine'>engine: {escape(comparison.engine_note)}</div>"
    tail += "".join(f"<div class='fi-note fi-cost'>cost: {escape(r.cost_error)}</div>"
                    for r in comparison.measured if r.cost_error)
    tail += _frames_html(comparison)
    if _costed(comparison):
        tail += tradeoff_html(comparison.tradeoff())
    return html_table("fi-comparison", head, comparison_rows(comparison), tail)


# ---------------------------------------------------------------- what a comparison's numbers do not say


def ignores_markers(rule) -> bool:
    """``rule`` reads no carried-state marker: it never folds, or it is the installed pass as it is (no state guard
    and no guard of the user's). A user's pass class may read markers its own way: it is never said to ignore them."""
    return not rule.folds or (rule.guard is None and rule.check is None and rule.pass_class is None)


def marker_note(rule, markers) -> str:
    """One line when ``markers`` are set under a rule that reads none ("" otherwise): they change nothing there."""
    if not markers or not ignores_markers(rule):
        return ""
    why = ("never folds" if not rule.folds
           else "has no state guard (it is the installed pass as it is), so it reads none")
    readers = [n for n in rules.names() if rules.get(n).guarded]
    many = len(markers) != 1
    return (f"the marker{'s' * many} {', '.join(markers)} change{'' if many else 's'} nothing under {rule.name}: it "
            f"{why}" + (f"; the rules with a state guard read markers ({', '.join(readers)})" if readers else ""))


def _folds(r) -> tuple:
    """What makes two results the same quantized program: where each site folded, under the same quantization."""
    return (r.quantization, r.variant.overrides, r.spec, r.accelerator.name,
            tuple(sorted((s.site_id, s.folded_at or "") for s in r.sites)), tuple(sorted(r.folds.items())))


def _reused(comparison) -> dict[int, object]:
    """Per result answered without a run of its own (``cached``), by ``id``: the earlier variant of this comparison
    that folds exactly as it does (its numbers are that one's run), or None (an earlier run's, kept)."""
    measured = comparison.measured
    out = {}
    for i, r in enumerate(measured):
        if r.cached:
            out[id(r)] = next((o for o in measured[:i] if _folds(o) == _folds(r)), None)
    return out


def _where_folded(r) -> str:
    folded = sorted(f"{s.site_id} at {s.folded_at}" for s in r.sites if s.folded_at)
    return ", ".join(folded) if folded else "no site"


def _variant_tags(comparison) -> dict[int, tuple[str, ...]]:
    """Per result (by ``id``), what its table cell says beside its label: whose run its numbers are, and markers
    set under a rule that reads none."""
    tags: dict[int, list[str]] = {}
    for key, twin in _reused(comparison).items():
        tags.setdefault(key, []).append(f"same folds as {twin.variant.label}" if twin is not None else "earlier run")
    for r in comparison.measured:
        if marker_note(r.variant.rule, r.variant.markers):
            tags.setdefault(id(r), []).append("markers ignored")
    return {k: tuple(v) for k, v in tags.items()}


def comparison_notes(comparison) -> list[str]:
    """What a comparison's reader must know beside its numbers: the comparison's own notes, then, in words, what a
    variant's cell marks (a variant answered by another's run, markers a rule ignores) and, when every variant's
    outputs are equal though they fold differently, why."""
    notes = list(comparison.notes)
    by_id = {id(r): r for r in comparison.measured}
    earlier = []
    for key, twin in _reused(comparison).items():
        r = by_id[key]
        if twin is None:
            earlier.append(r.variant.label)
            continue
        notes.append(f"{r.variant.label} is marked 'same folds as {twin.variant.label}': it folds exactly where "
                     f"{twin.variant.label} does (at {_where_folded(r)}), so it is the same quantized program and its "
                     "numbers are that run's, not a second lowering")
    if earlier:
        one = len(earlier) == 1
        notes.append(f"{', '.join(earlier)} {'is' if one else 'are'} marked 'earlier run': {'its' if one else 'their'} "
                     "numbers come from an earlier run of the same model, inputs and fold decisions (kept in memory "
                     "or in the result store), not lowered again")
    for r in comparison.measured:
        ignored = marker_note(r.variant.rule, r.variant.markers)
        if ignored:
            notes.append(f"{r.variant.label}: {ignored}")
    equal = equal_numbers_note(comparison)
    return notes + ([equal] if equal else [])


def _same_outputs(a, b) -> bool:
    """Bit for bit: the outputs themselves where both were kept, else their digests (a comparison read back)."""
    if a.outputs and b.outputs:
        return len(a.outputs) == len(b.outputs) and all(
            len(x) == len(y) and all(torch.equal(p, q) for p, q in zip(x, y)) for x, y in zip(a.outputs, b.outputs))
    return bool(a.output_digest) and a.output_digest == b.output_digest


def equal_numbers_note(comparison) -> str:
    """One line when every variant's quantized outputs are equal (bit for bit, at every step) although the variants
    fold differently, saying why as far as the run shows it ("" otherwise, or when neither the outputs nor their
    digests were kept, as in a comparison written before digests were): where the pass folded (at tfa, before
    calibration) and, per site, the grids its
    calibrated qparams show (the folded conv on the unfolded mul's grid, the unfolded conv's grid a whole multiple
    of it)."""
    measured = comparison.measured
    if len(measured) < 2 or not all(r.outputs or r.output_digest for r in measured):
        return ""
    if len({_folds(r)[4] for r in measured}) < 2 or not all(_same_outputs(measured[0], r) for r in measured[1:]):
        return ""
    groups: dict[tuple, list[str]] = {}
    for r in measured:
        groups.setdefault(tuple(sorted(s.site_id for s in r.sites if s.folded_at)), []).append(r.variant.label)
    said = "; ".join(f"{', '.join(labels)} fold{'s' * (len(labels) == 1)} " + (", ".join(sites) or "no site")
                     for sites, labels in groups.items())
    text = (f"every variant gives the same quantized outputs at every step (compared bit for bit) though they fold "
            f"differently ({said})")
    where = {s.folded_at for r in measured for s in r.sites if s.folded_at}
    if where == {"tfa"}:
        text += (": in the INT flow the installed pass folds at tfa (in the quantizer's transform-for-annotation), "
                 "before calibration, so the observers calibrate the graph already folded")
    grids = _grids(measured)
    return text + (f"; {grids}" if grids else "")


def _grids(measured) -> str:
    """Why a folded site quantizes as its unfolded twin, from the calibrated qparams, when they show it: the folded
    conv's output on the unfolded mul's grid, and the unfolded conv's grid a multiple of that grid with the same zero
    point (the scale then only relabels the grid: a scalar fold is scale-equivariant under per-tensor activation
    quantization). "" when any site's qparams do not show it."""
    said = []
    for site in sorted({s.site_id for r in measured for s in r.sites if s.folded_at}):
        folded = [s for r in measured for s in r.sites if s.site_id == site and s.folded_at]
        unfolded = [s for r in measured for s in r.sites if s.site_id == site and not s.folded_at]
        pairs = [(f.conv_output, u.conv_output, u.mul_output) for f in folded for u in unfolded]
        if not pairs or any(None in p for p in pairs):
            return ""
        ratios = set()
        for onto, conv, mul in pairs:
            if not (_close(onto.scale, mul.scale) and onto.zero_point == mul.zero_point == conv.zero_point):
                return ""
            ratios.add(round(conv.scale / mul.scale, 4))
        if len(ratios) != 1:
            return ""
        mul = pairs[0][2]
        said.append(f"at {site} the folded conv's output is quantized on the grid the unfolded mul's output had "
                    f"(scale {mul.scale:.4g}, zero point {mul.zero_point}) and the unfolded conv's grid is "
                    f"{ratios.pop():g}x that one with the same zero point")
    if not said:
        return ""
    return ("; ".join(said) + ", so the scale only relabels the grid and folding it changes no quantized value (a "
            "scalar fold is scale-equivariant under per-tensor activation quantization)")


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b))


# ---------------------------------------------------------------- is it the fold or the bits?


def bits_rows(bits) -> list[dict[str, str]]:
    """One dict of display strings per change, best first."""
    return [{"change": c.change, "where": c.node or "whole model", "variant": c.variant,
             "SQNR dB": db(c.sqnr_db), "recovered dB": db_change(c.recovered_db) if c.error is None else c.error}
            for c in bits.changes]


def bits_text(bits) -> str:
    return "\n".join([bits.answer(), *text_table(bits_rows(bits)), *(f"note: {n}" for n in bits.notes)])


def bits_html(bits) -> str:
    notes = "".join(f"<div class='fi-note'>note: {escape(n)}</div>" for n in bits.notes)
    return html_table("fi-bits", f"<b>{escape(bits.answer())}</b>", bits_rows(bits), notes)


# ---------------------------------------------------------------- attribution


def attribution_rows(attribution) -> list[dict[str, str]]:
    """Where the error enters, per variant: one dict of display strings per entry point (at its step)."""
    rows = []
    for v in attribution.variants:
        for r in v.entry_points:
            rows.append({"variant": v.label, "node": r.node, "op": r.op, "site": r.site or "-", "role": r.role or "-",
                         "step": str(r.step + 1), "SQNR dB": db(r.sqnr_db), "drop dB": db(r.drop_db),
                         "max |err|": error(r.max_abs_error)})
    return rows


def attribution_site_rows(attribution) -> list[dict[str, str]]:
    """Per site and variant at the last step: the error at the conv, the mul (or folded conv), the state write."""
    rows = []
    for s in attribution.sites:
        if s.step != attribution.steps - 1:
            continue
        rows.append({"site": s.site, "variant": s.variant, "folded": "yes" if s.folded else "no",
                     "conv SQNR": db(s.conv.sqnr_db) if s.conv else ("(folded)" if s.folded else MISSING),
                     "mul / folded conv SQNR": db(s.mul.sqnr_db if s.mul else None),
                     "state write SQNR": db(s.state_write.sqnr_db if s.state_write else None)})
    return rows


def agreement_text(attribution) -> list[str]:
    lines = []
    for v in attribution.variants:
        worst = [a.max_steps for a in v.agreement if a.max_steps is not None]
        if worst:
            lines.append(f"{v.label}: simulation vs TOSA reference, max {quantization_steps(max(worst))} quantization step(s)")
    if not attribution.engine.lowers:  # no TOSA outputs to agree with (attribution.py)
        lines.append(f"compared on the {attribution.engine} engine: its agreement with the TOSA reference "
                     "was not measured")
    return lines


def attribution_text(attribution) -> str:
    lines = [f"{attribution.target}: where the quantization error enters, {attribution.steps} step(s)",
             f"calibration: {attribution.calibration}", "",
             "where the error enters (the node's SQNR falls below its inputs' by more than 1 dB):"]
    lines += text_table(attribution_rows(attribution)) or ["(none)"]
    lines += ["", "sites (last step):"] + (text_table(attribution_site_rows(attribution)) or ["(none)"])
    lines += ["", *agreement_text(attribution)]
    return "\n".join(lines).rstrip()


def _table_html(rows: list[dict[str, str]]) -> str:
    return html_table("fi-rows", "", rows) if rows else "<p><i>none</i></p>"


def attribution_html(attribution) -> str:
    agreement = "".join(f"<li>{escape(line)}</li>" for line in agreement_text(attribution))
    return (f"<div class='fi-attribution'>{_STYLE}<b>{escape(attribution.target)}</b>: where the quantization error "
            f"enters, {attribution.steps} step(s)<br><small>calibration: "
            f"{escape(attribution.calibration)}</small><h4>Where the error enters</h4>"
            f"{_table_html(attribution_rows(attribution))}<h4>Sites (last step)</h4>"
            f"{_table_html(attribution_site_rows(attribution))}<ul class='fi-agreement'>{agreement}</ul></div>")


def gap_rows(gap) -> list[dict[str, str]]:
    """Per variant, output and step, how far two engines' numbers were apart, as table cells."""
    first, second = gap.engines
    return [{"variant": g.variant, "output": str(g.output), "step": str(g.step + 1),
             f"{first} SQNR dB": db(g.sqnr_db), f"{second} SQNR dB": db(g.other_sqnr_db),
             "difference dB": db_change(g.db), "max steps apart": quantization_steps(g.max_steps)}
            for g in gap.outputs]


def gap_text(gap) -> str:
    """One line: how far apart the engines were."""
    steps = gap.largest_steps
    first, second = gap.engines
    return (f"{first} vs {second}: SQNR within {db(gap.largest_db)} dB"
            + (f", outputs within {quantization_steps(steps)} quantization step(s)" if steps is not None else ""))


def gap_table_text(gap) -> str:
    return "\n".join([gap_text(gap), *text_table(gap_rows(gap))])


def gap_table_html(gap) -> str:
    return html_table("fi-engine-gap", escape(gap_text(gap)), gap_rows(gap))


def gap_html(gap) -> str:
    """How far a preview (one engine's comparison) was from the numbers that replaced it (another's):
    one line, then per variant, output and step."""
    return (f"<details class='fi-engine-gap'><summary>{escape('the preview was ' + gap_text(gap))}</summary>"
            + html_table("fi-engine-gap-rows", "", gap_rows(gap)) + "</details>")
