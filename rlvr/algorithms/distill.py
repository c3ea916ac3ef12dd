"""On-policy distillation's signal: the per-token reverse KL to a frozen teacher.

The student samples; the teacher scores each sampled token; a token's reward is
``teacher_logprob - student_logprob``, minus a one-sample estimate of the reverse KL
``KL(student || teacher)`` at that position (Agarwal et al. 2024, GKD, https://arxiv.org/abs/
2306.13649; Lu & Thinking Machines 2025, "On-Policy Distillation",
https://thinkingmachines.ai/blog/on-policy-distillation/). It is dense (one value per token) and
needs no critic.

How it enters the update (``distill_advantages``): the reward of a token is that token's own
advantage (discount 0: a token is charged for its own divergence, not for the later ones), as in
the Thinking Machines recipe; the verifier's reward, when mixed in, goes through the configured
advantage estimator as usual and is added scaled by ``verifier_coef``::

    A_t = coef * (teacher_logp_t - student_logp_t) + verifier_coef * A_t(estimator)

Deviations, on purpose:

- The student's logprobs are the rollout engine's (the sampling distribution, at the rollout's
  temperature); the teacher is scored at the same temperature. The sync guard keeps the engine
  within ``rollout.max_logprob_diff`` of the learner.
- The teacher must share the student's tokenizer (checked at start): the token ids are scored
  as they are, never re-tokenised.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.masked import check_same_shape, masked

__all__ = ["distill_advantages"]


def distill_advantages(
    teacher_logprobs: torch.Tensor,
    student_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    coef: float = 1.0,
    verifier_coef: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The distillation advantages and the per-token reverse KL.

    Args:
        teacher_logprobs: ``(B, R)`` the teacher's logprobs of the sampled tokens.
        student_logprobs: ``(B, R)`` the student's (sampling) logprobs of the same tokens.
        advantages: ``(B, R)`` the estimator's advantages of the verifier's reward.
        response_mask: ``(B, R)``, 1 on tokens the student generated.
        coef: the weight of the reverse-KL reward.
        verifier_coef: the weight of ``advantages``.

    Returns:
        ``(advantages, reverse_kl)``, both ``(B, R)``, detached, 0 where the mask is 0:
        ``coef * (teacher - student) + verifier_coef * advantages`` and ``student - teacher``
        (the one-sample reverse-KL estimate of each token).
    """
    check_same_shape(teacher_logprobs=teacher_logprobs, student_logprobs=student_logprobs,
                     advantages=advantages, response_mask=response_mask)
    with torch.no_grad():
        teacher, student, adv = (masked(t, response_mask)
                                 for t in (teacher_logprobs, student_logprobs, advantages))
        reverse_kl = student - teacher
        combined = -coef * reverse_kl
        if verifier_coef:
            combined = combined + verifier_coef * adv
        return masked(combined, response_mask), masked(reverse_kl, response_mask)
