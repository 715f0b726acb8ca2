"""The shape of the house: a one-way module DAG, ExecuTorch behind its doors, a widget on public names."""

from __future__ import annotations

import ast
import functools

import pytest
import torch
from torch import nn

import inspector
from inspector import InspectorError, _executorch, _tosa
from conftest import ROOT

CORE = ROOT / "inspector"


def _modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(CORE.glob("*.py"))}


def _imports(tree: ast.Module) -> set[str]:
    """Every absolute module name imported anywhere in the file (inside functions too)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                out.add(node.module or "")
            else:  # relative: from . import x / from .x import y
                base = "inspector"
                if node.module:
                    out.add(f"{base}.{node.module}")
                else:
                    out.update(f"{base}.{a.name}" for a in node.names)
    return out


def test_inspector_modules_form_a_dag():
    trees = _modules()
    edges = {name: {m.split(".")[1] for m in _imports(tree) if m.startswith("inspector.") and m.count(".") >= 1}
             & set(trees) - {name} for name, tree in trees.items()}
    edges.pop("__init__")  # the package re-exports everything; nothing imports it back
    for deps in edges.values():
        deps.discard("__init__")
        deps.discard("__main__")
    visiting, done = [], set()

    def visit(name):
        if name in done:
            return
        assert name not in visiting, "import cycle: " + " -> ".join(visiting[visiting.index(name):] + [name])
        visiting.append(name)
        for dep in sorted(edges.get(name, ())):
            visit(dep)
        visiting.pop()
        done.add(name)

    for name in sorted(edges):
        visit(name)
    assert not {"analysis", "_decide"} & edges["_compare"]  # compare predicts decisions through _policies


def test_only_the_doors_touch_executorch():
    doors = {"_executorch", "_tosa"}
    for name, tree in _modules().items():
        imported = {m for m in _imports(tree) if m.split(".")[0] in ("executorch", "torchao", "tosa_reference_model")}
        named = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and n.value.startswith(("executorch.", "torchao."))}
        if name not in doors:
            assert not imported and not named, f"inspector/{name}.py reaches {sorted(imported | named)}"


def test_no_core_module_imports_the_ui_or_the_samples():
    for name, tree in _modules().items():
        top = {m.split(".")[0] for m in _imports(tree)}
        assert not top & {"ipywidgets", "IPython", "widgets", "sample_models"}, name


def test_the_widget_uses_only_public_names_of_inspector():
    public = set(inspector.__all__)
    for path in sorted((ROOT / "widgets").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("inspector"):
                assert node.module == "inspector", f"{path.name} imports {node.module}"
                assert {a.name for a in node.names} <= public, f"{path.name}: {[a.name for a in node.names]}"
            if isinstance(node, ast.Import):
                assert all(a.name == "inspector" or not a.name.startswith("inspector") for a in node.names)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "inspector":
                assert node.attr in public, f"{path.name} uses inspector.{node.attr}"


def test_readme_names_are_public():
    text = (ROOT / "README.md").read_text()
    for name in ("render_pair", "report_html", "NotDelegated", "analyze_graph", "read_session", "Verdicts"):
        assert name in inspector.__all__
        assert name in text, name


@pytest.mark.parametrize("door,required", [(_executorch, _executorch.REQUIRED), (_tosa, _tosa.REQUIRED)])
def test_every_required_name_is_there(door, required):
    _executorch.check_required(required)


def test_a_missing_private_name_fails_in_one_line_before_any_answer(monkeypatch):
    cls = _executorch.fold_pass_class()
    monkeypatch.delattr(cls, "_match_mul_after_conv")
    monkeypatch.setattr(_executorch, "_ready", functools.cache(lambda: _executorch.check_required()))
    _executorch._get.cache_clear()  # names already looked up in this process are looked up again
    try:
        with pytest.raises(InspectorError) as info:
            inspector.analyze("sample:conv_mul_scalar", stage="aten")
    finally:
        _executorch._get.cache_clear()
    assert str(info.value).startswith(
        f"executorch {_executorch.installed_version()} is not supported: FoldScalarMulIntoConvPass has no "
        f"_match_mul_after_conv; supported: {_executorch.SUPPORTED}")
    assert "\n" not in str(info.value)


def test_a_missing_module_fails_in_one_line():
    with pytest.raises(InspectorError, match=r"is not supported: there is no module executorch\.backends\.nope"):
        _executorch.check_required((("executorch.backends.nope", "X", ()),))


def test_render_is_a_function_of_a_graph_and_verdicts():
    """No Analysis needed: an FX graph and its sites (or a Verdicts record) in, a Digraph out."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(x) * 0.5

    analysis = inspector.analyze(Net(), (torch.ones(1, 3, 8, 8),), stage="aten")
    gm, verdicts = analysis.verdicts("before")
    assert isinstance(verdicts, inspector.Verdicts) and verdicts.sites == analysis.sites
    by_sites = inspector.render(gm.graph, analysis.sites).source
    assert f"site {analysis.sites[0].id}" in by_sites and "fold" in by_sites
    assert inspector.render(gm, verdicts).source == analysis.render("before").source
    assert inspector.render(*analysis.verdicts("after")).source == analysis.render("after").source
    bare = inspector.render(gm.graph).source  # no verdicts: a plain picture
    assert analysis.sites[0].id not in bare and "conv2d" in bare
    with pytest.raises(InspectorError, match="cannot draw a int"):
        inspector.render(3)
