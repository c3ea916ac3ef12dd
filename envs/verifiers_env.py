"""rlvr/Verifiers-v0: a Prime Intellect ``verifiers`` taskset, graded by its own rewards.

``verifiers`` 0.4 (``import verifiers.v1 as vf``; 0.4.0 is tested, ``>=0.4,<0.5`` is accepted)
writes an environment as a ``vf.Taskset`` whose ``load()`` yields ``vf.Task`` objects: each
carries ``TaskData`` (``prompt``, ``system_prompt``, its own fields) and scores a ``vf.Trace``
with its ``@vf.reward`` (weighted, summed) and ``@vf.metric`` methods. This env loads a taskset
by its id (an installed taskset package or any importable module that exports one ``Taskset``
subclass in ``__all__``, as ``verifiers`` itself resolves ``--env.taskset.id``), opens each
episode with the task's own messages, and on the model's reply builds the ``vf.Trace`` that
``verifiers`` would have recorded for a one-turn rollout and lets the task score it::

    env = rlvr.envs.make("rlvr/Verifiers-v0", environment="my_taskset",
                         environment_kwargs={"size": 200}, split="test")

The reward is ``trace.reward`` (the weighted sum of the task's rewards, not re-graded from the
text); the verdict's details hold every reward (score and weight) and metric by name, so they
reach ``episodes.jsonl`` and reports. Splits: the first ``limit`` tasks are loaded; a task is
held out (``"test"``) when a hash of its key (``Task.key``, the content hash unless the taskset
gives a durable one) falls under ``test_fraction``, so the splits never share a task.

Fails closed: a taskset whose tasks need a container or tool servers, or a harness of their own,
is refused at construction (only one-turn chat tasks scored offline are played here); a scoring
hook that raises, a reward that is not finite or lies outside [0, 1], or a reward left unscored
gives 0 with reason ``scorer_error`` and the error in ``details``. A reward of at least
``pass_threshold`` (default 1) passes. Each scored step also gives ``info["metrics"]``: every
reward's score and every metric by name, which training logs as ``env/<name>`` means.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import json
import math
import threading
from collections.abc import Mapping
from typing import Any

from rlvr.envs.errors import EnvArgumentError, MissingDependencyError
from rlvr.envs.task_env import StepResult
from rlvr.envs.tasks import Task, check_index, stable_fraction
from rlvr.envs.tasks.base import check_split
from rlvr.envs.verifier_env import VerifierEnv
from rlvr.verifiers import Verdict

INSTALL_HINT = ("rlvr/Verifiers-v0 needs Prime Intellect's verifiers 0.4: "
                "pip install 'verifiers>=0.4,<0.5'")


def verifiers_v1() -> Any:
    """Prime's ``verifiers.v1``.

    Raises:
        MissingDependencyError: it is not installed (the message says what to install).
    """
    try:
        vf = importlib.import_module("verifiers.v1")
    except ImportError as exc:
        raise MissingDependencyError(INSTALL_HINT) from exc
    return vf


def _messages(data: Any) -> list[dict[str, Any]]:
    """The task's opening chat messages (system prompt, then its prompt) as rlvr messages."""
    messages: list[dict[str, Any]] = []
    if data.system_prompt:
        messages.append({"role": "system", "content": str(data.system_prompt)})
    prompt = data.prompt
    if prompt is None:
        raise EnvArgumentError(f"verifiers task {data.idx} has no prompt (the user opens it); "
                               "rlvr/Verifiers-v0 plays tasks that open with a prompt")
    if isinstance(prompt, str):
        messages.append({"role": "user", "content": prompt})
        return messages
    for message in prompt:
        content = message.content
        if not isinstance(content, str):
            raise EnvArgumentError(f"verifiers task {data.idx}: a {message.role} message with "
                                   "non-text content (images are not supported)")
        messages.append({"role": str(message.role), "content": content})
    return messages


class VerifiersSource:
    """One split of a ``verifiers`` taskset as an rlvr task source.

    Args:
        environment: the taskset id (an installed taskset package or an importable module).
        environment_kwargs: the taskset's config fields (its ``TasksetConfig`` subclass).
        split: ``"train"`` or ``"test"``.
        limit: tasks read from the taskset (both splits together; bounds infinite tasksets).
        test_fraction: the share of tasks held out, in (0, 1).
        pass_threshold: the reward at which an episode passes, in (0, 1].

    Tasks carry ``task_id``, ``prompt`` (the opening messages), ``question`` (the prompt text,
    for reports), ``index`` (the task's position in this split) and, when the task data has an
    ``answer`` field, ``answer`` (for reports and check-env; never shown to the model).
    """

    def __init__(self, environment: str, *, environment_kwargs: Mapping[str, Any] | None = None,
                 split: str = "train", limit: int = 10_000, test_fraction: float = 0.1,
                 pass_threshold: float = 1.0) -> None:
        if not 0.0 < pass_threshold <= 1.0:
            raise EnvArgumentError(f"pass_threshold must be in (0, 1], got {pass_threshold!r}")
        self.pass_threshold = float(pass_threshold)
        if not isinstance(environment, str) or not environment:
            raise EnvArgumentError(f"environment must be a verifiers taskset id or module, got "
                                   f"{environment!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise EnvArgumentError(f"limit must be an int >= 1, got {limit!r}")
        if not 0.0 < test_fraction < 1.0:
            raise EnvArgumentError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
        self.split = check_split(split)
        self.name = environment
        kwargs = dict(environment_kwargs or {})
        key = (environment, json.dumps(kwargs, sort_keys=True, default=repr), limit,
               test_fraction)
        with _LOADED_LOCK:
            if key not in _LOADED:
                _LOADED[key] = _load(environment, kwargs, limit, test_fraction)
            tasks, held_out = _LOADED[key]
        self.tasks = [t for t, out in zip(tasks, held_out, strict=True)
                      if out == (split == "test")]

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index: int) -> Task:
        task = self.tasks[check_index(self, index)]
        data = task.data
        fields: Task = {"task_id": str(data.id if data.id is not None else
                                       f"{self.name}/{data.idx}"),
                        "prompt": _messages(data), "question": data.prompt_text, "index": index}
        answer = getattr(data, "answer", None)
        if answer is not None:  # a reference answer, for reports and check-env's probes only
            fields["answer"] = str(answer)
        return fields

    def __repr__(self) -> str:
        return f"VerifiersSource({self.name!r}, split={self.split!r}, n={len(self)})"


_LOADED: dict[tuple[Any, ...], tuple[list[Any], list[bool]]] = {}
"""Loaded tasksets by (environment, kwargs, limit, test_fraction): every env of a process (a
run makes one per concurrent episode) shares one load of the taskset."""
_LOADED_LOCK = threading.Lock()


def _load(environment: str, kwargs: dict[str, Any], limit: int,
          test_fraction: float) -> tuple[list[Any], list[bool]]:
    """The taskset's first ``limit`` tasks and whether each is held out."""
    verifiers_v1()
    loaders = importlib.import_module("verifiers.v1.utils.loaders")
    try:
        cls = loaders.taskset_class(environment)
    except (ImportError, TypeError, ValueError, AttributeError) as exc:
        raise EnvArgumentError(f"cannot load verifiers taskset {environment!r}: "
                               f"{type(exc).__name__}: {exc}") from exc
    try:
        config = loaders.taskset_config_type(environment).model_validate(
            {**kwargs, "id": environment})
        tasks: list[Any] = []
        for task in cls(config):
            if len(tasks) >= limit:
                break
            tasks.append(task)
    except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise EnvArgumentError(f"verifiers taskset {environment!r} rejected "
                               f"environment_kwargs {kwargs}: {type(exc).__name__}: {exc}"
                               ) from exc
    held_out = [stable_fraction(f"{environment}\n{task.key}") < test_fraction for task in tasks]
    return tasks, held_out


def check_offline_playable(environment: str, task: Any) -> None:
    """Refuse a taskset whose tasks need more than one offline-scored chat turn.

    Raises:
        EnvArgumentError: its tasks need a container, launch tool servers or have a setup hook
            (``rlvr/VerifiersHarness-v0`` plays the tool servers and setup hooks).
    """
    kind = type(task)
    why = None
    if getattr(kind, "NEEDS_CONTAINER", False):
        why = "its tasks need a container (NEEDS_CONTAINER)"
    elif kind.toolsets(task.config):
        why = "its tasks launch tool servers (toolsets)"
    elif type(task).setup is not verifiers_v1().Task.setup:
        why = "its tasks have a setup hook (a runtime)"
    if why:
        raise EnvArgumentError(f"verifiers taskset {environment!r} is not supported: {why}; "
                               "rlvr/Verifiers-v0 plays one-turn chat tasks scored by their "
                               "@vf.reward hooks (rlvr/VerifiersHarness-v0 plays tool servers "
                               "and setup hooks through a verifiers harness)")


def _run(coro: Any) -> Any:
    """Run ``coro`` to completion from sync code, also when this thread runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def score_with(source: VerifiersSource, response: str, task: Task) -> Verdict:
    """Score ``response`` with the task's own rewards and metrics; never raises."""
    vf = verifiers_v1()
    graph = importlib.import_module("verifiers.v1.graph")
    vtask = source.tasks[int(task["index"])]
    nodes: list[Any] = []
    for message in task["prompt"]:
        kind = {"system": vf.SystemMessage, "user": vf.UserMessage,
                "assistant": vf.AssistantMessage}[message["role"]]
        nodes.append(graph.MessageNode(message=kind(content=message["content"]),
                                       parent=len(nodes) - 1 if nodes else None))
    nodes.append(graph.MessageNode(message=vf.AssistantMessage(content=response),
                                   parent=len(nodes) - 1, sampled=True))
    trace = vf.Trace(task=vf.TraceTask(type=type(vtask).__name__, data=vtask.data,
                                       key=vtask.key, hash=vtask.hash),
                     agent=vf.AgentInfo(config=vf.AgentConfig()), nodes=nodes,
                     is_completed=True, ok=True)
    try:
        _run(vtask.score(trace))
    except Exception as exc:  # the scorer is third-party code: fail closed, say why
        return Verdict(0.0, False, "scorer_error", {"error": f"{type(exc).__name__}: {exc}"[:500]})
    return trace_verdict(trace, source.pass_threshold)


def trace_verdict(trace: Any, pass_threshold: float) -> Verdict:
    """The verdict of a scored ``vf.Trace``: its reward (the weighted sum of the task's rewards).

    ``details`` holds every reward (score and weight) and metric by name. A reward left
    unscored, no reward at all, or a reward that is not a number in [0, 1] gives 0 with reason
    ``scorer_error``; a reward of at least ``pass_threshold`` passes. Never raises.
    """
    rewards = {name: None if r is None else {"score": r.score, "weight": r.weight}
               for name, r in trace.rewards.items()}
    details: dict[str, Any] = {"rewards": rewards, "metrics": dict(trace.metrics)}
    unscored = [name for name, r in trace.rewards.items() if r is None]
    if unscored or not trace.rewards:
        details["error"] = (f"rewards {unscored} left unscored" if unscored
                            else "the task has no @vf.reward")
        return Verdict(0.0, False, "scorer_error", details)
    value = float(trace.reward)
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        details["error"] = f"reward {value!r} is not a number in [0, 1]"
        return Verdict(0.0, False, "scorer_error", details)
    passed = value >= pass_threshold
    return Verdict(value, passed, "correct" if passed else "wrong_answer", details)


class VerifiersEnv(VerifierEnv):
    """A ``verifiers`` taskset as a single-turn env; see the module docstring.

    Args:
        environment: the verifiers taskset id or module.
        environment_kwargs: the taskset's config fields.
        split: ``"train"`` or ``"test"`` (held out).
        limit: tasks read from the taskset (both splits together).
        test_fraction: the share of tasks held out.
        pass_threshold: the reward at which an episode passes (``reward/accuracy``), in (0, 1].
    """

    OFFLINE_ONLY = True
    """Refuse tasks that need tool servers, a setup hook or a container (nothing here runs
    them); ``rlvr.envs.verifiers_harness_env`` plays those through a harness."""

    def __init__(self, environment: str = "", *,
                 environment_kwargs: Mapping[str, Any] | None = None, split: str = "train",
                 limit: int = 10_000, test_fraction: float = 0.1,
                 pass_threshold: float = 1.0) -> None:
        source = VerifiersSource(environment, environment_kwargs=environment_kwargs,
                                 split=split, limit=limit, test_fraction=test_fraction,
                                 pass_threshold=pass_threshold)
        if len(source) == 0:
            raise EnvArgumentError(f"the {split!r} split of verifiers taskset {environment!r} is "
                                   f"empty: raise limit ({limit}) or test_fraction "
                                   f"({test_fraction}), or give the taskset more tasks")
        if self.OFFLINE_ONLY:
            check_offline_playable(environment, source.tasks[0])
        self.vf_source = source
        super().__init__(source, lambda response, task: score_with(source, response, task),
                         split=split, system_prompt=None, prompt_template="{prompt}",
                         required_fields=("prompt", "index"))

    def _step(self, action: str, task: Task) -> StepResult:
        """Score the reply; ``info["metrics"]`` holds the task's rewards and metrics by name."""
        result = super()._step(action, task)
        verdict = result.info.get("verdict")
        if verdict is not None:
            result.info["metrics"] = rubric_metrics(verdict.details)
        return result


def rubric_metrics(details: Mapping[str, Any]) -> dict[str, Any]:
    """The rewards' scores and the metrics of a verdict's details, by name (for ``env/<name>``).

    A reward left unscored or a metric that is not a number is left out; a scorer that raised
    gave neither, so its episode reports none.
    """
    metrics: dict[str, Any] = {}
    for name, reward in (details.get("rewards") or {}).items():
        if isinstance(reward, Mapping) and isinstance(reward.get("score"), int | float):
            metrics[str(name)] = reward["score"]
    for name, value in (details.get("metrics") or {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            metrics[str(name)] = value
    return metrics


__all__ = ["VerifiersEnv", "VerifiersSource", "check_offline_playable", "rubric_metrics",
           "score_with", "trace_verdict", "verifiers_v1"]
