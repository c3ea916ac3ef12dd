"""Aggregate episode records into per-env and overall evaluation metrics.

An episode record is the flat dict ``rlvr.eval.episodes`` writes (one line of episodes.jsonl);
the fields read here are ``env``, ``task_id``, ``reward``, ``score``, ``passed``, ``answer``,
``turns``, ``tool_calls``, ``tool_call_errors`` (read as ``rlvr.tool_metrics.ToolUse``),
``model_tokens``, ``finish_reason`` and ``verdict_reason``. Tasks are keyed by
``(env, task_id)``; "overall" pools every task of every env (a micro-average over tasks, so an
env with more tasks weighs more).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rlvr.errors import ConfigError
from rlvr.eval.passk import maj_at_k, mean_at_k, pass_at_k_curve
from rlvr.tool_metrics import ToolUse, tool_counts, tool_rates

__all__ = [
    "OVERALL",
    "TRUNCATION_REASONS",
    "aggregate",
    "group_by_task",
    "metric_names",
    "summarize",
]

#: The key of the pooled metrics next to the per-env ones.
OVERALL = "overall"
#: Episode finish reasons that mean a limit cut the episode short.
TRUNCATION_REASONS = ("length", "max_turns", "truncated")

Record = Mapping[str, Any]


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def _timed_out(record: Record) -> bool:
    """The verifier timed out (e.g. a sandboxed program) or an env call hit the runner's limit."""
    error = str(record.get("error") or "")
    return (
        record.get("verdict_reason") == "timeout"
        or record["finish_reason"] == "timeout"
        or error.startswith("TimeoutError")
    )


def group_by_task(records: Iterable[Record]) -> dict[tuple[str, str], list[Record]]:
    """Group records by ``(env, task_id)``, keeping each task's samples in ``sample`` order."""
    tasks: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        tasks.setdefault((str(record["env"]), str(record["task_id"])), []).append(record)
    for samples in tasks.values():
        samples.sort(key=lambda r: int(r.get("sample", 0)))
    return tasks


def summarize(records: Sequence[Record], samples: int) -> dict[str, Any]:
    """The metrics of one set of episodes (one env, or all of them).

    Args:
        records: episode records (see the module docstring); may be empty.
        samples: samples drawn per task (``k`` of pass@k, mean@k and maj@k).

    Returns:
        A JSON-ready dict: ``episodes``, ``tasks``, ``samples``, ``mean_reward``, ``pass@1`` ..
        ``pass@{samples}`` (unbiased; a task with fewer samples caps k), ``mean@{samples}``
        (mean verdict score), ``maj@{samples}`` (None when no episode has an extracted answer),
        ``mean_turns``, the tool metrics of ``rlvr.tool_metrics.tool_rates`` as training logs
        them (``tool/calls_per_episode``, ``tool/valid_call_rate``, ...; a rate with nothing
        to count is None; absent when no env checked tool calls and none was made),
        ``mean_response_tokens`` (model tokens per episode),
        ``finish_reasons`` (counts), ``errors`` (finish reason "error"), ``timeouts`` (verdict
        reason "timeout", or an env call that hit the runner's time limit) and ``truncated``
        (finish reasons in ``TRUNCATION_REASONS``).

    Raises:
        ConfigError: ``samples`` < 1.
    """
    if samples < 1:
        raise ConfigError(f"samples must be >= 1; got {samples}")
    tasks = list(group_by_task(records).values())
    counts = [(len(t), sum(bool(r["passed"]) for r in t)) for t in tasks]
    max_k = min([samples] + [n for n, _ in counts])
    curve = pass_at_k_curve(counts, max_k) if counts else {}
    out: dict[str, Any] = {
        "episodes": len(records),
        "tasks": len(tasks),
        "samples": samples,
        "mean_reward": _mean([float(r["reward"]) for r in records]),
    }
    for k in range(1, samples + 1):
        out[f"pass@{k}"] = curve.get(k, 0.0 if not counts else None)
    out[f"mean@{samples}"] = mean_at_k([[float(r["score"]) for r in t] for t in tasks])
    has_answers = any(r.get("answer") is not None for r in records)
    out[f"maj@{samples}"] = (
        maj_at_k([([r.get("answer") for r in t], [bool(r["passed"]) for r in t]) for t in tasks])
        if has_answers
        else None
    )
    reasons = Counter(str(r["finish_reason"]) for r in records)
    tools = tool_rates(tool_counts(ToolUse.of_record(r) for r in records))
    out.update(
        {
            "mean_turns": _mean([float(r.get("turns", 0)) for r in records]),
            **{name: None if math.isnan(v) else v for name, v in tools.items()},
            "mean_response_tokens": _mean([float(r.get("model_tokens", 0)) for r in records]),
            "finish_reasons": dict(sorted(reasons.items())),
            "errors": reasons.get("error", 0),
            "timeouts": sum(_timed_out(r) for r in records),
            "truncated": sum(reasons.get(name, 0) for name in TRUNCATION_REASONS),
        }
    )
    return out


def aggregate(
    records: Sequence[Record], samples: int, envs: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Per-env metrics plus the pooled ``"overall"`` entry.

    Args:
        records: every episode record of one checkpoint.
        samples: samples drawn per task.
        envs: the env keys to report, in order (an env without records gets zero counts);
            defaults to the envs present, in order of first appearance.

    Returns:
        ``{env: summarize(...), ..., "overall": summarize(all records)}``; the overall maj@k
        pools only the envs whose answers can be compared (those with a maj@k).
    """
    order = list(envs) if envs is not None else list(dict.fromkeys(r["env"] for r in records))
    out = {env: summarize([r for r in records if r["env"] == env], samples) for env in order}
    out[OVERALL] = summarize(records, samples)
    maj = f"maj@{samples}"
    comparable = {env for env in order if out[env][maj] is not None}
    if comparable and len(comparable) < len(order):
        pooled = summarize([r for r in records if r["env"] in comparable], samples)
        out[OVERALL][maj] = pooled[maj]
    return out


def metric_names(samples: int) -> list[str]:
    """The scalar metric names of ``summarize``, in report order."""
    return (
        ["mean_reward"]
        + [f"pass@{k}" for k in range(1, samples + 1)]
        + [
            f"mean@{samples}",
            f"maj@{samples}",
            "mean_turns",
            "tool/valid_call_rate",
            "mean_response_tokens",
            "errors",
            "timeouts",
            "truncated",
            "episodes",
        ]
    )
