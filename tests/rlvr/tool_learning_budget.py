"""The small-budget tool-learning run: shared by its test and by its seed sweep.

``tests/rlvr/test_tool_learning.py`` runs it once; ``bench/tool_learning_seeds.py`` runs it over
seeds to choose the test's thresholds (BENCHMARKS.md, "The tool quickstart").
``run_agent_from`` is the gateway learning test's run: the same RL from that run's warm-up
(``output_dir/sft_model``) on ``examples/calculator_agent.py``, the task as a plain
``openai``-client agent played through the gateway (``bench/tool_learning_seeds.py --agent``),
or on ``examples/native_tools_agent.py``, the same agent written with ``tools=`` (``--native``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer_helpers import QUIET

TOOL_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "tool_quickstart.yaml"

#: Overrides of the tool quickstart for a run of about two minutes (see the test's docstring):
#: its 1000-demo pool, smaller checks, a shorter mixed stage at a 40% call share (so the tool
#: path keeps working and a good part of each group calls), 16 RL steps of 4 x 8 (on the
#: quickstart's two torch threads, which gave the same numbers as one on seeds 0-4).
BUDGET = [
    "sft.eval_tasks=32", "sft.target_accuracy=0.5", "sft.max_steps=500", "sft.mixed_steps=40",
    "sft.tool_call_share=0.4", "rollout.prompts_per_step=4", "trainer.steps=16", "eval.every=0",
    "eval.tasks=16", "eval.show_episodes=0", "trainer.checkpoint_every=0",
]
#: The agent env: ``examples/calculator_agent.py`` registers it (tasks and grading from the
#: built-in rlvr/CompactToolUse-v0, the episode played by the agent's own tool loop).
AGENT = ["env.id=examples/Calculator-v0", "env.imports=[examples.calculator_agent]"]
#: The native-tools agent env: ``examples/native_tools_agent.py`` (``tools=`` in the request,
#: ``message.tool_calls`` back, results as ``tool`` messages with their ``tool_call_id``).
NATIVE_AGENT = ["env.id=examples/NativeCalculator-v0", "env.imports=[examples.native_tools_agent]"]
#: Steps averaged at the start and at the end of RL.
WINDOW = 5
#: The per-step metrics compared between the first and the last ``WINDOW`` steps.
CURVES = ("reward/accuracy", "tool/episodes_with_call", "tool/valid_call_rate",
          "tool/accuracy_with_call")


def window_means(history: list[dict[str, Any]], key: str) -> tuple[float, float]:
    """Mean of ``key`` over the first and over the last ``WINDOW`` steps (nulls skipped)."""
    def mean(rows: list[dict[str, Any]]) -> float:
        values = [r[key] for r in rows if r.get(key) is not None and r[key] == r[key]]
        return sum(values) / len(values) if values else float("nan")
    return mean(history[:WINDOW]), mean(history[-WINDOW:])


def run_budget(output_dir: Path, seed: int, overrides: list[str] | None = None) -> dict[str, Any]:
    """Train the small budget with ``trainer.seed=seed``; its first/last window means and times."""
    from rlvr.config import load_config
    from rlvr.trainer import train

    config = load_config(TOOL_CONFIG, QUIET + BUDGET + list(overrides or []) + [
        f"trainer.output_dir={output_dir}", f"trainer.seed={seed}"])
    return _summary(train(config, log=lambda *_: None), seed)


def run_agent_from(warm_model: Path, output_dir: Path, seed: int,
                   overrides: list[str] | None = None, agent: list[str] = AGENT
                   ) -> dict[str, Any]:
    """The budget's RL on the ``agent`` env (``AGENT`` or ``NATIVE_AGENT``) from ``warm_model``.

    ``warm_model`` is a ``run_budget``'s sft_model.
    """
    from rlvr.config import load_config
    from rlvr.trainer import train

    config = load_config(TOOL_CONFIG, QUIET + BUDGET + agent + list(overrides or []) + [
        f"model.path={warm_model}", "sft.enabled=false", f"trainer.output_dir={output_dir}",
        f"trainer.seed={seed}"])
    return _summary(train(config, log=lambda *_: None), seed)


def _summary(result: Any, seed: int) -> dict[str, Any]:
    history = [m for m in result.history if "reward/accuracy" in m]
    return {
        "seed": seed,
        "sft_steps": result.sft_steps,
        "warmup_accuracy": result.warmup_accuracy,
        "final_accuracy": result.final_accuracy,
        "warmup_seconds": result.warmup_seconds,
        "rl_seconds": result.rl_seconds,
        "total_seconds": result.total_seconds,
        **{key: window_means(history, key) for key in CURVES},
        "prefix_breaks": sum(m.get("gateway/prefix_breaks", 0) or 0 for m in history),
        "max_logprob_diff": max((m["rollout/logprob_diff"] for m in history
                                 if m.get("rollout/logprob_diff") is not None), default=None),
    }
