"""episodes.jsonl: one flat, JSON-ready record per evaluated episode.

A record holds everything the metrics, the report and episodes.html need, so all of them can be
recomputed from the file alone:

- identity: ``model`` (checkpoint label), ``env`` (suite entry key), ``env_id``, ``task_id``,
  ``sample`` (0-based sample index within the task), ``group_id``;
- outcome (``Trajectory.outcome``): ``reward`` (sum of token-level scores), ``score`` /
  ``verdict_reason`` (the final verdict; score falls back to the reward clipped to [0, 1] when
  there is none), ``passed`` (``Trajectory.passed``, the definition training accuracy uses too),
  ``answer`` (the normalised extracted final answer, or None), ``gold`` (the task's reference
  answer as the env gave it when the episode ended, or None), ``finish_reason``;
- stats: ``turns``, ``tool_calls``, ``tool_call_errors`` (malformed or failed calls; None when
  the env does not check tool calls),
  ``model_tokens`` (tokens the model generated, i.e. the sum of ``response_mask``), ``error``
  (why an episode ended with finish reason "error", else None);
- ``task_metadata``: what the task carried about itself (for data in verl's layout:
  ``data_source``, ``ability``, ``reward_style``, ``extra_info``), or None;
- content: ``messages`` (the chat as the env and agent saw it), ``prompt_ids``,
  ``response_ids``, ``response_mask``, ``token_level_scores``, ``turn_rewards`` (the sum of the
  scores of each contiguous run of model tokens) and ``segments``, the decoded text as
  ``{"kind": "prompt" | "model" | "env", "text": str, "reward": float | None}`` runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.trajectory import Trajectory

__all__ = [
    "episode_record",
    "normalize_answer",
    "read_episodes",
    "segments",
    "write_episodes",
]

Decode = Callable[[Sequence[int]], str]


def normalize_answer(answer: Any) -> str | None:
    r"""Canonical text of a final answer, so that equal answers compare equal in maj@k.

    Lower-cases, collapses whitespace, strips surrounding ``$``, a ``\boxed{...}`` wrapper, a
    trailing period and thousands separators, and writes numbers canonically (``"4.0"`` ->
    ``"4"``, ``"1,000"`` -> ``"1000"``).

    Args:
        answer: the extracted answer (any type; None or empty means "no answer").

    Returns:
        The normalised string, or None when there is no answer.
    """
    if answer is None:
        return None
    text = " ".join(str(answer).split()).strip().lower()
    boxed = re.fullmatch(r"\\boxed\{(.*)\}", text)
    if boxed:
        text = boxed.group(1).strip()
    text = text.rstrip(". ").strip("$ ").rstrip(". ").strip()
    if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    try:
        number = float(text)
    except ValueError:
        return text or None
    if number != number or number in (float("inf"), float("-inf")):
        return text
    return str(int(number)) if number.is_integer() else repr(number)


def segments(
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    response_mask: Sequence[int],
    token_level_scores: Sequence[float],
    decode: Decode,
) -> tuple[list[dict[str, Any]], list[float]]:
    """Split an episode into decoded prompt / model / env runs.

    Args:
        prompt_ids: the prompt tokens.
        response_ids: model and env tokens after the prompt.
        response_mask: 1 on model tokens, 0 on env tokens (aligned with ``response_ids``).
        token_level_scores: rewards on tokens (aligned with ``response_ids``).
        decode: token ids -> text (special tokens kept, so the chat template shows).

    Returns:
        ``(segments, turn_rewards)``: the runs in order (each model run carries the sum of its
        tokens' scores as ``reward``; prompt and env runs carry None), and the model runs'
        rewards, one per turn.
    """
    out: list[dict[str, Any]] = [{"kind": "prompt", "text": decode(prompt_ids), "reward": None}]
    turn_rewards: list[float] = []
    start = 0
    n = len(response_ids)
    while start < n:
        kind = response_mask[start]
        end = start
        while end < n and response_mask[end] == kind:
            end += 1
        reward = None
        if kind == 1:
            reward = float(sum(token_level_scores[start:end]))
            turn_rewards.append(reward)
        out.append(
            {
                "kind": "model" if kind == 1 else "env",
                "text": decode(response_ids[start:end]),
                "reward": reward,
            }
        )
        start = end
    return out, turn_rewards


def _jsonable(value: Any) -> Any:
    """``value`` made JSON-serialisable (unknown objects become their ``repr``)."""
    return json.loads(json.dumps(value, default=repr))


def episode_record(
    traj: Trajectory, *, model: str, env: str, sample: int, decode: Decode
) -> dict[str, Any]:
    """The episodes.jsonl record of one trajectory (fields in the module docstring).

    Args:
        traj: the episode as the runner returned it (its ``outcome`` and
            ``metadata["messages"]``).
        model: the checkpoint label.
        env: the suite entry key the episode belongs to.
        sample: the sample index within its task.
        decode: token ids -> text, used for ``segments``.

    Returns:
        The record (JSON-serialisable).
    """
    outcome = traj.outcome
    verdict = outcome.verdict
    reward = traj.reward
    score = verdict.score if verdict is not None else min(max(reward, 0.0), 1.0)
    segs, turn_rewards = segments(
        traj.prompt_ids, traj.response_ids, traj.response_mask, traj.token_level_scores, decode
    )
    return _jsonable(
        {
            "model": model,
            "env": env,
            "env_id": traj.env_id,
            "task_id": str(traj.task_id),
            "sample": sample,
            "group_id": str(traj.group_id),
            "reward": reward,
            "score": float(score),
            "passed": traj.passed,
            "verdict_reason": verdict.reason if verdict is not None else None,
            "answer": normalize_answer(outcome.answer),
            "gold": outcome.gold,
            "finish_reason": traj.finish_reason,
            "turns": outcome.turns,
            "tool_calls": outcome.tool_calls,
            "tool_call_errors": outcome.tool_errors,
            "error": outcome.error,
            "model_tokens": int(sum(traj.response_mask)),
            "messages": traj.metadata.get("messages", []),
            "task_metadata": traj.metadata.get("task"),
            "prompt_ids": traj.prompt_ids,
            "response_ids": traj.response_ids,
            "response_mask": traj.response_mask,
            "token_level_scores": traj.token_level_scores,
            "turn_rewards": turn_rewards,
            "segments": segs,
        }
    )


def write_episodes(records: Iterable[Mapping[str, Any]], path: str | Path) -> Path:
    """Write records to ``path`` as JSON lines (one record per line, keys in record order)."""
    target = Path(path)
    with target.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return target


def read_episodes(path: str | Path) -> list[dict[str, Any]]:
    """Read the records back from an episodes.jsonl file."""
    with Path(path).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
