"""``rlvr serve``: a checkpoint behind an OpenAI-compatible API, driven by the openai client."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _env():
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def test_serve_answers_the_openai_client_and_needs_its_key(tiny_model_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr.cli", "serve", "--model", str(tiny_model_path), "--port",
         "0", "--api-key", "k3y"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(), start_new_session=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"on (http://127\.0\.0\.1:\d+/v1)", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        client = openai.OpenAI(base_url=match.group(1), api_key="k3y", max_retries=0)
        assert client.models.list().data[0].id == tiny_model_path.name
        with pytest.raises(openai.NotFoundError, match="does not exist"):
            client.chat.completions.create(model="x", max_tokens=4,
                                           messages=[{"role": "user", "content": "hi"}])
        assert client.models.retrieve(tiny_model_path.name).id == tiny_model_path.name
        out = client.chat.completions.create(model=tiny_model_path.name, max_tokens=4,
                                             temperature=0,
                                             messages=[{"role": "user", "content": "hi"}])
        assert out.choices[0].finish_reason in ("stop", "length")
        assert 1 <= out.usage.completion_tokens <= 4
        bad = openai.OpenAI(base_url=match.group(1), api_key="nope", max_retries=0)
        try:
            bad.models.list()
            raise AssertionError("a wrong key was accepted")
        except openai.AuthenticationError:
            pass
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def test_serve_refuses_a_missing_model_and_a_bad_port(tmp_path, tiny_model_path, capsys):
    from rlvr.cli import main

    assert main(["serve", "--model", str(tmp_path / "nothing")]) == 2
    assert "rlvr serve: error:" in capsys.readouterr().err
    assert main(["serve", "--model", str(tiny_model_path), "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err
