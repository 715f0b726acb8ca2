"""Headless tests of the FoldInspector widget: set control values, check traits and children."""

from __future__ import annotations

import json
import threading
import time

import ipywidgets as W
import pytest
import torch
from torch import nn

import inspector
from inspector import InspectorError
from widgets import FoldInspector

# every app draws its graphs with dot; the reference panel tests run the TOSA reference model
pytestmark = pytest.mark.requires_dot


def html_values(widget) -> list[str]:
    """Every value under ``widget`` that the browser parses as HTML (Labels and Buttons are text)."""
    out = []
    stack = [widget]
    while stack:
        w = stack.pop()
        if isinstance(w, W.HTML):
            out.append(w.value)
        stack.extend(getattr(w, "children", ()))
    return out


def rows(app):
    return [r for r in app.sites_box.children if "fi-site-row" in r._dom_classes]


def decision_of(row) -> str:
    info = row.children[1].value
    return "fold" if ">fold<" in info else "skip"


@pytest.fixture()
def stateful():
    return FoldInspector("sample:stateful_conv_mul", stage="tfa", rule="upstream")


def test_header_sites_and_pickers(stateful):
    app = stateful
    assert "fi-app" in app._dom_classes
    assert "sample:stateful_conv_mul" in app.title.value
    assert app.summary.value.count("1 site, 1 folded") == 1
    (row,) = rows(app)
    assert decision_of(row) == "fold" and "fi-site-fold" in row._dom_classes
    app.rule_picker.value = "state-aware-strict"
    (row,) = rows(app)
    assert decision_of(row) == "skip" and "feeds-buffer-mutation" in row.children[1].value
    assert "feeds-buffer-mutation: 1" in app.summary.value
    app.stage_picker.value = "edge"
    app.rule_picker.value = "state-aware"
    assert app.analysis.stage == "edge" and decision_of(rows(app)[0]) == "skip"
    assert app.steps_input.value == inspector.present.default_steps(app.analysis.target) > 1  # state: several steps


@pytest.mark.requires_tosa
def test_marker_toggle_redecides_and_marks_results_stale():
    app = FoldInspector("sample:functional_recurrent_conv_mul", stage="tfa", rule="state-aware",
                        variants=("state-aware",), steps=2)
    site = app.sites[0].id
    assert app.sites[0].decision == "fold"
    app.run_reference(wait=True)
    assert app.comparison is not None and not app.stale
    assert "fi-stale" not in app.results.value and "<table" in app.results.value
    marker = rows(app)[0].children[2]
    marker.value = True  # the checkbox, as a click would
    assert app.markers == (site,) and app.sites[0].decision == "skip"
    assert app.sites[0].reason_codes == ("marked-carried-state",)
    assert app.stale and "fi-stale" in app.results.value
    rows(app)[0].children[2].value = False
    assert app.markers == () and app.sites[0].decision == "fold" and not app.stale
    assert rows(app)[0].children[2] is marker  # rows are updated in place, not rebuilt


def test_selecting_a_site_focuses_the_graphs(stateful):
    app = stateful
    assert "<svg" in app.graph.value
    select = rows(app)[0].children[0]
    select.click()
    assert app.selected == app.sites[0].id and rows(app)[0].children[0].button_style == "info"
    assert "fi-selected" in rows(app)[0]._dom_classes
    for which in ("before", "after", "side by side"):
        app.graph_which.value = which
        assert "<svg" in app.graph.value
    app.graph_scope.value = "whole"
    assert "<svg" in app.graph.value


@pytest.mark.requires_tosa
def test_reference_run_in_background_and_single_flight(monkeypatch, stateful):
    app = stateful
    calls, release = [], threading.Event()
    real = inspector.Analysis.compare

    def slow_compare(self, *args, **kwargs):
        calls.append(kwargs.get("engine", "tosa"))
        release.wait(30)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(inspector.Analysis, "compare", slow_compare)
    app.variant_picker.value = ("upstream",)
    app.steps_input.value = 2
    app.run_button.click()
    deadline = time.time() + 10
    while not calls and time.time() < deadline:
        time.sleep(0.01)
    assert app.running and app.run_button.disabled
    app.run_button.click()  # a second click while running starts nothing
    app.rule_picker.value = "off"  # the UI stays responsive while the run goes on
    assert app.analysis.rule.name == "off"
    release.set()
    app.wait(120)
    # one run: the simulation's preview, then the TOSA reference
    assert calls == ["simulation", "tosa"] and not app.running and not app.run_button.disabled
    assert app.progress.value == 1.0 and app.progress_label.value == "done"
    assert app.comparison.results[0].variant.rule.name == "upstream"
    assert "SQNR" in app.results.value and "<img" in app.plots.value
    assert app.stale  # computed under policy upstream, now showing off


def test_errors_show_in_the_widget_and_it_keeps_working(monkeypatch, stateful):
    app = stateful

    def broken(self, policy):
        raise InspectorError("the policy engine broke")

    monkeypatch.setattr(inspector.Analysis, "with_rule", broken)
    app.rule_picker.value = "off"
    assert "the policy engine broke" in app.error.value and app.last_error
    assert app.rule_picker.value == "upstream"  # the picker goes back to what the screen shows
    monkeypatch.undo()
    app.rule_picker.value = "state-aware-strict"
    assert app.error.value == "" and app.analysis.rule.name == "state-aware-strict"
    app.variant_picker.value = ()
    app.run_button.click()
    assert "pick at least one variant" in app.error.value and not app.running
    app.session_path.value = "/nonexistent-dir/x.json"
    app.save_button.click()
    assert "cannot write /nonexistent-dir/x.json: directory /nonexistent-dir does not exist" in app.error.value


@pytest.mark.requires_tosa
def test_session_round_trip_restores_the_same_screen(tmp_path):
    app = FoldInspector("sample:functional_recurrent_conv_mul", stage="tfa", rule="state-aware",
                        variants=("upstream", "state-aware"), steps=3)
    app.toggle_marker(app.sites[0].id)
    app.select_site(app.sites[0].id)
    app.run_reference(wait=True)
    path = app.save_session(tmp_path / "s.json")
    data = json.loads(path.read_text())
    assert data["markers"] == [app.sites[0].id] and data["results"]["steps"] == 3
    again = FoldInspector.load_session(path)
    assert (again.analysis.stage, again.analysis.rule.name, again.markers, again.selected) == (
        app.analysis.stage, app.analysis.rule.name, app.markers, app.selected)
    assert again.comparison.to_dict() == app.comparison.to_dict()
    assert again.results.value == app.results.value
    assert [r.children[1].value for r in rows(again)] == [r.children[1].value for r in rows(app)]
    assert list(again.variant_picker.value) == ["upstream", "state-aware"] and again.steps_input.value == 3
    assert not again.stale
    with pytest.raises(InspectorError, match="not a fold-inspector session"):
        (tmp_path / "bad.json").write_text("{}")
        FoldInspector.load_session(tmp_path / "bad.json")


def test_export_report_is_self_contained(tmp_path, stateful):
    path = stateful.export_report(tmp_path / "r.html")
    text = path.read_text()
    assert text.startswith("<!doctype html>") and "<svg" in text and "sample:stateful_conv_mul" in text
    assert "http://" not in text.replace("http://www.w3.org", "")


EVIL = "<img src=x onerror=alert(1)>"


class Evil(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(EVIL, nn.Conv2d(3, 4, 3, padding=1))

    def forward(self, x):
        return getattr(self, EVIL)(x) * 0.5


def test_model_derived_strings_are_escaped_everywhere(tmp_path):
    app = FoldInspector(Evil(), (torch.randn(1, 3, 8, 8),), stage="aten")
    assert EVIL in app.sites[0].id
    app.select_site(app.sites[0].id)
    values = html_values(app)
    assert any("&lt;img src=x onerror=alert(1)&gt;" in v for v in values)
    for value in values:
        assert EVIL not in value, value[:200]
    assert any(EVIL in b.description for b in app.sites_box.children[1].children[:1])  # text, not HTML
    report = app.export_report(tmp_path / "evil.html").read_text()
    assert EVIL not in report and "&lt;img src=x onerror=alert(1)&gt;" in report


def test_model_picker_switches_samples_and_back_to_your_model():
    app = FoldInspector(Evil(), (torch.randn(1, 3, 8, 8),), stage="aten")
    assert app.model_picker.value == "own" and "(your model)" in app.model_picker.options[0][0]
    app.model_picker.value = "sample:conv_mul_multiple_users"
    assert app.analysis.name == "sample:conv_mul_multiple_users" and app.analysis.stage == "aten"
    assert app.sites[0].reason_codes == ("conv-has-other-users",)
    assert "conv-has-other-users" in rows(app)[0].children[1].value
    app.pick_model("own")
    assert EVIL in app.sites[0].id
    sample = FoldInspector("sample:conv_mul_scalar")
    assert sample.model_picker.value == "sample:conv_mul_scalar"
    assert "own" not in [v for _, v in sample.model_picker.options]


def test_programmatic_api_mirrors_controls(stateful):
    app = stateful
    app.set_rule("state-aware-strict")
    assert app.rule_picker.value == "state-aware-strict" and app.sites[0].decision == "skip"
    app.set_stage("aten")
    assert app.stage_picker.value == "aten" and app.analysis.stage == "aten"
    with pytest.raises(InspectorError, match="no site"):
        app.select_site("nope")


SCRIPT_MODEL = '''
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
    def forward(self, x):
        return self.conv(x) * 0.5
    def example_inputs(self):
        return (torch.ones(1, 3, 8, 8),)

open(__file__ + ".imported", "w").close()  # proves the file was run
'''


def test_a_session_naming_a_python_file_asks_before_running_it(tmp_path, stateful):
    script = tmp_path / "model.py"
    script.write_text(SCRIPT_MODEL)
    imported = tmp_path / "model.py.imported"
    session = tmp_path / "s.json"
    session.write_text(json.dumps({"version": 1, "target": f"{script}:Net", "stage": "aten", "policy": "upstream",
                                   "markers": [], "variants": ["upstream"], "steps": 1}))
    with pytest.raises(InspectorError, match="names the Python file .*model.py; loading it runs that file's code"):
        FoldInspector.load_session(session)
    assert not imported.exists()
    # in the widget: Load session shows the file and a Trust and load button, and runs nothing yet
    app = stateful
    app.session_path.value = str(session)
    app.load_button.click()
    assert not imported.exists() and app.analysis.name == "sample:stateful_conv_mul"
    message, buttons = app.trust_box.children
    assert str(script) in message.value and "Trust and load" == buttons.children[0].description
    buttons.children[0].click()
    assert imported.exists() and app.analysis.name == "Net" and app.analysis.stage == "aten"
    assert app.trust_box.children == () and app.error.value == ""
    assert app.model_picker.value == "own" and "Net (your model)" in app.model_picker.options[0][0]
    # the classmethod with trust=True
    again = FoldInspector.load_session(session, trust=True)
    assert again.analysis.name == "Net"


def test_bad_sessions_show_one_line_in_the_widget(tmp_path, stateful):
    app = stateful
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "target": "sample:conv_mul_scalar", "stage": "later",
                               "policy": "upstream"}))
    app.session_path.value = str(bad)
    app.load_button.click()
    assert "field 'stage' must be one of aten, tfa, edge" in app.last_error
    assert app.analysis.name == "sample:stateful_conv_mul"  # the screen is unchanged and still works
    app.session_path.value = str(tmp_path / "missing.json")
    app.load_button.click()
    assert "no such session file" in app.last_error and "no such session file" in app.error.value
    app.rule_picker.value = "off"
    assert app.error.value == "" and app.sites[0].decision == "skip"


def test_in_ipython_an_inspector_error_is_one_line(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    from widgets import install_error_display

    shell = InteractiveShell.instance()
    try:
        assert install_error_display() is True  # get_ipython() is this shell now
        result = shell.run_cell("import inspector\ninspector.analyze('sample:nope')")
        err = capsys.readouterr().err
        assert isinstance(result.error_in_exec, InspectorError)  # still an error: notebooks fail on it
        assert err.count("\n") == 1 and err.startswith("InspectorError: unknown sample 'nope'")
        assert "Traceback" not in err
        result = shell.run_cell("1 / 0")  # other errors keep IPython's usual traceback
        assert isinstance(result.error_in_exec, ZeroDivisionError)
    finally:
        InteractiveShell.clear_instance()
    assert install_error_display() is False  # no shell: nothing to install


@pytest.mark.requires_tosa
def test_the_where_does_the_error_enter_panel():
    app = FoldInspector("sample:stateful_wide_scale", stage="tfa", variants=("off", "upstream"), steps=3)
    app.run_attribution(wait=True)
    assert app.last_error is None and app.attr_progress.bar_style == "success"
    assert "Where the error enters" in app.attr_table.value and "<table" in app.attr_table.value
    assert list(app.attr_variant.options) == ["off", "upstream"] and app.attr_variant.value == "upstream"
    assert "SQNR, float vs quantized (dB)" in app.attr_graph.value  # the coloured after-graph
    assert app.attr_node.value == app.attribution.variants[0].entry_points[0].node  # the first entry point
    assert "fi-attr-curve-img" in app.attr_curve.value
    app.attr_variant.value = "off"
    assert "coloured by SQNR of variant off" in app.attr_graph.value
    app.select_error_node("root:copy_")
    assert app.attr_node.value == "root:copy_"
    with pytest.raises(InspectorError, match="no node 'nope'"):
        app.select_error_node("nope")
    assert app.comparison is not None and not app.stale  # the reference table came with it
    app.toggle_marker(app.sites[0].id)
    assert "fi-stale" in app.attr_table.value
    app.pick_model("sample:conv_mul_scalar")
    assert app.attribution is None and app.attr_graph.value == ""


# ---------------------------------------------------------------- background jobs and the screen lock


def _ticking_compare(result, *, ticks=5, until=None):
    """A stand-in for ``Analysis.compare``: reports progress ``ticks`` times (or until ``until`` is set,
    and then on while it is cancelled), then returns ``result`` (or raises it, if it is an exception)."""
    calls = []

    def compare(self, variants, markers=(), steps=1, progress=None, **kwargs):
        calls.append(threading.current_thread())
        for i in range(ticks):
            progress(f"tick {i}", i / ticks)
            time.sleep(0.01)
        deadline = time.time() + 20
        while until is not None and not until.is_set() and time.time() < deadline:
            progress("waiting", 0.5)
            time.sleep(0.01)
        if isinstance(result, BaseException):
            raise result
        progress("done", 1.0)
        return result

    return compare, calls


@pytest.fixture(scope="module")
def one_comparison():
    """A real reference run of the stateful sample (policy upstream, 1 step), made once."""
    return inspector.analyze("sample:stateful_conv_mul", stage="tfa").compare(("upstream",), steps=1)


@pytest.mark.requires_tosa
def test_a_job_outcome_waits_for_the_main_thread_to_finish_its_change(monkeypatch, one_comparison):
    """Without a kernel the outcome is applied in the worker thread: it must not draw the results or
    the site table while the main thread is drawing the table (a marker toggle). The main thread stays
    in the table until the worker comes in (or 1 s has passed); the screen lock makes the worker wait."""
    app = FoldInspector("sample:stateful_conv_mul", stage="tfa", variants=("upstream",), steps=1)
    site = app.sites[0].id
    main, inside, worker_in = threading.current_thread(), threading.Event(), threading.Event()
    armed, active, overlaps, drawers = [False], [0], [], []
    count_lock = threading.Lock()

    def tracked(real):
        def drawing(*args, **kwargs):
            with count_lock:
                active[0] += 1
                if active[0] > 1:
                    overlaps.append(threading.current_thread().name)
            drawers.append(threading.current_thread())
            try:
                if threading.current_thread() is not main:
                    worker_in.set()
                elif armed[0]:
                    armed[0] = False
                    inside.set()  # the worker may apply now ...
                    worker_in.wait(1.0)  # ... and would be in here with us, were there no lock
                return real(*args, **kwargs)
            finally:
                with count_lock:
                    active[0] -= 1

        return drawing

    monkeypatch.setattr(inspector.present, "site_rows", tracked(inspector.present.site_rows))
    monkeypatch.setattr(inspector.present, "comparison_html", tracked(inspector.present.comparison_html))
    compare, _ = _ticking_compare(one_comparison, until=inside)
    monkeypatch.setattr(inspector.Analysis, "compare", compare)
    app.run_reference()
    assert app.running
    armed[0] = True
    app.toggle_marker(site)  # redraws the table on this thread while the job finishes
    deadline = time.time() + 30
    while app.running and time.time() < deadline:  # the worker applies its outcome itself
        time.sleep(0.01)
    app.wait(30)
    assert overlaps == [] and any(t is not main for t in drawers)  # the worker drew, but never alongside
    assert not app.running and app.last_error is None and app.progress_label.value == "done"
    assert app.comparison is one_comparison and app.markers == (site,) and app.stale
    (row,) = rows(app)
    decision, other = app.sites[0].decision, {"fold": "skip", "skip": "fold"}[app.sites[0].decision]
    assert row.children[2].value is True and f"fi-decision fi-{decision}" in row.children[1].value
    assert f"fi-site-{decision}" in row._dom_classes and f"fi-site-{other}" not in row._dom_classes
    assert "fi-stale" in app.results.value


class FakeKernelLoop:
    """Stands in for the kernel's IO loop: callbacks queue up until the main thread runs them."""

    def __init__(self):
        self.callbacks, self.lock = [], threading.Lock()

    def add_callback(self, fn):
        with self.lock:
            self.callbacks.append(fn)

    def run(self):
        with self.lock:
            callbacks, self.callbacks = self.callbacks, []
        for fn in callbacks:
            fn()
        return len(callbacks)


def _job_threads():
    return [t for t in threading.enumerate() if t.name.startswith("fold-inspector-")]


@pytest.mark.requires_tosa
def test_in_a_kernel_the_outcome_is_applied_on_the_main_thread(monkeypatch, one_comparison):
    import widgets._jobs

    loop = FakeKernelLoop()
    monkeypatch.setattr(widgets._jobs, "kernel_loop", lambda: loop)
    app = FoldInspector("sample:stateful_conv_mul", stage="tfa", variants=("upstream",), steps=1)
    compare, _ = _ticking_compare(one_comparison)
    monkeypatch.setattr(inspector.Analysis, "compare", compare)
    drawers = []
    real_rows = inspector.present.site_rows
    monkeypatch.setattr(inspector.present, "site_rows", lambda *a, **k: drawers.append(threading.current_thread())
                        or real_rows(*a, **k))
    app.run_reference()
    deadline = time.time() + 30
    while _job_threads() and time.time() < deadline:
        time.sleep(0.01)
    assert app.running and app.comparison is None and drawers == []  # computed, not yet on the screen
    assert app.progress.value == 0.0  # the worker wrote no widget either
    assert loop.run() >= 2  # progress reports, then the outcome, as the kernel would run them
    assert not app.running and app.comparison is one_comparison and drawers == [threading.current_thread()]
    assert app.progress_label.value == "done" and app.progress.value == 1.0 and not app.run_button.disabled
    # wait() on the main thread applies the outcome itself (the loop cannot run while a cell waits);
    # the progress reports still queued behind it change nothing.
    app.toggle_marker(app.sites[0].id)
    app.run_reference(wait=True)
    assert not app.running and not app.stale and app.progress_label.value == "done"
    loop.run()
    assert app.progress_label.value == "done" and app.progress.value == 1.0 and app.last_error is None


def test_a_job_can_be_cancelled_and_a_failing_job_leaves_a_working_widget(monkeypatch, stateful):
    app = stateful
    app.variant_picker.value = ("upstream",)
    never = threading.Event()
    compare, calls = _ticking_compare(object(), until=never)
    monkeypatch.setattr(inspector.Analysis, "compare", compare)
    assert app.cancel() is False  # nothing runs
    app.run_reference()
    deadline = time.time() + 10
    while not calls and time.time() < deadline:
        time.sleep(0.01)
    assert app.running and app.cancel() is True
    app.wait(30)
    assert not app.running and app.comparison is None and app.last_error is None
    assert app.progress_label.value == "cancelled" and app.progress.bar_style == "warning"
    assert not app.run_button.disabled and "no reference run yet" in app.results.value
    compare, _ = _ticking_compare(RuntimeError("the reference broke"))
    monkeypatch.setattr(inspector.Analysis, "compare", compare)
    app.attr_button.click()
    app.wait(30)
    assert app.last_error == "RuntimeError: the reference broke" and "<details>" in app.error.value
    assert app.attr_progress_label.value == "failed" and app.attr_progress.bar_style == "danger"
    assert not app.running and not app.attr_button.disabled and app.attribution is None
    app.rule_picker.value = "off"  # and it keeps working
    assert app.error.value == "" and app.sites[0].decision == "skip"


# ---------------------------------------------------------------- the widget's own source


def _private_names_of_ipywidgets() -> set[str]:
    made = [W.VBox(), W.HBox(), W.HTML(), W.Label(), W.Button(), W.Checkbox(), W.Dropdown(), W.Select(),
            W.SelectMultiple(), W.ToggleButtons(), W.FloatProgress(), W.BoundedIntText(), W.Text()]
    return {n for w in made for n in dir(w) if n.startswith("_") and not n.startswith("__")}


def _private_uses(sources: dict[str, str], theirs: set[str]) -> list[str]:
    """Private names the sources reach that are not their own (or that are ipywidgets' own): attribute
    reads and writes, getattr/setattr/hasattr/delattr with a literal name, and imports."""
    import ast

    trees = {name: ast.parse(text) for name, text in sources.items()}
    own = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id == "self":
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("_", "widgets")) or \
                    isinstance(node, ast.ImportFrom) and node.level > 0:
                own.update(a.asname or a.name for a in node.names)
    own -= theirs

    def private(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    found = []
    for file, tree in trees.items():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Attribute):
                names = [node.attr]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1 and \
                    isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                names = [node.args[1].value]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ipywidgets"):
                names = [a.name for a in node.names] + [p for p in node.module.split(".") if private(p)]
            found += [f"{file}:{node.lineno}: {n}" for n in names if private(n) and n not in own]
    return found


def test_the_widget_source_uses_no_private_ipywidgets_name():
    from conftest import ROOT

    theirs = _private_names_of_ipywidgets()
    assert {"_dom_classes", "_trait_values", "_property_lock"} <= theirs
    # the check can fail: each of these reaches into a widget
    for bad in ("row._dom_classes", "self._dom_classes.append('x')", "getattr(w, '_trait_values')",
                "from ipywidgets.widgets.widget import _remove_buffers", "w._someone_elses = 1"):
        assert _private_uses({"bad.py": bad}, theirs), bad
    sources = {p.name: p.read_text() for p in sorted((ROOT / "widgets").glob("*.py"))}
    assert "app.py" in sources and "_jobs.py" in sources
    assert _private_uses(sources, theirs) == []


# ---------------------------------------------------------------- a preview first, then TOSA


@pytest.mark.requires_tosa
def test_run_shows_the_simulation_first_and_never_waits_for_the_lowering(monkeypatch):
    """While the lowering is held back, *Run* already shows the simulation's numbers, marked as a
    preview; when TOSA ends its numbers replace them, with how far apart the two were."""
    from inspector._doors import tosa as _tosa

    inspector.clear_cache()
    app = FoldInspector("sample:stateful_conv_mul", stage="tfa", variants=("upstream",), steps=3, isolate=False)
    app.toggle_marker(app.sites[0].id)  # a toggle, then Run
    lowering, release = threading.Event(), threading.Event()
    real_lower = _tosa.lower

    def held_lower(*args, **kwargs):
        lowering.set()
        assert release.wait(60), "the test never released the lowering"
        return real_lower(*args, **kwargs)

    monkeypatch.setattr(_tosa, "lower", held_lower)
    app.run_button.click()
    assert lowering.wait(120), "the TOSA run never reached the lowering"
    # the lowering has not returned, and the first answer is on the screen
    assert app.running and app.comparison is not None and app.comparison.engine == "simulation"
    assert "preview (simulation)" in app.results.value and "fi-preview" in app.results.value
    assert "quantize/dequantize simulation" in app.results.value and app.gap_results.value == ""
    assert app.progress_label.value.startswith("TOSA: ")
    preview = app.comparison
    release.set()
    app.wait(120)
    assert not app.running and app.last_error is None and app.progress_label.value == "done"
    assert app.comparison.engine == "tosa" and "fi-preview" not in app.results.value
    assert "TOSA INT reference vs float" in app.results.value
    gap = app.engine_gap
    assert gap is not None and gap.engines == ("simulation", "tosa")
    assert len(gap.outputs) == 3  # one output, three steps
    # measured on this sample: 0.00 dB and 0 steps apart; a preview is held to 1 dB and 1 step
    assert gap.largest_db <= 1.0 and gap.largest_steps is not None and gap.largest_steps <= 1.0
    assert "the preview was simulation vs tosa: SQNR within" in app.gap_results.value
    assert preview.results[0].engine == "simulation" and app.comparison.results[0].engine == "tosa"


def test_advise_in_the_widget_asks_for_an_ethos_u_in_one_line():
    """On tosa-int (no cycles) Advise says what to pick, in one line, and the widget keeps working."""
    app = FoldInspector("sample:conv_mul_scalar")
    assert app.accelerator_picker.value == "tosa-int"
    app.advise_button.click()
    assert app.advice is None
    assert "pick an Ethos-U accelerator" in app.last_error and "\n" not in app.last_error
    app.toggle_marker(app.analysis.sites[0].id)  # still alive
    assert app.analysis.markers == (app.analysis.sites[0].id,)
