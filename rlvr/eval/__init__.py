"""Evaluation helpers: pass@k estimators, metrics, report.md, plots, episodes.jsonl and html.

These are pure functions over plain records and the results dict; ``rlvr.evaluate`` wires them
to engines, agents and envs.
"""

from rlvr.eval.passk import maj_at_k, majority_answer, mean_at_k, pass_at_k, pass_at_k_curve

__all__ = ["maj_at_k", "majority_answer", "mean_at_k", "pass_at_k", "pass_at_k_curve"]
