"""From chat messages to prompt tokens, and from generated tokens back to OpenAI messages.

``Templates`` wraps one tokenizer's chat template for the gateway. When the template is
prefix-stable (``rlvr.agents.chat.ChatRenderer`` accepts it) it also gives the token delta that new
messages add after an assistant turn, so a conversation that continues a previous completion is
extended by exactly the tokens the model generated, never a re-tokenisation of its text. A
template that rewrites history (e.g. drops past reasoning) is still served: every prompt is then
rendered in full, and the episode capture splits rows where the tokens stop extending.

``assistant_message`` turns a completion's text into an OpenAI assistant message: Hermes/Qwen
``<tool_call>`` blocks (parsed by ``rlvr.verifiers.tools``) become ``tool_calls`` with JSON-string
arguments, the rest is ``content``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.agents.chat import ChatRenderer, render_chat
from rlvr.agents.errors import ChatTemplateError
from rlvr.verifiers.tools import ToolCall, parse_tool_calls

TOOL_CALL_END = "</tool_call>"
TOOL_CALL_BLOCK = "<tool_call>\n{}\n</tool_call>"


@dataclass(frozen=True)
class ParsedReply:
    """A completion's text as an assistant message.

    Attributes:
        content: the text outside well-formed tool calls (None when nothing is left and there
            are tool calls).
        tool_calls: OpenAI tool calls: ``{"id", "type": "function", "function": {"name",
            "arguments": "<JSON>"}}``.
    """

    content: str | None
    tool_calls: list[dict[str, Any]]

    def message(self) -> dict[str, Any]:
        """The OpenAI ``message`` object."""
        out: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        return out


class Templates:
    """One tokenizer's chat template, as the gateway uses it.

    Args:
        tokenizer: a transformers tokenizer with a chat template.

    Attributes:
        delta: the prefix-stable renderer, or None when the template rewrites history (then
            ``delta_error`` says how).
        end_ids: ids that end the model's turn (the end-of-turn token and eos); not part of the
            returned text.
        tool_stop_id: the single id of ``</tool_call>``, or None.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.delta: ChatRenderer | None
        self.delta_error: str | None = None
        try:
            self.delta = ChatRenderer(tokenizer)
        except ChatTemplateError as exc:
            self.delta, self.delta_error = None, str(exc)
        eos = getattr(tokenizer, "eos_token_id", None)
        ends = {eos} if isinstance(eos, int) else set()
        if self.delta is not None:
            ends.add(self.delta.end_of_turn_id)
        else:
            im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
            if isinstance(im_end, int) and im_end != getattr(tokenizer, "unk_token_id", None):
                ends.add(im_end)
        self.end_ids = frozenset(ends)
        ids = tokenizer.encode(TOOL_CALL_END, add_special_tokens=False)
        self.tool_stop_id: int | None = ids[0] if len(ids) == 1 else None
        template = getattr(tokenizer, "chat_template", None)
        self.inline_tool_calls = "tool_calls" not in (template if isinstance(template, str)
                                                      else str(template or ""))

    def prepare(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Messages as the template renders them.

        A template that never reads ``tool_calls`` would drop an assistant's calls; for such a
        template they are written into the content as the Hermes blocks the model generates.
        """
        if not self.inline_tool_calls:
            return list(messages)
        out = []
        for m in messages:
            if m.get("role") == "assistant" and m.get("tool_calls"):
                blocks = [TOOL_CALL_BLOCK.format(json.dumps(
                    {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}))
                    for c in m["tool_calls"]]
                text = "\n".join([m["content"], *blocks] if m.get("content") else blocks)
                m = {k: v for k, v in m.items() if k != "tool_calls"} | {"content": text}
            out.append(m)
        return out

    def render(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
               ) -> list[int]:
        """The whole conversation plus the generation prompt."""
        return render_chat(self.tokenizer, self.prepare(messages), tools,
                           add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        """A completions prompt's ids (the tokenizer's special tokens, e.g. a BOS, included)."""
        return [int(t) for t in self.tokenizer.encode(text)]

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids`` (special tokens kept, no clean-up)."""
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=False,
                                         clean_up_tokenization_spaces=False))

    def text(self, token_ids: Sequence[int]) -> str:
        """The text a client sees of ``token_ids``.

        Special tokens (``<|im_end|>``, eos, ...) are skipped, as vLLM and SGLang decode.
        """
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=True,
                                         clean_up_tokenization_spaces=False))

    def token_text(self, token_id: int) -> str:
        """One token's text (for logprobs)."""
        return self.decode([token_id])

    def reply_text(self, token_ids: Sequence[int], stops: Sequence[str]) -> tuple[str, int, bool]:
        """The text a client sees of a completion.

        Returns:
            ``(text, n_tokens, stopped)``: the decoded tokens without a final end-of-turn/eos
            token and without special tokens (``text``), cut before the first stop string;
            ``n_tokens`` the tokens that text covers (what ``usage.completion_tokens`` and the
            logprobs count); ``stopped`` whether a stop string cut it.
        """
        ids = list(token_ids)
        if ids and ids[-1] in self.end_ids:
            ids = ids[:-1]
        text = self.text(ids)
        cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
        if cut < 0:
            return text, len(ids), False
        text = text[:cut]
        n = len(ids)
        while n > 0 and len(self.text(ids[: n - 1])) >= cut:
            n -= 1
        return text, n, True


def assistant_message(text: str, parse_tools: bool) -> ParsedReply:
    """Split ``text`` into content and OpenAI tool calls (well-formed ``<tool_call>`` blocks).

    Malformed blocks stay in ``content`` as text, so the agent sees what the model wrote.
    """
    calls = [c for c in parse_tool_calls(text) if isinstance(c, ToolCall)] if parse_tools else []
    if not calls:
        return ParsedReply(text, [])
    pieces, at = [], 0
    for call in calls:
        pieces.append(text[at : call.span[0]])
        at = call.span[1]
    pieces.append(text[at:])
    content = "".join(pieces).strip()
    tool_calls = [
        {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
         "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for c in calls
    ]
    return ParsedReply(content or None, tool_calls)


def same_assistant(sent: dict[str, Any], returned: dict[str, Any]) -> bool:
    """Whether an assistant message in a request is the one the gateway returned.

    ``sent`` is a validated request message (tool-call arguments decoded); ``returned`` the
    ``ParsedReply.message()`` the gateway answered. Content is compared as text (None as ""),
    tool calls by name and decoded arguments, in order.
    """
    if sent.get("role") != "assistant":
        return False
    if (sent.get("content") or "") != (returned.get("content") or ""):
        return False
    mine = returned.get("tool_calls") or []
    theirs = sent.get("tool_calls") or []
    if len(mine) != len(theirs):
        return False
    for a, b in zip(mine, theirs):
        if a["function"]["name"] != b["function"]["name"]:
            return False
        if json.loads(a["function"]["arguments"]) != b["function"]["arguments"]:
            return False
    return True
