"""Token-exact multi-turn episodes with a real BPE tokenizer and chat template (SmolLM2-135M).

The tiny model's tokenizer spells digits one by one; a real byte-level BPE merges spaces,
newlines and digits into one token (" 42", "\\n\\n"), and a merge across a turn boundary is
where re-tokenising a rendered conversation drifts from what the engine generated. The runner
never re-tokenises: these tests drive it with the real tokenizer (scripted engines whose turns
end in text that merges differently when rendered whole, and the real model sampling) and check
that the learner's sequence is the engine's, token for token, with the right masks, and that
templates that rewrite earlier turns are refused.
"""

from __future__ import annotations

import copy

import pytest
from agent_helpers import recompute_logprobs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_chat import ScriptedEngine

from rlvr.agents.chat import ChatRenderer
from rlvr.agents.engine import SamplingParams
from rlvr.agents.errors import ChatTemplateError
from rlvr.agents.runner import EpisodeSpec, RunnerConfig, run_episodes

#: Texts whose BPE merges differ alone and in context (leading/trailing spaces, blank lines,
#: digits next to words), the shapes that drift when a rendered conversation is re-tokenised.
TEXT = st.text(alphabet=st.sampled_from(list("0123456789 \n+=abx.")), min_size=1, max_size=24)


@pytest.fixture(scope="module")
def smol_tokenizer(smollm2_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_path)


def _retry_spec(seed: int) -> EpisodeSpec:
    return EpisodeSpec(env_id="rlvr/Math-v0", seed=seed, env_kwargs={
        "answer_format": "plain", "max_attempts": 3, "source": "arithmetic",
        "source_kwargs": {"n_tasks": 50, "n_operands": 2, "min_digits": 1, "max_digits": 2,
                          "operators": "+"}})


def test_the_real_template_is_prefix_stable_and_closes_turns_with_im_end(smol_tokenizer):
    r = ChatRenderer(smol_tokenizer)
    assert smol_tokenizer.decode(r.closing) == "<|im_end|>\n"
    assert r.end_of_turn_id == smol_tokenizer.eos_token_id == smol_tokenizer.convert_tokens_to_ids(
        "<|im_end|>")
    delta = r.env_delta([{"role": "user", "content": " 42"}])
    assert smol_tokenizer.decode(delta) == (
        "<|im_start|>user\n 42<|im_end|>\n<|im_start|>assistant\n")


def test_templates_that_rewrite_history_are_refused_with_the_real_tokenizer(smol_tokenizer):
    other = copy.deepcopy(smol_tokenizer)
    other.chat_template = smol_tokenizer.chat_template.replace(
        "message['content']", "(message['content'] if message['role'] != 'assistant' or loop.last"
        " else message['content'].split('</think>')[-1])")
    with pytest.raises(ChatTemplateError, match="rewrote an earlier assistant turn"):
        ChatRenderer(other)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(TEXT, min_size=3, max_size=3), canonical=st.booleans())
def test_engine_tokens_are_the_learner_tokens_whatever_the_text(smol_tokenizer, turns, canonical):
    """Each scripted turn is the model's token ids (canonical BPE of the text, or one token per
    character, which BPE would never produce); the trajectory keeps them verbatim with mask 1,
    the env's tokens with mask 0, and its decoded text is the template's rendering."""
    tok = smol_tokenizer
    eos = tok.eos_token_id

    def ids(text: str) -> list[int]:
        if canonical:
            return tok.encode(text, add_special_tokens=False)
        return [t for ch in text for t in tok.encode(ch, add_special_tokens=False)]

    script = [ids(text) + [eos] for text in turns]
    engine = ScriptedEngine(script)
    cfg = RunnerConfig(max_turns=3, max_tokens_per_turn=64, check_token_exact=True)
    traj = run_episodes(engine, tok, [_retry_spec(7)], cfg)[0]
    n = traj.outcome.turns
    assert 1 <= n <= 3  # a correct answer ends the episode early
    model_tokens = [t for i, t in enumerate(traj.response_ids) if traj.response_mask[i]]
    assert model_tokens == [t for turn in script[:n] for t in turn]
    # every engine input was exactly the trajectory's sequence up to that point
    full = traj.prompt_ids + traj.response_ids
    for prompt in engine.prompts:
        assert full[: len(prompt)] == prompt
    msgs = traj.metadata["messages"]
    rendered = tok.apply_chat_template(msgs, tokenize=False)
    text = tok.decode(full, skip_special_tokens=False)
    assert rendered.startswith(text) and rendered[len(text):] in ("", "<|im_end|>\n", "\n")


@pytest.mark.slow
def test_the_real_model_plays_token_exact_retry_episodes(smollm2_path, smol_tokenizer):
    """SmolLM2 itself on the transformers engine: 2 tasks x 2 samples of a 3-attempt env;
    the learner's forward over the trajectory gives the engine's logprobs."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.agents.hf.engine import TransformersEngine

    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32).eval()
    engine = TransformersEngine(model, smol_tokenizer, max_batch_size=8)
    try:
        # a turn ends at the first sentence (a turn cut off by the budget never reaches the env)
        cfg = RunnerConfig(max_turns=3, max_tokens_per_turn=16, check_token_exact=True, seed=0,
                           sampling=SamplingParams(temperature=1.0, stop=(".", "\n")))
        specs = [_retry_spec(s) for s in range(2)]
        trajs = run_episodes(engine, smol_tokenizer, specs, cfg, group_size=2)
    finally:
        engine.close()
    assert len(trajs) == 4
    assert any(t.outcome.turns > 1 for t in trajs)  # multi-turn: feedback, then another try
    for traj in trajs:
        assert traj.finish_reason in ("stop", "length", "max_turns", "truncated")
        mine, theirs = recompute_logprobs(model, traj)
        assert (mine - theirs).abs().max().item() < 1e-4


@pytest.fixture(scope="module")
def smol_engine(smollm2_path, smol_tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.agents.hf.engine import TransformersEngine

    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32).eval()
    engine = TransformersEngine(model, smol_tokenizer, max_batch_size=8)
    yield engine
    engine.close()


QUESTION = "What is 17 + 25?"


async def two_call_agent(client, task):
    """Asks, then asks again with the model's own reply in its history (as an agent loop does):
    the second prompt must extend the first call's tokens, whatever BPE makes of the text."""
    messages = list(task.messages)
    first = await client.chat.completions.create(model="policy", messages=messages,
                                                 max_tokens=12, stop=["."])
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": " Only the number, please.\n"}]
    second = await client.chat.completions.create(model="policy", messages=messages,
                                                  max_tokens=8, stop=["\n"])
    return second.choices[0].message.content


async def editing_agent(client, task):
    """Puts back an edited copy of the model's reply (a trailing space BPE merges differently):
    the gateway detects the prefix break and splits the episode into rows."""
    messages = list(task.messages)
    first = await client.chat.completions.create(model="policy", messages=messages,
                                                 max_tokens=8, stop=["."])
    messages += [{"role": "assistant", "content": first.choices[0].message.content + " "},
                 {"role": "user", "content": "Again?"}]
    second = await client.chat.completions.create(model="policy", messages=messages,
                                                  max_tokens=8, stop=["."])
    return second.choices[0].message.content


def _agent_spec(agent, seed=0):
    from rlvr.envs.agent_env import AgentEnv
    from rlvr.verifiers.math import verify

    tasks = [{"id": "t0", "question": QUESTION, "answer": "42"}]
    return EpisodeSpec(env_factory=lambda: AgentEnv(
        agent, source=tasks, verifier=lambda answer, task: verify(answer, task["answer"])),
        seed=seed)


def _check_rows_are_the_engines(model, traj):
    for row in [traj, *traj.extra_rows]:
        mine, theirs = recompute_logprobs(model, row)
        assert (mine - theirs).abs().max().item() < 1e-4


@pytest.mark.slow
def test_a_gateway_agent_on_the_real_tokenizer_is_token_exact(smol_engine, smol_tokenizer):
    from rlvr.agents.runner import EpisodeRunner

    cfg = RunnerConfig(max_turns=4, max_tokens_per_turn=12, max_response_tokens=200,
                       check_token_exact=True, seed=0,
                       sampling=SamplingParams(temperature=1.0))
    runner = EpisodeRunner(smol_engine, smol_tokenizer, cfg)
    try:
        trajs = runner.run([_agent_spec(two_call_agent, seed=s) for s in range(3)])
        [edited] = runner.run([_agent_spec(editing_agent)])
    finally:
        runner.close()
    for traj in trajs:
        assert traj.outcome.error is None and traj.outcome.turns == 2, traj.outcome
        # one row: the second call's prompt extended the first call's tokens, no retokenising
        assert traj.metadata["gateway_prefix_breaks"] == 0 and traj.extra_rows == []
        env_text = smol_tokenizer.decode(
            [t for t, m in zip(traj.response_ids, traj.response_mask) if not m])
        assert "<|im_start|>user\n Only the number, please.\n<|im_end|>" in env_text  # mask 0
        _check_rows_are_the_engines(smol_engine.model, traj)
    # the edited history is caught: two rows, each exactly one call's prompt and completion
    assert edited.metadata["gateway_prefix_breaks"] == 1 and len(edited.extra_rows) == 1
    _check_rows_are_the_engines(smol_engine.model, edited)


@pytest.mark.slow
def test_the_tool_env_on_the_real_tokenizer_is_token_exact(smol_engine, smol_tokenizer):
    """rlvr/ToolUse-v0's calculator with SmolLM2 sampling: tool results are env tokens, every
    model token's logprob is the learner's."""
    cfg = RunnerConfig(max_turns=3, max_tokens_per_turn=24, max_response_tokens=160,
                       check_token_exact=True, seed=0,
                       sampling=SamplingParams(temperature=1.0, stop=("</tool_call>",)))
    specs = [EpisodeSpec(env_id="rlvr/ToolUse-v0", seed=s,
                         env_kwargs={"source": "arithmetic", "tools": ["calculator"]})
             for s in range(2)]
    trajs = run_episodes(smol_engine, smol_tokenizer, specs, cfg, group_size=2)
    assert len(trajs) == 4
    for traj in trajs:
        assert traj.outcome.error is None, traj.outcome
        assert traj.finish_reason in ("stop", "length", "max_turns", "truncated")
        _check_rows_are_the_engines(smol_engine.model, traj)
