"""The three kinds of tests a program can be run against.

Lists are accepted wherever tuples are documented; they are normalised to tuples.
"""

from __future__ import annotations

import ast
import builtins
import math
from dataclasses import dataclass
from typing import Any

from rlvr.verifiers.code.protocol import (
    EncodeError,
    bound_names,
    encode,
    free_names,
    in_place_test,
    parse_source,
)
from rlvr.verifiers.errors import InvalidArgumentError


@dataclass(frozen=True)
class AssertTests:
    """HumanEval style: ``test_code`` defines ``check(candidate)``; ``entry_point`` is tested.

    Each top-level statement of ``check``'s body that mentions ``candidate`` is one test (the
    others are set-up that runs in order); when the body cannot be split (e.g. it has a top-level
    ``return``), the whole ``check(candidate)`` call is one test. The test code runs in its own
    process; every call of the candidate is a round trip whose arguments and result must be
    plain data (see :func:`~rlvr.verifiers.code.protocol.encode`).

    The program provides exactly one thing: ``entry_point`` (passed as ``candidate``, and bound
    under its own name too). Every other name the test code reads must be a builtin or be
    defined by the test code itself or by ``helpers``: trusted source (HumanEval's prompt, with
    its ``poly`` or ``encode_cyclic``) that runs in the tester before the test code, so a
    program can neither rewrite a helper the tests grade with nor see an expected value that
    the tests pass to one.

    Raises:
        InvalidArgumentError: the test code does not parse, defines no ``check``, or has a test
            that relies on the candidate mutating its argument in place (``candidate(xs)`` as a
            statement, then ``xs`` read again): the program works on a copy, so no program could
            pass it.
    """

    test_code: str
    entry_point: str
    helpers: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.test_code, str):
            raise InvalidArgumentError(
                f"AssertTests.test_code must be a str, got {type(self.test_code).__name__}"
            )
        if not isinstance(self.entry_point, str) or not self.entry_point.isidentifier():
            raise InvalidArgumentError(
                f"AssertTests.entry_point must be a Python identifier, got {self.entry_point!r}"
            )
        try:
            tree = parse_source(self.test_code)
        except SyntaxError as exc:
            raise InvalidArgumentError(f"AssertTests.test_code does not parse: {exc}") from None
        if not any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body):
            raise InvalidArgumentError("AssertTests.test_code must define check(candidate)")
        if not isinstance(self.helpers, str):
            raise InvalidArgumentError(
                f"AssertTests.helpers must be a str, got {type(self.helpers).__name__}"
            )
        try:
            parse_source(self.helpers)
        except (SyntaxError, ValueError) as exc:
            raise InvalidArgumentError(f"AssertTests.helpers does not parse: {exc}") from None
        unknown = sorted(free_names(self.test_code) - bound_names(self.helpers)
                         - set(dir(builtins)) - {self.entry_point})
        if unknown:
            raise InvalidArgumentError(
                f"AssertTests.test_code reads {unknown} but neither it nor AssertTests.helpers "
                "defines them: helpers the tests use must be trusted code (put their source, "
                "e.g. the task's prompt, in AssertTests.helpers), never the program's"
            )
        in_place = in_place_test(self.test_code)
        if in_place is not None:
            raise InvalidArgumentError(
                f"AssertTests.test_code tests an in-place change ({in_place!r}): arguments cross "
                "to the program as copies, so test the return value instead"
            )


@dataclass(frozen=True)
class StdioTests:
    """Each case is ``(stdin, expected_stdout)``; the program runs once per case as ``__main__``.

    A case passes when the program exits with status 0 and its stdout equals the expected text
    after stripping trailing whitespace from every line and trailing blank lines.
    """

    cases: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        cases = _as_tuple(self.cases, "StdioTests.cases")
        if not cases:
            raise InvalidArgumentError("StdioTests.cases must hold at least one case")
        for i, case in enumerate(cases):
            pair = _as_tuple(case, f"StdioTests.cases[{i}]")
            if len(pair) != 2 or not all(isinstance(s, str) for s in pair):
                raise InvalidArgumentError(
                    f"StdioTests.cases[{i}] must be a (stdin: str, expected_stdout: str) pair"
                )
        object.__setattr__(self, "cases", tuple(tuple(c) for c in cases))


@dataclass(frozen=True)
class CallTests:
    """Function-call cases ``(args, expected)``: the program's ``function(*args)`` must equal it.

    The result is converted to plain data inside the sandbox and compared in the parent process
    (see :func:`values_equal`), so an object with a rigged ``__eq__`` never reaches the comparison.
    """

    function: str
    cases: tuple[tuple[tuple[Any, ...], Any], ...]

    def __post_init__(self) -> None:
        if not isinstance(self.function, str) or not self.function.isidentifier():
            raise InvalidArgumentError(
                f"CallTests.function must be a Python identifier, got {self.function!r}"
            )
        cases = _as_tuple(self.cases, "CallTests.cases")
        if not cases:
            raise InvalidArgumentError("CallTests.cases must hold at least one case")
        out = []
        for i, case in enumerate(cases):
            pair = _as_tuple(case, f"CallTests.cases[{i}]")
            if len(pair) != 2:
                raise InvalidArgumentError(f"CallTests.cases[{i}] must be an (args, expected) pair")
            args = _as_tuple(pair[0], f"CallTests.cases[{i}] args")
            try:
                encode(list(args))
                encode(pair[1])
            except EncodeError as exc:
                raise InvalidArgumentError(
                    f"CallTests.cases[{i}] is not plain data: {exc}"
                ) from None
            out.append((args, pair[1]))
        object.__setattr__(self, "cases", tuple(out))


TestSpec = AssertTests | StdioTests | CallTests


def _as_tuple(value: Any, name: str) -> tuple[Any, ...]:
    if isinstance(value, (tuple, list)):
        return tuple(value)
    raise InvalidArgumentError(f"{name} must be a tuple or list, got {type(value).__name__}")


def normalize_output(text: str) -> str:
    """Stdout as compared by :class:`StdioTests`: trailing whitespace and blank lines dropped."""
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")


def values_equal(got: Any, expected: Any, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Compares a decoded result with an expected value (both plain data), in the parent.

    * Lists and tuples are interchangeable; dicts and sets are compared by their elements.
    * Bools only equal bools.
    * An int expected value is exact: ``got`` must equal it exactly (an int, or a float with
      exactly that value), never a float approximation. To accept approximations of an integer
      answer, write the expected value as a float (``3.0``): the task says so.
    * A float expected value accepts ints and floats within ``rel_tol``/``abs_tol``.
    * Non-finite values match only themselves: ``inf`` only ``inf`` (same sign), NaN only NaN;
      a finite expected value is never matched by ``inf`` or NaN, whatever the tolerance.
    * Complex numbers compare their real and imaginary parts like floats.
    """
    if isinstance(got, bool) or isinstance(expected, bool):
        return type(got) is type(expected) and got == expected
    num = (int, float)
    if isinstance(got, num) and isinstance(expected, num):
        if isinstance(expected, int):
            return got == expected and (isinstance(got, int) or math.isfinite(got))
        try:
            return _floats_close(float(got), expected, rel_tol, abs_tol)
        except OverflowError:  # an int beyond float range is near no finite float
            return False
    if isinstance(got, complex) and isinstance(expected, complex):
        return (_floats_close(got.real, expected.real, rel_tol, abs_tol)
                and _floats_close(got.imag, expected.imag, rel_tol, abs_tol))
    seq = (list, tuple)
    if isinstance(got, seq) and isinstance(expected, seq):
        return len(got) == len(expected) and all(
            values_equal(a, b, rel_tol, abs_tol) for a, b in zip(got, expected)
        )
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(
            values_equal(got[k], expected[k], rel_tol, abs_tol) for k in got
        )
    if type(got) is not type(expected):
        return False
    return bool(got == expected)


def _floats_close(g: float, e: float, rel_tol: float, abs_tol: float) -> bool:
    if math.isnan(g) or math.isnan(e):
        return math.isnan(g) and math.isnan(e)
    if math.isinf(g) or math.isinf(e):
        return g == e
    return abs(g - e) <= max(abs_tol, rel_tol * max(abs(g), abs(e)))
