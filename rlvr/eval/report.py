"""report.md: the evaluation as tables a person reads, checkpoints side by side with deltas.

Input is the ``results`` dict that ``rlvr.eval.evaluator`` writes to results.json: ``config``,
``envs`` (env keys in suite order) and ``models``, a list of ``{"label", "path", "metrics"}``
where ``metrics`` maps each env key and ``"overall"`` to the dict of
``rlvr.eval.metrics.summarize``. Every delta is "this checkpoint minus the first one".

The report shows what the run measured: a metric that is n/a for every checkpoint (maj@k without
comparable answers, tool-call validity without tool calls) is named once under its env's table
instead of filling a row, and a suite of one env gets no ``overall`` section or row (it would
repeat the env's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.eval.metrics import OVERALL, metric_names

__all__ = ["format_delta", "format_value", "render_report", "summary_table", "write_report"]

Results = Mapping[str, Any]


def format_value(value: Any) -> str:
    """A metric as table text: floats with 3 decimals, ints as is, None as ``n/a``."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def format_delta(value: Any, base: Any) -> str:
    """``value - base`` with an explicit sign (``+0.050``, ``-2``, ``0``); ``n/a`` if missing."""
    if value is None or base is None or isinstance(value, bool) or isinstance(base, bool):
        return "n/a"
    if not isinstance(value, int | float) or not isinstance(base, int | float):
        return "n/a"
    diff = value - base
    if isinstance(value, int) and isinstance(base, int):
        return f"{diff:+d}" if diff else "0"
    return f"{diff:+.3f}" if abs(diff) >= 5e-4 else "0.000"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _columns(labels: Sequence[str]) -> list[str]:
    """Column headers: every checkpoint, then a delta column for each but the first."""
    return list(labels) + [f"Δ {label}" for label in labels[1:]]


def _cells(values: Sequence[Any]) -> list[str]:
    return [format_value(v) for v in values] + [format_delta(v, values[0]) for v in values[1:]]


def _samples(results: Results) -> int:
    return int(results["config"]["samples"])


def _env_keys(results: Results) -> list[str]:
    """The envs that get a row and a section: ``overall`` only when the suite has several."""
    envs = list(results["envs"])
    return envs + [OVERALL] if len(envs) > 1 else envs


def summary_table(results: Results) -> str:
    """One row per env (then overall): pass@1 and pass@k of each checkpoint, with deltas.

    Args:
        results: the results dict (see the module docstring).

    Returns:
        A markdown table (also what ``rlvr eval`` prints to stdout at the end).
    """
    models = results["models"]
    labels = [m["label"] for m in models]
    samples = _samples(results)
    keys = ["pass@1"] + ([f"pass@{samples}"] if samples > 1 else [])
    header = ["env"]
    for key in keys:
        header += [f"{key} {c}" for c in _columns(labels)]
    rows = []
    for env in _env_keys(results):
        row = [env]
        for key in keys:
            row += _cells([m["metrics"][env].get(key) for m in models])
        rows.append(row)
    return _table(header, rows)


def _env_section(results: Results, env: str) -> str:
    models = results["models"]
    labels = [m["label"] for m in models]
    rows, unmeasured = [], []
    for name in metric_names(_samples(results)):
        values = [m["metrics"][env].get(name) for m in models]
        if all(v is None for v in values):
            unmeasured.append(name)
            continue
        rows.append([name] + _cells(values))
    reasons = sorted({r for m in models for r in m["metrics"][env]["finish_reasons"]})
    for reason in reasons:
        counts = [m["metrics"][env]["finish_reasons"].get(reason, 0) for m in models]
        rows.append([f"finish: {reason}"] + _cells(counts))
    tasks = models[0]["metrics"][env]["tasks"]
    title = f"## {env}" + (f" ({tasks} tasks)" if env != OVERALL else "")
    text = title + "\n\n" + _table(["metric"] + _columns(labels), rows)
    if unmeasured:
        text += f"\n\nNot measured here (n/a for every checkpoint): {', '.join(unmeasured)}."
    return text


def render_report(results: Results) -> str:
    """The whole report.md text: config, checkpoints, summary, then one table per env.

    Args:
        results: the results dict (see the module docstring).

    Returns:
        Markdown text.
    """
    config = results["config"]
    turns = config["max_turns"] if config["max_turns"] is not None else "the runner's default"
    lines = [
        f"# rlvr eval: suite `{config['suite']}`",
        "",
        (
            f"samples per task: {config['samples']} · temperature: {config['temperature']} · "
            f"max turns: {turns} · "
            f"seed: {config['seed']} · "
            f"engine: {config['engine']}"
        ),
        "",
        "Checkpoints (Δ columns are each checkpoint minus the first):"
        if len(results["models"]) > 1 else "Checkpoint:",
        "",
    ]
    lines += [f"- **{m['label']}**: `{m['path']}`" for m in results["models"]]
    lines += [
        "",
        "pass@k is the unbiased estimator of Chen et al. 2021; mean@k is the mean verdict score "
        "of the k samples; maj@k counts a task as solved when its majority answer passed "
        "(n/a where answers cannot be compared); tool/valid_call_rate is valid / all tool calls.",
        "",
        "## Summary",
        "",
        summary_table(results),
    ]
    for env in _env_keys(results):
        lines += ["", _env_section(results, env)]
    plots = results.get("plots") or {}
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{env}]({path})" for env, path in plots.items()]
    return "\n".join(lines) + "\n"


def write_report(results: Results, path: str | Path) -> Path:
    """Write ``render_report(results)`` to ``path`` and return it."""
    target = Path(path)
    target.write_text(render_report(results), encoding="utf-8")
    return target
