"""A registry of named entries (advantage estimators, policy losses): one way to add, find, remove.

A ``Registry`` is a read-only ``Mapping`` from name to entry for its readers; it changes only
through ``add`` and ``remove``. Adding a name twice raises ``DuplicateNameError``; asking for an
unknown name raises ``UnknownNameError`` listing the known names and close matches. Tests that
register an entry remove it afterwards (``remove`` returns it), so the registry is restored.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from rlvr.errors import DuplicateNameError, unknown_name

__all__ = ["Registry"]

_E = TypeVar("_E")


class Registry(Mapping[str, _E], Generic[_E]):
    """Named entries of one kind.

    Args:
        kind: what an entry is, for messages (``"advantage estimator"``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, _E] = {}

    def add(self, name: str, entry: _E) -> None:
        """Register ``entry`` under ``name``.

        Raises:
            DuplicateNameError: ``name`` is already registered (remove it first).
        """
        if name in self._entries:
            raise DuplicateNameError(
                f"{self.kind} {name!r} is already registered; remove it first to replace it"
            )
        self._entries[name] = entry

    def remove(self, name: str) -> _E:
        """Remove and return the entry ``name`` (``UnknownNameError`` if it is not there)."""
        entry = self[name]
        del self._entries[name]
        return entry

    def __getitem__(self, name: str) -> _E:
        """The entry ``name``; ``UnknownNameError`` (with close matches) if not registered."""
        if name not in self._entries:
            raise unknown_name(self.kind, name, self._entries)
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is registered."""
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        """The registered names, in registration order."""
        return iter(self._entries)

    def __len__(self) -> int:
        """How many entries are registered."""
        return len(self._entries)
