"""Prompts longer than the model's context are refused at the start, not scored 0% in silence.

A prompt as long as the model's positions leaves no room for a single generated token: every
episode would end with no tokens and score 0, with no word anywhere. ``check_context`` renders
the openings of a few tasks of the training env and of the held-out split with the policy's
chat template before any work, and refuses a prompt the model cannot take (naming the env, the
prompt length and the limit); a prompt that leaves less room than
``rollout.runner.max_response_tokens`` is logged as a warning (responses will be cut short).
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

from rlvr.agents.runner_config import RunnerLimits
from rlvr.config import merge
from rlvr.config.schema import EnvConfig
from rlvr.errors import ConfigError

#: Tasks (reset seeds 0..N-1) of each split whose openings are measured.
SAMPLED_TASKS = 4


def context_limit(model_dir: str | Path) -> int | None:
    """The model's ``max_position_embeddings`` (None when its config does not say)."""
    from transformers import AutoConfig

    limit = getattr(AutoConfig.from_pretrained(str(model_dir)), "max_position_embeddings", None)
    return limit if isinstance(limit, int) and limit > 0 else None


def reset_within(env: Any, seed: int, timeout_s: float) -> Any:
    """``env.reset(seed=seed)`` on a daemon thread, or None.

    None when it raised or ran past ``timeout_s`` (then it is stopped as the runner stops a
    hung env call).
    """
    from rlvr.agents.env_calls import EnvCallKilled, raise_in_thread

    out: list[Any] = []

    def reset() -> None:
        with contextlib.suppress(Exception, EnvCallKilled):
            out.append(env.reset(seed=seed))

    thread = threading.Thread(target=reset, name="env-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive() and thread.ident is not None:
        raise_in_thread(thread.ident, EnvCallKilled)
        return None
    return out[0] if out else None


def longest_prompt(env_id: str, kwargs: dict[str, Any], tokenizer: Any,
                   tasks: int = SAMPLED_TASKS, timeout_s: float = 60.0) -> int:
    """The longest rendered opening (with tools and the generation prompt) of ``tasks`` tasks.

    A task whose ``reset`` raises or runs past ``timeout_s`` is left out: the run reports a
    broken or hung env itself (``rlvr.training.env_failures``).
    """
    from rlvr import envs

    env = envs.make(env_id, **kwargs)
    longest = 0
    try:
        for seed in range(tasks):
            opened = reset_within(env, seed, timeout_s)
            if opened is None:
                continue
            messages, info = opened
            tools = info.get("tools") or None
            out = tokenizer.apply_chat_template(list(messages), tools=tools,
                                                add_generation_prompt=True, tokenize=True)
            ids = out["input_ids"] if not isinstance(out, list) else out
            longest = max(longest, len(ids))
    finally:
        env.close()
    return longest


def check_context(env: EnvConfig, runner: RunnerLimits, tokenizer: Any, model_dir: str | Path,
                  log: Any, *, heldout_split: bool = True) -> None:
    """Refuse prompts the model cannot take; warn when they leave less than a response's room.

    Args:
        env: the ``env`` section (its training kwargs and held-out kwargs).
        runner: ``rollout.runner`` (the response room and the env-call time limit).
        tokenizer: the policy's tokenizer (its chat template renders the openings).
        model_dir: the policy's folder (its context length).
        log: where the warning goes.
        heldout_split: the held-out set is the env's test split (no ``eval.suite``): check it.

    Raises:
        ConfigError: a training or held-out prompt is at least the model's context length.
    """
    limit = context_limit(model_dir)
    if limit is None:
        return
    splits = {"training": env.kwargs}
    if heldout_split:
        splits["held-out"] = {"split": "test", **merge(env.kwargs, env.eval_kwargs)}
    room = runner.max_response_tokens
    for name, kwargs in splits.items():
        longest = longest_prompt(env.id, kwargs, tokenizer, timeout_s=runner.env_step_timeout_s)
        if longest >= limit:
            raise ConfigError(
                f"env.id: the {name} prompts of {env.id!r} are up to {longest} tokens with the "
                f"chat template, but the model takes at most {limit} "
                f"(max_position_embeddings): no room for one generated token, every episode "
                "would score 0. Use a model with a longer context (a larger "
                "model.tiny.max_position_embeddings for the tiny one) or shorter prompts "
                "(fewer tools, a shorter system prompt)", key="env.id")
        if longest + room > limit:
            log(f"[rlvr] WARNING: the {name} prompts of {env.id!r} are up to {longest} tokens; "
                f"with the model's {limit} positions only {limit - longest} are left for a "
                f"response, less than rollout.runner.max_response_tokens={room}: long "
                "responses will be cut")


__all__ = ["SAMPLED_TASKS", "check_context", "context_limit", "longest_prompt", "reset_within"]
