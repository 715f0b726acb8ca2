"""The TOSA INT reference panel: variants, quantizations and steps, the run buttons and their
progress, the results, and "is it the fold or the bits?"."""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as W

import inspector
from inspector import InspectorError, present

from ._header import rules_tooltip
from ._jobs import JobView

NOT_RUN = "<i>no reference run yet</i>"
PREVIEW = ("<div class='fi-preview'><b>preview (simulation)</b>: numbers of the quantize/dequantize simulation "
           "(no lowering), not of the TOSA INT reference; a run replaces them with the reference's when it ends</div>")
COST_LATER = ("<div class='fi-cost-later'>the cost (Vela's cycles) comes with the TOSA run: the simulation does not "
              "lower the program</div>")


class ReferencePanel:
    """Owns the variant picker, the steps input, the run button, its progress and the results."""

    exposed = ("variant_picker", "quantization_picker", "accelerator_picker", "memory_mode_picker",
               "system_config_picker", "steps_input", "run_button", "bits_button", "progress", "progress_label",
               "results", "gap_results", "plots", "bits_results")

    def __init__(self, variants: tuple[str, ...], *, on_run: Callable, on_bits: Callable,
                 quantizations: tuple[str, ...] = ("a8w8",), accelerator: str = present.TOSA_INT.name) -> None:
        self.variant_picker = W.SelectMultiple(options=list(inspector.rules), value=tuple(variants),
                                               description="variants", rows=4,
                                               tooltip=rules_tooltip()).add_class("fi-variants")
        self.quantization_picker = W.SelectMultiple(
            options=list(inspector.quantizations), value=tuple(q for q in quantizations if q in inspector.quantizations),
            description="quantization", rows=4,
            tooltip=quantizations_tooltip(),
        ).add_class("fi-quantizations")
        self.accelerator_picker = W.Dropdown(
            options=list(inspector.accelerators), value=present.TOSA_INT.name, description="accelerator",
            tooltip=accelerators_tooltip(), layout=W.Layout(width="300px")).add_class("fi-accelerator")
        # An Ethos-U target's memory mode and system config (the ones Vela's config file offers it; "" is
        # ExecuTorch's default): the accelerator run is the target with them (ethos-u85-256:Dedicated_Sram).
        self.memory_mode_picker = W.Dropdown(description="memory mode", layout=W.Layout(width="300px"),
                                             tooltip=SETTINGS_TIP).add_class("fi-memory-mode")
        self.system_config_picker = W.Dropdown(description="system config", layout=W.Layout(width="300px"),
                                               tooltip=SETTINGS_TIP).add_class("fi-system-config")
        self.choose(accelerator)
        self.accelerator_picker.observe(lambda _: self._offer_settings(), names="value")
        self.steps_input = W.BoundedIntText(value=1, min=1, max=present.MAX_STEPS, description="steps",
                                            layout=W.Layout(width="160px")).add_class("fi-steps")
        self.run_button = W.Button(description="Run TOSA INT reference", icon="play", button_style="primary",
                                   layout=W.Layout(width="220px")).add_class("fi-run")
        self.progress = W.FloatProgress(value=0.0, min=0.0, max=1.0,
                                        layout=W.Layout(width="300px")).add_class("fi-progress")
        self.progress_label = W.Label("").add_class("fi-progress-label")
        self.bits_button = W.Button(description="Is it the fold or the bits?", icon="balance-scale",
                                    tooltip="from the rule picked above at the first quantization picked: the "
                                            "fold off, 16-bit activations, each site and entry point kept in float",
                                    layout=W.Layout(width="220px")).add_class("fi-bits-run")
        self.results = W.HTML(NOT_RUN).add_class("fi-results")
        self.plots = W.HTML().add_class("fi-plots")
        self.gap_results = W.HTML().add_class("fi-gap")  # how far the preview was from TOSA
        self.bits_results = W.HTML().add_class("fi-bits")
        self.job_view = JobView(self.run_button, self.progress, self.progress_label)
        self.bits_view = JobView(self.bits_button, self.progress, self.progress_label)
        self.run_button.on_click(on_run)
        self.bits_button.on_click(on_bits)
        self.view = W.VBox([
            W.HTML("<b>TOSA INT reference</b>"),
            W.HBox([self.variant_picker, self.quantization_picker,
                    W.VBox([self.accelerator_picker, self.memory_mode_picker, self.system_config_picker,
                            self.steps_input, self.run_button, self.bits_button])]),
            W.HBox([self.progress, self.progress_label]),
            self.results, self.gap_results, self.plots, self.bits_results,
        ]).add_class("fi-reference")

    @property
    def quantizations(self) -> tuple[str, ...]:
        return tuple(self.quantization_picker.value)

    @property
    def accelerator(self) -> str:
        """What the next run lowers every variant for (on an Ethos-U, Vela prices it): the target picked with the
        memory mode and system config picked, by its canonical name (``ethos-u85-256:Dedicated_Sram``)."""
        name, mode, system = (self.accelerator_picker.value, self.memory_mode_picker.value,
                              self.system_config_picker.value)
        if not (mode or system):
            return name
        if not mode:  # a system config alone: with the target's default memory mode
            mode = inspector.accelerators.get(name).vela().memory_mode
        written = ":".join([name, mode] + ([system] if system else []))
        try:
            return inspector.accelerators.get(written).name
        except InspectorError:
            return written  # a pair Vela does not take: the run says so, in one line listing what it takes

    def choose(self, accelerator: str) -> None:
        """Show ``accelerator`` (a registered name, or a target with settings) in the pickers."""
        chosen = inspector.accelerators.get(accelerator)
        settled = ":" in chosen.name  # ethos-u85-256:Dedicated_Sram: the target, then its settings
        self.accelerator_picker.value = chosen.npu if settled else chosen.name
        self._offer_settings()
        if settled:
            self.memory_mode_picker.value = chosen.memory_mode or ""
            self.system_config_picker.value = chosen.system_config or ""

    def _offer_settings(self) -> None:
        """The memory modes and system configs of the target picked (none for tosa-int or a registered
        configuration, which names its own); a change of target goes back to ExecuTorch's defaults."""
        chosen = inspector.accelerators.get(self.accelerator_picker.value)
        own = chosen.costs and chosen.npu == chosen.name  # an Ethos-U target as Vela names it
        modes, systems = chosen.settings() if own else ((), ())
        default = chosen.vela() if own else None
        for picker, names, of in ((self.memory_mode_picker, modes, "memory_mode"),
                                  (self.system_config_picker, systems, "system_config")):
            label = (f"default: {getattr(default, of)}" if default is not None
                     else "its own" if chosen.costs else "none (no NPU)")
            picker.options = [(label, "")] + [(n, n) for n in names]
            picker.value = ""
            picker.disabled = not own

    def variants(self) -> list[str]:
        """The picked rules at each picked quantization: ``upstream`` when only the default a8w8 is
        picked (the labels of every earlier run), ``upstream@a16w8`` otherwise."""
        chosen = list(self.variant_picker.value)
        if not chosen:
            raise InspectorError("pick at least one variant to run")
        quantizations = self.quantizations
        if not quantizations:
            raise InspectorError("pick at least one quantization to run")
        if quantizations == ("a8w8",):
            return chosen
        return [f"{v}@{q}" for q in quantizations for v in chosen]

    def render_bits(self, bits) -> None:
        if bits is None:
            self.bits_results.value = ""
            return
        self.bits_results.value = present.figure_img(bits.plot()) + present.bits_html(bits)

    @property
    def steps(self) -> int:
        return int(self.steps_input.value)

    def render(self, comparison, comparison_for: tuple | None, stale: bool, gap=None) -> None:
        if comparison is None:
            self.results.value = NOT_RUN
            self.plots.value = self.gap_results.value = ""
            return
        banner = present.stale_html(comparison_for, comparison.accelerator) if stale else ""
        if not comparison.engine.authority:  # a preview: its cost comes with the numbers that replace it
            banner += PREVIEW + (COST_LATER if comparison.accelerator.costs else "")
        self.gap_results.value = present.gap_html(gap) if gap is not None else ""
        self.results.value = banner + present.comparison_html(comparison) + present.failures_html(comparison)
        self.plots.value = "".join(present.figure_img(comparison.plot(kind)) for kind in ("drift", "channels"))

    def offer_rules(self) -> None:
        """Offer every registered rule as a variant (keeping the ones chosen)."""
        if tuple(self.variant_picker.options) != tuple(inspector.rules):
            chosen = tuple(self.variant_picker.value)
            self.variant_picker.options = list(inspector.rules)
            self.variant_picker.value = tuple(v for v in chosen if v in inspector.rules)
        self.variant_picker.tooltip = rules_tooltip()
        if tuple(self.accelerator_picker.options) != tuple(inspector.accelerators):
            chosen = self.accelerator_picker.value
            settings = (self.memory_mode_picker.value, self.system_config_picker.value)
            self.accelerator_picker.options = list(inspector.accelerators)
            self.accelerator_picker.value = chosen if chosen in inspector.accelerators else present.TOSA_INT.name
            if self.accelerator_picker.value == chosen:  # the same target keeps its settings
                self.memory_mode_picker.value, self.system_config_picker.value = settings
        if tuple(self.quantization_picker.options) != tuple(inspector.quantizations):
            chosen = self.quantizations
            self.quantization_picker.options = list(inspector.quantizations)
            self.quantization_picker.value = tuple(q for q in chosen if q in inspector.quantizations)
        self.quantization_picker.tooltip = quantizations_tooltip()


SETTINGS_TIP = ("an Ethos-U target's memory mode and system config, from Vela's config file (default: ExecuTorch's "
               "EthosUCompileSpec); the cycles change with them")


def accelerators_tooltip() -> str:
    """Every accelerator on a line of its own: name and what it is."""
    return "\n".join(f"{name}: {inspector.accelerators.describe(name)}" for name in inspector.accelerators)


def quantizations_tooltip() -> str:
    """Every quantization on a line of its own: name and what it is (a registered one too)."""
    return "\n".join(f"{name}: {inspector.quantizations.describe(name)}" for name in inspector.quantizations)
