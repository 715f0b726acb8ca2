"""fold-inspector core: find, decide, explain and compare every conv->mul fold site.

No UI here: ``widgets`` imports this package, never the reverse. Everything a
notebook, the CLI, a report or the widget uses is named in ``__all__``.
"""

from ._base import quiet as _quiet
from ._present import explorer
from ._targets import samples
from ._base.limits import MAX_INPUT_ELEMENTS, MAX_STEPS, check_steps
from ._rules.rules import (DEFAULT_VARIANTS, POLICIES, POLICY_HELP, Policy, Rule, RuleContext, Skip, StateGuard,
                           get_policy, load_rule, rule)
from ._rules.rules import register as register_policy, unregister as unregister_policy
from ._present.tables import (SiteRow, analysis_html, analysis_text, attribution_html, attribution_text, bits_html,
                              bits_text, comparison_html, comparison_text, site_rows, stale_html)
from ._decide.stages import STAGE_HELP, STAGES
from ._numbers.attribution import Attribution, NodeError, SiteError, VariantAttribution, attribute, attribution
from ._decide.analysis import WIDE_RANGE_RATIO, Analysis, ScaleSummary, Site
from ._decide.decide import analyze, analyze_graph
from ._numbers.compare import compare
from ._numbers.bits import Bits, BitsChange, bits
from ._numbers.quantization import (QUANTIZATION_HELP, QUANTIZATIONS, Quantization, get_quantization,
                                    register_quantization, unregister_quantization)
from ._sweep.sweep import (FORMATS as SWEEP_FORMATS, NUMBERS_STAGE, UNCHANGED_DB, ModelSpec, Sweep, SweepBar,
                           models_from, read_models_toml, sweep)
from ._numbers.results import Comparison, Metrics, NotDelegated, QParams, SiteOutcome, Variant, VariantResult
from ._base.cache import clear_all as clear_cache
from ._workers.pool import start_server as start_workers
from ._present.explorer import ExplorerFiles
from .errors import ExplanationMismatchWarning, FoldPassCrash, InspectorError, quoted
from ._sites.reasons import Reason, ReasonCode, Risk, RiskCode
from ._present.render import LEGEND, STYLES, Verdicts, render, render_pair, site_kind, svg
from ._present.report import figure_img, report_html
from ._front.repro import Reproducer, reproducer
from ._front.session import GRAPH_SCOPES, GRAPH_VIEWS, Session, read_session, save_session
from ._front.session import untrusted_message as session_trust_message
from ._journey.journey import journey
from ._journey.records import Journey

__all__ = [
    # analyze: sites, decisions, reasons
    "analyze", "analyze_graph", "Analysis", "Site", "ScaleSummary", "Reason", "ReasonCode", "Risk", "RiskCode", "WIDE_RANGE_RATIO",
    "STAGES", "STAGE_HELP", "POLICIES", "POLICY_HELP",
    # rules: one object each, in one registry
    "Policy", "Rule", "rule", "RuleContext", "Skip", "StateGuard", "get_policy", "load_rule", "register_policy",
    "unregister_policy",
    # compare: the TOSA INT reference
    "compare", "Comparison", "Variant", "VariantResult", "Metrics", "QParams", "SiteOutcome", "NotDelegated",
    "DEFAULT_VARIANTS", "MAX_STEPS", "MAX_INPUT_ELEMENTS", "check_steps", "clear_cache", "start_workers",
    # quantizations a variant runs under, and per-node overrides
    "Quantization", "QUANTIZATIONS", "QUANTIZATION_HELP", "get_quantization", "register_quantization",
    "unregister_quantization", "bits", "Bits", "BitsChange",
    # sweep: many models x rules x stages, one table
    "sweep", "Sweep", "SweepBar", "ModelSpec", "models_from", "read_models_toml", "SWEEP_FORMATS", "NUMBERS_STAGE",
    "UNCHANGED_DB",
    # attribution: where the error enters
    "attribute", "attribution", "Attribution", "VariantAttribution", "NodeError", "SiteError",
    # pictures, tables, reports
    "render", "render_pair", "Verdicts", "svg", "STYLES", "LEGEND", "site_kind", "SiteRow", "site_rows", "analysis_text",
    "analysis_html", "comparison_text", "comparison_html", "bits_text", "bits_html", "attribution_text", "attribution_html", "stale_html", "report_html", "figure_img",
    # triage; whole graphs in Model Explorer
    "reproducer", "Reproducer", "explorer", "ExplorerFiles",
    # sessions and samples
    "Session", "read_session", "save_session", "session_trust_message", "GRAPH_VIEWS", "GRAPH_SCOPES", "samples",
    # errors
    "InspectorError", "FoldPassCrash", "ExplanationMismatchWarning", "quoted",
    # a site's journey through the Arm pipeline
    "journey", "Journey",
]
from ._base.version import __version__  # noqa: F401

_quiet.install_warning_filters()
