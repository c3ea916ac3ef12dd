"""On-policy distillation: the signal's known answers, the config, the tokenizer, the teacher."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.distill import distill_advantages
from rlvr.config import load_config
from rlvr.errors import ConfigError, ShapeError
from rlvr.learner.config import TeacherConfig
from rlvr.training.distill import Distiller, check_same_tokenizer

T = torch.tensor

TEACHER = T([[-0.5, -2.0, -1.0], [-0.1, -3.0, 7.0]])
STUDENT = T([[-1.0, -1.0, -1.0], [-0.1, -0.5, float("nan")]])
ADV = T([[0.5, 0.5, 0.5], [-1.0, -1.0, -1.0]])
MASK = T([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def test_pure_distillation_is_the_per_token_reverse_kl():
    adv, kl = distill_advantages(TEACHER, STUDENT, ADV, MASK)
    # student - teacher per token; masked positions (even NaN) give exactly 0
    torch.testing.assert_close(kl, T([[-0.5, 1.0, 0.0], [0.0, 2.5, 0.0]]))
    torch.testing.assert_close(adv, T([[0.5, -1.0, 0.0], [0.0, -2.5, 0.0]]))


def test_the_verifier_reward_is_mixed_in_by_its_coefficient():
    adv, _ = distill_advantages(TEACHER, STUDENT, ADV, MASK, coef=2.0, verifier_coef=0.5)
    # 2 * (teacher - student) + 0.5 * A
    torch.testing.assert_close(adv, T([[1.25, -1.75, 0.25], [-0.5, -5.5, 0.0]]))


def test_shapes_must_agree():
    with pytest.raises(ShapeError, match="student_logprobs has shape"):
        distill_advantages(TEACHER, STUDENT[:1], ADV, MASK)


def test_config_keys_and_ranges():
    cfg = load_config(None, ["teacher.path=/models/teacher", "teacher.coef=2",
                             "teacher.verifier_coef=0.5"])
    assert cfg.teacher == TeacherConfig(path="/models/teacher", coef=2.0, verifier_coef=0.5)
    assert cfg.teacher.enabled and not load_config(None, []).teacher.enabled
    with pytest.raises(ConfigError, match=r"^teacher.coef must be > 0; got 0.0$"):
        load_config(None, ["teacher.coef=0"])
    with pytest.raises(ConfigError, match=r"^teacher.verifier_coef must be >= 0; got -1.0$"):
        load_config(None, ["teacher.verifier_coef=-1"])


def test_a_teacher_with_another_tokenizer_is_refused(tiny_model_path, tmp_path, dist_info):
    from transformers import AutoTokenizer

    student = AutoTokenizer.from_pretrained(tiny_model_path)
    other = AutoTokenizer.from_pretrained(tiny_model_path)
    other.add_tokens(["<tool_result>"])
    other.save_pretrained(tmp_path / "teacher")
    check_same_tokenizer(student, AutoTokenizer.from_pretrained(tiny_model_path), "same")
    cfg = load_config(None, [f"teacher.path={tmp_path / 'teacher'}"])
    message = (r"^teacher.path \(.*teacher\) does not share the student's "
               r"tokenizer: vocabularies differ \(\d+ tokens in the student's, \d+ in the "
               r"teacher's\); e.g. '<tool_result>': None vs \d+\. On-policy distillation")
    with pytest.raises(ConfigError, match=message):
        Distiller.from_config(cfg.teacher, student, cfg.learner_configs()[0], dist_info)
    missing = load_config(None, [f"teacher.path={tmp_path / 'nowhere'}"])
    with pytest.raises(ConfigError, match=r"^teacher.path \(.*nowhere\) does not exist"):
        Distiller.from_config(missing.teacher, student, cfg.learner_configs()[0], dist_info)


def test_the_teacher_scores_the_students_tokens_frozen(tiny_model_path, dist_info):
    from learner_helpers import make_batch

    from rlvr.learner import Actor, Teacher

    cfg = load_config(None, [f"teacher.path={tiny_model_path}"])
    from transformers import AutoTokenizer

    distiller = Distiller.from_config(cfg.teacher, AutoTokenizer.from_pretrained(tiny_model_path),
                                      cfg.learner_configs()[0], dist_info)
    assert isinstance(distiller.teacher, Teacher)
    assert not any(p.requires_grad for p in distiller.teacher.module.parameters())
    batch = make_batch(4, seed=1)
    actor = Actor.from_pretrained(tiny_model_path, cfg.learner_configs()[0], dist_info)
    student = actor.compute_logprobs(batch)
    batch.rollout_logprobs = student  # the engine's logprobs = the learner's here
    batch.set("advantages", torch.ones_like(student))
    metrics = distiller.apply(batch, 1.0)
    # teacher == student's weights: the reverse KL is 0 and so is every advantage
    assert metrics["distill/reverse_kl"] == pytest.approx(0.0, abs=1e-5)
    assert batch.require("advantages").abs().max().item() < 1e-5
    assert metrics["distill/teacher_logprob"] == pytest.approx(
        float((student * batch.response_mask).sum() / batch.response_mask.sum()), abs=1e-5)


def test_the_trainer_refuses_the_teacher_before_the_warm_up(tiny_model_path, tmp_path):
    from transformers import AutoTokenizer

    from rlvr.trainer import Trainer

    other = AutoTokenizer.from_pretrained(tiny_model_path)
    other.add_tokens(["<extra>"])
    other.save_pretrained(tmp_path / "teacher")
    cfg = load_config(None, [f"model.path={tiny_model_path}", "sft.enabled=true",
                             f"teacher.path={tmp_path / 'teacher'}",
                             f"trainer.output_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match=r"^teacher.path .* does not share the student's"):
        Trainer(cfg, log=lambda *_: None)
    assert not (tmp_path / "run" / "sft_model").exists()  # refused before any warm-up step
