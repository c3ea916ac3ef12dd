"""Token-exact capture of one episode's calls, and the training rows they make.

Every call an episode makes through its endpoint is kept as a ``CallNode``: the exact prompt ids
the engine was given and, per choice, the ids and logprobs it generated. A new call continues an
earlier choice when its prompt tokens begin with that choice's prompt + completion; the tokens in
between (the turn's closing, tool results, the next generation prompt) are env tokens (mask 0).
The gateway builds a continuing prompt in two ways (``rlvr.agents.gateway.service``):

* the request's messages are the earlier request's messages, then the assistant message the
  gateway returned, then new messages: the prompt is the earlier prompt + the completion's own
  ids + the template's delta for the new messages (prefix-stable templates only);
* otherwise the messages are rendered in full and compared token by token with every earlier
  prompt + completion (``longest_prefix``).

A call that continues nothing (the agent edited its history, or the template rewrote an earlier
turn) starts a new chain: a **prefix break**. ``rows`` turns the call tree into training rows:
one per leaf (a choice no later call continued), each the chain of calls from its root, so every
row is exactly what the engine saw. A model token shared by several rows (the calls before a
branch: ``n > 1``, or parallel calls) is trained in the first row only and is an env token
(mask 0) in the others. Every row carries the episode's reward on its last model token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.agents.episode import EpisodeRecord


@dataclass
class CallChoice:
    """One generated choice of a call.

    Attributes:
        token_ids: the generated ids (the ending token included).
        logprobs: the engine's logprob of each.
        finish_reason: the engine's ("stop", "length", "abort").
        message: the assistant message returned for it (chat calls), else None.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    message: dict[str, Any] | None = None


@dataclass
class CallNode:
    """One call: its prompt, what it continues, and its choices.

    Attributes:
        prompt_ids: the exact ids the engine was given.
        parent: ``(call index, choice index)`` this call continues, or None (a chain's root).
        messages: the request's validated messages (chat calls), else None.
        tools: the request's tools (chat calls), else None.
        choices: the generated choices, filled when generation finished.
    """

    prompt_ids: list[int]
    parent: tuple[int, int] | None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    choices: list[CallChoice] = field(default_factory=list)


@dataclass
class Row:
    """One training row of an episode (see the module docstring)."""

    record: EpisodeRecord
    leaf: tuple[int, int]


class EpisodeCapture:
    """The calls of one episode (one endpoint), kept token-exact.

    Args:
        key: the episode's endpoint key.

    Attributes:
        calls: every call, in arrival order.
        prefix_breaks: calls that continued no earlier call, after the first.
        exhausted: why the endpoint refused further calls ("max_turns", "length"), or None.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self.calls: list[CallNode] = []
        self.prefix_breaks = 0
        self.exhausted: str | None = None

    # ------------------------------------------------------------------ continuing
    def context(self, at: tuple[int, int]) -> list[int]:
        """Prompt + completion ids of choice ``at = (call, choice)``."""
        node = self.calls[at[0]]
        return node.prompt_ids + node.choices[at[1]].token_ids

    def response_len(self, at: tuple[int, int] | None, prompt_len: int) -> int:
        """Response tokens (model and env) of a prompt of ``prompt_len`` continuing ``at``.

        0 for a chain's root (``at`` None): its prompt is the row's prompt.
        """
        if at is None:
            return 0
        root = at[0]
        while (parent := self.calls[root].parent) is not None:
            root = parent[0]
        return prompt_len - len(self.calls[root].prompt_ids)

    def continued_message(self, messages: list[dict[str, Any]],
                          tools: list[dict[str, Any]] | None, same: Any
                          ) -> tuple[tuple[int, int], list[dict[str, Any]]] | None:
        """The latest chat choice whose conversation ``messages`` continues, and the new messages.

        ``messages`` continues choice ``c`` of call ``k`` when it starts with call ``k``'s
        messages followed by the assistant message returned for ``c`` (``same(sent, returned)``
        decides), with the same tools.
        """
        for k in range(len(self.calls) - 1, -1, -1):
            node = self.calls[k]
            if node.messages is None or node.tools != tools:
                continue
            n = len(node.messages)
            if len(messages) <= n or messages[:n] != node.messages:
                continue
            for c, choice in enumerate(node.choices):
                if choice.message is not None and same(messages[n], choice.message):
                    return (k, c), messages[n + 1 :]
        return None

    def longest_prefix(self, prompt_ids: list[int]) -> tuple[int, int] | None:
        """The choice whose prompt + completion is the longest prefix of ``prompt_ids``."""
        best: tuple[int, int] | None = None
        best_len = 0
        for k, node in enumerate(self.calls):
            for c in range(len(node.choices)):
                ctx = self.context((k, c))
                if best_len < len(ctx) <= len(prompt_ids) and prompt_ids[: len(ctx)] == ctx:
                    best, best_len = (k, c), len(ctx)
        return best

    def add_call(self, node: CallNode) -> int:
        """Keep ``node`` (before generation; choices come later); returns its index."""
        if node.parent is None and self.calls:
            self.prefix_breaks += 1
        self.calls.append(node)
        return len(self.calls) - 1

    # ------------------------------------------------------------------ rows
    def rows(self, reward: float, check: bool = True) -> list[Row]:
        """The training rows, the chain through the last call's first choice first.

        Args:
            reward: the episode's reward, written on each row's last model token.
            check: re-verify each row with ``EpisodeRecord.check`` (every call's prompt is a
                prefix of the row and its completion follows it with mask 1).

        Raises:
            TokenMismatchError: ``check`` found a row that differs from what the engine saw.
        """
        continued = {n.parent for n in self.calls if n.parent is not None and n.choices}
        leaves = [(k, c) for k, n in enumerate(self.calls) for c in range(len(n.choices))
                  if (k, c) not in continued]
        done = [n for n in self.calls if n.choices]
        if not done:
            return []
        last = (len(self.calls) - 1, 0)
        while not self.calls[last[0]].choices:  # a call still generating (or failed)
            last = (last[0] - 1, 0)
        leaves.sort(key=lambda leaf: (not self._on_chain(last, leaf), leaf))
        trained: set[tuple[int, int]] = set()
        rows = []
        for leaf in leaves:  # (a call that failed has no choices: not part of any row)
            chain = self._chain(leaf)
            root = self.calls[chain[0][0]]
            record = EpisodeRecord(list(root.prompt_ids), keep_contexts=check)
            for at in chain:
                node = self.calls[at[0]]
                glue = node.prompt_ids[len(record.context()):]
                record.add_env_tokens(glue)
                choice = node.choices[at[1]]
                if at in trained:
                    record.add_env_tokens(choice.token_ids)
                else:
                    record.add_model_turn(node.prompt_ids, choice.token_ids, choice.logprobs)
                    trained.add(at)
            if record.n_model_tokens == 0:
                continue
            last_model = max(i for i, m in enumerate(record.response_mask) if m)
            record.token_level_scores[last_model] += float(reward)
            if check:
                record.check()
            rows.append(Row(record, leaf))
        return rows

    def _chain(self, leaf: tuple[int, int]) -> list[tuple[int, int]]:
        chain = [leaf]
        while (parent := self.calls[chain[-1][0]].parent) is not None:
            chain.append(parent)
        return chain[::-1]

    def _on_chain(self, leaf: tuple[int, int], other: tuple[int, int]) -> bool:
        return other in self._chain(leaf) or leaf in self._chain(other)
