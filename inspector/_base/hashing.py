"""Content digests for cache keys: tensors by dtype, shape and bytes; graphs by everything a decision reads.

A key must cover everything that determines the cached value, never less: a
stale answer for a changed model is the worst thing the inspector can do.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch


def digest(*parts: Any) -> str:
    """A short hex digest of ``parts`` (tensors, containers, strings, numbers)."""
    h = hashlib.sha256()
    for p in parts:
        _feed(h, p)
    return h.hexdigest()[:24]


def _feed(h, value) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach()
        h.update(f"T{t.dtype}{tuple(t.shape)}{t.layout}".encode())
        if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
            h.update(repr(t).encode())  # rare layouts: the printed values (a miss at worst, never a wrong hit)
        elif t.numel():
            # reshape(-1) first: a 0-dim tensor (BatchNorm's num_batches_tracked) cannot be viewed as bytes
            # the array itself, not .tobytes(): a copy of every weight (0.25 s of nfnet_l0's 140 MB)
            flat = t.cpu().contiguous().reshape(-1)
            h.update(flat.view(torch.uint8).numpy())
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)}".encode())
        for v in value:
            _feed(h, v)
    elif isinstance(value, dict):
        h.update(f"D{len(value)}".encode())
        for k in sorted(value, key=str):
            _feed(h, str(k))
            _feed(h, value[k])
    elif isinstance(value, (str, bytes)):
        data = value.encode() if isinstance(value, str) else value
        h.update(f"S{len(data)}:".encode())
        h.update(data)
    else:
        h.update(f"R{type(value).__name__}:{value!r}".encode())


def _callable_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    name = getattr(target, "_name", None)  # an op overload: aten::mul.Tensor
    if name is not None:
        return f"{name}.{getattr(target, '_overloadname', '')}"
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', None) or repr(target)}"


def _arg_text(arg: Any) -> str:
    if isinstance(arg, torch.fx.Node):
        return "%" + arg.name
    if isinstance(arg, (list, tuple)):
        inner = ",".join(_arg_text(a) for a in arg)
        return f"[{inner}]" if isinstance(arg, list) else f"({inner})"
    if isinstance(arg, dict):
        return "{" + ",".join(f"{k!r}:{_arg_text(v)}" for k, v in arg.items()) + "}"
    return repr(arg)


def _value_text(val: Any) -> str:
    vals = val if isinstance(val, (list, tuple)) else [val]
    return ";".join(f"{v.dtype}{list(v.shape)}" if hasattr(v, "shape") and hasattr(v, "dtype") else type(v).__name__
                    for v in vals)


def graph_text(graph: torch.fx.Graph) -> str:
    """Every node of ``graph`` as text: op, name, target, arguments, and the metadata decisions read.

    The metadata covers what site ids, module paths and the state guard are built from
    (stack trace, module stack, recorded value, markers in ``meta`` and ``meta["custom"]``).
    """
    lines = []
    for n in graph.nodes:
        stack = n.meta.get("nn_module_stack") or {}
        modules = "/".join(f"{path}:{getattr(t, '__name__', t)}" for path, t in stack.values())
        lines.append("|".join((
            n.op, n.name, _callable_name(n.target), _arg_text(n.args), _arg_text(n.kwargs),
            _value_text(n.meta.get("val")), modules, str(n.meta.get("stack_trace") or ""),
            repr(n.meta.get("carried_quant_state")), repr(sorted((n.meta.get("custom") or {}).items(), key=str)),
        )))
    return "\n".join(lines)


def program_fingerprint(program: torch.export.ExportedProgram) -> str:
    """A digest of everything in an exported program that a result can depend on.

    The graph (nodes, arguments, the metadata site ids and decisions read), the
    graph signature, range constraints, and every parameter, buffer and constant,
    0-dim and non-persistent ones included.
    """
    return digest(
        graph_text(program.graph),
        str(program.graph_signature),
        str(sorted((str(k), str(v)) for k, v in program.range_constraints.items())),
        dict(program.state_dict),
        dict(program.constants),
    )
