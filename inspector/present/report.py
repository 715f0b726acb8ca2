"""Reports for bug reports and triage: one self-contained HTML page, a Markdown reply to paste into
a GitHub issue, or JSON; the same facts in each, from the same code (CLI, API and widget).

- No external resources in HTML: graphs are inline SVG, plots inline PNG, styles inline.
- Model-derived strings are escaped for the format: HTML-escaped, or in Markdown put in code spans
  (nothing inside a code span is a link, an image or HTML) with table pipes escaped.
- Local absolute paths are redacted in every format: the home folder (``~``), the working folder
  and the model file's folder (relative paths), the virtualenv (``<venv>``), site-packages
  (``<site-packages>``) and the inspector's own folder; stack traces keep only the user's frames
  unless ``full_traces``; the traceback of a variant that failed is kept whole (HTML: behind a ``<details>``;
  JSON: ``"errors"``), its paths redacted.
- Markdown stays under GitHub's 65,536-character limit: rows and details are left out, with a
  note saying so, and the document stays valid.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
import base64
import io
import json
import os
import platform
import re
import shlex
import site
import sys
import sysconfig
from pathlib import Path

from .._base.formats import cycles, db
from .._cost.records import ESTIMATE
from .._cost.accelerators import TOSA_INT
from .._numbers.engines import TOSA
from .markup import GITHUB_COMMENT_LIMIT, escape, markdown_table, md_code, page
from .tables import (analysis_html, comparison_html, comparison_notes, comparison_rows, compiler_of, price_rows,
                     site_rows, stale_html, tradeoff_rows)
from .._base.errors import InspectorError, quoted
from .._base.version import __version__
from .render import render_pair, svg
from dataclasses import replace

FORMATS = ("html", "md", "json")
_MD_BUDGET = GITHUB_COMMENT_LIMIT - 5_536  # leaves room for the truncation notes


# ---------------------------------------------------------------- facts shared by every format


def environment() -> dict[str, str]:
    """The versions a maintainer needs to reproduce a report."""

    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"


    return {"python": platform.python_version(), "torch": v("torch"), "executorch": v("executorch"),
            "tosa-tools": v("tosa-tools"), "torchao": v("torchao"), "fold-inspector": __version__,
            "platform": f"{platform.system()} {platform.machine()}"}


_PACKAGE = Path(__file__).resolve().parents[1]  # the inspector package's folder


class Redactor:
    """Replaces this machine's absolute paths in a text with portable ones."""

    def __init__(self, model_file: str | None = None, *, html: bool = False) -> None:
        self.html = html  # the text is HTML/SVG: replacements are escaped (and dot writes "-" as &#45;)
        prefixes: list[tuple[str, str]] = []
        if model_file:
            prefixes.append((str(Path(model_file).resolve().parent), ""))
        for path in {*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"],
                     sysconfig.get_paths()["platlib"]}:
            prefixes.append((path, "<site-packages>"))
        prefixes += [(sys.prefix, "<venv>"), (sys.base_prefix, "<python>"),
                     (str(_PACKAGE.parent), "<fold-inspector>"),
                     (os.getcwd(), ""), (str(Path.home()), "~")]
        # Longest first: a venv inside the working folder is still <venv>.
        self.prefixes = sorted({(os.path.normpath(p), r) for p, r in prefixes if p and p != os.sep},
                               key=lambda pr: -len(pr[0]))

    def __call__(self, text: str) -> str:
        for prefix, replacement in self.prefixes:
            forms = {prefix, escape(prefix)}
            forms |= {f.replace("-", "&#45;") for f in forms}
            if self.html:
                replacement = escape(replacement)
            for form in forms:
                if form in text:
                    # "<prefix>/x" -> "<replacement>/x", or "x" when the replacement is a relative root
                    text = text.replace(form + os.sep, replacement + os.sep if replacement else "")
                    text = re.sub(re.escape(form) + r"(?![\w.-])", replacement or ".", text)
        return text

    def value(self, data):
        """``data`` (JSON-ready) with every string redacted."""
        if isinstance(data, str):
            return self(data)
        if isinstance(data, list):
            return [self.value(v) for v in data]
        if isinstance(data, dict):
            return {self(k) if isinstance(k, str) else k: self.value(v) for k, v in data.items()}
        return data


_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in .*$')


def user_frames(trace: str) -> str:
    """A stack trace without the frames of Python, installed packages and the inspector itself."""
    hidden = [os.path.normpath(p) for p in (sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"],
                                            str(_PACKAGE))]
    out, keep = [], True
    for line in trace.splitlines():
        m = _FRAME.match(line)
        if m:
            path = os.path.normpath(m.group(1))
            keep = not (path.startswith("<") or any(path == h or path.startswith(h + os.sep) for h in hidden))
        if keep:
            out.append(line)
    return "\n".join(out)


def model_file_of(target) -> str | None:
    """The file a target was loaded from (a ``.py`` for ``file.py:Class``, a ``.pt2``), if any."""
    source = target.source or ""
    if ".py:" in source:
        return source.rpartition(":")[0]
    return source if source.endswith(".pt2") else None


def reproduce_command(analysis, comparison=None, fmt: str = "md") -> str:
    """The command line that makes the same report (the target as the user named it)."""
    target = analysis.target.source or analysis.name
    parts = ["python", "-m", "inspector", "report", target, "--stage", analysis.stage,
             "--rule", analysis.rule.origin or analysis.rule.name]
    for m in analysis.marker_ids:
        parts += ["--mark", m]
    if comparison is not None:
        parts += ["--variants", ",".join(r.variant.rule.name + (f"@{r.variant.quantization}" if r.variant.quantization else "")
                                         for r in comparison.results), "--steps", str(comparison.steps)]
        if comparison.engine != TOSA:  # the command line's default engine goes without saying
            parts += ["--engine", comparison.engine.name]
    # the accelerator whose flow hands the pass the tfa and lowering graphs, and what the variants are lowered for
    accelerator = analysis.accelerator if comparison is None else comparison.accelerator
    if accelerator != TOSA_INT:  # likewise its default accelerator
        parts += ["--accelerator", accelerator.name]
    parts += ["--format", fmt]
    return " ".join(shlex.quote(p) for p in parts)


def summary(analysis, comparison=None) -> str:
    """One paragraph: what the installed pass did here, what it risks, what the numbers said."""
    folded, skipped = analysis.folded, analysis.skipped
    text = (f"At stage {analysis.stage}, under the rule {analysis.rule.name}, the installed FoldScalarMulIntoConvPass "
            f"sees {len(analysis.sites)} conv->mul site{'s' * (len(analysis.sites) != 1)}: {len(folded)} folded, "
            f"{len(skipped)} skipped.")
    if analysis.stage_note:  # what this graph is in the flow the user ships (edge: no INT flow's)
        text += f" Note: {analysis.stage_note}."
    reasons: dict[str, int] = {}
    for s in skipped:
        if s.reasons:
            reasons[s.reasons[0].code] = reasons.get(s.reasons[0].code, 0) + 1
    if reasons:
        text += " Skipped first for: " + ", ".join(f"{k} ({v})" for k, v in reasons.items()) + "."
    risks: dict[str, int] = {}
    for s in analysis.sites:
        for r in s.risks:
            risks[r.code] = risks.get(r.code, 0) + 1
    if risks:
        text += " Risks: " + ", ".join(f"{k} ({v})" for k, v in risks.items()) + "."
    if comparison is not None:
        last = comparison.steps - 1
        parts = [f"{r.variant.label} {db(r.at_step(last).sqnr_db)} dB" for r in comparison.results if r.metrics]
        engine = f"{comparison.engine_text} model" if comparison.engine.authority else comparison.engine_text
        text += (f" On the {engine}, output 0 at step {comparison.steps} against float: "
                 + ", ".join(parts) + ".")
        costed = [r for r in comparison.measured if r.cost is not None]
        if costed:
            text += (f" On {comparison.accelerator} (Vela's estimate; {costed[0].cost.compiler}): "
                     + ", ".join(f"{r.variant.label} {cycles(r.cost.cycles)} cycles" for r in costed) + ".")
    return text


# ---------------------------------------------------------------- the three formats


def report(analysis, comparison=None, *, format: str = "html", results_for=None, full_traces: bool = False,
           command: str | None = None, journeys=(), advice=None, widening=None) -> str:
    """The report of ``analysis`` (and ``comparison``, if given) as text in ``format`` (html, md, json);
    ``journeys`` (``inspector.journey`` results) add a section each; ``advice`` (which sites should fold, drawn
    by ``drawing``: ``{"html": ..., "md": ..., "json": ...}``) adds its section, and ``widening`` (which layers need
    more bits, drawn the same way) its own."""
    if format not in FORMATS:
        raise InspectorError(f"unknown report format {quoted(format)}; choose one of: {', '.join(FORMATS)}")
    redact = Redactor(model_file_of(analysis.target), html=format == "html")
    command = command or reproduce_command(analysis, comparison, format)
    if format == "html":
        return redact(report_html(analysis, comparison, results_for=results_for, full_traces=full_traces,
                                  command=command, journeys=journeys, advice=(advice or {}).get("html"),
                                  widening=(widening or {}).get("html")))
    if format == "md":
        return redact(report_markdown(analysis, comparison, command=command, journeys=journeys,
                                      advice=(advice or {}).get("md"), widening=(widening or {}).get("md")))
    data = report_dict(analysis, comparison, command=command, journeys=journeys)
    if advice:
        data["advice"] = advice["json"]
    if widening:
        data["widening"] = widening["json"]
    return json.dumps(redact.value(data), indent=2, allow_nan=False)


def report_dict(analysis, comparison=None, *, command: str = "", journeys=()) -> dict:
    """The report's facts, JSON-ready (with ``journeys``, a "journeys" list; with variants that failed, an "errors"
    list: each one's line and traceback)."""
    extra = {"journeys": [j.to_dict() for j in journeys]} if journeys else {}
    failed = comparison.errors if comparison is not None else ()
    if failed:
        extra["errors"] = [{"variant": r.variant.label, "error": r.error, "details": r.log} for r in failed]
    return {**extra,
        "summary": summary(analysis, comparison),
        "analysis": analysis.to_dict(),
        "comparison": comparison.to_dict() if comparison is not None else None,
        "environment": environment(),
        "command": command,
    }


_BODY = """<h1>fold inspector report: {title}</h1>
<p class="fi-summary">{summary}</p>
<p>stage <code>{stage}</code>, rule <code>{rule}</code> ({source}); executorch FoldScalarMulIntoConvPass as installed.</p>
<h2>Sites</h2>{sites}
<h2>Graphs (before | after)</h2>{graphs}
<h2>{results_title} vs float</h2>{results}
<h2>Environment</h2>{environment}
<h2>Reproduce</h2><pre>{command}</pre>"""


def report_html(analysis, comparison=None, *, results_for=None, full_traces: bool = False,
                command: str | None = None, journeys=(), advice: str | None = None,
                widening: str | None = None) -> str:
    """The self-contained report page. ``results_for`` is the ``(stage, rule, markers)`` the
    comparison was computed for, when that may differ from ``analysis.configuration``."""

    try:
        (before, v_before), (after, v_after) = analysis.verdicts("before"), analysis.verdicts("after")
        if not full_traces:

            v_before, v_after = (replace(v, trace=user_frames) for v in (v_before, v_after))
        graphs = svg(render_pair(before, after, (v_before, v_after), caption=analysis.caption(None)))
    except InspectorError as exc:  # no dot: say so, keep the rest of the report
        graphs = f"<p><i>{escape(str(exc))}</i></p>"
    if comparison is None:
        results = "<p><i>no reference run</i></p>"
    else:
        stale = results_for is not None and tuple(results_for) != analysis.configuration
        banner = stale_html(results_for) if stale else ""
        results = banner + comparison_html(comparison) + failures_html(comparison) + "".join(
            figure_img(comparison.plot(kind)) for kind in ("drift", "channels"))
    env = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in environment().items())
    template = _BODY
    if journeys:  # an optional section: the page is unchanged without it (each journey escapes its own names)
        section = "<h2>Journeys through the Arm pipeline</h2>" + "".join(
            j.html().replace("{", "{{").replace("}", "}}") for j in journeys)
        template = template.replace("<h2>Environment</h2>", section + "\n<h2>Environment</h2>")
    if advice:  # an optional section, drawn (and escaped) by the advice's own drawing
        section = "<h2>Which sites should fold</h2>" + advice.replace("{", "{{").replace("}", "}}")
        template = template.replace("<h2>Environment</h2>", section + "\n<h2>Environment</h2>")
    if widening:  # which layers need more bits: drawn (and escaped) by its own drawing, heading included
        template = template.replace("<h2>Environment</h2>",
                                    widening.replace("{", "{{").replace("}", "}}") + "\n<h2>Environment</h2>")
    body = template.format(title=escape(analysis.name), stage=escape(analysis.stage),
                        rule=escape(analysis.rule.name), source=escape(analysis.rule.source),
                        summary=escape(summary(analysis, comparison)),
                        sites=analysis_html(analysis, comparison), graphs=graphs, results=results,
                        results_title=escape(comparison.engine_text if comparison is not None
                                                  else "TOSA INT reference"),
                        environment=f"<table class='fi-table'>{env}</table>",
                        command=escape(command or reproduce_command(analysis, comparison, "html")))
    return page(f"fold inspector report: {analysis.name}", body, style=".fi-stale{background:#fff3cd;padding:4px}")


def report_markdown(analysis, comparison=None, *, command: str | None = None, journeys=(),
                    advice: str | None = None, widening: str | None = None) -> str:
    """A GitHub comment: summary, site table, comparison table, versions, the command, details."""
    command = command or reproduce_command(analysis, comparison, "md")
    env = environment()
    head = [f"### fold inspector: {md_code(analysis.name)} at stage `{analysis.stage}`, rule `{analysis.rule.name}`",
            "", f"Rule {md_code(analysis.rule.name)}: {md_code(analysis.rule.help)}, from {md_code(analysis.rule.source)}", "",
            summary_md(analysis, comparison), ""]
    rows = [[md_code(r.site, cell=True), f"**{r.decision}**" + (" (marked)" if r.marked else ""),
             "<br>".join(md_code(x.code, cell=True) for x in r.reasons) or "–",
             "<br>".join(md_code(x.code, cell=True) for x in r.risks) or "–",
             md_code(r.scale, cell=True)] for r in site_rows(analysis, comparison)]
    header = ["site", "decision", "reasons", "risks", "scale"]
    tail = ["", "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items() if k != "platform")
            + f" ({env['platform']}).", "", "Reproduce:", "", "```sh", command, "```"]
    blocks = []
    if comparison is not None:
        if comparison_rows(comparison):
            blocks.append(["", *comparison_md(comparison)])
        if any(r.cost is not None for r in comparison.measured):
            blocks.append(fold_buys_md(comparison.tradeoff()))
    details = []
    for s in analysis.sites:
        way = "".join(f"{md_code(name)} -> " for name in s.path)  # a site behind a view: the way it takes
        lines = [f"- {md_code(s.id)}: **{s.decision}**, {md_code(s.conv)} ({md_code(s.conv_op)}) -> {way}{md_code(s.mul)}"]
        lines += [f"  - {md_code(r.code)}: {r.message} ({md_code(r.detail)})" for r in s.reasons]
        lines += [f"  - risk {md_code(r.code)}: {r.message} ({md_code(r.detail)})" for r in s.risks]
        if s.state_boundary:
            lines.append(f"  - reaches {md_code(s.state_boundary)}: {md_code(' -> '.join(s.state_path))}")
        details.append("\n".join(lines))
    notes = [f"- {md_code(n)}" for n in analysis.notes]
    if advice:  # which sites should fold (its own Markdown, bounded by the caller)
        blocks.append(["", advice.rstrip("\n")])
    if widening:  # which layers need more bits (its own Markdown)
        blocks.append(["", widening.rstrip("\n")])
    for j in journeys:  # an optional block each; the Markdown is unchanged without them
        blocks.append(["", f"<details><summary>Journey of site {md_code(j.site)} under {md_code(j.variant)}</summary>",
                       "", "```text", j.text().replace("```", "` ` `"), "```", "", "</details>"])

    def document(n_rows: int, n_details: int, with_blocks: bool) -> str:
        table = markdown_table(header, rows[:n_rows])
        if n_rows < len(rows):
            table.append(f"| … {len(rows) - n_rows} more site(s) left out to stay under GitHub's comment limit; "
                         "`--format json` has them all | | | | |")
        out = head + table
        if with_blocks:
            for b in blocks:
                out += b
        if details:
            body = "\n".join(details[:n_details])
            if n_details < len(details):
                body += f"\n- … {len(details) - n_details} more site(s) left out (see `--format json`)"
            out += ["", "<details><summary>Every reason and risk, in detail</summary>", "", body, "", "</details>"]
        if notes:
            out += ["", "<details><summary>Notes</summary>", "", *notes, "", "</details>"]
        return "\n".join(out + tail) + "\n"

    n_rows, n_details, with_blocks = len(rows), len(details), True
    text = document(n_rows, n_details, with_blocks)
    while len(text) > _MD_BUDGET and n_details > 0:
        n_details = max(0, n_details - max(1, n_details // 4))
        text = document(n_rows, n_details, with_blocks)
    while len(text) > _MD_BUDGET and n_rows > 0:
        n_rows = max(0, n_rows - max(1, n_rows // 4))
        text = document(n_rows, n_details, with_blocks)
    if len(text) > _MD_BUDGET:
        text = document(n_rows, n_details, False)
    return text


def failures_html(comparison) -> str:
    """Why each variant of ``comparison`` that failed did, behind a disclosure: the traceback it carried and what the
    backend printed, escaped ("" when none failed, or none carried anything). The one line stays in the table's
    own error line; a debugger opens this."""
    return "".join(f"<details class='fi-error-details'><summary>why {escape(r.variant.label)} failed: the traceback"
                   f"</summary><pre>{escape(r.log.rstrip())}</pre></details>"
                   for r in comparison.errors if r.log.strip())


def comparison_md(comparison) -> list[str]:
    """A comparison as Markdown lines: what ran, then one row per variant and output with every measurement it
    holds (each in its own format)."""
    crows = comparison_rows(comparison)
    cols = list(crows[0]) if crows else []
    compiler = compiler_of(comparison)
    notes = [f"- note: {md_code(n, limit=2000)}" for n in comparison_notes(comparison)]
    return ([f"**{comparison.engine_text} vs float**, {comparison.steps} step(s), "
             f"calibration: {md_code(comparison.calibration)}" + (f", compiler: {md_code(compiler)}" if compiler else ""),
             ""] + (markdown_table(cols, [[md_code(r[c], cell=True) for c in cols] for r in crows]) if crows
                    else ["(no variant has numbers)"])
            + (["", f"engine: {comparison.engine_note}"] if comparison.engine_note else [])
            + [f"- {md_code(r.variant.label)}: {md_code(r.error)}" for r in comparison.errors]
            + ([""] + notes if notes else []))


def comparison_markdown(comparison, limit: int | None = None) -> str:
    """A comparison as a reply for an issue or a pull request: local paths redacted, within ``limit`` characters
    (GitHub's comment limit by default)."""
    limit = GITHUB_COMMENT_LIMIT if limit is None else limit
    redact = Redactor()
    lines = [f"### fold inspector: {md_code(redact(comparison.target))}", "", *comparison_md(comparison)]
    if any(r.cost is not None for r in comparison.measured):
        lines += ["", *fold_buys_md(comparison.tradeoff())]
    text = redact("\n".join(lines)) + "\n"
    return text if len(text) <= limit else text[: max(0, limit - 2)] + "…\n"


def fold_buys_md(t) -> list[str]:
    """The trade-off as Markdown lines: "what the fold buys" per variant and per site (Vela's estimate)."""
    variants, prices = tradeoff_rows(t), price_rows(t)
    cell = lambda rows: [[md_code(r[c], cell=True) for c in rows[0]] for r in rows]
    out = ["", f"**What the fold buys on {md_code(t.accelerator)}** (cycles: {ESTIMATE})", "",
           f"Compiler: {md_code(t.compiler)}", ""]
    out += markdown_table(list(variants[0]), cell(variants)) if variants else []
    out += ["", "Per site:", ""] + (markdown_table(list(prices[0]), cell(prices)) if prices else ["(no site)"])
    return out + [f"- {md_code(n)}" for n in t.notes]


def summary_md(analysis, comparison=None) -> str:
    """The summary paragraph with the model's name in a code span."""
    text = summary(analysis, comparison)
    return f"**Summary.** {md_code(analysis.name)}: " + text[0].lower() + text[1:]


def figure_img(fig, css_class: str = "fi-plot") -> str:
    """A matplotlib figure as a self-contained ``<img>`` (inline PNG), for reports and widgets."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    data = base64.b64encode(buf.getvalue()).decode()
    return f"<img class='{css_class}' alt='plot' src='data:image/png;base64,{data}'>"
