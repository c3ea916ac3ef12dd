r"""Parse a normalised LaTeX answer into a small, hashable answer tree (no sympy).

Answer structures (frozen dataclasses) hold expression trees (plain tuples):

- ``("num", Fraction, approx)``: a literal; ``approx`` is False for an exact literal and, for one
  written with a decimal point (so it may be rounded), half a unit of its last written digit
  (``Fraction(1, 20)`` for ``2.5``, ``Fraction(50)`` for ``1.2e3``);
- ``("sym", name)``: a variable (``x``, ``x_1``, ``\theta``);
- ``("const", name)``: ``pi``, ``e``, ``i`` (imaginary unit) or ``oo`` (infinity);
- ``("add", terms)``, ``("mul", factors)``, ``("div", a, b)``, ``("neg", a)``, ``("pow", a, b)``,
  ``("fn", name, args)``, ``("fact", a)``.

Conventions: ``e`` is Euler's number and ``i`` the imaginary unit; ``\log`` is the natural
logarithm (``\log_b`` has base b); ``\sin^{-1}`` is ``\arcsin``; ``\sin 2x`` is ``sin(2x)``;
``2\frac{1}{2}``, ``1 \tfrac12`` and ``1 1/2`` written alone are mixed numbers (3/2); two
numbers side by side (``2 3``) are not a product but an error; ``n!!`` is the double factorial;
``101_2`` is a number in base 2; ``a:b`` is a ratio (``Ratio``); ``\operatorname{...}`` names
only the functions listed in ``_FUNCTIONS``, and every function checks its number of arguments.

The parser is recursive descent with hard limits on tokens and nesting, so it runs in time linear
in its input and never overflows the stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from rlvr.verifiers.errors import AnswerParseError

__all__ = [
    "Answer",
    "Bracketed",
    "Expr",
    "Matrix",
    "Ratio",
    "Relation",
    "SetOf",
    "UnionOf",
    "children",
    "choice_hedge",
    "choice_letter",
    "parse_answer",
    "parse_expression",
]

Node = tuple[Any, ...]
MAX_TOKENS = 3000
MAX_DEPTH = 50
MAX_DECIMAL_EXPONENT = 400

_TOKEN = re.compile(
    r"(?P<ws>\s+)"
    r"|(?P<begin>\\begin\s*\{\s*[a-zA-Z]+\*?\s*\}(?:\s*\{[^{}]*\})?)"
    r"|(?P<end>\\end\s*\{\s*[a-zA-Z]+\*?\s*\})"
    r"|(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
    r"|(?P<cmd>\\[a-zA-Z]+|\\[{}|\\])"
    r"|(?P<id>[a-zA-Z])"
    r"|(?P<op><=|>=|!=|\*\*|[-+*/^_()\[\]{}|,=<>!&;:])"
)
_OPENERS = frozenset({"(", "[", "{", "\\{", "\\lfloor", "\\lceil"})
_CLOSERS = frozenset({")", "]", "}", "\\}", "\\rfloor", "\\rceil"})
_MATRIX_ENVS = ("pmatrix", "bmatrix", "Bmatrix", "matrix", "array", "smallmatrix")
_GREEK = frozenset(
    """alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu
    xi rho varrho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma
    Upsilon Phi Psi Omega ell""".split()
)
_FUNCTIONS = frozenset(
    """sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh ln log exp gcd lcm max min
    lg""".split()
)
_TRIG_INVERSE = {"sin": "arcsin", "cos": "arccos", "tan": "arctan"}
_VARIADIC = frozenset({"gcd", "lcm", "max", "min"})
"""Functions of one or more arguments; every other function of ``_FUNCTIONS`` takes exactly one."""
_RELATIONS = {
    "=": "=", "<": "<", ">": ">", "<=": "<=", ">=": ">=", "\\le": "<=", "\\ge": ">=",
    "\\lt": "<", "\\gt": ">", "\\ne": "!=", "!=": "!=",
}
_TIMES = frozenset({"*", "\\cdot", "\\times", "\\ast"})
_DIVIDE = frozenset({"/", "\\div"})
_VALUE_COMMANDS = _GREEK | _FUNCTIONS | {
    "frac", "sqrt", "binom", "pi", "infty", "lfloor", "lceil", "lvert", "operatorname", "e",
}
_MIXED_NUMBERS = (
    re.compile(r"^(-?)\s*(\d+)\s*\\frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))$"),
    re.compile(r"^(-?)\s*(\d+)\s+(\d+)()\s*/\s*(\d+)()$"),
)
r"""``2\frac{1}{2}``, ``1 \frac12`` and ``1 1/2`` written alone: mixed numbers (proper fraction)."""
_TIME = re.compile(r"^\d{1,2}:\d{2}$")
"""``10:30`` (also ``1:30 PM``): a time of day, compared term by term, never reduced to 1:3."""
_CHOICE_STRICT = re.compile(r"^\(?\s*([A-J])\s*\)?$")
_CHOICE_LENIENT = re.compile(r"^\(?\s*([A-J])\s*(?:\)|\.|:|$|\s)")
_OTHER_CHOICE = re.compile(r"(?<![A-Za-z\\])[A-J](?![A-Za-z])|\(\s?[a-j]\s?\)")
"""A choice letter standing alone (``D``, ``(D)``, ``(d)``) anywhere after the first one: the
answer names two choices, a hedge. Single-character scans with look-arounds: linear time."""

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
Token = tuple[str, str]


def choice_letter(text: str, *, lenient: bool = False) -> str | None:
    r"""The multiple-choice letter in ``text``: "B", "(B)" (``lenient``: "(B) 42", a lone "b").

    With ``lenient``, an answer that names a second, different choice anywhere ("(C) or (D)",
    "C D", "C/D", "C $\\lor$ D", "C (not D)") is a hedge, not the first letter: None
    (``choice_hedge`` tells the two Nones apart).
    """
    text = text.strip()
    if not lenient:
        match = _CHOICE_STRICT.match(text)
        return match.group(1) if match else None
    lone = _CHOICE_STRICT.match(text.upper()) if len(text) <= 3 else None
    if lone:
        return lone.group(1)
    match = _CHOICE_LENIENT.match(text)
    if match is None or choice_hedge(text):
        return None
    return match.group(1)


def choice_hedge(text: str) -> bool:
    """Whether ``text`` names two or more different choice letters (the same one twice is one)."""
    letters = {m.group(0).strip("() ").upper() for m in _OTHER_CHOICE.finditer(text.strip())}
    return len(letters) > 1


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


def parse_expression(text: str) -> Node:
    """Parse one expression (no lists, sets or intervals)."""
    return _ExpressionParser(tokenize(text)).parse()


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into ``(kind, text)`` tokens.

    Raises:
        AnswerParseError: on an unknown character or more than ``MAX_TOKENS`` tokens.
    """
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise AnswerParseError(f"unexpected character {text[pos]!r} at position {pos}")
        kind = match.lastgroup or ""
        if kind != "ws":
            value = match.group(0)
            if kind in ("begin", "end"):
                value = re.sub(r"[^a-zA-Z]", "", value.split("}")[0].split("{")[1])
            tokens.append((kind, value))
            if len(tokens) > MAX_TOKENS:
                raise AnswerParseError(f"answer has more than {MAX_TOKENS} tokens")
        pos = match.end()
    return tokens


def _depth_delta(token: Token) -> int:
    kind, value = token
    if kind in ("begin", "end"):
        return 1 if kind == "begin" else -1
    if value in _OPENERS:
        return 1
    return -1 if value in _CLOSERS else 0


def _split_top(tokens: list[Token], separators: frozenset[str]) -> list[list[Token]]:
    """Split at separators that are outside every bracket."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        if depth == 0 and token[1] in separators and token[0] in ("op", "cmd"):
            parts.append([])
            continue
        depth += _depth_delta(token)
        if depth < 0:
            raise AnswerParseError("unbalanced brackets")
        parts[-1].append(token)
    return parts


def _closes_at_end(tokens: list[Token]) -> bool:
    """Whether the bracket opened by the first token is closed by the last one."""
    depth = 0
    for i, token in enumerate(tokens):
        depth += _depth_delta(token)
        if depth == 0:
            return i == len(tokens) - 1
    return False


def _structure(tokens: list[Token], level: int) -> Answer:
    if level > 8:
        raise AnswerParseError("answer structure nested more than 8 levels")
    if len(tokens) >= 2 and tokens[0][0] == "id" and tokens[1] == ("cmd", "\\in"):
        tokens = tokens[2:]
    parts = _split_top(tokens, frozenset({"\\cup"}))
    if len(parts) > 1:
        return UnionOf(tuple(_structure(_nonempty(p), level + 1) for p in parts))
    items = _split_top(tokens, frozenset({",", ";"}))
    if len(items) > 1:
        return SetOf(tuple(_item(_nonempty(i), level + 1) for i in items), braces=False)
    terms = _split_top(tokens, frozenset({":"}))
    if len(terms) > 1:
        return _ratio(terms)
    return _item(_nonempty(tokens), level)


def _ratio(terms: list[list[Token]]) -> Ratio:
    """``a:b:c``; each term one expression."""
    nodes = tuple(_ExpressionParser(_nonempty(t)).parse() for t in terms)
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
    if first[1] == "\\{" and last[1] == "\\}" and _closes_at_end(tokens):
        inner = tokens[1:-1]
        if not inner:
            return SetOf((), braces=True)
        parts = _split_top(inner, frozenset({",", ";"}))
        return SetOf(tuple(_structure(_nonempty(p), level + 1) for p in parts), braces=True)
    if first[1] in ("(", "[") and last[1] in (")", "]") and _closes_at_end(tokens):
        parts = _split_top(tokens[1:-1], frozenset({","}))
        if len(parts) >= 2:
            items = tuple(_structure(_nonempty(p), level + 1) for p in parts)
            return Bracketed(first[1], last[1], items)
    if first[0] == "begin" and first[1] in _MATRIX_ENVS and _closes_at_end(tokens):
        return _matrix(tokens[1:-1])
    return _from_relation(_ExpressionParser(tokens).parse())


def _matrix(tokens: list[Token]) -> Matrix:
    rows = _split_top(tokens, frozenset({"\\\\"}))
    if rows and not rows[-1]:
        rows.pop()
    parsed = []
    for row in rows:
        cells = _split_top(row, frozenset({"&"}))
        parsed.append(tuple(_ExpressionParser(_nonempty(c)).parse() for c in cells))
    if not parsed or len({len(r) for r in parsed}) != 1:
        raise AnswerParseError("matrix rows must be non-empty and of equal length")
    return Matrix(tuple(parsed))


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


class _ExpressionParser:
    """Recursive-descent parser for one expression (or relation chain)."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = list(tokens)
        self.pos = 0
        self.depth = 0
        self.abs_depth = 0

    def parse(self) -> Node:
        node = self._relation()
        if self.pos != len(self.tokens):
            raise AnswerParseError(f"unexpected {self.tokens[self.pos][1]!r}")
        return node

    # -- token helpers -------------------------------------------------------------------
    def _peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _peek_value(self) -> str | None:
        token = self._peek()
        return token[1] if token else None

    def _next(self) -> Token:
        token = self._peek()
        if token is None:
            raise AnswerParseError("unexpected end of answer")
        self.pos += 1
        return token

    def _expect(self, value: str) -> None:
        token = self._next()
        if token[1] != value:
            raise AnswerParseError(f"expected {value!r}, found {token[1]!r}")

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise AnswerParseError(f"expression nested more than {MAX_DEPTH} levels")

    # -- grammar ------------------------------------------------------------------------
    def _relation(self) -> Node:
        sides = [self._additive()]
        ops: list[str] = []
        while (value := self._peek_value()) in _RELATIONS:
            self._next()
            ops.append(_RELATIONS[value or ""])
            sides.append(self._additive())
        return ("rel", tuple(ops), tuple(sides)) if ops else sides[0]

    def _additive(self) -> Node:
        terms = [self._term()]
        while (value := self._peek_value()) in ("+", "-"):
            self._next()
            term = self._term()
            terms.append(("neg", term) if value == "-" else term)
        return terms[0] if len(terms) == 1 else ("add", tuple(terms))

    def _term(self) -> Node:
        factors = [self._unary()]
        while (token := self._peek()) is not None:
            if token[1] in _TIMES:
                self._next()
                factors.append(self._unary())
            elif token[1] in _DIVIDE:
                self._next()
                factors = [("div", _product(factors), self._unary())]
            elif self._starts_factor(token):
                if token[0] == "num" and self.tokens[self.pos - 1][0] == "num":
                    raise AnswerParseError("two numbers side by side")  # "2 3" is not 6
                factor = self._power()
                if _is_literal(factors[-1]) and factor[0] == "div" and all(
                    _is_literal(part) for part in factor[1:]
                ):  # "2\frac{1}{2}" inside a tuple: a mixed number or a product? refuse
                    raise AnswerParseError("a number beside a fraction: mixed number or product")
                factors.append(factor)
            else:
                break
        return _product(factors)

    def _unary(self) -> Node:
        value = self._peek_value()
        if value in ("-", "+"):
            self._next()
            self._enter()
            operand = self._unary()
            self.depth -= 1
            return ("neg", operand) if value == "-" else operand
        return self._power()

    def _power(self) -> Node:
        base = self._postfix()
        if self._peek_value() in ("^", "**"):
            self._next()
            self._enter()
            exponent = self._unary()
            self.depth -= 1
            base = self._factorials(("pow", base, exponent))
        return base

    def _postfix(self) -> Node:
        return self._factorials(self._primary())

    def _factorials(self, node: Node) -> Node:
        """``n!`` and the double factorial ``n!!`` (``3!!`` is 3, not ``(3!)!``)."""
        while self._peek_value() == "!":
            self._next()
            if self._peek_value() == "!":
                self._next()
                node = ("fn", "factorial2", (node,))
            else:
                node = ("fact", node)
        return node

    def _starts_factor(self, token: Token) -> bool:
        kind, value = token
        if kind in ("num", "id"):
            return True
        if kind == "op":
            return value in ("(", "{") or (value == "|" and self.abs_depth == 0)
        if kind == "cmd":
            return value[1:] in _VALUE_COMMANDS or (value == "\\|" and self.abs_depth == 0)
        return False

    def _primary(self) -> Node:
        self._enter()
        kind, value = self._next()
        if kind == "num":
            node = _number(value)
            if self._peek_value() == "_":
                node = _based_number(value, self._subscript())
        elif kind == "id":
            node = self._identifier(value)
        elif value in ("(", "[", "{"):
            node = self._relation()
            self._expect({"(": ")", "[": "]", "{": "}"}[value])
        elif value in ("|", "\\|", "\\lvert"):
            self.abs_depth += 1
            node = ("fn", "abs", (self._relation(),))
            self.abs_depth -= 1
            self._expect({"|": "|", "\\|": "\\|", "\\lvert": "\\rvert"}[value])
        elif kind == "cmd":
            node = self._command(value[1:])
        else:
            raise AnswerParseError(f"unexpected {value!r}")
        self.depth -= 1
        return node

    def _identifier(self, letter: str) -> Node:
        if self._peek_value() == "_":
            return ("sym", letter + "_" + self._subscript())
        if letter in ("e", "i"):
            return ("const", letter)
        return ("sym", letter)

    def _subscript(self) -> str:
        self._expect("_")
        token = self._next()
        if token[1] != "{":
            return token[1]
        parts = []
        while (value := self._peek_value()) != "}":
            if value is None:
                raise AnswerParseError("unclosed subscript")
            parts.append(self._next()[1])
        self._next()
        return "".join(parts)

    def _command(self, name: str) -> Node:
        if name == "frac":
            numerator = self._macro_argument()
            return ("div", numerator, self._macro_argument())
        if name == "sqrt":
            if self._peek_value() == "[":
                self._next()
                index = self._relation()
                self._expect("]")
                return ("fn", "root", (self._macro_argument(), index))
            return ("fn", "sqrt", (self._macro_argument(),))
        if name == "binom":
            top = self._macro_argument()
            return ("fn", "binom", (top, self._macro_argument()))
        if name in ("lfloor", "lceil"):
            inner = self._relation()
            self._expect("\\rfloor" if name == "lfloor" else "\\rceil")
            return ("fn", name[1:], (inner,))
        if name == "pi":
            return ("const", "pi")
        if name == "infty":
            return INFINITY
        if name == "e":
            return ("const", "e")
        if name in _GREEK:
            return ("sym", name)
        if name == "operatorname":
            word = self._word_argument()
            if word not in _FUNCTIONS:  # internal names (root, binom, fact...) are not readable
                raise AnswerParseError(f"unsupported function \\operatorname{{{word}}}")
            return self._function(word)
        if name in _FUNCTIONS:
            return self._function(name)
        raise AnswerParseError(f"unsupported command \\{name}")

    def _word_argument(self) -> str:
        self._expect("{")
        parts = []
        while (value := self._peek_value()) != "}":
            if value is None:
                raise AnswerParseError("unclosed command argument")
            parts.append(self._next()[1])
        self._next()
        return "".join(parts)

    def _macro_argument(self) -> Node:
        """A LaTeX macro argument: ``{...}``, one digit of a number, a letter, or a command."""
        token = self._peek()
        if token is None:
            raise AnswerParseError("missing command argument")
        if token[1] == "{":
            self._next()
            self._enter()
            node = self._relation()
            self.depth -= 1
            self._expect("}")
            return node
        if token[0] == "num" and len(token[1]) > 1:
            self.tokens[self.pos] = ("num", token[1][1:])
            return _number(token[1][0])
        if token[0] in ("num", "id", "cmd"):
            return self._primary()
        raise AnswerParseError(f"unexpected {token[1]!r} as command argument")

    def _function(self, name: str) -> Node:
        base = None
        if self._peek_value() == "_":
            self._next()
            base = self._macro_argument()
        power = None
        if self._peek_value() == "^":
            self._next()
            power = self._macro_argument() if self._peek_value() == "{" else self._postfix()
        if self._peek_value() == "(":
            self._next()
            args = [self._relation()]
            while self._peek_value() == ",":
                self._next()
                args.append(self._relation())
            self._expect(")")
        else:
            factors = [self._power()]
            while (token := self._peek()) is not None and self._starts_factor(token):
                if token[0] == "cmd" and token[1][1:] in _FUNCTIONS:
                    break
                factors.append(self._power())
            args = [_product(factors)]
        if not args or (name not in _VARIADIC and len(args) != 1):
            wanted = "one or more arguments" if name in _VARIADIC else "one argument"
            raise AnswerParseError(f"\\{name} takes {wanted}, got {len(args)}")
        if power == ("neg", ONE) and name in _TRIG_INVERSE:
            name, power = _TRIG_INVERSE[name], None
        node: Node = ("fn", name, tuple(args))
        if name == "lg":
            base = ("num", Fraction(10), False)
        if base is not None:
            node = ("div", ("fn", "ln", tuple(args)), ("fn", "ln", (base,)))
        return ("pow", node, power) if power is not None else node


def _is_literal(node: Node) -> bool:
    return node[0] == "num"


def _product(factors: list[Node]) -> Node:
    return factors[0] if len(factors) == 1 else ("mul", tuple(factors))


def _based_number(digits: str, base: str) -> Node:
    """``101_2``: a number written in base 2..36 (digits 0-9 only).

    Other subscripts name a symbol as before (``3_x``).
    """
    if base.isdigit() and 2 <= int(base) <= 36 and digits.isdigit():
        try:
            return ("num", Fraction(int(digits, int(base))), False)
        except ValueError as err:
            raise AnswerParseError(f"{digits} is not a number in base {base}") from err
    return ("sym", digits + "_" + base)


def _number(text: str) -> Node:
    """A numeric literal; huge decimal exponents stay symbolic (``m * 10^k``)."""
    mantissa, _, exponent = text.lower().partition("e")
    try:
        approx: Fraction | bool = False
        if "." in mantissa:  # half a unit of the last digit written: what rounding may hide
            approx = Fraction(1, 2 * 10 ** len(mantissa.partition(".")[2]))
        if exponent and abs(int(exponent)) > MAX_DECIMAL_EXPONENT:
            power = ("num", Fraction(int(exponent)), False)
            ten_power = ("pow", ("num", Fraction(10), False), power)
            return ("mul", (("num", Fraction(mantissa), approx), ten_power))
        if approx and exponent:
            approx = approx * Fraction(10) ** int(exponent)
        return ("num", Fraction(text), approx)
    except ValueError as err:  # e.g. more digits than int() accepts
        raise AnswerParseError(f"cannot read the number {text[:40]!r}") from err
