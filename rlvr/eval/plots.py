"""PNG bar charts comparing checkpoints: one chart per env (and one for overall).

Each chart groups the rate metrics (mean reward, pass@1, pass@k, mean@k, maj@k) along the x axis
with one bar per checkpoint. A suite of one env gets no ``overall`` chart (it would repeat the
env's). Drawn with matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlvr.eval.metrics import OVERALL

__all__ = ["plot_metrics", "slug", "write_plots"]


def slug(name: str) -> str:
    """A file-name-safe version of an env key (``rlvr/Math-v0`` -> ``rlvr_Math-v0``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "env"


def plot_metrics(samples: int) -> list[str]:
    """The metric names drawn in each chart, in order (pass@k only when samples > 1)."""
    names = ["mean_reward", "pass@1"]
    if samples > 1:
        names += [f"pass@{samples}", f"mean@{samples}"]
    return names + [f"maj@{samples}"]


def _draw(
    path: Path, title: str, labels: list[str], series: list[dict[str, Any]], names: list[str]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = 0.8 / max(len(labels), 1)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(names) + 1.0), 3.6), dpi=100)
    try:
        for i, (label, metrics) in enumerate(zip(labels, series)):
            xs = [j + (i - (len(labels) - 1) / 2) * width for j in range(len(names))]
            ys = [float(metrics.get(n) or 0.0) for n in names]
            bars = ax.bar(xs, ys, width=width, label=label)
            for bar, name in zip(bars, names):
                value = metrics.get(name)
                text = "n/a" if value is None else f"{float(value):.2f}"
                ax.annotate(
                    text,
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names)
        top = max([1.0] + [float(m.get(n) or 0.0) for m in series for n in names])
        ax.set_ylim(0.0, top * 1.15)
        ax.set_ylabel("share of tasks, or mean score")
        ax.set_title(title)
        ax.legend(
            fontsize=8,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.1),
            ncol=min(len(labels), 4),
            frameon=False,
        )
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def write_plots(results: Mapping[str, Any], out_dir: str | Path) -> dict[str, str]:
    """Write one PNG per env plus ``overall`` (with two envs or more) under ``out_dir/plots``.

    Args:
        results: the results dict (``config.samples``, ``envs``, ``models`` with ``label`` and
            ``metrics``; see ``rlvr.eval.report``).
        out_dir: the evaluation output directory.

    Returns:
        ``{env key: path relative to out_dir}`` for every chart written.
    """
    folder = Path(out_dir) / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    samples = int(results["config"]["samples"])
    names = plot_metrics(samples)
    labels = [m["label"] for m in results["models"]]
    written: dict[str, str] = {}
    envs = list(results["envs"])
    for env in envs + ([OVERALL] if len(envs) > 1 else []):
        series = [m["metrics"][env] for m in results["models"]]
        relative = f"plots/{slug(env)}.png"
        _draw(Path(out_dir) / relative, env, labels, series, names)
        written[env] = relative
    return written
