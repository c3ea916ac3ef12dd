"""The tables rlvr sends to its loggers: a sample of held-out episodes, an eval's pass@k table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlvr.tracking.base import Table

__all__ = ["episode_table", "passk_table"]


def episode_table(records: Sequence[Mapping[str, Any]], limit: int) -> Table:
    """The first ``limit`` held-out episodes as a table: prompt, response, reward, verdict.

    Args:
        records: episodes.jsonl records (``rlvr.eval.episodes.episode_record``).
        limit: rows kept (the same tasks at every evaluation: the records are in plan order).
    """
    rows = []
    for record in records[:limit]:
        messages = record.get("messages") or []
        prompt = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        response = next((m.get("content") for m in reversed(messages)
                         if m.get("role") == "assistant"), "")
        rows.append((str(record.get("env")), str(record.get("task_id")), str(prompt or ""),
                     str(response or ""), float(record.get("reward") or 0.0),
                     bool(record.get("passed")), str(record.get("verdict_reason")),
                     None if record.get("answer") is None else str(record.get("answer")),
                     None if record.get("gold") is None else str(record.get("gold"))))
    return Table(columns=("env", "task_id", "prompt", "response", "reward", "passed", "verdict",
                          "answer", "gold"), rows=tuple(rows))


def passk_table(results: Mapping[str, Any]) -> Table:
    """One row per (model, env) of ``rlvr.eval.evaluator.evaluate``'s results, a column per metric.

    The columns are the numeric metrics the results hold (pass@k, mean@k, maj@k, mean reward,
    ...), in the order of their first appearance; a metric a row lacks is None.
    """
    names: list[str] = []
    cells: list[tuple[str, str, Mapping[str, Any]]] = []
    for model in results.get("models", []):
        for env, metrics in model.get("metrics", {}).items():
            cells.append((str(model.get("label")), str(env), metrics))
            for name, value in metrics.items():
                if isinstance(value, int | float) and not isinstance(value, bool) \
                        and name not in names:
                    names.append(name)
    rows = tuple((label, env, *(_number(metrics.get(n)) for n in names))
                 for label, env, metrics in cells)
    return Table(columns=("model", "env", *names), rows=rows)


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None
