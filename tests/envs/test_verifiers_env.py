"""rlvr/Verifiers-v0 against the real ``verifiers`` 0.4 package (Prime Intellect).

``verifiers`` pins openai and mcp versions the dev venv does not hold, so the env is played in the
coexistence venv (``RLVR_COEXIST_PYTHON``, built by ``bash dev.sh test``), which has verifiers
0.4.0. There rlvr is imported from this checkout through a directory holding only an ``rlvr``
link (the checkout's root would put its own ``verifiers/`` folder before Prime's package).
The environment is ``examples/verifiers_arith.py`` (an arithmetic taskset with a ``@vf.reward``
and a ``@vf.metric``) plus broken tasksets written here.
"""

from __future__ import annotations

import importlib
import json
import textwrap
from pathlib import Path

import pytest

from rlvr.envs import MissingDependencyError, make
from tests.coexist_venv import coexist_python, run_in

ROOT = Path(__file__).resolve().parents[2]

BROKEN = textwrap.dedent('''
    import verifiers.v1 as vf

    class Data(vf.TaskData):
        answer: int = 1

    class Config(vf.TasksetConfig):
        mode: str = "raise"

    class BrokenTask(vf.Task[Data]):
        @vf.reward
        async def graded(self, trace: vf.Trace) -> float:
            mode = self.config_mode
            if mode == "raise":
                raise RuntimeError("grader crashed")
            return 1.5 if mode == "big" else 1.0

    class BrokenTaskset(vf.Taskset[BrokenTask, Config]):
        def load(self):
            for i in range(50):
                task = BrokenTask(Data(prompt=f"task {i}"), self.config.task)
                task.config_mode = self.config.mode
                yield task

    __all__ = ["BrokenTaskset"]
''')

PLAY = textwrap.dedent('''
    import json
    from rlvr.envs import EnvArgumentError, make

    kw = {"environment": "verifiers_arith", "environment_kwargs": {"size": 300}}
    train, test = make("rlvr/Verifiers-v0", **kw), make("rlvr/Verifiers-v0", split="test", **kw)
    out = {"train": train.unwrapped.num_tasks, "test": test.unwrapped.num_tasks}
    ids = lambda env: {env.unwrapped.source[i]["task_id"]
                       for i in range(env.unwrapped.num_tasks)}
    out["shared"] = len(ids(train) & ids(test))
    # envs of one process share one load of the taskset (a run makes one env per episode slot)
    again = make("rlvr/Verifiers-v0", **kw).unwrapped.source.tasks
    out["one_load"] = again[0] is train.unwrapped.source.tasks[0]
    messages, info = train.reset(seed=0)
    task = train.unwrapped.task
    out["messages"] = messages
    out["answer"] = str(task["answer"])
    out["right"] = train.step(task["answer"])[1:]
    train.reset(seed=0)
    out["hedge"] = train.step(task["answer"] + " or 3")[1:]
    for mode in ("raise", "big"):
        env = make("rlvr/Verifiers-v0", environment="broken", environment_kwargs={"mode": mode})
        env.reset(seed=0)
        out[mode] = env.step("x")[1:]
    try:
        make("rlvr/Verifiers-v0", environment="verifiers_arith", environment_kwargs={"sise": 5})
    except EnvArgumentError as exc:
        out["bad_kwargs"] = str(exc)
    # `rlvr check-env rlvr/Verifiers-v0 --kwargs ...`, in this process (one interpreter start)
    from rlvr.cli import main
    out["check_env"] = main(["check-env", "rlvr/Verifiers-v0", "--kwargs", json.dumps(kw)])
    print(json.dumps(out, default=repr))
''')


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    python = coexist_python()
    work = tmp_path_factory.mktemp("vf")
    (work / "rlvr").symlink_to(ROOT / "rlvr")
    (work / "verifiers_arith.py").symlink_to(ROOT / "examples" / "verifiers_arith.py")
    (work / "broken.py").write_text(BROKEN)
    return python, work


def test_without_verifiers_the_env_says_what_to_install():
    try:
        importlib.import_module("verifiers.v1")
    except ImportError:  # absent, or the checkout's own verifiers/ folder (which refuses)
        pass
    else:
        pytest.skip("Prime's verifiers is importable here")
    with pytest.raises(MissingDependencyError, match="verifiers>=0.4"):
        make("rlvr/Verifiers-v0", environment="verifiers_arith")


@pytest.mark.slow
def test_splits_its_own_reward_and_check_env(venv):
    python, work = venv
    (work / "play.py").write_text(PLAY)
    stdout = run_in(python, "play.py", cwd=work)
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["check_env"] == 0 and " 0 failed" in stdout, stdout
    assert out["train"] + out["test"] == 300 and 10 <= out["test"] <= 60
    assert out["shared"] == 0 and out["one_load"]
    assert [m["role"] for m in out["messages"]] == ["user"]
    assert out["messages"][0]["content"].endswith("=")
    reward, terminated, _, info = out["right"]
    assert reward == 1.0 and terminated
    assert "rewards': {'correct': {'score': 1.0, 'weight': 1.0}}" in info["verdict"]
    assert "'metrics': {'reply_chars':" in info["verdict"]
    # the rubric's rewards and metrics by name, for the training metrics env/<name>
    assert info["metrics"] == {"correct": 1.0, "reply_chars": len(out["answer"])}, info
    assert out["hedge"][0] == 0.0 and "wrong_answer" in out["hedge"][3]["verdict"]
    for mode, error in (("raise", "grader crashed"), ("big", "not a number in [0, 1]")):
        reward, _, _, info = out[mode]
        assert reward == 0.0 and "scorer_error" in info["verdict"] and error in info["verdict"]
    assert "sise" in out["bad_kwargs"] and "verifiers_arith" in out["bad_kwargs"]


@pytest.mark.slow
def test_training_plays_and_scores_every_episode(venv):
    python, work = venv
    kwargs = json.dumps({"environment": "verifiers_arith", "environment_kwargs": {"size": 300}})
    runs = work / "runs"
    run_in(python, "-m", "rlvr.cli", "train", str(ROOT / "configs" / "quickstart.yaml"),
        "env.id=rlvr/Verifiers-v0", f"env.kwargs={kwargs}", "env.eval_kwargs={}",
        # a short warm-up: the untrained model never ends its turn, so no reply would be scored
        "sft.max_steps=40", "sft.eval_every=0", "trainer.steps=2", "eval.tasks=8", "eval.every=0",
        "trainer.progress=false", "trainer.tensorboard=false", "trainer.plot=false",
        "trainer.export_at_end=false", "trainer.checkpoint_every=0",
        "rollout.prompts_per_step=4", "rollout.group_size=4", f"trainer.output_dir={runs}",
        cwd=work)
    steps = [json.loads(line) for line in (runs / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in steps if "rollout/logprob_diff" in m]
    assert len(steps) == 2
    for m in steps:
        assert m["response/error_ratio"] == 0.0, m  # every episode played and scored
        # the taskset's own reward and metric, averaged over the step's scored episodes
        assert 0.0 <= m["env/correct"] <= 1.0 and m["env/reply_chars"] > 0, m
