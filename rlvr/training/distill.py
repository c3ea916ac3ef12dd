"""On-policy distillation in the training loop: the teacher, its tokenizer check, the signal.

``Distiller.from_config`` refuses a teacher whose tokenizer differs from the student's (the
student's token ids are scored as they are) and loads the teacher
(``rlvr.learner.teacher.Teacher``); in stage B, ``Distiller.apply`` scores this rank's rows
and replaces their advantages with ``rlvr.algorithms.distill.distill_advantages``. The math and the
recipe are described in ``rlvr.algorithms.distill``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from rlvr.algorithms.distill import distill_advantages
from rlvr.batch import RolloutBatch
from rlvr.distributed import all_reduce_sums
from rlvr.errors import ConfigError
from rlvr.learner.config import ActorConfig, TeacherConfig
from rlvr.learner.parallel import DistInfo
from rlvr.learner.teacher import Teacher

__all__ = ["Distiller", "check_same_tokenizer"]


def check_same_tokenizer(student: Any, teacher: Any, teacher_path: str) -> None:
    """Raise unless ``teacher`` maps every token to the same id as ``student``.

    Args:
        student: the student's tokenizer (a ``transformers`` tokenizer).
        teacher: the teacher's tokenizer.
        teacher_path: named in the message.

    Raises:
        ConfigError: (key ``teacher.path``) the vocabularies or the special tokens differ; the
            message says how (sizes, the first differing tokens).
    """
    mine, theirs = student.get_vocab(), teacher.get_vocab()
    problems: list[str] = []
    if mine != theirs:
        problems.append(f"vocabularies differ ({len(mine)} tokens in the student's, "
                        f"{len(theirs)} in the teacher's)")
        differing = sorted(tok for tok in set(mine) | set(theirs)
                           if mine.get(tok) != theirs.get(tok))
        shown = ", ".join(f"{tok!r}: {mine.get(tok)} vs {theirs.get(tok)}"
                          for tok in differing[:3])
        problems.append(f"e.g. {shown}")
    for name in ("eos_token_id", "pad_token_id", "bos_token_id"):
        a, b = getattr(student, name, None), getattr(teacher, name, None)
        if a != b:
            problems.append(f"{name} {a} (student) vs {b} (teacher)")
    if problems:
        raise ConfigError(
            f"teacher.path ({teacher_path}) does not share the student's tokenizer: "
            f"{'; '.join(problems)}. On-policy distillation scores the student's own token "
            "ids, so the teacher must use the same tokenizer (same vocabulary and special "
            "tokens)", key="teacher.path")


class Distiller:
    """The teacher and its signal, for the trainer's stage B.

    Args:
        config: the ``teacher`` section.
        teacher: the loaded, frozen teacher.
        dist: rank, world size and device.
    """

    def __init__(self, config: TeacherConfig, teacher: Teacher, dist: DistInfo) -> None:
        self.config = config
        self.teacher = teacher
        self.dist = dist

    @classmethod
    def from_config(cls, config: TeacherConfig, student_tokenizer: Any, actor: ActorConfig,
                    dist: DistInfo) -> Distiller | None:
        """Check the teacher's tokenizer and load it; None when ``config.path`` is null.

        Raises:
            ConfigError: (key ``teacher.path``) the directory does not exist, or its tokenizer
                is not the student's.
        """
        if config.path is None:
            return None
        from transformers import AutoTokenizer

        if not Path(config.path).is_dir():
            raise ConfigError(f"teacher.path ({config.path}) does not exist; it must be a "
                              "local HF model directory", key="teacher.path")
        check_same_tokenizer(student_tokenizer, AutoTokenizer.from_pretrained(config.path),
                             config.path)
        teacher = cast(Teacher, Teacher.from_pretrained(config.path, actor, dist))
        return cls(config, teacher, dist)

    def apply(self, batch: RolloutBatch, temperature: float) -> dict[str, float]:
        """Score this rank's rows with the teacher and set their distillation advantages.

        Needs ``advantages`` set (the verifier's, from the estimator); replaces them.

        Returns:
            ``distill/reverse_kl`` (token mean over all ranks of ``student - teacher``
            logprobs, the reverse KL's one-sample estimate) and ``distill/teacher_logprob``
            (token mean of the teacher's logprobs of the student's tokens).
        """
        mask = batch.response_mask
        teacher_logp = self.teacher.compute_logprobs(batch, temperature)
        advantages, reverse_kl = distill_advantages(
            teacher_logp, batch.rollout_logprobs, batch.require("advantages"), mask,
            self.config.coef, self.config.verifier_coef)
        batch.set("advantages", advantages)
        kl_sum, teacher_sum, tokens = all_reduce_sums(
            [float(reverse_kl.sum()), float((teacher_logp * mask).sum()), float(mask.sum())],
            self.dist.device)
        tokens = max(tokens, 1.0)
        return {"distill/reverse_kl": kl_sum / tokens,
                "distill/teacher_logprob": teacher_sum / tokens}
