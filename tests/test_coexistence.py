"""rlvr installed beside the PyPI packages whose import names it once shadowed.

Prime Intellect's ``verifiers``, OpenAI's Agents SDK (``openai-agents``, imported as ``agents``)
and PyPI's ``envs`` live in a venv of their own (``bash dev.sh setup-coexist``, built by
``bash dev.sh test``; tools/coexist/requirements.txt pins them). The test installs the wheel
built from this checkout into it in both orders, checks that both sides import and keep their
files, runs ``rlvr check-env`` and a short ``rlvr train``, and trains an Agents SDK agent through
rlvr's gateway in the same process (its default Responses model and its chat completions
model). Every command runs outside the checkout, so only what the wheel installed can be
imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.coexist_venv import coexist_python
from tests.test_packaging import build_wheel

ROOT = Path(__file__).resolve().parents[1]
THEIRS = [line.split("#")[0].strip()
          for line in (ROOT / "tools" / "coexist" / "requirements.txt").read_text().splitlines()
          if line.split("#")[0].strip()]

CHECK = textwrap.dedent('''
    import sys, sysconfig
    site = sysconfig.get_paths()["purelib"]
    import agents, envs, verifiers
    import verifiers.v1 as vf
    for module in (agents, envs, verifiers, vf):
        assert module.__file__.startswith(site), module.__file__
    assert callable(agents.Agent) and callable(agents.Runner.run)  # OpenAI's Agents SDK
    assert isinstance(vf.Env, type) and isinstance(vf.Harness, type)  # Prime's verifiers 0.4
    if sys.argv[1] == "with-rlvr":
        from rlvr.agents import EpisodeRunner
        from rlvr.envs import VerifierEnv, make
        from rlvr.verifiers import Verdict
        from rlvr.verifiers.math import verify
        assert verify("\\\\boxed{19}", "19").passed
        assert make("rlvr/Math-v0") is not None
    else:
        import importlib.util
        assert importlib.util.find_spec("rlvr") is None
    print("ok")
''')

SDK_PLUGIN = textwrap.dedent('''
    """An OpenAI Agents SDK agent, trained by rlvr through its gateway.

    Episodes alternate between the SDK's default model (the Responses API) and its chat
    completions model, so every step trains both through the gateway.
    """
    import itertools

    from agents import (Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                        set_tracing_disabled)

    from rlvr.envs import register_agent

    set_tracing_disabled(True)  # no network: the SDK's trace exporter stays off
    EPISODES = itertools.count()


    async def sdk_agent(client, task):
        kind = OpenAIResponsesModel if next(EPISODES) % 2 == 0 else OpenAIChatCompletionsModel
        agent = Agent(name="adder", model=kind(model="policy", openai_client=client))
        result = await Runner.run(agent, list(task.messages), max_turns=1)
        return result.final_output


    register_agent("coexist/SdkMath-v0", sdk_agent, env="rlvr/Math-v0")
''')


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    python = coexist_python()
    work = tmp_path_factory.mktemp("coexist")
    wheel = build_wheel(work / "wheel")
    yield python, wheel, work
    # leave the cached venv as it was built: their packages, no rlvr
    pip(python, "uninstall", "-y", "rlvr")
    pip(python, "install", "--no-deps", *THEIRS)


def pip(python: Path, *args: str) -> None:
    proc = subprocess.run([str(python), "-m", "pip", "-q", *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def run(python: Path, *args: str, cwd: Path, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(cwd), OMP_NUM_THREADS="1", OPENAI_AGENTS_DISABLE_TRACING="1")
    proc = subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def check_imports(python: Path, work: Path, rlvr_installed: bool) -> None:
    script = work / "check_imports.py"
    script.write_text(CHECK)
    assert run(python, str(script), "with-rlvr" if rlvr_installed else "without",
               cwd=work).strip() == "ok"


@pytest.mark.slow
def test_both_install_orders_keep_both_sides(venv):
    python, wheel, work = venv
    pip(python, "uninstall", "-y", "rlvr")
    pip(python, "install", "--no-deps", str(wheel))          # theirs first, then rlvr
    check_imports(python, work, rlvr_installed=True)
    pip(python, "uninstall", "-y", *[r.split("==")[0] for r in THEIRS])
    pip(python, "install", "--no-deps", *THEIRS)             # rlvr first, then theirs
    check_imports(python, work, rlvr_installed=True)
    pip(python, "uninstall", "-y", "rlvr")                   # takes no file of theirs
    check_imports(python, work, rlvr_installed=False)


@pytest.mark.slow
def test_check_env_and_an_agents_sdk_agent_train_beside_them(venv):
    python, wheel, work = venv
    pip(python, "install", "--no-deps", "--force-reinstall", str(wheel))
    out = run(python, "-m", "rlvr.cli", "check-env", "rlvr/Math-v0", "--quick", cwd=work)
    assert "FAIL" not in out
    (work / "sdkplugin.py").write_text(SDK_PLUGIN)
    runs = work / "runs"
    common = ["sft.enabled=false", "trainer.steps=2", "eval.tasks=8", "eval.every=0",
              "trainer.progress=false", "trainer.tensorboard=false", "trainer.plot=false",
              "trainer.export_at_end=false", "trainer.checkpoint_every=0",
              "rollout.prompts_per_step=4", "rollout.group_size=4"]
    config = str(ROOT / "configs" / "quickstart.yaml")
    for name, extra in (("native", []),
                        ("sdk", ["--import", "sdkplugin", "env.id=coexist/SdkMath-v0",
                                 "env.kwargs={}", "env.eval_kwargs={}"])):
        run(python, "-m", "rlvr.cli", "train", config, *extra, *common,
            f"trainer.output_dir={runs / name}", cwd=work)
        steps = [json.loads(line) for line in (runs / name / "metrics.jsonl").read_text()
                 .splitlines() if '"step"' in line]
        steps = [m for m in steps if "rollout/logprob_diff" in m]
        assert len(steps) == 2, name
        for m in steps:
            assert m["response/error_ratio"] == 0.0, (name, m)  # every episode played
            assert m["rollout/logprob_diff"] < 1e-3, (name, m)   # token-exact through the gateway
