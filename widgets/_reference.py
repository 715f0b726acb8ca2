"""The TOSA INT reference panel: variants, quantizations and steps, the run buttons and their
progress, the results, and "is it the fold or the bits?"."""

from __future__ import annotations

from typing import Callable

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

    exposed = ("variant_picker", "quantization_picker", "accelerator_picker", "steps_input", "run_button",
               "bits_button", "progress", "progress_label", "results", "gap_results", "plots", "bits_results")

    def __init__(self, variants: tuple[str, ...], *, on_run: Callable, on_bits: Callable,
                 quantizations: tuple[str, ...] = ("a8w8",), accelerator: str = "tosa-int") -> None:
        self.variant_picker = W.SelectMultiple(options=list(inspector.rules), value=tuple(variants),
                                               description="variants", rows=4,
                                               tooltip=rules_tooltip()).add_class("fi-variants")
        self.quantization_picker = W.SelectMultiple(
            options=list(inspector.quantizations), value=tuple(q for q in quantizations if q in inspector.quantizations),
            description="quantization", rows=4,
            tooltip=quantizations_tooltip(),
        ).add_class("fi-quantizations")
        self.accelerator_picker = W.Dropdown(
            options=list(inspector.accelerators), value=accelerator, description="accelerator",
            tooltip=accelerators_tooltip(), layout=W.Layout(width="300px")).add_class("fi-accelerator")
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
                    W.VBox([self.accelerator_picker, self.steps_input, self.run_button, self.bits_button])]),
            W.HBox([self.progress, self.progress_label]),
            self.results, self.gap_results, self.plots, self.bits_results,
        ]).add_class("fi-reference")

    @property
    def quantizations(self) -> tuple[str, ...]:
        return tuple(self.quantization_picker.value)

    @property
    def accelerator(self) -> str:
        """What the next run lowers every variant for (on an Ethos-U, Vela prices it)."""
        return self.accelerator_picker.value

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
        if comparison.engine != "tosa":
            banner += PREVIEW + (COST_LATER if comparison.accelerator != "tosa-int" else "")
        self.gap_results.value = present.gap_html(gap) if gap is not None else ""
        self.results.value = banner + present.comparison_html(comparison)
        self.plots.value = "".join(present.figure_img(comparison.plot(kind)) for kind in ("drift", "channels"))

    def offer_rules(self) -> None:
        """Offer every registered rule as a variant (keeping the ones chosen)."""
        if tuple(self.variant_picker.options) != tuple(inspector.rules):
            chosen = tuple(self.variant_picker.value)
            self.variant_picker.options = list(inspector.rules)
            self.variant_picker.value = tuple(v for v in chosen if v in inspector.rules)
        self.variant_picker.tooltip = rules_tooltip()
        if tuple(self.accelerator_picker.options) != tuple(inspector.accelerators):
            chosen = self.accelerator
            self.accelerator_picker.options = list(inspector.accelerators)
            self.accelerator_picker.value = chosen if chosen in inspector.accelerators else "tosa-int"
        if tuple(self.quantization_picker.options) != tuple(inspector.quantizations):
            chosen = self.quantizations
            self.quantization_picker.options = list(inspector.quantizations)
            self.quantization_picker.value = tuple(q for q in chosen if q in inspector.quantizations)
        self.quantization_picker.tooltip = quantizations_tooltip()


def accelerators_tooltip() -> str:
    """Every accelerator on a line of its own: name and what it is."""
    return "\n".join(f"{name}: {inspector.accelerators.describe(name)}" for name in inspector.accelerators)


def quantizations_tooltip() -> str:
    """Every quantization on a line of its own: name and what it is (a registered one too)."""
    return "\n".join(f"{name}: {inspector.quantizations.describe(name)}" for name in inspector.quantizations)
