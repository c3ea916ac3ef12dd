"""Chat-template token bookkeeping for token-exact multi-turn episodes.

The runner never re-renders the whole history and never re-tokenizes model output. It needs
three things from the chat template, all computed here on a fixed short dummy conversation:

* the **prompt**: the opening messages rendered with the generation prompt;
* the **turn closing**: the template's tokens after an assistant message's content (ChatML:
  ``<|im_end|>`` then a newline). When the model ends its turn with the first closing token (its
  end-of-turn token, which it generated and is trained on) only the rest is appended; when it
  stopped on something else (the ``</tool_call>`` id) the whole closing is appended, as template
  tokens;
* the **env delta**: the tokens the template adds for new env messages plus the next generation
  prompt, taken as ``render(dummy + new, generation prompt) - render(dummy)``.

This is exact only if the template is prefix-stable: rendering a conversation with more messages
must extend, never rewrite, the rendering of the shorter one. ``ChatRenderer`` checks this once
per tokenizer (including a past assistant turn carrying a ``<think>`` block, the case where
reasoning templates drop earlier content) and every delta it computes re-checks its own prefix;
any violation raises ``ChatTemplateError``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from rlvr.agents.errors import ChatTemplateError
from rlvr.envs.base import Message

_DUMMY_USER: Message = {"role": "user", "content": "dummy question"}
_DUMMY_ASSISTANT: Message = {"role": "assistant", "content": "dummy"}
_THINKING_ASSISTANT: Message = {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nok"}
#: How many distinct opening renderings ``ChatRenderer.prompt_ids`` keeps.
PROMPT_CACHE_SIZE = 4096
_PromptKey = str | tuple[tuple[str, ...], ...]
#: How many distinct token sequences ``ChatRenderer.decode`` keeps the text of.
DECODE_CACHE_SIZE = 4096


class ChatRenderer:
    """Renders prompts and env-turn token deltas for one tokenizer's chat template.

    Args:
        tokenizer: a transformers tokenizer with a chat template.

    Raises:
        ChatTemplateError: the template is not prefix-stable (the message says where).

    Attributes:
        closing: the template's tokens after an assistant message's content.
        end_of_turn_id: ``closing[0]``, the token the model generates to end its turn.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._base: dict[str, list[int]] = {}
        self._prompts: OrderedDict[_PromptKey, list[int]] = OrderedDict()
        self._texts: dict[tuple[int, ...], str] = {}
        self.closing = self._find_closing()
        self.end_of_turn_id = self.closing[0]
        self._check_history_is_kept()

    # ------------------------------------------------------------------ rendering
    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
    ) -> list[int]:
        """Token ids of ``messages`` rendered by the chat template."""
        return render_chat(self.tokenizer, messages, tools, add_generation_prompt)

    def prompt_ids(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        """The opening messages plus the generation prompt (an episode's ``prompt_ids``).

        Renderings are memoised (the most recent ``PROMPT_CACHE_SIZE`` distinct openings): the
        episodes of a group, and tasks that come back, share one opening, and rendering a chat
        template costs far more than looking it up.
        """
        key = _prompt_key(messages, tools)
        ids = self._prompts.get(key)
        if ids is None:
            ids = self.render(messages, tools, add_generation_prompt=True)
            if len(self._prompts) >= PROMPT_CACHE_SIZE:
                self._prompts.popitem(last=False)
            self._prompts[key] = ids
        else:
            self._prompts.move_to_end(key)
        return list(ids)

    def turn_close(self, model_tokens: Sequence[int]) -> list[int]:
        """Template tokens that close the model's turn after ``model_tokens``.

        Returns ``closing[1:]`` when the model ended with its end-of-turn token, else the whole
        ``closing`` (e.g. after a stop on ``</tool_call>``).
        """
        if model_tokens and model_tokens[-1] == self.end_of_turn_id:
            return list(self.closing[1:])
        return list(self.closing)

    def env_delta(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        """Tokens for env ``messages`` plus the next generation prompt, after a closed turn.

        Raises:
            ChatTemplateError: adding ``messages`` rewrote the dummy conversation's tokens.
        """
        base = self._dummy_base(tools)
        full = self.render([_DUMMY_USER, _DUMMY_ASSISTANT, *messages], tools, True)
        if full[: len(base)] != base:
            raise ChatTemplateError(
                "chat template is not prefix-stable: rendering env messages with roles "
                f"{[m.get('role') for m in messages]} after an assistant turn changed the tokens "
                f"of the earlier turns (at token {_first_diff(base, full)}); token-exact "
                "multi-turn rollouts need a template that only appends"
            )
        return full[len(base) :]

    # ------------------------------------------------------------------ model text
    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids`` exactly as generated (special tokens kept, no clean-up).

        Memoised (the most recent ``DECODE_CACHE_SIZE`` distinct sequences): the samples of a
        group often say the same thing, and a lookup costs a fraction of the tokenizer's call.
        """
        key = tuple(token_ids)
        text = self._texts.get(key)
        if text is None:
            text = str(self.tokenizer.decode(
                list(token_ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
            ))
            if len(self._texts) >= DECODE_CACHE_SIZE:
                del self._texts[next(iter(self._texts))]  # the oldest
            self._texts[key] = text
        return text

    def token_for_char(self, token_ids: Sequence[int], char_end: int) -> int:
        """Index of the token whose decoding covers character ``char_end - 1`` of the text.

        Characters are mapped to tokens by decoding growing prefixes of ``token_ids`` (the model's
        own tokens, never re-tokenized). ``char_end`` must be in ``[1, len(decode(token_ids))]``.
        """
        text = self.decode(token_ids)
        target = text[:char_end]
        lo, hi = 1, len(token_ids)
        while lo < hi:  # the shortest prefix whose text already contains ``target``
            mid = (lo + hi) // 2
            if self.decode(token_ids[:mid]).startswith(target):
                hi = mid
            else:
                lo = mid + 1
        return lo - 1

    # ------------------------------------------------------------------ checks
    def _dummy_base(self, tools: Sequence[dict[str, Any]] | None) -> list[int]:
        key = json.dumps(tools, sort_keys=True, default=str) if tools else ""
        if key not in self._base:
            self._base[key] = self.render([_DUMMY_USER, _DUMMY_ASSISTANT], tools)
        return self._base[key]

    def _find_closing(self) -> list[int]:
        """The tokens after an assistant message's content; checks the generation prompt."""
        gen = self.render([_DUMMY_USER], None, add_generation_prompt=True)
        full = self._dummy_base(None)
        content = self.tokenizer.encode(_DUMMY_ASSISTANT["content"], add_special_tokens=False)
        end = len(gen) + len(content)
        if full[: len(gen)] != gen or full[len(gen) : end] != content:
            raise ChatTemplateError(
                "chat template is not prefix-stable: an assistant message is not rendered as the "
                "generation prompt followed by its content tokens (at token "
                f"{_first_diff(gen + content, full)})"
            )
        if end >= len(full):
            raise ChatTemplateError(
                "chat template renders no closing token after an assistant message; the model "
                "would have no end-of-turn token to generate"
            )
        return full[end:]

    def _check_history_is_kept(self) -> None:
        """Adding later turns must not rewrite an earlier assistant turn (e.g. drop thinking)."""
        short = [_DUMMY_USER, _THINKING_ASSISTANT]
        longer = [*short, {"role": "user", "content": "next"}, _DUMMY_ASSISTANT]
        a, b = self.render(short), self.render(longer)
        if b[: len(a)] != a:
            raise ChatTemplateError(
                "chat template is not prefix-stable: a later turn rewrote an earlier assistant "
                f"turn (at token {_first_diff(a, b)}); templates that drop past reasoning cannot "
                "be used for token-exact multi-turn rollouts"
            )


def render_chat(
    tokenizer: Any,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> list[int]:
    """Token ids of ``messages`` rendered by ``tokenizer``'s chat template (no checks)."""
    out = tokenizer.apply_chat_template(
        list(messages),
        tools=list(tools) if tools else None,
        add_generation_prompt=add_generation_prompt,
        tokenize=True,
    )
    ids = out["input_ids"] if not isinstance(out, list) else out
    return [int(t) for t in ids]


def _prompt_key(
    messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None
) -> _PromptKey:
    """The memo key of an opening: its exact content.

    Plain chat messages (str keys and values, no tools) give a tuple of their items, the rest
    its JSON; the two kinds never compare equal. The tuple costs a tenth of the JSON.
    """
    if not tools and all(
        type(m) is dict and all(type(k) is str and type(v) is str for k, v in m.items())
        for m in messages
    ):
        return tuple(tuple(x for item in m.items() for x in item) for m in messages)
    return json.dumps([messages, tools], sort_keys=True, default=str)


def _first_diff(a: Sequence[int], b: Sequence[int]) -> int:
    """Index of the first position where ``a`` and ``b`` differ (or the shorter length)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))
