"""The gateway's documented commands, run as written from a checkout's root.

README ("Train your own agent") and docs/gateway.md give these commands to a new user, who runs
them from a fresh clone with the ``rlvr`` console script: no ``PYTHONPATH``, no ``python -m``.
The test reproduces that: the commands run through the console script next to this Python, in a
directory that looks like a checkout's root (``configs/`` and ``examples/`` of this checkout),
with only this checkout's ``rlvr`` package on ``PYTHONPATH`` (a link to it, so ``examples`` is
found only because ``--import`` looks in the current directory).

What runs, and how it differs from the documents (nothing else is changed):

* ``rlvr check-env ...``: as written.
* ``rlvr train ...``: the documented smoke forms (docs/gateway.md: the command plus step
  overrides), of the content-parsing agent and of the native ``tools=`` agent; the full
  commands are the same with the overrides left out. Its numbers are in
  BENCHMARKS.md ("Agent functions through the gateway").
* ``rlvr eval ...``: as written, on the smoke run's export.
* ``rlvr serve --model runs/tool_quickstart/export``: as written plus ``--port 0`` (port 8000 may
  be taken where tests run), then the documented ``openai`` snippet against the URL it prints.
  The other ``rlvr serve`` lines are templates (``PATH``) and are not run here.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GATEWAY_DOC = ROOT / "docs" / "gateway.md"


def _bash_lines(text: str) -> list[str]:
    """The ``rlvr ...`` lines of the ``bash`` blocks in ``text`` (comments cut)."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("rlvr "):
                lines.append(line)
    return lines


def documented() -> list[str]:
    """Every gateway command of README's agent section and docs/gateway.md, in order."""
    readme = README.read_text(encoding="utf-8")
    section = readme.split("## Train your own agent", 1)[1].split("\n## ", 1)[0]
    return _bash_lines(section) + _bash_lines(GATEWAY_DOC.read_text(encoding="utf-8"))


@pytest.fixture
def checkout(tmp_path):
    """A directory laid out as a checkout's root, and the environment a fresh clone runs with."""
    root = tmp_path / "clone"
    root.mkdir()
    for name in ("configs", "examples"):
        (root / name).symlink_to(ROOT / name)
    site = tmp_path / "site"
    site.mkdir()
    (site / "rlvr").symlink_to(ROOT / "rlvr")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(site), PYTHONUNBUFFERED="1")
    return root, env


def _run(line: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    argv = shlex.split(line)
    assert argv[0] == "rlvr"
    exe = Path(sys.executable).parent / "rlvr"
    proc = subprocess.run([str(exe), *argv[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{line}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_the_documents_list_the_commands_this_test_runs():
    lines = documented()
    train = "rlvr train configs/tool_quickstart.yaml env.id=examples/Calculator-v0 " \
            "--import examples.calculator_agent"
    assert lines.count(train) == 2  # README and docs/gateway.md
    assert any(line.startswith(train + " ") for line in lines)  # the smoke form
    assert any(line.startswith("rlvr check-env ") for line in lines)
    assert any(line.startswith("rlvr eval ") for line in lines)
    assert any(line.startswith("rlvr serve --model runs/") for line in lines)
    native = "rlvr train configs/tool_quickstart.yaml env.id=examples/NativeCalculator-v0 " \
             "--import examples.native_tools_agent trainer.output_dir=runs/native_tools"
    assert lines.count(native) == 1 and any(line.startswith(native + " ") for line in lines)
    assert "rlvr check-env examples/NativeCalculator-v0 --import examples.native_tools_agent" \
        in lines


@pytest.mark.slow
def test_documented_gateway_commands_run_as_written_from_the_checkout_root(checkout):
    root, env = checkout
    lines = documented()
    train = "rlvr train configs/tool_quickstart.yaml env.id=examples/Calculator-v0 " \
            "--import examples.calculator_agent"
    smoke = [line for line in lines if line.startswith(train + " ")]
    assert len(smoke) == 1, lines
    ran = []
    for line in lines:
        if line.startswith("rlvr check-env "):
            out = _run(line, root, env)
            assert re.search(r"\d+ passed, 0 failed", out), out
            ran.append(line)
    out = _run(smoke[0], root, env)
    assert "rlvr train finished" in out, out
    assert (root / "runs" / "tool_quickstart" / "export" / "config.json").is_file()
    ran.append(smoke[0])
    for line in lines:
        if line.startswith("rlvr eval "):
            out = _run(line, root, env)
            assert "| calculator |" in out, out
            ran.append(line)
    serve = [line for line in lines if line.startswith("rlvr serve --model runs/")]
    assert len(serve) == 1, lines
    _serve_and_ask(serve[0], root, env)
    ran.append(serve[0])
    native = "rlvr train configs/tool_quickstart.yaml env.id=examples/NativeCalculator-v0 " \
             "--import examples.native_tools_agent trainer.output_dir=runs/native_tools"
    (native_smoke,) = [line for line in lines if line.startswith(native + " ")]
    out = _run(native_smoke, root, env)
    assert "rlvr train finished" in out, out
    assert (root / "runs" / "native_tools" / "export" / "config.json").is_file()
    ran.append(native_smoke)
    assert len(ran) == 6, ran  # two check-env, two smoke trainings, eval, serve


def _serve_and_ask(line: str, root: Path, env: dict[str, str]) -> None:
    import openai

    snippet = re.search(r"```python\n(import openai\n.*?)```",
                        GATEWAY_DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert snippet, "docs/gateway.md shows an openai snippet for rlvr serve"
    exe = Path(sys.executable).parent / "rlvr"
    proc = subprocess.Popen([str(exe), *shlex.split(line)[1:], "--port", "0"], cwd=root,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        first = proc.stdout.readline() if proc.stdout is not None else ""
        match = re.search(r"on (http://127\.0\.0\.1:\d+/v1)", first)
        assert match, (first, proc.stderr.read() if proc.poll() is not None and proc.stderr
                       else "")
        code = snippet.group(1).replace("http://127.0.0.1:8000/v1", match.group(1))
        scope: dict[str, object] = {}
        exec(compile(code, str(GATEWAY_DOC), "exec"), scope)  # noqa: S102
        assert isinstance(scope["client"], openai.OpenAI)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
