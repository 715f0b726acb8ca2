"""One way to write each thing a user reads: every number by one function of ``inspector._base.formats``,
every page shell, Markdown table and HTML escape by ``inspector.present.markup``; the core writes no dB, page
shell, Markdown table, comment limit or HTML escape of its own."""

from __future__ import annotations

import math
import re

import pytest

from inspector._base import data, formats
from inspector.present import markup
from conftest import ROOT

CORE = ROOT / "inspector"
LAYERS = {CORE / "_base" / "formats.py", CORE / "present" / "markup.py"}


@pytest.mark.parametrize("value, text", [
    (12.345, "12.35"), (0.0, "0.00"), (-0.0, "0.00"), (-0.001, "0.00"), (-3.5, "-3.50"), (math.inf, "inf"), (-math.inf, "-inf"),
    (math.nan, "nan"), (None, "–"), (7, "7.00"),
])
def test_db(value, text):
    assert formats.db(value) == text


@pytest.mark.parametrize("value, text", [
    (1.254, "+1.25"), (0.0, "+0.00"), (-0.004, "+0.00"), (-0.5, "-0.50"),
    (math.inf, "+inf"), (-math.inf, "-inf"), (math.nan, "nan"),
    (None, "–"),
])
def test_db_change_is_always_signed(value, text):
    assert formats.db_change(value) == text


def test_steps_and_seconds():
    assert formats.quantization_steps(0.5) == "0.50" and formats.quantization_steps(None) == "–"
    assert formats.seconds(0.42) == "0.4 s" and formats.seconds(12.6) == "13 s" and formats.seconds(None) == "–"


def test_the_plot_clamp():
    assert formats.plot_db(math.inf) == formats.PLOT_LIMIT_DB
    assert formats.plot_db(-math.inf) == -formats.PLOT_LIMIT_DB
    assert formats.plot_db(-12.5) == -12.5 and formats.plot_db(0) == 0.0
    assert math.isnan(formats.plot_db(None)) and math.isnan(formats.plot_db(math.nan))


def test_json_floats_round_trip_through_strings():
    written = data.jsonable({"a": (math.inf, -math.inf, 1.5), "b": {"c": math.nan}, "d": "x"})
    assert written == {"a": ["inf", "-inf", 1.5], "b": {"c": "nan"}, "d": "x"}


def test_markdown_table_and_page():
    assert markup.markdown_table(["a", "b"], [["1", "2"]]) == ["| a | b |", "|---|---|", "| 1 | 2 |"]
    html = markup.page("<x> & y", "<p>body</p>")
    assert html.startswith("<!doctype html>") and "<title>&lt;x&gt; &amp; y</title>" in html
    assert "<p>body</p>" in html and html.rstrip().endswith("</html>")


# What only the layer may write: a float formatted next to "dB" or from a dB/SQNR value, a page
# shell, a Markdown table rule, GitHub's comment limit.
STRAY = {
    "a dB value formatted in place": re.compile(r"\{[^{}]*(?:_db|sqnr)[^{}]*:[+ ]?\.\d+f\}|:[+ ]?\.\d+f\}\s*dB",
                                                re.IGNORECASE),
    "a second dB formatter": re.compile(r"def \w*(?:db|signed)\w*\([^)]*\)\s*->\s*str"),
    "a second plot clamp": re.compile(r"def _finite\(|def \w*clamp\w*\("),
    "a second HTML page shell": re.compile(r"<!doctype html", re.IGNORECASE),
    "a second Markdown table writer": re.compile(r"""["']\|?---\|"""),
    "a second GitHub comment limit": re.compile(r"=\s*65_?536\b"),
    "a second HTML escape": re.compile(r"\bhtml\.escape\b|def _?(?:html_)?esc(?:ape)?\("),
}


def stray(text: str) -> list[str]:
    """What ``text`` writes that only the presentation layer may."""
    return [f"{what}: {m.group(0)!r}" for what, pattern in STRAY.items() for m in pattern.finditer(text)]


def test_the_scan_finds_what_it_looks_for():
    planted = ('f"{r.sqnr_db:.1f} dB"\nf"{x:+.2f} dB"\npage = "<!DOCTYPE html><html>"\n'
               'rule = "|" + "---|" * 3\nLIMIT = 65_536\ndef _db(v) -> str:\ndef _finite(v):\n'
               'html.escape(name)\ndef _esc(v):\n')
    assert len(stray(planted)) == 9, stray(planted)
    assert stray('f"{seconds:.1f} s" and port < 65536') == []


def test_the_core_and_the_widget_write_numbers_only_through_the_layer():
    found = []
    for path in sorted([*CORE.rglob("*.py"), *(ROOT / "widgets").rglob("*.py")]):
        if path not in LAYERS:
            found += [f"{path.relative_to(ROOT)}: {s}" for s in stray(path.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


def test_the_text_tables_need_no_graphviz():
    """tables.py and every module it imports, in and below the core, never import graphviz (nor render,
    the one module that does)."""
    import ast

    seen, todo = set(), [CORE / "present" / "tables.py"]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "graphviz" for a in node.names), path
            elif isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] != "graphviz", path
                if node.level:
                    base = path.parent
                    for _ in range(node.level - 1):
                        base = base.parent
                    target = base.joinpath(*(node.module or "").split(".")) if node.module else base
                    for candidate in (target.with_suffix(".py"), target / "__init__.py"):
                        if candidate.exists() and candidate != CORE / "__init__.py":
                            todo.append(candidate)
    assert CORE / "present" / "render.py" not in seen
    assert CORE / "present" / "styles.py" in seen  # the scan followed tables' imports
