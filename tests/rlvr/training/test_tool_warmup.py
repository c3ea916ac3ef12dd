"""Multi-turn calculator demonstrations and the warm-up's per-token loss mask."""

import contextlib
import random

import pytest
from transformers import AutoTokenizer

from rlvr.envs.tool_env import calculator_call
from rlvr.errors import ConfigError
from rlvr.sft import collate
from rlvr.training.demonstrations import ScriptedDemonstrations

ENV = "rlvr/CompactToolUse-v0"


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    return AutoTokenizer.from_pretrained(tiny_model_path)


def _render(tokenizer, messages, tools=None):
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False)


def test_demonstration_is_the_chat_template_rendering_with_only_model_tokens_trained(tokenizer):
    demos = ScriptedDemonstrations(ENV, {}, tokenizer, num_demos=4, seed=0)
    assert len({d.task_id for d in demos.pool}) == 4
    for demo in demos.pool:
        expression = demo.task_id.removeprefix("mul:")
        a, b = expression.split("*")
        answer = str(int(a) * int(b))
        conversation = [
            {"role": "system", "content": "Tools: calculator(expression)"},
            {"role": "user", "content": expression},
            {"role": "assistant", "content": calculator_call(expression)},
            {"role": "tool", "name": "calculator", "content": answer},
            {"role": "assistant", "content": answer},
        ]
        rendered = _render(tokenizer, conversation)
        # the rendering ends with the closing newline after the last <|im_end|>, not generated
        assert demo.ids == rendered[:-1] and len(demo.ids) == len(demo.loss_mask)
        trained = [t for t, m in zip(demo.ids, demo.loss_mask) if m]
        assert tokenizer.decode(trained) == f"{calculator_call(expression)}<|im_end|>" \
                                            f"{answer}<|im_end|>"
        untrained = tokenizer.decode([t for t, m in zip(demo.ids, demo.loss_mask) if not m])
        assert f"<tool_response>\n{answer}\n</tool_response>" in untrained


def test_with_schemas_in_the_prompt_a_tool_turn_ends_at_the_tool_call_tag(tokenizer):
    kwargs = {"source": "multiplication", "tools": ["calculator"], "system_prompt": None}
    demo = ScriptedDemonstrations("rlvr/ToolUse-v0", kwargs, tokenizer, num_demos=1,
                                    seed=0).pool[0]
    tokens = tokenizer.convert_ids_to_tokens(demo.ids)
    close = len(tokens) - 1 - tokens[::-1].index("</tool_call>")  # the template has one too
    assert demo.loss_mask[close] == 1 and tokens[close + 1] == "<|im_end|>"
    assert demo.loss_mask[close + 1] == 0  # the runner stops there: the template closes the turn


def test_without_tools_the_teacher_answers_directly(tokenizer):
    demo = ScriptedDemonstrations(ENV, {"tools": []}, tokenizer, num_demos=1, seed=3).pool[0]
    a, b = demo.task_id.removeprefix("mul:").split("*")
    trained = [t for t, m in zip(demo.ids, demo.loss_mask) if m]
    assert tokenizer.decode(trained) == f"{int(a) * int(b)}<|im_end|>"


@pytest.mark.parametrize("share", [0.25, 0.5])
def test_tool_call_share_makes_the_rest_of_the_pool_answer_directly(tokenizer, share):
    from rlvr import envs

    demos = ScriptedDemonstrations(ENV, {}, tokenizer, num_demos=20, seed=0,
                                     tool_call_share=share)
    calling = [d for d in demos.pool if d.calls_tool]
    assert len(calling) == round(20 * share) and demos.tool_call_share == share
    full = ScriptedDemonstrations(ENV, {}, tokenizer, num_demos=20, seed=0)
    assert [d.task_id for d in demos.pool] == [d.task_id for d in full.pool]  # same tasks
    assert all(d.calls_tool for d in full.pool) and full.tool_call_share == 1.0
    env = envs.make(ENV)
    try:
        for demo, with_tool in zip(demos.pool, full.pool, strict=True):
            trained = tokenizer.decode([t for t, m in zip(demo.ids, demo.loss_mask) if m])
            if demo.calls_tool:
                assert demo.ids == with_tool.ids and demo.loss_mask == with_tool.loss_mask
                continue
            a, b = demo.task_id.removeprefix("mul:").split("*")
            assert trained == f"{int(a) * int(b)}<|im_end|>"  # one turn: the gold answer
            assert "<tool_call>" not in tokenizer.decode(demo.ids)
            assert demo.ids[:len(with_tool.ids)] != with_tool.ids
            env.reset(seed=demo.seed)  # replayed, the direct answer earns the full reward
            assert env.unwrapped.task["task_id"] == demo.task_id
            _, reward, terminated, _, _ = env.step(str(int(a) * int(b)))
            assert reward == 1.0 and terminated
    finally:
        env.close()


def test_tool_call_share_is_checked(tokenizer):
    with pytest.raises(ConfigError, match="tool_call_share"):
        ScriptedDemonstrations(ENV, {}, tokenizer, num_demos=2, seed=0, tool_call_share=0.0)
    from rlvr.config import SFTConfig

    for bad in (0.0, 1.5):
        with pytest.raises(ConfigError, match="tool_call_share"):
            SFTConfig(demos="scripted", tool_call_share=bad)
    with pytest.raises(ConfigError, match="demos: scripted"):
        SFTConfig(demos="answers", tool_call_share=0.5)


def test_after_decision_leaves_out_only_the_first_model_token(tokenizer):
    demos = ScriptedDemonstrations(ENV, {}, tokenizer, num_demos=6, seed=2,
                                     tool_call_share=0.5)
    first_tokens = set()
    for demo in demos.pool:
        ids, mask = demo.after_decision()
        changed = [i for i, (a, b) in enumerate(zip(mask, demo.loss_mask)) if a != b]
        assert ids == demo.ids and changed == [demo.loss_mask.index(1)]
        first_tokens.add((demo.calls_tool, tokenizer.decode(demo.ids[changed[0]])))
    assert ("<tool_call>" in {t for call, t in first_tokens if call}
            and all(t.isdigit() for call, t in first_tokens if not call))


def test_tool_path_check_scores_held_out_tool_demonstrations(tiny_model_path, tokenizer):
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    from rlvr.config import load_config
    from rlvr.training.warmup import tool_path_check

    path = Path(__file__).resolve().parents[3] / "configs" / "tool_quickstart.yaml"
    config = load_config(path, ["sft.check=tool_path", "sft.eval_tasks=4"])
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    check = tool_path_check(config, tokenizer, model, contextlib.ExitStack())
    assert check() == 0.0  # an untrained model copies nothing
    with pytest.raises(ConfigError, match="tool_path needs demos: scripted"):
        load_config(path, ["sft.check=tool_path", "sft.demos=answers"])


def test_staged_warm_up_trains_the_tool_pool_then_the_mixed_pool(tmp_path, monkeypatch):
    """``sft.mixed_steps``: the first stage draws only tool-calling demonstrations, the second
    (after the first stage's check) the mixed pool, for exactly ``mixed_steps`` steps."""
    from pathlib import Path

    from trainer_helpers import QUIET, SMALL_MODEL

    import rlvr.sft
    from rlvr.config import load_config
    from rlvr.trainer import train

    drawn = []  # (stage, calls_tool) of every demonstration drawn
    stage = {"n": 0}
    original = rlvr.sft.supervised_warmup

    def recording(model, tokenizer, examples, config, **kwargs):
        stage["n"] += 1

        def draw(rng):
            demo = examples(rng)
            drawn.append((stage["n"], demo.calls_tool))
            return demo
        return original(model, tokenizer, draw, config, **kwargs)

    monkeypatch.setattr(rlvr.sft, "supervised_warmup", recording)
    path = Path(__file__).resolve().parents[3] / "configs" / "tool_quickstart.yaml"
    config = load_config(path, SMALL_MODEL + QUIET + [
        f"trainer.output_dir={tmp_path}", "sft.num_demos=40", "sft.tool_call_share=0.25",
        "sft.mixed_steps=3", "sft.max_steps=2", "sft.batch_size=8", "sft.check=tool_path",
        "sft.eval_tasks=2", "trainer.steps=1", "rollout.prompts_per_step=1",
        "rollout.group_size=2", "eval.tasks=2", "trainer.checkpoint_every=0"])
    result = train(config, log=lambda *_: None)
    assert result.sft_steps == 5
    first = [calls for n, calls in drawn if n == 1]
    second = [calls for n, calls in drawn if n == 2]
    assert len(first) == 2 * 8 and all(first)
    assert len(second) == 3 * 8 and 0 < sum(second) < len(second)
    with pytest.raises(ConfigError, match="mixed_steps needs tool_call_share < 1"):
        load_config(path, ["sft.mixed_steps=10", "sft.tool_call_share=1.0"])


def test_the_env_teacher_calls_the_calculator_then_copies_its_result():
    from rlvr import envs

    env = envs.make(ENV)
    env.reset(seed=0)
    task = env.unwrapped.task
    expression = str(task.get("expression", task["question"]))
    assert env.unwrapped.demonstration([]) == calculator_call(expression)
    assert env.unwrapped.demonstration([{"role": "tool", "content": "408"}]) == "408"
    assert env.unwrapped.demonstration([], use_tool=False) == str(task["answer"])
    no_tools = envs.make(ENV, tools=[])
    no_tools.reset(seed=0)
    assert no_tools.unwrapped.demonstration([]) == str(no_tools.unwrapped.task["answer"])


def test_a_task_env_without_tools_gives_direct_demonstrations(tokenizer):
    kwargs = {"answer_format": "plain", "system_prompt": None, "source": "arithmetic"}
    demos = ScriptedDemonstrations("rlvr/Math-v0", kwargs, tokenizer, num_demos=2, seed=0)
    assert [d.calls_tool for d in demos.pool] == [False, False]
    trained = tokenizer.decode([t for t, m in zip(demos.pool[0].ids, demos.pool[0].loss_mask)
                                if m])
    assert trained.endswith("<|im_end|>") and "<tool_call>" not in trained


def test_an_env_without_a_teacher_is_refused(tokenizer):
    import gymnasium

    from rlvr.envs import VerifierEnv
    from rlvr.verifiers import Verdict

    class NoAnswer(VerifierEnv):
        def __init__(self, split="train", **kwargs):
            super().__init__([{"task_id": "w/0", "question": "abc"}],
                             lambda response, task: Verdict(0.0, False, "wrong"),
                             prompt_template="Reverse: {question}", **kwargs)

    gymnasium.register("rlvrtest/NoTeacher-v0", entry_point=NoAnswer)
    try:
        with pytest.raises(ConfigError, match="has none"):
            ScriptedDemonstrations("rlvrtest/NoTeacher-v0", {}, tokenizer, num_demos=1, seed=0)
    finally:
        gymnasium.registry.pop("rlvrtest/NoTeacher-v0")


def test_collate_takes_a_per_token_mask(tokenizer):
    demos = ScriptedDemonstrations(ENV, {}, tokenizer, num_demos=2, seed=1)
    first, second = demos.pool
    input_ids, attention, loss_mask = collate([first.encoded(), (second.ids, 5)], 0)
    targets = input_ids[0, 1:][loss_mask[0].bool()].tolist()
    assert targets == [t for t, m in zip(first.ids, first.loss_mask) if m]
    assert input_ids[1, 1:][loss_mask[1].bool()].tolist() == second.ids[5:]
    assert attention.sum(1).tolist() == [len(first.ids), len(second.ids)]


def test_draws_come_from_the_fixed_pool(tokenizer):
    demos = ScriptedDemonstrations(ENV, {}, tokenizer, num_demos=3, seed=0)
    rng = random.Random(0)
    assert {demos(rng).task_id for _ in range(50)} == {d.task_id for d in demos.pool}


def test_tool_quickstart_config_and_its_ablation_load():
    from pathlib import Path

    from rlvr.config import load_config
    from rlvr.training.preflight import check_targets

    path = Path(__file__).resolve().parents[3] / "configs" / "tool_quickstart.yaml"
    config = load_config(path)
    assert (config.env.id, config.sft.demos, config.eval.show_episodes) == (
        "rlvr/CompactToolUse-v0", "scripted", 6)
    check_targets(config)
    ablation = load_config(path, ["env.kwargs.tools=[]"])
    assert ablation.env.kwargs["tools"] == [] and ablation.trainer.steps == config.trainer.steps
    check_targets(ablation)
    with pytest.raises(ConfigError, match="sft.demos"):
        load_config(path, ["sft.demos=calculator"])  # the env gives the teacher: "scripted"
