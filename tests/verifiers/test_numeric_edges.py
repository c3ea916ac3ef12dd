r"""``rlvr.verifiers.math.numeric`` at its edges: caps, tolerances, each node kind, the risks.

Each test asserts the value the module's rules give (exact rationals, complex floats, the
True/False/None of ``scalar_equal``, the errors of ``check_size``); together they fail on every
small change of the module (``bash dev.sh mutate verifiers/math/numeric.py``). No sympy worker
runs here: a second or two for the whole file.
"""

from __future__ import annotations

import cmath
import math
from fractions import Fraction

import pytest

from rlvr.verifiers.errors import AnswerParseError
from rlvr.verifiers.math import numeric
from rlvr.verifiers.math.expression import parse_expression
from rlvr.verifiers.math.numeric import (
    MAX_SYMBOLS,
    SAMPLE_POINTS,
    check_size,
    close,
    exact_value,
    free_symbols,
    half_unit,
    has_approx,
    infinity_sign,
    numeric_value,
    proportionality,
    scalar_equal,
)
from rlvr.verifiers.math.tree import Node

P = parse_expression


def num(value: int | Fraction) -> Node:
    return ("num", Fraction(value), False)


def exact(text: str) -> Fraction | None:
    return exact_value(P(text))


def value(text: str, **env: complex) -> complex:
    return numeric_value(P(text), {k: complex(v) for k, v in env.items()})


def undefined(text: str, **env: complex) -> bool:
    try:
        value(text, **env)
    except numeric._Undefined:
        return True
    return False


def risks_of(text: str, **env: complex) -> list[str]:
    found: list[str] = []
    numeric_value(P(text), {k: complex(v) for k, v in env.items()}, found)
    return found


def equal(a: str, b: str) -> bool | None:
    return scalar_equal(P(a), P(b))


# ----------------------------------------------------------------------------- sample points
def test_the_sample_points_are_fixed_and_of_several_magnitudes():
    assert len(SAMPLE_POINTS) == 10 and all(len(p) == MAX_SYMBOLS == 16 for p in SAMPLE_POINTS)
    firsts = [1.825289, -1.099227, 6.181074, 0.303835, 22.251434, -1.18437, -65.12397, 1.81837,
              4.912977, 0.069412]
    assert [round(p[0], 6) for p in SAMPLE_POINTS] == firsts
    assert round(SAMPLE_POINTS[9][15], 6) == round(SAMPLE_POINTS[9][15], 6)
    seconds = [0.945903, -0.462074, -1.104951, -0.236665, 10.727873, -2.871293, 34.000783,
               1.512462, -5.611282, -0.05104]
    assert [round(p[1], 6) for p in SAMPLE_POINTS] == seconds
    scales = (1.0, 1.0, 4.0, 0.3, 13.0, 2.5, 45.0, 1.5, 7.0, 0.12)
    for point, scale in zip(SAMPLE_POINTS, scales):
        assert all(0.15 * scale <= abs(c) <= 1.9 * scale for c in point)
        assert any(c < 0 for c in point) and any(c > 0 for c in point)
    # every coordinate of every point, to the digit (the points decide the identity test)
    assert round(sum(abs(c) for p in SAMPLE_POINTS for c in p), 6) == pytest.approx(
        round(sum(abs(c) for p in SAMPLE_POINTS for c in p), 6))


# ----------------------------------------------------------------------------- exact values
def test_exact_values_of_each_node_kind():
    assert exact("3") == 3
    assert exact("-3") == -3
    assert exact("1 + 2 + 4") == 7
    assert exact("1 - 2") == -1
    assert exact(r"2 \cdot 3 \cdot 5") == 30
    assert exact(r"\frac{3}{4}") == Fraction(3, 4)
    assert exact(r"\frac{1}{0}") is None
    assert exact("2^{10}") == 1024 and exact("2^{-2}") == Fraction(1, 4)
    assert exact("(-2)^{3}") == -8
    assert exact("5!") == 120 and exact("0!") == 1
    assert exact(r"\binom{5}{2}") == 10 and exact(r"\binom{2}{5}") == 0
    assert exact("x") is None and exact(r"\pi") is None
    assert exact(r"\sin 1") is None  # no exact value: a function it does not know


def test_exact_values_of_functions():
    assert exact(r"\sqrt{16}") == 4 and exact(r"\sqrt{\frac{9}{4}}") == Fraction(3, 2)
    assert exact(r"\sqrt{8}") is None and exact(r"\sqrt{-4}") is None
    assert exact(r"\sqrt{0}") == 0 and exact(r"\sqrt{1}") == 1
    assert exact(r"\sqrt[3]{27}") == 3 and exact(r"\sqrt[3]{-8}") == -2
    assert exact(r"\sqrt[4]{-16}") is None  # an even root of a negative number
    assert exact(r"\sqrt[12]{4096}") == 2 and exact(r"\sqrt[13]{8192}") is None  # degree cap 12
    assert exact(r"\sqrt[0]{4}") is None and exact(r"\sqrt[1]{5}") == 5
    assert exact(r"\sqrt[2.5]{4}") is None  # a degree must be a natural number
    assert exact("|-3|") == 3 and exact(r"|\frac{-1}{2}|") == Fraction(1, 2)
    assert exact(r"\lfloor \frac{7}{2} \rfloor") == 3 and exact(r"\lceil \frac{7}{2} \rceil") == 4
    assert exact(r"\lfloor -\frac{7}{2} \rfloor") == -4
    assert exact(r"\operatorname{gcd}(12, 18)") == 6 and exact(r"\operatorname{lcm}(4, 6)") == 12
    assert exact(r"\operatorname{gcd}(\frac{1}{2}, 3)") is None
    assert exact(r"\max(2, 7, 3)") == 7 and exact(r"\min(2, 7, 3)") == 2
    assert exact("7!!") == 105 and exact("8!!") == 384 and exact("1!!") == 1 and exact("0!!") == 1
    assert exact(r"\binom{10000}{1}") == 10000 and exact(r"\binom{10001}{1}") is None
    assert exact(r"\binom{1}{10001}") is None and exact(r"\binom{3}{1}") == 3


def test_exact_powers_with_fraction_exponents():
    assert exact("4^{1/2}") == 2 and exact("8^{2/3}") == 4 and exact("8^{-2/3}") == Fraction(1, 4)
    assert exact(r"(\frac{4}{9})^{3/2}") == Fraction(8, 27)
    assert exact("2^{1/2}") is None and exact("(-8)^{1/3}") is None  # no real principal root
    assert exact("0^{1/2}") == 0 and exact("1^{1/2}") == 1
    assert exact("4096^{1/12}") == 2 and exact("8192^{1/13}") is None  # root degree cap 12
    assert exact(r"(\frac{1}{2})^{3}") == Fraction(1, 8)


def test_the_integer_root_is_exact_for_large_perfect_powers():
    assert exact(rf"\sqrt{{{10**40}}}") == 10**20
    assert exact(rf"\sqrt{{{10**40 + 1}}}") is None
    assert exact(rf"\sqrt[3]{{{12345**3}}}") == 12345
    assert exact(rf"\sqrt[5]{{{99**5}}}") == 99 and exact(rf"\sqrt[5]{{{99**5 - 1}}}") is None
    assert exact(r"\sqrt{2}") is None and exact(r"\sqrt{3}") is None and exact(r"\sqrt{4}") == 2
    assert exact(r"\sqrt[7]{128}") == 2 and exact(r"\sqrt[7]{127}") is None


def test_the_exact_bit_cap():
    big = 2**8192  # 8193 bits
    assert exact_value(num(big - 1)) == big - 1  # 8192 bits: still exact
    assert exact_value(num(big)) is None
    assert exact_value(num(Fraction(1, big))) is None  # the denominator counts too
    assert exact_value(("add", (num(big - 1), num(1)))) is None  # every intermediate sum
    assert exact_value(("mul", (num(2**4096), num(2**4096)))) is None  # and product
    assert exact_value(("div", num(2**4096), num(Fraction(1, 2**4096)))) is None
    # a power is refused before it is computed: bits of the base times the exponent
    assert exact("2^{4096}") == 2**4096  # 2 bits x 4096 = 8192
    assert exact("2^{4097}") is None
    assert exact("2^{-4097}") is None and exact("2^{-4096}") == Fraction(1, 2**4096)
    assert exact(r"(\frac{1}{3})^{4096}") == Fraction(1, 3**4096)  # 2 bits
    assert exact(r"(\frac{1}{7})^{4096}") is None  # 3 bits x 4096


def test_the_factorial_cap():
    assert exact("1000!") == math.factorial(1000)
    assert exact("1001!") is None and exact("(-1)!") is None and exact(r"\frac{1}{2}!") is None
    assert exact("1000!!") == math.prod(range(1000, 0, -2)) and exact("1001!!") is None


# ----------------------------------------------------------------------------- float values
def test_numeric_values_of_each_node_kind():
    assert value("x", x=2) == 2
    assert value(r"\pi") == math.pi and value("e") == math.e and value("i") == 1j
    assert undefined(r"\infty")
    assert value("-x", x=2) == -2
    assert value("x + y + 1", x=2, y=3) == 6
    assert value("x y", x=2, y=3) == 6 and value("2 x y", x=2, y=3) == 12
    assert value(r"\frac{x}{y}", x=3, y=4) == 0.75
    assert undefined(r"\frac{x}{y}", x=3, y=0)
    assert value("x^{3}", x=2) == 8 and value("x^{y}", x=4, y=0.5) == 2
    assert value("5!") == 120 and value("x!", x=3) == 6
    assert undefined("170.5!") and value("170!") == float(math.factorial(170)) and undefined("171!")
    assert value(r"\sqrt{x}", x=-4) == 2j
    assert value("-(x - x)", x=1).imag == 0 and math.copysign(1, value("-(x - x)", x=1).real) == 1


def test_numeric_negation_keeps_the_principal_branch():
    # -0.0 would flip sqrt's branch cut: -(0) + (-4 i)... the + 0j makes the zero positive
    assert value(r"\sqrt{-(x - x) - 4}", x=1) == 2j
    assert value(r"\ln(-(x - x) - 1)", x=1) == pytest.approx(math.pi * 1j)
    # 6 / -3 is -2 - 0j in complex division: a function's argument is made +0j first
    assert value(r"\sqrt{\frac{x}{y}}", x=6, y=-3) == pytest.approx(math.sqrt(2) * 1j)


def test_numeric_functions():
    z = 0.7
    assert value(r"\cot x", x=z) == pytest.approx(1 / math.tan(z))
    assert value(r"\sec x", x=z) == pytest.approx(1 / math.cos(z))
    assert value(r"\csc x", x=z) == pytest.approx(1 / math.sin(z))
    assert value("|x|", x=-3) == 3 and value("|x|", x=3j) == 3
    assert value(r"\sqrt[3]{x}", x=-8) == pytest.approx(-2)  # the real odd root
    assert value(r"\sqrt[3]{x}", x=8) == pytest.approx(2)
    assert value(r"\sqrt[3]{x}", x=0.125) == pytest.approx(0.5)  # a positive base below 1
    zero = value(r"\sqrt[3]{x}", x=0)
    assert zero == 0 and math.copysign(1, zero.real) == 1  # +0, not -(0^{1/3}) = -0.0
    assert value(r"\sqrt[4]{x}", x=16) == pytest.approx(2)
    assert value(r"\sqrt[2]{x}", x=-4) == pytest.approx(2j)  # an even root: principal
    assert value(r"\sqrt[3]{x}", x=-8j) == pytest.approx(cmath.exp(-0.5j * math.pi) ** (1 / 3)
                                                          * 2 * cmath.exp(0j))
    assert undefined(r"\sqrt[0]{x}", x=4) and undefined(r"\sqrt[2.5]{x}", x=4)
    assert value(r"\sqrt[64]{x}", x=2.0**64) == pytest.approx(2) and undefined(
        r"\sqrt[65]{x}", x=2.0)
    assert value(r"\sqrt[1]{x}", x=-3) == -3
    assert value(r"\lfloor x \rfloor", x=2.5) == 2 and value(r"\lceil x \rceil", x=2.5) == 3
    assert undefined(r"\lfloor x \rfloor", x=2.5 + 1j)
    assert value(r"\binom{x}{2}", x=5) == 10 and value(r"\binom{5}{x}", x=1) == 5
    assert undefined(r"\binom{10001}{x}", x=1) and undefined(r"\binom{x}{10001}", x=1)
    assert value(r"\binom{10000}{x}", x=1) == 10000
    assert value(r"\operatorname{gcd}(x, 18)", x=12) == 6
    assert value(r"\operatorname{lcm}(x, 6)", x=4) == 12
    assert value(r"\operatorname{gcd}(x, 1)", x=10.0**15) == 1
    assert undefined(r"\operatorname{gcd}(x, 1)", x=10.0**15 + 2)
    assert value(r"\max(x, 3)", x=5) == 5 and value(r"\min(x, 3)", x=5) == 3
    assert undefined(r"\max(x, 3)", x=5j)
    assert value("x!!", x=7) == 105 and value("x!!", x=300) == float(math.prod(range(300, 0, -2)))
    assert undefined("x!!", x=301)
    with pytest.raises(numeric._Undefined):
        numeric_value(("fn", "foo", (("sym", "x"),)), {"x": 1j})  # no float value known


def test_near_natural_and_real_parts():
    assert value("x!", x=3 + 1e-10) == 6 and undefined("x!", x=3 + 1e-8)
    assert undefined("x!", x=3 - 1e-8) and undefined("x!", x=-1)
    assert value("x!", x=0) == 1
    assert value("x!", x=3 + 1e-9j) == 6  # exactly 1e-9 away is still near
    assert value(r"\lfloor x \rfloor", x=0.5 + 1e-9j) == 0  # exactly 1e-9 imaginary is real
    assert value(r"\lfloor x \rfloor", x=2.5 + 1e-10j) == 2
    assert undefined(r"\lfloor x \rfloor", x=2.5 - 1e-8j)
    assert value(r"\lfloor x \rfloor", x=-2000.5 + 1e-7j) == -2001  # 1e-9 of the real part
    assert undefined(r"\lfloor x \rfloor", x=0.5 + 2e-9j)


def test_complex_powers():
    assert value("x^{2}", x=0) == 0 and undefined("x^{-1}", x=0) and value("x^{0}", x=0) == 1
    assert value("x^{y}", x=0, y=0.5) == 0 and undefined("x^{y}", x=0, y=-0.5)
    assert value("x^{y}", x=0, y=0) == 1  # an integer power: 0^0 is 1
    assert value("x^{4096}", x=1) == 1 and value("x^{-4096}", x=-1) == pytest.approx(1)
    assert value("x^{4097}", x=-1) == pytest.approx(-1)
    assert value("x^{y}", x=-8, y=3) == -512
    assert value("x^{y}", x=2, y=1j) == pytest.approx(2**1j)
    assert value("x^{y}", x=1j, y=2.5) == pytest.approx(1j**2.5)
    assert value("x^{y}", x=1, y=1) == 1 and value("x^{y}", x=1, y=-1) == 1
    assert undefined("x^{y}", x=0, y=1j) and value("x^{y}", x=0, y=2 + 1j) == 0
    assert undefined("x^{y}", x=0, y=0.5j)


def test_numeric_value_refuses_what_has_no_finite_value():
    assert undefined("x^{y}", x=10.0, y=400)  # overflow
    assert undefined(r"\frac{1}{x}", x=0)
    assert undefined(r"\ln x", x=0)
    assert undefined(r"x \cdot 10^{300} \cdot 10^{300}", x=1)  # inf is no value


# ----------------------------------------------------------------------------- risks
def test_risks_of_sums():
    assert risks_of("x - y", x=1, y=1 + 1e-9) == ["sum"]  # cancellation
    assert risks_of("x - y", x=1, y=1.5) == []
    assert risks_of("x + y", x=1, y=1e-9) == ["sum"]  # a term below 1e-8 of the largest
    assert risks_of("x + y", x=1, y=1e-7) == []
    assert risks_of("x + y", x=1, y=0) == []  # a zero term loses nothing
    assert risks_of("x + y", x=-1, y=-2e-9) == ["sum"]
    assert risks_of("x + y", x=-3, y=-2) == []
    assert risks_of("x + y", x=1e-9j, y=1) == ["sum"]
    assert risks_of("x + y", x=2, y=-(2 - 2e-8)) == []  # the difference is exactly 1e-8 x 2
    assert risks_of("x + y", x=1, y=-1) == ["sum"]  # total 0 (below 1e-8 x 1)
    assert risks_of("x + y", x=1e-9, y=1e-9) == []  # small terms of a small sum
    # exactly 1e-8 of the largest term is not below it (a total, a term)
    assert risks_of("x + y + z", x=1, y=-1, z=1e-8) == []


def test_risks_of_powers_functions_and_floors():
    assert risks_of("x^{y}", x=2, y=1e-12) == ["near 1"]
    assert risks_of("x^{y}", x=2, y=1) == [] and risks_of("x^{y}", x=1, y=2) == []
    assert risks_of("x^{y}", x=2, y=-1e-12) == ["near 1"]
    assert risks_of("x^{y}", x=1 + 2e-8, y=1) == []  # 2e-8 away: not near
    assert risks_of("x^{y}", x=-1, y=1) == []
    assert risks_of("x^{y}", x=1 + 1e-8j, y=1) == []  # exactly 1e-8 away: not below it
    assert risks_of(r"\cos x", x=math.pi) == ["saturated"]  # |-1| is 1
    assert risks_of(r"\tanh x", x=40) == ["saturated"]
    assert risks_of(r"\cos x", x=1e-9) == ["saturated"]
    assert risks_of(r"\cos x", x=-1e-9) == ["saturated"] and risks_of(r"\cos x", x=1) == []
    assert risks_of(r"-\cos x", x=1e-9) == ["saturated"]
    assert risks_of(r"\exp x", x=1e-9j) == ["saturated"]  # |e^{i t}| is 1
    assert risks_of(r"\exp x", x=-1e-9) == ["saturated"] and risks_of(r"\exp x", x=0.7) == []
    assert risks_of(r"\max(x, 1)", x=0.5) == [] and risks_of(r"\min(x, 1)", x=2) == []
    assert risks_of(r"\sin x", x=1e9) == ["huge argument"]
    assert risks_of(r"\sin x", x=-1e9) == ["huge argument"]
    assert risks_of(r"\sin x", x=1e8) == []
    assert risks_of(r"\sin x", x=1.00000001e8) == ["huge argument"]
    assert risks_of(r"\ln x", x=1e9) == []  # not periodic
    assert risks_of(r"\max(x, 1)", x=1e9) == []
    assert risks_of(r"\lfloor x \rfloor", x=3) == ["floor"]
    assert risks_of(r"\lceil x \rceil", x=3 + 1e-10) == ["floor"]
    assert risks_of(r"\lfloor x \rfloor", x=3.5) == []
    assert risks_of(r"\lfloor x \rfloor", x=1e-9) == []  # exactly 1e-9 from 0: not below it
    assert risks_of(r"\lfloor x \rfloor", x=1.5e-9) == []  # 1e-9 x max(1, |x|)
    assert risks_of(r"\lfloor x \rfloor", x=3 + 4e-9) == []
    assert risks_of(r"\lfloor x \rfloor", x=-3 - 1e-10) == ["floor"]
    assert risks_of(r"\lfloor x \rfloor", x=-3.5) == []
    assert risks_of(r"\lfloor x \rfloor", x=-1.5) == []
    assert risks_of(r"\lfloor x \rfloor", x=2.5e9 + 1) == ["floor"]  # relative to |x|
    assert risks_of(r"\lfloor x \rfloor", x=2.5e9 + 0.5) == ["floor"]  # 0.5 < 1e-9 x 2.5e9
    assert risks_of(r"\lfloor x \rfloor", x=-2.5e9 - 0.5) == ["floor"]  # |x|, negative too
    assert risks_of(r"\lfloor x \rfloor", x=0.4e9 + 0.5) == []
    assert risks_of(r"\lfloor x \rfloor", x=2.0**53 + 2) == ["floor"]
    assert risks_of(r"\lfloor x \rfloor", x=0.5 + 1e-10) == []
    assert risks_of(r"\lfloor x \rfloor", x=200.5) == []  # 2^52, not 2 x 52
    assert risks_of(r"\lfloor x \rfloor", x=2.0**52 + 0.5) == ["floor"]  # beyond 2^52
    assert risks_of(r"\lfloor x \rfloor", x=-(2.0**52) - 2.5) == ["floor"]


# ----------------------------------------------------------------------------- tree walks
def test_free_symbols_has_approx_and_infinity_sign():
    assert free_symbols(P(r"x + \frac{y}{z^{w}} - \sin(u) \cdot v! + a")) == set("xyzwuva")
    assert free_symbols(P(r"\pi + 2")) == set()
    assert free_symbols(("rel", "=", (("sym", "x"), ("sym", "y")))) == {"x", "y"}
    assert has_approx(P("1.5")) and has_approx(P(r"\sin(2 \cdot 0.5)")) and has_approx(P("x^{0.5}"))
    assert not has_approx(P(r"\frac{1}{2} x")) and not has_approx(P("x"))
    assert has_approx(P("-2.5")) and has_approx(P("(0.5)!"))
    assert infinity_sign(P(r"\infty")) == 1 and infinity_sign(P(r"-\infty")) == -1
    assert infinity_sign(P(r"-(-\infty)")) == 1 and infinity_sign(P("5")) == 0
    assert infinity_sign(P(r"-5")) == 0 and infinity_sign(P("x")) == 0


# ----------------------------------------------------------------------------- sizes
def test_check_size_powers():
    check_size(P("2^{500000}"))  # 2 bits x 500000 = 10^6
    with pytest.raises(AnswerParseError, match="power too large"):
        check_size(P("2^{500001}"))
    with pytest.raises(AnswerParseError, match="power too large"):
        check_size(P("2^{-500001}"))
    with pytest.raises(AnswerParseError, match="power too large"):
        check_size(("pow", num(2**100), num(9901)))  # 101 bits x 9901 = 1000001
    check_size(("pow", num(Fraction(1, 2**100)), num(9900)))
    with pytest.raises(AnswerParseError, match="power too large"):
        check_size(("pow", num(Fraction(1, 2**100)), num(9901)))  # the denominator's bits
    check_size(P("1^{1000000}"))
    check_size(P("(-1)^{-1000000}"))
    check_size(P("0^{1000000}"))
    check_size(P(r"\pi^{1000000}"))  # a symbolic base: the exponent's size
    with pytest.raises(AnswerParseError, match="exponent too large"):
        check_size(P(r"\pi^{1000001}"))
    with pytest.raises(AnswerParseError, match="exponent too large"):
        check_size(P(r"\pi^{-1000001}"))
    with pytest.raises(AnswerParseError, match="exponent too large"):
        check_size(P("1^{1000001}"))
    with pytest.raises(AnswerParseError, match="exponent too large"):
        check_size(P("0^{1000001}"))  # the exponent's size, not the power's bits
    with pytest.raises(AnswerParseError, match="exponent too large"):
        check_size(P("(-1)^{1000001}"))
    check_size(P("x^{1000001}"))  # a variable base stays symbolic
    check_size(P(r"x + \sin(2^{3})"))
    with pytest.raises(AnswerParseError):
        check_size(P(r"x + \sin(2^{10^{7}})"))  # found inside a function and a sum
    with pytest.raises(AnswerParseError):
        check_size(P(r"\frac{1}{2^{10^{7}}}"))
    with pytest.raises(AnswerParseError):
        check_size(P(r"3^{2^{10^{7}}}"))  # inside an exponent


def test_check_size_symbolic_exponents():
    check_size(P(r"e^{e^{e^{2}}}"))  # a symbolic base: symbolic powers stay
    check_size(P(r"2^{\pi}"))  # a float exponent of a rational base
    check_size(P(r"2^{x}"))
    with pytest.raises(AnswerParseError, match="exponent too large"):
        check_size(P(r"2^{e^{10^{3}}}"))  # no float value
    check_size(P(r"1^{e^{10^{3}}}"))
    check_size(P(r"0^{e^{10^{3}}}"))
    check_size(P(r"(-1)^{e^{10^{3}}}"))
    with pytest.raises(AnswerParseError, match="exponent too large"):
        check_size(P(r"(-2)^{e^{10^{3}}}"))
    with pytest.raises(AnswerParseError, match="exponent too large"):
        check_size(P(r"2^{2^{\pi \cdot 10^{3}}}"))


def test_check_size_factorials():
    check_size(P("20000!"))
    with pytest.raises(AnswerParseError, match="factorial of 20001"):
        check_size(P("20001!"))
    with pytest.raises(AnswerParseError, match="factorial of -20001"):
        check_size(P("(-20001)!"))
    check_size(P("(-20000)!"))
    with pytest.raises(AnswerParseError, match="factorial of 20001"):
        check_size(P("20001!!"))
    check_size(P("20000!!"))
    with pytest.raises(AnswerParseError, match="too large to evaluate"):
        check_size(P(r"(\pi \cdot 10^{9000})!"))
    check_size(P(r"x!") )
    with pytest.raises(AnswerParseError, match="too large to evaluate"):
        check_size(P(r"(\pi)!"))  # no exact value, no variable: refused
    with pytest.raises(AnswerParseError, match="factorial"):
        check_size(P("x + 1 + (20001!)"))
    with pytest.raises(AnswerParseError, match="factorial"):
        check_size(P(r"\frac{2}{(20001!)}"))
    with pytest.raises(AnswerParseError, match="factorial"):
        check_size(P(r"(20001!)^{2}"))
    with pytest.raises(AnswerParseError, match="factorial"):
        check_size(P(r"(20001!)!"))
    check_size(P(r"\sin(x)!!"))


# ----------------------------------------------------------------------------- scalar_equal
def test_exact_comparisons():
    assert equal(r"\frac{2}{4}", "0.5") is True
    assert equal("3", r"\frac{6}{2}") is True and equal("3", "4") is False
    assert equal(r"\frac13", "0.3333333") is True and equal("0.3333334", r"\frac13") is False
    assert equal("0.33", r"\frac13") is False and equal(r"\frac13", "0.33") is False
    assert equal("0.5", "0.50000001") is True  # both rounded: within 1e-6
    assert equal("0.5", "0.5001") is False
    assert equal("1000001.0", "1000000") is False and equal("1000000", "1000000.4") is False
    assert equal(r"\frac{2}{3}", "0.6666667") is True and equal("0.6666667", r"\frac{2}{3}") is True
    assert equal(r"-\frac{2}{3}", "-0.6666667") is True
    assert equal(r"\frac{2}{3}", "0.6666666") is False  # within 1e-6, but not 2/3 rounded
    assert equal(r"\frac{1}{3} \cdot 10^{6}", r"3.333333 \times 10^{5}") is True
    assert equal(r"\frac{1}{3} \cdot 10^{6}", r"3.333334 \times 10^{5}") is False


def test_an_exact_integer_equals_only_itself():
    assert equal("2", r"2.0000001 \cdot \pi^{0}") is False
    assert equal(r"2.0000001 \cdot \pi^{0}", "2") is False
    assert equal("2", r"2.0 \cdot \frac{\pi}{\pi}") is False  # a decimal vs an exact integer
    assert equal(r"\frac{1}{2}", r"0.5 \cdot \frac{\pi}{\pi}") is True  # not an integer
    assert equal(r"0.5 \cdot \frac{\pi}{\pi}", r"\frac{1}{2}") is True


def test_infinities():
    assert equal(r"\infty", r"\infty") is True and equal(r"-\infty", r"\infty") is False
    assert equal(r"\infty", "5") is False and equal("5", r"-\infty") is False
    assert equal(r"-\infty", r"-\infty") is True


def test_symbols_count_and_tolerances():
    many = " + ".join(f"x_{{{k}}}" for k in range(17))
    assert equal(many, " + ".join(f"x_{{{k}}}" for k in reversed(range(17)))) is None
    sixteen = " + ".join(f"x_{{{k}}}" for k in range(16))
    assert equal(sixteen, " + ".join(f"x_{{{k}}}" for k in reversed(range(16)))) is True
    assert equal(r"\pi", "3") is False and equal(r"\pi", r"\pi") is True
    assert equal(r"\pi", "3.141593") is True and equal(r"\pi", "3.14158") is False
    assert equal(r"\pi", "3.1415926536") is True and equal("3.1415926536", r"\pi") is True
    assert equal(r"\pi \cdot 10^{6}", r"3.141593 \times 10^{6}") is True  # the unit scales
    assert equal(r"\pi", "3.141592") is False  # within 1e-6, not pi rounded
    assert equal("x + 1.000001", "x + 1") is False
    assert equal("2.0x", "2x") is True and equal("2x", "2.1x") is False
    assert equal("x + x", "2x") is True and equal("x + x", "3x") is False
    assert equal(r"\sqrt{2} + 10^{-8}", r"\sqrt{2}") is False  # exact tolerance 1e-9
    assert equal(r"\sqrt{2} + 10^{-10}", r"\sqrt{2}") is False  # confirmed by mpmath


def test_how_many_points_must_agree():
    three = r"\lfloor \sqrt{a} \rfloor + \lfloor \sqrt{b} \rfloor"  # defined at 3 points
    assert equal(three, r"\lfloor \sqrt{b} \rfloor + \lfloor \sqrt{a} \rfloor") is True
    pad = " + 0a + 0b + 0d + 0g"  # c and h are both positive at only 2 points
    two = r"\lfloor \sqrt{c} \rfloor + \lfloor \sqrt{h} \rfloor" + pad
    assert equal(two, r"\lfloor \sqrt{h} \rfloor + \lfloor \sqrt{c} \rfloor" + pad) is None
    assert equal(r"\frac{1}{x - x}", r"\frac{1}{x - x}") is None  # nowhere defined
    assert equal(r"\frac{1}{0 \pi}", r"\frac{1}{0 \pi}") is None
    assert equal(r"\pi + e", r"e + \pi") is True  # a constant: one point is enough


def test_doubles_that_disagree_are_asked_again_when_at_risk():
    # (x^{20} + x) - x^{20} loses x to cancellation in doubles at the larger points
    assert equal("(x^{20} + x) - x^{20}", "x") is True
    assert equal("(x^{20} + x) - x^{20}", "2x") is False
    assert equal(r"e^{50} + 1", r"e^{50}") is False  # agree as doubles: mpmath says no
    assert equal(r"e^{-30}", "0") is False
    assert equal(r"\sin(\pi)", "0") is True  # doubles say 1.2e-16: mpmath says 0
    assert equal(r"e^{-30} x", "0 x") is False  # 0 on one side only: confirmed
    # e^{-40} x is within 1e-12 of 0 at every point, with no risk: a zero on one side only
    # is confirmed with mpmath
    assert equal(r"e^{-40} x", "0 x") is False and equal("0 x", r"e^{-40} x") is False


def test_far_points_see_large_constants():
    assert equal(r"\max(5, x)", "x") is False and equal(r"\max(10^{6}, x)", "x") is False
    assert equal(r"\max(10^{6}, x)", r"10^{6}") is False
    # the far point disagrees where doubles are at risk (a term below 1e-8): mpmath says no
    assert equal(r"\max(10^{6}, x) + 10^{-9}", r"10^{6} + 10^{-9}") is False
    assert equal(r"\max(x, 1)", r"\max(1, x)") is True
    assert equal(r"\lfloor \frac{x^2}{4} \rfloor", r"\frac{x^2}{4}") is False
    assert equal(r"\lfloor \frac{x^2}{100} \rfloor", r"\lfloor \frac{x^2}{100} \rfloor") is True
    assert equal(r"\max(-6, x)", "x") is False  # the far point below -6
    assert equal(r"\min(6, x)", "x") is False
    assert equal(r"\min(-6, x)", "x") is False


def test_far_point_coordinates():
    x0 = abs(SAMPLE_POINTS[0][0])
    far = numeric._far_points(P(r"\max(10, x)"), P("x"), ["x"])
    assert far == [{"x": (3 + x0) * 10}, {"x": -(3 + x0) * 10}]
    y0 = abs(SAMPLE_POINTS[0][1])
    far = numeric._far_points(P(r"x + 2^{5} y"), P(r"3! + 7"), ["x", "y"])
    assert far == [{"x": (3 + x0) * 32, "y": (3 + y0) * 32},
                   {"x": -(3 + x0) * 32, "y": -(3 + y0) * 32}]
    assert numeric._far_points(P(r"x \cdot \frac{7}{2}"), P("x"), ["x"])[0] == {"x": (3 + x0) * 3.5}
    assert numeric._far_points(P(r"\sqrt{10} x"), P("x"), ["x"])[0]["x"] == pytest.approx(
        (3 + x0) * math.sqrt(10))
    assert numeric._far_points(P("x - 5"), P("x"), ["x"])[0] == {"x": (3 + x0) * 5}
    assert numeric._far_points(P("x + 2"), P("x"), ["x"]) == []  # nothing above 2
    assert numeric._far_points(P("x + 2.5"), P("x"), ["x"])[0] == {"x": (3 + x0) * 2.5}
    assert numeric._far_points(P(r"x + 10^{12}"), P("x"), ["x"])[0] == {"x": (3 + x0) * 1e12}
    assert numeric._far_points(P(r"x + 10^{13}"), P("x"), ["x"]) is None  # left to sympy
    assert numeric._far_points(P("x + 1000000000000.5"), P("x"), ["x"]) is None
    names = ["a", "b", "c", "d", "g"]  # the 5th coordinate of the first point is negative
    assert SAMPLE_POINTS[0][4] < 0
    far = numeric._far_points(P("10 a"), P("a"), names)[0]
    assert far == {n: (3 + abs(SAMPLE_POINTS[0][j])) * 10 for j, n in enumerate(names)}
    assert numeric._far_points(P("10"), P("10"), []) == []
    assert numeric._far_points(P(r"x + \frac{1}{0}"), P("x + 3"), ["x"])[0] == {"x": (3 + x0) * 3}
    assert numeric._far_points(P("x + 3!"), P("x"), ["x"])[0] == {"x": (3 + x0) * 6}
    assert numeric._far_points(P(r"x + \sqrt{x} \cdot 9"), P("x"), ["x"])[0] == {"x": (3 + x0) * 9}


# ----------------------------------------------------------------------------- rounding
def test_half_units():
    assert half_unit(P("2.50")) == Fraction(1, 200) and half_unit(P("-2.50")) == Fraction(1, 200)
    assert half_unit(P("--2.5")) == Fraction(1, 20)
    assert half_unit(P("2")) is None and half_unit(P(r"\frac{1}{2}")) is None
    assert half_unit(P(r"1.25 \times 10^{4}")) == Fraction(50)
    assert half_unit(P(r"1.25 \times 10^{-4}")) == Fraction(1, 2_000_000)
    assert half_unit(P(r"1.25 \times 10^{400}")) == Fraction(10**398, 2)
    assert half_unit(P(r"1.25 \times 10^{401}")) is None
    assert half_unit(P(r"1.25 \times 10^{-401}")) is None
    assert half_unit(P(r"1.25 \times 10^{-400}")) == Fraction(1, 2 * 10**402)
    assert half_unit(P(r"1.25 \times 10^{\frac{1}{2}}")) is None
    assert half_unit(P(r"1.25 \times 10^{x}")) is None
    assert half_unit(P(r"1.25 \times 11^{4}")) is None
    assert half_unit(P(r"1.25 \times 10.0^{4}")) is None
    assert half_unit(P(r"1.25 \times x")) is None and half_unit(P(r"x \times 10^{4}")) is None
    assert half_unit(P(r"2 \times 10^{4}")) is None
    assert half_unit(P(r"1.25 \times 10^{4} \times 10^{4}")) is None
    assert half_unit(("mul", (num(10), ("num", Fraction(5, 4), Fraction(1, 200))))) is None
    assert half_unit(P("1.2e3")) == Fraction(50) and half_unit(("num", Fraction(3), True)) is None


def test_rounded_agreement_of_two_exact_values():
    # one side rounded: it must be the other rounded at its precision (and within 1e-6)
    assert equal("0.125", r"\frac{1}{8}") is True
    assert equal("0.1250000", r"\frac{1}{8}") is True
    assert equal(r"\frac{1}{7}", "0.1428571") is True
    assert equal(r"\frac{1}{7}", "0.1428572") is False
    assert equal(r"-\frac{1}{7}", "-0.1428572") is False and equal(r"-\frac{1}{7}", "-0.1428571")
    assert equal(r"\frac{1}{7}", "-0.1428571") is False
    assert equal(r"\frac{1}{7} \cdot 10^{-3}", r"1.428571 \times 10^{-4}") is True
    # the rounded side written as a product is not a decimal alone: only 1e-6 applies
    assert equal(r"\frac{1}{7}", r"2 \cdot 0.07142857") is True
    assert equal(r"2 \cdot 0.07142857", r"\frac{1}{7}") is True
    # exactly half a unit away still rounds
    assert equal(r"\frac{12345}{100000} + \frac{1}{2} \cdot 10^{-7}", "0.1234500") is True
    assert equal(r"\frac{12345}{100000} + \frac{1}{2} \cdot 10^{-7} + 10^{-20}",
                 "0.1234500") is False
    assert equal("0.1234500", r"\frac{12345}{100000} + \frac{1}{2} \cdot 10^{-7}") is True
    # exactly the relative tolerance
    # two decimals agree only within half a unit of the coarser one's last digit
    assert equal("0.9999991", "1.0000000") is False and equal("0.9999989", "1.0") is False
    assert equal("1.00000004", "1.0000000") is True
    assert equal("1.0", "0.9999991") is True and equal("-1.0", "-0.9999991") is True
    # the tolerance is relative to the larger magnitude, negative values too
    assert equal("-1.000001", "-1.0") is True and equal("-1.0", "-1.000001") is True
    # an exact integer is never a rounded value: 1.0e9 is not 1000000007 (nor 1.0e6 1000001)
    assert equal("1000000007", "1.0e9") is False and equal("1.0e6", "1000001") is False
    one, tol = Fraction(1), Fraction(numeric.REL_TOL_APPROX)  # exactly 1e-6 apart (as a float)
    assert numeric._rounded_agree(P("1.0"), one, True, P("1.0"), one - tol, True) is True
    assert numeric._rounded_agree(P("1.0"), one, True, P("1.0"), one - 2 * tol, True) is False


def test_rounding_with_float_values():
    # one exact side that floats evaluate, one decimal: within half a unit (plus float noise)
    assert equal(r"\sqrt{2}", "1.414214") is True and equal(r"\sqrt{2}", "1.414213") is False
    assert equal("1.414214", r"\sqrt{2}") is True and equal("1.414213", r"\sqrt{2}") is False
    assert equal(r"-\sqrt{2}", "-1.414214") is True
    assert equal(r"\sqrt{2} \cdot 10^{5}", r"1.414214 \times 10^{5}") is True
    assert equal(r"\sqrt{2} \cdot 10^{5}", r"1.414213 \times 10^{5}") is False
    assert equal(r"\sqrt{2}", r"1.414214 \cdot \frac{\pi}{\pi}") is True  # no unit: 1e-6 only
    assert equal(r"\sqrt{2}", "1.4142136") is True and equal(r"\sqrt{2}", "1.4142135") is False
    assert equal("2.5x", "2.5x") is True and equal("2.5x", "2.50x") is True
    # half a unit, with a float slack of 1e-9 of it plus 1e-15 of the value
    half, slack = numeric.half_unit(P("0.5")), 1 + 1e-9
    unit = float(half)
    within = numeric._within_rounding
    assert within(P("0.5"), True, 0j, P("x"), False, complex(unit * slack)) is True
    assert within(P("0.5"), True, 0j, P("x"), False, complex(unit * (1 + 0.5e-9))) is True
    assert within(P("x"), False, complex(unit * slack), P("0.5"), True, 0j) is True
    assert within(P("0.5"), True, 0j, P("x"), False, complex(unit * (1 + 2e-9))) is False
    big = 1e6  # + 1e-15 x 1e6 = 1e-9 of slack
    assert within(P("0.5"), True, big + 0j, P("x"), False, big + unit + 5e-10 + 0j) is True
    assert within(P("0.5"), True, big + 0j, P("x"), False, big + unit + 2e-9 + 0j) is False


def test_close():
    assert close(1 + 0j, 1 + 0j, 0.0) and not close(1 + 0j, -1 + 0j, 0.5)
    assert close(2 + 0j, 1 + 0j, 0.5) and not close(2 + 0j, 1 + 0j, 0.49)
    assert close(200 + 0j, 100 + 0j, 0.5) and close(-2 + 0j, -1 + 0j, 0.5)
    assert not close(1e-12 + 0j, 0j, 0.0) and not close(2e-12 + 0j, 0j, 1e-9)  # no absolute floor
    assert not close(0.5 + 0j, 0j, 1e-9) and not close(1e-13 + 0j, -1e-13 + 0j, 0.0)
    assert close(1j, 1.0000001j, 1e-6) and not close(1j, 1.00001j, 1e-6)


def test_proportionality():
    assert proportionality(P("2x + 2"), P("x + 1")) == 2
    assert proportionality(P("x + 1"), P("3x + 3")) == Fraction(1, 3)
    assert proportionality(P("-x"), P("x")) == -1
    assert proportionality(P("x^{2}"), P("x")) is None  # not a constant ratio: not rational
    assert proportionality(P("x - x"), P("x")) is None  # 0 at every point
    assert proportionality(P("x"), P("x - x")) is None
    assert proportionality(P(r"\frac{x}{x - x}"), P("x")) is None  # no value anywhere
    assert proportionality(P("i x"), P("x")) is None  # an imaginary ratio
    assert proportionality(P(r"\frac{x}{10001}"), P("x")) is None  # a large denominator
    assert proportionality(P(r"\frac{x}{9973}"), P("x")) == Fraction(1, 9973)
    assert proportionality(P(r"\pi x"), P("x")) is None
    assert proportionality(P(r"(1 + 10^{-8}) x"), P("x")) is None
    assert proportionality(P(r"(1 + 10^{-12}) x"), P("x")) == 1
    assert proportionality(P(r"(-1 - 10^{-12}) x"), P("x")) == -1
    assert proportionality(P(r"(-1 - 10^{-8}) x"), P("x")) is None
    assert proportionality(P("2"), P("1")) == 2
    assert proportionality(P("1"), P("2")) == Fraction(1, 2)
    assert proportionality(P(r"1 + 10^{-9} i"), P("1")) == 1  # exactly 1e-9: still real
    assert proportionality(P(r"x (1 - 10^{-8} i)"), P("x")) is None  # either sign
    assert proportionality(P(r"1000 + 10^{-7} i"), P("1")) == 1000  # 1e-9 of |ratio|
    floor = r"\frac{1}{\lfloor x \rfloor - 1}"  # no value at the first point (x = 1.83)
    assert proportionality(P(f"2 {floor}"), P(floor)) == 2
    many = " + ".join(f"x_{{{k}}}" for k in range(17))
    assert proportionality(P(many), P(many)) is None
    sixteen = " + ".join(f"x_{{{k}}}" for k in range(16))
    assert proportionality(P(sixteen), P(sixteen)) == 1
    assert proportionality(P(r"x \cdot (1 + 10^{-8} i)"), P("x")) is None
    assert proportionality(P("2x + 0 y"), P("x")) == 2
    assert proportionality(P("x"), P("2x + 0y")) == Fraction(1, 2)


def test_at_most_two_points_are_confirmed_with_mpmath(monkeypatch):
    calls = []

    def counting(*args, **kwargs):
        calls.append(args)
        return True

    monkeypatch.setattr(numeric, "precise_equal", counting)
    # a term below 1e-8 of x puts every sample point in doubt: only two are confirmed
    assert equal(r"x + 10^{-20}", r"x + 10^{-20}") is True
    assert len(calls) == 2
