"""The shell commands that README.md and docs/*.md mark as runnable run, as written.

A fenced ``bash`` block preceded by the line ``<!-- runnable -->`` is run here with bash (``-e``,
so every line must succeed), from the repository root, with ``rlvr`` and ``python`` the
interpreter running the tests and ``$TMPDIR`` a fresh directory shared by the blocks in page
order (README's train block writes the model its eval block reads). Mark only commands that
take seconds; the others stay unmarked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end-to-end: handed out first on two workers (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- runnable -->"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def runnable_blocks(text: str) -> list[str]:
    """The bash blocks of ``text`` that follow a runnable marker.

    Raises:
        ValueError: a marker not directly followed by a fenced bash block.
    """
    blocks = []
    for match in re.finditer(re.escape(MARKER), text):
        rest = text[match.end():].lstrip("\n")
        block = re.match(r"```bash\n(.*?)```", rest, flags=re.DOTALL)
        if block is None:
            line = text[: match.start()].count("\n") + 1
            raise ValueError(f"line {line}: {MARKER} must be followed by a ```bash block")
        blocks.append(block.group(1))
    return blocks


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory) -> dict[str, str]:
    """PATH with ``rlvr``/``python`` shims for this interpreter, and a shared TMPDIR."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for name, target in (("rlvr", f'"{sys.executable}" -m rlvr.cli'),
                         ("python", f'"{sys.executable}"')):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {target} "$@"\n')
        shim.chmod(0o755)
    python_path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": python_path, "TMPDIR": str(tmp_path_factory.mktemp("docs"))}


def test_markers_are_well_placed_and_used():
    counts = {page.name: len(runnable_blocks(page.read_text(encoding="utf-8"))) for page in PAGES}
    assert counts["README.md"] >= 2, counts
    with pytest.raises(ValueError, match="line 2: <!-- runnable --> must be followed"):
        runnable_blocks("text\n<!-- runnable -->\n```python\nprint(1)\n```\n")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_runnable_commands_run(page: Path, shell_env: dict[str, str]):
    for block in runnable_blocks(page.read_text(encoding="utf-8")):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=REPO,
                              env=shell_env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (
            f"{page.name}: this block failed (rc {done.returncode}):\n{block}\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
