"""fold-inspector core: find, decide, explain and compare every conv->mul fold site.

No UI here: ``widgets`` imports this package, never the reverse.
"""

from . import _quiet
from .analysis import WIDE_RANGE_RATIO, Analysis, ScaleSummary, Site, analyze
from .compare import Comparison, Metrics, QParams, SiteOutcome, Variant, VariantResult, compare
from .errors import ExplanationMismatchWarning, FoldPassCrash, InspectorError, quoted
from ._policies import POLICIES
from .reasons import Reason, ReasonCode, Risk, RiskCode
from .render import render, svg
from .session import GRAPH_SCOPES, GRAPH_VIEWS, Session, read_session, save_session
from ._limits import MAX_STEPS, check_steps
from ._stages import STAGES

__all__ = [
    "Analysis",
    "Comparison",
    "Metrics",
    "QParams",
    "SiteOutcome",
    "Variant",
    "VariantResult",
    "compare",
    "ExplanationMismatchWarning",
    "FoldPassCrash",
    "InspectorError",
    "POLICIES",
    "Reason",
    "ReasonCode",
    "Risk",
    "RiskCode",
    "GRAPH_SCOPES",
    "GRAPH_VIEWS",
    "MAX_STEPS",
    "STAGES",
    "Session",
    "ScaleSummary",
    "Site",
    "WIDE_RANGE_RATIO",
    "analyze",
    "check_steps",
    "quoted",
    "read_session",
    "save_session",
    "render",
    "svg",
]
__version__ = "0.1.0"

_quiet.install_warning_filters()
