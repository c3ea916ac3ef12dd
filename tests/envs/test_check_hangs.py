"""``rlvr check-env`` on an env whose calls never return: every call has a deadline, the hang is
reported, the rows it kept from being judged say "not run", and the command exits."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from rlvr.envs import ListSource, VerifierEnv, check_env
from rlvr.envs.check import NOT_RUN, PASS
from rlvr.verifiers import Verdict

PLUGIN = textwrap.dedent('''
    import time

    import gymnasium

    from rlvr.envs import ListSource, VerifierEnv
    from rlvr.verifiers import Verdict


    def exact(response, task):
        ok = response.strip() == task["answer"]
        return Verdict(float(ok), ok, "correct" if ok else "wrong_answer")


    class HungStep(VerifierEnv):
        def __init__(self):
            super().__init__(ListSource([{"question": "6 * 7?", "answer": "42"}]), exact)

        def step(self, action):
            time.sleep(10**6)  # blocked in C: no Python exception can stop it


    class HungOnBigInput(HungStep):
        def step(self, action):
            if len(action) > 100_000:
                time.sleep(10**6)
            return VerifierEnv.step(self, action)


    gymnasium.register("checkhang/HungStep-v0", entry_point=HungStep)
    gymnasium.register("checkhang/HungOnBigInput-v0", entry_point=HungOnBigInput)
''')


def _check_env(tmp_path: Path, env_id: str) -> tuple[subprocess.CompletedProcess[str], float]:
    (tmp_path / "checkhang_plugin.py").write_text(PLUGIN)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "check-env", env_id, "--import",
                           "checkhang_plugin", "--call-timeout-s", "2"], env=env,
                          capture_output=True, text=True, timeout=240)
    return done, time.monotonic() - start


def test_a_step_that_never_returns_is_reported_and_the_command_exits(tmp_path):
    done, seconds = _check_env(tmp_path, "checkhang/HungStep-v0")
    assert done.returncode == 1, done.stderr[-2000:]
    out = done.stdout
    assert re.search(r"every call returns in time\s+FAIL", out)
    assert "step('I am not sure.') (seed 0) did not return within 2 s" in out
    assert re.search(r"same seed, same opening messages\s+not run", out)
    assert not re.search(r"probes .*\bpass\b", out)
    assert seconds < 120


def test_a_hang_in_a_later_topic_keeps_what_was_judged_before(tmp_path):
    done, _ = _check_env(tmp_path, "checkhang/HungOnBigInput-v0")
    assert done.returncode == 1, done.stderr[-2000:]
    out = done.stdout
    assert re.search(r"every call returns in time\s+FAIL", out)
    assert re.search(r"same seed, same opening messages\s+pass", out)  # judged before
    assert re.search(r"input: 1 MB of numbers\s+FAIL", out)
    assert re.search(r"input: empty\s+not run", out)


def _wrong(response, task):
    return Verdict(0.0, False, "wrong_answer")


class NanReward(VerifierEnv):
    def __init__(self):
        super().__init__(ListSource([{"question": "6 * 7?", "answer": "42"}]), _wrong)

    def step(self, action):
        messages, _, terminated, truncated, info = super().step(action)
        return messages, math.nan, terminated, truncated, info


def test_nan_rewards_are_deterministic_when_they_repeat():
    env = NanReward()
    report = check_env(env, raise_on_failure=False, tasks=1)
    rows = {r.name: r for r in report.results}
    assert rows["same seed and actions, same rewards and verdicts"].status == PASS
    assert rows["every call returns in time"].status == PASS
    assert rows["rewards finite and inside reward_range"].status != PASS  # NaN is still wrong
    assert NOT_RUN not in {r.status for r in report.results if r.topic == "determinism"}
