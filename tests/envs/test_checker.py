"""rlvr.envs.check_env: every built-in env passes the deep check; each broken env is caught.

Each broken env below breaks exactly one thing, and the test names the row that must fail, so a
check that stopped working makes its test fail.
"""

from __future__ import annotations

import math
import random
import re
import subprocess
import sys
import time

import gymnasium
import pytest

from rlvr import envs
from rlvr.envs import EnvCheckError, ListSource, VerifierEnv, check_env
from rlvr.envs.check import PASS, SKIP
from rlvr.verifiers import Verdict

#: Checked elsewhere: rlvr/Verifiers-v0 and rlvr/VerifiersHarness-v0 need Prime's verifiers
#: package and a taskset, which live in the coexistence venv (tests/envs/test_verifiers_env.py
#: and test_verifiers_harness_env.py run their deep checks there).
#: rlvr/OpenEnv-v0 needs an OpenEnv server, which runs in openenv-core's venv
#: (tests/envs/test_openenv_env.py runs its deep check against one).
ELSEWHERE = {"rlvr/OpenEnv-v0", "rlvr/Verifiers-v0", "rlvr/VerifiersHarness-v0"}


@pytest.mark.parametrize("env_id", sorted(set(envs.list_envs(namespace="rlvr")) - ELSEWHERE))
def test_every_registered_env_passes_the_deep_check(env_id):
    report = check_env(gymnasium.make(env_id), deep=True)
    assert report.passed
    topics = {r.topic for r in report.results}
    assert {"contract", "determinism", "limits", "probes"} <= topics


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 3, "format_reward": 0.1},
        {"answer_format": "plain", "max_attempts": 2},
        {"answer_format": "auto", "source": "word_problems"},
    ],
)
def test_math_variants_pass(kwargs):
    report = check_env(envs.make("rlvr/Math-v0", **kwargs), deep=True, tasks=1)
    probes = [r for r in report.results if r.topic == "probes"]
    assert all(r.status == PASS for r in probes), report.table()


def test_tool_and_code_variants_pass():
    report = check_env(envs.make("rlvr/ToolUse-v0", max_tool_calls=1), deep=True)
    assert [r.status for r in report.results if r.topic == "tools"] == [PASS, PASS]
    check_env(envs.make("rlvr/Code-v0", max_attempts=2, format_reward=0.2))


def test_the_report_is_a_table_and_the_error_lists_every_failure():
    report = check_env(OutOfRange(), raise_on_failure=False)
    table = report.table()
    assert re.search(r"contract\s+rewards finite and inside reward_range\s+FAIL", table)
    assert "fix: return a finite float inside env.reward_range" in table
    assert re.search(r"\d+ passed, 1 failed, 0 skipped", table)
    with pytest.raises(EnvCheckError, match=r"1 check\(s\) failed:\n- \[contract\] rewards"):
        report.raise_for_failures()


# -- broken envs ------------------------------------------------------------------------------

TASKS = [{"question": "What is 6 times 7?", "answer": "42"}]


def _wrong(response, task):
    return Verdict(0.0, False, "wrong_answer")


class Base(VerifierEnv):
    """A one-task env graded by ``self.grade(response, task) -> bool``."""

    def __init__(self, tasks=TASKS, **kwargs):
        super().__init__(ListSource(tasks), self._verdict, **kwargs)

    def _verdict(self, response, task):
        ok = self.grade(response, task)
        return Verdict(float(ok), ok, "correct" if ok else "wrong_answer")

    def grade(self, response, task):
        return response.strip() == task["answer"]


class NoGuard(Base):
    def step(self, action):
        if self._done:  # silently accepts steps after the end
            return [], 0.0, True, False, {"verdict": Verdict(0.0, False, "wrong_answer")}
        return super().step(action)


class OutOfRange(Base):
    def _step(self, action, task):
        result = super()._step(action, task)
        result.reward = 2.0
        return result


class NanReward(Base):
    def _step(self, action, task):
        result = super()._step(action, task)
        result.reward = math.nan
        return result


class NoVerdict(Base):
    def _step(self, action, task):
        result = super()._step(action, task)
        result.info.pop("verdict")
        return result


class BothFlags(Base):
    def _step(self, action, task):
        result = super()._step(action, task)
        result.truncated = True
        return result


class BadSpan(Base):
    def _step(self, action, task):
        result = super()._step(action, task)
        result.info["reward_spans"] = [(0, len(action) + 5, 0.1)]
        return result


class BadRole(Base):
    def reset(self, *, seed=None, options=None):
        messages, info = super().reset(seed=seed, options=options)
        return [{"role": "human", "content": messages[-1]["content"]}], info


class SameInfo(Base):
    shared: dict = {}

    def step(self, action):
        messages, reward, terminated, truncated, info = super().step(action)
        SameInfo.shared.clear()
        SameInfo.shared.update(info)
        return messages, reward, terminated, truncated, SameInfo.shared

    def reset(self, *, seed=None, options=None):
        messages, _ = super().reset(seed=seed, options=options)
        return messages, SameInfo.shared


class Random(Base):
    def _step(self, action, task):
        result = super()._step(action, task)
        result.reward = random.random() * 0.5
        return result


class RandomPrompt(Base):
    def _opening_messages(self, task):
        return [{"role": "user", "content": f"{task['question']} ({random.random()})"}]


class Crashes(Base):
    def grade(self, response, task):
        return 1 / len(response) > 0  # ZeroDivisionError on the empty action


class Recursive(Base):
    def grade(self, response, task):
        def depth(text, i=0):
            return depth(text, i + 1) if i < len(text) and text[i] == "(" else i
        return depth(response) == 42  # RecursionError on deep nesting


class Slow(Base):
    def grade(self, response, task):
        if len(response) > 100_000:
            time.sleep(0.8)
        return False


@pytest.mark.parametrize(
    ("env", "row", "needle"),
    [
        (NoGuard(), "step after the end raises", "returned normally"),
        (OutOfRange(), "rewards finite and inside reward_range", r"reward 2\.0 outside"),
        (NanReward(), "rewards finite and inside reward_range", "nan is not finite"),
        (NoVerdict(), "info['verdict'] present when decided", "terminated without"),
        (BothFlags(), "terminated/truncated semantics", "both True"),
        (BadSpan(), "reward spans inside the action", "not inside"),
        (BadRole(), "messages well-formed", "bad role"),
        (SameInfo(), "fresh objects on every call", "same list/dict object"),
        (Random(), "same seed and actions, same rewards and verdicts", "differs"),
        (RandomPrompt(), "same seed, same opening messages", "vs"),
    ],
)
def test_contract_and_determinism_breakers_are_caught(env, row, needle):
    failures = {r.name: r for r in check_env(env, raise_on_failure=False).failures}
    assert row in failures and re.search(needle, failures[row].detail), failures


@pytest.mark.parametrize(
    ("env", "row", "needle"),
    [
        (Crashes(), "input: empty", "ZeroDivisionError"),
        (Recursive(), "input: deeply nested brackets", "RecursionError"),
        (Slow(), "input: 1 MB of numbers", r"took [01]\.\d s \(budget 0\.5 s\)"),
    ],
)
def test_limit_breakers_are_caught(env, row, needle):
    report = check_env(env, deep=True, step_timeout_s=0.5, raise_on_failure=False)
    failures = {r.name: r for r in report.failures}
    assert row in failures and re.search(needle, failures[row].detail), failures
    if isinstance(env, Crashes):
        assert "nothing raises out of step" in failures


# -- gameable envs: each probe family ----------------------------------------------------------


class Substring(Base):
    """Passes any response that contains the answer somewhere (hedges win)."""

    def grade(self, response, task):
        return task["answer"] in response


class LastNumber(Base):
    """Reads the last number of the response, lists and all."""

    def grade(self, response, task):
        numbers = re.findall(r"-?\d+", response)
        return bool(numbers) and numbers[-1] == task["answer"]


class LastBox(Base):
    """Reads the last \\boxed{}, even when several stand side by side."""

    def grade(self, response, task):
        boxes = re.findall(r"\\boxed\{([^{}]*)\}", response)
        return bool(boxes) and boxes[-1].strip() == task["answer"]


class Credulous(Base):
    """Believes a response that says it is correct."""

    def grade(self, response, task):
        return "correct" in response.lower() or "passed" in response.lower()


class Leaky(LastNumber):
    """Shows the answer in the prompt."""

    def __init__(self):
        super().__init__(prompt_template="{question} (reference solution: {answer})")


@pytest.mark.parametrize(
    ("env", "rows"),
    [
        (Substring(), ["hedge: several answers", "hedge: several boxed answers", "hedge: ranges",
                       "hedge: either/or", "extraction: last number of a long list"]),
        (LastNumber(), ["hedge: several answers", "hedge: either/or",
                        "extraction: last number of a long list"]),
        (LastBox(), ["hedge: several boxed answers"]),
        (Credulous(), ["claims: success without an answer",
                       "claims: a wrong answer said to be correct"]),
        (Leaky(), ["copy: the prompt sent back"]),
    ],
)
def test_answer_probe_families_catch_gameable_envs(env, rows):
    failures = {r.name: r for r in check_env(env, deep=True, raise_on_failure=False).failures}
    assert set(rows) <= set(failures), sorted(failures)
    assert all("earned 1 of 1" in failures[row].detail for row in rows)


def test_answer_probes_are_skipped_without_a_reference():
    report = check_env(Substring(tasks=[{"question": "q", "answer": "42"}]), deep=True,
                       reference=None, raise_on_failure=False)
    skipped = [r.name for r in report.results if r.status == SKIP]
    assert "reference answer earns the full reward" in skipped
    assert "hedges (several answers, boxes, ranges, either/or)" in skipped


CODE_TASKS = [{"question": "Write a function `add(a, b)` that returns a + b.", "answer": "-"}]


class NaiveCode(Base):
    """Runs the program and its tests in a plain subprocess; subclasses decide what passes."""

    def __init__(self):
        super().__init__(tasks=CODE_TASKS)

    def run(self, response):
        found = re.findall(r"```python\n(.*?)```", response[:10_000], flags=re.DOTALL)
        if not found:  # nothing to run (and no python start-up to pay)
            return subprocess.CompletedProcess([], 1, "", "no program")
        program = found[-1] + "\nassert add(1, 2) == 3\n"
        return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                              timeout=30)


class ExitCode(NaiveCode):
    def grade(self, response, task):
        return self.run(response).returncode == 0


class StdoutMarker(NaiveCode):
    def grade(self, response, task):
        return "passed" in self.run(response).stdout.lower()


class CompareEq(NaiveCode):
    def grade(self, response, task):
        done = self.run(response)
        return done.returncode == 0 and "SystemExit" not in response and "exit" not in response


@pytest.mark.parametrize(
    ("env", "row"),
    [
        (ExitCode(), "code: program exits early"),
        (StdoutMarker(), "code: program prints success markers"),
        (CompareEq(), "code: program patches builtins"),
    ],
)
def test_code_probe_families_catch_naive_code_envs(env, row):
    # One task: each family breaks on every task (several tasks are test_check_tasks' topic).
    report = check_env(env, deep=True, reference=None, raise_on_failure=False, tasks=1)
    assert row in {r.name for r in report.failures}, report.table()


# -- tool envs --------------------------------------------------------------------------------


class ToolBase(envs.ToolUseEnv):
    def __init__(self, **kwargs):
        super().__init__(tools=["calculator"], **kwargs)


class CrashingTools(ToolBase):
    def _step(self, action, task):
        if "<tool_call>" in action and "{not json" in action:
            raise ValueError("bad tool call")
        return super()._step(action, task)


class UnlimitedTools(ToolBase):
    def __init__(self):
        super().__init__(max_tool_calls=10_000, max_turns=10_000)


class BadSchemas(ToolBase):
    def tool_schemas(self):
        return [{"type": "function", "function": {"name": "calc ulator",
                                                  "parameters": {"type": "object"}}}]


class BadInfoTools(ToolBase):
    def _reset_info(self):
        return {"tools": [{"type": "function", "function": {
            "name": "calculator", "parameters": {"type": "object", "required": ["x"]}}}]}


@pytest.mark.parametrize(
    ("env", "row", "needle"),
    [
        (BadSchemas(), "tool schemas well-formed", r"tool_schemas\(\): .*'calc ulator' is not"),
        (BadInfoTools(), "tool schemas well-formed", r"info\['tools'\]: .*required \['x'\]"),
        (CrashingTools(), "malformed tool call gets an error message", "ValueError"),
        (UnlimitedTools(), "max-tool-calls limit truncates", "did not end the episode"),
    ],
)
def test_tool_breakers_are_caught(env, row, needle):
    report = check_env(env, deep=True, max_steps=12, raise_on_failure=False)
    failures = {r.name: r for r in report.failures}
    assert row in failures and re.search(needle, failures[row].detail), report.table()


def _tagged_env():
    """Answers in <answer> tags, one block, compared as written: honest, not gameable."""
    def verifier(response, task):
        found = re.findall(r"<answer>(.*?)</answer>", response, re.DOTALL)
        ok = len(found) == 1 and found[0].strip() == task["answer"]
        return Verdict(float(ok), ok, "correct" if ok else "wrong_answer")
    return VerifierEnv([{"question": "What is 6 * 7?", "answer": "42"}], verifier)


def test_hedge_probes_speak_a_tagged_reference_answer_format():
    # a reference wrapped in the env's tags is the answer in that format, so hedges hide
    # "42" inside the tags ("<answer>43, 42</answer>"), not the tagged block beside a wrong number
    tagged = check_env(_tagged_env(), deep=True, raise_on_failure=False,
                       reference=lambda env: "<answer>42</answer>")
    bare = check_env(_tagged_env(), deep=True, raise_on_failure=False,
                     reference=lambda env: "42")
    for report in (tagged, bare):
        probes = {r.name: r.status for r in report.results if r.topic == "probes"}
        assert probes["reference answer earns the full reward"] == PASS, report.table()
        assert probes["hedge: several answers"] == PASS, report.table()
        assert report.passed, report.table()
