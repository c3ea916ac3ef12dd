"""Gymnasium spaces for text environments: free text actions and chat-message observations."""

from __future__ import annotations

import string
from typing import Any

from gymnasium import spaces

ROLES = ("system", "user", "assistant", "tool")
"""The chat roles an observation message may carry."""

DEFAULT_MAX_CHARS = 1_000_000


class FreeText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` that accepts any Unicode string up to ``max_length``.

    ``gymnasium.spaces.Text`` only contains strings drawn from its charset; model output can hold
    any character, so membership here checks the type and length only. Sampling draws printable
    ASCII.
    """

    def __init__(self, max_length: int = DEFAULT_MAX_CHARS, *, seed: int | None = None) -> None:
        super().__init__(max_length, min_length=0, charset=string.printable, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """Draw a short printable string (at most 64 characters unless a mask says otherwise)."""
        if mask is None and probability is None:
            length = int(self.np_random.integers(0, min(64, self.max_length) + 1))
            return "".join(self.np_random.choice(self.character_list, size=length))
        return super().sample(mask=mask, probability=probability)

    def contains(self, x: Any) -> bool:
        """Return whether ``x`` is a string of at most ``max_length`` characters."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"FreeText(max_length={self.max_length})"


class ChatMessages(spaces.Space[list[dict[str, Any]]]):
    """The space of chat-message lists: ``[{"role": ..., "content": str, ...}, ...]``.

    A member is a list (possibly empty: the last step's observation) of dicts, each with a
    ``role`` in :data:`ROLES` and a string ``content``; extra keys (e.g. ``name`` on tool
    messages) are allowed. Contents are at most ``max_chars`` long.
    """

    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS, *, seed: int | None = None) -> None:
        self.max_chars = max_chars
        self._text = FreeText(max_chars)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Chat messages have no fixed-size array form."""
        return False

    def seed(self, seed: int | None = None) -> int | list[int] | dict[str, int]:
        """Seed the sampler (and the text sampler used for message contents)."""
        seeded = super().seed(seed)
        self._text.seed(int(self.np_random.integers(2**31)))
        return seeded

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        """Draw one to three messages with random roles and printable contents."""
        count = int(self.np_random.integers(1, 4))
        return [
            {"role": str(self.np_random.choice(ROLES)), "content": self._text.sample()}
            for _ in range(count)
        ]

    def contains(self, x: Any) -> bool:
        """Return whether ``x`` is a list of well-formed chat messages."""
        if not isinstance(x, list):
            return False
        return all(
            isinstance(message, dict)
            and message.get("role") in ROLES
            and isinstance(message.get("content"), str)
            and len(message["content"]) <= self.max_chars
            for message in x
        )

    def __repr__(self) -> str:
        return f"ChatMessages(max_chars={self.max_chars})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatMessages) and other.max_chars == self.max_chars

    def to_jsonable(self, sample_n: Any) -> list[Any]:
        """Messages are already JSON-able."""
        return list(sample_n)

    def from_jsonable(self, sample_n: list[Any]) -> list[Any]:
        """Messages are already JSON-able."""
        return list(sample_n)
