"""Intra-op threads for one thread (the transformers engine's worker), the process's left alone.

``torch.set_num_threads`` does two things: it sets the calling thread's OpenMP thread count and
the process-wide default that threads started later pick up (and MKL's). With OpenMP, torch's
CPU backend on Linux, each thread keeps its own count once it has run a parallel region, so one
thread can decode on one core while the thread that trains keeps two. ``use_intra_op_threads``
sets the caller's count and then puts the process default back from a short-lived helper thread
(whose own count is thrown away with it).

Why the engine wants its own: a decode step of a small model at batch 128 is hundreds of tiny
ops, and splitting each over two OpenMP threads costs more than it saves (the quickstart's
rollout forwards took 1.5-1.8x longer on two threads than on one), while the update's larger
ops gain from two.
"""

from __future__ import annotations

import functools
import threading

import torch


@functools.cache
def openmp_backend() -> bool:
    """Whether torch's intra-op parallel backend is OpenMP (per-thread thread counts)."""
    return "parallel backend: OpenMP" in torch.__config__.parallel_info()


def use_intra_op_threads(threads: int) -> bool:
    """Run the calling thread's torch ops on ``threads`` intra-op threads; others keep theirs.

    Args:
        threads: ``>= 1``.

    Returns:
        True when set; False (nothing changed) when the parallel backend is not OpenMP, where
        the count is one pool for the whole process and setting it would slow every thread.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an int >= 1; got {threads!r}")
    if not openmp_backend():
        return False
    before = torch.get_num_threads()
    if before == threads:
        return True
    torch.set_num_threads(threads)
    restore = threading.Thread(target=torch.set_num_threads, args=(before,),
                               name="restore-intra-op-threads")
    restore.start()
    restore.join()
    return True
