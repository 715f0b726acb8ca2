"""fold-inspector core: find, decide, explain and compare every conv->mul fold site.

No UI here: ``widgets`` imports this package, never the reverse.
"""

from .analysis import WIDE_RANGE_RATIO, Analysis, ScaleSummary, Site, analyze
from .compare import Comparison, Metrics, QParams, SiteOutcome, Variant, VariantResult, compare
from .errors import ExplanationMismatchWarning, FoldPassCrash, InspectorError
from .policies import POLICIES
from .reasons import Reason, ReasonCode, Risk, RiskCode
from .render import render, svg
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
    "STAGES",
    "ScaleSummary",
    "Site",
    "WIDE_RANGE_RATIO",
    "analyze",
    "render",
    "svg",
]
__version__ = "0.1.0"
