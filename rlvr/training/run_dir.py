"""One run per output folder: a lock, no silent reuse of another run's files, an honest resume.

``RunLock``: rank 0 holds an exclusive ``flock`` on ``output_dir/.rlvr.lock`` for the whole run;
a second writer is refused with the holder's pid, host and start time. The kernel drops the
lock when its process dies, so a lock left by a killed run is never in the way (the file stays,
holding the last holder's details). ``flock`` is per machine: several machines writing one
network folder are not detected.

``check_run_dir`` (every rank, before any work) decides what a run may do with the folder:

- a fresh run (``trainer.resume: false``) in a folder holding another run's files
  (``RUN_FILES``) refuses, unless ``trainer.overwrite: true``, which deletes those files first;
- ``trainer.resume: true`` compares the new config with the run's ``config.yaml``: a key that
  cannot change under a checkpoint (the model, the algorithm, the env, batch shapes...) refuses,
  naming each changed key; keys in ``RESUMABLE`` (run length, outputs, logging, held-out eval,
  env-call limits) apply and are logged. A decaying learning-rate schedule keeps the
  ``total_steps`` its checkpoint was made with: the user is told when the schedule ends before
  the new ``trainer.steps``, and ``config.yaml`` keeps the value that runs;
- ``trainer.resume: true`` without a checkpoint says so: RL starts from step 0 when the folder's
  config matches (or the folder is empty), else it refuses.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr.config import TrainConfig
from rlvr.config.loader import config_checksum_ok, from_dict, to_dict
from rlvr.errors import ConfigError, RunStoppedError
from rlvr.learner import latest_checkpoint

#: What a run writes into its folder (a folder holding any of these was used by a run).
RUN_FILES = ("config.yaml", "metrics.jsonl", "checkpoints", "sft_model", "export",
             "tensorboard", "curves.png", "episodes.html", "eval_suite.yaml",
             "mlflow.db", "mlartifacts", "mlflow_run.json", "wandb", "wandb_run_id")
#: Dotted keys (or prefixes ending with ".") that may differ on a resume: they apply from the
#: resumed step on and change nothing the checkpoint holds.
RESUMABLE = (
    "trainer.steps", "trainer.resume", "trainer.overwrite", "trainer.output_dir",
    "trainer.checkpoint_every", "trainer.keep_checkpoints", "trainer.export_at_end",
    "trainer.tensorboard", "trainer.loggers", "trainer.plot", "trainer.progress", "trainer.device",
    "trainer.threads", "trainer.max_failed_steps", "eval.", "env.imports",
    "rollout.runner.env_step_timeout_s", "rollout.runner.env_workers", "rollout.open_ahead",
    "rollout.transformers.", "rollout.sglang.", "rollout.vllm.", "rollout.max_logprob_diff",
)
#: Keys the checkpoint overrides (the restored schedule keeps its own); a change is reported.
SCHEDULE_KEYS = ("actor.optim.total_steps", "critic.optim.total_steps")
LOCK_FILE = ".rlvr.lock"


class RunLock:
    """An exclusive lock on a run folder, held until ``release`` (or the process ends).

    Raises:
        RunStoppedError: another live process holds it (the message names it).
    """

    def __init__(self, out: Path) -> None:
        import fcntl

        self.path = out / LOCK_FILE
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 4096, 0).decode(errors="replace").strip()
            os.close(self._fd)
            self._fd = None
            raise RunStoppedError(
                f"{out} is in use by another rlvr run ({holder or 'holder unknown'}); two runs "
                "must not write one folder: wait for it to end, or set another "
                "trainer.output_dir") from None
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"pid {os.getpid()} on {socket.gethostname()}, since {now}\n"
                  .encode(), 0)

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing drops the flock
            self._fd = None


@dataclass
class RunDirPlan:
    """What ``check_run_dir`` found: what to delete, what to log, the config to write.

    Attributes:
        delete: run files of another run to delete (``trainer.overwrite``).
        notices: lines to log (applied changes, an ended schedule, a missing checkpoint).
        config: the config as it runs (the schedule's ``total_steps`` of the checkpoint).
    """

    delete: list[Path] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    config: TrainConfig | None = None


def used_files(out: Path) -> list[str]:
    """The ``RUN_FILES`` present in ``out``."""
    return [name for name in RUN_FILES if (out / name).exists()]


def check_run_dir(config: TrainConfig) -> RunDirPlan:
    """Decide what this run may do with ``trainer.output_dir`` (no writes; every rank).

    Raises:
        RunStoppedError: a used folder without ``overwrite`` or ``resume``; ``resume`` without
            a checkpoint in a folder of another config.
        ConfigError: ``resume`` with a changed key that cannot apply (the message names each).
    """
    t = config.trainer
    out = Path(t.output_dir)
    used = used_files(out) if out.is_dir() else []
    plan = RunDirPlan(config=config)
    if not t.resume:
        if used == ["config.yaml"]:  # a run that stopped before it wrote anything else
            used = []
        if used and not t.overwrite:
            raise RunStoppedError(
                f"{out} already holds a run ({', '.join(used)}); rlvr never mixes two runs in "
                "one folder: continue it with trainer.resume=true, start over with "
                "trainer.overwrite=true (deletes those files), or set another "
                "trainer.output_dir")
        plan.delete = [out / name for name in used]
        if used:
            plan.notices.append(f"[rlvr] trainer.overwrite=true: deleted the previous run's "
                                f"{', '.join(used)} in {out}")
        return plan
    checkpoint = latest_checkpoint(out / "checkpoints")
    recorded = out / "config.yaml"
    if checkpoint is None:
        if used and not recorded.is_file():
            raise RunStoppedError(
                f"trainer.resume=true, but {out} has no complete checkpoint and no config.yaml "
                f"to resume from (it holds {', '.join(used)}); start over with "
                "trainer.overwrite=true, or set another trainer.output_dir")
        plan.notices.append(f"[rlvr] trainer.resume=true, but {out} has no complete checkpoint "
                            "yet: RL starts from step 0")
    if recorded.is_file():
        plan.config = compare_for_resume(config, recorded, plan.notices,
                                         checkpointed=checkpoint is not None)
    return plan


def compare_for_resume(config: TrainConfig, recorded: Path, notices: list[str], *,
                       checkpointed: bool = True) -> TrainConfig:
    """The config a resume runs with; refuses keys that changed and cannot apply.

    ``checkpointed``: a checkpoint will be loaded, restoring its learning-rate schedule (its
    ``total_steps`` is kept); without one the new schedule applies.

    Raises:
        ConfigError: a changed key outside ``RESUMABLE`` (all of them are named).
    """
    old = _flat(read_recorded(recorded))
    new = _flat(to_dict(config))
    lost = sorted(new.keys() - old.keys())
    if lost:
        raise ConfigError(
            f"trainer.resume=true, but the run's {recorded} lacks {len(lost)} key(s) "
            f"({', '.join(lost[:5])}{', ...' if len(lost) > 5 else ''}): it is truncated or was "
            "edited, so a changed key could not be told from a kept one. Restore it, or start "
            "a new run (another trainer.output_dir, or trainer.overwrite=true with "
            "trainer.resume=false)", key="trainer.resume")
    changed = sorted(k for k in new.keys() & old.keys() if new[k] != old[k])
    fixed = [k for k in changed if not _resumable(k) and k not in SCHEDULE_KEYS]
    if fixed:
        detail = "; ".join(f"{k}: {old[k]!r} -> {new[k]!r}" for k in fixed)
        raise ConfigError(
            f"trainer.resume=true with a config that differs from the run's {recorded} in keys "
            f"a checkpoint cannot take: {detail}. Resume with the run's values, or start a new "
            "run (another trainer.output_dir, or trainer.overwrite=true with "
            "trainer.resume=false)", key=fixed[0])
    applied = [k for k in changed if _resumable(k)]
    if applied:
        notices.append("[rlvr] resume applies changed keys: " + "; ".join(
            f"{k}: {old[k]!r} -> {new[k]!r}" for k in applied))
    data = to_dict(config)
    for key in SCHEDULE_KEYS if checkpointed else ():
        owner = key.split(".")[0]
        optim = getattr(config, owner).optim
        if optim.schedule == "constant" or key not in old:
            continue
        kept = old[key]
        data[owner]["optim"]["total_steps"] = kept
        if kept is not None and config.trainer.steps > kept:
            notices.append(
                f"[rlvr] NOTICE: the {owner}'s {optim.schedule} learning-rate schedule was set "
                f"for {kept} steps when the run started and the checkpoint keeps it: steps "
                f"{kept + 1}..{config.trainer.steps} run at its final rate (min_lr_ratio x lr = "
                f"{optim.min_lr_ratio * optim.lr:g})")
    runs: TrainConfig = from_dict(TrainConfig, data)
    return runs


def read_recorded(recorded: Path) -> dict[str, Any]:
    """The mapping of a run's ``config.yaml``, checked against its checksum line.

    Raises:
        ConfigError: the file does not parse, is not a mapping, or differs from what the run
            wrote (its checksum line does not match: truncated or edited by hand).
    """
    text = recorded.read_text(errors="replace")
    fix = ("Restore it, or start a new run (another trainer.output_dir, or "
           "trainer.overwrite=true with trainer.resume=false)")
    if config_checksum_ok(text) is False:
        raise ConfigError(
            f"trainer.resume=true, but the run's {recorded} changed after the run wrote it (its "
            f"checksum line does not match): the resume check cannot trust it. {fix}; if you "
            "restored it by hand, delete its last line (the checksum) to resume with the values "
            "it holds", key="trainer.resume")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"trainer.resume=true, but the run's {recorded} is not valid YAML "
                          f"({first}). {fix}", key="trainer.resume") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"trainer.resume=true, but the run's {recorded} holds no config "
                          f"mapping. {fix}", key="trainer.resume")
    return dict(data)


def _resumable(key: str) -> bool:
    return any(key == p or (p.endswith(".") and key.startswith(p)) for p in RESUMABLE)


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and not name.endswith("kwargs"):
            out |= _flat(value, name + ".")
        else:
            out[name] = value
    return out


def apply_plan(plan: RunDirPlan) -> None:
    """Delete what ``plan`` says (rank 0, holding the lock)."""
    for path in plan.delete:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


__all__ = ["LOCK_FILE", "RESUMABLE", "RUN_FILES", "RunDirPlan", "RunLock", "apply_plan",
           "check_run_dir", "compare_for_resume", "read_recorded", "used_files"]
