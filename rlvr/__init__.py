"""rlvr: reinforcement learning with verifiable rewards for language models."""

import os as _os
import sys as _sys

# OpenMP threads wait for work by spinning by default. With torch on 2+ threads, one other busy
# process on the machine then makes every op wait for a descheduled thread: a 120-step warm-up
# of the quickstart took 9.5x longer on 2 threads next to one competing process, and 1.08x with
# passive waiting (which costs ~11% on a quiet machine). OpenMP reads the policy when torch
# loads it, so this only takes effect when rlvr is imported before torch.
if "torch" not in _sys.modules:
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
