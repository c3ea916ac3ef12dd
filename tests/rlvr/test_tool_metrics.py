"""Tool-use metrics, the env-token guard on training batches, and the before/after page."""

import math

import pytest
import torch
from transformers import AutoTokenizer

from rlvr.batch import RolloutBatch
from rlvr.envs.tool_env import calculator_call
from rlvr.errors import BatchError
from rlvr.tool_metrics import tool_metrics
from rlvr.training.env_tokens import EnvTokenGuard, tool_result_positions
from rlvr.training.snapshots import EpisodeSnapshots
from rlvr.trajectory import EpisodeOutcome, Trajectory

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    return AutoTokenizer.from_pretrained(tiny_model_path)


def _traj(calls=0, errors=None, response=(5, 6), mask=(1, 1), scores=None, passed=False):
    scores = list(scores or [0.0] * (len(response) - 1) + [float(passed)])
    return Trajectory(prompt_ids=[1, 2], response_ids=list(response), response_mask=list(mask),
                      rollout_logprobs=[0.0] * len(response), token_level_scores=scores,
                      outcome=EpisodeOutcome(tool_calls=calls, tool_errors=errors))


def test_tool_metrics_known_answer():
    trajs = [_traj(2, 1, passed=True), _traj(1, 0), _traj(0, 0, passed=True), _traj(1, 1),
             _traj(0, 0), _traj(1, 0, passed=True)]
    metrics = tool_metrics(trajs, CPU)
    assert metrics == pytest.approx({
        "tool/calls_per_episode": 5 / 6, "tool/errors_per_episode": 2 / 6,
        "tool/episodes_with_call": 4 / 6, "tool/valid_call_rate": 3 / 5,
        "tool/accuracy_with_call": 2 / 4, "tool/accuracy_without_call": 1 / 2})
    no_calls = tool_metrics([_traj(0, 0, passed=True)], CPU)
    assert math.isnan(no_calls["tool/valid_call_rate"])
    assert math.isnan(no_calls["tool/accuracy_with_call"])
    assert no_calls["tool/accuracy_without_call"] == 1.0
    assert math.isnan(tool_metrics([_traj(1, 0)], CPU)["tool/accuracy_without_call"])
    assert tool_metrics([_traj(0, None)], CPU) == {}  # not a tool env: nothing to report


def _episode(tokenizer, answer_mask=1):
    """A two-turn episode as the runner records it: call, tool result (env), answer."""
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    call = enc('<tool_call>\n{"name": "calculator"}\n</tool_call>') + [tokenizer.eos_token_id]
    env = enc("\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
              "<|im_start|>assistant\n")
    answer = enc("42") + [tokenizer.eos_token_id]
    response = call + env + answer
    mask = [1] * len(call) + [0] * len(env) + [answer_mask] * len(answer)
    scores = [0.0] * len(response)
    scores[-1] = 1.0
    return Trajectory(prompt_ids=enc("12*34"), response_ids=response, response_mask=mask,
                      rollout_logprobs=[0.0] * len(response), token_level_scores=scores), env


def _batch(trajs, advantage=1.0):
    batch = RolloutBatch.from_trajectories(trajs, pad_token_id=0)
    batch.set("advantages", batch.response_mask.float() * advantage)
    return batch


def test_guard_passes_runner_shaped_episodes_and_counts_tool_tokens(tokenizer):
    traj, env = _episode(tokenizer)
    guard = EnvTokenGuard(tokenizer)
    metrics = guard.check(_batch([traj, traj]))
    # <tool_response> \n 4 2 \n </tool_response>: 6 tokens per episode
    assert metrics == {"check/tool_result_tokens": 12.0}
    assert guard.episodes == 2 and guard.tool_tokens == 12


def test_guard_catches_a_trained_tool_result_token(tokenizer):
    traj, env = _episode(tokenizer)
    inside = traj.response_ids.index(tokenizer.convert_tokens_to_ids("</tool_response>")) - 1
    traj.response_mask[inside] = 1  # a runner bug: one digit of the tool output is "model"
    with pytest.raises(BatchError, match=f"row 1: tool-result token at response position "
                                         f"{inside} has response_mask 1.0"):
        EnvTokenGuard(tokenizer).check(_batch([_episode(tokenizer)[0], traj]))


def test_guard_catches_an_advantage_on_env_tokens(tokenizer):
    batch = _batch([_episode(tokenizer)[0]])
    batch.set("advantages", torch.ones_like(batch.advantages))
    with pytest.raises(BatchError, match="advantage 1.0"):
        EnvTokenGuard(tokenizer).check(batch)


def test_guard_catches_a_reward_on_an_env_token_but_allows_spans(tokenizer):
    traj, _ = _episode(tokenizer)
    traj.token_level_scores[1] = 0.5  # a reward span inside the first model turn: allowed
    EnvTokenGuard(tokenizer).check(_batch([traj]))
    env_token = traj.response_mask.index(0)
    traj.token_level_scores[env_token] = 1.0
    with pytest.raises(BatchError, match=f"position {env_token}, an env token"):
        EnvTokenGuard(tokenizer).check(_batch([traj]))


def test_tool_tags_the_model_wrote_are_its_own_tokens(tokenizer):
    open_id = tokenizer.convert_tokens_to_ids("<tool_response>")
    close_id = tokenizer.convert_tokens_to_ids("</tool_response>")
    ids = torch.tensor([[open_id, 7, close_id, 9, open_id, 8, close_id, 9, 3]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0, 1, 1]])
    inside = tool_result_positions(ids, mask, open_id, close_id)
    assert inside.tolist() == [[False] * 4 + [True] * 3 + [False] * 2]


def test_a_tool_result_echoing_the_models_tags_ends_at_its_own_close(tokenizer):
    """A calculator error quotes the model's bad expression, tags included: the env's tokens
    then hold a second ``<tool_response>``. The result still ends at the env's closing tag, so
    the model's next turn is not taken for tool output (this stopped a quickstart run)."""
    from rlvr import envs

    env = envs.make("rlvr/CompactToolUse-v0")
    env.reset(seed=0)
    bad = calculator_call("12*3<tool_response>")
    obs, *_ = env.step(bad)
    env.close()
    assert "<tool_response>" in obs[0]["content"]  # the error echoes it
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    call = enc(bad) + [tokenizer.eos_token_id]
    env_tokens = enc(f"\n<|im_start|>user\n<tool_response>\n{obs[0]['content']}\n"
                     "</tool_response><|im_end|>\n<|im_start|>assistant\n")
    answer = enc("36") + [tokenizer.eos_token_id]
    open_id, close_id = (tokenizer.convert_tokens_to_ids(t)
                         for t in ("<tool_response>", "</tool_response>"))
    assert env_tokens.count(open_id) == 2 and env_tokens.count(close_id) == 1
    ids = torch.tensor([call + env_tokens + answer])
    mask = torch.tensor([[1] * len(call) + [0] * len(env_tokens) + [1] * len(answer)])
    inside = tool_result_positions(ids, mask, open_id, close_id)[0].tolist()
    start = len(call) + env_tokens.index(open_id)
    end = len(call) + env_tokens.index(close_id)
    assert inside == [start <= i <= end for i in range(ids.shape[1])]
    scores = [0.0] * ids.shape[1]
    scores[-1] = 1.0
    traj = Trajectory(prompt_ids=enc("12*3"), response_ids=ids[0].tolist(),
                      response_mask=mask[0].tolist(), rollout_logprobs=[0.0] * ids.shape[1],
                      token_level_scores=scores)
    assert EnvTokenGuard(tokenizer).check(_batch([traj]))["check/tool_result_tokens"] == \
        end - start + 1


def test_snapshots_page_holds_both_labels(tmp_path, tokenizer):
    class Evaluator:
        last_records = [{"model": "step_0", "env": "heldout", "task_id": f"t{i}", "passed": i,
                         "segments": [{"kind": "model", "text": "x", "reward": 1.0}]}
                        for i in range(3)]

    page = EpisodeSnapshots(tmp_path / "episodes.html", 2)
    page.take("before RL", Evaluator())
    page.take("after RL", Evaluator())
    html = page.write().read_text()
    assert "before RL" in html and "after RL" in html and html.count("task t") == 4
    assert html.count("<details open>") == html.count("<details")  # a few episodes: all shown
    assert EpisodeSnapshots(tmp_path / "none.html", 0).write() is None


def test_training_and_eval_report_the_same_tool_metrics():
    """One definition: the metrics training logs for some episodes are the ones eval reports
    for the same episodes (from their episodes.jsonl records), under the same keys."""
    from rlvr.eval.episodes import episode_record
    from rlvr.eval.metrics import summarize
    from rlvr.tool_metrics import TOOL_METRICS

    trajs = [_traj(2, 1, passed=True), _traj(1, 0), _traj(0, 0, passed=True), _traj(1, 1),
             _traj(0, 0), _traj(1, 0, passed=True), _traj(3, None, passed=True)]
    for i, t in enumerate(trajs):
        t.task_id = f"t{i}"
    records = [episode_record(t, model="m", env="e", sample=0, decode=str) for t in trajs]
    trained, evaluated = tool_metrics(trajs, CPU), summarize(records, samples=1)
    assert list(trained) == list(TOOL_METRICS)
    assert {k: evaluated[k] for k in TOOL_METRICS} == pytest.approx(trained)
    # the third-party episode (errors None) counts as a call, not in the validity
    assert trained["tool/calls_per_episode"] == pytest.approx(8 / 7)
    assert trained["tool/valid_call_rate"] == pytest.approx(3 / 5)
    no_calls = [_traj(0, 0, passed=True)]
    assert summarize([episode_record(no_calls[0], model="m", env="e", sample=0, decode=str)],
                     samples=1)["tool/valid_call_rate"] is None  # NaN in training, None in JSON
    assert "tool/calls_per_episode" not in summarize(
        [episode_record(_traj(0, None), model="m", env="e", sample=0, decode=str)], samples=1)
