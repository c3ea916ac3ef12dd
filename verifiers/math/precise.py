r"""High-precision check of the close calls that double precision cannot settle (mpmath).

Floats round every step to 16 digits, so ``e^{50} + 1`` and ``e^{50}`` are the same double,
``e^{100} - \lfloor e^{100} \rfloor`` is 0, and ``e^{-40}`` is within any absolute tolerance of
0. ``precise_equal`` evaluates both sides with mpmath at a working precision of ``BASE_DPS``
digits plus the magnitude of the largest intermediate value, then again ``STEP_DPS`` digits
higher. Rounding noise shrinks by about ``10^-STEP_DPS`` between the two evaluations, a real
difference does not, however small: so ``e^{-200}`` is not 0 while ``\sin \pi`` is.

Limit: a difference below ``10^-BASE_DPS`` relative to the largest intermediate value is read
as rounding noise (a perturbation of ``e^{-100}`` on a value near 1 is caught; ``e^{-250}``
would not be).

mpmath's working precision is process-global, so evaluations hold a lock.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import mpmath

from rlvr.verifiers.math.tree import Node

__all__ = ["BASE_DPS", "STEP_DPS", "precise_equal"]

BASE_DPS = 50
"""Digits beyond the largest intermediate magnitude at the first evaluation."""
STEP_DPS = 40
"""Extra digits of the second evaluation."""
MAX_MAGNITUDE_DIGITS = 2000
"""Values with more integer digits than this are left undecided (for sympy)."""

_LOCK = threading.Lock()


class _NoValue(Exception):
    """The expression has no finite value here (or a function's domain was left)."""


def precise_equal(
    a: Node, b: Node, env: dict[str, float], *, rel_tol: float = 0.0
) -> bool | None:
    """Whether ``a`` and ``b`` are equal at the point ``env``; None when either has no value.

    Args:
        a: an expression tree.
        b: another.
        env: a value for every free symbol.
        rel_tol: 0 for exact answers (equal up to rounding noise), else the relative tolerance
            of a rounded answer (``REL_TOL_APPROX``).
    """
    with _LOCK:
        saved = mpmath.mp.prec
        try:
            first = _Evaluation(env, BASE_DPS)
            d1 = first.difference(a, b)
            digits = int(mpmath.log10(first.magnitude)) + 1 if first.magnitude > 1 else 0
            if digits > MAX_MAGNITUDE_DIGITS:
                return None
            if digits:
                first = _Evaluation(env, BASE_DPS + digits)
                d1 = first.difference(a, b)
            second = _Evaluation(env, first.dps + STEP_DPS)
            d2 = second.difference(a, b)
            value_a, value_b = second.values
        except (_NoValue, ZeroDivisionError, ValueError, OverflowError, TypeError):
            return None
        finally:
            mpmath.mp.prec = saved
        if rel_tol:
            return bool(d2 <= rel_tol * max(value_a, value_b))
        if d2 == 0:
            return True
        if d1 == 0:  # exact at the lower precision: only noise of the higher one is left
            return bool(d2 <= first.magnitude * mpmath.mpf(10) ** (-second.dps + 10))
        return bool(d2 <= d1 * mpmath.mpf(10) ** (-STEP_DPS // 2))


class _Evaluation:
    """Values of trees at one point and one precision; ``magnitude`` is the largest seen."""

    def __init__(self, env: dict[str, float], dps: int) -> None:
        self.dps = dps
        mpmath.mp.dps = dps
        self.env = {name: mpmath.mpf(value) for name, value in env.items()}
        self.magnitude = mpmath.mpf(1)
        self.values = (mpmath.mpf(0), mpmath.mpf(0))

    def difference(self, a: Node, b: Node) -> Any:
        value_a, value_b = self.value(a), self.value(b)
        self.values = (abs(value_a), abs(value_b))
        return abs(value_a - value_b)

    def value(self, node: Node) -> Any:
        result = self._value(node)
        if not mpmath.isfinite(result):
            raise _NoValue
        size = abs(result)
        if size > self.magnitude:
            self.magnitude = size
        return result

    def _value(self, node: Node) -> Any:
        kind = node[0]
        if kind == "num":
            value: Fraction = node[1]
            return mpmath.mpf(value.numerator) / value.denominator
        if kind == "sym":
            return self.env[node[1]]
        if kind == "const":
            if node[1] == "oo":
                raise _NoValue
            return {"pi": mpmath.pi, "e": mpmath.e, "i": mpmath.j}[node[1]] * 1
        if kind == "neg":
            return -self.value(node[1])
        if kind == "add":
            return mpmath.fsum(self.value(term) for term in node[1])
        if kind == "mul":
            product = mpmath.mpf(1)
            for factor in node[1]:
                product *= self.value(factor)
            return product
        if kind == "div":
            denominator = self.value(node[2])
            if denominator == 0:
                raise _NoValue
            return self.value(node[1]) / denominator
        if kind == "pow":
            return self._power(self.value(node[1]), self.value(node[2]))
        if kind == "fact":
            return mpmath.factorial(self._natural(self.value(node[1]), 10_000))
        if kind == "fn":
            return self._function(node[1], [self.value(arg) for arg in node[2]])
        raise _NoValue

    def _power(self, base: Any, exponent: Any) -> Any:
        if mpmath.im(exponent) == 0 and mpmath.isint(mpmath.re(exponent)):
            if base == 0 and mpmath.re(exponent) < 0:
                raise _NoValue
            return mpmath.power(base, int(mpmath.re(exponent)))
        if base == 0:
            if mpmath.re(exponent) > 0:
                return mpmath.mpf(0)
            raise _NoValue
        return mpmath.power(base, exponent)

    def _natural(self, value: Any, limit: int) -> int:
        rounded = mpmath.nint(mpmath.re(value))
        if abs(value - rounded) > mpmath.mpf(10) ** (-self.dps // 2) or not 0 <= rounded <= limit:
            raise _NoValue
        return int(rounded)

    def _real(self, value: Any) -> Any:
        if abs(mpmath.im(value)) > mpmath.mpf(10) ** (-self.dps // 2) * max(1, abs(value)):
            raise _NoValue
        return mpmath.re(value)

    def _function(self, name: str, args: list[Any]) -> Any:
        if name in _ONE_ARGUMENT and len(args) == 1:
            return _ONE_ARGUMENT[name](args[0])
        if name == "root":
            degree = self._natural(args[1], 64)
            if degree == 0:
                raise _NoValue
            value = args[0]
            if degree % 2 == 1 and mpmath.im(value) == 0 and mpmath.re(value) < 0:
                return -mpmath.root(-mpmath.re(value), degree)
            return mpmath.power(value, mpmath.mpf(1) / degree)
        if name in ("floor", "ceil"):
            real = self._real(args[0])
            return mpmath.floor(real) if name == "floor" else mpmath.ceil(real)
        if name == "factorial2":
            return mpmath.fac2(self._natural(args[0], 10_000))
        if name == "binom":
            return mpmath.binomial(self._natural(args[0], 10_000), self._natural(args[1], 10_000))
        if name in ("gcd", "lcm"):
            integers = [self._natural(arg, 10**30) for arg in args]
            return mpmath.mpf(math.gcd(*integers) if name == "gcd" else math.lcm(*integers))
        if name in ("max", "min"):
            reals = [self._real(arg) for arg in args]
            return max(reals) if name == "max" else min(reals)
        raise _NoValue


_ONE_ARGUMENT: dict[str, Callable[[Any], Any]] = {
    "sin": mpmath.sin, "cos": mpmath.cos, "tan": mpmath.tan, "cot": mpmath.cot,
    "sec": mpmath.sec, "csc": mpmath.csc, "arcsin": mpmath.asin, "arccos": mpmath.acos,
    "arctan": mpmath.atan, "sinh": mpmath.sinh, "cosh": mpmath.cosh, "tanh": mpmath.tanh,
    "ln": mpmath.log, "log": mpmath.log, "exp": mpmath.exp, "sqrt": mpmath.sqrt,
    "abs": lambda z: abs(z),
}
