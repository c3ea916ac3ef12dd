"""check-env's math hack probes (``rlvr.envs.check.math_hacks``) catch math envs that a policy
can game the ways a red team found, and pass rlvr/Math-v0 in every answer format."""

from __future__ import annotations

import re

import pytest

from rlvr import envs
from rlvr.envs import ListSource, VerifierEnv, check_env
from rlvr.envs.check import PASS
from rlvr.verifiers import Verdict
from rlvr.verifiers.math import find_boxed, is_equivalent

TASKS = [{"question": "What is 733*94?", "answer": "68902"}]
WORD_TASKS = [{"question": "Which direction does the sun rise in?", "answer": r"\text{east}"}]
CHOICE_TASKS = [{"question": "Pick one: (A) 1 (B) 2 (C) 3", "answer": "C"}]


class BoxedEnv(VerifierEnv):
    """Grades the last box with ``self.grade(answer, gold) -> bool``."""

    def __init__(self, tasks=TASKS):
        super().__init__(ListSource(tasks), self._verdict)

    def _verdict(self, response, task):
        found = find_boxed(response)
        ok = found is not None and self.grade(found.answer, task["answer"])
        return Verdict(float(ok), ok, "correct" if ok else "wrong_answer")

    def grade(self, answer, gold):
        return answer.strip() == gold


class EquivalenceOnly(BoxedEnv):
    """Mathematical equality alone: the question's arithmetic earns the reward."""

    def grade(self, answer, gold):
        return is_equivalent(answer, gold)


class FloatTolerance(BoxedEnv):
    """Reads the box as a float with a relative tolerance."""

    def grade(self, answer, gold):
        try:
            return abs(float(answer) - float(gold)) <= 1e-6 * abs(float(gold))
        except ValueError:
            return False


class FirstMathSpan(VerifierEnv):
    """Reads the first $...$ after "Answer:" (hedges win)."""

    def __init__(self):
        super().__init__(ListSource(TASKS), self._verdict)

    def _verdict(self, response, task):
        found = re.search(r"[Aa]nswer(?: is)?:?\s*\$?([^$\s]*?)\$?(?:\s|\.|,|$)", response)
        ok = found is not None and found.group(1).strip() == task["answer"]
        return Verdict(float(ok), ok, "correct" if ok else "wrong_answer")


class LettersOnly(BoxedEnv):
    """Compares the letters of the answers, in any order (anagrams win)."""

    def grade(self, answer, gold):
        def key(text):
            return sorted(re.sub(r"\\text|[^a-z]", "", text.lower()))

        return key(answer) == key(gold)


class FirstLetter(VerifierEnv):
    """Takes the first choice letter it sees."""

    def __init__(self):
        super().__init__(ListSource(CHOICE_TASKS), self._verdict)

    def _verdict(self, response, task):
        found = re.search(r"\b([A-J])\b", response)
        ok = found is not None and found.group(1) == task["answer"]
        return Verdict(float(ok), ok, "correct" if ok else "wrong_answer")


class Crashes(BoxedEnv):
    """Lets an internal error of its own parser escape ``step``."""

    def grade(self, answer, gold):
        if "operatorname" in answer:
            raise IndexError("tuple index out of range")
        return answer.strip() == gold


class DropsWords(BoxedEnv):
    """Deletes text and degree signs beside a value before comparing (the old unit rule)."""

    def grade(self, answer, gold):
        return is_equivalent(re.sub(r"\\text\{[^}]*\}|\^\\circ", "", answer), gold)


class LastBoxOnly(BoxedEnv):
    """The last box alone: a hedge written as two boxes earns the reward."""

    def grade(self, answer, gold):
        return answer.split(",")[-1].strip() == gold


@pytest.mark.parametrize(
    ("env", "row"),
    [
        (EquivalenceOnly(), "math: the answer restated as arithmetic"),
        (EquivalenceOnly(), "math: the answer restated by functions and constants"),
        (DropsWords(), "math: words and units beside the answer"),
        (LastBoxOnly(), "math: hedges in prose and side-by-side boxes"),
        (FloatTolerance(), "math: decimals near an integer answer"),
        (FirstMathSpan(), "math: hedged math spans"),
        (LettersOnly(WORD_TASKS), "math: an anagram of a word answer"),
        (FirstLetter(), "math: hedged choice letters"),
    ],
)
def test_math_hack_probes_catch_gameable_envs(env, row):
    report = check_env(env, deep=True, raise_on_failure=False)
    failures = {r.name: r for r in report.failures}
    assert row in failures, report.table()
    assert "earned 1 of 1" in failures[row].detail


def test_an_answer_that_crashes_the_grader_fails_the_contract():
    report = check_env(Crashes(), deep=True, raise_on_failure=False)
    failures = {r.name: r for r in report.failures}
    assert "nothing raises out of step" in failures, report.table()
    assert "operatorname" in failures["nothing raises out of step"].detail


@pytest.mark.parametrize("answer_format", ["boxed", "plain", "auto"])
def test_the_math_env_passes_every_math_hack_probe(answer_format):
    env = envs.make("rlvr/Math-v0", answer_format=answer_format,
                    source_kwargs={"operators": "*", "n_tasks": 20})
    report = check_env(env, deep=True, raise_on_failure=False)
    rows = [r for r in report.results if r.name.startswith("math:")]
    assert len(rows) >= 4 and all(r.status == PASS for r in rows), report.table()
