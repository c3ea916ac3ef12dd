"""Multiple-choice answers: the letter an answer names, and whether it hedges between two."""

from __future__ import annotations

import re

__all__ = ["choice_hedge", "choice_letter"]

_CHOICE_STRICT = re.compile(r"^\(?\s*([A-J])\s*\)?$")
_CHOICE_LENIENT = re.compile(r"^\(?\s*([A-J])\s*(?:\)|\.|:|$|\s)")
_OTHER_CHOICE = re.compile(r"(?<![A-Za-z\\])[A-J](?![A-Za-z])|\(\s?[a-j]\s?\)")
"""A choice letter standing alone (``D``, ``(D)``, ``(d)``) anywhere after the first one: the
answer names two choices, a hedge. Single-character scans with look-arounds: linear time."""


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
