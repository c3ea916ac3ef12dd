"""The collated RolloutBatch the learner trains on, built from ``rlvr.trajectory.Trajectory`` rows.

Per-token quantities are aligned with ``response_ids``: position ``t`` of ``response_mask``,
``rollout_logprobs`` and ``token_level_scores`` describes ``response_ids[t]``.

Layout of a ``RolloutBatch`` (``B`` rows, prompt width ``P``, response width ``R``)::

    input_ids  [pad pad p0 p1 p2 | r0 r1 r2 pad pad]     (B, P + R)
                 left-padded  P  ^  right-padded R
    responses                    [r0 r1 r2 pad pad]     (B, R) == input_ids[:, P:]

Prompts are LEFT-padded to the widest prompt of the batch and responses RIGHT-padded, so the
prompt/response boundary is the same column ``P`` for every row: the logits that predict the
response are ``logits[:, P - 1 : -1]``. ``attention_mask`` is 1 on every real token (prompt,
model and env tokens) and 0 on padding; ``position_ids = clamp(cumsum(attention_mask) - 1, 0)``
(so padding on the left gets position 0 and real tokens count from 0). ``response_mask`` is 1
only on tokens the model generated; env/tool tokens inside a response and padding are 0.

Error rows: an episode that ended in an env/sandbox error (``finish_reason == "error"``) stays a
row, so every rank keeps the same row count, but it is not trained on. ``RolloutBatch.valid``
(``(B,)`` bool) is False on such rows and their ``response_mask`` is all 0 (``from_trajectories``
zeroes it; the constructor refuses a batch that breaks this). The advantage estimators leave
rows with ``valid`` False out of their group's mean and std (``rlvr.algorithms.advantages``), and
every
loss, whitening and aggregate counts only mask-1 tokens, so an error row contributes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from rlvr.errors import BatchError, ShapeError, unknown_name
from rlvr.trajectory import INVALID_FINISH_REASONS, Trajectory

#: Per-token fields that may be ``None``, each ``(B, R)``: filled after collation (by the
#: learner), but ``policy_versions``, set at collation when the trajectories carry them.
OPTIONAL_FIELDS: tuple[str, ...] = (
    "old_logprobs",
    "ref_logprobs",
    "values",
    "token_level_rewards",
    "advantages",
    "returns",
    "policy_versions",
)
#: Per-token fields present from collation on, each ``(B, R)``.
RESPONSE_FIELDS: tuple[str, ...] = (
    "responses",
    "response_mask",
    "rollout_logprobs",
    "token_level_scores",
)
#: Fields over the whole sequence (prompt + response), each ``(B, P + R)``.
SEQUENCE_FIELDS: tuple[str, ...] = ("input_ids", "attention_mask", "position_ids")
#: Per-row tensor fields, each ``(B,)``.
ROW_FIELDS: tuple[str, ...] = ("valid",)
#: Non-tensor per-row fields, each a list of length ``B``.
LIST_FIELDS: tuple[str, ...] = ("group_ids", "env_ids", "task_ids", "finish_reasons", "metadata")


def position_ids_from_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions of the tokens of left/right-padded rows.

    Args:
        attention_mask: ``(B, T)``, 1 on real tokens, 0 on padding.

    Returns:
        ``(B, T)`` int64: ``clamp(cumsum(attention_mask, -1) - 1, min=0)``. The first real token
        has position 0; left padding gets 0; right padding repeats the last position.
    """
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def _check_trajectory(row: int, traj: Trajectory) -> None:
    """Raise ``BatchError`` naming the field and row when ``traj`` cannot be collated."""
    if len(traj.prompt_ids) == 0:
        raise BatchError(f"row {row}: prompt_ids is empty; a trajectory needs a prompt token")
    n = len(traj.response_ids)
    for name in ("response_mask", "rollout_logprobs", "token_level_scores"):
        got = len(getattr(traj, name))
        if got != n:
            raise BatchError(
                f"row {row}: {name} has {got} entries but response_ids has {n}; "
                "response_mask, rollout_logprobs and token_level_scores need one entry per "
                "response token"
            )
    if traj.policy_versions is not None and len(traj.policy_versions) != n:
        raise BatchError(
            f"row {row}: policy_versions has {len(traj.policy_versions)} entries but "
            f"response_ids has {n}; it needs one version per response token (or None)"
        )
    for t, m in enumerate(traj.response_mask):
        if m not in (0, 1):
            raise BatchError(f"row {row}: response_mask[{t}] = {m!r}; allowed values are 0 and 1")
    for name in ("prompt_ids", "response_ids"):
        for t, tok in enumerate(getattr(traj, name)):
            if isinstance(tok, bool) or not isinstance(tok, int) or tok < 0:
                raise BatchError(
                    f"row {row}: {name}[{t}] = {tok!r}; token ids must be non-negative ints"
                )
    for name in ("rollout_logprobs", "token_level_scores"):
        for t, x in enumerate(getattr(traj, name)):
            if not math.isfinite(x):
                raise BatchError(f"row {row}: {name}[{t}] = {x!r}; values must be finite")


def _pad_response(x: torch.Tensor, width: int, value: float) -> torch.Tensor:
    """Right-pad the last dim of ``x`` to ``width`` with ``value``."""
    extra = width - x.shape[-1]
    return torch.nn.functional.pad(x, (0, extra), value=value) if extra > 0 else x


@dataclass(kw_only=True)
class RolloutBatch:
    """A collated batch of trajectories (see the module docstring for the layout).

    All per-token tensors live on the same device; ``B`` = rows, ``P`` = prompt width,
    ``R`` = response width. Build one with ``RolloutBatch.from_trajectories``.

    Attributes:
        input_ids: ``(B, P + R)`` int64, prompt (left-padded) then response (right-padded).
        attention_mask: ``(B, P + R)`` int64, 1 on real tokens (prompt, model and env tokens).
        position_ids: ``(B, P + R)`` int64, ``clamp(cumsum(attention_mask) - 1, 0)``.
        responses: ``(B, R)`` int64, ``input_ids[:, P:]``.
        response_mask: ``(B, R)`` float32, 1.0 on model-generated tokens, 0.0 on env tokens and
            padding. Float so that it multiplies per-token losses directly.
        rollout_logprobs: ``(B, R)`` float32, the engine's logprobs (0 where the mask is 0).
        token_level_scores: ``(B, R)`` float32, verifier rewards placed on tokens (0 on padding).
        old_logprobs: ``(B, R)`` or None; the actor's logprobs before the update (stage B).
        ref_logprobs: ``(B, R)`` or None; the reference policy's logprobs.
        values: ``(B, R)`` or None; the critic's values.
        token_level_rewards: ``(B, R)`` or None; scores minus the in-reward KL penalty, if any.
        advantages: ``(B, R)`` or None; from an advantage estimator.
        returns: ``(B, R)`` or None; targets of the value loss.
        policy_versions: ``(B, R)`` int64 or None; the policy version that generated each
            token (``Trajectory.policy_versions``; 0 on padding). None: all current.
        group_ids: one per row; rows sampled from the same task share it (GRPO's uid).
        env_ids: one env id per row.
        task_ids: one task id per row.
        finish_reasons: one per row: "stop", "length", "max_turns", "truncated" or "error".
        metadata: one dict per row (per-episode stats).
        pad_token_id: the id written in padded positions of ``input_ids``/``responses``.
        valid: ``(B,)`` bool on the batch's device: False on rows whose episode ended in an
            error (``finish_reason == "error"``). Such rows have ``response_mask`` 0 and are
            left out of group statistics (see the module docstring). None (the default) means
            "derive from ``finish_reasons``"; after construction it is always a tensor.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    responses: torch.Tensor
    response_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    token_level_scores: torch.Tensor
    group_ids: list[Any]
    env_ids: list[str]
    task_ids: list[str]
    finish_reasons: list[str]
    metadata: list[dict[str, Any]]
    pad_token_id: int
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    token_level_rewards: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    policy_versions: torch.Tensor | None = None
    valid: torch.Tensor | None = None

    def __post_init__(self) -> None:
        """Check that every field has the batch's shape (raises ``ShapeError``/``BatchError``)."""
        if self.input_ids.dim() != 2 or self.responses.dim() != 2:
            raise ShapeError(
                f"input_ids and responses must be 2-D; got {tuple(self.input_ids.shape)} and "
                f"{tuple(self.responses.shape)}"
            )
        b, total = self.input_ids.shape
        r = self.responses.shape[1]
        if self.responses.shape[0] != b or r > total:
            raise ShapeError(
                f"responses has shape {tuple(self.responses.shape)}; expected ({b}, R) with "
                f"R <= {total} (input_ids is {tuple(self.input_ids.shape)})"
            )
        for name in SEQUENCE_FIELDS:
            self._check_shape(name, getattr(self, name), (b, total))
        for name in RESPONSE_FIELDS + OPTIONAL_FIELDS:
            value = getattr(self, name)
            if value is not None:
                self._check_shape(name, value, (b, r))
        for name in LIST_FIELDS:
            got = len(getattr(self, name))
            if got != b:
                raise BatchError(f"{name} has {got} entries; expected one per row ({b})")
        self._check_valid(b)

    def _check_valid(self, b: int) -> None:
        """Derive ``valid`` from ``finish_reasons`` when None; check it against the mask."""
        if self.valid is None:
            self.valid = torch.tensor(
                [r not in INVALID_FINISH_REASONS for r in self.finish_reasons], dtype=torch.bool,
                device=self.response_mask.device,
            )
        if self.valid.dtype != torch.bool or tuple(self.valid.shape) != (b,):
            raise ShapeError(
                f"valid must be a ({b},) bool tensor; got {self.valid.dtype} of shape "
                f"{tuple(self.valid.shape)}"
            )
        if b and self.valid.device.type != "meta" and not bool(self.valid.all()):
            bad = (self.response_mask[~self.valid.to(self.response_mask.device)] != 0).any(-1)
            if bool(bad.any()):
                rows = torch.nonzero(~self.valid).flatten()[bad.to(self.valid.device)].tolist()
                raise BatchError(
                    f"rows {rows} are not valid (an env error) but have response_mask 1; an "
                    "error row must have response_mask 0 (RolloutBatch.from_trajectories "
                    "zeroes it)"
                )

    @staticmethod
    def _check_shape(name: str, value: torch.Tensor, shape: tuple[int, int]) -> None:
        if tuple(value.shape) != shape:
            raise ShapeError(f"{name} has shape {tuple(value.shape)}; expected {shape}")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_trajectories(
        cls,
        trajectories: Sequence[Trajectory],
        pad_token_id: int,
        max_response_len: int | None = None,
    ) -> RolloutBatch:
        """Collate trajectories: left-pad prompts, right-pad responses.

        Args:
            trajectories: at least one; each is validated first.
            pad_token_id: the id written into padded positions.
            max_response_len: if given, the response width ``R`` is exactly this (a constant
                width keeps ``seq-mean-token-sum-norm`` and compiled kernels stable); a longer
                response raises. If None, ``R`` is the longest response (at least 1).

        Returns:
            The collated batch; optional per-token fields are None, but ``policy_versions``
            when the trajectories carry them (all or none may). Rows whose
            ``finish_reason`` is "error" get ``valid`` False and ``response_mask`` 0 (their
            tokens stay, so the row still has a layout; nothing of it is trained on).

        Raises:
            BatchError: an empty list, or a malformed trajectory (the message names the field
                and the row index), or a response longer than ``max_response_len``.
        """
        if len(trajectories) == 0:
            raise BatchError("trajectories is empty; need at least one to collate")
        if any(t.extra_rows for t in trajectories):
            trajectories = [row for t in trajectories for row in (t, *t.extra_rows)]
        for row, traj in enumerate(trajectories):
            _check_trajectory(row, traj)
        longest = max(len(t.response_ids) for t in trajectories)
        if max_response_len is not None:
            if max_response_len < 1:
                raise BatchError(f"max_response_len must be >= 1; got {max_response_len}")
            for row, traj in enumerate(trajectories):
                if len(traj.response_ids) > max_response_len:
                    raise BatchError(
                        f"row {row}: response_ids has {len(traj.response_ids)} tokens, more than "
                        f"max_response_len={max_response_len}"
                    )
        r = max(longest, 1) if max_response_len is None else max_response_len
        p = max(len(t.prompt_ids) for t in trajectories)
        b = len(trajectories)
        # Padded rows as Python lists, then one tensor per field (one torch.tensor call per
        # row and field cost ~0.2 ms a row, most of a quickstart step's "prepare" stage).
        ids_rows, mask_rows = [], []
        per_token_rows: dict[str, list[list[float]]] = {n: [] for n in RESPONSE_FIELDS[1:]}
        for traj in trajectories:
            n_p, n_r = len(traj.prompt_ids), len(traj.response_ids)
            ids_rows.append([pad_token_id] * (p - n_p) + list(traj.prompt_ids)
                            + list(traj.response_ids) + [pad_token_id] * (r - n_r))
            mask_rows.append([0] * (p - n_p) + [1] * (n_p + n_r) + [0] * (r - n_r))
            for name, rows in per_token_rows.items():
                rows.append([float(x) for x in getattr(traj, name)] + [0.0] * (r - n_r))
        input_ids = torch.tensor(ids_rows, dtype=torch.long).reshape(b, p + r)
        attention_mask = torch.tensor(mask_rows, dtype=torch.long).reshape(b, p + r)
        per_token = {n: torch.tensor(rows, dtype=torch.float32).reshape(b, r)
                     for n, rows in per_token_rows.items()}
        valid = torch.tensor(
            [t.finish_reason not in INVALID_FINISH_REASONS for t in trajectories], dtype=torch.bool
        )
        per_token["response_mask"] *= valid[:, None]
        versioned = [t.policy_versions is not None for t in trajectories]
        if any(versioned):
            if not all(versioned):
                raise BatchError(
                    f"row {versioned.index(False)}: policy_versions is None but row "
                    f"{versioned.index(True)} has them; set them on every row or none"
                )
            per_token["policy_versions"] = torch.tensor(
                [list(t.policy_versions or ()) + [0] * (r - len(t.response_ids))
                 for t in trajectories], dtype=torch.long).reshape(b, r)
        return cls(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_attention_mask(attention_mask),
            responses=input_ids[:, p:].clone(),
            **per_token,
            group_ids=[t.group_id for t in trajectories],
            env_ids=[t.env_id for t in trajectories],
            task_ids=[t.task_id for t in trajectories],
            finish_reasons=[t.finish_reason for t in trajectories],
            metadata=[t.metadata for t in trajectories],
            pad_token_id=pad_token_id,
            valid=valid,
        )

    # ------------------------------------------------------------------ shape helpers
    def __len__(self) -> int:
        """The number of rows ``B``."""
        return int(self.input_ids.shape[0])

    @property
    def prompt_len(self) -> int:
        """The prompt width ``P`` (the column where responses start)."""
        return int(self.input_ids.shape[1] - self.responses.shape[1])

    @property
    def response_len(self) -> int:
        """The response width ``R``."""
        return int(self.responses.shape[1])

    def response_lengths(self) -> torch.Tensor:
        """``(B,)`` int64: real (non-padding) response tokens per row, model and env tokens."""
        return self.attention_mask[:, self.prompt_len :].sum(dim=-1)

    def prompt_lengths(self) -> torch.Tensor:
        """``(B,)`` int64: real prompt tokens per row."""
        return self.attention_mask[:, : self.prompt_len].sum(dim=-1)

    # ------------------------------------------------------------------ per-token fields
    def set(self, name: str, tensor: torch.Tensor) -> None:
        """Store a detached per-token field computed after collation.

        Args:
            name: one of ``OPTIONAL_FIELDS`` (old_logprobs, ref_logprobs, values,
                token_level_rewards, advantages, returns).
            tensor: ``(B, R)`` on the batch's device; stored detached (these are fixed
                targets for the whole update).

        Raises:
            UnknownNameError: ``name`` is not an optional per-token field.
            ShapeError: the shape is not ``(B, R)``.
            BatchError: the tensor is on another device than the batch.
        """
        if name not in OPTIONAL_FIELDS:
            raise unknown_name("RolloutBatch field for set()", name, OPTIONAL_FIELDS)
        self._check_shape(name, tensor, (len(self), self.response_len))
        if tensor.device != self.response_mask.device:
            raise BatchError(
                f"{name} is on {tensor.device} but the batch is on {self.response_mask.device}"
            )
        setattr(self, name, tensor.detach())

    def require(self, name: str) -> torch.Tensor:
        """Return the per-token field ``name``, raising ``BatchError`` if it was never set."""
        if name not in OPTIONAL_FIELDS + RESPONSE_FIELDS + SEQUENCE_FIELDS:
            raise unknown_name("RolloutBatch tensor field", name, OPTIONAL_FIELDS + RESPONSE_FIELDS)
        value = getattr(self, name)
        if value is None:
            raise BatchError(f"{name} is not set on this batch; call batch.set({name!r}, ...)")
        return value

    def tensor_fields(self) -> dict[str, torch.Tensor]:
        """All sequence and per-token tensor fields that are set, by name (not ``ROW_FIELDS``)."""
        names = SEQUENCE_FIELDS + RESPONSE_FIELDS + OPTIONAL_FIELDS
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    # ------------------------------------------------------------------ slicing and joining
    def select(self, indices: Sequence[int] | torch.Tensor) -> RolloutBatch:
        """The rows ``indices`` (in that order; repeats allowed), same ``P`` and ``R``.

        Raises:
            BatchError: an index is out of range.
        """
        idx = torch.as_tensor(indices, dtype=torch.long).reshape(-1)
        b = len(self)
        if idx.numel() and (int(idx.min()) < -b or int(idx.max()) >= b):
            raise BatchError(f"indices must lie in [0, {b}); got {idx.tolist()}")
        idx = idx % max(b, 1)
        rows = idx.tolist()
        moved: dict[str, Any] = {n: t[idx.to(t.device)] for n, t in self.tensor_fields().items()}
        lists: dict[str, Any] = {n: [getattr(self, n)[i] for i in rows] for n in LIST_FIELDS}
        return replace(self, **moved, **lists, **self._row_fields(lambda t: t[idx.to(t.device)]))

    @classmethod
    def concat(cls, batches: Sequence[RolloutBatch]) -> RolloutBatch:
        """Stack batches row-wise, padding to the widest prompt and response.

        Extra prompt columns are added on the left, extra response columns on the right (with
        ``pad_token_id``, mask 0, per-token values 0), so every row keeps its layout.

        Raises:
            BatchError: no batches, different ``pad_token_id`` values, or an optional field set
                in some batches but not in others (the message names it).
        """
        if len(batches) == 0:
            raise BatchError("batches is empty; need at least one to concat")
        pad = batches[0].pad_token_id
        for i, batch in enumerate(batches):
            if batch.pad_token_id != pad:
                raise BatchError(
                    f"batches[{i}].pad_token_id is {batch.pad_token_id}; batches[0] has {pad}"
                )
        for name in OPTIONAL_FIELDS:
            present = [getattr(b, name) is not None for b in batches]
            if any(present) and not all(present):
                raise BatchError(
                    f"{name} is set in batches {[i for i, x in enumerate(present) if x]} but not "
                    f"in {[i for i, x in enumerate(present) if not x]}; set it in all or none"
                )
        p = max(b.prompt_len for b in batches)
        r = max(b.response_len for b in batches)
        padded = [b._padded(p, r) for b in batches]
        tensors: dict[str, Any] = {
            n: torch.cat([getattr(b, n) for b in padded], dim=0) for n in padded[0].tensor_fields()
        }
        lists: dict[str, Any] = {
            n: [x for b in batches for x in getattr(b, n)] for n in LIST_FIELDS
        }
        device = batches[0].response_mask.device
        rows: dict[str, Any] = {
            n: torch.cat([getattr(b, n).to(device) for b in batches]) for n in ROW_FIELDS
        }
        return cls(**tensors, **lists, **rows, pad_token_id=pad)

    def _padded(self, prompt_len: int, response_len: int) -> RolloutBatch:
        """This batch widened to ``prompt_len`` + ``response_len`` columns."""
        left = prompt_len - self.prompt_len
        right = response_len - self.response_len
        if left == 0 and right == 0:
            return self
        pad = torch.nn.functional.pad
        input_ids = pad(self.input_ids, (left, right), value=self.pad_token_id)
        attention_mask = pad(self.attention_mask, (left, right), value=0)
        per_token: dict[str, Any] = {
            n: _pad_response(t, response_len, self.pad_token_id if n == "responses" else 0.0)
            for n, t in self.tensor_fields().items()
            if n not in SEQUENCE_FIELDS
        }
        return replace(
            self,
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_attention_mask(attention_mask),
            **per_token,
        )

    def minibatches(
        self, size: int, *, seed: int, shuffle: bool = True, drop_last: bool = False
    ) -> Iterator[RolloutBatch]:
        """Split into mini-batches of ``size`` whole sequences.

        Args:
            size: rows per mini-batch (>= 1). The last one is smaller when ``size`` does not
                divide ``B`` (dropped if ``drop_last``).
            seed: seeds the shuffle; the same seed gives the same split.
            shuffle: permute rows first (a fresh ``torch.Generator``; global RNG untouched).
            drop_last: skip a final partial mini-batch.

        Yields:
            ``RolloutBatch`` slices (same ``P`` and ``R``) that together cover every row once.

        Raises:
            BatchError: ``size`` < 1.
        """
        if size < 1:
            raise BatchError(f"size must be >= 1; got {size}")
        b = len(self)
        if shuffle:
            order = torch.randperm(b, generator=torch.Generator().manual_seed(seed))
        else:
            order = torch.arange(b)
        for start in range(0, b, size):
            chunk = order[start : start + size]
            if drop_last and chunk.numel() < size:
                return
            yield self.select(chunk)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> RolloutBatch:
        """A copy with every tensor moved to ``device`` (lists are shared, not copied)."""
        moved: dict[str, Any] = {
            n: t.to(device, non_blocking=non_blocking) for n, t in self.tensor_fields().items()
        }
        rows = self._row_fields(lambda t: t.to(device, non_blocking=non_blocking))
        return replace(self, **moved, **rows)

    def rows_valid(self) -> torch.Tensor:
        """``valid`` as a tensor: ``(B,)`` bool, False on error rows (never None after init)."""
        if self.valid is None:  # unreachable after __post_init__; keeps the type checker honest
            raise BatchError("valid is not set; construct RolloutBatch normally")
        return self.valid

    def _row_fields(self, fn: Any) -> dict[str, Any]:
        """``fn`` applied to every per-row tensor field (``ROW_FIELDS``), by name."""
        return {n: fn(getattr(self, n)) for n in ROW_FIELDS}


__all__ = [
    "LIST_FIELDS",
    "OPTIONAL_FIELDS",
    "RESPONSE_FIELDS",
    "ROW_FIELDS",
    "SEQUENCE_FIELDS",
    "RolloutBatch",
    "position_ids_from_attention_mask",
]
