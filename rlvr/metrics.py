"""Training metrics: the run's loggers, a progress bar, a PNG at the end.

Only rank 0 logs (one tracked run however many ranks). Every step's metrics go to the loggers
of ``trainer.loggers`` (``rlvr.tracking``): always ``metrics.jsonl`` (``{"step": int, "<name>":
float, ...}`` per logged step; on resume the lines of steps after the checkpoint are dropped
first), by default TensorBoard events (``tensorboard/``), and MLflow, W&B or a plugin's logger
when listed. A logger other than JSONL that fails is reported once and disabled; training goes
on and ``failed`` says which and why. ``curves.png``: reward, accuracy and (in runs that call
tools) the tool-call share and validity against step, drawn by ``close()``: only metrics logged
at more than one step, with held-out accuracy before and after RL in the title.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr.distributed import all_reduce_sums, gather_objects
from rlvr.tracking import LoggerSet, RunInfo, Table, build_logger
from rlvr.tracking.jsonl import read_jsonl
from rlvr.trajectory import Trajectory

__all__ = ["MetricsLogger", "env_metrics", "plot_curves", "plotted_panels", "read_jsonl",
           "rollout_metrics"]

#: Metrics shown in the progress bar's postfix, with their short labels.
PROGRESS_KEYS = {
    "reward/mean": "reward",
    "reward/accuracy": "acc",
    "eval/accuracy": "eval_acc",
    "time/step": "s/step",
}
#: Curves drawn in curves.png, one panel each: (metric, title, y-axis label, tool panel).
PLOT_PANELS = (
    ("reward/mean", "train reward (mean)", "mean reward per episode", False),
    ("reward/accuracy", "train accuracy", "share of episodes passed", False),
    ("eval/accuracy", "held-out greedy accuracy", "share of tasks passed", False),
    ("tool/episodes_with_call", "train tool-call share", "share of episodes with a call", True),
    ("eval/heldout/tool/episodes_with_call", "held-out greedy tool-call share",
     "share of episodes with a call", True),
    ("tool/valid_call_rate", "train tool-call validity", "share of calls well-formed", True),
    ("eval/heldout/tool/valid_call_rate", "held-out tool-call validity",
     "share of calls well-formed", True),
    ("distill/reverse_kl", "per-token reverse KL to the teacher", "nats per token", False),
)


def plotted_panels(records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The panels of ``PLOT_PANELS`` that fit this run: (metric, title, y-axis label).

    A panel is drawn when its metric was logged at more than one step (a single point is no
    curve). A tool panel also needs a nonzero value: a run on an env without tools logs its
    held-out tool-call share as 0 at every evaluation, which says nothing. Where the mean reward
    equals the accuracy at every step (a 0/1 reward), one panel shows both.
    """
    panels = []
    for key, title, ylabel, tool in PLOT_PANELS:
        values = [r[key] for r in records if r.get(key) is not None]
        if len(values) > 1 and (not tool or any(values)):
            panels.append((key, title, ylabel))
    keys = [key for key, _, _ in panels]
    if "reward/mean" in keys and "reward/accuracy" in keys and all(
            r.get("reward/mean") == r.get("reward/accuracy") for r in records):
        panels = [p for p in panels if p[0] != "reward/mean"]
        panels = [(k, "train accuracy (= mean reward)", y) if k == "reward/accuracy" else (k, t, y)
                  for k, t, y in panels]
    return panels


def heldout_summary(records: list[dict[str, Any]]) -> str | None:
    """``held-out greedy accuracy 25.0% -> 41.5% (+16.5 points)``: first and last evaluation."""
    points = [(r["step"], r["eval/accuracy"]) for r in records
              if r.get("eval/accuracy") is not None]
    if len(points) < 2:
        return None
    (first_step, first), (last_step, last) = points[0], points[-1]
    return (f"held-out greedy accuracy {100 * first:.1f}% at step {first_step} -> "
            f"{100 * last:.1f}% at step {last_step} ({100 * (last - first):+.1f} points)")


def plot_curves(records: list[dict[str, Any]], path: str | Path) -> Path | None:
    """Draw the run's curves against step into a PNG (matplotlib Agg backend).

    Only the panels that fit the run are drawn (``plotted_panels``); the figure's title gives
    held-out accuracy before and after RL when it was measured twice or more.

    Args:
        records: metric records, each with a ``step``.
        path: the PNG to write.

    Returns:
        ``path``, or None when no plotted metric was logged at more than one step.
    """
    panels = plotted_panels(records)
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.7), squeeze=False)
    for ax, (key, title, ylabel) in zip(axes[0], panels):
        points = [(r["step"], r[key]) for r in records if key in r and r[key] is not None]
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3)
        if 0.0 <= min(ys) and max(ys) <= 1.0:  # a rate: on its whole scale, not zoomed in
            ax.set_ylim(-0.03, 1.03)
        ax.set_title(title)
        ax.set_xlabel("RL step (0 = before RL)" if key.startswith("eval/") else "RL step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    summary = heldout_summary(records)
    if summary:
        fig.suptitle(summary)
    fig.tight_layout()
    tmp = Path(path).with_name(f".{Path(path).name}.tmp")
    try:  # a full disk leaves no half-written (or 0-byte) picture
        fig.savefig(tmp, dpi=110, format="png")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        plt.close(fig)
    return Path(path)


class MetricsLogger:
    """Sends per-step metrics to the run's loggers and drives the progress bar.

    Args:
        output_dir: the run directory.
        total_steps: the number of steps of the run (for the progress bar).
        start_step: the step the run (re)starts after; JSONL lines beyond it are dropped.
        enabled: False on ranks other than 0: every method is then a no-op.
        tensorboard: with ``loggers`` None: JSONL and TensorBoard (True) or JSONL only.
        progress: show a tqdm progress bar.
        plot: write ``curves.png`` in ``close()``.
        loggers: the loggers' names (``rlvr.tracking.LOGGERS``); ``jsonl`` is always added.
        run: what the loggers record (name, config, resume); default: the folder, no config.
        report: where a failing logger's one-line report goes.
    """

    def __init__(
        self,
        output_dir: str | Path,
        *,
        total_steps: int,
        start_step: int = 0,
        enabled: bool = True,
        tensorboard: bool = True,
        progress: bool = True,
        plot: bool = True,
        loggers: Sequence[str] | None = None,
        run: RunInfo | None = None,
        report: Callable[[str], Any] | None = None,
    ) -> None:
        self.output_dir = Path(output_dir)
        self.jsonl_path = self.output_dir / "metrics.jsonl"
        self.tensorboard_dir = self.output_dir / "tensorboard"
        self.png_path = self.output_dir / "curves.png"
        self.enabled = enabled
        self.closed = False
        self._plot = plot
        self._bar: Any = None
        self._last: dict[str, float] = {}
        if loggers is None:
            loggers = ("jsonl", "tensorboard") if tensorboard else ("jsonl",)
        self.names = list(dict.fromkeys(["jsonl", *loggers]))
        self.loggers = LoggerSet({}, report=report or self.write, strict=("jsonl",))
        if not enabled:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        run = run or RunInfo(run_dir=self.output_dir, name=self.output_dir.resolve().name)
        run = RunInfo(run_dir=self.output_dir, name=run.name, config=run.config, kind=run.kind,
                      resume=run.resume, start_step=start_step)
        for name in self.names:
            if name == "jsonl":
                self.loggers.loggers[name] = build_logger(name, run)
                continue
            try:
                self.loggers.loggers[name] = build_logger(name, run)
            except Exception as err:  # noqa: BLE001 - a tracker that cannot start is disabled
                self.loggers.fail(name, "starting", err)
        if progress:
            from rlvr.progress import progress_bar

            self._bar = progress_bar(total=total_steps, initial=start_step, desc="rl", unit="step")
        self._t0 = time.perf_counter()

    @property
    def failed(self) -> dict[str, str]:
        """Loggers that failed and were disabled: name -> what they were doing and the error."""
        return dict(self.loggers.failed)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record ``metrics`` of ``step`` (non-finite values are written as null)."""
        if not self.enabled:
            return
        clean = {k: (float(v) if math.isfinite(float(v)) else None) for k, v in metrics.items()}
        self.loggers.log_metrics(step, clean)
        self._last.update({k: v for k, v in clean.items() if v is not None})
        if self._bar is not None:
            self._bar.n = step
            self._bar.set_postfix(
                {short: f"{self._last[k]:.3g}" for k, short in PROGRESS_KEYS.items()
                 if k in self._last},
                refresh=False,
            )
            self._bar.update(0)  # redraw, at most every mininterval (rlvr.progress)

    def log_table(self, step: int, name: str, table: Table) -> None:
        """Give ``table`` to the loggers that keep tables (MLflow, W&B)."""
        if self.enabled:
            self.loggers.log_table(step, name, table)

    def write(self, message: str) -> None:
        """Print a line without breaking the progress bar."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(message)
        else:
            print(message, flush=True)

    def close(self, artifacts: Mapping[str, Path | None] | None = None,
              summary: Mapping[str, float] | None = None, *, failed: bool = False) -> Path | None:
        """Draw ``curves.png``, give it and ``artifacts`` to the loggers, close them and the bar.

        Args:
            artifacts: name -> file or folder for the loggers to keep (None entries skipped).
            summary: the run's final numbers (W&B's summary).
            failed: the run raised (MLflow marks its run FAILED).

        Returns:
            The PNG path, or None when nothing was plotted (or on ranks other than 0).
        """
        if not self.enabled or self.closed:
            return None
        self.closed = True
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        png = None
        try:
            if self._plot:
                self.loggers.loggers["jsonl"].close({})  # flushed before it is read back
                png = plot_curves(read_jsonl(self.jsonl_path), self.png_path)
            for name, path in {"curves": png, **(artifacts or {})}.items():
                self.loggers.log_artifact(path, name)
        finally:
            self.loggers.close(summary or {}, failed=failed)
        return png


def rollout_metrics(trajs: Sequence[Trajectory], device: torch.device) -> dict[str, float]:
    """Reward mean/std, accuracy, response length, turns and finish reasons over all ranks.

    ``gateway/prefix_breaks`` sums the episodes' ``metadata["gateway_prefix_breaks"]``: calls of
    gateway agents whose prompt did not extend an earlier call (``rlvr.agents.gateway.capture``).

    ``reward/accuracy`` is the share of ``Trajectory.passed`` episodes (what eval's pass@1 counts).

    ``env/<name>`` is the mean of the env's own measurement ``name`` (``EpisodeOutcome.metrics``,
    e.g. a verifiers taskset's rubric rewards and metrics) over the episodes that reported it,
    leaving out those that ended in an error or a timeout.
    """
    rewards = [t.reward for t in trajs]
    lengths = [float(sum(t.response_mask)) for t in trajs]
    turns = [float(t.outcome.turns) for t in trajs]
    sums = all_reduce_sums([
        len(trajs), sum(rewards), sum(r * r for r in rewards), sum(t.passed for t in trajs),
        sum(lengths), sum(turns), sum(t.finish_reason == "length" for t in trajs),
        sum(t.finish_reason == "error" for t in trajs),
        sum(t.finish_reason == "timeout" for t in trajs),
        sum(t.metadata.get("gateway_prefix_breaks", 0) for t in trajs),
    ], device)
    n = max(sums[0], 1.0)
    mean = sums[1] / n
    var = max(sums[2] / n - mean * mean, 0.0) * (n / (n - 1) if n > 1 else 1.0)
    return {
        **env_metrics(trajs, device),
        "reward/mean": mean, "reward/std": var**0.5, "reward/accuracy": sums[3] / n,
        "response/length_mean": sums[4] / n, "response/turns_mean": sums[5] / n,
        "response/clip_ratio": sums[6] / n, "response/error_ratio": sums[7] / n,
        "response/timeout_ratio": sums[8] / n,
        "perf/rollout_tokens": sums[4],
        "gateway/prefix_breaks": sums[9],
    }


def env_metrics(trajs: Sequence[Trajectory], device: torch.device) -> dict[str, float]:
    """``env/<name>``: the mean of each env measurement over the episodes (all ranks) that gave it.

    Every rank reduces the same names (the union of all ranks' names, sorted), so ranks whose
    episodes measured different things still meet in one reduce.
    """
    played = [t for t in trajs if t.finish_reason not in ("error", "timeout")]
    local = sorted({name for t in played for name in t.outcome.metrics})
    names = sorted(set(gather_objects(local)))
    if not names:
        return {}
    sums = all_reduce_sums([sum(t.outcome.metrics.get(k, 0.0) for t in played) for k in names]
                           + [sum(k in t.outcome.metrics for t in played) for k in names], device)
    return {f"env/{k}": sums[i] / sums[len(names) + i]
            for i, k in enumerate(names) if sums[len(names) + i] > 0}
