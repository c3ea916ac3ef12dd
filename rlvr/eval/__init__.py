"""Evaluation: ``rlvr eval`` and the trainer's held-out evaluation.

``evaluator`` wires engines, agents and envs (``evaluate``, ``Evaluator``, ``SuiteEvalConfig``);
the other modules are pure functions over plain records and the results dict: pass@k
estimators, metrics, report.md, plots, episodes.jsonl and html.
"""

from rlvr.eval.passk import maj_at_k, majority_answer, mean_at_k, pass_at_k, pass_at_k_curve

__all__ = ["maj_at_k", "majority_answer", "mean_at_k", "pass_at_k", "pass_at_k_curve"]
