"""The check, on every training batch, that env tokens are never trained and rewards sit right.

Multi-turn episodes interleave model tokens with env tokens (tool results, the chat template's
turn closings and generation prompts). Only the model's tokens may carry policy gradient: the
runner gives env tokens ``response_mask == 0`` and the estimators zero advantages there. This
module re-checks that on the very batch the learner is about to train on, before each update,
independently of how the runner built it:

- every token of a tool result, from the env's ``<tool_response>`` to ``</tool_response>``
  inclusive, has ``response_mask == 0`` and advantage 0;
- every nonzero token-level score sits on a model token (turn rewards on a turn's last model
  token, reward spans inside the turn), never on an env token.

It costs a few vectorised comparisons over ``(batch, response_len)`` tensors per step.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.batch import RolloutBatch
from rlvr.errors import BatchError

TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"


def _single_id(tokenizer: Any, text: str) -> int | None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return int(ids[0]) if len(ids) == 1 else None


def tool_result_positions(responses: torch.Tensor, response_mask: torch.Tensor, open_id: int,
                          close_id: int) -> torch.Tensor:
    """Where the env's tool results are in ``responses``.

    A tool result opens with a ``<tool_response>`` token the env appended (mask 0) and ends at
    the next env ``</tool_response>``. The model may write the same tokens itself (a
    hallucinated tool result, which is its own output and is trained on like any other), so
    tags with mask 1 open or close nothing. Tool results do not nest: a tool's text can echo the
    model's tags (an error message quoting the bad call, ``not a valid expression:
    '12*3<tool_response>'``), and those env-side tags inside a result open nothing either (an
    echoed close ends the result early: the rest of it, mask 0 anyway, goes unchecked).

    Args:
        responses: ``(batch, response_len)`` token ids.
        response_mask: ``(batch, response_len)``, 1 on model tokens.
        open_id: the id of ``<tool_response>``.
        close_id: the id of ``</tool_response>``.

    Returns:
        A bool ``(batch, response_len)`` tensor, True from each env ``<tool_response>`` to the
        next env ``</tool_response>`` (both included; an unclosed one runs to the end).
    """
    env = response_mask == 0
    opens = (responses == open_id) & env
    closes = (responses == close_id) & env
    inside = torch.zeros_like(opens)
    state = torch.zeros_like(opens[:, 0])
    for col in range(responses.shape[1]):  # a scan: whether a result is open is a state
        state = state | opens[:, col]
        inside[:, col] = state
        state = state & ~closes[:, col]
    return inside


class EnvTokenGuard:
    """Checks each training batch (see the module docstring); counts what it checked.

    Args:
        tokenizer: the policy's tokenizer; tool results are found by its ``<tool_response>``
            and ``</tool_response>`` tokens (single ids in ChatML tokenizers such as Qwen's and
            the tiny one). Without them only the reward placement is checked.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.open_id = _single_id(tokenizer, TOOL_RESPONSE_OPEN)
        self.close_id = _single_id(tokenizer, TOOL_RESPONSE_CLOSE)
        self.episodes = 0
        self.tool_tokens = 0

    def check(self, batch: RolloutBatch) -> dict[str, float]:
        """Raise unless env tokens are untrained and carry no reward.

        Args:
            batch: a batch after stage B (``advantages`` set).

        Returns:
            ``check/tool_result_tokens``: tool-result tokens checked in this batch.

        Raises:
            BatchError: naming the row and position of the first violation.
        """
        mask = batch.response_mask
        scores = batch.token_level_scores
        misplaced = (scores != 0) & (mask == 0)
        if bool(misplaced.any()):
            row, col = (int(x) for x in misplaced.nonzero()[0])
            raise BatchError(f"row {row}: a reward is at response position {col}, an env token; "
                             "rewards belong on the model's tokens")
        n_tool = 0
        if self.open_id is not None and self.close_id is not None:
            tool = tool_result_positions(batch.responses, mask, self.open_id, self.close_id)
            advantages = batch.advantages
            if advantages is None:
                raise BatchError("EnvTokenGuard.check needs a batch after stage B (advantages)")
            bad = tool & ((mask != 0) | (advantages != 0))
            if bool(bad.any()):
                row, col = (int(x) for x in bad.nonzero()[0])
                raise BatchError(f"row {row}: tool-result token at response position {col} has "
                                 f"response_mask {float(mask[row, col])} and advantage "
                                 f"{float(advantages[row, col])}; env tokens must never be trained")
            n_tool = int(tool.sum())
        self.episodes += len(batch)
        self.tool_tokens += n_tool
        return {"check/tool_result_tokens": float(n_tool)}

