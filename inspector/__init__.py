"""fold-inspector core: find, decide, explain and compare every conv->mul fold site.

No UI here: ``widgets`` imports this package, never the reverse. ``__all__`` is the user's verbs
and the records they return (at most 42 names); the records those reach (``ScaleSummary``,
``NotDelegated``, ``Quantization``, ``Metric``, ``ModelSpec``, ``models_from``,
``ExplanationMismatchWarning``) stay importable from here. What a screen needs to draw is the
public module ``inspector.present``.
"""

from ._base import quiet as _quiet
from .present import explorer
from ._targets.samples import samples
from ._rules.rules import DEFAULT_VARIANTS, Rule, RuleContext, Skip, rule, rules
from ._decide.stages import STAGES
from ._numbers.attribution import Attribution, attribution
from ._decide.analysis import Analysis, ScaleSummary as ScaleSummary, Site
from ._decide.decide import analyze, analyze_graph
from ._numbers.compare import compare
from ._numbers.bits import Bits, bits
from ._numbers.quantization import Quantization as Quantization, quantizations
from ._sweep.sweep import ModelSpec as ModelSpec, Sweep, models_from as models_from, sweep
from ._numbers.results import Comparison, NotDelegated as NotDelegated, Variant, VariantResult
from ._cost.accelerators import Accelerator, accelerators
from ._base.cache import clear_all as clear_cache
from ._workers.pool import start_server as start_workers
from ._base.errors import ExplanationMismatchWarning as ExplanationMismatchWarning, InspectorError
from ._sites.reasons import Reason
from ._front.repro import reproducer
from ._front.session import Session
from ._journey.journey import journey
from ._journey.records import Journey
from ._advise.advise import advise
from ._advise.records import Advice
from ._advise.verdict import verdict
from ._advise.widen import layers, widen
from ._advise.widen_records import Layers as Layers, Widening as Widening
from .present import widen_view as _widen_view  # noqa: F401 - registers how layers and widen read
from ._numbers.measures import Metric as Metric, metric, metrics
from ._targets.streams import Stream

__all__ = [
    # analyze: sites, decisions, reasons
    "analyze", "analyze_graph", "Analysis", "Site", "Reason", "STAGES",
    # rules: one object each, in one registry
    "Rule", "rule", "RuleContext", "Skip", "rules",
    # compare: the TOSA INT reference, under the quantizations of one registry
    "compare", "Comparison", "Variant", "VariantResult", "Stream", "DEFAULT_VARIANTS", "quantizations", "clear_cache",
    "start_workers",
    # what a comparison measures: one registry, a user's measurement registered like the built-ins
    "metric", "metrics",
    # what the fold buys: accelerators (one registry), each NPU variant's cost from Vela
    "accelerators", "Accelerator",
    # is it the fold or the bits? where the error enters
    "bits", "Bits", "attribution", "Attribution",
    # sweep: many models x rules x stages, one table
    "sweep", "Sweep",
    # triage; whole graphs in Model Explorer; sessions; samples
    "reproducer", "explorer", "Session", "samples",
    # errors
    "InspectorError",
    # a site's journey through the Arm pipeline
    "journey", "Journey",
    # which sites should fold: each site's price in cycles and dB, the best set within a budget
    "advise", "Advice",
    # the verdict on PR #21234: what its guard does and costs in the installed executorch, as a reply for the PR
    "verdict",
    # which layers need more bits: each layer's cycles beside the error entering there, the cheapest widening
    "layers", "widen",
]
from ._base.version import __version__ as __version__
from . import present as present  # what a screen draws with: inspector.present, with its own __all__

_quiet.install_warning_filters()
