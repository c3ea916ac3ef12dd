from __future__ import annotations

import pytest

from rlvr.learner import init_distributed


@pytest.fixture(scope="session")
def dist_info():
    """The single-rank process group and mesh (created once, without torchrun)."""
    return init_distributed("cpu")


@pytest.fixture(scope="session")
def two_rank_runs(tiny_model_path, tmp_path_factory, run_process_group):
    """One two-gloo-rank launch of ``two_rank_worker.py`` for every test that reads it.

    Returns the folder with one subfolder per job (``memory``, ``full``, ``lora``, ``bf16``;
    ``memory/nbytes`` holds the medium model's size); the launch's failure fails each test that
    asks for it, with the workers' stderr.
    """
    import os
    import sys
    from pathlib import Path

    from two_rank_memory_worker import medium_model_dirs

    out = tmp_path_factory.mktemp("two_rank")
    (out / "memory").mkdir()
    nbytes = medium_model_dirs(out / "memory")[2]
    (out / "memory" / "nbytes").write_text(str(nbytes))
    worker = Path(__file__).parent / "two_rank_worker.py"
    run_process_group(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(worker), str(out), str(tiny_model_path)],
        env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600, check=True,
    )
    return out
