r"""Pure-Python values of expression trees: exact rationals and complex floats.

This is the fast path that settles most answer pairs without sympy.

- ``exact_value``: the exact ``Fraction`` of an expression built from rationals with ``+ - * /``,
  integer powers, perfect roots, ``|x|``, floor/ceil, factorials and binomials, or None. Every
  intermediate result is capped at ``MAX_EXACT_BITS`` bits (and factorials at ``MAX_FACTORIAL``),
  so it never computes ``10^{10^{10}}``.
- ``scalar_equal``: compares two expressions. Two exact values are equal only if identical,
  unless one side was written with a decimal point: then it must be the other one rounded at the
  precision it was written with (``half_unit``) and within ``REL_TOL_APPROX`` = 1e-6, so
  0.3333333 equals 1/3 but 0.3333334 and 0.33 do not; an exact integer is only equal to exactly
  itself (1000001.0 is not 1000000, 1.0e9 is not 1000000007). Otherwise both sides are
  evaluated as complex floats (principal branches, like sympy), at one point when they have no
  variables and at ``N_POINTS`` fixed pseudo-random points of several magnitudes (0.02 to 85)
  when they do, plus two points beyond the largest constant (a randomised identity test, which
  ``\max(5, x)`` and ``\lfloor x^2/4 \rfloor`` no longer pass). Doubles that agree (to
  ``REL_TOL_EXACT`` = 1e-9, no absolute tolerance) are confirmed at one point by
  ``precise.precise_equal`` (mpmath, enough digits for the magnitudes involved), so
  ``e^{50} + 1`` is not ``e^{50}`` and ``e^{-30}`` is not 0; doubles that disagree are asked
  too before a "no", since cancellation can ruin them. When no point can be evaluated
  (overflow, domain errors) the answer is None: undecided, for sympy to settle.
"""

from __future__ import annotations

import cmath
import math
import random
from collections.abc import Callable
from fractions import Fraction

from rlvr.verifiers.errors import AnswerParseError
from rlvr.verifiers.math.precise import precise_equal
from rlvr.verifiers.math.tree import Node, children, walk

__all__ = [
    "MAX_SYMBOLIC_BITS",
    "REL_TOL_APPROX",
    "REL_TOL_EXACT",
    "SAMPLE_POINTS",
    "check_size",
    "exact_value",
    "free_symbols",
    "half_unit",
    "has_approx",
    "proportionality",
    "infinity_sign",
    "numeric_value",
    "scalar_equal",
]

REL_TOL_APPROX = 1e-6
REL_TOL_EXACT = 1e-9
MAX_EXACT_BITS = 8192
MAX_FACTORIAL = 1000
MAX_SYMBOLS = 16
MAX_SYMBOLIC_BITS = 1_000_000
MAX_SYMBOLIC_FACTORIAL = 20_000
N_POINTS = 10
MIN_AGREEING_POINTS = 3
_POINT_SCALES = (1.0, 1.0, 4.0, 0.3, 13.0, 2.5, 45.0, 1.5, 7.0, 0.12)
r"""Magnitudes of the sample points: most near 1, some far from it, so that floors, maxima and
perturbations which vanish on [-2, 2] show (``\lfloor x^2/4 \rfloor``, ``\max(5, x)``)."""

SAMPLE_POINTS: list[list[float]] = []
for _k in range(N_POINTS):
    _rng = random.Random(7919 * (_k + 1))
    SAMPLE_POINTS.append(
        [_rng.choice((-1, 1)) * _rng.uniform(0.15, 1.9) * _POINT_SCALES[_k]
         for _ in range(MAX_SYMBOLS)]
    )


class _Undefined(Exception):
    """The expression has no (finite, exact) value here."""


def exact_value(node: Node) -> Fraction | None:
    """The exact rational value of ``node``, or None (irrational, symbolic, or too large)."""
    try:
        return _exact(node)
    except (_Undefined, ZeroDivisionError, OverflowError, ValueError):
        return None


def _check(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_EXACT_BITS:
        raise _Undefined
    return value


def _exact(node: Node) -> Fraction:
    kind = node[0]
    if kind == "num":
        return _check(node[1])
    if kind == "neg":
        return -_exact(node[1])
    if kind == "add":
        total = Fraction(0)
        for term in node[1]:
            total = _check(total + _exact(term))
        return total
    if kind == "mul":
        product = Fraction(1)
        for factor in node[1]:
            product = _check(product * _exact(factor))
        return product
    if kind == "div":
        return _check(_exact(node[1]) / _exact(node[2]))
    if kind == "pow":
        return _exact_power(_exact(node[1]), _exact(node[2]))
    if kind == "fact":
        return Fraction(math.factorial(_small_natural(_exact(node[1]), MAX_FACTORIAL)))
    if kind == "fn":
        return _exact_function(node[1], [_exact(arg) for arg in node[2]])
    raise _Undefined


def _small_natural(value: Fraction, limit: int) -> int:
    if value.denominator != 1 or not 0 <= value.numerator <= limit:
        raise _Undefined
    return value.numerator


def _exact_power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator == 1:
        bits = max(base.numerator.bit_length(), base.denominator.bit_length())
        if bits * abs(exponent.numerator) > MAX_EXACT_BITS:
            raise _Undefined
        return base**exponent.numerator
    if base < 0 or exponent.denominator > 12:
        raise _Undefined
    root = _exact_root(base, exponent.denominator)
    return _exact_power(root, Fraction(exponent.numerator))


def _exact_root(value: Fraction, degree: int) -> Fraction:
    if value < 0:
        if degree % 2 == 0:
            raise _Undefined
        return -_exact_root(-value, degree)
    numerator = _integer_root(value.numerator, degree)
    return Fraction(numerator, _integer_root(value.denominator, degree))


def _integer_root(value: int, degree: int) -> int:
    """The exact integer ``degree``-th root of ``value``; raises when it is not a perfect power."""
    if value < 2:
        return value
    guess = 1 << ((value.bit_length() + degree - 1) // degree)
    while True:
        better = ((degree - 1) * guess + value // guess ** (degree - 1)) // degree
        if better >= guess:
            break
        guess = better
    if guess**degree != value:
        raise _Undefined
    return guess


def _exact_function(name: str, args: list[Fraction]) -> Fraction:
    if name == "sqrt":
        return _exact_root(_nonnegative(args[0]), 2)
    if name == "root":
        degree = _small_natural(args[1], 12)
        if degree == 0:
            raise _Undefined
        return _exact_root(args[0], degree)
    if name == "abs":
        return abs(args[0])
    if name in ("floor", "ceil"):
        return Fraction(math.floor(args[0]) if name == "floor" else math.ceil(args[0]))
    if name == "binom":
        return Fraction(math.comb(_small_natural(args[0], 10_000), _small_natural(args[1], 10_000)))
    if name in ("gcd", "lcm") and all(a.denominator == 1 for a in args):
        integers = [a.numerator for a in args]
        return Fraction(math.gcd(*integers) if name == "gcd" else math.lcm(*integers))
    if name in ("max", "min"):
        return max(args) if name == "max" else min(args)
    if name == "factorial2":
        return Fraction(_double_factorial(_small_natural(args[0], MAX_FACTORIAL)))
    raise _Undefined


def _double_factorial(n: int) -> int:
    """``n!! = n (n-2) (n-4) ...`` down to 1 or 2."""
    return math.prod(range(n, 0, -2))


def _nonnegative(value: Fraction) -> Fraction:
    if value < 0:
        raise _Undefined
    return value


_COMPLEX_FUNCTIONS: dict[str, Callable[[complex], complex]] = {
    "sin": cmath.sin, "cos": cmath.cos, "tan": cmath.tan,
    "cot": lambda z: 1 / cmath.tan(z), "sec": lambda z: 1 / cmath.cos(z),
    "csc": lambda z: 1 / cmath.sin(z), "arcsin": cmath.asin, "arccos": cmath.acos,
    "arctan": cmath.atan, "sinh": cmath.sinh, "cosh": cmath.cosh, "tanh": cmath.tanh,
    "ln": cmath.log, "log": cmath.log, "exp": cmath.exp, "sqrt": cmath.sqrt,
    "abs": lambda z: complex(abs(z)),
}
_CONSTANTS = {"pi": complex(math.pi), "e": complex(math.e), "i": 1j}


def numeric_value(
    node: Node, env: dict[str, complex], risks: list[str] | None = None
) -> complex:
    r"""The complex float value of ``node`` with variables taken from ``env``.

    Args:
        node: the expression.
        env: a value for every free symbol.
        risks: when given, gets a note for each step where doubles may have lost what decides
            equality: cancellation or a term below 1e-8 of a sum, a power within 1e-8 of 1
            (``2^{10^{-12}}``), a function within 1e-8 of +-1 (``\tanh 40``, ``\cos 10^{-9}``),
            a trigonometric function of a huge argument, a floor near an
            integer or beyond 2^52 (``precise.precise_equal`` then confirms).

    Raises:
        _Undefined: on division by zero, overflow, a domain error or infinity.
    """
    try:
        value = _numeric(node, env, risks)
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as err:
        raise _Undefined from err
    if not cmath.isfinite(value):
        raise _Undefined
    return value


_NEAR = 1e-8
_PERIODIC = frozenset({"sin", "cos", "tan", "cot", "sec", "csc", "arctan", "tanh"})


def _numeric(node: Node, env: dict[str, complex], risks: list[str] | None = None) -> complex:
    kind = node[0]
    if kind == "num":
        return complex(float(node[1]))
    if kind == "sym":
        return env[node[1]]
    if kind == "const":
        if node[1] == "oo":
            raise _Undefined
        return _CONSTANTS[node[1]]
    if kind == "neg":
        return -_numeric(node[1], env, risks) + 0j  # + 0j turns -0.0 into 0.0 (branch cuts)
    if kind == "add":
        terms = [_numeric(term, env, risks) for term in node[1]]
        total = sum(terms, 0j)
        if risks is not None:
            largest = max(abs(term) for term in terms)
            if abs(total) < _NEAR * largest or any(0 < abs(t) < _NEAR * largest for t in terms):
                risks.append("sum")
        return total
    if kind == "mul":
        product = 1 + 0j
        for factor in node[1]:
            product *= _numeric(factor, env, risks)
        return product
    if kind == "div":
        return _numeric(node[1], env, risks) / _numeric(node[2], env, risks)
    if kind == "pow":
        base, exponent = _numeric(node[1], env, risks), _numeric(node[2], env, risks)
        return _near_one(_complex_power(base, exponent), risks)
    if kind == "fact":
        return complex(math.factorial(_near_natural(_numeric(node[1], env, risks), 170)))
    if kind == "fn":
        args = [_numeric(arg, env, risks) + 0j for arg in node[2]]
        if risks is not None:
            _function_risks(node[1], args, risks)
        value = _numeric_function(node[1], args)
        if risks is not None and abs(abs(value) - 1) < _NEAR and node[1] not in ("max", "min"):
            risks.append("saturated")  # tanh(40) is 1.0 in doubles; cos(10^{-9}) too
        return value
    raise _Undefined


def _near_one(value: complex, risks: list[str] | None) -> complex:
    if risks is not None and 0 < abs(value - 1) < _NEAR:
        risks.append("near 1")
    return value


def _function_risks(name: str, args: list[complex], risks: list[str]) -> None:
    if name in _PERIODIC and abs(args[0]) > 1e8:
        risks.append("huge argument")
    elif name in ("floor", "ceil"):
        real = args[0].real
        if abs(real) > 2.0**52 or abs(real - round(real)) < 1e-9 * max(1.0, abs(real)):
            risks.append("floor")


def _complex_power(base: complex, exponent: complex) -> complex:
    if exponent.imag == 0 and exponent.real.is_integer() and abs(exponent.real) <= 4096:
        if base == 0 and exponent.real < 0:
            raise _Undefined
        return base ** int(exponent.real)
    if base == 0:
        return 0j if exponent.real > 0 else _raise_undefined()
    return base**exponent


def _raise_undefined() -> complex:
    raise _Undefined


def _near_natural(value: complex, limit: int) -> int:
    rounded = round(value.real)
    if abs(value - rounded) > 1e-9 or not 0 <= rounded <= limit:
        raise _Undefined
    return int(rounded)


def _real(value: complex) -> float:
    if abs(value.imag) > 1e-9 * max(1.0, abs(value.real)):
        raise _Undefined
    return value.real


def _numeric_function(name: str, args: list[complex]) -> complex:
    if name in _COMPLEX_FUNCTIONS and len(args) == 1:
        return _COMPLEX_FUNCTIONS[name](args[0])
    if name == "root":
        degree = _near_natural(args[1], 64)
        if degree == 0:
            raise _Undefined
        value = args[0]
        if degree % 2 == 1 and value.imag == 0 and value.real < 0:
            return complex(-((-value.real) ** (1 / degree)))
        return _complex_power(value, complex(1 / degree))
    if name in ("floor", "ceil"):
        real = _real(args[0])
        return complex(math.floor(real) if name == "floor" else math.ceil(real))
    if name == "binom":
        return complex(math.comb(_near_natural(args[0], 10_000), _near_natural(args[1], 10_000)))
    if name in ("gcd", "lcm"):
        integers = [_near_natural(a, 10**15) for a in args]
        return complex(math.gcd(*integers) if name == "gcd" else math.lcm(*integers))
    if name in ("max", "min"):
        reals = [_real(a) for a in args]
        return complex(max(reals) if name == "max" else min(reals))
    if name == "factorial2":
        return complex(_double_factorial(_near_natural(args[0], 300)))
    raise _Undefined


def free_symbols(node: Node) -> set[str]:
    """Names of the variables in ``node``."""
    return {item[1] for item in walk(node) if item[0] == "sym"}


def has_approx(node: Node) -> bool:
    """Whether ``node`` contains a literal written with a decimal point."""
    return any(item[0] == "num" and item[2] for item in walk(node))


def infinity_sign(node: Node) -> int:
    r"""+1 for ``\infty``, -1 for ``-\infty``, 0 for anything else."""
    sign = 1
    while node[0] == "neg":
        sign, node = -sign, node[1]
    return sign if node == ("const", "oo") else 0


def check_size(node: Node) -> None:
    """Refuse expressions whose exact value is astronomically large (before sympy sees them).

    A power of a rational number may have at most ``MAX_SYMBOLIC_BITS`` bits, and its exponent
    must have a float value (``10^{10^{10^{10}}}`` is refused; ``e^{e^{e^9}}`` stays symbolic);
    factorials are limited to ``MAX_SYMBOLIC_FACTORIAL``.

    Raises:
        AnswerParseError: naming what is too large.
    """
    for item in walk(node):
        if item[0] == "pow":
            _check_power(item[1], item[2])
        elif item[0] == "fact" or item[:2] == ("fn", "factorial2"):
            operand = item[1] if item[0] == "fact" else item[2][0]
            value = exact_value(operand)
            if value is None and not free_symbols(operand):
                raise AnswerParseError("factorial of a number too large to evaluate")
            if value is not None and abs(value) > MAX_SYMBOLIC_FACTORIAL:
                raise AnswerParseError(f"factorial of {value} is too large to evaluate")


def _check_power(base: Node, exponent: Node) -> None:
    exponent_value = exact_value(exponent)
    base_value = exact_value(base)
    if exponent_value is None:
        if (
            base_value is None
            or base_value in (0, 1, -1)
            or free_symbols(exponent)  # 2^{x}: symbolic (and no float value to take)
            or not _exceeds(exponent)
        ):
            return  # symbolic or moderate: sympy keeps it unevaluated (and runs under a deadline)
        raise AnswerParseError("exponent too large to evaluate")
    if base_value is None or base_value in (0, 1, -1):
        if abs(exponent_value) > MAX_SYMBOLIC_BITS and not free_symbols(base):
            raise AnswerParseError("exponent too large to evaluate")
        return
    bits = max(base_value.numerator.bit_length(), base_value.denominator.bit_length())
    if bits * abs(exponent_value) > MAX_SYMBOLIC_BITS:
        raise AnswerParseError("power too large to evaluate")


def _exceeds(node: Node) -> bool:
    """Whether a constant expression is too large even for a float (or has no value)."""
    try:
        numeric_value(node, {})
    except _Undefined:
        return True
    return False


def scalar_equal(a: Node, b: Node) -> bool | None:
    """Whether two expressions are equal: True, False, or None when undecided (see module)."""
    approx_a, approx_b = has_approx(a), has_approx(b)
    approx = approx_a or approx_b
    exact_a, exact_b = exact_value(a), exact_value(b)
    if exact_a is not None and exact_b is not None:
        if exact_a == exact_b:
            return True
        return approx and _rounded_agree(a, exact_a, approx_a, b, exact_b, approx_b)
    if (_exact_integer(exact_a, approx_a) and approx_b) or (
        _exact_integer(exact_b, approx_b) and approx_a
    ):
        return False  # an integer is only equal to what is exactly that integer
    inf_a, inf_b = infinity_sign(a), infinity_sign(b)
    if inf_a or inf_b:
        return inf_a == inf_b
    symbols = sorted(free_symbols(a) | free_symbols(b))
    if len(symbols) > MAX_SYMBOLS:
        return None
    tolerance = REL_TOL_APPROX if approx else REL_TOL_EXACT
    rel_tol = tolerance if approx else 0.0
    agreeing = 0
    doubtful: list[dict[str, float]] = []
    for point in SAMPLE_POINTS[: N_POINTS if symbols else 1]:
        env = {name: complex(point[j]) for j, name in enumerate(symbols)}
        risks: list[str] = []
        try:
            value_a, value_b = numeric_value(a, env, risks), numeric_value(b, env, risks)
        except _Undefined:
            continue
        real_env = {name: point[j] for j, name in enumerate(symbols)}
        if not close(value_a, value_b, tolerance):
            # doubles lose everything to cancellation in (x^{20} + x) - x^{20}, and leave
            # \sin \pi at 1.2e-16: a zero or a tiny value on one side is asked of mpmath too
            tiny = min(abs(value_a), abs(value_b)) == 0 or abs(value_a - value_b) < 1e-9
            at_risk = bool(risks) or tiny
            if not at_risk or precise_equal(a, b, real_env, rel_tol=rel_tol) is not True:
                return False
        elif approx and not _within_rounding(a, approx_a, value_a, b, approx_b, value_b):
            return False
        elif risks or not symbols or (value_a == 0) != (value_b == 0):
            doubtful.append(real_env)  # doubles agree but may have rounded the difference away
        agreeing += 1
    if agreeing < (MIN_AGREEING_POINTS if symbols else 1):
        return None
    far_points = _far_points(a, b, symbols)
    if far_points is None:
        return None  # constants too large to step beyond in doubles: sympy decides
    for far in far_points:  # beyond every constant: max(10^6, x) is not 10^6
        far_risks: list[str] = []
        try:
            far_a = numeric_value(a, _complex(far), far_risks)
            far_b = numeric_value(b, _complex(far), far_risks)
        except _Undefined:
            continue
        if close(far_a, far_b, tolerance):
            continue
        if not far_risks or precise_equal(a, b, far, rel_tol=rel_tol) is False:
            return False
    for doubt in doubtful[:2]:  # enough digits to see cancellation and tiny terms
        confirmed = precise_equal(a, b, doubt, rel_tol=rel_tol)
        if confirmed is not True:
            return confirmed
    return True


def _complex(env: dict[str, float]) -> dict[str, complex]:
    return {name: complex(value) for name, value in env.items()}


def _far_points(a: Node, b: Node, symbols: list[str]) -> list[dict[str, float]] | None:
    r"""Two points whose coordinates exceed the largest constant in ``a`` and ``b`` (above 2).

    The fixed sample points cannot see where ``\max(c, x)`` or ``\lfloor x^2/c \rfloor`` change
    when c is large; these points can (a disagreement there is confirmed with mpmath).
    """
    if not symbols:
        return []
    largest = 2.0
    stack = [a, b]
    while stack:
        item = stack.pop()
        if item[0] in ("num", "pow", "fact", "fn", "mul", "div") and not free_symbols(item):
            try:
                largest = max(largest, abs(numeric_value(item, {})))
            except _Undefined:
                pass
            continue
        stack.extend(children(item))
    if largest > 1e12:
        return None
    if largest <= 2.0:
        return []
    return [
        {name: sign * (3 + abs(SAMPLE_POINTS[0][j])) * largest for j, name in enumerate(symbols)}
        for sign in (1, -1)
    ]


def _exact_integer(value: Fraction | None, approx: bool) -> bool:
    return value is not None and not approx and value.denominator == 1


def _rounded_agree(
    a: Node, value_a: Fraction, approx_a: bool, b: Node, value_b: Fraction, approx_b: bool
) -> bool:
    """Whether two different exact values agree, at least one written with a decimal point.

    Yes when the decimal one is the other rounded at the precision it was written with (and
    within ``REL_TOL_APPROX``); an exact integer is never equal to a different value.
    """
    if abs(value_a - value_b) > REL_TOL_APPROX * max(abs(value_a), abs(value_b)):
        return False
    if approx_a and approx_b:  # both rounded: they agree at the coarser precision written
        units = [u for u in (half_unit(a), half_unit(b)) if u is not None]
        return bool(units) and abs(value_a - value_b) <= max(units)
    exact, rounded, rounded_node = (value_b, value_a, a) if approx_a else (value_a, value_b, b)
    if exact.denominator == 1:
        return False
    unit = half_unit(rounded_node)
    return unit is None or abs(rounded - exact) <= unit


def _within_rounding(
    a: Node, approx_a: bool, value_a: complex, b: Node, approx_b: bool, value_b: complex
) -> bool:
    """For one exact and one decimal side: the decimal is the exact value rounded (float)."""
    if approx_a == approx_b:
        return True
    rounded_node, difference = (a if approx_a else b), abs(value_a - value_b)
    unit = half_unit(rounded_node)
    return unit is None or difference <= float(unit) * (1 + 1e-9) + 1e-15 * abs(value_a)


def proportionality(a: Node, b: Node) -> Fraction | None:
    """The rational ``k != 0`` with ``a = k b`` at the first sample point where both have a value.

    None when there is no such point or the ratio is not a small-denominator rational; the
    caller still checks ``a = k b`` everywhere.
    """
    symbols = sorted(free_symbols(a) | free_symbols(b))
    if len(symbols) > MAX_SYMBOLS:
        return None
    for point in SAMPLE_POINTS:
        env = {name: complex(point[j]) for j, name in enumerate(symbols)}
        try:
            value_a, value_b = numeric_value(a, env), numeric_value(b, env)
        except _Undefined:
            continue
        if value_b == 0 or value_a == 0:
            continue
        ratio = value_a / value_b
        if abs(ratio.imag) > 1e-9 * abs(ratio):
            return None
        factor = Fraction(ratio.real).limit_denominator(10_000)
        return factor if factor and abs(factor - ratio.real) <= 1e-9 * abs(ratio) else None
    return None


def half_unit(node: Node) -> Fraction | None:
    r"""Half a unit of the last digit of a decimal written alone, or None for anything else.

    Decimals: ``-2.50``, ``1.2e3``, ``1.25 \times 10^{4}``.
    """
    while node[0] == "neg":
        node = node[1]
    if node[0] == "num":
        return node[2] if isinstance(node[2], Fraction) and node[2] else None
    if node[0] == "mul" and len(node[1]) == 2:
        mantissa, power = node[1]
        unit = half_unit(mantissa) if mantissa[0] == "num" else None
        if unit is not None and power[0] == "pow" and power[1] == ("num", Fraction(10), False):
            exponent = exact_value(power[2])
            if exponent is not None and exponent.denominator == 1 and abs(exponent) <= 400:
                return unit * Fraction(10) ** int(exponent)
    return None


def close(a: complex, b: complex, rel_tol: float) -> bool:
    r"""Whether ``a`` and ``b`` agree to ``rel_tol``, relative to the larger.

    No absolute floor: ``e \cdot 10^{-13}`` is not ``\pi \cdot 10^{-13}``.
    """
    difference = abs(a - b)
    return difference <= rel_tol * max(abs(a), abs(b))
