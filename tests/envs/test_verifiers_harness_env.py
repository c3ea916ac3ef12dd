"""rlvr/VerifiersHarness-v0 against the real ``verifiers`` 0.4 package, its ``null`` harness and uv.

As in test_verifiers_env.py, the env plays in the coexistence venv (``RLVR_COEXIST_PYTHON``,
with verifiers 0.4.0 and uv), rlvr imported from this checkout through a directory holding only
an ``rlvr`` link. Real pieces throughout: verifiers installs its chat program with uv (from
PyPI on the first run, then from uv's cache) and runs it in its subprocess runtime; the program
talks to verifiers' interception server, whose model client is rlvr's gateway in front of the
transformers engine on the tiny model; ``EpisodeRunner`` plays the episodes. The untrained tiny
model's replies are all but never the sum, so ``examples/verifiers_retry.py`` asks again: a
two-call conversation.
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

# A reward that only the played conversation can give: 1 when the model replied twice.
TURNS = textwrap.dedent('''
    import verifiers.v1 as vf
    from verifiers_retry import RetryData, RetryEnv, RetryTask, RetryTaskset

    class TurnsTask(RetryTask):
        @vf.reward
        async def correct(self, trace: vf.Trace) -> float:
            return float(trace.num_turns == 2)

    class TurnsTaskset(RetryTaskset):
        def load(self):
            for task in super().load():
                yield TurnsTask(task.data, self.config.task)

    __all__ = ["RetryEnv", "TurnsTaskset"]
''')

# A task whose tool server is a vf.Toolset of Python functions (MCP, in a subprocess).
TOOLS = textwrap.dedent('''
    import verifiers.v1 as vf

    class CalcConfig(vf.ToolsetConfig):
        pass

    class Calc(vf.Toolset[CalcConfig]):
        @vf.tool
        async def add(self, a: int, b: int) -> int:
            """Add two integers."""
            return a + b

    class Data(vf.TaskData):
        answer: int

    class CalcTask(vf.Task[Data]):
        @classmethod
        def toolsets(cls, config):
            return [Calc(CalcConfig())]

        @vf.reward
        async def correct(self, task: Data, trace: vf.Trace) -> float:
            return float(trace.last_reply == str(task.answer))

    class CalcTaskset(vf.Taskset[CalcTask, vf.TasksetConfig]):
        def load(self):
            for i in range(40):
                yield CalcTask(Data(prompt=f"{i}+2=", answer=i + 2), self.config.task)

    __all__ = ["CalcTaskset"]

    if __name__ == "__main__":
        Calc.run()
''')

PLAY = textwrap.dedent('''
    import json
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr import envs
    from rlvr.agents.engine import SamplingParams
    from rlvr.agents.hf.engine import TransformersEngine
    from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
    from rlvr.envs import EnvArgumentError
    from rlvr.tiny import tiny_model_dir

    torch.set_num_threads(1)
    path = tiny_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    engine = TransformersEngine(model, tokenizer, max_batch_size=8)
    runner = EpisodeRunner(engine, tokenizer, RunnerConfig(
        max_turns=4, max_tokens_per_turn=8, max_response_tokens=200, check_token_exact=True,
        sampling=SamplingParams(temperature=1.0)))

    def spec(environment, seed):
        return EpisodeSpec(env_factory=lambda: envs.make(
            "rlvr/VerifiersHarness-v0", environment=environment,
            environment_kwargs={} if environment == "calc" else {"size": 50}), seed=seed)

    out = {"episodes": []}
    plays = [("verifiers_retry", 0), ("verifiers_retry", 1), ("turns", 2), ("calc", 3)]
    for (environment, _), traj in zip(plays, runner.run([spec(e, s) for e, s in plays])):
        model = [t for t, m in zip(traj.response_ids, traj.response_mask) if m]
        env = [t for t, m in zip(traj.response_ids, traj.response_mask) if not m]
        out["episodes"].append({
            "environment": environment, "finish": traj.finish_reason, "reward": traj.reward,
            "passed": traj.passed, "error": traj.outcome.error, "metrics": traj.outcome.metrics,
            "verdict": repr(traj.outcome.verdict), "calls": traj.metadata["gateway_calls"],
            "rows": 1 + len(traj.extra_rows),
            "breaks": traj.metadata["gateway_prefix_breaks"],
            "prompt": tokenizer.decode(traj.prompt_ids), "env_text": tokenizer.decode(env),
            "model_tokens": len(model)})
    runner.close()
    for name, kwargs in {"bash": {"harness": "bash"}, "codex": {"harness": "codex"},
                         "sise": {"environment_kwargs": {"sise": 5}},
                         "harness_kwargs": {"harness_kwargs": ["tool_timeout"]},
                         "two_seats": {"environment": "two_seats"}}.items():
        try:
            envs.make("rlvr/VerifiersHarness-v0", **{"environment": "verifiers_retry", **kwargs})
        except EnvArgumentError as exc:
            out[name] = str(exc)
    from rlvr.cli import main
    kw = {"environment": "verifiers_retry", "environment_kwargs": {"size": 300}}
    out["check_env"] = main(["check-env", "rlvr/VerifiersHarness-v0", "--kwargs", json.dumps(kw)])
    print(json.dumps(out, default=repr))
''')

# A reward with spread for the untrained model (the parity of its first reply's length), read
# from the played trace, so a training step has advantages to learn from.
PARITY = textwrap.dedent('''
    import verifiers.v1 as vf
    from verifiers_retry import RetryEnv, RetryTask, RetryTaskset

    class ParityTask(RetryTask):
        @vf.reward
        async def correct(self, trace: vf.Trace) -> float:
            return float(len(trace.assistant_messages[0].content or "") % 2 == 0)

    class ParityTaskset(RetryTaskset):
        def load(self):
            for task in super().load():
                yield ParityTask(task.data, self.config.task)

    __all__ = ["RetryEnv", "ParityTaskset"]
''')

TWO_SEATS = textwrap.dedent('''
    import verifiers.v1 as vf
    from verifiers_retry import RetryTaskset

    class TwoConfig(vf.EnvConfig):
        agent: vf.AgentConfig = vf.AgentConfig()
        judge: vf.AgentConfig = vf.AgentConfig()

    class TwoSeats(vf.Env[TwoConfig]):
        async def run(self, task, agents):
            await agents.agent.run(task)

    __all__ = ["RetryTaskset", "TwoSeats"]
''')


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    python = coexist_python()
    work = tmp_path_factory.mktemp("vfh")
    (work / "rlvr").symlink_to(ROOT / "rlvr")
    (work / "verifiers_retry.py").symlink_to(ROOT / "examples" / "verifiers_retry.py")
    for name, text in {"turns": TURNS, "calc": TOOLS, "two_seats": TWO_SEATS,
                       "parity": PARITY, "play": PLAY}.items():
        (work / f"{name}.py").write_text(text)
    return python, work


def test_without_verifiers_the_env_says_what_to_install():
    try:
        importlib.import_module("verifiers.v1")
    except ImportError:  # absent, or the checkout's own verifiers/ folder (which refuses)
        pass
    else:
        pytest.skip("Prime's verifiers is importable here")
    with pytest.raises(MissingDependencyError, match="verifiers>=0.4"):
        make("rlvr/VerifiersHarness-v0", environment="verifiers_retry")


@pytest.mark.slow
def test_harness_episodes_through_the_gateway_keep_the_tasksets_reward(venv):
    python, work = venv
    stdout = run_in(python, "play.py", cwd=work)
    out = json.loads(stdout.strip().splitlines()[-1])
    retry, retry2, turns, calc = out["episodes"]
    for episode in (retry, retry2, turns, calc):
        assert episode["finish"] == "stop" and episode["error"] is None, episode
        # every model call of the episode is in one token-exact row
        assert episode["rows"] == 1 and episode["breaks"] == 0 and episode["model_tokens"] > 0
    for episode in (retry, retry2):
        # one call per model turn; a second call only after a wrong first reply, the env's
        # retry message then in the row as env tokens
        assert episode["metrics"]["model_turns"] == episode["calls"] in (1, 2), episode
        assert ("That is not the sum" in episode["env_text"]) == (episode["calls"] == 2), episode
        assert episode["reward"] == episode["metrics"]["correct"], episode
        rewards = f"'rewards': {{'correct': {{'score': {episode['reward']}, 'weight': 1.0}}}}"
        assert rewards in episode["verdict"], episode
    # the untrained model's digits are all but never the sum: the env asked again
    assert 2 in (retry["calls"], retry2["calls"]), (retry, retry2)
    # the reward is the played trace's (two replies), which no grading of the text could give
    assert turns["reward"] == 1.0 and turns["passed"] and turns["calls"] == 2, turns
    assert turns["metrics"] == {"correct": 1.0, "model_turns": 2.0}
    # the task's tool server ran (MCP in a subprocess) and the model was offered its tool
    # (verifiers names it <server>_<tool>)
    assert '"name": "calc_add"' in calc["prompt"] and "Add two integers." in calc["prompt"], calc
    assert "runs model-written code" in out["bash"] and "container" in out["codex"]
    assert "sise" in out["sise"] and "harness_kwargs must be a mapping" in out["harness_kwargs"]
    assert "agent seats are ['agent', 'judge']" in out["two_seats"]
    assert out["check_env"] == 0 and " 0 failed" in stdout, stdout[-3000:]


@pytest.mark.slow
def test_training_through_the_harness_updates_on_the_played_rows(venv):
    python, work = venv
    runs = work / "runs"
    kwargs = json.dumps({"environment": "parity", "environment_kwargs": {"size": 200}})
    run_in(python, "-m", "rlvr.cli", "train", str(ROOT / "configs" / "quickstart.yaml"),
           "env.id=rlvr/VerifiersHarness-v0", f"env.kwargs={kwargs}", "env.eval_kwargs={}",
           "sft.enabled=false", "trainer.steps=2", "eval.tasks=4", "eval.every=0",
           "rollout.runner.max_turns=2", "rollout.runner.max_tokens_per_turn=6",
           "rollout.runner.max_response_tokens=64", "trainer.progress=false",
           "trainer.tensorboard=false", "trainer.plot=false", "trainer.export_at_end=false",
           "trainer.checkpoint_every=0", "rollout.prompts_per_step=4", "rollout.group_size=4",
           f"trainer.output_dir={runs}", cwd=work)
    steps = [json.loads(line) for line in (runs / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in steps if "rollout/logprob_diff" in m]
    assert len(steps) == 2
    for m in steps:
        # every episode played by the harness and scored by the taskset's own hooks
        assert m["response/error_ratio"] == 0.0 and m["rollout/error_episodes"] == 0.0, m
        # multi-turn episodes (the env asks again after a reply that is not the sum, which the
        # untrained model's all but always are), each model turn one call through the gateway
        assert 1.5 <= m["response/turns_mean"] <= 2.0, m
        assert m["env/model_turns"] == pytest.approx(m["response/turns_mean"]), m
        # the learner's logprobs of the played rows are the engine's (token-exact rows)
        assert m["rollout/logprob_diff"] < 1e-3, m
    # the played trace's reward had spread, and the update learned from it
    assert any(0.0 < m["reward/mean"] < 1.0 for m in steps), steps
    assert any(m["actor/grad_norm"] > 0.0 for m in steps), steps
