"""Play the planned evaluation episodes on an engine (the one part of rlvr.eval wired to agents).

Episodes run concurrently on one asyncio loop, each as its own ``EpisodeRunner.arun`` call
seeded with the episode's planned seed, so the engine batches them while every episode's
sampling depends only on its own seed (not on its position in a batch). A tqdm bar advances as
episodes finish.

The final answer for maj@k is ``Trajectory.outcome.answer``, which the runner fills.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from rlvr.eval.episodes import episode_record
from rlvr.eval.plan import PlannedEpisode
from rlvr.trajectory import Trajectory

__all__ = ["play"]


def _spec(p: PlannedEpisode) -> Any:
    from rlvr.agents.runner import EpisodeSpec

    def factory() -> Any:
        from rlvr import envs

        return envs.make(p.entry.env_id, **p.entry.kwargs)

    return EpisodeSpec(
        env_factory=factory,
        seed=p.seed,
        options={"task_index": p.task_index},
        group_id=f"{p.entry.key}/{p.task_index}",
    )


async def _play_all(
    runner: Any, planned: Sequence[PlannedEpisode], bar: Any, concurrency: int
) -> list[Trajectory]:
    gate = asyncio.Semaphore(concurrency)

    async def one(p: PlannedEpisode) -> Trajectory:
        async with gate:
            [traj] = await runner.arun([_spec(p)], seed=p.seed)
        bar.update(1)
        return traj

    return list(await asyncio.gather(*(one(p) for p in planned)))


def play(
    runner: Any,
    tokenizer: Any,
    planned: Sequence[PlannedEpisode],
    *,
    label: str,
    concurrency: int = 64,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Play every planned episode and return their episodes.jsonl records, in plan order.

    Args:
        runner: an ``rlvr.agents.EpisodeRunner`` (``rlvr.eval.evaluator.Evaluator`` keeps one).
        tokenizer: decodes tokens for the records' text segments (special tokens kept).
        planned: the episodes (``rlvr.eval.plan.plan_episodes``).
        label: the checkpoint label written into each record (and shown on the bar).
        concurrency: episodes in flight at once.
        progress: show a tqdm progress bar (stderr).

    Returns:
        One record per planned episode (``rlvr.eval.episodes.episode_record``).
    """
    from rlvr.progress import progress_bar

    def decode(ids: Sequence[int]) -> str:
        return str(tokenizer.decode(list(ids), skip_special_tokens=False))

    with progress_bar(total=len(planned), desc=f"eval {label}", unit="ep",
                      disable=not progress) as bar:
        trajectories = runner.run_coroutine(_play_all(runner, planned, bar, concurrency))
    records = []
    for p, traj in zip(planned, trajectories, strict=True):
        traj.env_id = p.entry.env_id
        records.append(
            episode_record(traj, model=label, env=p.entry.key, sample=p.sample, decode=decode)
        )
    return records
