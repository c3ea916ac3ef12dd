from __future__ import annotations

import copy

import pytest
from agent_helpers import CALC_TOOL, EchoToolEnv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlvr.agents.chat import ChatRenderer
from rlvr.agents.engine import Completion, SamplingParams
from rlvr.agents.errors import ChatTemplateError
from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig


def test_closing_and_env_delta_of_chatml(tiny_tokenizer):
    r = ChatRenderer(tiny_tokenizer)
    assert tiny_tokenizer.decode(r.closing) == "<|im_end|>\n"
    assert r.end_of_turn_id == tiny_tokenizer.eos_token_id
    delta = r.env_delta([{"role": "tool", "name": "calc", "content": "42"}], [CALC_TOOL])
    assert tiny_tokenizer.decode(delta) == (
        "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    two = r.env_delta([{"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}])
    assert tiny_tokenizer.decode(two).count("<|im_start|>user") == 1
    eos = tiny_tokenizer.eos_token_id
    assert r.turn_close([5, eos]) == r.closing[1:]
    assert r.turn_close([5, 6]) == r.closing


def test_prompt_renderings_are_memoised_and_bounded(tiny_tokenizer, monkeypatch):
    from rlvr.agents import chat as agents_chat

    monkeypatch.setattr(agents_chat, "PROMPT_CACHE_SIZE", 2)
    r = ChatRenderer(tiny_tokenizer)
    calls = []
    render = r.render
    monkeypatch.setattr(r, "render", lambda *a, **k: calls.append(a) or render(*a, **k))
    first = [{"role": "user", "content": "1+2="}]
    ids = r.prompt_ids(first)
    assert ids == render(first, None, add_generation_prompt=True)
    ids.append(-1)  # callers get their own copy
    assert r.prompt_ids([dict(m) for m in first]) == ids[:-1] and len(calls) == 1
    assert r.prompt_ids(first, [CALC_TOOL]) != ids[:-1] and len(calls) == 2  # tools are keyed
    r.prompt_ids([{"role": "user", "content": "3+4="}])  # evicts the least recently used
    r.prompt_ids(first, [CALC_TOOL])
    assert len(calls) == 3
    r.prompt_ids(first)
    assert len(calls) == 4


def test_prompt_memo_keys_are_exact(tiny_tokenizer):
    r = ChatRenderer(tiny_tokenizer)
    plain = [{"role": "system", "content": "s"}, {"role": "user", "content": "1+2="}]
    other = [{"role": "system", "content": "s1"}, {"role": "user", "content": "+2="}]
    numeric = [{"role": "user", "content": "1+2=", "n": 1}]  # not all str: keyed by its JSON
    for messages in (plain, other, numeric, plain):
        assert r.prompt_ids(messages) == r.render(messages, None, add_generation_prompt=True)
    assert r.prompt_ids(plain, []) == r.prompt_ids(plain)  # no tools either way
    assert len(r._prompts) == 3


def test_decodings_are_memoised_and_bounded(tiny_tokenizer, monkeypatch):
    from rlvr.agents import chat as agents_chat

    monkeypatch.setattr(agents_chat, "DECODE_CACHE_SIZE", 2)
    r = ChatRenderer(tiny_tokenizer)
    seqs = [[5, 6], [7], [5, 6, 8], [5, 6]]
    for ids in seqs:
        want = tiny_tokenizer.decode(ids, skip_special_tokens=False,
                                     clean_up_tokenization_spaces=False)
        assert r.decode(ids) == r.decode(tuple(ids)) == want
    assert list(r._texts) == [(5, 6, 8), (5, 6)]  # the oldest went first


def test_token_for_char_uses_the_models_own_tokens(tiny_tokenizer):
    r = ChatRenderer(tiny_tokenizer)
    ids = tiny_tokenizer.encode("the answer is 1234", add_special_tokens=False)
    text = r.decode(ids)
    for end in range(1, len(text) + 1):
        i = r.token_for_char(ids, end)
        assert len(r.decode(ids[: i + 1])) >= end > len(r.decode(ids[:i]))


def _with_template(tok, template):
    other = copy.deepcopy(tok)
    other.chat_template = template
    return other


def test_templates_that_rewrite_history_fail_loudly(tiny_tokenizer):
    drops_thinking = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'assistant' and not loop.last %}{{ m.content.split('</think>')[-1] }}"
        "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(ChatTemplateError, match="rewrote an earlier assistant turn"):
        ChatRenderer(_with_template(tiny_tokenizer, drops_thinking))
    counts_turns = (  # renders the number of messages in the system turn: every delta drifts
        "<|im_start|>system\n{{ messages | length }}<|im_end|>\n"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(ChatTemplateError, match="not prefix-stable"):
        ChatRenderer(_with_template(tiny_tokenizer, counts_turns))


class ScriptedEngine:
    """A deterministic Engine: replays scripted turns, honouring max_new_tokens and stop ids."""

    def __init__(self, turns):
        self.turns = list(turns)
        self.prompts = []

    async def generate(self, prompt_ids, sampling: SamplingParams) -> Completion:
        self.prompts.append(list(prompt_ids))
        tokens = list(self.turns.pop(0)) if self.turns else [1]
        for i, tok in enumerate(tokens):
            if tok in sampling.stop_token_ids:
                tokens = tokens[: i + 1]
                reason = "stop"
                break
        else:
            reason = "length"
        if len(tokens) > sampling.max_new_tokens:
            tokens, reason = tokens[: sampling.max_new_tokens], "length"
        return Completion(tokens, [-0.5 - 0.01 * i for i in range(len(tokens))], reason)

    def update_weights(self, weights):
        pass

    def release_memory(self):
        pass

    def resume_memory(self):
        pass

    def close(self):
        pass


class ScriptedEnv(EchoToolEnv):
    def __init__(self, replies, roles):
        super().__init__(n_turns=len(replies) + 1)
        self.replies, self.roles = replies, roles

    def step(self, action):
        self.turn += 1
        if self.turn > len(self.replies):
            return [], 1.0, True, False, {}
        role = self.roles[self.turn - 1]
        msg = {"role": role, "content": self.replies[self.turn - 1]}
        spans = [(0, len(action), 0.5)] if action else []
        return [msg], 0.0, False, False, {"reward_spans": spans}


_text = st.text(alphabet="abc 0123456789+=\n{}\"", min_size=1, max_size=20)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    n_turns=st.integers(1, 4),
)
def test_bookkeeping_is_token_exact_for_any_turn_endings(tiny_tokenizer, data, n_turns):
    eos = tiny_tokenizer.eos_token_id
    tool_end = tiny_tokenizer.convert_tokens_to_ids("</tool_call>")
    plain = st.lists(st.integers(3, 399), min_size=0, max_size=6)
    ending = st.sampled_from([[eos], [tool_end], [tool_end, eos]])
    turns = [data.draw(plain) + data.draw(ending) for _ in range(n_turns)]
    replies = [data.draw(_text) for _ in range(n_turns - 1)]
    roles = [data.draw(st.sampled_from(["tool", "user"])) for _ in range(n_turns - 1)]
    engine = ScriptedEngine(turns)
    cfg = RunnerConfig(max_turns=n_turns, max_tokens_per_turn=50, max_response_tokens=2000,
                       check_token_exact=True, seed=None)
    runner = EpisodeRunner(engine, tiny_tokenizer, cfg)
    traj = runner.run([EpisodeSpec(env_factory=lambda: ScriptedEnv(replies, roles), seed=0)])[0]
    runner.close()
    # tool_end stops the turn: the scripted eos after it is never generated
    model_turns = [t[: t.index(tool_end) + 1] if tool_end in t else t for t in turns]
    assert traj.finish_reason == "stop" and traj.outcome.turns == n_turns
    assert [t for t, m in zip(traj.response_ids, traj.response_mask) if m] == sum(model_turns, [])
    # every engine input is exactly the trajectory prefix, each turn starting after the last
    full = traj.prompt_ids + traj.response_ids
    for prompt in engine.prompts:
        assert full[: len(prompt)] == prompt
    # the text equals the template's rendering of the episode's messages
    msgs = traj.metadata["messages"]
    expected = tiny_tokenizer.apply_chat_template(msgs, tools=[CALC_TOOL], tokenize=False)
    got = tiny_tokenizer.decode(full, skip_special_tokens=False)
    assert expected.startswith(got) and expected[len(got):] in ("<|im_end|>\n", "\n")
    # rewards: 0.5 on each non-empty turn's last action token; 1.0 on the last model token
    assert traj.token_level_scores[-1] >= 1.0
    n_spans = sum(1 for t in model_turns[:-1] if t[:-1] or t[-1] == tool_end)
    assert traj.reward == pytest.approx(1.0 + 0.5 * n_spans)
