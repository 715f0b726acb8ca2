"""The README is the five-minute page; everything else is one link away under docs/, and no link is dead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 300

# [text](target) and ![alt](target); the target ends at the first space (an optional "title" follows).
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def _links(text: str) -> list[str]:
    """The targets of every Markdown link and image outside fenced code blocks and code spans."""
    text = _FENCE.sub("", text)
    text = re.sub(r"`[^`\n]*`", "", text)
    return _LINK.findall(text)


def _is_relative(target: str) -> bool:
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not target.startswith("//")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    heading = re.sub(r"`|\*\*?|_(?=\w)|(?<=\w)_", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text())
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.MULTILINE)}


def _dead_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file (or heading, for ``file.md#heading``) is not there."""
    dead = []
    for target in _links(page.read_text()):
        if not _is_relative(target):
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            dead.append(target)
        elif fragment and dest.suffix == ".md" and fragment.lower() not in _anchors(dest):
            dead.append(target)
    return dead


def _pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def test_the_readme_reads_in_five_minutes():
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; at most {MAX_README_LINES}: move detail to docs/"


def test_the_readme_gives_the_two_commands():
    text = README.read_text()
    for command in ("make lab", "make demo", "make test", "make check"):
        assert f"{command} " in text or f"{command}`" in text, command


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _links(README.read_text()) if _is_relative(t)}
    pages = _pages()
    assert len(pages) >= 2
    missing = [p.name for p in pages if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"


@pytest.mark.parametrize("page", [README, *_pages()], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_to_a_file_that_exists(page):
    assert not _dead_links(page), f"{page.relative_to(ROOT)}: dead links {_dead_links(page)}"


def test_a_dead_link_is_found(tmp_path):
    """The checks above can fail: a missing file, a missing heading, a link in code is no link."""
    (tmp_path / "there.md").write_text("# A heading, with `code`\n\n## Layout\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [ok](there.md#layout) [ok](there.md#a-heading-with-code) "
                    "[web](https://example.com/x.md) ![missing](nowhere.png) [bad](there.md#nope)\n"
                    "`[code](ignored.md)`\n```\n[fenced](ignored.md)\n```\n")
    assert _dead_links(page) == ["nowhere.png", "there.md#nope"]
    assert len(_links("x\n" * 3)) == 0
