r"""Find the final answer inside a model response.

Priority, first hit wins:

1. the last ``\boxed{...}`` or ``\fbox{...}`` (nested braces; also ``\boxed 5``);
2. the last GSM8K marker ``#### 42`` (rest of that line);
3. the last "The final answer is ...", "The answer is ...", "Answer: ..." (rest of the sentence,
   or the ``$...$`` right after it);
4. optionally (``last_number_fallback=True``, the default) the last number in the text
   (``-12``, ``3.5``, ``1,000``, ``3/4``).

Every step is a linear scan (box contents are scanned at most 20,000 characters, and at most 16
unclosed boxes are skipped), so a 1 MB response costs milliseconds.
"""

from __future__ import annotations

import re

__all__ = ["extract_answer"]

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_GSM8K_MARKER = "####"
_ANSWER_IS = re.compile(
    r"(?:final\s+answer|answer)\s*(?:is|:|=)\s*:?\s*",
    re.IGNORECASE,
)
_BARE_ARGUMENT = re.compile(r"[^\s$]+")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_FALLBACK_WINDOWS = (4096, 65536)
_MAX_BOX_CHARS = 20_000  # a box longer than this is returned cut (and then refused as too long)
_MAX_BOXES_TRIED = 16  # unclosed boxes skipped before giving up (keeps hostile input linear)


def extract_answer(text: str, *, last_number_fallback: bool = True) -> str | None:
    """Return the final answer written in ``text``, or None when there is none.

    Args:
        text: the model response.
        last_number_fallback: when no boxed/``####``/"answer is" answer is present, return the
            last number in the text (default True; set False to require an explicit answer).

    Returns:
        The answer as written (LaTeX kept, surrounding whitespace stripped), or None.
    """
    for finder in (_last_boxed, _last_gsm8k, _last_answer_is):
        found = finder(text)
        if found:
            return found
    if last_number_fallback:
        return _last_number(text)
    return None


def _last_boxed(text: str) -> str | None:
    r"""Content of the last complete ``\boxed``/``\fbox`` in ``text``."""
    found = {cmd: text.rfind(cmd) for cmd in _BOX_COMMANDS}
    for _ in range(_MAX_BOXES_TRIED):
        cmd = max(found, key=found.__getitem__)
        start = found[cmd]
        if start < 0:
            return None
        content = _command_argument(text, start + len(cmd))
        if content:
            return content
        found[cmd] = text.rfind(cmd, 0, start)
    return None


def _command_argument(text: str, pos: int) -> str | None:
    """The braced (or space-separated) argument that starts at ``pos``, or None."""
    if pos < len(text) and text[pos].isalpha():
        return None  # another command that merely starts with the name, e.g. \boxeds
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    if pos >= len(text):
        return None
    if text[pos] != "{":
        match = _BARE_ARGUMENT.match(text, pos)
        return match.group(0).strip() if match else None
    depth = 0
    i = pos
    stop = min(len(text), pos + _MAX_BOX_CHARS)
    while i < stop:
        char = text[i]
        if char == "\\":
            i += 2  # skip escaped characters such as \{ and \}
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[pos + 1 : i].strip() or None
        i += 1
    if stop < len(text):  # longer than any answer we read: hand it on to be refused as such
        return text[pos + 1 : stop]
    return None  # unbalanced: the response was cut off inside the box


def _last_gsm8k(text: str) -> str | None:
    """Rest of the line after the last ``####``."""
    start = text.rfind(_GSM8K_MARKER)
    if start < 0:
        return None
    line = text[start + len(_GSM8K_MARKER) :].split("\n", 1)[0]
    return line.strip() or None


def _last_answer_is(text: str) -> str | None:
    """The answer after the last "answer is"/"Answer:" phrase."""
    last = None
    for match in _ANSWER_IS.finditer(text):
        last = match
    if last is None:
        return None
    rest = text[last.end() :]
    for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if rest.startswith(opener):
            close = rest.find(closer, len(opener))
            if close > 0:
                return rest[len(opener) : close].strip() or None
    line = rest.split("\n", 1)[0].replace("**", "")
    line = re.split(r"\.(?:\s|$)", line, maxsplit=1)[0]  # end of the sentence
    return line.strip().rstrip(".").strip() or None


def _last_number(text: str) -> str | None:
    """The last number in ``text`` (looking at the tail first, so long texts stay cheap)."""
    for window in (*_FALLBACK_WINDOWS, len(text)):
        start = max(0, len(text) - window)
        last = None
        for match in _NUMBER.finditer(text, start):
            last = match
        if last is not None and (last.start() > start or start == 0):
            return last.group(0).rstrip(",") or None
        if start == 0:
            return None
    return None
