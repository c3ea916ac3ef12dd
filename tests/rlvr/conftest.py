"""Tests of the ``rlvr`` package, laid out as the package is (``algorithms/``, ``config/``,
``eval/``, ``learner/``, ``tracking/``, ``training/``; the trainer, CLI and end-to-end runs at the
top). This file puts ``tests/rlvr`` on ``sys.path`` (pytest's default import mode adds a conftest's
folder), so a test in any subfolder imports the shared helpers here (``trainer_helpers``,
``strategies``, ``tmpfs``) by name."""
