"""Seeds derived from the run's seed and a key, stable across processes and Python versions."""

from __future__ import annotations

import hashlib


def derived_seed(*parts: object) -> int:
    """A 62-bit seed from ``parts`` (stable across processes and Python versions)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2


__all__ = ["derived_seed"]
