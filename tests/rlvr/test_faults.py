"""When a run misbehaves (docs/faults.md): hung env calls, broken envs, used run folders,
changed resumes and late validation each end in a clear outcome, never a hang or a silent one."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest
from trainer_helpers import QUIET, SMALL_MODEL  # noqa: E402 (shared trainer-test overrides)

from rlvr.config import load_config
from rlvr.envs import VerifierEnv
from rlvr.envs.math_env import MathEnv
from rlvr.errors import ConfigError, RunStoppedError
from rlvr.metrics import read_jsonl
from rlvr.trainer import Trainer, train
from rlvr.verifiers import Verdict

pytestmark = pytest.mark.slow  # end-to-end: handed out first on two workers (tests/conftest.py)

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
REPO = CONFIGS.parent


def test_heldout_evaluation_keeps_the_runs_env_step_timeout(tiny_model_path):
    """The held-out evaluation used to run with the runner's default 60 s per env call."""
    from transformers import AutoTokenizer

    from rlvr.training.heldout import heldout_evaluator

    config = load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "rollout.runner.env_step_timeout_s=1.5", "rollout.runner.env_workers=3"])
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    ev = heldout_evaluator(config, None, tokenizer, suite=None, tasks=2, every=0)
    try:
        assert ev.runner.config.env_step_timeout_s == 1.5
        assert ev.runner.config.env_workers == 3
    finally:
        ev.close()


def test_rlvr_eval_takes_an_env_step_timeout():
    from rlvr.eval.evaluator import SuiteEvalConfig

    assert SuiteEvalConfig(suite="x", env_step_timeout_s=2.0).runner_config() \
        .env_step_timeout_s == 2.0


def _silent(*_):
    pass


def _run_config(tmp_path, *extra):
    return load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path}", "trainer.steps=3",
        "trainer.threads=1", "rollout.prompts_per_step=2", "rollout.group_size=2",
        "eval.tasks=2", "eval.every=0", *extra])


class _BrokenReset(MathEnv):
    def reset(self, *, seed=None, options=None):
        raise RuntimeError("the task database is gone")


def test_a_broken_env_stops_the_run_naming_the_env_and_its_traceback(tmp_path):
    """Every episode errors: the run used to exit 0, export a model and print "+0.0 points"."""
    gymnasium.register("rlvrtest/BrokenReset-v0", entry_point=_BrokenReset)
    try:
        config = _run_config(tmp_path, "env.id=rlvrtest/BrokenReset-v0",
                             "trainer.export_at_end=true")
        with pytest.raises(RunStoppedError) as err:
            train(config, log=_silent)
    finally:
        gymnasium.registry.pop("rlvrtest/BrokenReset-v0")
    message = str(err.value)
    assert "'rlvrtest/BrokenReset-v0' produced no valid episode in step 1" in message
    assert "RuntimeError: the task database is gone" in message
    assert "Traceback (most recent call last)" in message and "in reset" in message
    assert not (tmp_path / "export").exists()
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl") if r["step"] > 0] == []


def test_max_failed_steps_allows_failed_steps_in_a_row_before_stopping(tmp_path):
    gymnasium.register("rlvrtest/BrokenReset-v0", entry_point=_BrokenReset)
    try:
        config = _run_config(tmp_path, "env.id=rlvrtest/BrokenReset-v0",
                             "trainer.max_failed_steps=2")
        with pytest.raises(RunStoppedError, match="2 steps in a row"):
            train(config, log=_silent)
    finally:
        gymnasium.registry.pop("rlvrtest/BrokenReset-v0")


# ------------------------------------------------------------------ one run per folder (2-4)
def test_a_second_writer_is_refused_and_a_dead_holders_lock_is_not_in_the_way(tmp_path):
    import subprocess
    import sys

    from rlvr.training.run_dir import RunLock

    first = RunLock(tmp_path)
    with pytest.raises(RunStoppedError, match=r"in use by another rlvr run \(pid \d+"):
        RunLock(tmp_path)
    with pytest.raises(RunStoppedError, match="in use by another rlvr run"):
        Trainer(_run_config(tmp_path), log=_silent)  # refused before any work
    first.release()
    # A holder killed with SIGKILL leaves its lock file, but not its lock.
    lock = str(tmp_path / ".rlvr.lock")
    code = (f"import fcntl, os; fd = os.open({lock!r}, os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'pid of a killed run'); "
            "os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=False, timeout=120)
    assert "pid" in (tmp_path / ".rlvr.lock").read_text()
    RunLock(tmp_path).release()


def test_one_run_per_folder_and_an_honest_resume(tmp_path):
    """A used folder refuses a fresh run (unless overwrite); a resume refuses keys that cannot
    change, applies and logs those that can, tells when the schedule ended, and writes the
    config that runs."""
    base = ["trainer.checkpoint_every=1", "actor.optim.schedule=linear"]
    train(_run_config(tmp_path, "trainer.steps=2", *base), log=_silent)
    with pytest.raises(RunStoppedError, match=r"already holds a run \(config.yaml, "
                                              r"metrics.jsonl.*trainer.overwrite=true"):
        train(_run_config(tmp_path, "trainer.steps=2", *base), log=_silent)
    with pytest.raises(ConfigError, match=r"model.tiny.hidden_size: 32 -> 64") as err:
        train(_run_config(tmp_path, "trainer.steps=3", "trainer.resume=true",
                          "model.tiny.hidden_size=64", *base), log=_silent)
    assert err.value.key == "model.tiny.hidden_size"
    lines: list[str] = []
    result = train(_run_config(tmp_path, "trainer.steps=3", "trainer.resume=true", *base),
                   log=lines.append)
    assert result.steps == 3
    assert any("trainer.steps: 2 -> 3" in line for line in lines)
    assert any("schedule was set for 2 steps" in line for line in lines)
    written = load_config(tmp_path / "config.yaml")
    assert written.actor.optim.total_steps == 2  # the value that ran, not the new one
    assert written.trainer.steps == 3
    assert lines[-1].startswith("== rlvr train finished: RL steps 3-3 (resumed after step 2)")
    assert "n/a before RL" not in lines[-1]  # the accuracy before RL comes from the metrics
    assert [m["step"] for m in result.history] == [3.0] and "history" not in repr(result)
    lines.clear()
    train(_run_config(tmp_path, "trainer.steps=3", "trainer.resume=true", *base),
          log=lines.append)  # a finished run resumed: nothing to do, nothing logged twice
    assert "no RL step left (the run had finished at step 3)" in lines[-1]
    finals = [r for r in read_jsonl(tmp_path / "metrics.jsonl")
              if r["step"] == 3 and "eval/accuracy" in r]
    assert len(finals) == 1
    lines.clear()
    train(_run_config(tmp_path, "trainer.steps=1", "trainer.overwrite=true"), log=lines.append)
    assert any("deleted the previous run's" in line for line in lines)
    steps = [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl") if "reward/mean" in r]
    assert steps == [1]  # the old run's lines are gone, not interleaved
    assert not (tmp_path / "checkpoints").exists()


def test_resume_without_a_checkpoint_says_so(tmp_path):
    lines: list[str] = []
    train(_run_config(tmp_path, "trainer.steps=1", "trainer.resume=true"), log=lines.append)
    assert any("no complete checkpoint yet: RL starts from step 0" in line for line in lines)
    (tmp_path / "config.yaml").unlink()
    with pytest.raises(RunStoppedError, match="no complete checkpoint and no config.yaml"):
        train(_run_config(tmp_path, "trainer.steps=1", "trainer.resume=true"), log=_silent)


def test_the_warm_up_model_is_reused_only_when_its_config_matches(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    from rlvr.learner import init_distributed
    from rlvr.training.warmup import WARMUP_RECORD, warm_up

    sft = ["sft.enabled=true", "sft.max_steps=2", "sft.eval_every=0",
           "sft.target_accuracy=null", "sft.eval_tasks=2"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    info = init_distributed("cpu")
    lines: list[str] = []
    config = _run_config(tmp_path, *sft)
    target, first = warm_up(config, tiny_model_path, tokenizer, info, lines.append)
    assert first is not None and (target / WARMUP_RECORD).is_file()
    _, again = warm_up(config, tiny_model_path, tokenizer, info, lines.append)
    assert again is None and "made with this config" in lines[-1]
    changed = _run_config(tmp_path, *sft, "sft.lr=0.01")
    _, redone = warm_up(changed, tiny_model_path, tokenizer, info, lines.append)
    assert redone is not None
    assert any("made with another config (differs in sft)" in line for line in lines)


# ------------------------------------------------------------------ errors before work (9, 10)
@pytest.mark.parametrize(("overrides", "expected"), [
    (["trainer.steps=ten"], "trainer.steps: expected an integer; got 'ten'"),
    (["eval.suite=nope"], "eval.suite: unknown suite 'nope'"),
    (["model.path=/no/such/model"], "model.path: '/no/such/model' does not exist"),
    (["model.path={tmp}"], "is not a HuggingFace model folder (no config.json)"),
    (["trainer.device=cuda"], "trainer.device: 'cuda', but torch sees no CUDA device"),
])
def test_bad_values_are_refused_before_any_work(overrides, expected, tmp_path, capsys):
    import torch

    from rlvr.cli import main

    if "trainer.device=cuda" in overrides and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = tmp_path / "run"
    overrides = [o.format(tmp=tmp_path) for o in overrides]
    assert main(["train", str(CONFIGS / "quickstart.yaml"), *overrides,
                 f"trainer.output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert not out.exists()


class _Words:
    def __init__(self, split="train"):
        self.split = split

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return {"task_id": f"w/{i}", "word": "abc"}


class _NoAnswer(VerifierEnv):
    """README's register-an-env example's shape: tasks without an 'answer'."""

    def __init__(self, split="train", **kwargs):
        super().__init__(_Words(split), lambda response, task: Verdict(0.0, False, "wrong"),
                         prompt_template="Reverse: {word}", **kwargs)


def test_a_warm_up_on_tasks_without_an_answer_is_refused_before_any_work(tmp_path, capsys):
    from rlvr.cli import main

    gymnasium.register("rlvrtest/NoAnswer-v0", entry_point=_NoAnswer)
    try:
        out = tmp_path / "run"
        assert main(["train", str(CONFIGS / "quickstart.yaml"), "env.id=rlvrtest/NoAnswer-v0",
                     "env.kwargs={}", "env.eval_kwargs={}",
                     f"trainer.output_dir={out}"]) == 2
    finally:
        gymnasium.registry.pop("rlvrtest/NoAnswer-v0")
    err = capsys.readouterr().err
    assert "sft.enabled=true" in err and "'answer'" in err and "sft.enabled=false" in err
    assert not out.exists()


def test_an_override_after_import_and_an_empty_mapping_override(capsys):
    from rlvr.cli import main

    # The override after --import reaches the loader (argparse used to reject it).
    assert main(["train", str(CONFIGS / "quickstart.yaml"), "--import", "json",
                 "trainer.steps=ten"]) == 2
    assert "trainer.steps: expected an integer" in capsys.readouterr().err
    config = load_config(CONFIGS / "quickstart.yaml", ["env.kwargs={}"])
    assert config.env.kwargs == {}


# ------------------------------------------------------------------ hung env steps (1)
HANGING_PLUGIN = '''
import time

import gymnasium

from rlvr.envs.math_env import MathEnv


class HangingMath(MathEnv):
    """Opening a third of the tasks sleeps in C for an hour, a third spins in Python."""

    def reset(self, *, seed=None, options=None):
        out = super().reset(seed=seed, options=options)
        kind = self._task_index % 3
        if kind == 0:
            time.sleep(3600)
        while kind == 1:
            try:
                kind = 1
            except Exception:  # a broad handler must not keep it alive
                pass
        return out


gymnasium.register("hangpkg/HangingMath-v0", entry_point=HangingMath)
'''


def test_a_run_with_hung_env_steps_finishes_and_its_process_exits(tmp_path):
    """Hung env calls in training and in the held-out evaluation end as "timeout" episodes within
    env_step_timeout_s, and the process exits when the run ends (it used to print "finished"
    and hang on the sleeping thread; the held-out evaluation waited 60 s per hung task)."""
    import os
    import subprocess
    import sys

    (tmp_path / "hangpkg.py").write_text(HANGING_PLUGIN)
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path)]),
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "rlvr.cli", "train", str(CONFIGS / "quickstart.yaml"),
           "--import", "hangpkg", "env.id=hangpkg/HangingMath-v0", *SMALL_MODEL, *QUIET,
           "sft.enabled=false", f"trainer.output_dir={out}", "trainer.steps=2",
           "trainer.threads=1", "trainer.max_failed_steps=3", "rollout.prompts_per_step=3",
           "rollout.group_size=2", "rollout.runner.env_step_timeout_s=1", "eval.tasks=3"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rlvr train finished: 2 RL steps" in proc.stdout
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "reward/mean" in r]
    assert sum(r["response/timeout_ratio"] for r in rows) > 0


# ------------------------------------------------------------------ the first error wins (7)
def test_the_first_error_is_raised_and_a_failure_while_closing_is_noted_beside_it(
        tmp_path, monkeypatch):
    """A full disk: the checkpoint write fails, then drawing curves.png fails while closing;
    the user used to see only the second error."""
    import errno

    from rlvr import metrics
    from rlvr.training import state

    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "checkpoints/step_000001")

    def no_space_for_curves(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "curves.png")

    monkeypatch.setattr(state.Checkpoints, "maybe_save", no_space)
    monkeypatch.setattr(metrics, "plot_curves", no_space_for_curves)
    with pytest.raises(OSError) as err:
        train(_run_config(tmp_path, "trainer.steps=1", "trainer.plot=true"), log=_silent)
    assert err.value.filename == "checkpoints/step_000001"
    assert any("curves.png" in note for note in getattr(err.value, "__notes__", []))


# ------------------------------------------------------------------ prompts past the context (8)
def test_prompts_longer_than_the_models_context_are_refused_at_the_start(tmp_path):
    """The tool env's prompts on the tiny model (1,024 positions) used to score 0% silently."""
    config = _run_config(tmp_path, "env.id=rlvr/ToolUse-v0", "env.kwargs={}",
                         "env.eval_kwargs={}")
    with pytest.raises(ConfigError, match=r"env.id: the training prompts of 'rlvr/ToolUse-v0' "
                                          r"are up to \d+ tokens .* at most 1024"):
        train(config, log=_silent)
    lines: list[str] = []
    train(_run_config(tmp_path, "trainer.steps=1", "rollout.runner.max_response_tokens=1020"),
          log=lines.append)  # the folder holds only config.yaml: a fresh run may start
    assert any("WARNING: the training prompts of 'rlvr/Math-v0'" in line for line in lines)


# ------------------------------------------------------------------ small ones (10)
def test_ctrl_c_prints_where_the_run_stands_and_how_to_resume(tmp_path):
    from rlvr.cli import interrupted_hint

    config = _run_config(tmp_path)
    assert "has no checkpoint to resume from" in interrupted_hint(config, [])
    done = tmp_path / "checkpoints" / "step_000002"
    done.mkdir(parents=True)
    (done / "COMPLETE").write_text("")
    hint = interrupted_hint(config, ["cfg.yaml", "trainer.steps=9", "trainer.resume=false"])
    assert str(done) in hint
    assert hint.endswith("rlvr train cfg.yaml trainer.steps=9 trainer.resume=true")


def test_the_eval_report_records_the_turn_limit_that_runs():
    from rlvr.agents.runner import RunnerConfig
    from rlvr.eval.evaluator import SuiteEvalConfig

    config = SuiteEvalConfig(suite="x")
    assert config.max_turns == RunnerConfig().max_turns  # was None: "max turns: None"
    assert config.max_response_tokens == RunnerConfig().max_response_tokens


def test_tool_call_text_counts_only_where_the_env_offers_tools():
    from rlvr.agents.episode_state import EpisodeState
    from rlvr.agents.runner_config import EpisodeSpec

    spec = EpisodeSpec(env_id="rlvr/Math-v0")
    plain = EpisodeState(spec=spec, env_id="rlvr/Math-v0")
    plain.note_step("<tool_call>{}</tool_call> 42", [], {})
    assert plain.tool_calls_seen == 0  # a math env has no tools: no "100% valid" call rate
    tooled = EpisodeState(spec=spec, env_id="x", tools=[{"type": "function"}])
    tooled.note_step("<tool_call>{}</tool_call>", [], {})
    assert tooled.tool_calls_seen == 1


def test_no_false_scheduler_warning_when_an_optimizer_step_is_skipped():
    """torch warns "lr_scheduler.step() before optimizer.step()" when a step with a
    non-finite gradient is skipped; the schedule advances once per training step by design."""
    import types
    import warnings

    import torch

    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([param], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)

    def update(_batch, _temperature):  # the learner skips optimizer.step() on an inf gradient
        scheduler.step()
        return {}

    trainer = types.SimpleNamespace(actor=types.SimpleNamespace(update=update), critic=None,
                                    temperature=1.0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        Trainer.update(trainer, None)
    assert not [w for w in seen if "lr_scheduler" in str(w.message)]
