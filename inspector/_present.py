"""Text and HTML tables for analyses; every model-derived string is escaped for HTML."""

from __future__ import annotations

import html


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def site_rows(analysis) -> list[dict[str, str]]:
    """One dict of display strings per site (shared by the text and HTML tables)."""
    rows = []
    for s in analysis.sites:
        reasons = "; ".join(f"{r.code}: {r.detail}" for r in s.reasons)
        risks = "; ".join(r.code for r in s.risks)
        decision = s.decision + (" (MISMATCH)" if s.mismatch else "") + (" [marked]" if s.marked else "")
        rows.append({
            "site": s.id,
            "decision": decision,
            "conv -> mul": f"{s.conv} ({s.conv_op.removeprefix('aten.')}) -> {s.mul}",
            "scale": s.scale.short(),
            "reasons": reasons or "-",
            "risks": risks or "-",
        })
    return rows


def analysis_text(analysis) -> str:
    head = f"{analysis.name}  stage={analysis.stage}  policy={analysis.policy}"
    if analysis.markers:
        head += f"  markers={', '.join(analysis.markers)}"
    rows = site_rows(analysis)
    if not rows:
        return f"{head}\nno conv->mul sites"
    cols = list(rows[0])
    widths = {c: min(60, max(len(c), *(len(r[c]) for r in rows))) for c in cols}

    def line(values):
        return "  ".join(_clip(v, widths[c]).ljust(widths[c]) for c, v in zip(cols, values)).rstrip()

    out = [head, line(cols), line(["-" * widths[c] for c in cols])]
    out += [line([r[c] for c in cols]) for r in rows]
    out.append(analysis.summary())
    out += [f"note: {n}" for n in analysis.notes]
    return "\n".join(out)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


_STYLE = (
    "<style>.fi-table td,.fi-table th{padding:2px 8px;text-align:left;vertical-align:top}"
    ".fi-fold{color:#1a7f37;font-weight:600}.fi-skip{color:#b35900;font-weight:600}"
    ".fi-mismatch{color:#c00;font-weight:700}</style>"
)


def analysis_html(analysis) -> str:
    head = f"<b>{_esc(analysis.name)}</b> stage <code>{_esc(analysis.stage)}</code>, policy <code>{_esc(analysis.policy)}</code>"
    if analysis.markers:
        head += ", markers " + ", ".join(f"<code>{_esc(m)}</code>" for m in analysis.markers)
    if not analysis.sites:
        return f"<div class='fi-analysis'>{head}<p>no conv-&gt;mul sites</p></div>"
    cells = []
    for s in analysis.sites:
        reasons = "<br>".join(
            f"<code>{_esc(r.code)}</code> {_esc(r.message)}<br><small>{_esc(r.detail)}</small>" for r in s.reasons
        ) or "&ndash;"
        risks = "<br>".join(f"<code>{_esc(r.code)}</code> <small>{_esc(r.detail)}</small>" for r in s.risks) or "&ndash;"
        decision = f"<span class='fi-{_esc(s.decision)}'>{_esc(s.decision)}</span>"
        if s.mismatch:
            decision += f"<br><span class='fi-mismatch'>MISMATCH: {_esc(s.mismatch)}</span>"
        cells.append(
            f"<tr><td><code>{_esc(s.id)}</code>{' &#9873;' if s.marked else ''}</td><td>{decision}</td>"
            f"<td>{_esc(s.conv)} <small>({_esc(s.conv_op)})</small> &rarr; {_esc(s.mul)}</td>"
            f"<td>{_esc(s.scale.short())}</td><td>{reasons}</td><td>{risks}</td></tr>"
        )
    table = (
        "<table class='fi-table'><thead><tr><th>site</th><th>decision</th><th>conv &rarr; mul</th>"
        "<th>scale</th><th>reasons</th><th>risks</th></tr></thead><tbody>" + "".join(cells) + "</tbody></table>"
    )
    notes = "".join(f"<p class='fi-note'>note: {_esc(n)}</p>" for n in analysis.notes)
    return f"<div class='fi-analysis'>{_STYLE}{head}{table}<p>{_esc(analysis.summary())}</p>{notes}</div>"


def comparison_rows(comparison) -> list[dict[str, str]]:
    """One dict of display strings per (variant, output) at the last step."""
    rows = []
    last = comparison.steps - 1
    for r in comparison.results:
        outputs = sorted({m.output for m in r.metrics})
        for o in outputs:
            m = r.at_step(last, o)
            first = r.at_step(0, o)
            rows.append({
                "variant": r.variant.label + (" (cached)" if r.cached else ""),
                "folds tfa/lower": f"{r.folds['tfa']}/{r.folds['lowering']}",
                "output": str(o),
                "SQNR dB": f"{m.sqnr_db:.2f}",
                "SQNR step 1": f"{first.sqnr_db:.2f}",
                "max |err|": f"{m.max_abs_error:.4g}",
                "MSE": f"{m.mse:.3g}",
                "flushed": f"{m.flushed_to_zero:.1%}",
                "min ch SQNR": f"{min(m.sqnr_per_channel_db):.2f}" if m.sqnr_per_channel_db else "-",
            })
    return rows


def comparison_text(comparison) -> str:
    head = (f"{comparison.target}: TOSA INT reference vs float, {comparison.steps} step(s)"
            f"{' (metrics at the last step)' if comparison.steps > 1 else ''}")
    rows = comparison_rows(comparison)
    if not rows:
        return head
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    lines = [head, "  ".join(c.ljust(widths[c]) for c in cols).rstrip(),
             "  ".join("-" * widths[c] for c in cols)]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in cols).rstrip() for r in rows]
    return "\n".join(lines)


def comparison_html(comparison) -> str:
    rows = comparison_rows(comparison)
    head = (f"<b>{_esc(comparison.target)}</b>: TOSA INT reference vs float, {comparison.steps} step(s)"
            f"<br><small>calibration: {_esc(comparison.calibration)}; quantization: {_esc(comparison.quantization)}</small>")
    if not rows:
        return f"<div class='fi-comparison'>{head}</div>"
    cols = list(rows[0])
    body = "".join("<tr>" + "".join(f"<td>{_esc(r[c])}</td>" for c in cols) + "</tr>" for r in rows)
    header = "".join(f"<th>{_esc(c)}</th>" for c in cols)
    return (f"<div class='fi-comparison'>{_STYLE}{head}<table class='fi-table'><thead><tr>{header}</tr></thead>"
            f"<tbody>{body}</tbody></table></div>")
