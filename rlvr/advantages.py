"""Advantage estimators, one registry, one call signature (masked statistics: ``rlvr.masked``).

Every per-token tensor is ``(batch, response_len)`` and ``response_mask`` is 1 on tokens the
model generated (trained on), 0 on env/tool tokens and padding. The numbers follow verl 0.9.1
``core_algos`` (the project's reference/algorithms.md) to 1e-5 in float32; on 300 random batches
the largest difference from verl 0.9.1 itself was 3.3e-6 (grpo), 0 for gae and reinforce_pp:

- ``gae``: Generalized Advantage Estimation, https://arxiv.org/abs/1506.02438 (needs a critic).
- ``grpo``: group-relative outcome advantage of DeepSeekMath, https://arxiv.org/abs/2402.03300.
- ``drgrpo``: GRPO without the std division (Dr. GRPO), https://arxiv.org/abs/2503.20783.
- ``rloo``: REINFORCE leave-one-out, https://arxiv.org/abs/2402.14740.
- ``reinforce_pp`` / ``reinforce_pp_baseline``: REINFORCE++, https://arxiv.org/abs/2501.03262.

The trainer never branches on names: ``compute_advantages(name, rewards, mask, values=...,
group_ids=..., ...)`` calls the registered estimator, and ``get_estimator(name).needs_critic``
(or ``estimator_needs_critic(name)``) says whether a critic must produce ``values``.

Multi-turn masks: where ``response_mask`` is 0 *inside* a response (env tokens), GAE carries
``nextvalue`` and the running advantage through unchanged and REINFORCE++ carries its running
return through unchanged (no discounting across env tokens); rewards and values written on
masked tokens are ignored by these two. The outcome estimators (grpo, drgrpo, rloo,
reinforce_pp_baseline) score a response as the sum of ``token_level_rewards`` over all its
positions, as verl does (the collator writes 0 on padding).

Error rows: ``valid`` (``(B,)`` bool, ``RolloutBatch.valid``) is False on rows whose episode
ended in an env/sandbox error. ``compute_advantages`` zeroes their mask before any estimator
runs (so GAE's and REINFORCE++'s whitening never see them), the group estimators leave them out
of their group's size, mean and std, and their advantages and returns are 0. Example: scores
[1, 1, 1, error] give [0, 0, 0, 0] (three equal valid scores), not [0.5, 0.5, 0.5, -1.5] as a
wrong answer would. A group whose valid rows number one follows the group-of-one rule of each
estimator; a group with none gives 0.

Deviations from verl, on purpose:

- Whitening needs two valid tokens (``masked_var`` raises otherwise, as verl's does). The
  estimators that whiten (gae, reinforce_pp, reinforce_pp_baseline) instead return all-zero
  advantages when the batch has fewer than two valid tokens (nothing to normalise against; the
  batch then gives no policy gradient), where verl raises. GAE ``returns`` are unaffected.
- Group statistics are computed in float64 and vectorised (verl loops in Python, float32), so a
  group whose scores are all equal gets exactly 0, and row order never matters.
- Estimators run under ``torch.no_grad`` and return detached tensors.
- ``group_ids`` may be a list of any hashables, a numpy array or an integer tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from rlvr.errors import ConfigError, DuplicateNameError, ShapeError, unknown_name
from rlvr.masked import masked_whiten

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageEstimatorFn",
    "Estimator",
    "GroupIds",
    "compute_advantages",
    "compute_gae",
    "compute_grpo",
    "compute_reinforce_pp",
    "compute_reinforce_pp_baseline",
    "compute_rloo",
    "estimator_needs_critic",
    "get_estimator",
    "group_index",
    "register_estimator",
    "unregister_estimator",
]

#: Group ids of the rows: a list of hashables (one per row), a numpy array or an int tensor.
GroupIds = Sequence[Hashable] | np.ndarray | torch.Tensor

def _whiten_or_zero(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``masked_whiten``, but all zeros when fewer than two tokens are valid (see module doc)."""
    if float(mask.sum()) < 2:
        return torch.zeros_like(values)
    return masked_whiten(values, mask)


# ---------------------------------------------------------------------------- input checks
def _check_per_token(**tensors: torch.Tensor | None) -> None:
    """Raise ``ShapeError`` unless every given tensor is 2-D with the same shape."""
    shapes = {k: tuple(v.shape) for k, v in tensors.items() if v is not None}
    first_name, first = next(iter(shapes.items()))
    if len(first) != 2:
        raise ShapeError(f"{first_name} must be (batch, response_len); got shape {first}")
    for name, shape in shapes.items():
        if shape != first:
            raise ShapeError(f"{name} has shape {shape}; expected {first} like {first_name}")


def _valid_mask(response_mask: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """``response_mask`` with the rows whose ``valid`` is False zeroed (same dtype)."""
    if valid is None:
        return response_mask
    keep = _check_valid(valid, response_mask.shape[0]).to(response_mask.device)
    return response_mask * keep[:, None].to(response_mask.dtype)


def _check_unit_interval(**params: float) -> None:
    for name, value in params.items():
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{name} must be in [0, 1]; got {value}")


def group_index(group_ids: GroupIds, batch_size: int) -> tuple[torch.Tensor, int]:
    """Map group ids to dense codes ``0..G-1`` in order of first appearance.

    Args:
        group_ids: one id per row: a list of hashables, a numpy array or an int tensor.
        batch_size: the expected number of rows ``B``.

    Returns:
        ``(codes, G)``: ``codes`` is a ``(B,)`` int64 CPU tensor, ``G`` the number of groups.

    Raises:
        ShapeError: ``len(group_ids) != batch_size``.
    """
    if isinstance(group_ids, torch.Tensor):
        ids: list[Any] = group_ids.reshape(-1).tolist()
    elif isinstance(group_ids, np.ndarray):
        ids = group_ids.reshape(-1).tolist()
    else:
        ids = list(group_ids)
    if len(ids) != batch_size:
        raise ShapeError(f"group_ids has {len(ids)} entries; expected one per row ({batch_size})")
    first_seen: dict[Any, int] = {}
    codes = [first_seen.setdefault(g, len(first_seen)) for g in ids]
    return torch.tensor(codes, dtype=torch.long), len(first_seen)


def _group_stats(
    scores: torch.Tensor, group_ids: GroupIds, valid: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row group size, group mean and unbiased group std over the valid rows, in float64.

    Args:
        scores: ``(B,)`` one score per row.
        group_ids: one id per row.
        valid: ``(B,)`` bool; rows with False are left out of every statistic (their own
            score is never read). None = all rows valid.

    Returns:
        ``(size, mean, std)``, each ``(B,)`` float64 on ``scores.device``: the number of valid
        rows of the row's group, their mean (0 when none) and unbiased std (0 for fewer than
        two).
    """
    codes, n_groups = group_index(group_ids, scores.shape[0])
    codes = codes.to(scores.device)
    s = scores.to(torch.float64)
    zeros = torch.zeros(n_groups, dtype=torch.float64, device=s.device)
    if valid is None:
        w = torch.ones_like(s)
    else:
        keep = _check_valid(valid, s.shape[0]).to(s.device)
        s = torch.where(keep, s, torch.zeros_like(s))
        w = keep.to(torch.float64)
    size = zeros.index_add(0, codes, w)
    mean = zeros.index_add(0, codes, s) / size.clamp(min=1)
    dev = (s - mean[codes]) * w
    var = zeros.index_add(0, codes, dev * dev) / (size - 1).clamp(min=1)
    return size[codes], mean[codes], var.sqrt()[codes]


def _check_valid(valid: torch.Tensor, batch_size: int) -> torch.Tensor:
    """``valid`` as a ``(B,)`` bool tensor, or ``ShapeError``."""
    if tuple(valid.shape) != (batch_size,):
        raise ShapeError(f"valid has shape {tuple(valid.shape)}; expected ({batch_size},)")
    return valid.bool()


def _zero_invalid(adv: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """``(B,)`` advantages with the invalid rows set to 0."""
    if valid is None:
        return adv
    return torch.where(valid.to(adv.device), adv, torch.zeros_like(adv))


# ---------------------------------------------------------------------------- estimators
def compute_gae(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (https://arxiv.org/abs/1506.02438), verl semantics.

    Reverse over t: ``delta = r[t] + gamma * nextvalue - v[t]``,
    ``lastgaelam = delta + gamma * lam * lastgaelam``; where ``response_mask[t] == 0`` both
    ``nextvalue`` and ``lastgaelam`` carry through unchanged. The value after the last valid
    token is 0.

    Args:
        token_level_rewards: ``(B, R)`` rewards (scores minus any in-reward KL).
        values: ``(B, R)`` critic values.
        response_mask: ``(B, R)``, 1 on model tokens.
        gamma: discount in [0, 1].
        lam: GAE lambda in [0, 1].

    Returns:
        ``(advantages, returns)``, each ``(B, R)``. ``returns = raw_advantages + values``
        (before whitening; the critic's target). ``advantages`` are the raw advantages
        whitened over every valid token of the batch; they are not zeroed on masked positions
        (losses mask them). With fewer than two valid tokens, advantages are all 0.
    """
    _check_per_token(
        token_level_rewards=token_level_rewards, values=values, response_mask=response_mask
    )
    _check_unit_interval(gamma=gamma, lam=lam)
    with torch.no_grad():
        valid = response_mask != 0
        next_value = torch.zeros_like(values[:, 0])
        lastgaelam = torch.zeros_like(values[:, 0])
        raw = torch.zeros_like(values)
        for t in reversed(range(values.shape[1])):
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            gae = delta + gamma * lam * lastgaelam
            next_value = torch.where(valid[:, t], values[:, t], next_value)
            lastgaelam = torch.where(valid[:, t], gae, lastgaelam)
            raw[:, t] = lastgaelam
        returns = raw + values
        return _whiten_or_zero(raw, response_mask), returns


def compute_grpo(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage (https://arxiv.org/abs/2402.03300); Dr. GRPO without std.

    ``s = token_level_rewards.sum(-1)``; within each group ``A = (s - mean) / (std + eps)``
    (unbiased std), or ``A = s - mean`` when ``norm_by_std`` is False (Dr. GRPO,
    https://arxiv.org/abs/2503.20783). A group of one uses mean 0 and std 1.

    Args:
        token_level_rewards: ``(B, R)``.
        response_mask: ``(B, R)``.
        group_ids: one id per row (rows from the same prompt share one).
        norm_by_std: divide by the group std.
        eps: added to the std.
        valid: ``(B,)`` bool; False rows (env errors) are left out of their group's mean and
            std and get 0. None = all valid.

    Returns:
        ``(advantages, returns)``, both ``A[:, None] * response_mask``, ``(B, R)``, zero where
        the mask is 0; a group whose valid scores are all equal gets exactly 0.
    """
    _check_per_token(token_level_rewards=token_level_rewards, response_mask=response_mask)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        size, mean, std = _group_stats(scores, group_ids, valid)
        single = size < 2
        mean = torch.where(single, torch.zeros_like(mean), mean)
        adv = scores.to(torch.float64) - mean
        if norm_by_std:
            adv = adv / (torch.where(single, torch.ones_like(std), std) + eps)
        adv = _zero_invalid(adv, valid)
        out = adv.to(token_level_rewards.dtype)[:, None] * response_mask.to(
            token_level_rewards.dtype
        )
        return out, out


def compute_rloo(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out (https://arxiv.org/abs/2402.14740).

    ``A = s - mean(other scores of the group) = n / (n - 1) * (s - mean_group)`` with
    ``s = token_level_rewards.sum(-1)``; a group of one keeps ``A = s``.

    Args:
        token_level_rewards: ``(B, R)``.
        response_mask: ``(B, R)``.
        group_ids: one id per row.
        valid: ``(B,)`` bool; False rows (env errors) are not among the "others" and get 0
            (``n`` counts the valid rows). None = all valid.

    Returns:
        ``(advantages, returns)``, both ``A[:, None] * response_mask``, ``(B, R)``.
    """
    _check_per_token(token_level_rewards=token_level_rewards, response_mask=response_mask)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        size, mean, _ = _group_stats(scores, group_ids, valid)
        s = scores.to(torch.float64)
        scale = size / (size - 1).clamp(min=1)
        adv = _zero_invalid(torch.where(size > 1, s * scale - mean * scale, s), valid)
        out = adv.to(token_level_rewards.dtype)[:, None] * response_mask.to(
            token_level_rewards.dtype
        )
        return out, out


def compute_reinforce_pp(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (https://arxiv.org/abs/2501.03262): whitened discounted returns.

    Reverse over t: ``G = r[t] + gamma * G`` on valid tokens; on masked tokens ``G`` carries
    through unchanged; ``returns[t] = G * mask[t]``.

    Args:
        token_level_rewards: ``(B, R)``.
        response_mask: ``(B, R)``.
        gamma: discount in [0, 1].

    Returns:
        ``(advantages, returns)``, each ``(B, R)``: ``advantages = masked_whiten(returns) *
        mask`` (all 0 with fewer than two valid tokens); ``returns`` are zero where masked.
    """
    _check_per_token(token_level_rewards=token_level_rewards, response_mask=response_mask)
    _check_unit_interval(gamma=gamma)
    with torch.no_grad():
        valid = response_mask != 0
        m = response_mask.to(token_level_rewards.dtype)
        running = torch.zeros_like(token_level_rewards[:, 0])
        returns = torch.zeros_like(token_level_rewards)
        for t in reversed(range(token_level_rewards.shape[1])):
            running = torch.where(valid[:, t], token_level_rewards[:, t] + gamma * running, running)
            returns[:, t] = running * m[:, t]
        return _whiten_or_zero(returns, m) * m, returns


def compute_reinforce_pp_baseline(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline (https://arxiv.org/abs/2501.03262).

    ``A = s - mean_group`` (a group of one: mean 0) with ``s = token_level_rewards.sum(-1)``,
    broadcast over the mask, then whitened over the batch's valid tokens.

    Args:
        token_level_rewards: ``(B, R)``.
        response_mask: ``(B, R)``.
        group_ids: one id per row.
        valid: ``(B,)`` bool; False rows (env errors) are left out of the group mean and of
            the whitening, and get 0. None = all valid.

    Returns:
        ``(advantages, returns)``, equal, ``(B, R)``, zero where masked (all 0 with fewer than
        two valid tokens).
    """
    _check_per_token(token_level_rewards=token_level_rewards, response_mask=response_mask)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        size, mean, _ = _group_stats(scores, group_ids, valid)
        adv = scores.to(torch.float64) - torch.where(size > 1, mean, torch.zeros_like(mean))
        adv = _zero_invalid(adv, valid)
        m = _valid_mask(response_mask, valid).to(token_level_rewards.dtype)
        out = adv.to(token_level_rewards.dtype)[:, None] * m
        out = _whiten_or_zero(out, m) * m
        return out, out


# ---------------------------------------------------------------------------- the registry
class AdvantageEstimatorFn(Protocol):
    """The one signature every registered estimator has.

    Args:
        token_level_rewards: ``(B, R)``.
        response_mask: ``(B, R)``, 1 on model tokens.
        values: ``(B, R)`` critic values (estimators with ``needs_critic``), else ignored.
        group_ids: one id per row (estimators with ``needs_groups``), else ignored.
        gamma, lam: discount and GAE lambda (used by the estimators that discount).
        norm_by_std, eps: GRPO's std normalisation and its epsilon.
        valid: ``(B,)`` bool, False on env-error rows (their mask is already 0); group
            estimators leave them out of group statistics. None = all valid.

    Returns:
        ``(advantages, returns)``, each ``(B, R)``, detached.
    """

    def __call__(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        values: torch.Tensor | None,
        group_ids: GroupIds | None,
        gamma: float,
        lam: float,
        norm_by_std: bool,
        eps: float,
        valid: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Compute ``(advantages, returns)``."""
        ...


@dataclass(frozen=True)
class Estimator:
    """A registered advantage estimator.

    Attributes:
        name: the registry key (what configs say).
        fn: the estimator; called with the ``AdvantageEstimatorFn`` arguments (all keywords
            after the two tensors; an estimator may take ``**kwargs`` for those it ignores).
        needs_critic: it reads ``values``, so the trainer must run a critic.
        needs_groups: it reads ``group_ids`` (several samples per prompt).
        paper: a link to the method's paper.
    """

    name: str
    fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    needs_critic: bool = False
    needs_groups: bool = False
    paper: str = ""


#: name -> Estimator. Mutate only through register_estimator / unregister_estimator.
ADVANTAGE_ESTIMATORS: dict[str, Estimator] = {}

_F = TypeVar("_F", bound=Callable[..., tuple[torch.Tensor, torch.Tensor]])


def _need(value: Any, what: str, name: str) -> Any:
    """Return ``value``; raise ``ConfigError`` if the estimator ``name`` got None for it."""
    if value is None:
        raise ConfigError(f"advantage estimator {name!r} needs {what}; got None")
    return value


def register_estimator(
    name: str, *, needs_critic: bool = False, needs_groups: bool = False, paper: str = ""
) -> Callable[[_F], _F]:
    """Decorator: register an ``AdvantageEstimatorFn`` under ``name``.

    Raises:
        DuplicateNameError: ``name`` is already registered (unregister it first).
    """

    def decorator(fn: _F) -> _F:
        if name in ADVANTAGE_ESTIMATORS:
            raise DuplicateNameError(
                f"advantage estimator {name!r} is already registered; "
                "call unregister_estimator first to replace it"
            )
        ADVANTAGE_ESTIMATORS[name] = Estimator(name, fn, needs_critic, needs_groups, paper)
        return fn

    return decorator


def unregister_estimator(name: str) -> Estimator:
    """Remove and return the estimator ``name`` (tests use it to restore the registry)."""
    entry = get_estimator(name)
    del ADVANTAGE_ESTIMATORS[name]
    return entry


def get_estimator(name: str) -> Estimator:
    """The registered estimator ``name``.

    Raises:
        UnknownNameError: not registered; the message lists the names and close matches.
    """
    if name not in ADVANTAGE_ESTIMATORS:
        raise unknown_name("advantage estimator", name, ADVANTAGE_ESTIMATORS)
    return ADVANTAGE_ESTIMATORS[name]


def estimator_needs_critic(name: str) -> bool:
    """Whether the estimator ``name`` reads critic ``values``."""
    return get_estimator(name).needs_critic


def compute_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    group_ids: GroupIds | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the registered estimator ``name`` (see ``AdvantageEstimatorFn`` for the arguments).

    With ``valid`` (``(B,)`` bool, False on env-error rows) the mask the estimator sees is 0 on
    the invalid rows (so no whitening counts them) and the estimator is given ``valid`` to
    leave them out of group statistics.

    Returns:
        ``(advantages, returns)``, each ``(B, R)``, detached.

    Raises:
        UnknownNameError: ``name`` is not registered.
        ConfigError: the estimator needs ``values`` or ``group_ids`` and got None.
    """
    entry = get_estimator(name)
    if entry.needs_critic:
        _need(values, "values (from a critic)", name)
    if entry.needs_groups:
        _need(group_ids, "group_ids", name)
    return entry.fn(
        token_level_rewards,
        _valid_mask(response_mask, valid),
        values=values,
        group_ids=group_ids,
        gamma=gamma,
        lam=lam,
        norm_by_std=norm_by_std,
        eps=eps,
        valid=valid,
    )


# ---------------------------------------------------------------------------- built-ins
# Each adapter maps the one registry signature onto a public function above.
_Pair = tuple[torch.Tensor, torch.Tensor]


@register_estimator("gae", needs_critic=True, paper="https://arxiv.org/abs/1506.02438")
def _gae(
    rewards: torch.Tensor, mask: torch.Tensor, *, values: Any, gamma: float, lam: float, **_: Any
) -> _Pair:
    return compute_gae(rewards, _need(values, "values", "gae"), mask, gamma=gamma, lam=lam)


@register_estimator("grpo", needs_groups=True, paper="https://arxiv.org/abs/2402.03300")
def _grpo(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    *,
    group_ids: Any,
    norm_by_std: bool,
    eps: float,
    valid: torch.Tensor | None = None,
    **_: Any,
) -> _Pair:
    groups = _need(group_ids, "group_ids", "grpo")
    return compute_grpo(rewards, mask, groups, norm_by_std=norm_by_std, eps=eps, valid=valid)


@register_estimator("drgrpo", needs_groups=True, paper="https://arxiv.org/abs/2503.20783")
def _drgrpo(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    *,
    group_ids: Any,
    eps: float,
    valid: torch.Tensor | None = None,
    **_: Any,
) -> _Pair:
    groups = _need(group_ids, "group_ids", "drgrpo")
    return compute_grpo(rewards, mask, groups, norm_by_std=False, eps=eps, valid=valid)


@register_estimator("rloo", needs_groups=True, paper="https://arxiv.org/abs/2402.14740")
def _rloo(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    *,
    group_ids: Any,
    valid: torch.Tensor | None = None,
    **_: Any,
) -> _Pair:
    return compute_rloo(rewards, mask, _need(group_ids, "group_ids", "rloo"), valid=valid)


@register_estimator("reinforce_pp", paper="https://arxiv.org/abs/2501.03262")
def _reinforce_pp(rewards: torch.Tensor, mask: torch.Tensor, *, gamma: float, **_: Any) -> _Pair:
    return compute_reinforce_pp(rewards, mask, gamma=gamma)


@register_estimator(
    "reinforce_pp_baseline", needs_groups=True, paper="https://arxiv.org/abs/2501.03262"
)
def _reinforce_pp_baseline(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    *,
    group_ids: Any,
    valid: torch.Tensor | None = None,
    **_: Any,
) -> _Pair:
    groups = _need(group_ids, "group_ids", "reinforce_pp_baseline")
    return compute_reinforce_pp_baseline(rewards, mask, groups, valid=valid)
