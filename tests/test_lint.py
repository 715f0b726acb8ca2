"""What the linter cannot check itself: every ``# noqa`` says why.

`make check` and `make test` run ``ruff check`` (pyproject.toml's [tool.ruff]): it fails on a finding, on a
``noqa`` that names no rule (PGH004) and on one that silences nothing (RUF100). A rule silenced on one line
is a decision, and ruff accepts a bare ``# noqa: BLE001``; the reason after it is for the next reader,
checked here: ``# noqa: BLE001 - the UI must survive anything``.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What ruff checks: every folder of code, and the notebooks' code cells (tests/fuzz_corpus and tests/data are
# inputs, excluded in pyproject.toml too).
FOLDERS = ("inspector", "widgets", "tests", "bench", "scripts", "sample_models", "constraints")
NOT_CODE = (ROOT / "tests" / "fuzz_corpus", ROOT / "tests" / "data")

# A noqa comment, with or without its rules (E731, or B017, BLE001), and what follows it on the line.
NOQA = re.compile(r"#\s*noqa\b(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?(?P<rest>.*)", re.IGNORECASE)


def _comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment of ``source``: comments only, never a string that mentions noqa."""
    try:
        return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):  # a notebook cell with IPython syntax: its lines as they are
        return [(n, line[line.index("#"):]) for n, line in enumerate(source.splitlines(), 1) if "#" in line]


def unexplained(source: str) -> list[int]:
    """The lines of ``source`` whose ``noqa`` gives no reason after its rules (a word or more)."""
    missing = []
    for line, comment in _comments(source):
        match = NOQA.search(comment)
        if match and not re.search(r"[A-Za-z]{2,}", match["rest"]):
            missing.append(line)
    return missing


def _sources() -> dict[str, str]:
    """Relative name -> source of every file ruff checks here (a notebook's code cells, by number)."""
    sources = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if not any(path.is_relative_to(skip) for skip in NOT_CODE):
                sources[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for number, cell in enumerate(cells, 1):
            if cell["cell_type"] == "code":
                sources[f"{path.relative_to(ROOT)}, cell {number}"] = "".join(cell["source"])
    return sources


def test_every_noqa_says_why():
    sources = _sources()
    assert len(sources) > 100 and "inspector/__init__.py" in sources  # the tree was found
    missing = [f"{name}:{line}" for name, source in sources.items() for line in unexplained(source)]
    assert not missing, f"a noqa without a reason (write `# noqa: CODE - why`): {missing}"


def test_the_reason_check_can_fail():
    source = (
        "try:\n    pass\nexcept Exception:  # noqa: BLE001\n    pass\n"                      # 3: bare
        "x = 1  # noqa\n"                                                                    # 5: bare, no rule
        "y = 2  # noqa: E731, B017\n"                                                        # 6: two rules, no reason
        "z = 3  # noqa: E731 - a lambda named for the lines below\n"                         # 7: says why
        "w = 4  # noqa: F401  (fail here, clearly)\n"                                        # 8: says why
        "s = '# noqa: F401'\n"                                                               # 9: a string, not a noqa
    )
    assert unexplained(source) == [3, 5, 6]
