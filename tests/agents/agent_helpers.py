"""Envs and helpers shared by the agents tests (a plain module: conftest is not importable)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.envs.base import TextEnv

CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


@dataclass(frozen=True)
class FakeVerdict:
    score: float
    passed: bool
    reason: str


class EchoToolEnv(TextEnv):
    """Multi-turn env: answers each action with a tool result (or user feedback), then decides.

    Each non-final step gives reward 0.25 and a reward span over the first 2 characters of the
    action; the final step (after ``n_turns`` actions) terminates with reward 1.0 and a verdict.
    """

    def __init__(self, n_turns: int = 3, feedback_role: str = "tool", tools: bool = True) -> None:
        self.n_turns = n_turns
        self.feedback_role = feedback_role
        self.with_tools = tools
        self.turn = 0
        self.actions: list[str] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.turn = 0
        self.actions = []
        messages = [
            {"role": "system", "content": "You are a calculator agent."},
            {"role": "user", "content": f"What is {seed or 0} + 7?"},
        ]
        info: dict[str, Any] = {"task_id": f"echo-{seed}"}
        if self.with_tools:
            info["tools"] = [CALC_TOOL]
        return messages, info

    def step(self, action: str):
        self.turn += 1
        self.actions.append(action)
        if self.turn >= self.n_turns:
            verdict = FakeVerdict(1.0, True, "correct")
            return [], 1.0, True, False, {"verdict": verdict, "answer": "42", "tool_calls": 2}
        spans = [(0, min(2, len(action)), 0.5)] if action else []
        msg = {"role": self.feedback_role, "content": f"result {self.turn}: 12+30"}
        if self.feedback_role == "tool":
            msg["name"] = "calc"
        info = {"reward_spans": spans, "tool_errors": self.turn - 1}
        return [msg], 0.25, False, False, info


class NeverEndingEnv(EchoToolEnv):
    def step(self, action: str):
        self.turn += 1
        return [{"role": "user", "content": "go on"}], 0.0, False, False, {}


class RaisingEnv(EchoToolEnv):
    """Raises on step number ``fail_at`` (1-based), or in reset when ``fail_at == 0``."""

    def __init__(self, fail_at: int = 2) -> None:
        super().__init__(n_turns=5)
        self.fail_at = fail_at

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self.fail_at == 0:
            raise RuntimeError("reset exploded")
        return super().reset(seed=seed, options=options)

    def step(self, action: str):
        if self.turn + 1 == self.fail_at:
            raise ValueError("the sandbox exploded")
        return super().step(action)


class SlowEnv(EchoToolEnv):
    def step(self, action: str):
        time.sleep(1.0)
        return super().step(action)


def recompute_logprobs(model, traj, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain forward over prompt + response; logprobs at the model tokens (mine, engine's)."""
    ids = torch.tensor([traj.prompt_ids + traj.response_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    p = len(traj.prompt_ids)
    t = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits[p - 1 : -1] / t, dim=-1)
    resp = torch.tensor(traj.response_ids)
    mine = logp.gather(1, resp[:, None])[:, 0]
    mask = torch.tensor(traj.response_mask, dtype=torch.bool)
    return mine[mask], torch.tensor(traj.rollout_logprobs)[mask]


def continued_logprobs(old, new, prompt: list[int], tokens: list[int], k: int) -> torch.Tensor:
    """Logprobs of ``tokens[k:]`` by ``new`` over the KV cache ``old`` wrote for
    ``prompt + tokens[:k - 1]``: what an engine that swapped weights in flight after sampling
    ``tokens[:k]`` computes (``tokens[k - 1]`` is fed by the first forward after the swap)."""
    with torch.no_grad():
        cache = old(torch.tensor([prompt + tokens[:k - 1]]), use_cache=True).past_key_values
        logits = new(torch.tensor([tokens[k - 1:-1]]), cache=cache).logits[0]
    logp = torch.log_softmax(logits.float(), -1)
    return logp.gather(1, torch.tensor(tokens[k:])[:, None])[:, 0]
