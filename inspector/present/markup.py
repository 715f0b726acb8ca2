"""The markup every page, table and comment is written in, once: the HTML escape, one HTML page, one
Markdown table, Markdown's inline code. Numbers inside them (and GitHub's comment limit) are
``_base/formats.py``'s.
"""

from __future__ import annotations

import html
import re

from .._base.formats import GITHUB_COMMENT_LIMIT  # noqa: F401 (what a comment is bounded by, for its writers)


def escape(value) -> str:
    """``value`` as text inside HTML (an element or an attribute): every model-derived string goes through it."""
    return html.escape(str(value), quote=True)


def markdown_table(header, rows) -> list[str]:
    """A GitHub Markdown table as lines: the header, the rule, one line per row. Cells are written
    as given: escaping model-derived text (``md_code``) is the caller's. A heading's pipes (``max |err|``, a
    measurement's name) are escaped here: GFM splits cells on them."""
    header = [str(h).replace("\\|", "|").replace("|", "\\|") for h in header]
    return (["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
            + ["| " + " | ".join(row) + " |" for row in rows])


_STYLE = ("body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}svg{max-width:100%;height:auto}"
          "pre{background:#f6f8fa;padding:6px}")


def page(title: str, body: str, style: str = "") -> str:
    """A self-contained HTML page around ``body`` (already HTML); ``title`` is escaped here."""
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>\n"
            f"<style>{_STYLE}{style}</style></head>\n<body>{body}\n</body></html>\n")


def md_code(text, *, cell: bool = False, limit: int = 300) -> str:
    """``text`` as a Markdown code span: shown literally (no link, image, HTML or emphasis inside).
    In a table ``cell``, pipes are escaped too (GFM splits cells on them even in code spans)."""
    text = " ".join(str(text).split())  # one line
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    span = f"{fence}{pad}{text}{pad}{fence}"
    return span.replace("|", "\\|") if cell else span
