"""The shape of the house: a one-way module DAG, ExecuTorch behind its doors, a widget on public names."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import inspector
from inspector import InspectorError
from inspector._doors import executorch as _executorch
from inspector._doors import tosa as _tosa
from conftest import ROOT

CORE = ROOT / "inspector"


# The folders of the core, lowest first: a module imports only from its own folder and the folders
# below it (the one-line errors are in ``_base``, below them all). docs/design.md's folder map says what each
# one does. The presentation (the public ``present``) is on top, under the front ends only: it draws every record.
LAYERS = ("_base", "_workers", "_targets", "_doors", "_cost", "_sites", "_rules", "_decide", "_numbers", "_journey",
          "_advise", "_sweep", "present", "_front")  # _cost below _decide: the lowering stage is an accelerator's
# The imports that climb, each inside the one function that needs it (never at import time): one convenience of a
# record that hands the work to the verb above it. A record is drawn by asking the ground floor's table
# (``_base/display.py``), which the presentation fills when it is imported: nothing climbs to the presentation.
DISPLAY = "_base.display"
CLIMBS = {
    ("_decide.analysis", "_numbers.compare"): "Analysis.compare() is inspector.compare(analysis)",
}
# What names a module of the core in a string: the only way code could import one without an import statement.
_NAMED_MODULE = re.compile(r"^inspector((?:\.[A-Za-z_]\w*)+)(?::\w+)?$")


def _modules() -> dict[str, ast.Module]:
    """Every module of the core by dotted name under ``inspector`` (``_targets.pt2`` for a package)."""
    out = {}
    for p in sorted(CORE.rglob("*.py")):
        parts = list(p.relative_to(CORE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        out[".".join(parts)] = ast.parse(p.read_text(), str(p))
    return out


def _package(name: str) -> str:
    """The package a module's relative imports start from."""
    return name if (CORE / name.replace(".", "/")).is_dir() else name.rpartition(".")[0]


def _imports(tree: ast.Module, name: str = "", top_only: bool = False) -> set[str]:
    """Every absolute module name the module imports (inside functions too, unless ``top_only``)."""
    out = set()
    nodes = tree.body if top_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                out.add(node.module or "")
                continue
            parts = [p for p in _package(name).split(".") if p and p != "__init__"]
            parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
            base = ".".join(["inspector"] + parts + ([node.module] if node.module else []))
            submodules = set()
            for a in node.names:  # from . import module
                candidate = f"{base}.{a.name}"
                if (CORE / Path(*candidate.split(".")[1:])).with_suffix(".py").exists() or \
                        (CORE / Path(*candidate.split(".")[1:])).is_dir():
                    submodules.add(candidate)
            out |= submodules
            if len(submodules) < len(node.names):  # a name of the package itself, not only its modules
                out.add(base)
    return out


def _folder(name: str) -> str:
    return name.split(".")[0]


def _named_modules(tree: ast.Module) -> set[str]:
    """Every module of the core a string constant names (``"inspector._numbers.worker_boot"``,
    ``"inspector._sweep.work:run_variant"``): an import the import statements do not show."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found = _NAMED_MODULE.match(node.value.strip())
            if found:
                out.add("inspector" + found.group(1))
    return out


def _climbs(modules: dict[str, ast.Module]) -> list[tuple[str, str, str]]:
    """(module, the module of a higher layer it reaches, how: "import" or "string") for every climb."""
    rank = {folder: i for i, folder in enumerate(LAYERS)}
    out = []
    for name, tree in modules.items():
        if name in ("__init__", "__main__"):
            continue
        assert _folder(name) in rank, f"inspector/{name.replace('.', '/')} is in no layer of LAYERS"
        reached = [(m, "import") for m in _imports(tree, name)] + [(m, "string") for m in _named_modules(tree)]
        for module, how in reached:
            if not module.startswith("inspector.") or module.count(".") < 1:
                assert module != "inspector", f"{name} imports the package itself"
                continue
            target = module.split(".", 1)[1]
            if rank.get(_folder(target), 99) > rank[_folder(name)]:
                out.append((name, target, how))
    return out


def _hand_overs(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """(function, the statements of its body after the docstring) of every function that asks the ground floor's
    drawing table: a hand-over is exactly one ``return draw("verb", self, ...)``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if node.body and isinstance(node.body[0], ast.Expr) and \
                isinstance(getattr(node.body[0], "value", None), ast.Constant) else node.body
            if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "draw"
                   for b in body for n in ast.walk(b)):
                out.append((node.name, [type(b).__name__ for b in body]))
    return out


def test_folders_are_layered():
    """A folder imports only from itself and the folders below it, by statement (inside functions too) or by a
    string naming a module; the only climbs are those named in CLIMBS, and none reaches the presentation."""
    modules = _modules()
    climbs = _climbs(modules)
    by_string = [c for c in climbs if c[2] == "string"]
    assert not by_string, f"modules named by a string in a higher layer: {by_string}"
    assert not [c for c in climbs if _folder(c[1]) == "present"], "a module below the presentation imports it"
    named = {(name, target) for name, target, _ in climbs}
    assert named == set(CLIMBS), sorted(named ^ set(CLIMBS))
    for name, target, _ in climbs:  # never at import time
        assert f"inspector.{target}" not in _imports(modules[name], name, top_only=True), (name, target)
    handing = {name for name, tree in modules.items() if f"inspector.{DISPLAY}" in _imports(tree, name)} - {"present.drawing"}
    assert handing >= {"_decide.analysis", "_numbers.results", "_numbers.engines", "_numbers.attribution",
                       "_numbers.bits", "_sweep.results", "_journey.records", "_advise.records"}, sorted(handing)
    for name in handing:  # each hand-over is one line: the record handed to the drawing table
        for function, body in _hand_overs(modules[name]):
            assert body == ["Return"], f"{name}.{function} draws for itself: {body}"


def test_the_layer_check_sees_a_module_named_in_a_string():
    """A lower layer that names a higher one by string (a pool that resolves "module:function", a boot
    module) is a climb the import statements do not show: the check finds it, and a hand-over that
    does more than hand over is found too."""
    planted = {
        "_workers.pool": ast.parse('BOOT = "inspector._numbers.worker_boot"\n'
                                   'TASK = "inspector._sweep.work:run_variant"\n'),
        "_base.cache": ast.parse('NOTE = "no module here: inspector is a word"\n'),
        "_numbers.results": ast.parse("def _repr_html_(self):\n"
                                      "    from ..present import drawing\n"
                                      "    return drawing.html(self)\n"
                                      "def to_markdown(self):\n"
                                      "    rows = draw('rows', self)\n"
                                      "    return '<table>' + rows\n"),
    }
    found = _climbs(planted)
    assert ("_workers.pool", "_numbers.worker_boot", "string") in found
    assert ("_workers.pool", "_sweep.work", "string") in found
    assert ("_numbers.results", "present.drawing", "import") in found  # inside a function: still a climb
    assert not [c for c in found if c[0] == "_base.cache"]
    assert _hand_overs(planted["_numbers.results"]) == [("to_markdown", ["Assign", "Return"])]


def test_tasks_run_by_registered_kind():
    """The pool runs a task by its registered kind; every kind is a module-level function of a layer above
    the workers, and no core module imports a module it names at run time but the kinds' own door (the
    stack's door and the user's files aside)."""
    from inspector._workers import kinds

    found = {k: fn for k, fn in kinds.kinds().items() if fn.__module__.startswith("inspector.")}  # tests add theirs
    assert set(found) >= {"compare-variant", "attribution", "sweep-model", "sweep-variant"}, sorted(found)
    rank = {folder: i for i, folder in enumerate(LAYERS)}
    for kind, fn in found.items():
        module = fn.__module__.split(".", 1)[1]
        assert rank[_folder(module)] > rank["_workers"], (kind, fn.__module__)
        assert getattr(__import__(fn.__module__, fromlist=["_"]), fn.__name__) is fn, kind
    dynamic = {name for name, tree in _modules().items() for node in ast.walk(tree)
               if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module")}
    # _workers.pool: its fork server imports the modules the layers above name with boot_with
    assert dynamic <= {"_workers.kinds", "_workers.pool", "_doors.executorch", "_targets.load"}, sorted(dynamic)


def test_inspector_modules_form_a_dag():
    """The import graph with every import inside a function and every module named by a string has no cycle."""
    trees = {name: tree for name, tree in _modules().items() if not name.startswith("_targets.pt2.")}
    edges = {}
    for name, tree in trees.items():
        deps = {m.split(".", 1)[1] for m in _imports(tree, name) | _named_modules(tree) if m.startswith("inspector.")}
        deps = {d if d in trees else d.rpartition(".")[0] for d in deps} & set(trees)
        edges[name] = deps - {name, "__init__", "__main__"} - {n for n in trees if name.startswith(n + ".")}
    edges.pop("__init__")  # the package re-exports everything; nothing imports it back
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
    assert not {"_decide.analysis", "_decide.decide"} & edges["_numbers.compare"]  # compare predicts through rules


def test_the_design_folder_map_is_true():
    """docs/design.md's folder map names every folder of the core, and every module it names exists."""
    import re

    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("## Layout"):]
    section = section[:section.find("\n## ", 4)] if "\n## " in section[4:] else section
    folders = {p.name for p in CORE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    named = set(re.findall(r"`inspector/(_?[a-z0-9_]+)/`", section))
    assert folders == named, f"folders not in the map: {sorted(folders - named)}; named but missing: {sorted(named - folders)}"
    for path in re.findall(r"`(inspector/[A-Za-z0-9_/]+\.py)`", section):
        assert (ROOT / path).exists(), f"docs/design.md names {path}, which does not exist"
    for folder in folders:
        for module in (CORE / folder).glob("*.py"):
            if module.stem != "__init__":
                assert f"{module.stem}" in section, f"docs/design.md's map does not say what {folder}/{module.name} is"


def test_only_the_doors_touch_executorch():
    doors = {"_doors.executorch", "_doors.tosa", "_doors.pipeline", "_doors.vela"}
    for name, tree in _modules().items():
        imported = {m for m in _imports(tree, name) if m.split(".")[0] in ("executorch", "torchao", "tosa_reference_model")}
        named = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and n.value.startswith(("executorch.", "torchao."))}
        if name not in doors:
            assert not imported and not named, f"inspector/{name}.py reaches {sorted(imported | named)}"


def test_no_core_module_imports_the_ui_or_the_samples():
    for name, tree in _modules().items():
        top = {m.split(".")[0] for m in _imports(tree, name)}
        assert not top & {"ipywidgets", "IPython", "widgets", "sample_models"}, name


def test_the_widget_uses_only_public_names_of_inspector():
    """The widget imports ``inspector``'s ``__all__`` and ``inspector.present``'s, nothing else."""
    import inspector.present as present

    public, drawing = set(inspector.__all__), set(present.__all__)
    for path in sorted((ROOT / "widgets").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("inspector"):
                allowed = {"inspector": public | {"present"}, "inspector.present": drawing}.get(node.module)
                assert allowed is not None, f"{path.name} imports {node.module}"
                assert {a.name for a in node.names} <= allowed, f"{path.name}: {[a.name for a in node.names]}"
            if isinstance(node, ast.Import):
                assert all(a.name in ("inspector", "inspector.present") or not a.name.startswith("inspector")
                           for a in node.names)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "inspector":
                assert node.attr in public | {"present"}, f"{path.name} uses inspector.{node.attr}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "present":
                assert node.attr in drawing, f"{path.name} uses present.{node.attr}"


# ``__all__`` is the user's verbs and the records they return: the records reached from others (a site's scale
# summary, a node outside the delegate, a quantization, a sweep's model spec) are importable, not in it.
MAX_PUBLIC = 42  # 40 until issue 62 added the two verbs of "which layers need more bits": layers and widen


def _user_texts() -> dict[str, str]:
    """What a user reads: the README, the docs pages, the notebooks' cells and the widget's code."""
    import json

    texts = {"README.md": (ROOT / "README.md").read_text()}
    texts.update({f"docs/{p.name}": p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))})
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        texts[f"notebooks/{p.name}"] = "\n".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"])
    texts.update({f"widgets/{p.name}": p.read_text() for p in sorted((ROOT / "widgets").glob("*.py"))})
    return texts


def _unused(names, texts: dict[str, str]) -> list[str]:
    import re

    return [n for n in names if not any(re.search(rf"(?<![\w.]){re.escape(n)}\b|\binspector\.{re.escape(n)}\b", t)
                                        for t in texts.values())]


def test_every_public_name_is_used_where_users_read():
    """Each name of ``__all__`` appears in the README, a docs page, a notebook or the widget: a name no
    user meets is not public (what only a screen needs is ``inspector.present``'s)."""
    assert len(inspector.__all__) <= MAX_PUBLIC, len(inspector.__all__)
    assert len(set(inspector.__all__)) == len(inspector.__all__)
    texts = _user_texts()
    assert not _unused(inspector.__all__, texts), f"public names no user reads: {_unused(inspector.__all__, texts)}"


def test_the_used_names_check_can_fail():
    texts = {"README.md": "inspector.analyze(x); from inspector import Rule\n`sweep` and Sweep.FORMATS"}
    assert _unused(["analyze", "Rule", "sweep", "Sweep", "compare", "FORMATS", "yze"], texts) == [
        "compare", "FORMATS", "yze"]


def test_one_registry_shape():
    """Rules, quantizations, samples and accelerators are one kind of object, with live help."""
    from inspector._base.registry import Registry

    for registry in (inspector.rules, inspector.quantizations, inspector.samples, inspector.accelerators):
        assert isinstance(registry, Registry)
        names = registry.names()
        assert names and list(registry) == list(names) and all(n in registry for n in names)
        assert registry.help() == {n: registry.describe(n) for n in names} and "nothing-by-this-name" not in registry
        with pytest.raises(InspectorError, match=f"^unknown {registry.what} 'nothing-by-this-name'; choose one of: "):
            registry.get("nothing-by-this-name")


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

    analysis = inspector.analyze(Net(), example_inputs=(torch.ones(1, 3, 8, 8),), stage="aten")
    gm, verdicts = analysis.verdicts("before")
    assert isinstance(verdicts, inspector.present.Verdicts) and verdicts.sites == analysis.sites
    by_sites = inspector.present.render(gm.graph, analysis.sites).source
    assert f"site {analysis.sites[0].id}" in by_sites and "fold" in by_sites
    assert inspector.present.render(gm, verdicts).source == analysis.render("before").source
    assert inspector.present.render(*analysis.verdicts("after")).source == analysis.render("after").source
    bare = inspector.present.render(gm.graph).source  # no verdicts: a plain picture
    assert analysis.sites[0].id not in bare and "conv2d" in bare
    with pytest.raises(InspectorError, match="cannot draw a int"):
        inspector.present.render(3)


def test_a_registered_rule_is_offered_everywhere_without_another_edit(tmp_path, capsys):
    """Adding a rule is one object in one place: the CLI's choices, the widget's picker, compare,
    sessions and the JSON all offer it (here: a copy of the strict guard under another name)."""
    import json

    from inspector._front import cli
    from widgets import FoldInspector

    name = "test-copy-of-strict"
    from dataclasses import replace

    rule = inspector.rules.register(replace(inspector.rules.get("state-aware-strict"), name=name,
                                            help="the strict guard, registered by a test", source="this test"))
    try:
        assert name in inspector.rules and "this test" in inspector.rules.describe(name)
        analysis = inspector.analyze("sample:stateful_conv_mul", stage="tfa", rule=name)
        strict = analysis.with_rule("state-aware-strict")
        assert [s.to_dict() for s in analysis.sites] == [s.to_dict() for s in strict.sites]
        assert analysis.rule is rule and analysis.to_dict()["rule"]["source"] == "this test"

        assert cli.main(["analyze", "sample:stateful_conv_mul", "--stage", "tfa", "--rule", name, "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["rule"]["name"] == name and printed["sites"][0]["decision"] == "skip"

        app = FoldInspector("sample:stateful_conv_mul", stage="tfa", rule=name, variants=("off", name))
        assert name in app.rule_picker.options and name in app.variant_picker.options
        app.set_rule("upstream")
        app.set_rule(name)
        assert app.analysis.rule.name == name and app.last_error is None
        path = app.save_session(tmp_path / "session.json")
        assert inspector.Session.read(path).rule == name
    finally:
        inspector.rules.unregister(name)
    assert name not in inspector.rules
    with pytest.raises(InspectorError, match=f"unknown rule '{name}'"):
        inspector.analyze("sample:stateful_conv_mul", stage="tfa", rule=name)


@pytest.mark.requires_tosa
def test_compare_runs_a_registered_rule():
    name = "test-never-fold"
    inspector.rules.register(inspector.Rule(name=name, help="a second off", source="this test", folds=False))
    try:
        comparison = inspector.compare("sample:conv_mul_scalar", variants=("off", name), workers=1)
        off, mine = comparison.results
        assert mine.variant.rule.name == name and mine.to_dict()["variant"]["rule"] == name
        assert [m.sqnr_db for m in mine.metrics] == [m.sqnr_db for m in off.metrics]
        assert not any(s.folded_at for s in mine.sites)
    finally:
        inspector.rules.unregister(name)


# Module-level containers that are registries, not caches: each is filled by registering, once.
REGISTRIES = {("_targets.samples", "_DEFAULT")}
# Memos of the installed stack's fixed facts (imported classes and modules): a fixed, small set of keys.
# The installed stack checked once per process: bounded by the doors' name tables, and cleared by clear_checks.
STACK_MEMOS = {("_doors.executorch", "_ready"), ("_doors.executorch", "_get"),
               ("_doors.executorch", "_caching_classes"), ("_doors.tosa", "_ready"), ("_doors.vela", "_ready"),
               ("_doors.executorch", "_version_checked"), ("_doors.executorch", "check_once")}


def _core_modules():
    import importlib

    names = [n for n in _modules() if n != "__main__"]
    return {n: importlib.import_module(f"inspector.{n}" if n != "__init__" else "inspector") for n in names}


def _containers(modules) -> dict[tuple[str, str], int]:
    import collections
    import weakref

    kinds = (dict, list, set, collections.OrderedDict, collections.defaultdict, collections.deque,
             weakref.WeakKeyDictionary, weakref.WeakValueDictionary, weakref.WeakSet)
    return {(m, k): len(v) for m, mod in modules.items() for k, v in vars(mod).items()
            if isinstance(v, kinds) and not k.startswith("__") and m != "_base.cache"}


@pytest.mark.slow  # the 200-site sample under every rule: make test runs it, make check leaves it out
def test_no_module_keeps_a_cache_of_its_own():
    """Every cache is one of ``_cache``'s (registered, bounded, cleared by ``clear_cache``): no other
    module-level container grows while the core works, and no module memoizes on its own."""
    modules = _core_modules()
    before = _containers(modules)
    # four sites, a buffer and a recurrent output: every kind of thing a cache could be keyed by (the
    # 200-site generated_blocks took 30 s here and reached no other code)
    analysis = inspector.analyze("sample:streaming_keyword_spotter", stage="edge")
    for policy in inspector.rules:
        current = analysis.with_rule(policy).toggle_marker(analysis.sites[3].id)
        current.render_pair(focus=analysis.sites[3].id)
        current.after  # noqa: B018 - a property: reading it builds the after-graph
    inspector.analyze("sample:stateful_conv_mul", stage="tfa").to_dict()
    grown = {k: (before.get(k, 0), n) for k, n in _containers(modules).items() if n != before.get(k, 0)}
    grown = {k: v for k, v in grown.items() if k not in REGISTRIES}
    assert not grown, f"module-level containers that grew: {grown}"
    memos = {(m, name) for m, tree in _modules().items() for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for d in node.decorator_list
             for name in [node.name] if "cache" in ast.unparse(d)}
    assert memos <= STACK_MEMOS, f"memoized outside _cache: {sorted(memos - STACK_MEMOS)}"
    weak = {m for m, tree in _modules().items() if m != "_base.cache"
            and any(isinstance(n, ast.Attribute) and n.attr.startswith("Weak") for n in ast.walk(tree))}
    assert not weak, f"weak containers outside _cache: {sorted(weak)}"


def test_no_core_module_uses_a_private_name_of_another():
    """A module reaches another through its public names; only the doors' own helpers
    (``_executorch``'s, used by the other door) and a package's parts among themselves are exempt."""
    doors = {"executorch", "tosa"}
    found = []
    for name, tree in _modules().items():
        modules = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                package_part = name.startswith("_targets.pt2") and node.level == 1
                for a in node.names:
                    if node.module is None:
                        modules[a.asname or a.name] = a.name
                    elif a.name.startswith("_") and not a.name.startswith("__") and not package_part:
                        found.append(f"{name}: from {node.module} import {a.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                owner = modules[node.value.id]
                if node.attr.startswith("_") and not node.attr.startswith("__") and not (
                        name.startswith("_doors.") and owner in doors):
                    found.append(f"{name}: {owner}.{node.attr}")
    assert not found, found


def test_presentation_takes_graphs_verdicts_and_public_analysis_fields():
    """render never sees an Analysis (nor a region); explorer and report read public fields only."""
    trees = _modules()
    render = trees["present.render"]
    assert not {m for m in _imports(render, "present.render") if m.split(".")[-1] in ("analysis", "decide", "region")}
    assert not any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "hasattr" and
                   isinstance(n.args[1], ast.Constant) and n.args[1].value == "verdicts" for n in ast.walk(render))
    public = {n for n in dir(inspector.Analysis) if not n.startswith("_")}
    public |= {f for f in inspector.Analysis.__dataclass_fields__ if not f.startswith("_")}
    for name in ("present.render", "present.explorer", "present.report", "present.tables"):
        used = {n.attr for n in ast.walk(trees[name]) if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name) and n.value.id == "analysis"}
        assert used <= public, f"{name} reads {sorted(used - public)} of an Analysis"
        assert not used & {"decider", "guard"}, f"{name} reaches into how the analysis was decided"


def test_the_widget_uses_only_public_ipywidgets_api():
    """The house's side of it (the check itself, and that it can fail, is in test_widgets.py)."""
    from test_widgets import _private_names_of_ipywidgets, _private_uses

    sources = {p.name: p.read_text() for p in sorted((ROOT / "widgets").glob("*.py"))}
    assert _private_uses(sources, _private_names_of_ipywidgets()) == []


def _inner_imports(source: str) -> list[list[int]]:
    """The imports inside functions, as blocks of consecutive lines (a block shares one reason)."""
    tree = ast.parse(source)
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines |= {n.lineno for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
    blocks: list[list[int]] = []
    text = source.splitlines()
    for line in sorted(lines):
        previous = blocks[-1][-1] if blocks else None
        between = text[previous:line - 1] if previous is not None else ["x"]
        if previous is not None and all(t.strip().startswith(("from ", "import ", ")", "#")) or not t.strip()
                                        for t in between) and not any(not t.strip() for t in between):
            blocks[-1].append(line)
        else:
            blocks.append([line])
    return blocks


def _says_why(source: str, block: list[int]) -> bool:
    """A block of imports inside a function carries a one-line reason: a comment on one of its lines (not a
    bare ``noqa``), or on the line above it."""
    text = source.splitlines()
    comments = [text[i - 1].partition("#")[2].strip() for i in block] + \
        ([text[block[0] - 2].strip().lstrip("#").strip()] if text[block[0] - 2].strip().startswith("#") else [])
    return any(c and not re.fullmatch(r"noqa(: ?[A-Z0-9, ]+)?", c) for c in comments)


def test_every_import_inside_a_function_says_why():
    """An import inside a function is lazy (an optional extra, a heavy or private name looked up late), breaks
    a cycle, or climbs to the presentation: each says which, in one line; the rest are at the top."""
    missing = []
    for path in sorted(CORE.rglob("*.py")):
        source = path.read_text()
        missing += [f"{path.relative_to(ROOT)}:{b[0]}" for b in _inner_imports(source) if not _says_why(source, b)]
    assert not missing, f"imports inside functions without a reason: {missing}"


def test_the_reason_check_can_fail():
    source = ("def f():\n    import json\n    return json\n\n"
              "def g():\n    # lazy: heavy\n    import torch\n    from torch import nn\n    return nn\n\n"
              "def h():\n    import os  # noqa: F401\n")
    blocks = _inner_imports(source)
    assert blocks == [[2], [7, 8], [12]]
    assert [_says_why(source, b) for b in blocks] == [False, True, False]


# ---------------------------------------------------------------- objects stay objects


def _name_comparisons(tree: ast.AST, names: set[str]) -> list[str]:
    """Every comparison of ``tree`` with a string literal that is one of ``names`` (on either side, or inside a
    tuple, list or set it is compared with): ``engine == "tosa"``, ``accelerator not in ("tosa-int",)``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(isinstance(i, ast.Constant) and i.value in names for i in items):
                    found.append(f"{node.lineno}: {ast.unparse(node)}")
                    break
    return found


def test_no_module_compares_an_engine_or_accelerator_by_name():
    """Records hold the engine and accelerator they ran with, and the code asks them (``engine.authority``,
    ``accelerator.costs``, the registry's own objects): no module of the core or the widget compares a registered
    engine's or accelerator's name with a string."""
    from inspector._numbers.engines import engines

    names = set(engines.names()) | set(inspector.accelerators.names())
    found = []
    for path in sorted([*CORE.rglob("*.py"), *(ROOT / "widgets").glob("*.py")]):
        found += [f"{path.relative_to(ROOT)}:{hit}" for hit in _name_comparisons(ast.parse(path.read_text()), names)]
    assert not found, f"names compared where the object should be asked: {found}"


def test_the_name_comparison_check_can_fail():
    source = ('if comparison.engine != "tosa":\n    pass\n'
              'ok = accelerator not in ("ethos-u55-128", "x")\n'
              'fine = point == "simulated" or engine is TOSA or chip == TOSA_INT\n')
    assert _name_comparisons(ast.parse(source), {"tosa", "ethos-u55-128"}) == [
        "1: comparison.engine != 'tosa'", "3: accelerator not in ('ethos-u55-128', 'x')"]


def test_a_comparison_read_back_holds_the_registrys_objects():
    """A comparison (and its results) read from JSON holds the registered engine and accelerator, its JSON names
    them exactly as before, and an accelerator this process does not know reads as a stand-in that says so."""
    import json

    from inspector._numbers.engines import SIMULATION, TOSA, engines
    from inspector._numbers.results import Metrics

    u55 = inspector.accelerators.get("ethos-u55-128")
    result = inspector.VariantResult(variant=inspector.Variant(rule="upstream"), folds={"tfa": 1, "lowering": 0},
                                     sites=(),
                                     metrics=(Metrics(output=0, step=0, values=(("sqnr", 30.0),)),), not_delegated=(),
                                     timings={}, engine="simulation",
                                     accelerator="ethos-u55-128")
    made = inspector.Comparison(target="net", steps=1, calibration="example inputs", quantization="a8w8",
                                results=(result,), engine=SIMULATION, accelerator=u55)
    data = json.loads(json.dumps(made.to_dict()))
    assert (data["engine"], data["accelerator"]) == ("simulation", "ethos-u55-128")
    assert (data["variants"][0]["engine"], data["variants"][0]["accelerator"]) == ("simulation", "ethos-u55-128")
    back = inspector.Comparison.from_dict(data)
    assert back.engine is engines.get("simulation") and back.results[0].engine is SIMULATION
    assert back.accelerator is u55 and back.results[0].accelerator is u55
    assert back.to_dict() == data and str(back.engine) == "simulation" and f"{back.accelerator}" == "ethos-u55-128"
    default = inspector.Comparison.from_dict({k: v for k, v in data.items() if k not in ("engine", "accelerator")})
    assert default.engine is TOSA and default.accelerator is inspector.accelerators.get("tosa-int")
    elsewhere = inspector.Comparison.from_dict({**data, "accelerator": "an-npu-registered-elsewhere"})
    assert elsewhere.accelerator.name == "an-npu-registered-elsewhere" and elsewhere.accelerator.stand_in
    assert "an-npu-registered-elsewhere" not in inspector.accelerators and not elsewhere.accelerator.costs
    assert elsewhere.to_dict()["accelerator"] == "an-npu-registered-elsewhere"


def test_no_docstring_or_comment_names_a_module_that_does_not_exist():
    """A ``_name.py``, or a ``_name`` (``_name.attr``) where a module ``name.py`` lives in a folder now, in double
    backticks: the name of a flat module the core had before its folders; it must exist, or be a name the file itself
    defines or imports (an alias such as ``_flow`` for ``from .. import flow as _flow``)."""
    import re

    modules = {p.stem for p in CORE.rglob("*.py")} | {p.name for p in CORE.rglob("*") if p.is_dir()}
    stale = []
    for path in sorted(CORE.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        defined = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                defined |= {a.asname or a.name.split(".")[0] for a in node.names}
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for found in re.finditer(r"``(_[a-z][a-z0-9_]*)(\.py``|\.[A-Za-z_]\w*|``)", text):
            name, tail = found.group(1), found.group(2)
            moved = name.lstrip("_") in modules  # a flat module's old name for one that lives in a folder now
            if (tail == ".py``" or moved) and name not in modules and name not in defined:
                stale.append(f"{path.relative_to(ROOT)}:{text[:found.start()].count(chr(10)) + 1} {found.group(0)}")
    assert not stale, stale


def test_the_suites_order_names_tests_that_exist():
    """conftest's timings hand the long tests out first; an entry naming a renamed test silently hands it out last."""
    import conftest

    names = {*conftest.SECONDS, *(m for ms in conftest.SHARED_GROUPS.values() for m in ms if "::" in m)}
    missing = []
    for name in sorted(names):
        file, _, test = name.partition("::")
        path = ROOT / "tests" / file
        function, _, param = test.partition("[")
        defined = path.exists() and function in {
            n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
        if not defined or (function == "test_notebook_runs" and not (ROOT / "notebooks" / param[:-1]).exists()):
            missing.append(name)
    assert missing == []


# ExecuTorch's Arm flow is written once (inspector/_doors/arm_flow.py); the door that wraps these calls defines them.
# The run step (a lowered program on the TOSA reference model) is the flow's too: reference_dispatch.
FLOW_CALLS = {"prepare_pt2e", "convert_pt2e", "to_edge_transform_and_lower", "reference_dispatch"}
FLOW_MODULES = {"_doors.arm_flow", "_doors.tosa"}


def _flow_calls(tree: ast.Module) -> list[int]:
    """Lines that call a step of ExecuTorch's flow: ``prepare_pt2e(...)``, ``x.convert_pt2e(...)``,
    ``to_edge_transform_and_lower(...)``, the TOSA door's ``_tosa.lower(...)`` or its run on the reference model,
    ``reference_dispatch()``."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        door_lower = (isinstance(func, ast.Attribute) and func.attr == "lower" and isinstance(func.value, ast.Name)
                      and func.value.id == "_tosa")
        if name in FLOW_CALLS or door_lower:
            lines.append(node.lineno)
    return lines


def test_the_arm_flow_is_written_once():
    """Only the flow's runner (and the door that wraps ExecuTorch's calls) calls prepare_pt2e, convert_pt2e or
    to_edge_transform_and_lower: a change of ExecuTorch's flow is one edit."""
    found = {name: lines for name, tree in _modules().items() if name not in FLOW_MODULES
             for lines in [_flow_calls(tree)] if lines}
    widgets = {str(p.relative_to(ROOT)): lines for p in sorted((ROOT / "widgets").rglob("*.py"))
               for lines in [_flow_calls(ast.parse(p.read_text()))] if lines}
    assert not found and not widgets, f"the flow is called outside inspector/_doors/arm_flow.py: {found | widgets}"


def test_the_written_once_check_can_fail():
    copied = ("def journey(module, quantizer, program, spec):\n"
              "    prepared = _tosa.prepare_pt2e(module, quantizer)\n"
              "    converted = _flow.run_phase('convert', None, lambda: _tosa.convert_pt2e(prepared))\n"
              "    with _tosa.reference_dispatch():\n"
              "        return _tosa.lower(program, spec)\n")
    assert sorted(_flow_calls(ast.parse(copied))) == [2, 3, 4, 5]
