"""The size-expression grammar: the only sympy text a ``.pt2`` may hand to torch's ``sympify``.

torch reads symbolic sizes and range constraints back with ``sympify``, which evaluates its
input as Python. So each expression is parsed here first by a small recursive-descent parser
that knows numbers, size symbols, arithmetic, comparisons and an allowlist of sympy and torch
functions, and nothing else; powers of plain numbers are kept small because sympy computes them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ._common import MAX_EXPR_CHARS, MAX_EXPR_DEPTH, MAX_INT_DIGITS, MAX_POW_EXPONENT, _ExprError

# ----------------------------------------------------------------------------- size expressions

_SYMBOL_RE = re.compile(r"(?:s|u|zf|zuf|ps)\d{1,9}")

# What torch 2.13 writes (sympy.srepr) and reads back with sympify: sympy's own constructors
# and relations, and the functions torch hands to sympify (GraphModuleDeserializer.sympy_functions).
_EXPR_FUNCTIONS = frozenset({
    "Symbol", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Max", "Min", "Abs", "Mod",
    "floor", "ceiling", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Equality", "Unequality",
    "StrictLessThan", "LessThan", "StrictGreaterThan", "GreaterThan", "And", "Or", "Not",
    "Piecewise", "ExprCondPair",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt",
    "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv",
    "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt",
    "RoundDecimal", "ToFloat", "Identity",
})
_EXPR_CONSTANTS = frozenset({"oo", "zoo", "nan", "true", "false", "True", "False", "int_oo"})
_EXPR_KEYWORDS = frozenset({
    "positive", "negative", "nonnegative", "nonpositive", "integer", "real", "finite", "infinite",
    "nonzero", "zero", "rational", "irrational", "even", "odd", "commutative", "extended_real",
    "extended_positive", "extended_negative", "extended_nonnegative", "extended_nonpositive",
    "extended_nonzero", "prime", "composite", "complex", "imaginary", "hermitian", "algebraic",
    "transcendental", "precision", "evaluate",
})
_POW_FUNCTIONS = frozenset({"Pow", "PowByNatural", "FloatPow"})
_STRING_ARG_FUNCTIONS = {
    "Symbol": _SYMBOL_RE,
    "Float": re.compile(r"[+-]?(?:\d{1,40}(?:\.\d{0,40})?|\.\d{1,40})(?:[eE][+-]?\d{1,3})?|[+-]?inf|nan"),
}
_EXPR_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<str>'[^'\\\n\r]*')|(?P<op>\*\*|//|==|!=|<=|>=|[-+*/%(),=<>]))"
)


@dataclasses.dataclass(kw_only=True)
class _Node:
    symbolic: bool  # contains a size symbol
    literal: int | None = None  # the value of a plain integer literal


class _ExprParser:
    """Recursive descent over the only expressions torch writes: numbers, size symbols, + - * /
    // % **, comparisons, and calls of allowlisted sympy/torch functions with keyword flags.
    No attribute access, no subscripts, no other names: nothing sympify could turn into code."""

    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _EXPR_TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise _ExprError(f"unexpected character at {pos}")
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0
        self.depth = 0

    def parse(self) -> _Node:
        node = self.comparison()
        if self.i != len(self.tokens):
            raise _ExprError("trailing text")
        return node

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise _ExprError(f"expected {value or 'more'}")
        self.i += 1
        return tok

    def at(self, *values: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "op" and tok[1] in values

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_EXPR_DEPTH:
            raise _ExprError("nested too deeply")

    def comparison(self) -> _Node:
        left = self.arith()
        if self.at("==", "!=", "<", "<=", ">", ">="):
            self.take()
            right = self.arith()
            return _Node(symbolic=left.symbolic or right.symbolic)
        return left

    def arith(self) -> _Node:
        node = self.term()
        while self.at("+", "-"):
            self.take()
            other = self.term()
            node = _Node(symbolic=node.symbolic or other.symbolic)
        return node

    def term(self) -> _Node:
        node = self.unary()
        while self.at("*", "/", "//", "%"):
            self.take()
            other = self.unary()
            node = _Node(symbolic=node.symbolic or other.symbolic)
        return node

    def unary(self) -> _Node:
        if self.at("-", "+"):
            sign = self.take()[1]
            self.enter()
            node = self.unary()
            self.depth -= 1
            if node.literal is not None:
                return _Node(symbolic=node.symbolic, literal=-node.literal if sign == "-" else node.literal)
            return node
        return self.power()

    def power(self) -> _Node:
        base = self.atom()
        if self.at("**"):
            self.take()
            self.enter()
            exponent = self.unary()
            self.depth -= 1
            return self.pow_node(base, exponent)
        return base

    @staticmethod
    def pow_node(base: _Node, exponent: _Node) -> _Node:
        # A power of plain numbers is evaluated by sympy at parse time: keep it small.
        if not base.symbolic and not exponent.symbolic:
            if base.literal is None or exponent.literal is None or abs(exponent.literal) > MAX_POW_EXPONENT:
                raise _ExprError("a power of plain numbers that is not small")
        return _Node(symbolic=base.symbolic or exponent.symbolic)

    def atom(self) -> _Node:
        kind, value = self.take()
        if kind == "num":
            digits = value.split(".")[0].split("e")[0].split("E")[0]
            if len(digits) > MAX_INT_DIGITS or len(value) > 2 * MAX_INT_DIGITS:
                raise _ExprError("a number with too many digits")
            return _Node(symbolic=False, literal=int(value) if value.isdigit() else None)
        if kind == "op" and value == "(":
            self.enter()
            node = self.comparison()
            self.take(")")
            self.depth -= 1
            return node
        if kind == "name":
            if self.at("("):
                return self.call(value)
            if _SYMBOL_RE.fullmatch(value):
                return _Node(symbolic=True)
            if value in _EXPR_CONSTANTS:
                return _Node(symbolic=False)
            raise _ExprError(f"unknown name {value!r}")
        raise _ExprError(f"unexpected {value!r}")

    def call(self, func: str) -> _Node:
        if func not in _EXPR_FUNCTIONS:
            raise _ExprError(f"unknown function {func!r}")
        self.take("(")
        self.enter()
        args: list[_Node] = []
        symbolic = False
        first = True
        while not self.at(")"):
            if not first:
                self.take(",")
            tok = self.peek()
            nxt = self.tokens[self.i + 1] if self.i + 1 < len(self.tokens) else None
            if tok and tok[0] == "name" and nxt == ("op", "="):
                if tok[1] not in _EXPR_KEYWORDS:
                    raise _ExprError(f"unknown keyword {tok[1]!r}")
                self.i += 2
                kind, value = self.take()
                if not (value in ("True", "False") or (kind == "num" and value.isdigit() and len(value) <= 4)):
                    raise _ExprError("a keyword value that is not True, False or a small integer")
            elif tok and tok[0] == "str":
                pattern = _STRING_ARG_FUNCTIONS.get(func)
                if not (first and pattern and pattern.fullmatch(tok[1][1:-1])):
                    raise _ExprError(f"unexpected string {tok[1]!r}")
                self.i += 1
                symbolic = symbolic or func == "Symbol"
            else:
                node = self.comparison()
                args.append(node)
                symbolic = symbolic or node.symbolic
            first = False
        self.take(")")
        self.depth -= 1
        if func in _POW_FUNCTIONS and len(args) == 2:
            return self.pow_node(args[0], args[1])
        if func == "Integer" and len(args) == 1:
            return args[0]
        return _Node(symbolic=symbolic)


def check_expression(text: Any) -> None:
    """Raise ``_ExprError`` unless ``text`` is a plain size expression (see ``_ExprParser``)."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_EXPR_CHARS:
        raise _ExprError("empty or too long")
    _ExprParser(text).parse()
