"""A minimal reproducer of one site: a standalone pytest file for the backend's test suite.

``reproducer(analysis, site_id)`` rebuilds, from the graph the pass receives at the analysis's
stage, a small module with the same convolution (type and hyperparameters, bias, input shape),
the same scale (its value when small, else its shape and dtype with seeded values), the same
other users of the conv, the chain of earlier muls, a shared weight, and the path to carried state
(a buffer written with ``copy_``, or a returned state). The test it writes runs
``FoldScalarMulIntoConvPass`` the way the inspector does at that stage, counts the muls before and
after, and for a fold checks float equivalence; its name says the decision. It imports only torch
and executorch.

The generator checks its own output before handing it over: it runs the minimal module through
the inspector and through the test's own code, and if the site is not decided the same way as in
the user's model (the decision hung on something a minimal module cannot express), it says so in
one line instead of writing a test that reproduces something else.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch.fx import Node

import torch

from .._sites import graph as _graph
from .._base.errors import InspectorError, quoted
from .._base.version import __version__
from .._decide.decide import analyze
from ..present.report import Redactor, model_file_of, reproduce_command
from .._base.files import write_text

_SMALL_SCALE = 64  # scale tensors up to this many elements are written out value by value
_REPRO_MODULE = "fold_repro"


@dataclass(frozen=True, kw_only=True)
class Reproducer:
    """A generated test and what it checks."""

    site: str  # the site id in the user's model
    stage: str
    decision: str  # fold | skip: what the installed pass decides, in the model and in the minimal module
    test_name: str  # test_<site>_folds | test_<site>_skipped
    muls_before: int  # muls in the minimal module's graph before the pass
    muls_after: int  # and after it
    source: str  # the pytest file
    notes: tuple[str, ...] = ()  # what the minimal module does not carry over (values replaced, ...)

    def write(self, path) -> Path:
        return write_text(path, self.source)


# ---------------------------------------------------------------- what the site is


@dataclass(kw_only=True)
class _Conv:
    dims: int
    transposed: bool
    in_channels: int
    out_channels: int
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: Any  # tuple, or "same" / "valid"
    dilation: tuple[int, ...]
    groups: int
    output_padding: tuple[int, ...]
    bias: bool
    weight_computed: bool  # the weight is computed in forward (not a constant)
    input_shape: tuple[int, ...]
    op: str  # the op the pass sees, e.g. "aten.conv2d.default"


@dataclass(kw_only=True)
class _Scale:
    expr: str  # Python expression in forward: "0.25", "self.scale", "s"
    init: list[str] = field(default_factory=list)  # __init__ lines
    input_shape: tuple[int, ...] | None = None  # a model input when the scale is computed at run time
    input_dtype: str = "float32"
    note: str = ""
    scale_first: bool = False  # written ``s * y``


@dataclass(kw_only=True)
class _Plan:
    site: Any
    stage: str
    conv: _Conv
    chain: list[_Scale]  # scales of the muls from the conv to the site, the site's last
    in_place: bool  # the site's mul is ``mul_``
    extra_users: int  # other users of the conv (or of the earlier mul the site follows)
    shared_conv: bool  # the conv's weight is read by another conv too
    state: str | None  # "buffer" or "returned"
    notes: list[str] = field(default_factory=list)
    view_shape: tuple[int, ...] | None = None  # the site's mul reads the conv output viewed to this shape


def _arguments(node: Node) -> dict[str, Any]:
    schema = node.target._schema
    values = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            values[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            values[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            values[arg.name] = arg.default_value
        else:
            values[arg.name] = None
    return values


def _shape(node) -> tuple[int, ...] | None:
    val = _graph.value_meta(node)
    if val is None:
        return None
    try:
        return tuple(int(d) for d in val.shape)
    except (TypeError, ValueError):  # a symbolic size: no concrete shape to rebuild
        return None


def _cannot(site_id: str, why: str) -> InspectorError:
    return InspectorError(f"site {site_id} cannot be reproduced by a minimal module: {why}")


def _tuple(value, dims: int) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * dims
    return tuple(int(v) for v in value)


def _conv(site, conv: Node, program) -> _Conv:
    name = _graph.op_name(conv)
    args = _arguments(conv)
    weight = args["weight"]
    w_shape = _shape(weight)
    if w_shape is None:
        tensor = _graph.constant_tensor(weight, program)
        w_shape = tuple(tensor.shape) if tensor is not None else None
    x_shape = _shape(args["input"])
    if w_shape is None or x_shape is None:
        raise _cannot(site.id, "the convolution's weight or input has no concrete shape in the graph")
    dims = len(w_shape) - 2
    transposed = bool(args.get("transposed")) or "conv_transpose" in name
    groups = int(args.get("groups") or 1)
    in_ch, out_ch = (w_shape[0], w_shape[1] * groups) if transposed else (w_shape[1] * groups, w_shape[0])
    padding = args.get("padding")
    padding = padding if isinstance(padding, str) else _tuple(padding if padding is not None else 0, dims)
    weight_const = _graph.constant_tensor(weight, program)
    if weight_const is not None and not weight_const.dtype.is_floating_point:
        raise _cannot(site.id, f"the conv weight is {str(weight_const.dtype).replace('torch.', '')}")
    bias = args.get("bias")
    if bias is not None:
        bias_const = _graph.constant_tensor(bias, program)
        if bias_const is not None and not bias_const.dtype.is_floating_point:
            raise _cannot(site.id, "the conv bias is not floating point")
    return _Conv(dims=dims, transposed=transposed, in_channels=in_ch, out_channels=out_ch, kernel=tuple(w_shape[2:]),
                 stride=_tuple(args.get("stride") or 1, dims), padding=padding,
                 dilation=_tuple(args.get("dilation") or 1, dims), groups=groups,
                 output_padding=_tuple(args.get("output_padding") or 0, dims), bias=bias is not None,
                 weight_computed=weight_const is None, input_shape=x_shape, op=name)


def _scale(site, cand, program, index: int) -> _Scale:
    s = cand.scale
    name = "scale" if index == 0 else f"scale_{index}"
    first = isinstance(cand.mul.args[0], (int, float)) or (
        isinstance(cand.mul.args[0], Node) and cand.mul.args[0] is s and len(cand.mul.args) > 1)
    if isinstance(s, bool) or not isinstance(s, (int, float, Node)):
        raise _cannot(site.id, f"its scale is {quoted(s)}")
    if isinstance(s, (int, float)):
        return _Scale(expr=repr(s), scale_first=first)
    tensor = _graph.constant_tensor(s, program)
    if tensor is None:
        shape = _shape(s)
        meta = _graph.value_meta(s)
        if shape is None or meta is None:
            raise _cannot(site.id, "its scale is computed at run time from values with no concrete shape")
        dtype = str(meta.dtype).replace("torch.", "")
        return _Scale(expr=name, input_shape=shape, input_dtype=dtype, scale_first=first,
                      note=f"the scale is computed at run time in the model; here it is a model input {name} "
                           f"of the same shape {list(shape)} and dtype {dtype}")
    tensor = tensor.detach().cpu()
    dtype = str(tensor.dtype).replace("torch.", "")
    shape = list(tensor.shape)
    if tensor.numel() <= _SMALL_SCALE:
        values = tensor.reshape(-1).tolist()
        literal = f"torch.tensor({values!r}, dtype=torch.{dtype}).reshape({shape})"
        note = ""
    else:
        flat = tensor.reshape(-1).double()
        lo, hi = float(flat.min()), float(flat.max())
        literal = (f"torch.linspace({lo!r}, {hi!r}, {tensor.numel()}, dtype=torch.float64)"
                   f".to(torch.{dtype}).reshape({shape})")
        note = (f"the {tensor.numel()} scale values are replaced by evenly spaced values over the same range "
                f"[{lo:.4g}, {hi:.4g}], same shape and dtype (the decision does not depend on them)")
    return _Scale(expr=f"self.{name}", init=[f'self.register_buffer("{name}", {literal})'], note=note,
                  scale_first=first)


def _plan(analysis, site) -> _Plan:
    stage_graph = analysis.stage_graph
    gm, program = stage_graph.graph_module, stage_graph.program
    graph = gm.graph
    cands = _graph.candidates(graph)
    by_mul = {c.mul.name: c for c in cands}
    cand = by_mul.get(site.mul)
    if cand is None:
        raise _cannot(site.id, "its mul is not in the stage graph")
    chain = [cand]
    while chain[0].via is not None:
        chain.insert(0, by_mul[chain[0].via.name])
    # A site behind views is written as the conv output reshaped to what its mul reads (a view to the pass too).
    behind = [c for c in chain if c.path]
    view_shape = _shape(cand.path[-1]) if cand.path else None
    if behind and (behind != [cand] or not all(_graph.is_view(n) for n in cand.path) or view_shape is None):
        raise _cannot(site.id, f"a mul reads through {behind[0].route}, which a conv, views and muls alone would "
                               "not be")
    conv = _conv(site, cand.conv, program)
    scales = [_scale(site, c, program, i) for i, c in enumerate(chain)]
    # other users of what the site's mul reads (the conv, or the earlier mul it follows)
    operand = chain[-2].mul if len(chain) > 1 else cand.conv
    first = cand.path[0] if cand.path else cand.mul
    extra = len([u for u in operand.users if u is not first])
    if extra and cand.path:
        raise _cannot(site.id, f"the conv output it views ({cand.route}) has other users too")
    weight = _arguments(cand.conv)["weight"]
    shared = isinstance(weight, Node) and any(_graph.is_conv(u) and u is not cand.conv for u in weight.users)
    state = None
    if site.state_path:
        last = site.state_path[-1]
        node = next((n for n in graph.nodes if n.name == last), None)
        state = "buffer" if node is not None and (node.op == "output" or "copy" in _graph.op_name(node)) else None
    if state is None and any(r.code == "feeds-recurrent-output" for r in site.risks):
        state = "returned"
    notes = [s.note for s in scales if s.note]
    if conv.weight_computed:
        notes.append("the conv weight is computed in the model's forward; here it is `weight * 1.0`, computed too")
    return _Plan(site=site, stage=stage_graph.stage, conv=conv, chain=scales,
                 in_place="mul_" in _graph.op_name(cand.mul), extra_users=extra, shared_conv=shared, state=state,
                 notes=notes, view_shape=view_shape)


# ---------------------------------------------------------------- the test file


def _module_source(plan: _Plan) -> tuple[str, int]:
    """The ``Repro`` module's source and the line (1-based, in the file) of the site's mul."""
    c = plan.conv
    cls = f"nn.{'ConvTranspose' if c.transposed else 'Conv'}{c.dims}d"
    padding = repr(c.padding)
    args = (f"{c.in_channels}, {c.out_channels}, kernel_size={c.kernel}, stride={c.stride}, padding={padding}, "
            + (f"output_padding={c.output_padding}, " if c.transposed else "")
            + f"dilation={c.dilation}, groups={c.groups}, bias={c.bias}")
    init = [f"self.conv = {cls}({args})"]
    for s in plan.chain:
        init += s.init
    if plan.state == "buffer":
        init.append("self.register_buffer(\"state\", torch.zeros(STATE_SHAPE))")
    inputs = ["x"] + (["x2"] if plan.shared_conv else []) + [s.expr for s in plan.chain if s.input_shape is not None]
    body = []
    if c.weight_computed:
        fn = f"F.conv_transpose{c.dims}d" if c.transposed else f"F.conv{c.dims}d"
        kw = (f"stride={c.stride}, padding={padding}, " + (f"output_padding={c.output_padding}, " if c.transposed
                                                           else "") + f"dilation={c.dilation}, groups={c.groups}")
        if c.transposed:
            kw = (f"stride={c.stride}, padding={padding}, output_padding={c.output_padding}, groups={c.groups}, "
                  f"dilation={c.dilation}")
        body.append(f"y = {fn}(x, self.conv.weight * 1.0, self.conv.bias, {kw})  # the weight is computed")
    else:
        body.append("y = self.conv(x)")
    value = "y"
    site_line_index = None
    for i, s in enumerate(plan.chain):
        last = i == len(plan.chain) - 1
        if last and plan.view_shape is not None:
            body.append(f"y = y.reshape({list(plan.view_shape)})  # the site's mul reads a view of the conv output")
        if last and plan.extra_users:
            body.append(f"kept = {value}  # read again below: it has {plan.extra_users + 1} users")
            value = "kept"
        if last and plan.in_place:
            expr = f"{value}.clone().mul_({s.expr})"
        else:
            expr = f"{s.expr} * {value}" if s.scale_first else f"{value} * {s.expr}"
        if last:
            site_line_index = len(body)
            body.append(f"out = {expr}  # the site")
        else:
            body.append(f"y = {expr}")
        value = "out" if last else "y"
    for _ in range(plan.extra_users):
        body.append("out = out + kept  # another user of the value the site scales")
    if plan.shared_conv:
        body.append("other = self.conv(x2)  # the same conv (and weight) used again")
        body.append("out = out + other")
    if plan.state == "buffer":
        body.append("self.state.copy_(out)  # carried state: written back into a buffer")
    if plan.state == "returned":
        body.append("return out, out  # carried state: returned and fed back as the next call's input")
    else:
        body.append("return out")
    lines = ["class Repro(nn.Module):",
             f'    """The site {plan.site.id}, minimal: {c.op} then the mul."""', "",
             "    def __init__(self):", "        super().__init__()", "        torch.manual_seed(0)"]
    lines += [f"        {line}" for line in init]
    lines += ["", f"    def forward(self, {', '.join(inputs)}):"]
    first_body = len(lines)
    lines += [f"        {line}" for line in body]
    return "\n".join(lines), first_body + site_line_index + 1


_HEADER = '''"""Reproduces site {site} of {model} at stage {stage}: the installed FoldScalarMulIntoConvPass {verb} it.

Generated by fold-inspector {version}: {command}
{notes}It needs only torch and executorch: pytest {file}
"""

import copy
import re

import torch
import torch.nn.functional as F  # noqa: F401  (used when the conv weight is computed)
from torch import nn

from executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass import FoldScalarMulIntoConvPass
{edge_import}{state_line}

'''

_RUN = {
    "aten": '''def _run_pass(model, inputs):
    """The exported program, as the fold pass receives it at stage aten; the pass runs in place."""
    program = torch.export.export(model, inputs)
    before = _muls(program.graph_module)
    FoldScalarMulIntoConvPass(program)(program.graph_module)
    return program.module(), before, _muls(program.graph_module)
''',
    "edge": '''def _run_pass(model, inputs):
    """The edge program, as the fold pass receives it at stage edge; the pass runs in place."""
    program = to_edge(torch.export.export(model, inputs),
                      compile_config=EdgeCompileConfig(_check_ir_validity=False)).exported_program()
    before = _muls(program.graph_module)
    FoldScalarMulIntoConvPass(program)(program.graph_module)
    return program.module(), before, _muls(program.graph_module)
''',
    "tfa": '''def _run_pass(model, inputs):
    """The graph module with weights as get_attr, as the fold pass receives it before quantization
    annotation (tfa_pass=True); the pass runs in place."""
    graph_module = torch.export.export(model, inputs).module()
    before = _muls(graph_module)
    FoldScalarMulIntoConvPass(tfa_pass=True)(graph_module)
    return graph_module, before, _muls(graph_module)
''',
}

_TAIL = '''

def _muls(graph_module):
    """Mul nodes (aten and edge ops alike)."""
    return sum(1 for n in graph_module.graph.nodes if n.op == "call_function"
               and re.fullmatch(r"(aten\\.)?mul_?\\.\\w+", getattr(n.target, "__name__", "")))


def _inputs():
    generator = torch.Generator().manual_seed(0)
    return ({inputs},)


def {test_name}():
    model = Repro().eval()
    inputs = _inputs()
    expected = copy.deepcopy(model)(*inputs)
    module, before, after = _run_pass(model, inputs)
    assert (before, after) == ({before}, {after}), f"muls before and after the pass: {{before}}, {{after}}"
{float_check}'''

_FLOAT_CHECK = '''    # folding is exact in float
    torch.testing.assert_close(module(*inputs), expected, rtol=1e-4, atol=1e-4)
'''


def _input_expr(shape, dtype: str = "float32") -> str:
    if dtype.startswith("float"):
        return f"torch.rand({tuple(shape)}, generator=generator, dtype=torch.{dtype}) * 2 - 1"
    return f"torch.randint(1, 4, {tuple(shape)}, generator=generator, dtype=torch.{dtype})"


def _render(plan: _Plan, model: str, command: str, file: str, counts=(0, 0), decision: str = "fold") -> tuple[str, str]:
    module, _ = _module_source(plan)
    test_name = f"test_{re.sub(r'[^0-9a-zA-Z]+', '_', plan.site.id).strip('_').lower()}_" + (
        "folds" if decision == "fold" else "skipped")
    notes = "".join(f"Note: {n}.\n" for n in plan.notes)
    state_shape = _state_shape(plan)
    header = _HEADER.format(site=plan.site.id, model=model, stage=plan.stage,
                            verb="folds" if decision == "fold" else "does not fold", version=__version__,
                            command=command, notes=notes, file=file,
                            edge_import=("from executorch.exir import EdgeCompileConfig, to_edge\n"
                                         if plan.stage == "edge" else ""),
                            state_line=f"\nSTATE_SHAPE = {state_shape!r}\n" if state_shape else "")
    inputs = [_input_expr(plan.conv.input_shape)]
    if plan.shared_conv:
        inputs.append(_input_expr(plan.conv.input_shape))
    inputs += [_input_expr(s.input_shape, s.input_dtype) for s in plan.chain if s.input_shape is not None]
    source = (header + module + "\n\n\n" + _RUN[plan.stage] + _TAIL.format(
        inputs=", ".join(inputs), test_name=test_name, before=counts[0], after=counts[1],
        float_check=_FLOAT_CHECK if decision == "fold" else ""))
    return source, test_name


def _state_shape(plan: _Plan):
    if plan.state != "buffer":
        return None
    c = plan.conv
    x = c.input_shape
    spatial = []
    for i in range(c.dims):
        size, k, s, d = x[2 + i], c.kernel[i], c.stride[i], c.dilation[i]
        if c.transposed:
            p = c.padding[i] if isinstance(c.padding, tuple) else 0
            spatial.append((size - 1) * s - 2 * p + d * (k - 1) + c.output_padding[i] + 1)
        elif c.padding == "same":
            spatial.append(size)
        else:
            p = 0 if c.padding == "valid" else c.padding[i]
            spatial.append(math.floor((size + 2 * p - d * (k - 1) - 1) / s) + 1)
    return (x[0], c.out_channels, *spatial)


def _load_source(source: str, folder: Path):
    path = folder / f"{_REPRO_MODULE}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"_fold_inspector_{_REPRO_MODULE}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module, path


def reproducer(analysis, *, site_id: str, command: str | None = None, file: str = "test_repro.py") -> Reproducer:
    """A standalone pytest file reproducing ``site_id`` of ``analysis`` at its stage (see the module doc).

    Args:
        analysis: an ``Analysis`` at ``aten`` or ``tfa``.
        site_id: the site to reproduce (``Site.id``).
        command: the command the file says reproduces it; default: ``python -m inspector repro`` with the
            analysis's own target, stage and site.
        file: the file name the test is written for; default ``test_repro.py``.
    """

    site = analysis.site(site_id)
    if analysis.stage not in _RUN:
        raise InspectorError(f"a reproducer runs the pass alone on a minimal module at {', '.join(_RUN)}; at "
                             f"{analysis.stage} the pass receives what the whole flow made of the model: reproduce "
                             f"site {site_id} at tfa, where the INT flow folds")
    plan = _plan(analysis, site)
    upstream = site if analysis.rule.name == "upstream" else analysis.with_rule("upstream").site(site_id)
    decision = upstream.decision
    model = analysis.target.source or analysis.name
    command = command or (reproduce_command(analysis).replace(" report ", " repro ", 1)
                          .replace(f" --rule {analysis.rule.name}", "").replace(" --format md", "")
                          + f" --site {site_id} --out {file}")
    with tempfile.TemporaryDirectory(prefix="fold-repro-") as tmp:
        folder = Path(tmp)
        source, _ = _render(plan, model, command, file, decision=decision)
        module, path = _load_source(source, folder)
        # the test's own code, on the minimal module: the counts it will assert
        _, before, after = module._run_pass(module.Repro().eval(), module._inputs())
        # the inspector on the minimal module: is the site decided as in the user's model?
        _, site_line = _module_source(plan)
        header_lines = source.split("class Repro(nn.Module):")[0].count("\n")
        location = f"{path.name}:{header_lines + site_line}"
        repro = analyze(module.Repro().eval(), example_inputs=module._inputs(), stage=plan.stage, rule="upstream")
        match = next((s for s in repro.sites if s.location == location), None)
        if plan.stage == "tfa" and match is not None:
            # The test runs the pass on ep.module() without the quantizer's pipeline around it: that
            # harness must decide for the same reasons, or the test shows something else.
            from .._decide.decide import analyze_graph

            harness = analyze_graph(torch.export.export(module.Repro().eval(), module._inputs()).module())
            direct = next((s for s in harness.sites if s.location == location), None)
            if direct is None or (direct.decision, direct.reason_codes) != (match.decision, match.reason_codes):
                why = ", ".join(direct.reason_codes) if direct is not None else "no site"
                raise _cannot(site_id, f"at tfa the quantizer's own passes decide it ({', '.join(match.reason_codes) or 'fold'}),"
                                       f" which a test of the pass alone cannot show ({why})")
    if match is None:
        raise _cannot(site_id, f"the minimal module has no site at the scaled conv output at stage {plan.stage}")
    if (match.decision, match.reason_codes) != (decision, upstream.reason_codes):
        why = ", ".join(match.reason_codes) or "no reason"
        theirs = ", ".join(upstream.reason_codes) or "no reason"
        raise _cannot(site_id, f"in {model} the installed pass decides {decision} ({theirs}), in a minimal module "
                               f"{match.decision} ({why}): the decision depends on more than the site itself")
    folded_count = before - after
    if (decision == "fold") != (folded_count > 0):
        raise _cannot(site_id, f"the test's own run of the pass removed {folded_count} mul(s), which does not "
                               f"match the decision {decision}")
    source, test_name = _render(plan, model, command, file, counts=(before, after), decision=decision)
    source = Redactor(model_file_of(analysis.target))(source)
    notes = list(plan.notes)
    if analysis.rule.is_users:  # the backend's test suite has the installed pass, not the user's rule
        where = analysis.rule.origin.rpartition(":")[0] if analysis.rule.origin else "the session that defined it"
        notes.append(f"the test checks the installed pass ({decision} here); the rule {analysis.rule.name} is the "
                     f"user's ({analysis.rule.source}) and is not in executorch: to check it too, import it from "
                     f"{Path(where).name if analysis.rule.origin else where} and run it on Repro()")
    return Reproducer(site=site_id, stage=plan.stage, decision=decision, test_name=test_name, muls_before=before,
                      muls_after=after, source=source, notes=tuple(notes))


__all__ = ["Reproducer", "reproducer"]
