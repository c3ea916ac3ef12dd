"""rlvr/OpenEnv-v0 against real OpenEnv servers (openenv-core 0.3.0) on 127.0.0.1.

The servers run in openenv-core's own venv (``RLVR_OPENENV_PYTHON``, built by
``bash dev.sh setup-openenv`` and by ``bash dev.sh test``): ``examples/openenv_arith_server.py``
(additions) and ``tests/envs/openenv_fault_server.py`` (sessions that misbehave on request).
rlvr itself speaks the protocol (websockets), so these tests run in rlvr's own venv.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from rlvr import envs
from rlvr.envs import EnvArgumentError, check_env
from rlvr.envs.openenv_client import OpenEnvError
from rlvr.envs.openenv_server import acquire, release

ROOT = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("RLVR_OPENENV_PYTHON")
pytestmark = pytest.mark.slow


def _command(script: str) -> str:
    return f"{PYTHON} {ROOT / script} --port {{port}}"


@pytest.fixture(scope="module")
def servers():
    """Both servers, started once for the module (the envs built from the same command share
    them); their commands are returned."""
    if not PYTHON or not Path(PYTHON).exists():
        reason = (f"openenv venv absent (RLVR_OPENENV_PYTHON={PYTHON!r}): build it with "
                  "`bash dev.sh setup-openenv` or run `bash dev.sh test`")
        if os.environ.get("RLVR_REQUIRE_SGLANG") == "1":  # CI: the cached venvs must be there
            pytest.fail(reason)
        pytest.skip(reason)
    arith = acquire(_command("examples/openenv_arith_server.py"), 120)
    fault = acquire(_command("tests/envs/openenv_fault_server.py"), 120)
    yield {"arith": arith.command, "fault": fault.command, "fault_url": fault.url}
    release(arith, linger_s=0)
    release(fault, linger_s=0)


def test_the_arith_server_passes_the_deep_check(servers):
    env = envs.make("rlvr/OpenEnv-v0", command=servers["arith"], reference_field="answer")
    report = check_env(env, deep=True, raise_on_failure=False)
    env.close()
    assert report.passed, report.table()
    probes = [r for r in report.results if r.topic == "probes"]
    assert probes and all(r.status == "pass" for r in probes), report.table()


def test_observations_rewards_and_turns_map_onto_the_text_env(servers):
    env = envs.make("rlvr/OpenEnv-v0", command=servers["arith"], reference_field="answer",
                    system_prompt="Add.", reset_kwargs={"attempts": 3}, max_turns=2)
    messages, info = env.reset(seed=5)
    problem = messages[1]["content"]
    assert messages[0] == {"role": "system", "content": "Add."}
    assert problem.endswith("=") and info["task_id"] == "train/5"
    answer = env.unwrapped.task["answer"]
    assert answer not in problem and str(eval(problem[:-1])) == answer  # noqa: S307
    new, reward, terminated, truncated, info = env.step("0")  # wrong, attempts left
    assert new == [{"role": "user", "content": f"Wrong. {problem}"}]
    assert (reward, terminated, truncated, "verdict" in info) == (0.0, False, False, False)
    new, reward, terminated, truncated, info = env.step(answer)
    assert (new, reward, terminated, truncated) == ([], 1.0, True, False)
    assert info["verdict"].passed and info["verdict"].reason == "correct"
    env.reset(seed=5)
    env.step("0")
    _, reward, terminated, truncated, info = env.step("1")  # max_turns=2 reached
    assert (reward, terminated, truncated, "verdict" in info) == (0.0, False, True, False)
    held_out, _ = env.reset(options={"task_index": 5})
    assert held_out[1]["content"] == problem  # task_index i is seed i
    env.close()


def test_the_split_reaches_the_server(servers):
    train = envs.make("rlvr/OpenEnv-v0", command=servers["arith"], split="train",
                        observation_field="prompt")
    test = envs.make("rlvr/OpenEnv-v0", command=servers["arith"], split="test",
                       observation_field="prompt")
    seen_train = {train.reset(seed=s)[0][0]["content"] for s in range(40)}
    seen_test = {test.reset(seed=s)[0][0]["content"] for s in range(40)}
    assert seen_train.isdisjoint(seen_test)
    assert test.reset(seed=1)[1]["task_id"] == "test/1"
    train.close()
    test.close()


@pytest.mark.parametrize(("fault", "error", "match"), [
    ("raises", OpenEnvError, "reported an error: the environment broke"),
    ("bad_observation", OpenEnvError, "observation's 'text' is not a string"),
    ("big_reward", OpenEnvError, r"reward 5\.0, outside \[0, 1\]"),
    ("slow", TimeoutError, "did not answer a step within 3.0 s"),
])
def test_server_failures_raise_typed_errors_and_the_next_episode_plays(servers, fault, error,
                                                                       match):
    env = envs.make("rlvr/OpenEnv-v0", url=servers["fault_url"], observation_field="text",
                    reset_kwargs={"fault": fault}, timeout_s=3.0)
    env.reset(seed=0)
    with pytest.raises(error, match=match):
        env.step("ok")
    env.unwrapped.reset_kwargs = {"fault": "none"}  # a fresh session serves the next episode
    env.reset(seed=1)
    assert env.step("ok")[1:3] == (1.0, True)
    env.close()


def test_a_reset_that_is_already_done_and_a_dead_server_raise(servers):
    env = envs.make("rlvr/OpenEnv-v0", url=servers["fault_url"], observation_field="text",
                    reset_kwargs={"fault": "done_at_reset"})
    with pytest.raises(OpenEnvError, match="ended the episode at reset"):
        env.reset(seed=0)
    env.close()
    dead = acquire(_command("tests/envs/openenv_fault_server.py") + " --max-sessions 4", 120)
    env = envs.make("rlvr/OpenEnv-v0", url=dead.url, observation_field="text",
                    reset_kwargs={"fault": "exit"})
    env.reset(seed=0)
    with pytest.raises(OpenEnvError, match="broke during a step"):
        env.step("ok")
    env.close()
    release(dead, linger_s=0)


def test_bad_arguments_name_the_kwarg(servers):
    with pytest.raises(EnvArgumentError, match="exactly one of url"):
        envs.make("rlvr/OpenEnv-v0")
    with pytest.raises(EnvArgumentError, match="exactly one of url"):
        envs.make("rlvr/OpenEnv-v0", url="http://127.0.0.1:1", command="x {port}")
    with pytest.raises(EnvArgumentError, match=r"command: .* has no \{port\}"):
        envs.make("rlvr/OpenEnv-v0", command=f"{PYTHON} server.py")
    with pytest.raises(EnvArgumentError, match=r"observation_field: .* string fields \['text', "
                                               r"'hint'\]"):
        envs.make("rlvr/OpenEnv-v0", url=servers["fault_url"])
    with pytest.raises(EnvArgumentError, match="action_field: the server's action has no field"):
        envs.make("rlvr/OpenEnv-v0", url=servers["fault_url"], observation_field="text",
                  action_field="reply")
    with pytest.raises(OpenEnvError, match="GET http://127.0.0.1:1/schema failed"):
        envs.make("rlvr/OpenEnv-v0", url="http://127.0.0.1:1", timeout_s=2)


HEALTH_SERVER = """
import http.server, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def test_a_command_server_is_shared_lingers_and_stops_and_one_that_dies_is_named(tmp_path):
    """The process side of ``command``, on a plain HTTP server that only answers /health."""
    with pytest.raises(OpenEnvError, match=r"exited with code 3 before it was up; its output"):
        acquire(f"{sys.executable} -c 'raise SystemExit(3)' {{port}}", 30)
    script = tmp_path / "health.py"
    script.write_text(HEALTH_SERVER)
    command = f"{sys.executable} {script} {{port}}"
    first, second = acquire(command, 30), acquire(command, 30)
    assert first is second and first.users == 2  # one server per command line
    release(first, linger_s=0)
    assert first.process.poll() is None  # its other user keeps it
    release(second, linger_s=60)
    again = acquire(command, 30)  # taken back within the linger: the same process
    assert again is first and again.process.poll() is None
    release(again, linger_s=0.2)
    assert again.process.wait(timeout=10) is not None  # the last user gone: stopped
    fresh = acquire(command, 30)
    assert fresh is not again and fresh.process.poll() is None  # a new one for the next user
    release(fresh, linger_s=0)


def test_training_plays_the_server_with_a_warm_up_on_its_references(servers, tmp_path):
    """Two GRPO steps after a short warm-up whose exact-match check reads the server's tasks by
    seed (the env has no task count); every episode is played and scored, none errs."""
    import json

    from rlvr.cli import main

    kwargs = json.dumps({"command": servers["arith"], "reference_field": "answer"})
    runs = tmp_path / "runs"
    assert main(["train", str(ROOT / "configs" / "quickstart.yaml"), "env.id=rlvr/OpenEnv-v0",
                 f"env.kwargs={kwargs}", "env.eval_kwargs={}", "sft.max_steps=40",
                 "sft.eval_every=20", "sft.check_gate=0", "sft.eval_tasks=16",
                 "trainer.steps=2", "eval.tasks=8", "eval.every=0", "trainer.progress=false",
                 "trainer.tensorboard=false", "trainer.plot=false",
                 "trainer.export_at_end=false", "trainer.checkpoint_every=0",
                 "rollout.prompts_per_step=4", "rollout.group_size=4",
                 f"trainer.output_dir={runs}"]) == 0
    steps = [json.loads(line) for line in (runs / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in steps if "rollout/logprob_diff" in m]
    assert len(steps) == 2
    for m in steps:
        assert m["response/error_ratio"] == 0.0 and m["response/timeout_ratio"] == 0.0, m
