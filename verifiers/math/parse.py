r"""Parse a normalised LaTeX answer into an answer structure (no sympy).

An answer is one expression, or a structure of them (:mod:`rlvr.verifiers.math.tree`): a list
or set (``1, 2``; ``\{1, 2\}``), a tuple, vector or interval (``(1, 2]``), a union (``\cup``),
a matrix (``pmatrix``, ``bmatrix``, ...), a ratio ``a:b`` (``Ratio``; ``10:30`` is a time of
day), a relation (``x \le 3`` becomes the interval ``(-\infty, 3]``). ``a \pm b`` is the set of
both; ``2\frac{1}{2}``, ``1 \tfrac12`` and ``1 1/2`` written alone are mixed numbers (3/2). Each
expression is read by :mod:`rlvr.verifiers.math.expression`, which states its own conventions.

Structures nest at most 8 levels and expressions ``expression.MAX_DEPTH``, on at most
``tokens.MAX_TOKENS`` tokens, so parsing runs in time linear in its input and never overflows
the stack.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rlvr.verifiers.errors import AnswerParseError
from rlvr.verifiers.math.expression import parse_tokens
from rlvr.verifiers.math.tokens import Token, closes_at_end, split_top, tokenize
from rlvr.verifiers.math.tree import (
    INFINITY,
    Answer,
    Bracketed,
    Expr,
    Matrix,
    Node,
    Ratio,
    Relation,
    SetOf,
    UnionOf,
)

__all__ = ["parse_answer"]

_MATRIX_ENVS = ("pmatrix", "bmatrix", "Bmatrix", "matrix", "array", "smallmatrix")
_MIXED_NUMBERS = (
    re.compile(r"^(-?)\s*(\d+)\s*\\frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))$"),
    re.compile(r"^(-?)\s*(\d+)\s+(\d+)()\s*/\s*(\d+)()$"),
)
r"""``2\frac{1}{2}``, ``1 \frac12`` and ``1 1/2`` written alone: mixed numbers (proper fraction)."""
_TIME = re.compile(r"^\d{1,2}:\d{2}$")
"""``10:30`` (also ``1:30 PM``): a time of day, compared term by term, never reduced to 1:3."""


def parse_answer(text: str) -> Answer:
    """Parse a normalised answer into an answer structure.

    Raises:
        AnswerParseError: when the text is not a mathematical answer this parser reads.
    """
    if text.count("\\pm") + text.count("\\mp") == 1:
        plus = text.replace("\\pm", "+").replace("\\mp", "-")
        minus = text.replace("\\pm", "-").replace("\\mp", "+")
        return SetOf((parse_answer(plus), parse_answer(minus)), braces=False)
    for pattern in _MIXED_NUMBERS:
        mixed = pattern.match(text)
        if mixed:
            sign, whole, *parts = mixed.groups()
            num, den = int(parts[0] or parts[1]), int(parts[2] or parts[3])
            if 0 < num < den:
                value = int(whole) + Fraction(num, den)
                return Expr(("num", -value if sign else value, False))
    tokens = tokenize(text)
    if not tokens:
        raise AnswerParseError("empty answer")
    return _structure(tokens, 0)


def _structure(tokens: list[Token], level: int) -> Answer:
    if level > 8:
        raise AnswerParseError("answer structure nested more than 8 levels")
    if len(tokens) >= 2 and tokens[0][0] == "id" and tokens[1] == ("cmd", "\\in"):
        tokens = tokens[2:]
    parts = split_top(tokens, frozenset({"\\cup"}))
    if len(parts) > 1:
        return UnionOf(tuple(_structure(_nonempty(p), level + 1) for p in parts))
    items = split_top(tokens, frozenset({",", ";"}))
    if len(items) > 1:
        return SetOf(tuple(_item(_nonempty(i), level + 1) for i in items), braces=False)
    terms = split_top(tokens, frozenset({":"}))
    if len(terms) > 1:
        return _ratio(terms)
    return _item(_nonempty(tokens), level)


def _ratio(terms: list[list[Token]]) -> Ratio:
    """``a:b:c``; each term one expression."""
    nodes = tuple(parse_tokens(_nonempty(t)) for t in terms)
    if any(node[0] == "rel" for node in nodes):
        raise AnswerParseError("a ratio's terms must be expressions")
    written = f"{terms[0][0][1]}:{terms[1][0][1]}" if len(terms) == 2 and len(terms[0]) == 1 else ""
    clock = _TIME.match(written) is not None  # "10:30", "1:30 PM"
    return Ratio(nodes, clock)


def _nonempty(tokens: list[Token]) -> list[Token]:
    if not tokens:
        raise AnswerParseError("empty item in a list")
    return tokens


def _item(tokens: list[Token], level: int) -> Answer:
    first, last = tokens[0], tokens[-1]
    if first[1] == "\\{" and last[1] == "\\}" and closes_at_end(tokens):
        inner = tokens[1:-1]
        if not inner:
            return SetOf((), braces=True)
        parts = split_top(inner, frozenset({",", ";"}))
        return SetOf(tuple(_structure(_nonempty(p), level + 1) for p in parts), braces=True)
    if first[1] in ("(", "[") and last[1] in (")", "]") and closes_at_end(tokens):
        parts = split_top(tokens[1:-1], frozenset({","}))
        if len(parts) >= 2:
            items = tuple(_structure(_nonempty(p), level + 1) for p in parts)
            return Bracketed(first[1], last[1], items)
    if first[0] == "begin" and first[1] in _MATRIX_ENVS and closes_at_end(tokens):
        return _matrix(tokens[1:-1])
    return _from_relation(parse_tokens(tokens))


def _matrix(tokens: list[Token]) -> Matrix:
    rows = split_top(tokens, frozenset({"\\\\"}))
    if rows and not rows[-1]:
        rows.pop()
    parsed = []
    for row in rows:
        cells = split_top(row, frozenset({"&"}))
        parsed.append(tuple(parse_tokens(_nonempty(c)) for c in cells))
    if not parsed or len({len(r) for r in parsed}) != 1:
        raise AnswerParseError("matrix rows must be non-empty and of equal length")
    return Matrix(tuple(parsed))


def _is_symbol(node: Node) -> bool:
    return node[0] == "sym"


def _from_relation(node: Node) -> Answer:
    """Turn ``a < x <= b`` / ``x > a`` into intervals; other relations stay relations."""
    if node[0] != "rel":
        return Expr(node)
    ops, sides = node[1], node[2]
    if len(ops) == 2 and _is_symbol(sides[1]) and ops[0][0] == ops[1][0] and ops[0][0] in "<>":
        low, high = (sides[0], sides[2]) if ops[0][0] == "<" else (sides[2], sides[0])
        left, right = (ops[0], ops[1]) if ops[0][0] == "<" else (ops[1], ops[0])
        return _interval(low, left.endswith("="), high, right.endswith("="))
    if len(ops) == 1 and ops[0] in ("<", "<=", ">", ">="):
        closed = ops[0].endswith("=")
        below = ops[0][0] == "<"
        if _is_symbol(sides[0]) and not _is_symbol(sides[1]):
            bound = sides[1]
        elif _is_symbol(sides[1]) and not _is_symbol(sides[0]):
            bound, below = sides[0], not below
        else:
            return Relation(ops, sides)
        if below:
            return _interval(("neg", INFINITY), False, bound, closed)
        return _interval(bound, closed, INFINITY, False)
    return Relation(ops, sides)


def _interval(low: Node, low_closed: bool, high: Node, high_closed: bool) -> Bracketed:
    return Bracketed("[" if low_closed else "(", "]" if high_closed else ")",
                     (Expr(low), Expr(high)))
