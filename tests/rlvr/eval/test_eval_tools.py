"""Tool-call validity and maj@k through the real runner and ToolUse env, on a scripted engine.

The random tiny model never writes a tool call, so this engine plays a fixed script (a real
``agents`` Engine: token ids in, token ids out): one valid and one malformed call, then an answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium
import pytest

from rlvr.eval.evaluator import Evaluator, SuiteEvalConfig, load_suite_entries

TOOLS_ID = "evaltest/Tools-v0"
SUITE = f"""
name: evaltools
entries:
  - env: {TOOLS_ID}
    name: tools
    split: null
    n_tasks: 2
"""
CALLS = (
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>\n'
    "<tool_call>\n{not json\n</tool_call>"
)


def make_tools_env() -> Any:
    from rlvr.envs.tool_env import ToolUseEnv

    tasks = [
        {"question": "What is 2+3?", "answer": "5", "task_id": "q0"},
        {"question": "What is 2+4?", "answer": "6", "task_id": "q1"},
    ]
    return ToolUseEnv(source=tasks, tools=["calculator"])


class ScriptedEngine:
    """Answers tool calls first, then 'Answer: 5' once a tool response is in the context."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.tool_response = tokenizer.convert_tokens_to_ids("<tool_response>")

    async def generate(self, prompt_ids: list[int], sampling: Any) -> Any:
        from rlvr.agents.engine import Completion

        text = "Answer: 5" if self.tool_response in prompt_ids else CALLS
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.end]
        return Completion(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")

    def update_weights(self, weights: Any) -> None: ...
    def release_memory(self) -> None: ...
    def resume_memory(self) -> None: ...
    def close(self) -> None: ...


def test_tool_validity_and_majority(tiny_model_path: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from rlvr import envs  # noqa: F401

    if TOOLS_ID not in gymnasium.registry:
        gymnasium.register(TOOLS_ID, entry_point=make_tools_env)
    suite = tmp_path / "evaltools.yaml"
    suite.write_text(SUITE)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    config = SuiteEvalConfig(suite=str(suite), samples=2, max_turns=3)
    ev = Evaluator(load_suite_entries(config.suite), config.runner_config(),
                   engine=ScriptedEngine(tokenizer), tokenizer=tokenizer, every=1, samples=2,
                   out_dir=tmp_path / "out")
    logged = ev.evaluate(step=5)
    ev.close()
    # q0 is answered right (5), q1 wrong (5 != 6), on both samples
    assert logged["eval/tools/pass@1"] == pytest.approx(0.5)
    assert logged["eval/tools/maj@2"] == pytest.approx(0.5)
    assert logged["eval/tools/tool/calls_per_episode"] == 2  # 2 tasks x 2 samples, 2 calls each
    assert logged["eval/tools/tool/valid_call_rate"] == pytest.approx(0.5)
    assert logged["eval/tools/mean_turns"] == pytest.approx(2.0)
    html = (tmp_path / "out" / "step_000005" / "episodes.html").read_text()
    assert "&lt;tool_response&gt;" in html and 'class="tok env"' in html
