from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from learner_helpers import make_batch, params, with_advantages
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.learner import (
    Actor,
    ActorConfig,
    Checkpointer,
    Critic,
    CriticConfig,
    OptimConfig,
    export_hf,
    latest_checkpoint,
    prune_checkpoints,
)
from rlvr.learner.checkpoint import COMPLETE_MARKER

SHAPE = dict(
    optim=OptimConfig(lr=1e-3, warmup_steps=2, schedule="cosine", total_steps=6,
                      weight_decay=0.01),
    micro_batch_size=3, mini_batch_size=4, epochs=2,
)
CFG = ActorConfig(**SHAPE)


def build(path, info):
    return (Actor.from_pretrained(path, CFG, info),
            Critic.from_pretrained(path, CriticConfig(**SHAPE), info))


def train(actor, critic, steps, start):
    metrics = []
    for step in range(start, start + steps):
        batch = with_advantages(make_batch(8, seed=step), seed=step)
        batch.set("old_logprobs", actor.compute_logprobs(batch))
        metrics.append(actor.update(batch))
        if critic is not None:
            batch.set("values", critic.compute_values(batch))
            metrics[-1] |= critic.update(batch)
    return metrics


def test_resume_is_exact(tiny_model_path, dist_info, tmp_path):
    actor, critic = build(tiny_model_path, dist_info)
    train(actor, critic, 2, start=0)
    Checkpointer({"actor": actor, "critic": critic}).save(tmp_path / "step_2")
    straight = train(actor, critic, 2, start=2)

    actor2, critic2 = build(tiny_model_path, dist_info)
    Checkpointer({"actor": actor2, "critic": critic2}).load(latest_checkpoint(tmp_path))
    assert actor2.updates == 2 and actor2.scheduler.last_epoch == 2
    resumed = train(actor2, critic2, 2, start=2)

    assert resumed == straight  # every metric, bit for bit (lr schedule included)
    for a, b in ((actor, actor2), (critic, critic2)):
        pa, pb = params(a.module), params(b.module)
        assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_saving_before_the_first_update_changes_nothing(tiny_model_path, dist_info, tmp_path):
    actor, reference_actor, restored = (Actor.from_pretrained(tiny_model_path, CFG, dist_info)
                                        for _ in range(3))
    Checkpointer({"actor": actor}).save(tmp_path / "step_0")
    assert len(actor.optimizer.state) == 0
    Checkpointer({"actor": restored}).load(tmp_path / "step_0")
    assert len(restored.optimizer.state) == 0
    runs = [train(a, None, 1, start=0) for a in (actor, reference_actor, restored)]
    assert runs[0][0]["actor/pg_loss"] == runs[1][0]["actor/pg_loss"] == runs[2][0]["actor/pg_loss"]
    p0, p1, p2 = (params(a.module) for a in (actor, reference_actor, restored))
    assert all(torch.equal(p0[k], p1[k]) and torch.equal(p1[k], p2[k]) for k in p0)


def test_incomplete_checkpoints_are_ignored(tiny_model_path, dist_info, tmp_path):
    actor, _ = build(tiny_model_path, dist_info)
    ckpt = Checkpointer({"actor": actor})
    ckpt.save(tmp_path / "step_3")
    (tmp_path / ".step_7.partial").mkdir()
    (tmp_path / "step_9").mkdir()  # no COMPLETE marker: a foreign or broken directory
    assert latest_checkpoint(tmp_path) == tmp_path / "step_3"
    assert latest_checkpoint(tmp_path / "nothing") is None
    with pytest.raises(FileNotFoundError, match="step_9.*is not a complete checkpoint"):
        ckpt.load(tmp_path / "step_9")
    ckpt.save(tmp_path / "step_3")  # overwriting an existing checkpoint is atomic too
    assert sorted(p.name for p in tmp_path.iterdir()) == [".step_7.partial", "step_3", "step_9"]
    ckpt.save(tmp_path / "step_10")
    removed = prune_checkpoints(tmp_path, keep=1)
    assert sorted(p.name for p in removed) == [".step_7.partial", "step_3"]
    assert latest_checkpoint(tmp_path) == tmp_path / "step_10"
    assert (tmp_path / "step_9").is_dir()  # not ours (no marker): left alone


KILLED_SAVE = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, sys.argv[2])
    from learner_helpers import make_batch, with_advantages
    import rlvr.learner.checkpoint as ck
    from rlvr.learner import Actor, ActorConfig, Checkpointer, OptimConfig, init_distributed
    actor = Actor.from_pretrained(sys.argv[3], ActorConfig(optim=OptimConfig(lr=1e-3)),
                                  init_distributed("cpu"))
    ckpt = Checkpointer({"actor": actor})
    ckpt.save(os.path.join(sys.argv[1], "step_1"))
    batch = with_advantages(make_batch(4))
    batch.set("old_logprobs", actor.compute_logprobs(batch))
    actor.update(batch)
    def die(tmp, target, *marker):  # SIGKILL after DCP wrote its files, before the rename
        os.kill(os.getpid(), signal.SIGKILL)
    ck._publish = die
    ckpt.save(os.path.join(sys.argv[1], "step_2"))
""")


@pytest.mark.slow
def test_sigkill_mid_save_leaves_the_previous_checkpoint(tiny_model_path, dist_info, tmp_path):
    script = tmp_path / "killed_save.py"
    script.write_text(KILLED_SAVE)
    root = tmp_path / "ckpts"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(script), str(root), str(Path(__file__).parent),
                           str(tiny_model_path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert (root / ".step_2.partial").is_dir() and not (root / "step_2").exists()
    assert latest_checkpoint(root) == root / "step_1"
    actor, _ = build(tiny_model_path, dist_info)
    Checkpointer({"actor": actor}).load(latest_checkpoint(root))
    assert actor.updates == 0


def test_export_hf_loads_in_transformers_with_identical_logits(tiny_model_path, dist_info,
                                                                tmp_path):
    actor, critic = build(tiny_model_path, dist_info)
    train(actor, critic, 1, start=0)  # weights differ from the initial ones
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    out = export_hf(actor.module, tmp_path / "export", tokenizer)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    reloaded = AutoTokenizer.from_pretrained(out)
    assert reloaded("12+7=")["input_ids"] == tokenizer("12+7=")["input_ids"]
    ids = torch.tensor([[5, 17, 42, 99, 3, 250]])
    with torch.no_grad():
        theirs = loaded(ids).logits
        ours = actor.module(ids).logits
        initial_model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
        initial = initial_model(ids).logits
    assert torch.equal(ours, theirs)
    assert not torch.allclose(initial, theirs)
    bf16 = export_hf(actor.module, tmp_path / "bf16", dtype=torch.bfloat16)
    # dtype="auto": the saved dtype (5.x defaults to it; 4.x loads float32 unless asked).
    assert AutoModelForCausalLM.from_pretrained(bf16, dtype="auto").dtype == torch.bfloat16
    assert COMPLETE_MARKER in {p.name for p in out.iterdir()}
    with pytest.raises(TypeError, match="module must be an HF causal LM.*CriticModel"):
        export_hf(critic.module, tmp_path / "critic")
