"""The slow path: compare answers with sympy (runs inside the worker process only).

Expression trees become sympy expressions under size guards (an integer power or factorial
whose result would exceed ``MAX_SYMPY_BITS`` bits is refused with ``AnswerParseError``), then
``simplify(a - b) == 0`` decides, with high-precision numeric checks for what ``simplify`` leaves
(relative ``REL_TOL_APPROX`` when a decimal was written, otherwise 1e-20). The caller (the
worker pool) enforces the wall-clock and memory limits by killing this process.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy

from verifiers.errors import AnswerParseError
from verifiers.math.compare import answers_equal
from verifiers.math.numeric import (
    N_POINTS,
    REL_TOL_APPROX,
    SAMPLE_POINTS,
    exact_value,
    free_symbols,
    has_approx,
    scalar_equal,
)
from verifiers.math.parse import Node, parse_answer

__all__ = ["compare_texts", "sympy_scalar_equal", "to_sympy"]

MAX_SYMPY_BITS = 1_000_000
MAX_SYMPY_FACTORIAL = 100_000
_PRECISION = 40
_EXACT_TOL = sympy.Float("1e-20")

_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot, "sec": sympy.sec,
    "csc": sympy.csc, "arcsin": sympy.asin, "arccos": sympy.acos, "arctan": sympy.atan,
    "sinh": sympy.sinh, "cosh": sympy.cosh, "tanh": sympy.tanh, "ln": sympy.log,
    "log": sympy.log, "exp": sympy.exp, "sqrt": sympy.sqrt, "abs": sympy.Abs,
    "floor": sympy.floor, "ceil": sympy.ceiling, "binom": sympy.binomial, "gcd": sympy.gcd,
    "lcm": sympy.lcm, "max": sympy.Max, "min": sympy.Min,
}
_CONSTANTS = {"pi": sympy.pi, "e": sympy.E, "i": sympy.I, "oo": sympy.oo}


def compare_texts(pred: str, gold: str, pred_percent: bool, gold_percent: bool) -> bool:
    """Compare two normalised answer strings with sympy; undecided counts as not equal."""
    result = answers_equal(
        parse_answer(pred),
        parse_answer(gold),
        sympy_scalar_equal,
        pred_percent=pred_percent,
        gold_percent=gold_percent,
    )
    return result is True


def to_sympy(node: Node) -> sympy.Expr:
    """Convert an expression tree to sympy, refusing results that would be astronomically large.

    Raises:
        AnswerParseError: for relations or powers/factorials beyond the size guards.
    """
    kind = node[0]
    if kind == "num":
        return sympy.Rational(node[1].numerator, node[1].denominator)
    if kind == "sym":
        return sympy.Symbol(node[1])
    if kind == "const":
        return _CONSTANTS[node[1]]
    if kind == "neg":
        return -to_sympy(node[1])
    if kind == "add":
        return sympy.Add(*[to_sympy(term) for term in node[1]])
    if kind == "mul":
        return sympy.Mul(*[to_sympy(factor) for factor in node[1]])
    if kind == "div":
        return to_sympy(node[1]) / to_sympy(node[2])
    if kind == "pow":
        _guard_power(node[1], node[2])
        return sympy.Pow(to_sympy(node[1]), to_sympy(node[2]))
    if kind == "fact":
        value = exact_value(node[1])
        if value is None or abs(value) > MAX_SYMPY_FACTORIAL:
            raise AnswerParseError("factorial argument too large or not a small integer")
        return sympy.factorial(to_sympy(node[1]))
    if kind == "fn":
        return _function(node[1], [to_sympy(arg) for arg in node[2]])
    raise AnswerParseError(f"cannot compare {kind!r} as a number")


def _guard_power(base: Node, exponent: Node) -> None:
    exponent_value = exact_value(exponent)
    if exponent_value is None:
        if free_symbols(exponent) or free_symbols(base):
            return
        raise AnswerParseError("exponent too large to evaluate")
    base_value = exact_value(base)
    magnitude = abs(exponent_value)
    if base_value is not None and base_value not in (0, 1, -1):
        bits = max(base_value.numerator.bit_length(), base_value.denominator.bit_length())
        if bits * magnitude > MAX_SYMPY_BITS:
            raise AnswerParseError("power too large to evaluate")
    elif base_value is None and magnitude > MAX_SYMPY_BITS:
        raise AnswerParseError("exponent too large to evaluate")


def _function(name: str, args: list[sympy.Expr]) -> sympy.Expr:
    if name == "root":
        value, degree = args
        if value.is_number and value.is_negative and degree.is_integer and degree.is_odd:
            return -sympy.root(-value, degree)
        return sympy.root(value, degree)
    if name == "lg":
        return sympy.log(args[0], 10)
    if name not in _FUNCTIONS:
        raise AnswerParseError(f"unknown function {name!r}")
    return _FUNCTIONS[name](*args)


def sympy_scalar_equal(a: Node, b: Node) -> bool | None:
    """Fast path first, then sympy: True, False, or None when even sympy cannot tell."""
    fast = scalar_equal(a, b)
    if fast is not None:
        return fast
    left, right = to_sympy(a), to_sympy(b)
    if left == right:
        return True
    if left.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan) or right.has(
        sympy.oo, -sympy.oo, sympy.zoo, sympy.nan
    ):
        return False
    tolerance = sympy.Float(REL_TOL_APPROX) if has_approx(a) or has_approx(b) else _EXACT_TOL
    difference = sympy.simplify(left - right)
    if difference == 0:
        return True
    if difference.is_number:
        return _numerically_zero(difference, left, right, tolerance)
    return _agree_at_points(left, right, tolerance)


def _numerically_zero(
    difference: sympy.Expr, left: sympy.Expr, right: sympy.Expr, tolerance: sympy.Float
) -> bool | None:
    value = sympy.N(difference, _PRECISION)
    scale = max(abs(sympy.N(left, _PRECISION)), abs(sympy.N(right, _PRECISION)))
    if not (value.is_number and scale.is_number):
        return None
    return bool(abs(value) <= tolerance * scale)


def _agree_at_points(
    left: sympy.Expr, right: sympy.Expr, tolerance: sympy.Float
) -> bool | None:
    symbols = sorted(left.free_symbols | right.free_symbols, key=lambda s: s.name)
    agreeing = 0
    for point in SAMPLE_POINTS[:N_POINTS]:
        values = {s: sympy.Float(point[j], _PRECISION) for j, s in enumerate(symbols)}
        value_left = sympy.N(left.subs(values), _PRECISION)
        value_right = sympy.N(right.subs(values), _PRECISION)
        if not (value_left.is_number and value_right.is_number):
            continue
        if value_left.has(sympy.zoo, sympy.nan) or value_right.has(sympy.zoo, sympy.nan):
            continue
        gap = abs(value_left - value_right)
        if gap > tolerance * max(abs(value_left), abs(value_right)) and gap > _EXACT_TOL:
            return False
        agreeing += 1
    return True if agreeing >= math.ceil(N_POINTS / 2) else None
