"""The pieces of ``rlvr train`` around the loop in ``rlvr.trainer``.

- ``stream``: stage A, this rank's groups of episodes per step (seeded per step and group), and
  the gathers that let stage B see the whole step's batch on every rank;
- ``state``: the trainer's checkpointed state, periodic checkpoints and resume, stage timing;
- ``warmup``: the env check, the held-out evaluation and the supervised warm-up before RL.
"""
