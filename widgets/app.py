"""``FoldInspector``: the interactive inspector, an ipywidgets app over the ``inspector`` core.

The widget is thin: every control calls one core function and shows what it returns, so the
screen never works out an answer of its own (scripts, the CLI and the report get the same answers
from the core). A failure in a callback is shown inside the widget, which keeps working.

Each panel is a class that owns its widgets: the header (``_header``), the model picker
(``_model_picker``), the site table (``_sites``), the graphs (``_graph``), the TOSA reference
(``_reference``), "Where does the error enter?" (``_attribution``), Model Explorer (``_explorer``)
and the session line (``_session``). ``FoldInspector`` holds what the screen shows (the analysis,
the selection, the last results), composes the panels and keeps the public methods. Long work
runs as the one ``BackgroundJob`` (``_jobs``); every change to the screen holds one lock.
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable

import ipywidgets as W

import inspector
from inspector import present
from inspector import Comparison, InspectorError, Session

from ._attribution import AttributionPanel
from ._journey import JourneyPanel
from ._common import describe
from ._explorer import ExplorerPanel
from ._graph import GraphPanel
from ._header import Header
from ._jobs import BackgroundJob, JobView
from ._model_picker import ModelPicker
from ._reference import ReferencePanel
from ._session import SessionPanel
from ._sites import SiteTable
from ._tradeoff import TradeoffPanel

# The share of the reference run's progress bar that its simulation preview takes (it does no lowering).
PREVIEW_SHARE = 0.2


def _rule_name(rule: Any) -> str:
    """The registered name of a rule given by name, as a ``Rule``, or as ``path/to/rules.py:NAME``."""
    if isinstance(rule, inspector.Rule):
        return inspector.rules.register(rule, replace=True).name
    if not isinstance(rule, str):
        raise InspectorError(f"a rule is a name ({', '.join(inspector.rules)}), an inspector.Rule or "
                             f"path/to/rules.py:NAME, got {present.quoted(rule)}")
    return inspector.rules.get(rule).name


def _rule_ref(name: str) -> str:
    """How a session names the rule ``name``: its file when it came from one (imported again when
    the session is opened, after asking), else its name."""
    rule = inspector.rules.get(name)
    return rule.origin or rule.name


def _check_choice(what: str, value: Any, choices: Iterable[str]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise InspectorError(f"unknown {what} {present.quoted(value)}; choose one of: {', '.join(choices)}")


def _on_screen(method: Callable) -> Callable:
    """Hold the screen lock while ``method`` changes what the widget shows (a job's outcome waits)."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._screen:
            return method(self, *args, **kwargs)

    return locked


class FoldInspector(W.VBox):
    """Pick a stage and rule, see every conv->mul site and why, toggle markers, run the TOSA reference.

    ``target`` is anything ``inspector.analyze`` takes (a sample name such as
    ``"sample:stateful_conv_mul"``, an ``nn.Module`` with ``example_inputs``, an
    ``ExportedProgram``, a ``.pt2`` path, ``"file.py:Class"``), or an existing
    ``inspector.Analysis`` (its stage, rule and markers are used). Display it as a cell's value. ``stage``
    defaults to where ``accelerator``'s flow folds (``tfa``; ``lowering`` for ``tosa-fp``); at ``tfa`` and
    ``lowering`` the sites are those of the accelerator picked in the reference panel.
    The methods mirror the controls, for scripts and tests; the panels' controls are attributes
    of the app too (``steps_input``, ``model_picker``, ``run_button``, ...). ``isolate`` (default on)
    runs the native work of reference, attribution and bits runs in worker processes.
    """

    def __init__(self, target: Any, example_inputs: Any = None, *, stage: str | None = None, rule: Any = "upstream",
                 markers: Iterable[str] = (), variants: Iterable[Any] = inspector.DEFAULT_VARIANTS, steps: int | None = None,
                 graph_view: str = "side by side", focus_selected: bool = True, rules: Iterable[Any] = (),
                 isolate: bool = True, accelerator: Any = present.TOSA_INT.name) -> None:
        super().__init__()
        self.add_class("fi-app")
        # The reference, attribution and bits runs do their native work (quantizer, lowering, the TOSA
        # reference model) in worker processes: a crash or an out-of-memory kill there is one line here,
        # and the kernel with everything in it lives on.
        self.isolate = bool(isolate)
        if self.isolate:
            inspector.start_workers()  # the workers' fork server warms up while the user looks at the graph
        if stage is not None:
            _check_choice("stage", stage, inspector.STAGES)
        for extra in ([rules] if isinstance(rules, (str, inspector.Rule)) else list(rules)):
            _rule_name(extra)  # registered: the pickers offer it (a rule file is imported: code you run)
        rule = _rule_name(rule)
        _check_choice("graph_view", graph_view, present.GRAPH_VIEWS)
        accelerator = (inspector.accelerators.register(accelerator, replace=True) if isinstance(
            accelerator, inspector.Accelerator) else inspector.accelerators.get(accelerator)).name
        variants = (variants,) if isinstance(variants, (str, inspector.Rule)) else tuple(variants)
        variants = tuple(_rule_name(v) for v in variants)
        if isinstance(target, os.PathLike):
            target = os.fspath(target)
        self._target_ref = target if isinstance(target, str) else None
        self._screen = threading.RLock()  # held by every change to what the screen shows
        self._job = BackgroundJob(self._screen, self._show_error)
        self.comparison: Comparison | None = None  # the last reference results (a preview while TOSA runs)
        self._engine_gap: tuple = (None, None)  # (TOSA comparison, how far its preview was from it)
        self.bits = None  # the last "is it the fold or the bits?" (inspector.Bits)
        self._comparison_for: tuple | None = None  # (stage, rule, markers) the results were computed for
        self.attribution = None  # the last attribution (inspector.Attribution)
        self._attribution_for: tuple | None = None
        self.journey = None  # the last journey (inspector.Journey)
        self.advice = None  # the last advice (inspector.Advice): which sites should fold
        self.selected: str | None = None  # the selected site id
        self.last_error: str | None = None

        if isinstance(target, inspector.Analysis):
            stage, rule = target.stage, target.rule.name
        self._build_panels(stage, rule, variants, graph_view, focus_selected, accelerator)
        if isinstance(target, inspector.Analysis):
            self.analysis = target
        else:
            self.analysis = inspector.analyze(target, example_inputs=example_inputs, stage=stage, rule=rule,
                                              markers=tuple(markers), accelerator=accelerator)
            self._header.set_stage_quietly(self.analysis.stage)
        self._picker.start(self.analysis, self._target_ref)
        self.steps_input.value = present.check_steps(steps) if steps is not None else _default_steps(self.analysis)
        self._refresh()

    # ------------------------------------------------------------------ layout

    def _build_panels(self, stage, rule, variants, graph_view, focus_selected,
                      accelerator=present.TOSA_INT.name) -> None:
        safely = self._safely
        self._picker = ModelPicker(self._target_ref, on_pick=self._on_model)
        self._header = Header(stage, rule, self._picker.model_picker, on_stage=self._on_stage,
                              on_rule=self._on_rule)
        self._sites = SiteTable(on_select=lambda site_id: safely(lambda: self.select_site(site_id)),
                                on_marker=self._on_marker)
        self._graphs = GraphPanel(graph_view, focus_selected, on_change=lambda _: safely(self._render_graph))
        self._reference = ReferencePanel(variants, on_run=lambda _: safely(self.run_reference),
                                         on_bits=lambda _: safely(self.run_bits), accelerator=accelerator)
        # another accelerator, memory mode or system config makes the shown results stale (they were lowered and
        # priced for the one picked before)
        for picker in (self._reference.accelerator_picker, self._reference.memory_mode_picker,
                       self._reference.system_config_picker):
            picker.observe(lambda _: safely(self._render_results), names="value")
        # at tfa and lowering the sites are the accelerator's flow's: its quantizer, its lowering
        self._reference.accelerator_picker.observe(lambda _: safely(self._follow_accelerator), names="value")
        self._attribution = AttributionPanel(on_run=lambda _: safely(self.run_attribution),
                                             on_variant=lambda _: safely(self._render_attribution),
                                             on_node=lambda _: safely(self._render_curve))
        self._tradeoff = TradeoffPanel(on_run=lambda _: safely(self.run_advice),
                                       on_point=lambda i: safely(lambda: self.apply_point(i)))
        self._explorer = ExplorerPanel(on_open=lambda _: safely(self.open_model_explorer))
        self._journey = JourneyPanel(on_run=lambda _: safely(self.run_journey),
                                     on_step=lambda _: safely(lambda: self._journey.render_step(self.journey)))
        self._session = SessionPanel(
            on_save=lambda _: safely(lambda: self.save_session(self.session_path.value)),
            on_load=lambda _: safely(lambda: self.open_session(self.session_path.value)),
            on_report=lambda _: safely(lambda: self.export_report(self._session.report_path(),
                                                                  format=self.report_format.value)))
        for panel in (self._picker, self._header, self._sites, self._graphs, self._reference, self._tradeoff,
                      self._attribution, self._journey, self._explorer, self._session):
            for name in panel.exposed:  # the controls stay reachable as app.steps_input, app.model_picker, ...
                setattr(self, name, getattr(panel, name))
        self.children = [self._header.view, self.sites_box, self._graphs.view, self._reference.view,
                         self._tradeoff.view, self._attribution.view, self._journey.view, self._explorer.view, self._session.view]

    # ------------------------------------------------------------------ the programmatic API

    @_on_screen
    def pick_model(self, name: str) -> None:
        """Switch to a sample (``"sample:NAME"``) or back to your own model (``"own"``)."""
        self.model_picker.value = name

    @property
    def sites(self) -> tuple:
        """The current sites (core ``Site`` records)."""
        return self.analysis.sites

    @_on_screen
    def select_site(self, site_id: str | None) -> None:
        """Select a site: its row is highlighted and the graphs focus on it."""
        if site_id is not None:
            self.analysis.site(site_id)  # raises a clear error for unknown ids
        self.selected = site_id
        self._render_sites()
        self._render_graph()

    @_on_screen
    def toggle_marker(self, site_id: str) -> None:
        """Mark or unmark a site's mul as carried state; re-decides at once (no re-export)."""
        self.analysis.site(site_id)
        self.analysis = self.analysis.toggle_marker(site_id)
        self._refresh()

    @_on_screen
    def set_markers(self, markers: Iterable[str]) -> None:
        self.analysis = self.analysis.with_markers(tuple(markers))
        self._refresh()

    @_on_screen
    def set_rule(self, rule: str) -> None:
        self.rule_picker.value = rule  # the observer re-decides

    @_on_screen
    def set_stage(self, stage: str) -> None:
        self.stage_picker.value = stage

    @property
    def markers(self) -> tuple[str, ...]:
        return self.analysis.markers

    @property
    def stale(self) -> bool:
        """The shown reference results were computed for other markers, rule, stage or accelerator."""
        return self.comparison is not None and (self._comparison_for != self._current_config()
                                                or self.comparison.accelerator.name != self._reference.accelerator)

    @property
    def engine_gap(self):
        """How far the preview (simulation) was from the TOSA results shown now (an ``EngineGap`` from
        ``Comparison.gap``), or None when the shown results did not replace a preview."""
        comparison, gap = self._engine_gap
        return gap if comparison is not None and comparison is self.comparison else None

    @property
    def running(self) -> bool:
        """A reference run or an attribution is going on in the background."""
        return self._job.running

    def run_reference(self, wait: bool = False) -> None:
        """Start a reference run in the background (a second call while running does nothing).

        It answers first, then exactly: the quantize/dequantize simulation's numbers (no lowering) are
        shown as soon as they exist, marked *preview (simulation)*; the TOSA reference run goes on and
        replaces them, with how far apart the two were (``engine_gap``). On an Ethos-U accelerator the cost
        (Vela's cycles, and each site's price in the site table) comes with the TOSA results."""
        accelerator = self._reference.accelerator

        def compute(analysis, variants, steps, config, progress):
            preview = None
            try:
                preview = analysis.compare(variants, markers=config[2], steps=steps, engine=present.SIMULATION,
                                           accelerator=accelerator,
                                           progress=lambda p, f: progress(f"preview: {p}", PREVIEW_SHARE * f))
            except InspectorError:
                pass  # no preview: the TOSA run below says what is wrong, or answers anyway
            if preview is not None:
                progress.show(lambda: show_preview(preview, config))
            exact = analysis.compare(variants, markers=config[2], steps=steps, isolate=self.isolate,
                                     accelerator=accelerator,
                                     progress=lambda p, f: progress(f"TOSA: {p}",
                                                                    PREVIEW_SHARE + (1 - PREVIEW_SHARE) * f))
            return preview, exact

        def show_preview(preview, config):
            # the results panel only: the site table shows where each site folded, which the TOSA run says
            self.comparison, self._comparison_for = preview, config
            self._render_results()

        def show(result, config):
            preview, comparison = result
            self.comparison, self._comparison_for = comparison, config
            self._engine_gap = (comparison, preview.gap(comparison) if preview is not None else None)
            self._render_results()
            self._render_sites()

        self._start(self._reference.job_view, "reference", compute, show, "a reference run is already going", wait)

    def run_attribution(self, wait: bool = False) -> None:
        """Find where the error enters, for the picked variants and steps, in the background."""
        accelerator = self._reference.accelerator

        def compute(analysis, variants, steps, config, progress):
            comparison = analysis.compare(variants, markers=config[2], steps=steps, accelerator=accelerator,
                                          progress=lambda p, f: progress(p, 0.6 * f), isolate=self.isolate)
            return comparison, inspector.attribution(comparison, progress=lambda p, f: progress(p, 0.6 + 0.4 * f),
                                                   isolate=self.isolate)

        def show(result, config):
            comparison, attribution = result
            self.comparison, self._comparison_for = comparison, config
            self.attribution, self._attribution_for = attribution, config
            self._attribution.pick(attribution)
            self._render_results()
            self._render_sites()
            self._render_attribution()

        self._start(self._attribution.job_view, "attribution", compute, show, "a run is already going", wait)

    def run_bits(self, wait: bool = False) -> None:
        """Is it the fold or the bits? From the rule picked above at the first quantization picked:
        what the fold off, 16-bit activations and each node kept in float recover, in the background."""
        accelerator = self._reference.accelerator

        def compute(analysis, variants, steps, config, progress):
            quantization = (self._reference.quantizations or ("a8w8",))[0]
            return inspector.bits(analysis.target, steps=steps, rule=analysis.rule.name, quantization=quantization,
                                  markers=config[2], progress=progress, isolate=self.isolate, accelerator=accelerator)

        def show(bits, config):
            self.bits = bits
            self._reference.render_bits(bits)

        self._start(self._reference.bits_view, "bits", compute, show, "a run is already going", wait)

    def run_advice(self, wait: bool = False) -> None:
        """Which sites should fold on the accelerator picked (an Ethos-U) within the budget, in the background:
        the frontier, the current decisions as a point, each point a click away from its markers."""
        accelerator, budget = self._reference.accelerator, self._tradeoff.budget
        if not inspector.accelerators.get(accelerator).costs:
            raise InspectorError(f"the advice prices the fold in cycles: pick an Ethos-U accelerator (not "
                                 f"{accelerator}) and Advise again")

        def compute(analysis, variants, steps, config, progress):
            return inspector.advise(analysis.target, accelerator=accelerator, budget_db=budget, steps=steps,
                                    progress=progress)

        def show(advice, config):
            self.advice = advice
            self._render_advice()

        self._start(self._tradeoff.job_view, "advice", compute, show, "a run is already going", wait)

    @_on_screen
    def apply_point(self, i: int) -> None:
        """Decide as point ``i`` of the advice does (fewest cycles first): state-aware with its markers."""
        point = self._tradeoff.point(i)
        if point.markers is None:
            raise InspectorError("no markers pick this set (a marker skips every mul that reaches it): keep it "
                                 "as a rule with advice.rule() and pick that rule")
        self.rule_picker.value = "state-aware"
        self.analysis = self.analysis.with_markers(tuple(point.markers))
        self._refresh()

    def _render_advice(self) -> None:
        # the advice's sets are the comparison flow's decisions, made at tfa: the current point is the current
        # rule and markers decided there (the stage shown may decide otherwise: edge sees the graph signature)
        analysis = self.analysis
        if analysis.stage != "tfa":
            analysis = inspector.analyze(analysis.target, stage="tfa", rule=analysis.rule, markers=analysis.markers)
        self._tradeoff.show(self.advice, tuple(s.id for s in analysis.sites if s.folded))

    def run_journey(self, wait: bool = False) -> None:
        """Follow the selected site (or the first) through the Arm pipeline under the rule picked in the
        journey panel, in the background."""
        rule = self._journey.journey_variant.value

        def compute(analysis, variants, steps, config, progress):
            site = self.selected or (analysis.sites[0].id if analysis.sites else None)
            progress("following the site", 0.1)
            # in the flow of the accelerator the sites are shown for; found where it folds (site ids hold across
            # stages), or at lowering when that is shown
            return inspector.journey(analysis.target, site=site, variant=rule, accelerator=analysis.accelerator,
                                     stage="lowering" if analysis.stage == "lowering" else None)

        def show(result, config):
            self.journey = result
            self._journey.show(result)
            self._journey.render_step(result)

        self._start(self._journey.job_view, "journey", compute, show, "a run is already going", wait)

    def _start(self, view: JobView, name: str, compute: Callable, show: Callable, busy: str, wait: bool) -> None:
        """Run ``compute`` on what the screen shows now, in the background; ``show`` its result when done."""
        with self._screen:
            variants = self._reference.variants()
            steps, analysis = self._reference.steps, self.analysis
            config = analysis.configuration
            started = self._job.start(view, lambda progress: compute(analysis, variants, steps, config, progress),
                                      lambda result: show(result, config), name=f"fold-inspector-{name}")
            if not started:
                self._session.say(busy)
                return
        if wait:
            self.wait()

    def cancel(self) -> bool:
        """Stop the running reference run or attribution at its next progress step; its results are
        not shown. False when nothing runs."""
        return self._job.cancel()

    def wait(self, timeout: float | None = None) -> None:
        """Block until the running reference run or attribution (if any) has finished and is shown."""
        self._job.wait(timeout)

    @_on_screen
    def select_error_node(self, node: str) -> None:
        """Show the per-step curve of ``node`` (an aligned node id of the last attribution)."""
        self._attribution.select_node(self.attribution, node)

    @_on_screen
    def session(self) -> Session:
        """What this screen shows, as a core ``inspector.Session`` record."""
        return Session(
            target=self._target_ref, stage=self.analysis.stage, rule=_rule_ref(self.analysis.rule.name),
            markers=tuple(self.analysis.markers), selected=self.selected,
            variants=tuple(_rule_ref(v) for v in self.variant_picker.value) or ("upstream",),
            quantizations=self._reference.quantizations or ("a8w8",), accelerator=self._reference.accelerator,
            steps=self._reference.steps,
            graph_view=self.graph_which.value, graph_scope=self.graph_scope.value,
            results=self.comparison, results_for=self._comparison_for if self.comparison is not None else None,
        )

    def save_session(self, path: str | Path) -> Path:
        """Write target reference, stage, rule, markers, selection, variants, steps and results to JSON."""
        path = self.session().save(path)
        note = "" if self._target_ref else " (the model was passed as an object: give target= to load_session)"
        self._session.say(f"saved {path.name}{note}")
        return path

    @classmethod
    def load_session(cls, path: str | Path, target: Any = None, example_inputs: Any = None, *,
                     trust: bool = False) -> FoldInspector:
        """Restore a saved session to the same screen (give ``target`` if it was an in-memory model).

        A session is data: one whose target or rules name a Python file (``model.py:Net``,
        ``rules.py:NAME``) is refused unless ``trust=True``, because building them runs the file's code
        (a ``target`` given here stands for the session's own, whose file is then not imported).
        """
        session = Session.read(path, trust=True)  # checked; nothing is imported yet
        needed = [f for f in session.code_files if target is None or f != (session.target or "").rpartition(":")[0]]
        if needed and not trust:
            raise InspectorError(session.untrusted_message(path, needed[0]))
        target = target if target is not None else session.target
        if target is None:
            raise InspectorError(f"{Path(path).name} was saved from an in-memory model: pass target= to load_session")
        app = cls(target, example_inputs, stage=session.stage, rule=session.rule, markers=session.markers,
                  variants=session.variants, steps=session.steps, graph_view=session.graph_view,
                  focus_selected=session.graph_scope == "focus", accelerator=session.accelerator)
        app.quantization_picker.value = session.quantizations
        app._apply_session(session)
        app._session.say(f"restored {Path(path).name}")
        return app

    @_on_screen
    def open_session(self, path: str | Path, *, trust: bool = False) -> None:
        """Load a session into this widget (the *Load session* button). A session that names a Python
        file asks first: the widget shows the file and a *Trust and load* button."""
        path = Path(path)
        if self.running:
            raise InspectorError("a reference run is going; load the session when it has finished")
        try:
            session = Session.read(path, trust=trust)
        except InspectorError as exc:
            if not trust and "trust=True" in str(exc):
                self._session.ask_trust(str(exc), lambda: self._safely(lambda: self.open_session(path, trust=True)))
                return
            raise
        self._session.clear_trust()
        if session.target is None:
            raise InspectorError(f"{path.name} was saved from an in-memory model; it cannot be opened here")
        analysis = inspector.analyze(session.target, stage=session.stage, rule=session.rule,
                                     markers=session.markers, accelerator=session.accelerator)
        for v in session.variants:
            _rule_name(v)  # a rule file the session names is imported now (the user trusted it)
        self._refresh_rules()
        self._switch_to(analysis, session.target)
        self._header.set_stage_quietly(session.stage)
        self._header.set_rule_quietly(analysis.rule.name)
        self.variant_picker.value = tuple(_rule_name(v) for v in session.variants)
        self.quantization_picker.value = session.quantizations
        self._reference.choose(session.accelerator)
        self.steps_input.value = session.steps
        self.graph_which.value = session.graph_view
        self.graph_scope.value = session.graph_scope
        self._apply_session(session)
        self._session.say(f"restored {path.name}")

    def _refresh_rules(self) -> None:
        """Offer every registered rule in the pickers (a session or a notebook may have added some)."""
        self._header.offer_rules()
        self._reference.offer_rules()

    @_on_screen
    def _apply_session(self, session: Session) -> None:
        if session.results is not None:
            self.comparison = session.results
            self._comparison_for = session.results_for
        if session.selected and session.selected in {s.id for s in self.analysis.sites}:
            self.selected = session.selected
        self._refresh()

    @_on_screen
    def export_report(self, path: str | Path, format: str = "html") -> Path:
        """Write the report (``html``: one self-contained page; ``md``: a reply for an issue thread;
        ``json``): sites, graphs and the reference results, the same as ``python -m inspector report``."""
        path = self.analysis.report(self.comparison, format=format, results_for=self._comparison_for, out=path)
        self._session.say(f"wrote {path.name}")
        return path

    @_on_screen
    def open_model_explorer(self, folder: str | Path | None = None, *, port: int | None = None,
                            timeout: float = 120.0) -> str:
        """Show the whole current graph in Model Explorer, embedded below (and as a link): writes the
        graph and overlays (with the measured error of the variant picked in "Where does the error
        enter?", when it ran) and starts a local Model Explorer server for them. Returns its URL."""
        errors = self._attribution.errors_of_picked(self.attribution, self._attribution_for, self._current_config())
        return self._explorer.open(self.analysis, errors, folder, port, timeout, self._session.say)

    def close_model_explorer(self) -> None:
        """Stop the Model Explorer server this widget started (if any)."""
        self._explorer.close()

    # ------------------------------------------------------------------ callbacks

    def _safely(self, fn) -> None:
        """Run a callback under the screen lock; show a failure inside the widget instead of killing the UI."""
        with self._screen:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - the UI must survive anything
                self._show_error(*describe(exc))
            else:
                self._show_error(None)

    def _show_error(self, message: str | None, details: str | None = None) -> None:
        self.last_error = message
        self._header.show_error(message, details)

    def _on_model(self, change) -> None:
        def go():
            value = change["new"]
            if value == "own":
                analysis = self._picker.own_analysis.with_rule(self.analysis.rule.name)
                if analysis.stage != self.analysis.stage:
                    analysis = analysis.with_stage(self.analysis.stage)
                self._target_ref = self._picker.own_ref
            else:
                analysis = inspector.analyze(value, stage=self.analysis.stage, rule=self.analysis.rule.name)
                self._target_ref = value
            self._show_model(analysis)
            self._refresh()

        self._safely(go)

    def _switch_to(self, analysis, target_ref: str | None) -> None:
        """Show ``analysis`` (of ``target_ref``), with the model picker on it; forget results and selection."""
        self._picker.show(analysis, target_ref)
        self._target_ref = target_ref
        self._show_model(analysis)

    def _show_model(self, analysis) -> None:
        """Another model: the selection and the last results no longer apply."""
        self.analysis = analysis
        self.selected = None
        self.comparison = self._comparison_for = None
        self.attribution = self._attribution_for = None
        self._attribution.forget()
        self.journey = None
        self._journey.forget()
        self.advice = None
        self._tradeoff.show(None, ())
        self.steps_input.value = _default_steps(analysis)  # another model: its own default

    def _on_stage(self, change) -> None:
        def go():
            try:
                self.analysis = self.analysis.with_stage(change["new"])
            except Exception:
                self._header.set_stage_quietly(change["old"])
                raise
            if self.selected and self.selected not in {s.id for s in self.analysis.sites}:
                self.selected = None
            self._refresh()

        self._safely(go)

    def _follow_accelerator(self) -> None:
        """Decide the stage shown again in the flow of the accelerator picked (``tfa`` and ``lowering`` only:
        ``aten`` and ``edge`` are every flow's)."""
        accelerator = self._reference.accelerator
        if self.analysis.stage in ("tfa", "lowering") and accelerator != self.analysis.accelerator.name:
            self.analysis = inspector.analyze(self.analysis.target, stage=self.analysis.stage,
                                              rule=self.analysis.rule, markers=self.analysis.markers,
                                              accelerator=accelerator)
            self._refresh()

    def _on_rule(self, change) -> None:
        def go():
            try:
                self.analysis = self.analysis.with_rule(change["new"])
            except Exception:
                self._header.set_rule_quietly(change["old"])
                raise
            self._refresh()

        self._safely(go)

    def _on_marker(self, site_id: str, change) -> None:
        if change["new"] == (site_id in self.analysis.markers):
            return
        self._safely(lambda: self.toggle_marker(site_id))

    # ------------------------------------------------------------------ rendering

    def _current_config(self) -> tuple:
        return self.analysis.configuration

    def _refresh(self) -> None:
        self._refresh_rules()
        self._header.show(self.analysis)
        self._render_sites()
        self._render_graph()
        self._render_results()
        if self.advice is not None:
            self._render_advice()
        self._attribution.render_table(self.attribution, self._attribution_for, self._current_config())

    def _render_sites(self) -> None:
        self._sites.render(self.analysis, self.comparison, self.selected)

    def _render_graph(self) -> None:
        self._graphs.render(self.analysis, self.selected)

    def _render_results(self) -> None:
        self._reference.render(self.comparison, self._comparison_for, self.stale, self.engine_gap)

    def _render_attribution(self) -> None:
        self._attribution.render(self.attribution, self._attribution_for, self.analysis)

    def _render_curve(self) -> None:
        self._attribution.render_curve(self.attribution)


def _default_steps(analysis) -> int:
    """The steps a reference run takes unless the user says: the core's one default (``present.STEPS_HELP``)."""
    return present.default_steps(analysis.target)
