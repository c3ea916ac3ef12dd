"""One preflight: every check of what a run needs, made once before any work; the run plan.

The loader checks every key and value (``rlvr.config.loader``); ``preflight`` checks what they
point at, once per run, and returns the ``RunPlan`` the trainer builds from: ``model.path`` is a
HuggingFace model folder or a ``.gguf`` file, ``trainer.device`` exists on this machine,
``trainer.output_dir`` takes a file and what the run may do with it (a used folder, a resume's
changed keys: ``rlvr.training.run_dir``), ``eval.suite`` names a suite, the env builds (its id,
kwargs and held-out kwargs; its task count), the held-out split is not the training set
(``rlvr.training.heldout``) and a warm-up on gold answers gets answers
(``rlvr.training.warmup``). What needs the policy's tokenizer runs once the model folder exists,
from the plan (``RunPlan.check_prompts``: prompts that fit the model's context,
``rlvr.training.context``). Each failure is a ``ConfigError`` naming the key and what to do (or
the env's own error), raised before the model is built or the warm-up starts.

``rlvr train`` runs ``preflight`` before building the trainer and hands it the plan; a
``Trainer`` built from Python without one runs it itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.config import TrainConfig
from rlvr.config.loader import merge
from rlvr.config.schema import EnvConfig
from rlvr.errors import ConfigError, RlvrError
from rlvr.training.run_dir import RunDirPlan, check_run_dir

#: Files one of which a tokenizer saved with ``save_pretrained`` leaves in its folder.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass(frozen=True)
class RunPlan:
    """What the preflight found: the trainer builds the run from it.

    Attributes:
        config: the config as it runs (a resume keeps its checkpoint's schedule,
            ``rlvr.training.run_dir.compare_for_resume``).
        num_tasks: the training env's task count (the size of its task source), or None when
            the env has none (it then picks tasks from its reset seed).
        folder: what the run does with ``trainer.output_dir``: files of another run to delete
            (``trainer.overwrite``) and lines to log.
    """

    config: TrainConfig
    num_tasks: int | None
    folder: RunDirPlan

    def check_prompts(self, tokenizer: Any, model_dir: str | Path, log: Any) -> None:
        """Refuse prompts the model's context cannot take (``rlvr.training.context``).

        Run once the model folder exists (it needs the policy's tokenizer and config).
        """
        from rlvr.training.context import check_context

        cfg = self.config
        check_context(cfg.env, cfg.rollout.runner, tokenizer, model_dir, log,
                      heldout_split=not cfg.eval.suite)


def preflight(config: TrainConfig) -> RunPlan:
    """Run every pre-run check of ``config`` once; the plan the run is built from.

    Raises:
        ConfigError: the message names the key and what to do.
        rlvr.envs.errors.EnvError: an unknown env id (with close matches) or a rejected keyword.
        RunStoppedError: the output folder holds another run (``rlvr.training.run_dir``).
    """
    num_tasks = check_targets(config)
    folder = check_run_dir(config)  # a used folder, a resume's changed keys (no writes)
    return RunPlan(config=folder.config or config, num_tasks=num_tasks, folder=folder)


def check_targets(config: TrainConfig) -> int | None:
    """Check what ``config`` points at (all of ``preflight`` but the run folder's runs).

    The model folder, the device, the output folder takes a file, the eval suite, the env
    (import its plugins, build it once: a bad id or kwarg fails here), the held-out split and,
    for a warm-up on gold answers, that its tasks have an ``answer``.

    Returns:
        The training env's task count (``env_task_count``).

    Raises:
        ConfigError: the message names the key and what to do.
        rlvr.envs.errors.EnvError: an unknown env id (with close matches) or a rejected keyword.
    """
    check_model_dir(config.model.path)
    check_device(config.trainer.device)
    check_output_dir(config.trainer.output_dir)
    check_suite(config.eval.suite)
    num_tasks = env_task_count(config.env)
    from rlvr.training.heldout import check_heldout
    from rlvr.training.warmup import check_warmup_answers

    check_heldout(config)  # a held-out set that is the training set is refused
    if config.sft.enabled and config.sft.demos == "answers":
        check_warmup_answers(config.env, config.trainer.seed)
    return num_tasks


def check_suite(suite: str | None) -> None:
    """``eval.suite`` (when set) names a suite that loads."""
    if not suite:
        return
    from rlvr.envs.errors import EnvError
    from rlvr.eval.evaluator import load_suite_entries

    try:
        load_suite_entries(suite)
    except (RlvrError, EnvError, OSError) as err:
        raise ConfigError(f"eval.suite: {err}", key="eval.suite") from None


def env_task_count(env_cfg: EnvConfig) -> int | None:
    """Build the training env once (and with its held-out kwargs); its task count.

    Imports ``env.imports`` first; a bad id or keyword fails here, before any work.

    Returns:
        The env's ``num_tasks`` (the size of its task source), or None when it has no such
        attribute or not a positive int (it then picks tasks from its reset seed).
    """
    from rlvr import envs

    envs.import_plugins(env_cfg.imports)
    env = envs.make(env_cfg.id, **env_cfg.kwargs)
    try:
        num_tasks = env.get_wrapper_attr("num_tasks")
    except AttributeError:
        num_tasks = None
    finally:
        env.close()
    envs.make(env_cfg.id, **merge(env_cfg.kwargs, env_cfg.eval_kwargs)).close()
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1:
        return None
    return num_tasks


def check_model_dir(path: str | None) -> None:
    """``model.path`` is None (the tiny model), a HF folder with a tokenizer, or a .gguf file.

    A ``.gguf`` file is imported into a cached folder later (``rlvr.gguf_import``); here it must
    exist and the ``gguf`` package must be importable.
    """
    if path is None:
        return
    from rlvr.gguf_import import check_gguf_file, is_gguf

    if is_gguf(path):
        check_gguf_file(path, key="model.path")
        return
    target = Path(path).expanduser()
    hint = ("give a folder saved with save_pretrained (config.json, weights, tokenizer files) "
            "or a .gguf file, or leave model.path out for the built-in tiny model")
    if not target.exists():
        raise ConfigError(f"model.path: {path!r} does not exist (rlvr loads local folders "
                          f"only, never from the hub); {hint}", key="model.path")
    if not target.is_dir() or not (target / "config.json").is_file():
        raise ConfigError(f"model.path: {path!r} is not a HuggingFace model folder (no "
                          f"config.json); {hint}", key="model.path")
    if not any((target / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"model.path: {path!r} has no tokenizer (none of "
                          f"{', '.join(TOKENIZER_FILES)}); {hint}", key="model.path")


def check_output_dir(path: str) -> None:
    """``trainer.output_dir`` (or the folder that would hold it) takes a file: write one."""
    import os
    import tempfile

    target = Path(path).expanduser()
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"trainer.output_dir: {probe} is not a folder", key="trainer.output_dir")
    try:
        fd, name = tempfile.mkstemp(prefix=".rlvr-write-check-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise ConfigError(
            f"trainer.output_dir: cannot write in {probe} ({exc.strerror or exc}); the run "
            "writes its checkpoints and metrics there: pick a writable folder",
            key="trainer.output_dir") from None


def check_device(device: str) -> None:
    """``trainer.device=cuda`` needs a CUDA device torch can see."""
    if device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        build = torch.version.cuda or "none (a CPU-only build)"
        raise ConfigError(
            f"trainer.device: 'cuda', but torch sees no CUDA device (torch {torch.__version__}, "
            f"CUDA {build}); use trainer.device=auto or cpu", key="trainer.device")


__all__ = ["TOKENIZER_FILES", "RunPlan", "check_device", "check_model_dir", "check_output_dir",
           "check_suite", "check_targets", "env_task_count", "preflight"]
