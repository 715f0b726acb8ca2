"""The explainer: why the pass would skip each site, as small checks composed in the pass's order.

It re-derives the installed pass's rules from the graph, independently of the pass.
The decision shown to users always comes from running the real pass; the
explainer only supplies reasons, and any disagreement is reported as
``explanation-mismatch`` (see ``analysis.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import torch
from torch.fx import Node

from .._doors import executorch as _executorch
from . import graph as _graph
from .reasons import Reason, ReasonCode as R


@dataclass(kw_only=True)
class Context:
    """What every check may read: the graph as the pass receives it, and the rule deciding it."""

    stage: str
    rule: str  # the name of the rule deciding
    folds: bool  # the rule lets the pass run at all (False: 'off')
    program: Any  # ExportedProgram or None (tfa)
    reach: _graph.StateReach  # the rule's state guard's view (empty for upstream/off)
    predicted_fold: set  # muls the explainer already predicts folded (earlier in graph order)
    order: dict | None = None  # node -> position in the graph: nodes are named in graph order
    skips: dict = field(default_factory=dict)  # mul name -> (site id, Skip): what a user's guard keeps from the pass

    def in_order(self, nodes) -> list[Node]:
        """``nodes`` in graph order (a node's users are kept in the order they were added, which a
        copy of the graph does not keep)."""
        return sorted(nodes, key=self.order.__getitem__) if self.order is not None else list(nodes)

    @property
    def tfa(self) -> bool:
        return self.program is None


Check = Callable[[Context, _graph.Candidate], Reason | None]


def _names(nodes) -> str:
    return ", ".join(n.name for n in nodes)


def _effective_users(conv: Node, ctx: Context) -> list[Node]:
    """Users of ``conv`` as the pass sees them after the earlier folds of this run."""
    out: list[Node] = []
    for u in conv.users:
        if u in ctx.predicted_fold:
            out.extend(_effective_users(u, ctx))
        else:
            out.append(u)
    return out


# ---------------------------------------------------------------- the checks, in pass order


def rule_off(ctx, c):
    if not ctx.folds:
        return Reason.of(R.RULE_OFF, f"{c.mul.name} is left as it is under rule {ctx.rule!r}")


def disallowed_by_quantizer(ctx, c):
    if ctx.tfa and c.mul.meta.get(_executorch.disallow_tfa_key(), False):
        return Reason.of(R.DISALLOWED_BY_QUANTIZER, f"{c.mul.name} has meta[{_executorch.disallow_tfa_key()!r}] set")


def _state_check(kind: str, code: R) -> Check:
    def check(ctx, c):
        if ctx.reach.reaches(kind, c.mul):
            path = ctx.reach.path(kind, c.mul)
            where = ctx.reach.boundary.get(path[-1], path[-1].name)
            return Reason.of(code, f"{' -> '.join(n.name for n in path)}: {where}")

    check.__name__ = code.name.lower()
    return check


def skipped_by_rule(ctx, c):
    if c.mul.name in ctx.skips:
        _, skip = ctx.skips[c.mul.name]
        return Reason(code=f"rule:{skip.code}", message=f"the rule {ctx.rule!r} keeps this site from the pass",
                      detail=skip.detail)


def mul_op_not_matched(ctx, c):
    if c.mul.target not in _executorch.pass_mul_ops():
        return Reason.of(R.MUL_OP_NOT_MATCHED, f"{c.mul.name} is {_graph.op_name(c.mul)}, which the pass does not list")


def follows_unfolded_mul(ctx, c):
    if c.via is not None and c.via not in ctx.predicted_fold:
        return Reason.of(R.FOLLOWS_UNFOLDED_MUL, f"{c.mul.name} multiplies {c.via.name}, not {c.conv.name}")


def _dtype(node) -> str:
    value = _graph.value_meta(node)
    return str(value.dtype).replace("torch.", "") if value is not None else "unknown"


def quantized_graph(ctx, c):
    if not any(_graph.is_quantized_carrier(n) for n in c.path):
        return None
    detail = f"{c.route} ({_dtype(c.mul)} values)"
    scale = c.scale
    if isinstance(scale, Node) and _graph.is_quantized_carrier(scale):
        behind = _graph.constant_behind(scale, ctx.program)
        source = behind[1] if behind is not None else scale.args[0] if scale.args else None
        if isinstance(source, Node):
            what = f"the {_dtype(source)} constant" if behind is not None else f"{_dtype(source)} values of"
            detail += (f"; its other operand {scale.name} is a {_graph.op_name(scale).rsplit('.', 1)[0]} of "
                       f"{what} {source.name}")
    return Reason.of(R.QUANTIZED_GRAPH, detail)


def scale_behind_view(ctx, c):
    if any(_graph.is_view(n) for n in c.path):
        return Reason.of(R.SCALE_BEHIND_VIEW, c.route)


def conv_op_not_matched(ctx, c):
    if c.via is not None and c.via not in ctx.predicted_fold:
        return None
    conv = c.conv
    if conv.target not in _executorch.pass_conv_ops():
        return Reason.of(R.CONV_OP_NOT_MATCHED, f"{conv.name} is {_graph.op_name(conv)}, which the pass does not list")
    name = _graph.op_name(conv)
    if name == "aten.conv2d.default" and len(conv.args) < 3:
        return Reason.of(R.CONV_OP_NOT_MATCHED,
                         f"{conv.name} is aten.conv2d with {len(conv.args)} args (no bias arg); the pass needs at least 3")
    if name != "aten.conv2d.default" and len(conv.args) < 9:
        return Reason.of(R.CONV_OP_NOT_MATCHED, f"{conv.name} has {len(conv.args)} args; the pass needs 9")


def transposed_conv(ctx, c):
    if _graph.is_transposed(c.conv):
        return Reason.of(R.TRANSPOSED_CONV, f"{c.conv.name} is {_graph.op_name(c.conv)} (transposed)")


def conv_has_other_users(ctx, c):
    if (c.via is not None and c.via not in ctx.predicted_fold) or c.path:
        return None  # a site behind a view: its conv's user is the view, and the pass never gets this far
    users = _effective_users(c.conv, ctx)
    if len(users) != 1 or users[0] is not c.mul:
        return Reason.of(R.CONV_HAS_OTHER_USERS,
                         f"{c.conv.name} has {len(users)} users: {_names(ctx.in_order(users))}")


def _scale_value(ctx, c) -> tuple[torch.Tensor | None, Any]:
    """(constant tensor or None, meta value) of the scale operand."""
    s = c.scale
    if isinstance(s, bool) or not isinstance(s, (int, float, Node)):
        return None, None
    if isinstance(s, (int, float)):
        return torch.tensor(float(s)), None
    return _graph.constant_tensor(s, ctx.program), _graph.value_meta(s)


def scale_not_constant(ctx, c):
    if (isinstance(c.scale, (int, float)) and not isinstance(c.scale, bool)) or c.path:
        return None
    if not isinstance(c.scale, Node):
        return Reason.of(R.SCALE_NOT_CONSTANT, f"{c.mul.name}'s scale is {c.scale!r}")
    if _scale_value(ctx, c)[0] is None:
        what = c.scale.op if c.scale.op != "call_function" else _graph.op_name(c.scale)
        return Reason.of(R.SCALE_NOT_CONSTANT, f"{c.scale.name} ({what}) is computed at run time")


def scale_not_float(ctx, c):
    if c.path:
        return None  # the scale of a site behind a view multiplies the viewed shape: the pass never reads it
    tensor, meta = _scale_value(ctx, c)
    value = tensor if tensor is not None else meta
    if value is not None and not value.dtype.is_floating_point:
        return Reason.of(R.SCALE_NOT_FLOAT,
                         f"{getattr(c.scale, 'name', c.scale)} has dtype {str(value.dtype).replace('torch.', '')}")


def channel_broadcast(conv: Node, shape: tuple[int, ...]) -> str | None:
    """None if a scale of ``shape`` is a scalar or per-output-channel for ``conv``, else why not."""
    out = _graph.value_meta(conv)
    if out is None or len(out.shape) < 2:
        return f"{conv.name} has no output shape to match"
    out_shape = tuple(int(d) for d in out.shape)
    channels = out_shape[1]
    numel = 1
    for d in shape:
        numel *= int(d)
    if numel == 1:
        return None
    if numel != channels:
        return f"scale has {numel} elements, {conv.name} has {channels} output channels"
    if len(shape) > len(out_shape):
        return f"scale rank {len(shape)} exceeds output rank {len(out_shape)}"
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(int(d) for d in shape)
    for dim, size in enumerate(padded):
        if dim != 1 and size != 1:
            return f"scale shape {tuple(shape)} against output {out_shape} is not 1 except on dim 1"
    return None


def scale_not_channelwise(ctx, c):
    if c.path:
        return None
    tensor, meta = _scale_value(ctx, c)
    value = tensor if tensor is not None else meta
    if value is None:
        return None
    why = channel_broadcast(c.conv, tuple(value.shape))
    if why:
        return Reason.of(R.SCALE_NOT_CHANNELWISE, why)


def _weight_and_bias(c):
    args = c.conv.args
    return (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else None)


def weight_not_constant(ctx, c):
    weight, bias = _weight_and_bias(c)
    bad = []
    if _graph.constant_tensor(weight, ctx.program) is None:
        bad.append(f"weight {getattr(weight, 'name', weight)}")
    if bias is not None and _graph.constant_tensor(bias, ctx.program) is None:
        bad.append(f"bias {getattr(bias, 'name', bias)}")
    if bad:
        return Reason.of(R.WEIGHT_NOT_CONSTANT, f"{c.conv.name}: {' and '.join(bad)} not a constant")


def weight_not_float(ctx, c):
    weight, _ = _weight_and_bias(c)
    t = _graph.constant_tensor(weight, ctx.program)
    if t is not None and not t.dtype.is_floating_point:
        return Reason.of(R.WEIGHT_NOT_FLOAT, f"{weight.name} has dtype {str(t.dtype).replace('torch.', '')}")


def bias_not_float(ctx, c):
    _, bias = _weight_and_bias(c)
    t = _graph.constant_tensor(bias, ctx.program)
    if t is not None and not t.dtype.is_floating_point:
        return Reason.of(R.BIAS_NOT_FLOAT, f"{bias.name} has dtype {str(t.dtype).replace('torch.', '')}")


def weight_shared(ctx, c):
    # Only without an exported program does the pass overwrite the get_attr tensor in place.
    if not ctx.tfa:
        return None
    shared = []
    for node in _weight_and_bias(c):
        if isinstance(node, Node) and node.op == "get_attr" and set(node.users) != {c.conv}:
            shared.append(f"{node.name} is used by {_names(ctx.in_order(node.users))}")
    if shared:
        return Reason.of(R.WEIGHT_SHARED, "; ".join(shared))


CHECKS: tuple[Check, ...] = (
    rule_off,
    disallowed_by_quantizer,
    _state_check(_graph.MARKER, R.MARKED_CARRIED_STATE),
    _state_check(_graph.BUFFER, R.FEEDS_BUFFER_MUTATION),
    _state_check(_graph.INPUT, R.FEEDS_INPUT_MUTATION),
    skipped_by_rule,
    mul_op_not_matched,
    follows_unfolded_mul,
    quantized_graph,
    scale_behind_view,
    conv_op_not_matched,
    transposed_conv,
    conv_has_other_users,
    scale_not_constant,
    scale_not_float,
    scale_not_channelwise,
    weight_not_constant,
    weight_not_float,
    bias_not_float,
    weight_shared,
)


def explain(ctx: Context, cands: list[_graph.Candidate]) -> list[list[Reason]]:
    """All reasons that hold for each candidate, in pass order; predicts folds as it goes."""
    out = []
    for c in cands:
        reasons = [r for r in (check(ctx, c) for check in CHECKS) if r is not None]
        if not reasons:
            ctx.predicted_fold.add(c.mul)
        out.append(reasons)
    return out
