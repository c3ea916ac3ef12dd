"""How the two-rank test workers end: the process group torn down, then no interpreter teardown.

A rank that returned from ``main`` after ``destroy_process_group`` could still abort in the
interpreter's own teardown ("terminate called without an active exception": a C++ thread of
the distributed runtime destroyed while joinable), seen in CI after every result was written.
``end_worker`` joins the group, destroys it, flushes the output and leaves with ``os._exit``, so
a worker's exit status says whether its work succeeded.
"""

from __future__ import annotations

import os
import sys

import torch.distributed as dist


def end_worker() -> None:
    """Barrier, destroy the process group, flush stdout/stderr, ``os._exit(0)``."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
