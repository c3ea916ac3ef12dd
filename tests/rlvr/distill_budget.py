"""On-policy distillation as its learning test runs it: shared by the test and its seed sweep.

``tests/rlvr/test_distill_learning.py`` runs it once; ``bench/distill_seeds.py`` runs it over
seeds to choose the test's thresholds.
"""

from __future__ import annotations

from pathlib import Path

from trainer_helpers import QUIET

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
TEACHER_SFT_STEPS = 60
STUDENT_SFT_STEPS = 0
STUDENT_LR = 3e-3
DISTILL_STEPS = 20
WINDOW = 5
MAX_KL_RATIO = 0.4
MIN_TEACHER_LP_RISE = 3.0


def distill_run(tmp: Path, seed: int, student_sft_steps: int = STUDENT_SFT_STEPS,
                lr: float = STUDENT_LR) -> dict[str, float]:
    """Warm up a teacher (and the student when ``student_sft_steps``), distil the student.

    Returns:
        The first and last ``WINDOW`` steps' means of ``distill/reverse_kl`` and
        ``distill/teacher_logprob``.
    """
    from transformers import AutoTokenizer

    from rlvr.config import load_config
    from rlvr.learner import init_distributed
    from rlvr.tiny import tiny_model_dir
    from rlvr.trainer import train
    from rlvr.training.warmup import warm_up

    common = QUIET + ["eval.every=0", "eval.tasks=16", "trainer.checkpoint_every=0",
                      f"trainer.seed={seed}", "sft.target_accuracy=null", "sft.eval_every=0",
                      "sft.check_gate=0"]

    def warmed(name: str, steps: int) -> Path:
        cfg = load_config(QUICKSTART, common + [f"trainer.output_dir={tmp / name}",
                                                f"sft.max_steps={steps}"])
        base = tiny_model_dir(cfg.model.tiny)
        return warm_up(cfg, base, AutoTokenizer.from_pretrained(base), init_distributed("cpu"),
                       lambda *_: None)[0]

    teacher_dir = warmed("teacher", TEACHER_SFT_STEPS)
    student_dir = warmed("student_start", student_sft_steps) if student_sft_steps else None
    student_cfg = load_config(QUICKSTART, common + [
        f"trainer.output_dir={tmp / 'student'}", "sft.enabled=false",
        f"teacher.path={teacher_dir}", f"trainer.steps={DISTILL_STEPS}",
        f"actor.optim.lr={lr}", "actor.optim.schedule=constant"]
        + ([f"model.path={student_dir}"] if student_dir else []))
    history = train(student_cfg, log=lambda *_: None).history

    def mean(key: str, rows: list[dict[str, float]]) -> float:
        return sum(r[key] for r in rows) / len(rows)

    first, last = history[:WINDOW], history[-WINDOW:]
    return {"kl_first": mean("distill/reverse_kl", first),
            "kl_last": mean("distill/reverse_kl", last),
            "teacher_lp_first": mean("distill/teacher_logprob", first),
            "teacher_lp_last": mean("distill/teacher_logprob", last)}
