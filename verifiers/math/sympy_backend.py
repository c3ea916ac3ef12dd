"""The slow path: compare answers with sympy (runs inside the worker process only).

Expression trees become sympy expressions under size guards (``numeric.check_size``: an integer
power or factorial whose result would be astronomically large is refused), then
``simplify(a - b) == 0`` decides, with 40-digit numeric checks of what ``simplify`` leaves (see
``_zero_at``). The caller (the
worker pool) enforces the wall-clock and memory limits by killing this process.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy

from rlvr.verifiers.errors import AnswerParseError
from rlvr.verifiers.math.compare import answers_equal
from rlvr.verifiers.math.numeric import (
    MAX_SYMBOLS,
    N_POINTS,
    REL_TOL_APPROX,
    SAMPLE_POINTS,
    check_size,
    has_approx,
    scalar_equal,
)
from rlvr.verifiers.math.parse import parse_answer
from rlvr.verifiers.math.tree import Node

__all__ = ["compare_texts", "sympy_scalar_equal", "to_sympy"]

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
    check_size(node)
    return _convert(node)


def _convert(node: Node) -> sympy.Expr:
    kind = node[0]
    if kind == "num":
        return sympy.Rational(node[1].numerator, node[1].denominator)
    if kind == "sym":
        return sympy.Symbol(node[1])
    if kind == "const":
        return _CONSTANTS[node[1]]
    if kind == "neg":
        return -_convert(node[1])
    if kind == "add":
        return sympy.Add(*[_convert(term) for term in node[1]])
    if kind == "mul":
        return sympy.Mul(*[_convert(factor) for factor in node[1]])
    if kind == "div":
        return _convert(node[1]) / _convert(node[2])
    if kind == "pow":
        return sympy.Pow(_convert(node[1]), _convert(node[2]))
    if kind == "fact":
        return sympy.factorial(_convert(node[1]))
    if kind == "fn":
        return _function(node[1], [_convert(arg) for arg in node[2]])
    raise AnswerParseError(f"cannot compare {kind!r} as a number")


def _function(name: str, args: list[sympy.Expr]) -> sympy.Expr:
    if name == "root":
        value, degree = args
        if value.is_number and value.is_negative and degree.is_integer and degree.is_odd:
            return -sympy.root(-value, degree)
        return sympy.root(value, degree)
    if name == "lg":
        return sympy.log(args[0], 10)
    if name in ("gcd", "lcm") and not all(arg.is_integer and arg.is_number for arg in args):
        # sympy's gcd of symbols is the polynomial gcd (gcd(x, y) = 1): keep it unevaluated
        return sympy.Function(name.upper())(*args)
    if name == "factorial2":
        return sympy.factorial2(args[0])
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
    if any(side.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan) for side in (left, right)):
        return False
    difference = sympy.simplify(left - right)
    if difference == 0:
        return True
    if not difference.free_symbols and difference.is_zero is False:
        return False  # a proven nonzero constant, however small (e^{-80} is not 0)
    approx = has_approx(a) or has_approx(b)
    symbols = sorted(left.free_symbols | right.free_symbols, key=lambda s: s.name)
    if len(symbols) > MAX_SYMBOLS:  # the sample points have MAX_SYMBOLS coordinates
        return None
    points = SAMPLE_POINTS[:N_POINTS] if symbols else [[]]
    agreeing = 0
    for point in points:
        values = {s: sympy.Float(point[j], _PRECISION) for j, s in enumerate(symbols)}
        zero = _zero_at(difference, left, right, values, approx)
        if zero is False:
            return False
        agreeing += zero is True
    return True if agreeing >= (math.ceil(N_POINTS / 2) if symbols else 1) else None


def _zero_at(
    difference: sympy.Expr,
    left: sympy.Expr,
    right: sympy.Expr,
    values: dict[sympy.Symbol, sympy.Float],
    approx: bool,
) -> bool | None:
    """Whether the simplified ``difference`` vanishes at the point ``values`` (None: no value).

    Exact answers must cancel to ``_EXACT_TOL`` relative to the largest term of the simplified
    difference itself (never relative to ``left``/``right``: a huge common term that simplify
    cancelled would hide any difference). Answers with a decimal may differ by
    ``REL_TOL_APPROX`` relative to their values.
    """
    value = _evaluate(difference, values)
    if value is None:
        return None
    if value == 0:
        return True
    terms = difference.args if difference.is_Add else (difference,)
    term_values = [v for v in (_evaluate(t, values) for t in terms) if v is not None]
    if term_values and value <= _EXACT_TOL * max(term_values):
        return True
    if approx:
        left_value, right_value = _evaluate(left, values), _evaluate(right, values)
        if left_value is None or right_value is None:
            return None
        return bool(value <= sympy.Float(REL_TOL_APPROX) * max(left_value, right_value))
    return False


def _evaluate(expr: sympy.Expr, values: dict[sympy.Symbol, sympy.Float]) -> sympy.Float | None:
    """``|expr|`` at the point, to ``_PRECISION`` digits; None when it has no finite value."""
    try:
        value = sympy.N(expr.subs(values) if values else expr, _PRECISION)
        if value.free_symbols or value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
            return None
        magnitude = sympy.N(abs(value), _PRECISION)
        return magnitude if magnitude.is_real and magnitude.is_finite else None
    except (TypeError, ValueError, ArithmeticError):
        return None
