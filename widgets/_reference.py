"""The TOSA INT reference panel: variants, quantizations and steps, the run buttons and their
progress, the results, and "is it the fold or the bits?"."""

from __future__ import annotations

import html
from typing import Callable

import ipywidgets as W

import inspector
from inspector import InspectorError

from ._header import rules_tooltip
from ._jobs import JobView

NOT_RUN = "<i>no reference run yet</i>"
PREVIEW = ("<div class='fi-preview'><b>preview (simulation)</b>: numbers of the quantize/dequantize simulation "
           "(no lowering), not of the TOSA INT reference; a run replaces them with the reference's when it ends</div>")


def gap_html(gap) -> str:
    """How far the preview was from the TOSA numbers that replaced it: one line, then per output and step."""
    line = html.escape(f"the preview was {gap.text()}")
    rows = "".join(
        f"<tr><td>{html.escape(g.variant)}</td><td>{g.output}</td><td>{g.step + 1}</td><td>{g.db:.2f}</td>"
        f"<td>{'-' if g.max_steps is None else f'{g.max_steps:.2f}'}</td></tr>" for g in gap.outputs)
    return (f"<details class='fi-engine-gap'><summary>{line}</summary><table class='fi-table'><thead><tr>"
            "<th>variant</th><th>output</th><th>step</th><th>SQNR difference dB</th><th>max steps apart</th>"
            f"</tr></thead><tbody>{rows}</tbody></table></details>")


class ReferencePanel:
    """Owns the variant picker, the steps input, the run button, its progress and the results."""

    exposed = ("variant_picker", "quantization_picker", "steps_input", "run_button", "bits_button", "progress",
               "progress_label", "results", "gap_results", "plots", "bits_results")

    def __init__(self, variants: tuple[str, ...], *, on_run: Callable, on_bits: Callable,
                 quantizations: tuple[str, ...] = ("a8w8",)) -> None:
        self.variant_picker = W.SelectMultiple(options=list(inspector.POLICIES), value=tuple(variants),
                                               description="variants", rows=4,
                                               tooltip=rules_tooltip()).add_class("fi-variants")
        self.quantization_picker = W.SelectMultiple(
            options=list(inspector.QUANTIZATIONS), value=tuple(q for q in quantizations if q in inspector.QUANTIZATIONS),
            description="quantization", rows=4,
            tooltip="\n".join(f"{q.name}: {q.help}" for q in inspector.QUANTIZATIONS.values()),
        ).add_class("fi-quantizations")
        self.steps_input = W.BoundedIntText(value=1, min=1, max=inspector.MAX_STEPS, description="steps",
                                            layout=W.Layout(width="160px")).add_class("fi-steps")
        self.run_button = W.Button(description="Run TOSA INT reference", icon="play", button_style="primary",
                                   layout=W.Layout(width="220px")).add_class("fi-run")
        self.progress = W.FloatProgress(value=0.0, min=0.0, max=1.0,
                                        layout=W.Layout(width="300px")).add_class("fi-progress")
        self.progress_label = W.Label("").add_class("fi-progress-label")
        self.bits_button = W.Button(description="Is it the fold or the bits?", icon="balance-scale",
                                    tooltip="from the policy picked above at the first quantization picked: the "
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
                    W.VBox([self.steps_input, self.run_button, self.bits_button])]),
            W.HBox([self.progress, self.progress_label]),
            self.results, self.gap_results, self.plots, self.bits_results,
        ]).add_class("fi-reference")

    @property
    def quantizations(self) -> tuple[str, ...]:
        return tuple(self.quantization_picker.value)

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
        self.bits_results.value = inspector.figure_img(bits.plot()) + inspector.bits_html(bits)

    @property
    def steps(self) -> int:
        return int(self.steps_input.value)

    def render(self, comparison, comparison_for: tuple | None, stale: bool, gap=None) -> None:
        if comparison is None:
            self.results.value = NOT_RUN
            self.plots.value = self.gap_results.value = ""
            return
        banner = inspector.stale_html(comparison_for) if stale else ""
        if comparison.engine != "tosa":
            banner += PREVIEW
        self.gap_results.value = gap_html(gap) if gap is not None else ""
        self.results.value = banner + inspector.comparison_html(comparison)
        self.plots.value = "".join(inspector.figure_img(comparison.plot(kind)) for kind in ("drift", "channels"))

    def offer_rules(self) -> None:
        """Offer every registered rule as a variant (keeping the ones chosen)."""
        if tuple(self.variant_picker.options) != tuple(inspector.POLICIES):
            chosen = tuple(self.variant_picker.value)
            self.variant_picker.options = list(inspector.POLICIES)
            self.variant_picker.value = tuple(v for v in chosen if v in inspector.POLICIES)
        self.variant_picker.tooltip = rules_tooltip()
        if tuple(self.quantization_picker.options) != tuple(inspector.QUANTIZATIONS):
            chosen = self.quantizations
            self.quantization_picker.options = list(inspector.QUANTIZATIONS)
            self.quantization_picker.value = tuple(q for q in chosen if q in inspector.QUANTIZATIONS)
