"""Shared pytest set-up: quiet tokenizers, and the locally built tiny model every layer tests on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import rlvr  # noqa: F401  # before torch: OpenMP's idle threads sleep (see rlvr/__init__.py)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """Directory of the default tiny Qwen2 model + tokenizer (built once, cached)."""
    from rlvr.tiny import tiny_model_dir

    return tiny_model_dir()


@pytest.fixture(scope="session")
def run_process_group():
    """Run a command in its own session and kill its whole process group afterwards.

    ``torchrun`` starts worker processes; ``subprocess.run(timeout=...)`` kills only the direct
    child and leaves the workers behind as orphans. This never does.
    """
    import signal
    import subprocess

    def run(cmd, *, timeout: float, **kwargs) -> subprocess.CompletedProcess:
        proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **kwargs)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"{cmd[:6]} timed out after {timeout} s:\n{err[-3000:]}") from None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    return run
