r"""The math answer's tokens: the lexer, and splitting a token list at top-level separators.

A token is ``(kind, text)`` with kind ``num``, ``id`` (one letter), ``cmd`` (``\frac``, ``\{``),
``op``, ``begin`` or ``end`` (an environment's name: ``\begin{pmatrix}`` is
``("begin", "pmatrix")``). One regular-expression match per token, at most ``MAX_TOKENS`` of
them: linear time in the answer's length.
"""

from __future__ import annotations

import re

from rlvr.verifiers.errors import AnswerParseError

__all__ = ["MAX_TOKENS", "Token", "closes_at_end", "split_top", "tokenize"]

Token = tuple[str, str]
MAX_TOKENS = 3000

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


def split_top(tokens: list[Token], separators: frozenset[str]) -> list[list[Token]]:
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


def closes_at_end(tokens: list[Token]) -> bool:
    """Whether the bracket opened by the first token is closed by the last one."""
    depth = 0
    for i, token in enumerate(tokens):
        depth += _depth_delta(token)
        if depth == 0:
            return i == len(tokens) - 1
    return False
