"""A safe arithmetic evaluator: parses with ``ast`` and walks a whitelist of nodes, never ``eval``.

Integers and their quotients stay exact (:class:`fractions.Fraction`); a float literal or a
function such as ``sqrt`` switches to floating point. Guards keep every evaluation small: the
expression length, the nesting depth, exponents, and the size of every intermediate integer.
"""

from __future__ import annotations

import ast
import io
import math
import operator
import tokenize
from collections.abc import Callable
from fractions import Fraction

from rlvr.verifiers.code.protocol import parse_source

Number = Fraction | float

MAX_EXPRESSION_CHARS = 1_000
MAX_DEPTH = 60
MAX_RESULT_BITS = 4_096
MAX_EXPONENT = 10_000


class CalculatorError(ValueError):
    """The expression is not allowed, not well formed, or too large to evaluate."""


_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}

_FUNCTIONS: dict[str, Callable[..., float | int]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "floor": math.floor,
    "ceil": math.ceil,
}

_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression safely.

    Args:
        expression: e.g. ``"(12 + 7) * 3 / 4"``, ``"2**10"``, ``"sqrt(2) * pi"``. Supports
            ``+ - * / // % **``, unary signs, parentheses, ``^`` as power, the functions in
            ``sqrt abs round min max log log10 exp sin cos tan floor ceil`` and ``pi``, ``e``.

    Returns:
        A :class:`~fractions.Fraction` when the computation stayed exact, else a float.

    Raises:
        CalculatorError: for anything else (names, attribute access, calls to other functions),
            syntax errors, division by zero, and results or exponents beyond the guards.
    """
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    source = expression.replace("^", "**").replace("×", "*").replace("÷", "/").strip()
    if not source:
        raise CalculatorError("empty expression")
    if _has_words_python_warns_about(source):
        raise CalculatorError(f"not a valid expression: {expression!r}")
    try:
        tree = parse_source(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise CalculatorError(f"not a valid expression: {expression!r}") from exc
    try:
        return _eval(tree.body, 0)
    except ZeroDivisionError as exc:
        raise CalculatorError("division by zero") from exc
    except (OverflowError, RecursionError) as exc:
        raise CalculatorError("result too large") from exc


def _has_words_python_warns_about(source: str) -> bool:
    """Whether ``source`` holds what Python's parser warns about before refusing it.

    ``1if``, ``2or 3`` (a number run into a word: ``SyntaxWarning: invalid decimal literal``)
    and backslashes in strings (invalid escapes) make the parser print a warning on stderr on
    every call: a model that writes them each episode would flood the run's output. ``tokenize``
    reads the same tokens silently; neither is arithmetic.
    """
    previous = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING and "\\" in token.string:
                return True
            if (token.type == tokenize.NAME and previous is not None
                    and previous.type == tokenize.NUMBER and previous.end == token.start):
                return True
            previous = token
    except (tokenize.TokenError, SyntaxError):  # the parser refuses it below
        pass
    return False


def format_number(value: Number, *, digits: int = 12) -> str:
    """Render a result: exact integers as integers, anything else with ``digits`` significant."""
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return str(value.numerator)
        value = float(value)
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.{digits}g}"


def _eval(node: ast.AST, depth: int) -> Number:
    if depth > MAX_DEPTH:
        raise CalculatorError(f"expression nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, ast.Constant):
        return _constant(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand, depth + 1)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, depth + 1)
        right = _eval(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _checked(_power(left, right))
        function = _BINARY.get(type(node.op))
        if function is None:
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed")
        return _checked(function(left, right))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise CalculatorError(f"unknown name {node.id!r}; allowed: {', '.join(_CONSTANTS)}")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _FUNCTIONS.get(node.func.id)
        if function is None:
            allowed = ", ".join(_FUNCTIONS)
            raise CalculatorError(f"unknown function {node.func.id!r}; allowed: {allowed}")
        args = [_eval(arg, depth + 1) for arg in node.args]
        try:
            result = function(*(float(a) for a in args))
        except (TypeError, ValueError) as exc:
            raise CalculatorError(f"{node.func.id}: {exc}") from exc
        return _checked(float(result))
    raise CalculatorError(f"{type(node).__name__} is not allowed in an arithmetic expression")


def _constant(value: object) -> Number:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError(f"only numbers are allowed, got {value!r}")
    return Fraction(value) if isinstance(value, int) else float(value)


def _power(base: Number, exponent: Number) -> Number:
    if isinstance(exponent, Fraction) and exponent.denominator == 1:
        power = exponent.numerator
        if abs(power) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {power} is larger than {MAX_EXPONENT}")
        if isinstance(base, Fraction):
            bits = max(abs(base.numerator).bit_length(), base.denominator.bit_length())
            if bits * abs(power) > MAX_RESULT_BITS:
                raise CalculatorError("result too large")
            if base == 0 and power < 0:
                raise ZeroDivisionError
            return base**power
        return float(base) ** power
    if float(base) < 0:
        raise CalculatorError("a negative number to a fractional power is not real")
    return float(base) ** float(exponent)


def _checked(value: Number | int | complex) -> Number:
    if isinstance(value, complex):
        raise CalculatorError("the result is not a real number")
    if isinstance(value, int):  # // and % on fractions give ints
        value = Fraction(value)
    if isinstance(value, Fraction):
        if max(abs(value.numerator).bit_length(), value.denominator.bit_length()) > MAX_RESULT_BITS:
            raise CalculatorError("result too large")
        return value
    if not math.isfinite(value):
        raise CalculatorError("result too large")
    return value
