"""glibc malloc settings for a CPU rollout engine's many mid-sized, short-lived tensors.

By default glibc serves every allocation above a (dynamic) threshold of 128 KiB-32 MiB with its
own ``mmap`` and gives freed memory at the top of a heap back to the OS beyond 128 KiB. A rollout
step allocates and frees hundreds of such buffers (activations, KV caches, logits) per forward:
each one then comes back as fresh pages, and the kernel zero-fills them on first touch: ~1,090
minor page faults per quickstart rollout, 5 once tuned, and the rollout ~10% faster
(BENCHMARKS.md, "Where a rollout's time goes").

``tune_malloc`` keeps such memory in the process: allocations up to 32 MiB come from the heap,
and up to 256 MiB of free memory is kept at a heap's top (64 MiB of padding per growth). The
process's resident memory then stays near its peak instead of falling back after it (a rank
loading a model shard by shard grew by 78% of the model's size instead of under 75%), so it is
applied only where it pays: ``TransformersEngine`` calls it when it decodes on the CPU, once per
process.
It does nothing outside glibc, or when the user set malloc's tunables themselves
(``MALLOC_*_`` or ``GLIBC_TUNABLES`` in the environment). ``RLVR_MALLOC_TUNING=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
"""``mallopt`` parameter numbers (glibc's ``malloc.h``)."""

SETTINGS = ((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 256 << 20), (M_TOP_PAD, 64 << 20))


_applied = False


def tune_malloc() -> bool:
    """Apply ``SETTINGS`` with glibc's ``mallopt`` (once per process); True when applied."""
    global _applied
    env = os.environ
    if not sys.platform.startswith("linux") or env.get("RLVR_MALLOC_TUNING", "1") == "0" or \
            "GLIBC_TUNABLES" in env or any(k.startswith("MALLOC_") and k.endswith("_")
                                           for k in env):
        return False
    if _applied:
        return True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p  # glibc only
        if not libc.gnu_get_libc_version():
            return False
    except (OSError, AttributeError):
        return False
    _applied = all(libc.mallopt(param, value) == 1 for param, value in SETTINGS)
    return _applied
