"""check-env plays several tasks and never calls a check that could not run a pass."""

from __future__ import annotations

from rlvr.envs import ListSource, VerifierEnv, check_env
from rlvr.envs.check import FAIL, NOT_RUN, PASS
from rlvr.verifiers import Verdict


def _tasks(n=6):
    return ListSource([{"task_id": f"t{i}", "question": f"{i}+1", "answer": str(i + 1)}
                       for i in range(n)])


def _verify(response, task):
    ok = response.strip() == task["answer"]
    return Verdict(float(ok), ok, "correct" if ok else "wrong_answer")


class BrokenReset(VerifierEnv):
    def __init__(self):
        super().__init__(_tasks(), _verify, prompt_template="{question}")

    def reset(self, *, seed=None, options=None):
        raise RuntimeError("the task database is gone")


class RaisesOnSomeTasks(VerifierEnv):
    """The verifier raises on one task in three: one task per check used to pass it."""

    def __init__(self):
        super().__init__(_tasks(), self._flaky, prompt_template="{question}")

    @staticmethod
    def _flaky(response, task):
        if int(task["task_id"][1:]) % 3 == 1:
            raise ValueError("the verifier broke")
        return _verify(response, task)


def test_with_reset_always_raising_nothing_else_passes_and_the_fix_names_reset():
    report = check_env(BrokenReset(), deep=True, raise_on_failure=False)
    passed = [(r.topic, r.name) for r in report.results if r.status == PASS]
    # a reset that raises at once still returns in time: the only other row that can pass
    assert passed == [("contract", "spaces: Text actions, messages observations"),
                      ("contract", "every call returns in time")], passed
    reset = next(r for r in report.results if r.name == "reset returns (messages, info)")
    assert reset.status == FAIL and reset.fix.startswith("reset() raised")
    not_run = [r for r in report.results if r.status == NOT_RUN]
    assert len(not_run) >= 10
    assert "no episode got past reset()" in not_run[0].detail
    assert "the task database is gone" in not_run[0].detail
    assert "not run" in report.table()


def test_several_tasks_catch_a_verifier_that_raises_on_some_of_them():
    env = RaisesOnSomeTasks()
    seed_of_task = {}
    for seed in range(12):  # which seeds open which task (the env draws it from the seed)
        env.reset(seed=seed)
        seed_of_task.setdefault(env.unwrapped.task["task_id"], seed)
    good = min(s for t, s in seed_of_task.items() if int(t[1:]) % 3 != 1)
    bad_after = [s for t, s in seed_of_task.items() if int(t[1:]) % 3 == 1]
    one = check_env(RaisesOnSomeTasks(), seed=good, tasks=1, raise_on_failure=False)
    several = check_env(RaisesOnSomeTasks(), seed=good, tasks=12, raise_on_failure=False)
    assert bad_after and one.passed  # one task: the broken verifier goes unseen
    raises = next(r for r in several.results if r.name == "nothing raises out of step")
    assert raises.status == FAIL and "the verifier broke" in raises.detail
