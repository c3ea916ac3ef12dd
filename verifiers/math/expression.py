r"""One expression (or relation chain) of a math answer, read by recursive descent.

Conventions: ``e`` is Euler's number and ``i`` the imaginary unit; ``\log`` is the natural
logarithm (``\log_b`` has base b); ``\sin^{-1}`` is ``\arcsin``; ``\sin 2x`` is ``sin(2x)``;
two numbers side by side (``2 3``) are not a product but an error, and neither is a number
beside a fraction of numbers (``2\frac{1}{2}`` inside a tuple: mixed number or product?);
``n!!`` is the double factorial; ``101_2`` is a number in base 2; ``\operatorname{...}`` names
only the functions listed in ``_FUNCTIONS``, and every function checks its number of arguments.
Huge decimal exponents (beyond ``MAX_DECIMAL_EXPONENT``) stay symbolic.

The parser has a hard limit on nesting (``MAX_DEPTH``) and reads each token once, so it runs in
time linear in its input and never overflows the stack. The tree it builds is described in
:mod:`rlvr.verifiers.math.tree`.
"""

from __future__ import annotations

from fractions import Fraction

from rlvr.verifiers.errors import AnswerParseError
from rlvr.verifiers.math.tokens import Token, tokenize
from rlvr.verifiers.math.tree import INFINITY, ONE, Node

__all__ = ["MAX_DECIMAL_EXPONENT", "MAX_DEPTH", "parse_expression", "parse_tokens"]

MAX_DEPTH = 50
MAX_DECIMAL_EXPONENT = 400

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


def parse_expression(text: str) -> Node:
    """Parse one expression (no lists, sets or intervals).

    Raises:
        AnswerParseError: when the text is not one expression this parser reads.
    """
    return parse_tokens(tokenize(text))


def parse_tokens(tokens: list[Token]) -> Node:
    """Parse one expression (or relation chain) from its tokens, every token consumed.

    Raises:
        AnswerParseError: when the tokens are not one expression this parser reads.
    """
    return _ExpressionParser(tokens).parse()


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
        return self._braced_text("subscript")

    def _braced_text(self, what: str) -> str:
        """The tokens' texts up to the ``}`` that closes the ``{`` just read, joined."""
        parts = []
        while (value := self._peek_value()) != "}":
            if value is None:
                raise AnswerParseError(f"unclosed {what}")
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
        return self._braced_text("command argument")

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
