r"""Find the final answer inside a model response.

Priority, first hit wins:

1. the last ``\boxed{...}`` or ``\fbox{...}`` (nested braces; also ``\boxed 5``);
2. the last GSM8K marker ``#### 42`` (rest of that line);
3. the last "The final answer is ...", "The answer is ...", "Answer: ..." (rest of the sentence,
   or the ``$...$`` right after it);
4. the last math span (``$...$``, ``$$...$$``, ``\(...\)``, ``\[...\]``) when no number follows
   it outside math: "so the probability is $\frac{3}{4}$." reads ``\frac{3}{4}``, not the
   denominator;
5. the whole response when it is one expression (one line, no words): ``3 + 4i``, ``x^2 + 1``;
6. optionally (``last_number_fallback=True``, the default) the last number in the text
   (``-12``, ``3.5``, ``1,000``, ``3/4``, ``3 + 4i``).

Several answers side by side are read as the list they are, never as their last item: boxes,
math spans or numbers that follow one another with only separators between them (commas, "or",
"and", "to", whitespace) come back joined by commas. So "\boxed{3} or \boxed{4}", "either 3 or 4",
"between 3 and 4" and a long list of numbers never equal a single gold answer (they do equal a
gold list such as ``3, 4``). ``extract`` goes further and refuses what is not one answer: two
different boxed values anywhere (a correction "\boxed{3}. Wait, ... \boxed{5}" included) or a
hedge word beside the answer are "ambiguous" (``extract_answer`` then returns None), and only
the text after the last ``</think>`` counts.

Every step is a linear scan (box contents are scanned at most 20,000 characters, and at most 16
unclosed boxes are skipped), so a 1 MB response costs milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["AnswerSpan", "Extraction", "extract", "extract_answer", "find_boxed", "find_numbers"]

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_GSM8K_MARKER = "####"
_ANSWER_IS = re.compile(
    r"(?:final\s+answer|answer)\s*(?:is|:|=)\s*:?\s*",
    re.IGNORECASE,
)
_BARE_ARGUMENT = re.compile(r"[^\s$]+")
_REAL = r"(?:\d[\d,]*(?:\.\d+)?(?:/\d+)?|\.\d+)"
_NUMBER = re.compile(  # also a + bi, bi; the sign may be U+2212; bounded gaps: linear time
    rf"[-\u2212]?{_REAL}(?:[ \t]{{0,3}}[-+\u2212][ \t]{{0,3}}(?:{_REAL})?[ \t]{{0,3}}i\b|i\b)?"
)
_SEPARATOR_WORDS = r"or|and|to|through|nor|either|maybe|perhaps|possibly|also|alternatively"
_LIST_SEPARATOR = re.compile(  # boxes count too: "\boxed{3} \boxed{4}", but not "\frac{3}{4}"
    rf"(?:\s|[,;$}}]|\\\$|\\(?:boxed|fbox)\s*\{{|\\quad|\\qquad"
    rf"|\\text\s*\{{\s*(?:(?:{_SEPARATOR_WORDS})\s*)?\}}|\b(?:{_SEPARATOR_WORDS})\b)*",
    re.IGNORECASE,
)
_SPAN_GAP = re.compile(  # what may stand between two boxes or math spans of one list
    rf"(?:\s|[,;:&.$]|\\quad|\\qquad|\\[()\[\]]|\\text\s*\{{\s*(?:(?:{_SEPARATOR_WORDS})\s*)?\}}"
    rf"|\b(?:{_SEPARATOR_WORDS})\b)*",
    re.IGNORECASE,
)
_MATH_SPAN = re.compile(
    r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<!\\)\$((?:[^$\\]|\\.)+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]",
    re.DOTALL,
)
_COMMAND = re.compile(r"\\[a-zA-Z]+")
_WORD = re.compile(r"[a-zA-Z]{2,}")
_CONNECTIVE = re.compile(r"\b(?:or|and)\b")
_SPACED_NUMBERS = re.compile(r"\d\s+\d")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_FALLBACK_WINDOWS = (4096, 65536)
_MAX_BOX_CHARS = 20_000  # a box longer than this is returned cut (and then refused as too long)
_MAX_BOXES_TRIED = 16  # unclosed boxes skipped before giving up (keeps hostile input linear)
_MAX_LIST_ITEMS = 1000  # items joined into one answer (more are refused as too long anyway)
_MAX_WHOLE_CHARS = 400  # a longer response is not read as one bare expression
_MAX_SPAN_TAIL = 4096  # math spans are looked for in the response's last characters only


@dataclass(frozen=True)
class AnswerSpan:
    r"""Where an answer sits in a response.

    Attributes:
        start: index of the first character (of the first item's ``\boxed``, for boxes).
        end: index after the last character.
        answer: the answer text; several items are joined by ", ".
        items: how many answers stand side by side there (more than one: a list or a hedge).
    """

    start: int
    end: int
    answer: str
    items: int = 1


_HEDGE = re.compile(
    r"\b(?:or|either|maybe|perhaps|possibly|probably|likely|alternatively|guess|unsure|might"
    r"|could)\b|not\s+sure",
    re.IGNORECASE,
)
"""Words that make the answer beside them one of several (``maybe 18 (or 19)``)."""
_HEDGE_INSIDE = re.compile(
    r"\b(?:either|maybe|perhaps|possibly|probably|likely|alternatively|guess|unsure|might"
    r"|could)\b|not\s+sure",
    re.IGNORECASE,
)
"""The hedge words inside an answer itself ("or" there joins a list: ``x = 1 or x = 2``)."""
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_MAX_BOXES_READ = 1000
ANSWER_FORMATS = ("auto", "boxed", "plain")


@dataclass(frozen=True)
class Extraction:
    r"""The one final answer of a response, or why there is none.

    Attributes:
        answer: the answer text (several items side by side joined by ", "), or None.
        reason: "" when ``answer`` is set; else "no_answer", "unreadable" (a last number that is
            part of an expression: ``56 + \pi - \pi``) or "ambiguous" (several different
            answers, or a hedge beside the answer).
    """

    answer: str | None
    reason: str = ""


def final_part(text: str) -> str:
    """The part of a response that states its answer: after the last ``</think>``.

    A response that opens a ``<think>`` block and never closes it has stated nothing ("").
    """
    close = text.rfind(_THINK_CLOSE)
    if close >= 0:
        return text[close + len(_THINK_CLOSE) :]
    return "" if _THINK_OPEN in text else text


def extract(
    text: str, *, last_number_fallback: bool = True, answer_format: str = "auto"
) -> Extraction:
    r"""The one final answer of ``text`` (see ``extract_answer``), or a named refusal.

    Boxes: every complete box of the final part counts. One value (however often boxed) is
    the answer; several different values are "ambiguous" unless they stand side by side as one
    list joined without a hedge word (``oxed{1}, oxed{2}``). Text after the last box that
    holds a number and a hedge word ("or", "maybe", ...) makes it "ambiguous" too. Answers read
    from text ("The answer is ...", the last number) are "ambiguous" when their sentence holds
    a hedge word.

    Args:
        text: the response.
        last_number_fallback: as in ``extract_answer``.
        answer_format: "auto" (the whole chain), "boxed" (boxes only), "plain" (the last number
            only).
    """
    text = final_part(text)
    if answer_format != "plain":
        boxed = _boxed_answer(text)
        if boxed is not None or answer_format == "boxed":
            return boxed or Extraction(None, "no_answer")
    if answer_format == "auto":
        for finder in (_last_gsm8k, _last_answer_is, _final_math, _whole_expression):
            found = finder(text)
            if found:
                if finder is not _whole_expression and (
                    _HEDGE.search(_sentence_of(text, found)) or _HEDGE_INSIDE.search(found)
                ):
                    return Extraction(None, "ambiguous")
                return Extraction(found)
        if not last_number_fallback:
            return Extraction(None, "no_answer")
    numbers = find_numbers(text)
    if numbers is None:
        return Extraction(None, "no_answer")
    before = text[max(0, numbers.start - 24) : numbers.start]
    if _OPERATOR_AFTER.match(text, numbers.end) or _OPERATOR_BEFORE.search(before):
        return Extraction(None, "unreadable")  # the number is part of an expression
    sentence_start = _sentence_start(text, numbers.start)
    if _HEDGE.search(text, sentence_start, numbers.start) or _HEDGE.search(text, numbers.end):
        return Extraction(None, "ambiguous")
    return Extraction(_with_magnitude(text, numbers.end, numbers.answer))


_MAGNITUDE_AFTER = re.compile(
    r"\s{0,3}(?:\\(?:text|mathrm|mbox)\s{0,3}\{\s{0,3})?(hundred|thousand|million|billion|trillion"
    r"|dozen)\b",
    re.IGNORECASE,
)


_TEXT_AFTER = re.compile(
    r"\s{0,3}\\(?:text|mathrm|mbox|textrm)\s{0,3}\{[^{}$]{0,60}\}(?:\^\{?\d\}?)?"
)
_DEGREES_AFTER = re.compile(r"\s{0,3}(?:\^\s{0,3}\{?\s{0,3}\\circ\s{0,3}\}?|\u00b0)")
_OPERATOR_BEFORE = re.compile(r"(?:[+*/^_{\u00d7\u00f7\u00b7]|\\[A-Za-z]+)\s{0,3}$")
_OPERATOR_AFTER = re.compile(
    r"\s{0,3}(?:[-+*/^_}\u00d7\u00f7\u00b7]|\\(?!text|mathrm|mbox|textrm))"
)


def _with_magnitude(text: str, end: int, answer: str) -> str:
    r"""``answer`` with the words written right after it, to be read, never dropped.

    A magnitude word (``2`` million is 2000000), a ``\text{...}`` (a unit or any word) or a
    degree sign right after the answer belong to it.
    """
    match = _MAGNITUDE_AFTER.match(text, end)
    if match:
        return f"{answer} \\text{{ {match.group(1)}}}"
    match = _TEXT_AFTER.match(text, end) or _DEGREES_AFTER.match(text, end)
    return f"{answer}{match.group(0)}" if match else answer


def _sentence_start(text: str, pos: int) -> int:
    window = max(0, pos - 400)
    last = window
    for match in _SENTENCE_END.finditer(text, window, pos):
        last = match.end()
    return last


def _sentence_of(text: str, found: str) -> str:
    """The sentence around the last occurrence of ``found`` (the answer's own words excluded)."""
    at = text.rfind(found)
    if at < 0:
        return found
    start = _sentence_start(text, at)
    end_match = _SENTENCE_END.search(text, at + len(found))
    end = end_match.start() if end_match else len(text)
    return text[start:at] + " " + text[at + len(found) : max(end, at + len(found))]


def _all_boxes(text: str) -> list[tuple[int, int, str]]:
    """Every complete box of ``text``, last first (at most ``_MAX_BOXES_READ``)."""
    boxes: list[tuple[int, int, str]] = []
    limit = len(text)
    while len(boxes) < _MAX_BOXES_READ:
        box = _box_before(text, limit)
        if box is None:
            break
        boxes.append(box)
        limit = box[0]
    return boxes


def _boxed_answer(text: str) -> Extraction | None:
    boxes = _all_boxes(text)
    if not boxes:
        return None
    last_end = boxes[0][1]
    tail = text[last_end:]
    if any(c.isdigit() for c in tail) and _HEDGE.search(tail):
        return Extraction(None, "ambiguous")
    distinct = {"".join(b[2].split()) for b in boxes}
    if len(distinct) == 1:
        return Extraction(_with_magnitude(text, last_end, boxes[-1][2]))
    group = find_boxed(text)
    if group is None or group.items != len(boxes) or _HEDGE.search(text, group.start, group.end):
        return Extraction(None, "ambiguous")
    return Extraction(group.answer)


def extract_answer(text: str, *, last_number_fallback: bool = True) -> str | None:
    """Return the final answer written in ``text``, or None when there is none.

    Args:
        text: the model response.
        last_number_fallback: when no boxed/``####``/"answer is" answer, no final math span and
            no whole-response expression is present, return the last number in the text
            (default True; set False to require an explicit answer).

    Returns:
        The answer as written (LaTeX kept, surrounding whitespace stripped; several answers side
        by side joined by ", "), or None.
    """
    return extract(text, last_number_fallback=last_number_fallback).answer


def find_boxed(text: str) -> AnswerSpan | None:
    r"""The last complete ``\boxed``/``\fbox`` answer, with the boxes listed just before it.

    Boxes separated only by separators (``\boxed{3} or \boxed{4}``, ``\boxed{1}, \boxed{2}``)
    are one list; their contents come back joined by ", ".
    """
    last = _box_before(text, len(text))
    if last is None:
        return None
    start, end, content = last
    contents = [content]
    while len(contents) < _MAX_LIST_ITEMS:
        previous = _box_before(text, start)
        if previous is None or not _SPAN_GAP.fullmatch(text, previous[1], start):
            break
        start = previous[0]
        contents.append(previous[2])
    return AnswerSpan(start, end, ", ".join(reversed(contents)), len(contents))


def _box_before(text: str, limit: int) -> tuple[int, int, str] | None:
    r"""``(start, end, content)`` of the last complete box that ends by ``limit``."""
    found = {cmd: text.rfind(cmd, 0, limit) for cmd in _BOX_COMMANDS}
    for _ in range(_MAX_BOXES_TRIED):
        cmd = max(found, key=found.__getitem__)
        start = found[cmd]
        if start < 0:
            return None
        argument = _command_argument(text, start + len(cmd))
        if argument is not None and argument[1] <= limit:
            return start, argument[1], argument[0]
        found[cmd] = text.rfind(cmd, 0, start)
    return None


def _command_argument(text: str, pos: int) -> tuple[str, int] | None:
    """The braced (or space-separated) argument that starts at ``pos`` and where it ends."""
    if pos < len(text) and text[pos].isalpha():
        return None  # another command that merely starts with the name, e.g. \boxeds
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    if pos >= len(text):
        return None
    if text[pos] != "{":
        match = _BARE_ARGUMENT.match(text, pos)
        return (match.group(0).strip(), match.end()) if match else None
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
                content = text[pos + 1 : i].strip()
                return (content, i + 1) if content else None
        i += 1
    if stop < len(text):  # longer than any answer we read: hand it on to be refused as such
        return text[pos + 1 : stop], stop
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
    if rest.startswith(("$", "\\(", "\\[")):
        spans = _leading_spans(rest)
        if spans:
            return spans
    line = rest.split("\n", 1)[0].replace("**", "")
    line = re.split(r"\.(?:\s|$)", line, maxsplit=1)[0]  # end of the sentence
    return line.strip().rstrip(".").strip() or None


def _leading_spans(text: str) -> str | None:
    """The math span that opens ``text`` and the spans and numbers listed right after it.

    "$3$ or $4$", "$3$, $4$" and "$3$ or 4" come back as "3, 4" (a list, never one answer).
    """
    contents: list[str] = []
    pos = 0
    while len(contents) < _MAX_LIST_ITEMS:
        match = _MATH_SPAN.match(text, pos)
        if match is None:
            number = _NUMBER.match(text, pos) if contents else None
            if number is None:
                break
            contents.append(number.group(0))
            pos = number.end()
        else:
            content = next(g for g in match.groups() if g is not None).strip()
            if content:
                contents.append(content)
            pos = match.end()
        gap = _SPAN_GAP.match(text, pos)
        if gap is None or gap.end() == pos or gap.end() >= len(text):
            break
        if not re.search(r"[,;]|\b(?:or|and|to|nor)\b", gap.group(0), re.IGNORECASE):
            if "\n" in gap.group(0) or "." in gap.group(0):
                break  # the sentence ended: what follows is not part of the answer
        pos = gap.end()
    return ", ".join(contents) or None


def _final_math(text: str) -> str | None:
    """The last math span, with the spans listed just before it, when no number follows it."""
    offset = max(0, len(text) - _MAX_SPAN_TAIL)
    if text.count("$", 0, offset) % 2:  # the window starts inside a $...$: skip to its end
        offset = text.find("$", offset) + 1 or len(text)
    spans = [
        (m.start(), m.end(), next(g for g in m.groups() if g is not None).strip())
        for m in _MATH_SPAN.finditer(text, offset)
    ]
    spans = [s for s in spans if s[2]]
    if not spans or any(char.isdigit() for char in text[spans[-1][1] :]):
        return None
    start, _, content = spans[-1]
    if not any(char.isdigit() or char == "\\" for char in content):
        return None  # a variable named in passing ("for every $n$"), not an answer
    contents = [content]
    for previous in reversed(spans[:-1]):
        if not _SPAN_GAP.fullmatch(text, previous[1], start):
            break
        start = previous[0]
        contents.append(previous[2])
    return ", ".join(reversed(contents))


def _whole_expression(text: str) -> str | None:
    """The whole response when it is one bare expression (one line, no words, balanced)."""
    stripped = text.strip().rstrip(".").strip()
    if not stripped or len(stripped) > _MAX_WHOLE_CHARS or "\n" in stripped:
        return None
    if stripped.count("{") != stripped.count("}") or any(c in stripped for c in _BOX_COMMANDS):
        return None  # cut off (inside a box): not a complete expression
    letters = _CONNECTIVE.sub(" ", _COMMAND.sub(" ", stripped))
    if _WORD.search(letters) or _SPACED_NUMBERS.search(_COMMAND.sub("#", stripped)):
        return None
    if not any(char.isalnum() or char == "\\" for char in stripped):
        return None
    return stripped


def find_numbers(text: str) -> AnswerSpan | None:
    """The last number in ``text``, with the numbers listed just before it.

    Numbers separated only by separators ("3 or 4", "between 3 and 4", "1, 2, 3", whitespace)
    are one list, joined by ", ". The tail of the text is searched first, so long texts stay
    cheap.
    """
    for window in (*_FALLBACK_WINDOWS, len(text)):
        begin = max(0, len(text) - window)
        matches = list(_NUMBER.finditer(text, begin))
        if matches and (matches[0].start() > begin or begin == 0):
            return _number_list(text, matches)
        if begin == 0:
            return None
    return None


def _number_list(text: str, matches: list[re.Match[str]]) -> AnswerSpan:
    last = matches[-1]
    items = [last.group(0).rstrip(",")]
    start = last.start()
    for previous in reversed(matches[:-1]):
        gap_is_separator = _LIST_SEPARATOR.fullmatch(text, previous.end(), start)
        if len(items) >= _MAX_LIST_ITEMS or previous.end() == start or not gap_is_separator:
            break
        start = previous.start()
        items.append(previous.group(0).rstrip(","))
    if len(items) > 1:  # in a list, "1,234" is one number: drop its thousands separators
        items = [item.replace(",", "") if _THOUSANDS.fullmatch(item) else item for item in items]
    return AnswerSpan(start, last.end(), ", ".join(reversed(items)), len(items))
