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
    """Every module of the core by name (``_pt2`` for the package's loader, ``_pt2._zip`` for its parts)."""
    out = {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(CORE.glob("*.py"))}
    for p in sorted((CORE / "_pt2").glob("*.py")):
        name = "_pt2" if p.stem == "__init__" else f"_pt2.{p.stem}"
        out[name] = ast.parse(p.read_text(), str(p))
    return out


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
    trees = {name: tree for name, tree in trees.items() if "." not in name}  # _pt2's parts are one package
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


def test_a_registered_rule_is_offered_everywhere_without_another_edit(tmp_path, capsys):
    """Adding a rule is one object in one place: the CLI's choices, the widget's picker, compare,
    sessions and the JSON all offer it (here: a copy of the strict guard under another name)."""
    import json

    from inspector import cli
    from widgets import FoldInspector

    name = "test-copy-of-strict"
    rule = inspector.register_policy(inspector.Policy(name, "the strict guard, registered by a test", "this test",
                                                      guard=inspector.StateGuard(in_place_writes=True)))
    try:
        assert name in inspector.POLICIES and "this test" in inspector.POLICY_HELP[name]
        analysis = inspector.analyze("sample:stateful_conv_mul", stage="tfa", policy=name)
        strict = analysis.with_policy("state-aware-strict")
        assert [s.to_dict() for s in analysis.sites] == [s.to_dict() for s in strict.sites]
        assert analysis.rule is rule and analysis.to_dict()["rule"]["source"] == "this test"

        assert cli.main(["analyze", "sample:stateful_conv_mul", "--stage", "tfa", "--policy", name, "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["policy"] == name and printed["sites"][0]["decision"] == "skip"

        app = FoldInspector("sample:stateful_conv_mul", stage="tfa", policy=name, variants=("off", name))
        assert name in app.policy_picker.options and name in app.variant_picker.options
        app.set_policy("upstream")
        app.set_policy(name)
        assert app.analysis.policy == name and app.last_error is None
        path = app.save_session(tmp_path / "session.json")
        assert inspector.read_session(path).policy == name
    finally:
        inspector.unregister_policy(name)
    assert name not in inspector.POLICIES
    with pytest.raises(InspectorError, match=f"unknown policy '{name}'"):
        inspector.analyze("sample:stateful_conv_mul", stage="tfa", policy=name)


@pytest.mark.requires_tosa
def test_compare_runs_a_registered_rule():
    name = "test-never-fold"
    inspector.register_policy(inspector.Policy(name, "a second off", "this test", folds=False))
    try:
        comparison = inspector.compare("sample:conv_mul_scalar", ("off", name), workers=1)
        off, mine = comparison.results
        assert mine.variant.policy == name and mine.to_dict()["variant"]["policy"] == name
        assert [m.sqnr_db for m in mine.metrics] == [m.sqnr_db for m in off.metrics]
        assert not any(s.folded_at for s in mine.sites)
    finally:
        inspector.unregister_policy(name)


# Module-level containers that are registries, not caches: each is filled by registering, once.
REGISTRIES = {("_policies", "_REGISTRY"), ("samples", "_ENTRIES")}
# Memos of the installed stack's fixed facts (imported classes and modules): a fixed, small set of keys.
STACK_MEMOS = {("_executorch", "_ready"), ("_executorch", "_get"), ("_executorch", "_caching_classes"),
               ("_tosa", "_ready")}


def _core_modules():
    import importlib

    names = [p.stem for p in sorted(CORE.glob("*.py")) if p.stem not in ("__main__",)]
    names += [f"_pt2.{p.stem}" for p in sorted((CORE / "_pt2").glob("_*.py")) if p.stem != "__init__"]
    return {n: importlib.import_module(f"inspector.{n}" if n != "__init__" else "inspector") for n in names}


def _containers(modules) -> dict[tuple[str, str], int]:
    import collections
    import weakref

    kinds = (dict, list, set, collections.OrderedDict, collections.defaultdict, collections.deque,
             weakref.WeakKeyDictionary, weakref.WeakValueDictionary, weakref.WeakSet)
    return {(m, k): len(v) for m, mod in modules.items() for k, v in vars(mod).items()
            if isinstance(v, kinds) and not k.startswith("__") and m != "_cache"}


def test_no_module_keeps_a_cache_of_its_own():
    """Every cache is one of ``_cache``'s (registered, bounded, cleared by ``clear_cache``): no other
    module-level container grows while the core works, and no module memoizes on its own."""
    modules = _core_modules()
    before = _containers(modules)
    analysis = inspector.analyze("sample:generated_blocks", stage="edge")
    for policy in inspector.POLICIES:
        current = analysis.with_policy(policy).toggle_marker(analysis.sites[3].id)
        current.render_pair(focus=analysis.sites[3].id)
        current.after
    inspector.analyze("sample:stateful_conv_mul", stage="tfa").to_dict()
    grown = {k: (before.get(k, 0), n) for k, n in _containers(modules).items() if n != before.get(k, 0)}
    grown = {k: v for k, v in grown.items() if k not in REGISTRIES}
    assert not grown, f"module-level containers that grew: {grown}"
    memos = {(m, name) for m, tree in _modules().items() for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for d in node.decorator_list
             for name in [node.name] if "cache" in ast.unparse(d)}
    assert memos <= STACK_MEMOS, f"memoized outside _cache: {sorted(memos - STACK_MEMOS)}"
    weak = {m for m, tree in _modules().items() if m != "_cache"
            and any(isinstance(n, ast.Attribute) and n.attr.startswith("Weak") for n in ast.walk(tree))}
    assert not weak, f"weak containers outside _cache: {sorted(weak)}"


def test_no_core_module_uses_a_private_name_of_another():
    """A module reaches another through its public names; only the doors' own helpers
    (``_executorch``'s, used by the other door) and a package's parts among themselves are exempt."""
    doors = {"_executorch", "_tosa"}
    found = []
    for name, tree in _modules().items():
        modules = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                package_part = name.startswith("_pt2") and node.level == 1 and node.module != "errors"
                for a in node.names:
                    if node.module is None:
                        modules[a.asname or a.name] = a.name
                    elif a.name.startswith("_") and not a.name.startswith("__") and not package_part:
                        found.append(f"{name}: from {node.module} import {a.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                owner = modules[node.value.id]
                if node.attr.startswith("_") and not node.attr.startswith("__") and not (name in doors and owner in doors):
                    found.append(f"{name}: {owner}.{node.attr}")
    assert not found, found


def test_presentation_takes_graphs_verdicts_and_public_analysis_fields():
    """render never sees an Analysis (nor a region); explorer and report read public fields only."""
    trees = _modules()
    render = trees["_render"]
    assert not {m for m in _imports(render) if m.split(".")[-1] in ("analysis", "_decide", "_region")}
    assert not any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "hasattr" and
                   isinstance(n.args[1], ast.Constant) and n.args[1].value == "verdicts" for n in ast.walk(render))
    public = {n for n in dir(inspector.Analysis) if not n.startswith("_")}
    public |= {f for f in inspector.Analysis.__dataclass_fields__ if not f.startswith("_")}
    for name in ("_render", "explorer", "report", "_present"):
        used = {n.attr for n in ast.walk(trees[name]) if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name) and n.value.id == "analysis"}
        assert used <= public, f"{name} reads {sorted(used - public)} of an Analysis"
        assert not used & {"decider", "guard"}, f"{name} reaches into how the analysis was decided"


def test_the_widget_uses_only_public_ipywidgets_api():
    """The house's side of it (the check itself, and that it can fail, is in test_widgets.py)."""
    from test_widgets import _private_names_of_ipywidgets, _private_uses

    sources = {p.name: p.read_text() for p in sorted((ROOT / "widgets").glob("*.py"))}
    assert _private_uses(sources, _private_names_of_ipywidgets()) == []
