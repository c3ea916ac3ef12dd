from __future__ import annotations

import pytest

from rlvr.learner import init_distributed


@pytest.fixture(scope="session")
def dist_info():
    """The single-rank process group and mesh (created once, without torchrun)."""
    return init_distributed("cpu")
