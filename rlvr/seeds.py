"""The one way a seed is derived from the run's seed and a key.

``derived_seed(seed, "task", step, group)`` hashes its parts (joined by ``/``) with BLAKE2b, so
the value is the same in every process, on every platform and Python version (no ``hash()``
randomisation), and two keys that differ anywhere give unrelated seeds. Everything seeded per
item derives its seed here: the trainer's tasks and sampling seeds (``rlvr.training``), the
epochs of the task stream, the learner's mini-batch shuffles, the held-out evaluation's episodes
(``rlvr.eval.plan``) and the runner's per-turn sampling seeds (``rlvr.agents.runner.turn_seed``).
"""

from __future__ import annotations

import hashlib


def derived_seed(*parts: object, bits: int = 62) -> int:
    """A ``bits``-bit seed (at most 64) from ``parts``, stable across processes and versions.

    The 62-bit default fits every generator we seed (``torch.Generator.manual_seed`` takes up
    to 2**64 - 1, an engine's sampling seed a signed 64-bit integer); ``bits=31`` suits APIs
    that take a 32-bit signed seed.
    """
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> (64 - bits)


__all__ = ["derived_seed"]
