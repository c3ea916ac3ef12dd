"""rlvr/ReasoningGym-v0: a reasoning-gym dataset, graded by the dataset's own scorer.

reasoning-gym (``pip install reasoning-gym``, tested with 0.1.25) generates procedural tasks
(``basic_arithmetic``, ``countdown``, ``word_sorting``, ... about a hundred) and ships a scorer
per dataset (``dataset.score_answer(answer, entry) -> float``). This env asks for the answer in
``<answer>...</answer>`` tags (reasoning-gym's own default system prompt), reads it, and lets the
dataset's scorer grade it::

    env = rlvr.envs.make("rlvr/ReasoningGym-v0", dataset="basic_arithmetic",
                         dataset_kwargs={"min_terms": 2, "max_terms": 3}, split="test")

Splits: ``size`` entries are generated from ``seed``; each goes to the held-out split
(``"test"``) when a hash of its question falls under ``test_fraction``, else to ``"train"``.
The same question always lands in the same split, so the two never share a question, whatever
the seed: reasoning-gym draws entry ``i`` of seed ``s`` from ``Random(s + i)``, so datasets of
nearby seeds share most entries, and a split by index would leak between them.

Fails closed: no ``<answer>`` block is ``no_answer``; more than one is ``several_answers``
(the model must commit to one); a scorer that raises, or returns something that is not a number
in [0, 1], scores 0 with reason ``scorer_error`` and the exception in ``details``. A score of 1
passes; a scorer's partial credit is the reward but not a pass.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr.envs.base import Message
from rlvr.envs.errors import EnvArgumentError, MissingDependencyError
from rlvr.envs.tasks import Task, check_index, stable_fraction
from rlvr.envs.tasks.base import check_split
from rlvr.envs.verifier_env import VerifierEnv
from rlvr.verifiers import Verdict

SYSTEM_PROMPT = (
    "Given a problem, your task is to answer the question by thinking step-by-step in a clear "
    "and specific manner.\nOnce you have thought about the reasoning process, provide the answer "
    "in the following format:\n<answer>answer here</answer>\nDo not explain your reasoning "
    "inside the answer tags, provide only the final answer. When an example is provided, you "
    "should strictly follow the format of the output/answer in that example."
)
"""reasoning-gym's ``SYSTEM_PROMPTS["default"]`` (copied, so the prompt does not change under a
new release without a change here)."""

_ANSWER = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)


def _reasoning_gym() -> Any:
    try:
        return importlib.import_module("reasoning_gym")
    except ImportError as exc:
        raise MissingDependencyError(
            "rlvr/ReasoningGym-v0 needs reasoning-gym: pip install 'rlvr[reasoning-gym]'"
        ) from exc


class ReasoningGymSource:
    """One split of a reasoning-gym dataset as an rlvr task source.

    Args:
        dataset: a reasoning-gym dataset name (``reasoning_gym.factory.DATASETS``).
        dataset_kwargs: the dataset's config fields (``min_terms``, ...).
        split: ``"train"`` or ``"test"``.
        size: entries generated (both splits together).
        seed: the generator's seed.
        test_fraction: the share of questions held out, in (0, 1).

    Tasks carry ``question``, ``answer`` (the dataset's reference answer, for reports and
    check-env) and ``index`` (the entry's index in the generated dataset).
    """

    def __init__(self, dataset: str, *, dataset_kwargs: Mapping[str, Any] | None = None,
                 split: str = "train", size: int = 1000, seed: int = 0,
                 test_fraction: float = 0.1) -> None:
        if not isinstance(dataset, str) or not dataset:
            raise EnvArgumentError(f"dataset must be a reasoning-gym dataset name, got {dataset!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise EnvArgumentError(f"size must be an int >= 1, got {size!r}")
        if not 0.0 < test_fraction < 1.0:
            raise EnvArgumentError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
        self.split = check_split(split)
        self.name = dataset
        rg = _reasoning_gym()
        known = sorted(importlib.import_module("reasoning_gym.factory").DATASETS)
        if dataset not in known:
            import difflib

            close = difflib.get_close_matches(dataset, known, n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise EnvArgumentError(f"unknown reasoning-gym dataset {dataset!r}{hint} "
                                   f"({len(known)} known: reasoning_gym.factory.DATASETS)")
        try:
            self.dataset = rg.create_dataset(dataset, size=size, seed=seed,
                                             **dict(dataset_kwargs or {}))
        except (TypeError, ValueError, AssertionError) as exc:
            raise EnvArgumentError(
                f"reasoning-gym rejected dataset_kwargs {dict(dataset_kwargs or {})} for "
                f"{dataset!r}: {type(exc).__name__}: {exc}") from exc
        held_out = [stable_fraction(f"{dataset}\n{self.dataset[i]['question']}") < test_fraction
                    for i in range(size)]
        self._indices = [i for i in range(size) if held_out[i] == (split == "test")]

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, index: int) -> Task:
        i = self._indices[check_index(self, index)]
        entry = self.dataset[i]
        return {"task_id": f"{self.name}/{i}", "question": str(entry["question"]),
                "answer": str(entry["answer"]), "index": i}

    def entry(self, index: int) -> dict[str, Any]:
        """The dataset's own entry ``index`` (what its scorer reads)."""
        return dict(self.dataset[index])

    def __repr__(self) -> str:
        return f"ReasoningGymSource({self.name!r}, split={self.split!r}, n={len(self)})"


def score_with(source: ReasoningGymSource, response: str, task: Task) -> Verdict:
    """Grade ``response`` with the dataset's scorer; never raises (see the module docstring)."""
    found = _ANSWER.findall(response)
    if not found:
        return Verdict(0.0, False, "no_answer", {"expected": "<answer>...</answer>"})
    if len(found) > 1:
        return Verdict(0.0, False, "several_answers", {"answers": len(found)})
    answer = found[0].strip()
    try:
        score = source.dataset.score_answer(answer, source.entry(int(task["index"])))
        value = float(score)
    except Exception as exc:  # the scorer is third-party code: fail closed, say why
        return Verdict(0.0, False, "scorer_error",
                       {"error": f"{type(exc).__name__}: {exc}"[:500], "answer": answer[:200]})
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        return Verdict(0.0, False, "scorer_error",
                       {"error": f"score {score!r} is not a number in [0, 1]"})
    passed = value >= 1.0
    return Verdict(value, passed, "correct" if passed else "wrong_answer",
                   {"answer": answer[:200]})


class ReasoningGymEnv(VerifierEnv):
    """A reasoning-gym dataset as a single-turn (or retry) env; see the module docstring.

    Args:
        dataset: the reasoning-gym dataset name (default ``"basic_arithmetic"``).
        dataset_kwargs: the dataset's config (its ``*Config`` fields).
        split: ``"train"`` or ``"test"`` (held out).
        size: entries generated for both splits together.
        seed: the generator's seed (the same seed gives the same tasks and splits).
        test_fraction: the share of questions held out.
        system_prompt: the system message (default reasoning-gym's, asking for ``<answer>``).
        max_attempts: answers allowed (retries get feedback), as in ``VerifierEnv``.
    """

    def __init__(self, dataset: str = "basic_arithmetic", *,
                 dataset_kwargs: Mapping[str, Any] | None = None,
                 split: str = "train", size: int = 1000, seed: int = 0,
                 test_fraction: float = 0.1, system_prompt: str | None = SYSTEM_PROMPT,
                 max_attempts: int = 1) -> None:
        source = ReasoningGymSource(dataset, dataset_kwargs=dataset_kwargs, split=split,
                                    size=size, seed=seed, test_fraction=test_fraction)
        if len(source) == 0:
            raise EnvArgumentError(f"the {split!r} split of {dataset!r} is empty: raise size "
                                   f"({size}) or test_fraction ({test_fraction})")
        self.rg_source = source
        super().__init__(source, lambda response, task: score_with(source, response, task),
                         split=split, system_prompt=system_prompt, max_attempts=max_attempts,
                         required_fields=("question", "answer", "index"))

    def demonstration(self, tool_results: Sequence[Message], *,
                      use_tool: bool = True) -> str | None:
        """The dataset's reference answer in the tags this env reads (the warm-up's target)."""
        if self._task is None:
            return None
        return f"<answer>{self._task['answer']}</answer>"


__all__ = ["SYSTEM_PROMPT", "ReasoningGymEnv", "ReasoningGymSource", "score_with"]
