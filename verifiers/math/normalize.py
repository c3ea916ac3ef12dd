r"""String-level clean-up of a LaTeX answer before it is parsed.

Removes what never changes the value: math delimiters, ``\left``/``\right``, spacing commands,
``\displaystyle``, text wrappers (``\mbox{...}``; a word beside a value is taken out as a unit,
``NormalizedAnswer.units``, for the grader to accept only where the gold has it, and a magnitude
word becomes its factor: see ``units.py``), dollar
signs, thousands separators (``10{,}000``; ``3{,}5`` is the decimal comma 3.5), a trailing full
stop, "x \in" in front of a set. ``\emptyset`` and ``\varnothing`` become ``\{\}``; a degree
sign inside a trigonometric function becomes radians (``\sin 60^\circ``), elsewhere it is the
unit ``deg``. A percent sign is removed and remembered (``percent=True``)
because a gold 50% may be compared with 50 or with 0.5.
Connecting words ("or", "and") become commas, so "x=1 or x=2" reads as a list.

Every step is a regular expression without nested quantifiers or a single left-to-right scan:
linear time, whatever the input.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from rlvr.verifiers.errors import AnswerParseError
from rlvr.verifiers.math.units import MAGNITUDES, canonical_unit

__all__ = ["MAX_ANSWER_CHARS", "NormalizedAnswer", "normalize_answer"]

MAX_ANSWER_CHARS = 5000
"""Answers longer than this (after extraction) are refused with a parse error."""

_UNICODE = {
    "\u2212": "-",
    "\u2013": "-",
    "\u00d7": "\\times ",
    "\u22c5": "\\cdot ",
    "\u00b7": "\\cdot ",
    "\u00f7": "\\div ",
    "\u03c0": "\\pi ",
    "\u221a": "\\sqrt",
    "\u221e": "\\infty ",
    "\u2264": "\\le ",
    "\u2265": "\\ge ",
    "\u2260": "\\ne ",
    "\u222a": "\\cup ",
    "\u00b0": "^\\circ ",
    "\u2009": " ",
    "\u00a0": " ",
}
_TEXT_COMMANDS = (
    "text|textbf|textit|textrm|textsf|texttt|textnormal|mbox|hbox|mathrm|mathbf|mathit|"
    "mathsf|mathtt|boldsymbol|bm|emph"
)
_TEXT_OPEN = re.compile(r"\\(?:" + _TEXT_COMMANDS + r")\s*\{")
_TRIG_DEGREES = re.compile(
    r"\\(sin|cos|tan|cot|sec|csc)\s*(\()?\s*(\d+(?:\.\d+)?)\s*"
    r"(?:\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![a-zA-Z])|\\degree(?![a-zA-Z])|\u00b0)\s*(\))?"
)
r"""``\sin 60^\circ``: a trigonometric function of degrees (elsewhere a degree sign is dropped)."""


def _radians(match: re.Match[str]) -> str:
    name, opened, degrees, closed = match.groups()
    head = "(" if opened and not closed else ""  # "\cos(60^\circ + x)": keep the bracket open
    tail = ")" if closed and not opened else ""
    return f"\\{name}({head}{degrees}\\pi/180){tail}"


_REPLACEMENTS: tuple[tuple[str, re.Pattern[str], Any], ...] = (  # (needle, pattern, repl)
    ("\\", re.compile(r"\\[dtc]frac(?![a-zA-Z])"), "\\\\frac"),
    ("\\", re.compile(r"\\[dt]binom(?![a-zA-Z])"), "\\\\binom"),
    ("\\", re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|Biggl|Biggr|big|Big|bigg"
                      r"|Bigg)(?![a-zA-Z])\s*\.?"), ""),
    ("\\", re.compile(r"\\(?:displaystyle|textstyle|scriptstyle|limits|nolimits)(?![a-zA-Z])"),
     ""),
    ("{,}", re.compile(r"(?<=\d)\{,\}(?=\d{3}(?!\d))"), ""),  # 10{,}000: a thousands separator
    ("{,}", re.compile(r"(?<=\d)\{,\}(?=\d)"), "."),  # 3{,}5: a decimal comma
    ("\\", re.compile(r"\\(?:emptyset|varnothing)(?![a-zA-Z])|\\\{\s*\\\}"), "\\{\\}"),
    ("\\", re.compile(r"\\mathbb\s*\{\s*R\s*\}|\\R(?![a-zA-Z])"), r"(-\\infty, \\infty)"),
    ("\\", re.compile(r"\\pmod\s*\{\s*\d+\s*\}|\(\s*\\bmod\s*\d+\s*\)|\\pmod\s*\d+"),
     " \\\\text{modulus} "),
    ("\\", re.compile(r"(\d),\\!\s*(?=\d{3})"), r"\1"),
    ("\\", re.compile(r"(\d)\\,(?=\d{3}(?!\d))"), r"\1"),
    ("", re.compile(r"(?<!\\)\\[!,;:> ]|\\q?quad(?![a-zA-Z])|~"), " "),
    ("\\", _TRIG_DEGREES, _radians),
    ("\\", re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![a-zA-Z])|\\circ(?![a-zA-Z])"
                      r"|\\degree(?![a-zA-Z])"), " \\\\text{deg} "),  # a unit, read as such
    ("$", re.compile(r"\\\$|\$"), ""),
    ("\\", re.compile(r"(?<!\\)\\[()\[\]]"), ""),
    ("infin", re.compile(r"\\(?:infin|infinity)(?![a-zA-Z])|\binfinity\b"), "\\\\infty"),
    ("\\", re.compile(r"\\(?:leq|leqslant)(?![a-zA-Z])"), "\\\\le"),
    ("\\", re.compile(r"\\(?:geq|geqslant)(?![a-zA-Z])"), "\\\\ge"),
    ("\\", re.compile(r"\\(?:neq)(?![a-zA-Z])"), "\\\\ne"),
    ("\\", re.compile(r"\\(?:dots|ldots|cdots)(?![a-zA-Z])"), "\\\\ldots"),
)
_PERCENT = re.compile(r"\\%|%|\bpercent\b")
_CONNECTIVES = re.compile(r"\s+(?:or|and)\s+", re.IGNORECASE)
_MEMBERSHIP = re.compile(r"^[a-zA-Z]\s*\\in\s*")
_LEADING = re.compile(r"^(?:\\approx|\\sim|=|:)\s*")
_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(?:([, ])\d{3})(?:\1\d{3})*(?:\.\d+)?$")
"""A whole answer grouped in thousands: ``1,234,567`` or ``1 234 567`` (one separator kind)."""
_DOTTED_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(?:\.\d{3}){2,}$")
"""``1.234.567``: thousands grouped with dots (two or more groups; ``1.234`` is a decimal)."""
_UNIT_POWER = re.compile(r"\s*\^\s*\{?\s*([23])\s*\}?")
_MAGNITUDE = re.compile(
    r"(?<=[\d}])\s?\b(" + "|".join(MAGNITUDES) + r")\b", re.IGNORECASE
)
_NOT_A_UNIT = frozenset(
    "sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log exp gcd lcm max min sqrt "
    "and".split()
)
_ATTACHED_UNIT = re.compile(r"^(?P<value>.*\d)(?P<unit>[a-zA-Z]{2,})$")
_PLAIN_NUMBER = re.compile(r"^[-+]?[\d.,]+$")
_REPEATING = re.compile(r"(?<![\d.])(-?)(\d*)\.(\d*)\\overline\s*\{(\d+)\}")
_WHITESPACE = re.compile(r"\s+")
_WRAPPERS = ("{", "\\boxed{", "\\fbox{")


@dataclass(frozen=True)
class NormalizedAnswer:
    """An answer string after clean-up.

    Attributes:
        text: the cleaned LaTeX.
        percent: whether a percent sign (or "percent") was removed.
        units: the units read beside values (canonical names from ``units.py``; a word that is
            not in the table is kept as written, lower-cased), in order.
    """

    text: str
    percent: bool
    units: tuple[str, ...] = ()


def normalize_answer(answer: str) -> NormalizedAnswer:
    """Clean up an answer string (see the module docstring).

    Raises:
        AnswerParseError: when the answer is longer than ``MAX_ANSWER_CHARS``.
    """
    if len(answer) > MAX_ANSWER_CHARS:
        raise AnswerParseError(
            f"answer has {len(answer)} characters; at most {MAX_ANSWER_CHARS} are read"
        )
    text = answer.strip()
    for char, replacement in _UNICODE.items():
        if char in text:
            text = text.replace(char, replacement)
    if not text.isascii():
        text = _unicode_notation(text)
    if "\\over" in text:
        text = _over_to_frac(text)
    text = _WHITESPACE.sub(" ", text)  # single spaces keep every later pattern linear
    for needle, pattern, replacement in _REPLACEMENTS:
        if needle in text:  # most answers hold no backslash: skip the LaTeX rules at once
            text = pattern.sub(replacement, text)  # group references only in thousands rules
    text = _WHITESPACE.sub(" ", text)
    units: list[str] = []
    text = _unwrap_text_commands(text, units)
    text, percent_count = _PERCENT.subn("", text)
    text = _MAGNITUDE.sub(lambda m: f" \\times {MAGNITUDES[m.group(1).lower()]}", text)
    text = _REPEATING.sub(_repeating_decimal, text)
    text = _CONNECTIVES.sub(",", text)
    text = _WHITESPACE.sub(" ", text).strip()
    text = _strip_edges(text, units)
    if _THOUSANDS.match(text):
        text = text.replace(",", "").replace(" ", "")
    elif _DOTTED_THOUSANDS.match(text):
        text = text.replace(".", "")
    return NormalizedAnswer(text=text, percent=percent_count > 0, units=tuple(units))


_SUPERSCRIPTS = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-"))
_SUPERSCRIPT_RUN = re.compile("[" + "".join(_SUPERSCRIPTS) + "]+")


def _unicode_notation(text: str) -> str:
    r"""Unicode superscripts, vulgar fractions and the digits of every script in ASCII LaTeX.

    ``x²`` is ``x^{2}``, ``½`` is ``\frac{1}{2}`` (``3½`` the mixed number), ``١٢`` and
    ``１２`` are 12.
    """
    text = _SUPERSCRIPT_RUN.sub(
        lambda m: "^{" + "".join(_SUPERSCRIPTS[c] for c in m.group(0)) + "}", text
    )
    out = []
    for char in text:
        if char.isascii():
            out.append(char)
        elif unicodedata.category(char) == "Nd":
            out.append(str(unicodedata.decimal(char)))
        elif unicodedata.category(char) == "No" and "⁄" in unicodedata.normalize("NFKD", char):
            top, _, bottom = unicodedata.normalize("NFKD", char).partition("⁄")
            out.append(f"\\frac{{{top}}}{{{bottom}}}")
        else:
            out.append(char)
    return "".join(out)


_OVER = re.compile(r"\\over(?![a-zA-Z])")
_MAX_OVERS = 16


def _over_to_frac(text: str) -> str:
    r"""``{a \over b}`` (and a whole answer ``a \over b``) as ``\frac{a}{b}``."""
    for _ in range(_MAX_OVERS):
        match = _OVER.search(text)
        if match is None:
            return text
        depth, open_at = 0, -1
        for i in range(match.start() - 1, -1, -1):
            if text[i] == "}" and (i == 0 or text[i - 1] != "\\"):
                depth += 1
            elif text[i] == "{" and (i == 0 or text[i - 1] != "\\"):
                if depth == 0:
                    open_at = i
                    break
                depth -= 1
        if open_at < 0:
            top, bottom = text[: match.start()], text[match.end() :]
            return f"\\frac{{{top.strip()}}}{{{bottom.strip()}}}"
        close_at = _matching_brace(text, open_at)
        if close_at < 0:
            return text
        top, bottom = text[open_at + 1 : match.start()], text[match.end() : close_at]
        text = f"{text[:open_at]}\\frac{{{top.strip()}}}{{{bottom.strip()}}}{text[close_at + 1:]}"
    return text


def _unwrap_text_commands(text: str, units: list[str]) -> str:
    r"""Replace ``\text{...}``-like wrappers by their content.

    Words beside a value are never dropped: a magnitude word becomes its factor
    (``2\text{ million}`` is ``2 \times 10^{6}``), "or"/"and" stay connectives, and any other
    word (with a power written after it) is taken out and appended to ``units`` (canonical when
    it is in the unit table): the grader accepts it only where the gold answer has it.
    """
    out: list[str] = []
    pos = 0
    while True:
        match = _TEXT_OPEN.search(text, pos)
        if match is None:
            out.append(text[pos:])
            break
        out.append(text[pos : match.start()])
        close = _matching_brace(text, match.end() - 1)
        if close < 0:
            out.append(text[match.start() :])
            break
        content = text[match.end() : close]
        before = "".join(out).strip()
        word = " ".join(content.strip().strip(".").lower().split())
        pos = close + 1
        is_unit = word.isalpha() and canonical_unit(word) is not None  # also one letter: \text{m}
        if before and (_is_words(word) or is_unit) and word not in ("or", "and"):
            if word in MAGNITUDES:
                content = f" \\times {MAGNITUDES[word]} "
            else:
                power = _UNIT_POWER.match(text, pos)
                pos = power.end() if power else pos
                units.append(canonical_unit(word, int(power.group(1)) if power else 1) or word)
                content = " "
        out.append(f" {content} " if _is_words(word) else content)
    return "".join(out)


def _matching_brace(text: str, open_pos: int) -> int:
    """Index of the ``}`` that closes the ``{`` at ``open_pos``, or -1."""
    depth = 0
    for i in range(open_pos, len(text)):
        char = text[i]
        if char == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif char == "}" and (i == 0 or text[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return i
    return -1


def _is_words(text: str) -> bool:
    """Whether ``text`` is plain words (letters and spaces, at least two letters)."""
    stripped = text.replace(" ", "")
    return len(stripped) >= 2 and stripped.isalpha()


def _strip_edges(text: str, units: list[str]) -> str:
    r"""Remove a leading "x \in"/"="/"\approx", trailing punctuation, units, outer braces/boxes."""
    text = _MEMBERSHIP.sub("", text)
    text = _LEADING.sub("", text)
    text = text.rstrip(" .;")
    text = _strip_trailing_units(text, units)
    while True:
        opening = next((p for p in _WRAPPERS if text.startswith(p)), None)
        if opening is None or _matching_brace(text, len(opening) - 1) != len(text) - 1:
            return text
        text = text[len(opening) : -1].strip()


def _strip_trailing_units(text: str, units: list[str]) -> str:
    """Take unit words after a value out into ``units``: "12 cm^2" -> "12" (unit ``cm^2``).

    Table units of any length ("5cm", "3 m" alone); other words of three or more letters
    ("12 apples") are taken as written. Short unknown letters stay variables ("2 x", "3 ab").
    """
    words = text.split(" ")
    kept = len(words)
    while kept > 1:
        power = _UNIT_POWER.search(words[kept - 1])
        word = _UNIT_POWER.sub("", words[kept - 1]).strip(".").lower()
        before = words[kept - 2]
        if not before or before[-1] not in "0123456789})" or not word.isalpha():
            break
        unit = canonical_unit(word, int(power.group(1)) if power else 1)
        if unit is None and (len(word) < 3 or word in _NOT_A_UNIT):
            break
        if unit is not None and len(word) == 1 and not (
            kept == 2 and _PLAIN_NUMBER.match(before)
        ):
            break
        units.append(unit or word)
        kept -= 1
    text = " ".join(words[:kept])
    attached = _ATTACHED_UNIT.match(text)
    if attached:
        unit = canonical_unit(attached.group("unit"))
        if unit is not None:
            units.append(unit)
            text = attached.group("value")
    return text


def _repeating_decimal(match: re.Match[str]) -> str:
    r"""Rewrite ``0.1\overline{6}`` as the exact fraction ``(1/6)``."""
    sign, whole, fixed, period = match.groups()
    fixed_len, period_len = len(fixed), len(period)
    base = int(whole or "0") * 10**fixed_len + int(fixed or "0")
    numerator = base * (10**period_len - 1) + int(period)
    denominator = 10**fixed_len * (10**period_len - 1)
    value = Fraction(numerator, denominator)  # lowest terms: a written result, not a quotient
    if value.denominator == 1:
        return f"{sign}{value.numerator}"
    return f"({sign}{value.numerator}/{value.denominator})"
