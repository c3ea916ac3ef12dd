"""On-policy distillation learns: a fresh student moves toward its teacher, step after step.

The teacher is the quickstart's tiny model after a short supervised warm-up on the task format
(``TEACHER_SFT_STEPS`` steps: it answers with digits and stops, which the fresh model does not);
the student is the fresh model. ``DISTILL_STEPS`` steps of pure distillation (no verifier
reward) must cut the per-token reverse KL to the teacher (``distill/reverse_kl``, on the
student's own samples) to at most ``MAX_KL_RATIO`` of its value in the first steps, and raise
the teacher's logprob of the student's tokens.

Thresholds from seeds 0, 1, 2 (``bench/distill_seeds.py``, 2026-12-03, 2-core VM):
the ratio was 0.09, 0.07, 0.10 (last 5 steps over first 5); the test asks for 0.4.
"""

from __future__ import annotations

import pytest
from distill_budget import MAX_KL_RATIO, distill_run


@pytest.mark.timeout(300)
def test_distillation_pulls_the_student_to_the_teacher(tmp_path):
    r = distill_run(tmp_path, seed=0)
    assert r["kl_first"] > 0.5  # the fresh student is far from the warmed-up teacher
    assert r["kl_last"] <= MAX_KL_RATIO * r["kl_first"], r
    assert r["teacher_lp_last"] > r["teacher_lp_first"], r
