"""Checks of what a run needs that the config's types cannot say, made before any work.

The loader checks every key and value (``rlvr.config.loader``); these check what they point at:
``model.path`` is a HuggingFace model folder or a ``.gguf`` file, ``trainer.device`` exists on
this machine, ``eval.suite`` names a suite, ``trainer.output_dir`` takes a file. Each failure is a
``ConfigError`` naming the key and what to do, raised before the model is built or the warm-up
starts (``rlvr.training.warmup.check_env``).
"""

from __future__ import annotations

from pathlib import Path

from rlvr.config import TrainConfig
from rlvr.errors import ConfigError, RlvrError

#: Files one of which a tokenizer saved with ``save_pretrained`` leaves in its folder.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def preflight(config: TrainConfig) -> None:
    """Check ``model.path``, ``trainer.device`` and ``eval.suite``.

    Raises:
        ConfigError: the message names the key and what to do.
    """
    check_model_dir(config.model.path)
    check_device(config.trainer.device)
    check_output_dir(config.trainer.output_dir)
    if config.eval.suite:
        from rlvr.envs.errors import EnvError
        from rlvr.eval.evaluator import load_suite_entries

        try:
            load_suite_entries(config.eval.suite)
        except (RlvrError, EnvError, OSError) as err:
            raise ConfigError(f"eval.suite: {err}", key="eval.suite") from None


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


__all__ = ["TOKENIZER_FILES", "check_device", "check_model_dir", "check_output_dir",
           "preflight"]
