"""Before RL: the env check, held-out evaluation on the training engine, the supervised warm-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlvr.config import TrainConfig
from rlvr.config_loader import merge
from rlvr.distributed import barrier
from rlvr.learner import DistInfo


def check_env(config: TrainConfig) -> int | None:
    """Import the env plugins and build the env once, so a bad id or kwarg fails before work.

    Returns:
        The training env's ``num_tasks`` (the size of its task source), or None when the env
        has no such attribute (it then picks tasks from its reset seed).

    Raises:
        envs.errors.EnvError: an unknown env id (with close matches) or a rejected keyword.
    """
    import envs

    envs.import_plugins(config.env.imports)
    env = envs.make(config.env.id, **config.env.kwargs)
    try:
        num_tasks = env.get_wrapper_attr("num_tasks")
    except AttributeError:
        num_tasks = None
    finally:
        env.close()
    envs.make(config.env.id, **merge(config.env.kwargs, config.env.eval_kwargs)).close()
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1:
        return None
    return num_tasks



def suite_for_env(config: TrainConfig, tasks: int, path: Path) -> str:
    """Write a one-entry suite (the training env's held-out split) and return its path."""
    kwargs = merge(config.env.kwargs, config.env.eval_kwargs)
    split = kwargs.pop("split", "test")
    entry = {"env": config.env.id, "name": "heldout", "split": split, "n_tasks": tasks,
             "kwargs": kwargs}
    path.write_text(yaml.safe_dump({"name": "heldout", "entries": [entry]}, sort_keys=False))
    return str(path)



class HeldOut:
    """Held-out greedy evaluation on the training engine (``rlvr.evaluate.Evaluator``).

    Adds ``eval/accuracy`` (pass@1 over the suite) to the evaluator's ``eval/...`` metrics.
    """

    def __init__(self, config: TrainConfig, engine: Any, tokenizer: Any, suite: str,
                 every: int) -> None:
        from rlvr.evaluate import Evaluator

        ev = config.eval
        self.evaluator = Evaluator(
            suite, engine=engine, tokenizer=tokenizer, every=every, samples=ev.samples,
            max_turns=config.rollout.runner.max_turns, max_new_tokens=ev.max_new_tokens,
            seed=config.trainer.seed, progress=False,
        )

    @staticmethod
    def _with_accuracy(metrics: dict[str, float]) -> dict[str, float]:
        for key in ("eval/overall/pass@1", "eval/heldout/pass@1"):
            if key in metrics:
                return {**metrics, "eval/accuracy": metrics[key]}
        return metrics

    def maybe_evaluate(self, step: int) -> dict[str, float]:
        """The metrics when ``step`` is due, else ``{}``."""
        return self._with_accuracy(self.evaluator.maybe_evaluate(step) or {})

    def evaluate(self, step: int) -> dict[str, float]:
        """Evaluate now."""
        return self._with_accuracy(self.evaluator.evaluate(step))



def warm_up(config: TrainConfig, base_dir: Path, tokenizer: Any, info: DistInfo,
            log: Any) -> tuple[Path, Any]:
    """Run the supervised warm-up on rank 0 and save it as ``output_dir/sft_model``.

    Returns:
        ``(policy_dir, SFTResult or None)``: the directory RL starts from (the base model when
        the warm-up is off, or its saved result when resuming) and what the warm-up did.
    """
    from agents.hf_engine import TransformersEngine
    from rlvr.learner import load_causal_lm
    from rlvr.sft import save_model, supervised_warmup

    target = Path(config.trainer.output_dir) / "sft_model"
    if not config.sft.enabled:
        return base_dir, None
    if (target / "config.json").is_file():
        log(f"[sft] reusing the warm-up model in {target}")
        return target, None
    result = None
    if info.is_main:
        model = load_causal_lm(base_dir, info.device)
        engine = TransformersEngine(model, tokenizer, max_batch_size=64)
        suite = suite_for_env(config, config.sft.eval_tasks, target.parent / "sft_suite.yaml")
        heldout = HeldOut(config, engine, tokenizer, suite, every=0)
        examples, encode = warmup_examples(config, tokenizer)
        try:
            result = supervised_warmup(
                model, tokenizer, examples, config.sft, encode=encode,
                seed=config.trainer.seed, evaluate=lambda: heldout.evaluate(0)["eval/accuracy"],
                log=log, progress=config.trainer.progress,
            )
        finally:
            engine.close()
        save_model(model, tokenizer, target)
    barrier()
    return target, result


def warmup_examples(config: TrainConfig, tokenizer: Any) -> tuple[Any, Any]:
    """The warm-up's example stream and its encoder for ``sft.demos`` (None: the default)."""
    from rlvr.sft import TaskExamples

    if config.sft.demos == "calculator":
        from rlvr.training.demonstrations import CalculatorDemonstrations

        demos = CalculatorDemonstrations(
            config.env.id, config.env.kwargs, tokenizer, num_demos=config.sft.num_demos,
            seed=config.trainer.seed, stop_at_tool_call=config.rollout.runner.stop_at_tool_call)
        return demos, lambda demo: demo.encoded()
    return TaskExamples(config.env.id, config.env.kwargs), None
