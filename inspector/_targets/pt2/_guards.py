"""The guard grammar: the only Python a ``.pt2``'s ``guards_code`` may put into the guard function.

``ExportedProgram.module()`` compiles the stored guard strings into real code, so each one is
parsed with ``ast`` and every node is checked: comparisons and arithmetic over the inputs'
sizes (``L['x'].size()[0]``), a few math and torch.sym_* calls, numbers, and nothing else.
"""

from __future__ import annotations

import ast
from typing import Any

from ._common import MAX_EXPR_DEPTH, MAX_GUARD_CHARS, MAX_INT_DIGITS, MAX_POW_EXPONENT, _ExprError, _key_ok

# ----------------------------------------------------------------------------- guards

_GUARD_FUNCTIONS = frozenset({"abs", "max", "min", "round", "int", "float"})
_GUARD_MATH = frozenset({
    "floor", "ceil", "trunc", "sqrt", "cos", "cosh", "acos", "sin", "sinh", "asin", "tan", "tanh",
    "atan", "log2", "inf", "nan", "pow", "exp", "log",
})
_GUARD_TORCH = frozenset({"sym_float", "sym_int", "sym_max", "sym_min", "sym_sqrt", "_sym_sqrt", "sym_not", "sym_ite"})
_GUARD_TENSOR_METHODS = frozenset({"size", "stride", "storage_offset", "numel", "dim"})
_GUARD_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
                ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift,
                ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.IfExp,
                ast.Constant, ast.Call, ast.Attribute, ast.Subscript, ast.Name, ast.Load)


def _is_input_ref(node: ast.AST) -> bool:
    """``L['x']``, ``L['x'][0]``, ``L['x'].size()[2]``: an input or one of its sizes."""
    if isinstance(node, ast.Name):
        return node.id == "L"
    if isinstance(node, ast.Subscript):
        key = node.slice
        if not (isinstance(key, ast.Constant) and _key_ok(key.value)):
            return False
        return _is_input_ref(node.value)
    if isinstance(node, ast.Call):
        f = node.func
        return (not node.args and not node.keywords and isinstance(f, ast.Attribute)
                and f.attr in _GUARD_TENSOR_METHODS and _is_input_ref(f.value))
    return False


def check_guard(text: Any) -> None:
    """Raise ``_ExprError`` unless ``text`` is a shape guard as torch prints them."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_GUARD_CHARS:
        raise _ExprError("empty or too long")
    if any(c in text for c in "\n\r\\\"") or not text.isprintable():
        raise _ExprError("holds quotes, backslashes or line breaks")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        raise _ExprError("not a Python expression") from None
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > 4 * MAX_EXPR_DEPTH:
            raise _ExprError("nested too deeply")
        if not isinstance(node, _GUARD_NODES):
            raise _ExprError(f"{type(node).__name__} is not allowed")
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                raise _ExprError("a string outside an input key")
            if not isinstance(node.value, (int, float, bool)) or (
                    isinstance(node.value, int) and len(str(node.value)) > MAX_INT_DIGITS):
                raise _ExprError("an unexpected constant")
            continue
        if isinstance(node, ast.Name):
            if node.id not in ("L", "math", "torch", "inf", "nan"):
                raise _ExprError(f"unknown name {node.id!r}")
            if node.id in ("math", "torch"):
                raise _ExprError(f"bare {node.id!r}")
            continue
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in ("inf", "nan"):
                continue
            raise _ExprError(f"attribute {node.attr!r} is not allowed here")
        if isinstance(node, ast.Subscript):
            if _is_input_ref(node):
                continue
            raise _ExprError("a subscript that is not an input size")
        if isinstance(node, ast.Call):
            if _is_input_ref(node):
                continue
            f = node.func
            ok = ((isinstance(f, ast.Name) and f.id in _GUARD_FUNCTIONS)
                  or (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                      and ((f.value.id == "math" and f.attr in _GUARD_MATH)
                           or (f.value.id == "torch" and f.attr in _GUARD_TORCH))))
            if not ok or node.keywords:
                raise _ExprError("a call that is not an allowed math function")
            stack.extend((a, depth + 1) for a in node.args)
            continue
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and not _mentions_input(node.left):
            # a power of plain numbers is computed as written: only a number to a small power
            base, exponent = node.left, node.right
            if not (isinstance(base, ast.Constant) and isinstance(exponent, ast.Constant)
                    and type(base.value) in (int, float) and type(exponent.value) in (int, float)
                    and abs(exponent.value) <= MAX_POW_EXPONENT):
                raise _ExprError("a power of plain numbers that is not small")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _mentions_input(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "L" for n in ast.walk(node))
