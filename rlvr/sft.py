"""A short supervised warm-up on the task format, before RL.

A freshly initialised model never produces a parseable answer, so RL has no reward to learn from.
The warm-up teaches the format: teacher-forced cross-entropy on chat-formatted
``prompt -> answer`` pairs, with the loss only on the assistant's tokens (the answer and the
end-of-turn token; the prompt and the chat template's generation prompt are context). It stops
as soon as held-out greedy accuracy reaches ``SFTConfig.target_accuracy``, so that RL still has
room to show what it adds.

The warm-up trains a plain HuggingFace module in one process (the model is small when it is
needed at all) and the trainer saves the result as a HF directory the learner then loads.
"""

from __future__ import annotations

import inspect
import json
import math
import random
import shutil
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.config import SFTConfig
from rlvr.errors import ConfigError

Message = dict[str, Any]
#: How many distinct prompts (and answers) the warm-up's encoder keeps rendered.
MEMO_SIZE = 1 << 16
#: One supervised example: the opening chat messages and the assistant's answer text.
Example = tuple[list[Message], str]


@dataclass(kw_only=True)
class SFTResult:
    """What the warm-up did.

    Attributes:
        steps: optimizer steps taken.
        loss: the last step's mean token cross-entropy.
        accuracy: the last held-out accuracy measured (None if never measured).
        seconds: wall-clock time of the warm-up.
        history: ``(step, accuracy)`` of every evaluation.
    """

    steps: int
    loss: float
    accuracy: float | None
    seconds: float
    history: list[tuple[int, float]]


def encode_example(tokenizer: Any, messages: list[Message], answer: str) -> tuple[list[int], int]:
    """Token ids of ``messages`` + generation prompt + ``answer`` + end of turn.

    Args:
        tokenizer: a HF tokenizer with a chat template and an ``eos_token_id`` that ends a turn.
        messages: the opening messages (system/user).
        answer: the assistant's text.

    Returns:
        ``(ids, prompt_len)``: the full sequence and how many leading ids are the prompt (the
        ids after it are trained on).
    """
    prompt = _prompt_ids(tokenizer, messages)
    return prompt + _answer_ids(tokenizer, answer), len(prompt)


def _prompt_ids(tokenizer: Any, messages: list[Message]) -> list[int]:
    """``messages`` rendered with the generation prompt."""
    prompt = tokenizer.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, return_dict=False
    )
    if not isinstance(prompt, list):  # some tokenizers return a BatchEncoding
        prompt = list(prompt["input_ids"])
    return list(prompt)


def _answer_ids(tokenizer: Any, answer: str) -> list[int]:
    """``answer``'s tokens followed by the end-of-turn token."""
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    return list(answer_ids) + [int(tokenizer.eos_token_id)]


class MemoEncoder:
    """``encode_example`` with memoised renderings (the same ids, far fewer template renders).

    Rendering a chat template costs far more than a training step's share of one example, and
    a task stream repeats openings and answers; a rendering depends only on the messages (and
    the answer text), so each distinct one is computed once.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._prompts: dict[str, list[int]] = {}
        self._answers: dict[str, list[int]] = {}

    def __call__(self, messages: list[Message], answer: str) -> tuple[list[int], int]:
        """The ``encode_example(tokenizer, messages, answer)`` of this tokenizer."""
        key = json.dumps(messages, sort_keys=True, default=str)
        prompt = self._prompts.get(key)
        if prompt is None:
            if len(self._prompts) >= MEMO_SIZE:
                self._prompts.clear()
            prompt = self._prompts[key] = _prompt_ids(self.tokenizer, messages)
        answer_ids = self._answers.get(answer)
        if answer_ids is None:
            if len(self._answers) >= MEMO_SIZE:
                self._answers.clear()
            answer_ids = self._answers[answer] = _answer_ids(self.tokenizer, answer)
        return prompt + answer_ids, len(prompt)


def pad_id(tokenizer: Any) -> int:
    """The tokenizer's padding id, its end-of-turn id when it has none."""
    pad = tokenizer.pad_token_id
    return int(tokenizer.eos_token_id if pad is None else pad)


def collate(
    encoded: Sequence[tuple[list[int], int | list[int]]], pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad encoded examples.

    Args:
        encoded: ``(ids, prompt_len)`` pairs (every id after the prompt is trained on) or
            ``(ids, mask)`` pairs with a per-token 0/1 mask aligned with ``ids`` (multi-turn
            demonstrations: 1 on the model's tokens, 0 on env tokens).
        pad_token_id: the padding id.

    Returns:
        ``input_ids (B, T)``, ``attention_mask (B, T)`` and ``loss_mask (B, T - 1)``: 1 where
        position ``t`` predicts an answer/end-of-turn token ``input_ids[:, t + 1]``.
    """
    width = max(len(ids) for ids, _ in encoded)
    ids_rows, attn_rows, loss_rows = [], [], []
    for ids, prompt_len in encoded:  # padded Python lists, then one tensor per field
        pad = width - len(ids)
        ids_rows.append([*ids, *([pad_token_id] * pad)])
        attn_rows.append([1] * len(ids) + [0] * pad)
        if isinstance(prompt_len, int):
            trained = [0] * (prompt_len - 1) + [1] * (len(ids) - prompt_len)
        else:  # a per-token mask: position t predicts token t + 1
            trained = list(prompt_len[1:])
        loss_rows.append(trained + [0] * (width - 1 - len(trained)))
    return (torch.tensor(ids_rows, dtype=torch.long), torch.tensor(attn_rows, dtype=torch.long),
            torch.tensor(loss_rows, dtype=torch.float))


def answer_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Mean cross-entropy over the assistant tokens of a collated batch (a scalar)."""
    return answer_loss_and_exact(model, batch)[0]


def answer_loss_and_exact(
    model: torch.nn.Module, batch: tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``answer_loss`` and, from the same forward, how many rows are exact.

    Returns:
        ``(loss, exact)``: the mean cross-entropy over the assistant tokens (a scalar with
        grad) and the number of rows whose every trained token is the argmax (``exact_match_rate``
        times the rows, as a detached scalar tensor: no sync with the device).
    """
    logits, targets, loss_mask = _trained_logits(model, batch)
    ce = torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none",
    ).view_as(loss_mask)
    with torch.no_grad():
        exact = _exact_rows(logits, targets, loss_mask).sum()
    return (ce * loss_mask).sum() / loss_mask.sum().clamp(min=1.0), exact


def _exact_rows(logits: torch.Tensor, targets: torch.Tensor, loss_mask: torch.Tensor
                ) -> torch.Tensor:
    """``(B,)`` bool: every trained position's argmax is its target token."""
    return ((logits.argmax(dim=-1) == targets) | (loss_mask == 0)).all(dim=1)


@torch.no_grad()
def exact_match_rate(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> float:
    """Fraction of a collated batch's rows whose every trained token is the model's argmax.

    One teacher-forced forward: a row counts when, at every position of ``loss_mask``, the most
    likely next token given the gold prefix is the gold token. Greedy decoding then reproduces the
    gold answer and its end-of-turn token exactly, so this is a lower bound of greedy accuracy
    (greedy can also reach an equivalent answer by another path) at the cost of one forward
    instead of a generation.
    """
    logits, targets, loss_mask = _trained_logits(model, batch)
    return int(_exact_rows(logits, targets, loss_mask).sum().item()) / logits.shape[0]


def _trained_logits(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The logits of the positions some row trains on, their targets and their loss mask.

    A collated batch trains on a few columns (a short answer after a long prompt: 9 of the
    quickstart's 21 predicting positions), so the model is asked for those columns' logits only
    (``logits_to_keep``; models whose forward lacks it return all and are cut here): the LM head,
    the cross-entropy and their backward run on fewer positions, with the same values.

    Returns:
        ``(logits (B, K, V), targets (B, K), loss_mask (B, K))`` over the K kept columns.
    """
    input_ids, attention_mask, loss_mask = (t.to(_device(model)) for t in batch)
    cols = torch.nonzero(loss_mask.any(dim=0)).flatten()
    if not cols.numel():  # nothing trained: keep one column so the loss has a graph
        cols = torch.zeros(1, dtype=torch.long, device=input_ids.device)
    if _keeps_logits(type(model)):
        logits = model(input_ids=input_ids, attention_mask=attention_mask,
                       logits_to_keep=cols).logits
    else:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, cols]
    return logits, input_ids[:, cols + 1], loss_mask[:, cols]


def _keeps_logits(model_class: type[torch.nn.Module]) -> bool:
    """Whether ``model_class.forward`` takes ``logits_to_keep`` (transformers' causal LMs do).

    Read once per class (a signature costs more than the rest of the step's Python around it).
    """
    keeps = _KEEPS_LOGITS.get(model_class)
    if keeps is None:
        keeps = _KEEPS_LOGITS[model_class] = (
            "logits_to_keep" in inspect.signature(model_class.forward).parameters
        )
    return keeps


_KEEPS_LOGITS: dict[type[torch.nn.Module], bool] = {}


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def supervised_warmup(
    model: torch.nn.Module,
    tokenizer: Any,
    examples: Callable[[random.Random], Any],
    config: SFTConfig,
    *,
    seed: int,
    encode: Callable[[Any], tuple[list[int], int | list[int]]] | None = None,
    evaluate: Callable[[], float] | None = None,
    log: Callable[[str], None] = print,
    progress: bool = False,
    check_name: str = "held-out accuracy",
) -> SFTResult:
    """Train ``model`` in place on the task format until the target accuracy or ``max_steps``.

    Args:
        model: a HF causal LM (``model(input_ids, attention_mask).logits``), in eval mode after.
        tokenizer: its tokenizer (chat template, ``eos_token_id``, ``pad_token_id``).
        examples: draws one training example from the given RNG.
        config: steps, batch size, learning rate, evaluation cadence and target.
        seed: seeds the example stream.
        encode: turns an example into ``collate``'s ``(ids, prompt_len or mask)``; default
            ``encode_example`` of an ``Example`` (multi-turn demonstrations come encoded:
            ``rlvr.training.demonstrations``).
        evaluate: held-out greedy accuracy of ``model`` in [0, 1]; called every
            ``config.eval_every`` steps (unless ``config.check_gate`` skips it) and at the end.
            None skips evaluation (and the target).
        log: where progress lines go (one per evaluation without a progress bar, else one at
            the end).
        progress: show a tqdm progress bar.
        check_name: what ``evaluate`` measures, for the log lines.

    Returns:
        An ``SFTResult``.

    Raises:
        ConfigError: the loss became non-finite (the learning rate is too high).
    """
    from rlvr.learner.optim import adamw_kernel
    from rlvr.progress import progress_bar

    rng = random.Random(f"sft:{seed}")
    memo = MemoEncoder(tokenizer)  # the same ids as encode_example, rendered once per example
    encode = encode or (lambda example: memo(*example))
    params = [p for p in model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay,
                              **adamw_kernel(params))
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, (s + 1) / 10))
    pad = pad_id(tokenizer)
    t0 = time.perf_counter()
    history: list[tuple[int, float]] = []
    accuracy: float | None = None
    loss_value = math.nan
    # exact rows of each of the last eval_every training batches, for check_gate
    recent: deque[torch.Tensor] = deque(maxlen=max(1, config.eval_every))
    gate = None
    if config.check_gate and config.target_accuracy is not None:
        gate = config.check_gate * config.target_accuracy
    model.train()
    bar = progress_bar(total=config.max_steps, desc="warm-up", unit="step", disable=not progress)
    for step in range(1, config.max_steps + 1):
        batch = collate([encode(examples(rng)) for _ in range(config.batch_size)], pad)
        loss, exact = answer_loss_and_exact(model, batch)
        recent.append(exact)
        if not torch.isfinite(loss):
            raise ConfigError(f"sft: the loss became {loss.item()} at step {step}; lower sft.lr")
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optim.step()
        sched.step()
        loss_value = float(loss.item())
        bar.update(1)
        last = step == config.max_steps
        due = (config.eval_every and step % config.eval_every == 0) or last
        if evaluate is None or not due:
            continue
        train_exact = float(sum(recent)) / (len(recent) * config.batch_size)
        if gate is not None and not last and train_exact < gate:
            if not progress:
                log(f"[sft] step {step:4d}  loss {loss_value:.3f}  training-batch exact match "
                    f"{train_exact:.1%} < gate {gate:.1%}: check skipped")
            continue
        model.eval()
        accuracy = float(evaluate())
        model.train()
        history.append((step, accuracy))
        bar.set_postfix(loss=f"{loss_value:.3f}", acc=f"{accuracy:.1%}")
        if not progress:
            log(f"[sft] step {step:4d}  loss {loss_value:.3f}  training-batch exact match "
                f"{train_exact:.1%}  {check_name} {accuracy:.1%}")
        if config.target_accuracy is not None and accuracy >= config.target_accuracy:
            break
    bar.close()
    model.eval()
    result = SFTResult(steps=step, loss=loss_value, accuracy=accuracy,
                       seconds=time.perf_counter() - t0, history=history)
    acc = "n/a" if accuracy is None else f"{accuracy:.1%}"
    log(f"[sft] warm-up done: {result.steps} steps in {result.seconds:.1f} s, loss "
        f"{loss_value:.3f}, {check_name} {acc}")
    return result


class TaskExamples:
    """Supervised examples from the env's own tasks: ``(opening messages, gold answer)``.

    The answer is the env's scripted teacher's direct answer (``TextEnv.demonstration`` without
    tools: the built-in task envs give their task's gold answer).

    Args:
        env_id: a registered env id.
        env_kwargs: its constructor arguments.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        from rlvr import envs

        self.env = envs.make(env_id, **env_kwargs)
        self.env_id = env_id

    def __call__(self, rng: random.Random) -> Example:
        """Reset the env with a seed drawn from ``rng``; return its messages and gold answer."""
        return self._example(seed=rng.randrange(2**31))

    def at(self, task_index: int) -> Example:
        """The messages and gold answer of the env's task ``task_index``."""
        return self._example(options={"task_index": task_index})

    def _example(self, **reset: Any) -> Example:
        messages, _ = self.env.reset(**reset)
        demonstrate = getattr(self.env.unwrapped, "demonstration", None)
        answer = demonstrate([], use_tool=False) if demonstrate is not None else None
        if answer is None:
            raise ConfigError(
                f"sft.enabled needs an env that gives its tasks' answers (TextEnv.demonstration; "
                f"task envs do when a task has an 'answer'); {self.env_id} does not; set "
                "sft.enabled=false"
            )
        return list(messages), answer


def save_model(model: torch.nn.Module, tokenizer: Any, target: Path) -> Path:
    """Save a HF model and tokenizer to ``target`` atomically (a hidden sibling renamed)."""
    tmp = target.parent / f".{target.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)  # type: ignore[operator]
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target
