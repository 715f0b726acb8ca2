"""docs/design.md's limits read against the code it describes, so that the two cannot drift apart."""

from __future__ import annotations

import ast
import inspect
import re

import inspector
import inspector.present as present
from conftest import ROOT

DOC = (ROOT / "docs" / "design.md").read_text()
CORE = ROOT / "inspector"
NUMBERS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                      "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}


def _section(title: str) -> str:
    start = DOC.index(title)
    end = DOC.find("\n## ", start + len(title))
    return DOC[start:end if end != -1 else None]


def test_the_number_of_public_names_is_the_one_the_tests_keep():
    """The doc's "at most N names" is the cap tests/test_house.py enforces, and the package's own docstring's."""
    from test_house import MAX_PUBLIC

    said = {int(n) for n in re.findall(r"at most (\d+)\s+names", DOC)}
    assert said == {MAX_PUBLIC}, f"docs/design.md allows {sorted(said)} public names, the tests {MAX_PUBLIC}"
    assert len(inspector.__all__) <= MAX_PUBLIC
    assert f"at most {MAX_PUBLIC} names" in (inspector.__doc__ or "")


def test_the_rooms_of_the_core_are_the_layers_in_the_order_the_map_gives():
    """"The core is N folders in layers": N is the folders there are and the layers tests/test_house.py keeps, and the
    folder map lists them lowest first, in that order."""
    from test_house import LAYERS

    layout = _section("## Layout")
    word = re.search(r"The core is (\w+) folders in layers", layout).group(1)
    folders = sorted(p.name for p in CORE.iterdir() if p.is_dir() and not p.name.startswith("__"))
    assert NUMBERS[word] == len(folders) == len(LAYERS), (word, folders, LAYERS)
    mapped = [m for m in re.findall(r"^- `inspector/(_?[a-z0-9_]+)/`", layout, flags=re.M)]
    assert tuple(mapped) == LAYERS, f"the map's order {mapped} is not the layers' {LAYERS}"


def _verbs() -> list[str]:
    """The public functions that take a model (or models) first: the user's verbs."""
    out = []
    for name in inspector.__all__:
        fn = getattr(inspector, name)
        if inspect.isfunction(fn):
            first = next(iter(inspect.signature(fn).parameters), "")
            if first in ("target", "targets", "models"):
                out.append(name)
    return out


def test_the_data_flow_picture_names_every_verb():
    picture = _section("## The data flow")
    arrows = set(re.findall(r"->\s+(\w+)", picture))
    assert {"analyze", "compare", "sweep", "advise", "verdict"} <= set(_verbs())
    assert set(_verbs()) - {"analyze"} <= arrows, f"verbs the picture leaves out: {sorted(set(_verbs()) - arrows)}"
    assert "analyze" in arrows and "stale" in arrows


def _process_caches() -> set[str]:
    """Every module of the core that decorates a function with ``functools.cache`` or ``lru_cache``."""
    out = set()
    for path in CORE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for d in node.decorator_list:
                    target = d.func if isinstance(d, ast.Call) else d
                    if ast.unparse(target).split(".")[-1] in ("cache", "lru_cache"):
                        out.add(path.relative_to(CORE).as_posix())
    return out


def test_the_doc_says_where_every_cache_outside_the_cache_module_lives():
    caches = _section("**Caches have one owner.**")
    listed = re.split(r"\.\s", caches[caches.index("They live only in these modules"):], maxsplit=1)[0]
    said = set(re.findall(r"`([\w/]+\.py)`", listed))
    assert said == _process_caches(), f"the doc lists {sorted(said)}, the code has {sorted(_process_caches())}"


def test_the_settings_present_hands_a_form_are_the_ones_the_doc_lists():
    layout = _section("## Layout")
    listed = re.split(r"\.\s", layout[layout.index("these are only (a test reads this list):"):], maxsplit=1)[0]
    names = re.findall(r"`(\w+)`", listed)
    assert names and set(names) <= set(present.__all__), sorted(set(names) - set(present.__all__))
    # what draws nothing: a constant, a class that is not drawn, or a function whose name says no picture or table
    drawing_words = ("render", "svg", "html", "text", "img", "rows", "prices", "escape", "db", "cycles", "site_kind",
                     "compiler_of", "Verdicts", "STYLES", "LEGEND", "SiteRow", "ExplorerFiles", "site_rows")
    undrawn = {n for n in present.__all__ if not any(w in n for w in drawing_words)}
    assert undrawn == set(names), f"present exports, drawing nothing, unlisted: {sorted(undrawn - set(names))}"
