"""Stable reason and risk codes: why a site is skipped, and what to watch when it folds.

The codes are a contract (docs/design.md, "Stable reason codes"): UI, JSON, reports and
tests key on them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .._base.codec import Record


class _Code(str, enum.Enum):
    """An enum whose members are ``(code, sentence)``: ``.value`` is the stable code."""

    def __new__(cls, code: str, sentence: str):
        obj = str.__new__(cls, code)
        obj._value_ = code
        obj.sentence = sentence
        return obj


class ReasonCode(_Code):
    """Why a site is skipped; ``.value`` is the stable code and ``.sentence`` says it in words."""

    RULE_OFF = ("rule-off", "the rule 'off' never folds")
    DISALLOWED_BY_QUANTIZER = ("disallowed-by-quantizer", "the quantizer excluded this node from transform-for-annotation")
    MARKED_CARRIED_STATE = ("marked-carried-state", "the mul output reaches a node marked carried_quant_state")
    FEEDS_BUFFER_MUTATION = ("feeds-buffer-mutation", "the mul output is written back into a mutable buffer")
    FEEDS_INPUT_MUTATION = ("feeds-input-mutation", "the mul output is written back into a mutated input")
    MUL_OP_NOT_MATCHED = ("mul-op-not-matched", "the mul is an op form the pass does not match (e.g. in-place mul_)")
    FOLLOWS_UNFOLDED_MUL = ("follows-unfolded-mul", "its operand is an earlier mul on the same conv that did not fold")
    QUANTIZED_GRAPH = ("quantized-graph", "the pass sees the quantized graph here: the mul multiplies integers "
                       "(RESCALE or quantize/dequantize outputs), not the conv's float output")
    SCALE_BEHIND_VIEW = ("scale-behind-view", "the mul reads the conv output through a view (view, reshape, permute, "
                         "squeeze, unsqueeze, flatten), and the pass only matches a mul on the conv itself")
    CONV_OP_NOT_MATCHED = ("conv-op-not-matched", "the convolution is not an op form the pass matches at this stage")
    TRANSPOSED_CONV = ("transposed-conv", "the convolution is transposed")
    CONV_HAS_OTHER_USERS = ("conv-has-other-users", "the conv output has users besides this mul")
    SCALE_NOT_CONSTANT = ("scale-not-constant", "the scale is not a constant")
    SCALE_NOT_FLOAT = ("scale-not-float", "the scale is not a floating-point value")
    SCALE_NOT_CHANNELWISE = ("scale-not-channelwise", "the scale does not broadcast over output channels only")
    WEIGHT_NOT_CONSTANT = ("weight-not-constant", "the conv weight or bias is not a constant")
    WEIGHT_NOT_FLOAT = ("weight-not-float", "the conv weight is not floating point")
    BIAS_NOT_FLOAT = ("bias-not-float", "the conv bias is not floating point")
    WEIGHT_SHARED = ("weight-shared", "the conv weight or bias is shared with other nodes, so it cannot be rewritten in place")
    EXPLANATION_MISMATCH = ("explanation-mismatch", "the inspector cannot explain what the installed pass did here")
    RULE_PASS_SKIPPED = ("rule-pass-skipped",
                         "the rule's own pass class left this site as it is, where the installed pass folds it")


class RiskCode(_Code):
    """A warning that does not change the decision."""

    WIDE_DYNAMIC_RANGE_SCALE = ("wide-dynamic-range-scale",
                                "the scale spans a wide range, so folding widens the conv's quantization range")
    FEEDS_CARRIED_STATE = ("feeds-carried-state",
                           "this fold scales a value that is carried to the next step; quantization error can compound")
    FEEDS_RECURRENT_OUTPUT = ("feeds-recurrent-output",
                              "the mul output reaches an output the model declares as recurrent state; mark it to protect it")
    FOLDED_WEIGHT_REUSED = ("folded-weight-reused",
                            "two folds scale one shared weight, and the pass reuses the first scaled constant for both")
    MARKER_IGNORED_BY_PR = ("marker-ignored-by-pr", "the carried-state marker is only in meta['custom']; executorch PR "
                            "#21234 reads the top-level key and would not see it")
    RULE_PASS_FOLDED = ("rule-pass-folded", "the rule's own pass class folded this site, where the installed pass leaves it")


@dataclass(frozen=True, kw_only=True)
class Reason(Record):
    """One reason a site is skipped."""

    code: str  # stable code, a ReasonCode value (or "rule:CODE" from a user's guard)
    message: str  # the human sentence for the code
    detail: str  # names the nodes involved, e.g. "conv2d has 2 users: mul, add"

    @classmethod
    def of(cls, code: ReasonCode, detail: str) -> Reason:
        return cls(code=code.value, message=code.sentence, detail=detail)


@dataclass(frozen=True, kw_only=True)
class Risk(Record):
    """One warning about a site; never changes the decision."""

    code: str  # stable code, a RiskCode value
    message: str  # the human sentence for the code
    detail: str  # the numbers or nodes behind it
    value: float | None = None  # the measured quantity, e.g. the scale ratio

    @classmethod
    def of(cls, code: RiskCode, detail: str, value: float | None = None) -> Risk:
        return cls(code=code.value, message=code.sentence, detail=detail, value=value)
