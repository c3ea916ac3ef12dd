r"""The answer tree: what a parsed math answer is (plain, hashable data; no sympy).

Answer structures (frozen dataclasses) hold expression trees (plain tuples):

- ``("num", Fraction, approx)``: a literal; ``approx`` is False for an exact literal and, for one
  written with a decimal point (so it may be rounded), half a unit of its last written digit
  (``Fraction(1, 20)`` for ``2.5``, ``Fraction(50)`` for ``1.2e3``);
- ``("sym", name)``: a variable (``x``, ``x_1``, ``\theta``);
- ``("const", name)``: ``pi``, ``e``, ``i`` (imaginary unit) or ``oo`` (infinity);
- ``("add", terms)``, ``("mul", factors)``, ``("div", a, b)``, ``("neg", a)``, ``("pow", a, b)``,
  ``("fn", name, args)``, ``("fact", a)``;
- ``("rel", ops, sides)``: a relation nested in an expression (``|12 + 7 = 19|``).

:mod:`rlvr.verifiers.math.parse` builds these trees; the comparison modules read them, and every
walk over an expression goes through :func:`children` (:func:`walk` visits every node).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

__all__ = [
    "INFINITY",
    "ONE",
    "Answer",
    "Bracketed",
    "Expr",
    "Matrix",
    "Node",
    "Ratio",
    "Relation",
    "SetOf",
    "UnionOf",
    "children",
    "walk",
]

Node = tuple[Any, ...]

ONE: Node = ("num", Fraction(1), False)
INFINITY: Node = ("const", "oo")


@dataclass(frozen=True)
class Expr:
    """A single expression."""

    node: Node


@dataclass(frozen=True)
class Relation:
    """An equation or inequality chain that is not a plain ``x = value``."""

    ops: tuple[str, ...]
    sides: tuple[Node, ...]


@dataclass(frozen=True)
class Bracketed:
    """A bracketed list of two or more items: a tuple, a vector, or an interval."""

    open: str
    close: str
    items: tuple[Answer, ...]


@dataclass(frozen=True)
class SetOf:
    r"""An unordered collection: ``\{...\}`` (``braces``) or a bare comma list."""

    items: tuple[Answer, ...]
    braces: bool


@dataclass(frozen=True)
class UnionOf:
    """A union of sets or intervals (order-free)."""

    parts: tuple[Answer, ...]


@dataclass(frozen=True)
class Matrix:
    """A matrix from a ``pmatrix``/``bmatrix``/... environment, row by row."""

    rows: tuple[tuple[Node, ...], ...]


@dataclass(frozen=True)
class Ratio:
    """A ratio ``a:b`` (or ``a:b:c``).

    ``clock`` is True when it is written like a time (``10:30``): then it only equals the same
    terms (never ``1:3``).
    """

    terms: tuple[Node, ...]
    clock: bool


Answer = Expr | Relation | Bracketed | SetOf | UnionOf | Matrix | Ratio


def children(node: Node) -> tuple[Node, ...]:
    """The sub-expressions of ``node``: operands, arguments, a relation's sides; () for a leaf.

    Every walk over an expression tree (its symbols, its operations, whether it holds only
    numbers) goes through this one function, so none skips a kind of node: a relation nested
    in an expression (``|12 + 7 = 19|``, ``f(x = 3)``) is walked into like any other.
    """
    kind = node[0]
    if kind in ("add", "mul"):
        return tuple(node[1])
    if kind in ("neg", "fact"):
        return (node[1],)
    if kind in ("div", "pow"):
        return (node[1], node[2])
    if kind in ("fn", "rel"):
        return tuple(node[2])
    return ()


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree under ``node``, ``node`` first, depth first and without recursion."""
    stack = [node]
    while stack:
        item = stack.pop()
        yield item
        stack.extend(children(item))
