"""``FoldInspector``: the interactive inspector, an ipywidgets app over the ``inspector`` core.

Thin on purpose: every control calls one core function and shows what it returns, so a script
gets the same answer as the screen. A failure in a callback is shown inside the widget, which keeps working.
"""

from __future__ import annotations

import html
import os
import threading
import traceback
from pathlib import Path
from typing import Any, Iterable

import ipywidgets as W

import inspector
from inspector import Comparison, InspectorError, Session

_esc = html.escape


def _check_choice(what: str, value: Any, choices: Iterable[str]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise InspectorError(f"unknown {what} {inspector.quoted(value)}; choose one of: {', '.join(choices)}")


class FoldInspector(W.VBox):
    """Pick a stage and policy, see every conv->mul site and why, toggle markers, run the TOSA reference.

    ``target`` is anything ``inspector.analyze`` takes (a sample name such as
    ``"sample:stateful_conv_mul"``, an ``nn.Module`` with ``example_inputs``, an
    ``ExportedProgram``, a ``.pt2`` path, ``"file.py:Class"``), or an existing
    ``inspector.Analysis`` (its stage, policy and markers are used). Display it as a cell's value.
    The methods mirror the controls, for scripts and tests.
    """

    def __init__(self, target: Any, example_inputs: Any = None, *, stage: str = "tfa", policy: str = "upstream",
                 markers: Iterable[str] = (), variants: Iterable[str] = inspector.DEFAULT_VARIANTS, steps: int | None = None,
                 graph_view: str = "side by side", focus_selected: bool = True) -> None:
        super().__init__()
        self.add_class("fi-app")
        _check_choice("stage", stage, inspector.STAGES)
        _check_choice("policy", policy, inspector.POLICIES)
        _check_choice("graph_view", graph_view, inspector.GRAPH_VIEWS)
        variants = (variants,) if isinstance(variants, str) else tuple(variants)
        for v in variants:
            _check_choice("variant", v, inspector.POLICIES)
        if isinstance(target, os.PathLike):
            target = os.fspath(target)
        self._target_ref = target if isinstance(target, str) else None
        self._own_analysis = None  # the user's own model (not a sample), kept while samples are browsed
        self._own_ref = self._target_ref  # how to name it in a session (None: an in-memory model)
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._busy = False
        self.comparison: Comparison | None = None  # the last reference results
        self._comparison_for: tuple | None = None  # (stage, policy, markers) the results were computed for
        self.selected: str | None = None  # the selected site id
        self.last_error: str | None = None

        if isinstance(target, inspector.Analysis):
            stage, policy = target.stage, target.policy
        self._build_controls(stage, policy, variants, graph_view, focus_selected)
        if isinstance(target, inspector.Analysis):
            self.analysis = target
        else:
            self.analysis = inspector.analyze(target, example_inputs, stage=stage, policy=policy,
                                              markers=tuple(markers))
        self._init_model_picker()
        is_recurrent = bool(self.analysis.target.recurrent) or any(s.state_path for s in self.analysis.sites)
        self.steps_input.value = inspector.check_steps(steps) if steps is not None else (10 if is_recurrent else 1)
        self._refresh()

    # ------------------------------------------------------------------ layout

    def _build_controls(self, stage, policy, variants, graph_view, focus_selected) -> None:
        self.title = W.HTML().add_class("fi-title")
        self.model_picker = W.Dropdown(description="model", layout=W.Layout(width="380px")).add_class("fi-model")
        self.stage_picker = W.Dropdown(options=list(inspector.STAGES), value=stage, description="stage",
                                       layout=W.Layout(width="180px")).add_class("fi-stage")
        self.policy_picker = W.Dropdown(options=list(inspector.POLICIES), value=policy, description="policy",
                                        layout=W.Layout(width="260px")).add_class("fi-policy")
        self.summary = W.HTML().add_class("fi-summary")
        self.error = W.HTML().add_class("fi-error")
        self.sites_box = W.VBox().add_class("fi-site-table")

        self.graph_which = W.ToggleButtons(options=["before", "after", "side by side"], value=graph_view,
                                           style={"button_width": "100px"}).add_class("fi-graph-which")
        self.graph_scope = W.ToggleButtons(options=["focus", "whole"], value="focus" if focus_selected else "whole",
                                           style={"button_width": "70px"}).add_class("fi-graph-scope")
        self.graph = W.HTML().add_class("fi-graph")

        self.variant_picker = W.SelectMultiple(options=list(inspector.POLICIES), value=tuple(variants),
                                               description="variants", rows=4).add_class("fi-variants")
        self.steps_input = W.BoundedIntText(value=1, min=1, max=inspector.MAX_STEPS, description="steps",
                                            layout=W.Layout(width="160px")).add_class("fi-steps")
        self.run_button = W.Button(description="Run TOSA INT reference", icon="play", button_style="primary",
                                   layout=W.Layout(width="220px")).add_class("fi-run")
        self.progress = W.FloatProgress(value=0.0, min=0.0, max=1.0, layout=W.Layout(width="300px")).add_class("fi-progress")
        self.progress_label = W.Label("").add_class("fi-progress-label")
        self.results = W.HTML("<i>no reference run yet</i>").add_class("fi-results")
        self.plots = W.HTML().add_class("fi-plots")

        self.attr_button = W.Button(description="Where does the error enter?", icon="search",
                                    layout=W.Layout(width="240px")).add_class("fi-attr-run")
        self.attr_progress = W.FloatProgress(value=0.0, min=0.0, max=1.0,
                                             layout=W.Layout(width="300px")).add_class("fi-attr-progress")
        self.attr_progress_label = W.Label("").add_class("fi-attr-progress-label")
        self.attr_variant = W.Dropdown(description="variant", layout=W.Layout(width="300px")).add_class("fi-attr-variant")
        self.attr_node = W.Select(description="node", rows=8, layout=W.Layout(width="380px")).add_class("fi-attr-node")
        self.attr_table = W.HTML("<i>not run yet: uses the variants and steps above</i>").add_class("fi-attr-table")
        self.attr_graph = W.HTML().add_class("fi-attr-graph")
        self.attr_curve = W.HTML().add_class("fi-attr-curve")
        self.attribution = None  # the last attribution (inspector.Attribution)
        self._attribution_for: tuple | None = None

        self.session_path = W.Text(value="fold-session.json", description="file",
                                   layout=W.Layout(width="320px")).add_class("fi-session-path")
        self.save_button = W.Button(description="Save session", icon="save").add_class("fi-save")
        self.load_button = W.Button(description="Load session", icon="folder-open").add_class("fi-load")
        self.trust_box = W.VBox().add_class("fi-trust-box")
        self.report_button = W.Button(description="Export report", icon="file").add_class("fi-report")
        self.report_format = W.Dropdown(options=[("HTML page", "html"), ("Markdown reply", "md"), ("JSON", "json")],
                                        value="html", layout=W.Layout(width="150px")).add_class("fi-report-format")
        self.status = W.Label("").add_class("fi-status")
        self.explorer_button = W.Button(description="Open in Model Explorer", icon="external-link",
                                        layout=W.Layout(width="220px")).add_class("fi-explorer")
        self.explorer_view = W.HTML().add_class("fi-explorer-view")
        self._explorer_process = None  # the Model Explorer server this widget started

        self.stage_picker.observe(self._on_stage, names="value")
        self.policy_picker.observe(self._on_policy, names="value")
        self.graph_which.observe(lambda _: self._safely(self._render_graph), names="value")
        self.graph_scope.observe(lambda _: self._safely(self._render_graph), names="value")
        self.run_button.on_click(lambda _: self._safely(self.run_reference))
        self.attr_button.on_click(lambda _: self._safely(self.run_attribution))
        self.attr_variant.observe(lambda _: self._safely(self._render_attribution), names="value")
        self.attr_node.observe(lambda _: self._safely(self._render_curve), names="value")
        self.save_button.on_click(lambda _: self._safely(lambda: self.save_session(self.session_path.value)))
        self.load_button.on_click(lambda _: self._safely(lambda: self.open_session(self.session_path.value)))
        self.explorer_button.on_click(lambda _: self._safely(self.open_model_explorer))
        self.report_button.on_click(lambda _: self._safely(
            lambda: self.export_report(self._report_path(), format=self.report_format.value)))

        header = W.VBox([self.title, W.HBox([self.model_picker, self.stage_picker, self.policy_picker]),
                         self.summary, self.error])
        graph_panel = W.VBox([W.HBox([self.graph_which, self.graph_scope]), self.graph]).add_class("fi-graph-panel")
        reference = W.VBox([
            W.HTML("<b>TOSA INT reference</b>"),
            W.HBox([self.variant_picker, W.VBox([self.steps_input, self.run_button])]),
            W.HBox([self.progress, self.progress_label]),
            self.results, self.plots,
        ]).add_class("fi-reference")
        attribution = W.VBox([
            W.HTML("<b>Where does the error enter?</b> <small>per-node error, float vs quantized, per variant "
                   "and step; pick a node for its curve</small>"),
            W.HBox([self.attr_button, self.attr_progress, self.attr_progress_label]),
            self.attr_table,
            W.HBox([self.attr_variant]), self.attr_graph,
            W.HBox([self.attr_node, self.attr_curve]),
        ]).add_class("fi-attribution-panel")
        session = W.VBox([
            W.HBox([self.session_path, self.save_button, self.load_button, self.report_button, self.report_format,
                    self.status]),
            self.trust_box,
        ]).add_class("fi-session")
        explorer = W.VBox([
            W.HBox([W.HTML("<b>Whole graph</b> <small>in Google's Model Explorer (the <code>explorer</code> extra): "
                           "every node, the fold decisions and state path as overlays</small>"), self.explorer_button]),
            self.explorer_view,
        ]).add_class("fi-explorer-panel")
        self.children = [header, self.sites_box, graph_panel, reference, attribution, explorer, session]

    def _init_model_picker(self) -> None:
        options = [(f"sample:{n}", f"sample:{n}") for n in inspector.samples.names()]
        current = self._target_ref if self._target_ref in dict(options).values() else None
        if current is None:
            self._own_analysis = self.analysis
            options.insert(0, (f"{self.analysis.name} (your model)", "own"))
        self.model_picker.options = options
        self.model_picker.value = current or "own"
        self.model_picker.observe(self._on_model, names="value")

    # ------------------------------------------------------------------ the programmatic API

    def pick_model(self, name: str) -> None:
        """Switch to a sample (``"sample:NAME"``) or back to your own model (``"own"``)."""
        self.model_picker.value = name

    def _on_model(self, change) -> None:
        def go():
            value = change["new"]
            if value == "own":
                analysis = self._own_analysis.with_policy(self.analysis.policy)
                if analysis.stage != self.analysis.stage:
                    analysis = analysis.with_stage(self.analysis.stage)
                self._target_ref = self._own_ref
            else:
                analysis = inspector.analyze(value, stage=self.analysis.stage, policy=self.analysis.policy)
                self._target_ref = value
            self.analysis = analysis
            self.selected = None
            self.comparison = self._comparison_for = None
            self._forget_attribution()
            self._refresh()

        self._safely(go)

    def _switch_to(self, analysis, target_ref: str | None) -> None:
        """Show ``analysis`` (of ``target_ref``), with the model picker on it; forget results and selection."""
        samples = {v for _, v in self.model_picker.options if v != "own"}
        if target_ref not in samples:
            self._own_analysis, self._own_ref = analysis, target_ref
            options = [o for o in self.model_picker.options if o[1] != "own"]
            self.model_picker.options = [(f"{analysis.name} (your model)", "own"), *options]
        self._set_quietly(self.model_picker, target_ref if target_ref in samples else "own", self._on_model)
        self._target_ref = target_ref
        self.analysis = analysis
        self.selected = None
        self.comparison = self._comparison_for = None
        self._forget_attribution()

    @staticmethod
    def _set_quietly(control, value, observer) -> None:
        """Set a control's value without running its observer (the caller already did the work)."""
        control.unobserve(observer, names="value")
        try:
            control.value = value
        finally:
            control.observe(observer, names="value")

    @property
    def sites(self) -> tuple:
        """The current sites (core ``Site`` records)."""
        return self.analysis.sites

    def select_site(self, site_id: str | None) -> None:
        """Select a site: its row is highlighted and the graphs focus on it."""
        if site_id is not None:
            self.analysis.site(site_id)  # raises a clear error for unknown ids
        self.selected = site_id
        self._render_sites()
        self._render_graph()

    def toggle_marker(self, site_id: str) -> None:
        """Mark or unmark a site's mul as carried state; re-decides at once (no re-export)."""
        self.analysis.site(site_id)
        self.analysis = self.analysis.toggle_marker(site_id)
        self._refresh()

    def set_markers(self, markers: Iterable[str]) -> None:
        self.analysis = self.analysis.with_markers(tuple(markers))
        self._refresh()

    def set_policy(self, policy: str) -> None:
        self.policy_picker.value = policy  # the observer re-decides

    def set_stage(self, stage: str) -> None:
        self.stage_picker.value = stage

    @property
    def markers(self) -> tuple[str, ...]:
        return self.analysis.markers

    @property
    def stale(self) -> bool:
        """The shown reference results were computed for other markers, policy or stage."""
        return self.comparison is not None and self._comparison_for != self._current_config()

    @property
    def running(self) -> bool:
        return self._busy

    def run_reference(self, wait: bool = False) -> None:
        """Start a reference run in the background (a second call while running does nothing)."""
        variants = self._variants()
        with self._lock:
            if self._busy:
                self.status.value = "a reference run is already going"
                return
            self._busy = True
        steps = int(self.steps_input.value)
        config = self._current_config()
        self.run_button.disabled = True
        self.progress.value = 0.0
        self.progress.bar_style = ""
        self.progress_label.value = "starting"
        self._worker = threading.Thread(target=self._run, args=(variants, steps, config), daemon=True,
                                        name="fold-inspector-reference")
        self._worker.start()
        if wait:
            self.wait()

    def run_attribution(self, wait: bool = False) -> None:
        """Find where the error enters, for the picked variants and steps, in the background."""
        variants = self._variants()
        with self._lock:
            if self._busy:
                self.status.value = "a run is already going"
                return
            self._busy = True
        steps = int(self.steps_input.value)
        config = self._current_config()
        self.attr_button.disabled = True
        self.attr_progress.value = 0.0
        self.attr_progress.bar_style = ""
        self.attr_progress_label.value = "starting"
        self._worker = threading.Thread(target=self._run_attribution, args=(variants, steps, config), daemon=True,
                                        name="fold-inspector-attribution")
        self._worker.start()
        if wait:
            self.wait()

    def _run_attribution(self, variants, steps, config) -> None:
        def progress(phase: str, fraction: float) -> None:
            self.attr_progress.value = max(0.0, min(1.0, fraction))
            self.attr_progress_label.value = phase

        try:
            comparison = self.analysis.compare(variants, markers=config[2], steps=steps,
                                               progress=lambda p, f: progress(p, 0.6 * f))
            result = inspector.attribute(comparison, progress=lambda p, f: progress(p, 0.6 + 0.4 * f))
            self.comparison, self._comparison_for = comparison, config
            self.attribution, self._attribution_for = result, config
            self.attr_progress.bar_style = "success"
            self.attr_progress_label.value = "done"
            labels = [v.label for v in result.variants]
            self.attr_variant.options = labels
            self.attr_variant.value = next((v for v in labels if v != "off"), labels[0])
            self.attr_node.options = list(result.order)
            entries = [e.node for v in result.variants for e in v.entry_points]
            self.attr_node.value = entries[0] if entries else result.order[0]
            self._render_results()
            self._render_sites()
            self._render_attribution()
            self._show_error(None)
        except InspectorError as exc:
            self.attr_progress.bar_style = "danger"
            self.attr_progress_label.value = "failed"
            self._show_error(str(exc))
        except Exception as exc:  # noqa: BLE001
            self.attr_progress.bar_style = "danger"
            self.attr_progress_label.value = "failed"
            self._show_error(f"{type(exc).__name__}: {exc}", traceback.format_exc())
        finally:
            self.attr_button.disabled = False
            with self._lock:
                self._busy = False

    def _forget_attribution(self) -> None:
        """Another model: the last attribution no longer applies."""
        self.attribution = self._attribution_for = None
        self.attr_table.value = "<i>not run yet: uses the variants and steps above</i>"
        self.attr_graph.value = self.attr_curve.value = ""
        self.attr_node.options = []
        self.attr_variant.options = []

    def select_error_node(self, node: str) -> None:
        """Show the per-step curve of ``node`` (an aligned node id of the last attribution)."""
        if self.attribution is None:
            raise InspectorError("no attribution yet: press 'Where does the error enter?' first")
        if node not in self.attribution.order:
            raise InspectorError(f"no node {inspector.quoted(node)}; nodes: {', '.join(self.attribution.order[:12])}")
        self.attr_node.value = node

    def wait(self, timeout: float | None = None) -> None:
        """Block until the running reference run (if any) has finished."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)

    def session(self) -> Session:
        """What this screen shows, as a core ``inspector.Session`` record."""
        return Session(
            target=self._target_ref, stage=self.analysis.stage, policy=self.analysis.policy,
            markers=tuple(self.analysis.markers), selected=self.selected,
            variants=tuple(self.variant_picker.value) or ("upstream",), steps=int(self.steps_input.value),
            graph_view=self.graph_which.value, graph_scope=self.graph_scope.value,
            results=self.comparison, results_for=self._comparison_for if self.comparison is not None else None,
        )

    def save_session(self, path: str | Path) -> Path:
        """Write target reference, stage, policy, markers, selection, variants, steps and results to JSON."""
        path = inspector.save_session(self.session(), path)
        note = "" if self._target_ref else " (the model was passed as an object: give target= to load_session)"
        self.status.value = f"saved {path.name}{note}"
        return path

    @classmethod
    def load_session(cls, path: str | Path, target: Any = None, example_inputs: Any = None, *,
                     trust: bool = False) -> "FoldInspector":
        """Restore a saved session to the same screen (give ``target`` if it was an in-memory model).

        A session is data: one whose target names a Python file (``model.py:Net``) is refused
        unless ``trust=True``, because building that target runs the file's code.
        """
        session = inspector.read_session(path, trust=trust or target is not None)
        target = target if target is not None else session.target
        if target is None:
            raise InspectorError(f"{Path(path).name} was saved from an in-memory model: pass target= to load_session")
        app = cls(target, example_inputs, stage=session.stage, policy=session.policy, markers=session.markers,
                  variants=session.variants, steps=session.steps, graph_view=session.graph_view,
                  focus_selected=session.graph_scope == "focus")
        app._apply_session(session)
        app.status.value = f"restored {Path(path).name}"
        return app

    def open_session(self, path: str | Path, *, trust: bool = False) -> None:
        """Load a session into this widget (the *Load session* button). A session that names a Python
        file asks first: the widget shows the file and a *Trust and load* button."""
        path = Path(path)
        if self._busy:
            raise InspectorError("a reference run is going; load the session when it has finished")
        try:
            session = inspector.read_session(path, trust=trust)
        except InspectorError as exc:
            if not trust and "trust=True" in str(exc):
                self._ask_trust(path, str(exc))
                return
            raise
        self.trust_box.children = ()
        if session.target is None:
            raise InspectorError(f"{path.name} was saved from an in-memory model; it cannot be opened here")
        analysis = inspector.analyze(session.target, stage=session.stage, policy=session.policy,
                                     markers=session.markers)
        self._switch_to(analysis, session.target)
        self._set_quietly(self.stage_picker, session.stage, self._on_stage)
        self._set_quietly(self.policy_picker, session.policy, self._on_policy)
        self.variant_picker.value = tuple(session.variants)
        self.steps_input.value = session.steps
        self.graph_which.value = session.graph_view
        self.graph_scope.value = session.graph_scope
        self._apply_session(session)
        self.status.value = f"restored {path.name}"

    def _ask_trust(self, path: Path, message: str) -> None:
        trust = W.Button(description="Trust and load", button_style="warning", icon="unlock").add_class("fi-trust")
        cancel = W.Button(description="Cancel").add_class("fi-trust-cancel")
        trust.on_click(lambda _: self._safely(lambda: self.open_session(path, trust=True)))
        cancel.on_click(lambda _: setattr(self.trust_box, "children", ()))
        self.trust_box.children = (W.HTML(f"<div class='fi-trust-message'>&#9888; {_esc(message)}</div>"),
                                   W.HBox([trust, cancel]))

    def _apply_session(self, session: Session) -> None:
        if session.results is not None:
            self.comparison = session.results
            self._comparison_for = session.results_for
        if session.selected and session.selected in {s.id for s in self.analysis.sites}:
            self.selected = session.selected
        self._refresh()

    def export_report(self, path: str | Path, format: str = "html") -> Path:
        """Write the report (``html``: one self-contained page; ``md``: a reply for an issue thread;
        ``json``): sites, graphs and the reference results, the same as ``python -m inspector report``."""
        path = self.analysis.report(self.comparison, format=format, results_for=self._comparison_for, out=path)
        self.status.value = f"wrote {path.name}"
        return path

    def open_model_explorer(self, folder: str | Path | None = None, *, port: int | None = None,
                            timeout: float = 120.0) -> str:
        """Show the whole current graph in Model Explorer, embedded below (and as a link): writes the
        graph and overlays (with the measured error of the variant picked in "Where does the error
        enter?", when it ran) and starts a local Model Explorer server for them. Returns its URL."""
        import tempfile

        from inspector import explorer

        errors = None
        if self.attribution is not None and self._attribution_for == self._current_config() and self.attr_variant.value:
            errors = self.attribution.variant(self.attr_variant.value)
        folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="fold-inspector-explorer-"))
        files = self.analysis.to_model_explorer(folder, errors=errors)
        self.close_model_explorer()
        self.status.value = "starting Model Explorer..."
        self._explorer_process, port = explorer.start(files.folder, port=port, timeout=timeout)
        url = explorer.url(port, graph=files.graph, node_data=list(files.node_data))
        link = _esc(url)
        self.explorer_view.value = (
            f"<div class='fi-explorer-link'><a href='{link}' target='_blank' rel='noopener' "
            f"style='color:#1a73e8;text-decoration:underline'>open in a new tab</a> "
            f"<small>{files.nodes} nodes, {len(self.analysis.sites)} sites; files in {_esc(str(files.folder))}</small></div>"
            f"<iframe class='fi-explorer-frame' src='{link}' style='width:100%;height:640px;border:1px solid #ccc'>"
            "</iframe>")
        self.status.value = f"Model Explorer on port {port}"
        return url

    def close_model_explorer(self) -> None:
        """Stop the Model Explorer server this widget started (if any)."""
        process, self._explorer_process = self._explorer_process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except Exception:  # noqa: BLE001 - it must not outlive the widget
                process.kill()
        if process is not None:
            self.explorer_view.value = ""

    # ------------------------------------------------------------------ callbacks

    def _safely(self, fn) -> None:
        """Run a callback; show a failure inside the widget instead of killing the UI."""
        try:
            fn()
        except InspectorError as exc:
            self._show_error(str(exc))
        except Exception as exc:  # noqa: BLE001 - the UI must survive anything
            self._show_error(f"{type(exc).__name__}: {exc}", traceback.format_exc())
        else:
            self._show_error(None)

    def _show_error(self, message: str | None, details: str | None = None) -> None:
        self.last_error = message
        if message is None:
            self.error.value = ""
            return
        extra = f"<details><summary>details</summary><pre>{_esc(details)}</pre></details>" if details else ""
        self.error.value = f"<div class='fi-error-message' style='color:#b00020'>&#9888; {_esc(message)}</div>{extra}"

    def _on_stage(self, change) -> None:
        def go():
            try:
                self.analysis = self.analysis.with_stage(change["new"])
            except Exception:
                self._set_quietly(self.stage_picker, change["old"], self._on_stage)
                raise
            if self.selected and self.selected not in {s.id for s in self.analysis.sites}:
                self.selected = None
            self._refresh()

        self._safely(go)

    def _on_policy(self, change) -> None:
        def go():
            try:
                self.analysis = self.analysis.with_policy(change["new"])
            except Exception:
                self._set_quietly(self.policy_picker, change["old"], self._on_policy)
                raise
            self._refresh()

        self._safely(go)

    def _on_marker(self, site_id: str, change) -> None:
        if change["new"] == (site_id in self.analysis.markers):
            return
        self._safely(lambda: self.toggle_marker(site_id))

    def _run(self, variants, steps, config) -> None:
        try:
            def progress(stage: str, fraction: float) -> None:
                self.progress.value = max(0.0, min(1.0, fraction))
                self.progress_label.value = stage

            result = self.analysis.compare(variants, markers=config[2], steps=steps, progress=progress)
            self.comparison = result
            self._comparison_for = config
            self.progress.bar_style = "success"
            self.progress_label.value = "done"
            self._render_results()
            self._render_sites()
            self._show_error(None)
        except InspectorError as exc:
            self.progress.bar_style = "danger"
            self.progress_label.value = "failed"
            self._show_error(str(exc))
        except Exception as exc:  # noqa: BLE001
            self.progress.bar_style = "danger"
            self.progress_label.value = "failed"
            self._show_error(f"{type(exc).__name__}: {exc}", traceback.format_exc())
        finally:
            self.run_button.disabled = False
            with self._lock:
                self._busy = False

    # ------------------------------------------------------------------ rendering

    def _current_config(self) -> tuple:
        return self.analysis.configuration

    def _variants(self) -> list[str]:
        chosen = list(self.variant_picker.value)
        if not chosen:
            raise InspectorError("pick at least one variant to run")
        return chosen

    def _report_path(self) -> Path:
        base = Path(self.session_path.value or "fold-session.json")
        return base.with_suffix({"html": ".html", "md": ".md", "json": ".report.json"}[self.report_format.value])

    def _refresh(self) -> None:
        a = self.analysis
        self.title.value = f"<h3 style='margin:4px 0'>fold inspector: {_esc(a.name)}</h3>"
        self.summary.value = f"<span class='fi-summary-text'>{_esc(a.summary())}</span>" + "".join(
            f"<div><small>note: {_esc(n)}</small></div>" for n in a.notes)
        self._render_sites()
        self._render_graph()
        self._render_results()
        self._render_attribution_table()

    def _render_sites(self) -> None:
        """Show one row per site; rows are reused (updated in place) while the set of sites is the same."""
        ids = [s.id for s in self.analysis.sites]
        if ids != getattr(self, "_row_ids", None):
            self._rows = {sid: self._make_row(sid) for sid in ids}
            self._row_ids = ids
            header = W.HTML(
                "<div style='display:grid;grid-template-columns:260px 90px 1fr 120px;font-weight:600'>"
                "<span>site</span><span>decision</span><span>reasons / risks / scale</span><span>carried state</span></div>")
            empty = [W.HTML("<i>no conv-&gt;mul sites in this model</i>")] if not ids else []
            self.sites_box.children = [header, *self._rows.values(), *empty]
        marked = set(self.analysis.marker_ids)
        for r in inspector.site_rows(self.analysis, self.comparison):
            self._update_row(self._rows[r.site], r, r.site in marked)

    def _make_row(self, site_id: str) -> W.HBox:
        select = W.Button(description=site_id, tooltip=f"select {site_id}: focus the graphs on it",
                          layout=W.Layout(width="260px")).add_class("fi-site-select")
        select.on_click(lambda _: self._safely(lambda: self.select_site(site_id)))
        info = W.HTML(layout=W.Layout(width="100%"))
        marker = W.Checkbox(description="marked", indent=False, layout=W.Layout(width="120px")).add_class("fi-marker")
        marker.observe(lambda change: self._on_marker(site_id, change), names="value")
        return W.HBox([select, info, marker], layout=W.Layout(border_bottom="1px solid #ddd")).add_class("fi-site-row")

    def _update_row(self, row: W.HBox, r: inspector.SiteRow, marked: bool) -> None:
        select, info, marker = row.children
        select.button_style = "info" if r.site == self.selected else ""
        info.value = (f"<div style='display:grid;grid-template-columns:90px 1fr'>{r.decision_html()}"
                      f"{r.details_html()}</div>")
        marker.value = marked
        classes = {"fi-site-row", f"fi-site-{r.decision}"} | ({"fi-selected"} if r.site == self.selected else set())
        for c in set(row._dom_classes) - classes:
            row.remove_class(c)
        for c in classes - set(row._dom_classes):
            row.add_class(c)

    def _render_graph(self) -> None:
        focus = self.selected if self.graph_scope.value == "focus" else None
        which = self.graph_which.value
        try:
            if which == "side by side":
                digraph = self.analysis.render_pair(focus=focus)
            else:
                digraph = self.analysis.render(which, focus=focus)
            svg = inspector.svg(digraph)
        except InspectorError as exc:
            self.graph.value = f"<div class='fi-graph-error'>{_esc(str(exc))}</div>"
            return
        self.graph.value = f"<div style='overflow:auto;max-height:600px'>{svg}</div>"

    def _render_attribution_table(self) -> None:
        a = self.attribution
        if a is None:
            return
        banner = ""
        if self._attribution_for != self._current_config():
            banner = inspector.stale_html(self._attribution_for)
        self.attr_table.value = banner + inspector.attribution_html(a)

    def _render_attribution(self) -> None:
        a = self.attribution
        if a is None:
            return
        self._render_attribution_table()
        label = self.attr_variant.value
        if label is None:
            return
        variant = a.variant(label)
        policy = variant.policy if variant.policy in inspector.POLICIES else self.analysis.policy
        shown = self.analysis if self.analysis.policy == policy else self.analysis.with_policy(policy)
        try:
            digraph = shown.render("after", errors=variant)
            svg = inspector.svg(digraph)
        except InspectorError as exc:
            self.attr_graph.value = f"<div class='fi-graph-error'>{_esc(str(exc))}</div>"
        else:
            self.attr_graph.value = f"<div style='overflow:auto;max-height:600px'>{svg}</div>"
        self._render_curve()

    def _render_curve(self) -> None:
        if self.attribution is None or not self.attr_node.value:
            self.attr_curve.value = ""
            return
        self.attr_curve.value = inspector.figure_img(self.attribution.plot("steps", node=self.attr_node.value),
                                                     css_class="fi-plot fi-attr-curve-img")

    def _render_results(self) -> None:
        if self.comparison is None:
            self.results.value = "<i>no reference run yet</i>"
            self.plots.value = ""
            return
        banner = inspector.stale_html(self._comparison_for) if self.stale else ""
        self.results.value = banner + inspector.comparison_html(self.comparison)
        self.plots.value = "".join(inspector.figure_img(self.comparison.plot(kind)) for kind in ("drift", "channels"))

