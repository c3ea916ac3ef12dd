"""The pieces of ``rlvr train`` around the loop in ``rlvr.trainer``.

- ``preflight``: every pre-run check, once, and the ``RunPlan`` the trainer builds from;
- ``rollout_source``: where a step's episodes come from (one protocol; ``SyncRollout`` here,
  ``async_source.AsyncSource`` over the producer of ``async_rollout``), chosen once per run;
- ``stream``: stage A, this rank's groups of episodes per step (seeded per step and group), and
  the gathers that let stage B see the whole step's batch on every rank;
- ``state``: the trainer's checkpointed state, periodic checkpoints and resume, stage timing;
- ``warmup``: the supervised warm-up before RL, scored by held-out evaluation.
"""
