"""Before RL: the supervised warm-up (scored by held-out evaluation) and its answers' check."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.config import TrainConfig
from rlvr.config.loader import merge
from rlvr.config.schema import EnvConfig
from rlvr.distributed import barrier
from rlvr.learner import DistInfo
from rlvr.training.heldout import heldout_evaluator


def check_warmup_answers(env_cfg: EnvConfig, seed: int) -> None:
    """The warm-up on gold answers needs an env that gives them: check one task now.

    ``env_cfg`` is the ``env`` section; ``seed`` (``trainer.seed``) resets its first task.

    Raises:
        ConfigError: the env's ``demonstration`` gives no answer for its first task (names
            ``sft.enabled`` and, for a task env, the fields its task has).
    """
    from rlvr.errors import ConfigError
    from rlvr.sft import TaskExamples

    examples = TaskExamples(env_cfg.id, env_cfg.kwargs)
    try:
        examples.env.reset(seed=seed)
        demonstrate = getattr(examples.env.unwrapped, "demonstration", None)
        answer = demonstrate([], use_tool=False) if demonstrate is not None else None
        task = getattr(examples.env.unwrapped, "task", None) if answer is None else None
    except Exception as exc:
        raise ConfigError(
            f"sft.enabled=true: the warm-up takes its examples from env {env_cfg.id!r}, "
            f"whose reset raised {type(exc).__name__}: {exc}; fix the env (rlvr check-env "
            f"{env_cfg.id}) or set sft.enabled=false", key="sft.enabled") from exc
    finally:
        examples.env.close()
    if answer is not None:
        return
    fields = ", ".join(map(str, task)) if isinstance(task, dict) else "no task dict"
    raise ConfigError(
        f"sft.enabled=true (the supervised warm-up on gold answers) needs env {env_cfg.id!r} "
        f"to give each task's answer (TextEnv.demonstration; task envs give task['answer']), "
        f"the reply it trains on; its task has: {fields}. Set sft.enabled=false, or add an "
        "'answer' to each task", key="sft.enabled")


def warm_up(config: TrainConfig, base_dir: Path, tokenizer: Any, info: DistInfo,
            log: Any) -> tuple[Path, Any]:
    """Run the supervised warm-up on rank 0 and save it as ``output_dir/sft_model``.

    Returns:
        ``(policy_dir, SFTResult or None)``: the directory RL starts from (the base model when
        the warm-up is off, or its saved result when resuming) and what the warm-up did.
    """
    from rlvr.learner import load_causal_lm
    from rlvr.sft import save_model, supervised_warmup

    target = Path(config.trainer.output_dir) / "sft_model"
    if not config.sft.enabled:
        return base_dir, None
    record = warmup_record(config, base_dir)
    if (target / "config.json").is_file():
        made_with = _read_record(target / WARMUP_RECORD)
        if made_with == record:
            log(f"[sft] reusing the warm-up model in {target} (made with this config)")
            return target, None
        log(f"[sft] the warm-up model in {target} was made with another config "
            f"({_record_diff(made_with, record)}): warming up again")
    result = None
    if info.is_main:
        model = load_causal_lm(base_dir, info.device)
        staged = config.sft.mixed_steps > 0
        examples, encode = warmup_examples(config, tokenizer,
                                           tool_call_share=1.0 if staged else None)
        with contextlib.ExitStack() as stack:
            build_check, check_name = WARMUP_CHECKS[config.sft.check]
            check = build_check(config, tokenizer, model, stack)
            result = supervised_warmup(
                model, tokenizer, examples, config.sft, encode=encode,
                seed=config.trainer.seed, evaluate=check, log=log,
                progress=config.trainer.progress, check_name=check_name,
            )
        if staged:
            result = mixed_stage(model, tokenizer, config, result, log)
        save_model(model, tokenizer, target)
        (target / WARMUP_RECORD).write_text(json.dumps(record, indent=1, sort_keys=True))
    barrier()
    return target, result


#: The config a warm-up model was made with, saved beside it: it is reused only when it matches.
WARMUP_RECORD = "rlvr_warmup.json"


def warmup_record(config: TrainConfig, base_dir: Path) -> dict[str, Any]:
    """What the warm-up model depends on: the base model, ``sft``, the env and the seed."""
    from rlvr.config.loader import to_dict

    return json.loads(json.dumps({
        "base_model": str(base_dir), "model": to_dict(config.model), "sft": to_dict(config.sft),
        "env": {"id": config.env.id, "kwargs": config.env.kwargs},
        "seed": config.trainer.seed,
        "stop_at_tool_call": config.rollout.runner.stop_at_tool_call,
    }, default=str))


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _record_diff(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    if old is None:
        return "no record of it"
    return "differs in " + ", ".join(sorted(k for k in new if old.get(k) != new[k]))


def greedy_check(config: TrainConfig, tokenizer: Any, model: Any,
                 stack: contextlib.ExitStack) -> Callable[[], float]:
    """The ``sft.check: greedy`` accuracy check: greedy play of held-out tasks, as evaluation."""
    from rlvr.agents.hf.engine import TransformersEngine

    engine = TransformersEngine(model, tokenizer, max_batch_size=64)
    stack.callback(engine.close)
    heldout = heldout_evaluator(config, engine, tokenizer, suite=None,
                                tasks=config.sft.eval_tasks, every=0)
    stack.callback(heldout.close)
    return lambda: heldout.evaluate(0)["eval/accuracy"]


def exact_match_check(config: TrainConfig, tokenizer: Any, model: Any,
                      stack: contextlib.ExitStack) -> Callable[[], float]:
    """The ``sft.check: exact_match`` accuracy check of ``model``.

    The gold answers of the first ``sft.eval_tasks`` tasks of the held-out split (those greedy
    evaluation plays) are collated once and scored by ``rlvr.sft.exact_match_rate``.
    """
    from rlvr.sft import MemoEncoder, TaskExamples, collate, exact_match_rate, pad_id

    kwargs = merge(config.env.kwargs, config.env.eval_kwargs)
    kwargs.setdefault("split", "test")  # as suite_for_env's entry
    held_out = TaskExamples(config.env.id, kwargs)
    try:
        n = min(config.sft.eval_tasks, _task_count(held_out.env, config.sft.eval_tasks))
        encode = MemoEncoder(tokenizer)
        batch = collate([encode(*held_out.at(i)) for i in range(n)], pad_id(tokenizer))
    finally:
        held_out.env.close()
    return lambda: exact_match_rate(model, batch)


def _task_count(env: Any, default: int) -> int:
    """The env's ``num_tasks``; ``default`` for an env without a count.

    Such an env draws its tasks by seed, as ``rlvr/OpenEnv-v0`` does: ``task_index`` ``i`` is
    then the task of seed ``i``.
    """
    try:
        return int(env.get_wrapper_attr("num_tasks"))
    except AttributeError:
        return default


def tool_path_check(config: TrainConfig, tokenizer: Any, model: Any,
                    stack: contextlib.ExitStack) -> Callable[[], float]:
    """The ``sft.check: tool_path`` accuracy check of ``model``.

    ``sft.eval_tasks`` scripted demonstrations played on the held-out split, every one calling
    a tool, are collated once without their first model token (``after_decision``) and
    scored by ``rlvr.sft.exact_match_rate``: the share the model would carry out exactly,
    call and copied answer, once it has decided to call.
    """
    from rlvr.sft import collate, exact_match_rate, pad_id
    from rlvr.training.demonstrations import ScriptedDemonstrations

    kwargs = merge(config.env.kwargs, config.env.eval_kwargs)
    kwargs.setdefault("split", "test")  # as suite_for_env's entry
    demos = ScriptedDemonstrations(
        config.env.id, kwargs, tokenizer, num_demos=config.sft.eval_tasks,
        seed=config.trainer.seed, stop_at_tool_call=config.rollout.runner.stop_at_tool_call)
    batch = collate([demo.after_decision() for demo in demos.pool], pad_id(tokenizer))
    return lambda: exact_match_rate(model, batch)


def mixed_stage(model: Any, tokenizer: Any, config: TrainConfig, first: Any, log: Any) -> Any:
    """The second stage of a staged warm-up: ``sft.mixed_steps`` steps on the mixed pool.

    The first stage trained on demonstrations that all call the tool, up to the check's target;
    this one trains on the same tasks with only ``sft.tool_call_share`` of them calling, with
    no check (the accuracy before RL is measured by greedy evaluation), a fresh optimizer and
    the same example-stream seed.

    Returns:
        The whole warm-up's ``SFTResult``: the steps and seconds of both stages, the last loss,
        and the first stage's checks.
    """
    import dataclasses

    from rlvr.sft import SFTResult, supervised_warmup

    examples, encode = warmup_examples(config, tokenizer)
    stage = dataclasses.replace(config.sft, max_steps=config.sft.mixed_steps, eval_every=0,
                                target_accuracy=None)
    log(f"[sft] mixed stage: {config.sft.mixed_steps} steps, "
        f"{config.sft.tool_call_share:.0%} of the demonstrations call the tool")
    second = supervised_warmup(model, tokenizer, examples, stage, encode=encode,
                               seed=config.trainer.seed, evaluate=None, log=log,
                               progress=config.trainer.progress)
    return SFTResult(steps=first.steps + second.steps, loss=second.loss,
                     accuracy=first.accuracy, seconds=first.seconds + second.seconds,
                     history=first.history)


def warmup_examples(config: TrainConfig, tokenizer: Any, *,
                    tool_call_share: float | None = None) -> tuple[Any, Any]:
    """The warm-up's example stream and its encoder for ``sft.demos`` (None: the default).

    ``tool_call_share`` overrides ``sft.tool_call_share`` for a scripted pool.
    """
    return WARMUP_DEMOS[config.sft.demos](config, tokenizer, tool_call_share)


def answer_examples(config: TrainConfig, tokenizer: Any,
                    tool_call_share: float | None) -> tuple[Any, Any]:
    """``sft.demos: answers``: opening messages -> the env's gold answer, fresh tasks."""
    from rlvr.sft import TaskExamples

    return TaskExamples(config.env.id, config.env.kwargs), None


def scripted_examples(config: TrainConfig, tokenizer: Any,
                      tool_call_share: float | None) -> tuple[Any, Any]:
    """``sft.demos: scripted``: a fixed pool of the env's scripted-teacher episodes."""
    from rlvr.training.demonstrations import ScriptedDemonstrations

    share = config.sft.tool_call_share if tool_call_share is None else tool_call_share
    demos = ScriptedDemonstrations(
        config.env.id, config.env.kwargs, tokenizer, num_demos=config.sft.num_demos,
        seed=config.trainer.seed, stop_at_tool_call=config.rollout.runner.stop_at_tool_call,
        tool_call_share=share)
    return demos, lambda demo: demo.encoded()


#: ``sft.check`` name -> (builder of the check, its name in logs). A builder returns a function
#: of no arguments giving the accuracy; it may register clean-ups on the exit stack.
WARMUP_CHECKS: dict[str, tuple[Callable[..., Callable[[], float]], str]] = {
    "greedy": (greedy_check, "held-out accuracy"),
    "exact_match": (exact_match_check, "held-out exact match"),
    "tool_path": (tool_path_check, "held-out tool-path exact match"),
}
#: ``sft.demos`` name -> the builder of the warm-up's example stream and its encoder.
WARMUP_DEMOS: dict[str, Callable[[TrainConfig, Any, float | None], tuple[Any, Any]]] = {
    "answers": answer_examples,
    "scripted": scripted_examples,
}
