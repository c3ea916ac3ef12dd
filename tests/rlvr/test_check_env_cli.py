"""``rlvr check-env``: a table of checks, exit code 1 when one fails, 2 on a usage error."""

from __future__ import annotations

import re
import textwrap

import gymnasium
import pytest

from rlvr.cli import main

PLUGIN = textwrap.dedent('''
    import gymnasium

    from rlvr.envs import ListSource, VerifierEnv
    from rlvr.verifiers import Verdict


    def anywhere(response, task):
        ok = task["answer"] in response  # gameable: a hedge that names the answer passes
        return Verdict(float(ok), ok, "correct" if ok else "wrong_answer")


    class Gameable(VerifierEnv):
        def __init__(self):
            super().__init__(ListSource([{"question": "6 * 7?", "answer": "42"}]), anywhere)


    gymnasium.register("checkcli/Gameable-v0", entry_point=Gameable)
''')


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / "checkcli_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "checkcli_plugin"
    gymnasium.registry.pop("checkcli/Gameable-v0", None)


def test_a_builtin_env_passes_and_prints_the_table(capsys):
    assert main(["check-env", "rlvr/Math-v0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("check-env rlvr/Math-v0\n")
    assert re.search(r"probes\s+hedge: several boxed answers\s+pass", out)
    assert re.search(r"\d+ passed, 0 failed, 0 skipped", out)


def test_a_gameable_plugin_env_fails_with_what_to_fix(capsys, plugin):
    assert main(["check-env", "checkcli/Gameable-v0", "--import", plugin]) == 1
    out = capsys.readouterr().out
    assert re.search(r"hedge: either/or\s+FAIL", out)
    assert "earned 1 of 1" in out and "fix: grade one final answer" in out


def test_quick_mode_and_usage_errors(capsys):
    assert main(["check-env", "rlvr/Math-v0", "--quick"]) == 0
    assert "probes" not in capsys.readouterr().out
    assert main(["check-env", "rlvr/Mth-v0"]) == 2
    assert "Did you mean 'rlvr/Math-v0'" in capsys.readouterr().err
    assert main(["check-env", "rlvr/Math-v0", "--kwargs", '{"answer_fmt": "x"}']) == 2
    assert "answer_fmt" in capsys.readouterr().err
    assert main(["check-env", "rlvr/Math-v0", "--import", "no_such_module_xyz"]) == 2
