"""rlvr/VerifiersHarness-v0: a ``verifiers`` taskset played by a verifiers harness via the gateway.

``rlvr/Verifiers-v0`` scores one offline chat turn. Here each episode is what ``vf-eval`` would
run: the taskset's ``vf.Env`` (its own, when its module exports one, else the single-agent
env) plays the task with a harness program (``harness="null"``: verifiers' chat loop, with the
task's tool servers as MCP tools) in verifiers' subprocess runtime; the program reaches the
model through verifiers' interception server, whose model client here is rlvr's gateway (the
episode's ``openai.AsyncOpenAI`` client, in-process), so every model call is captured
token-exactly for training. A multi-turn env (its ``run`` sends the model more user turns
through ``agent.interaction``) and a task's ``toolsets`` (``vf.Toolset`` classes of Python
``@vf.tool`` methods, served over MCP in a subprocess) play the same way::

    env = rlvr.envs.make("rlvr/VerifiersHarness-v0", environment="my_taskset", harness="null")

The reward is the played trace's own ``trace.reward`` (its task's ``@vf.reward`` hooks, scored
by verifiers after the episode, with the runtime at hand), never re-graded from text; the
verdict's details and ``info["metrics"]`` hold every reward and metric by name, as in
``rlvr/Verifiers-v0``. ``step(text)`` without a played episode (``rlvr check-env``) scores the
text as one offline turn. The episode runner plays it as an agent env
(``rlvr.envs.agent_env.AgentEnv``): an episode whose harness or env failed ends as an error
(not trained on), one refused by the run's ``max_turns`` or token budget as ``max_turns`` or
``length``.

Fails closed at construction: a harness that needs a container or runs model-written code on
this machine (every harness but ``null``), tasks that need a container, tool servers placed
in a container or a remote runtime, an env with more than one agent seat (the other seats'
calls would be trained as the policy's), or no ``uv`` (verifiers installs the harness program
with it: ``pip install uv``).
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Mapping
from functools import cache
from typing import Any

from rlvr.envs.agent_env import DEFAULT_AGENT_TIMEOUT_S, AgentEnv, AgentTask, check_agent
from rlvr.envs.errors import EnvArgumentError, MissingDependencyError
from rlvr.envs.tasks import Task
from rlvr.envs.verifiers_env import VerifiersEnv, score_with, trace_verdict, verifiers_v1
from rlvr.verifiers import Verdict

UV_HINT = ("rlvr/VerifiersHarness-v0 needs uv (verifiers installs the harness program with "
           "it): pip install uv")
#: The model name the harness's requests carry (the gateway serves the policy under any name).
POLICY_MODEL = "policy"


def uv_directory() -> str:
    """The folder holding the ``uv`` executable: the ``uv`` package's, else ``PATH``'s.

    Raises:
        MissingDependencyError: no uv (verifiers would otherwise ``pip install --user`` it).
    """
    try:
        found: str | None = importlib.import_module("uv").find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
    if not found:
        raise MissingDependencyError(UV_HINT)
    return os.path.dirname(os.path.abspath(found))


class VerifiersTraceEnv(VerifiersEnv):
    """``rlvr/Verifiers-v0`` whose verdict comes from a played trace when one is given.

    ``played`` (set by the harness env before ``step``) is the episode's scored ``vf.Trace``;
    it is used for one step, then cleared. Without it a reply is scored as one offline turn.
    Tasks with tool servers or setup hooks are accepted (the harness's runtime runs them).
    """

    OFFLINE_ONLY = False

    def __init__(self, environment: str = "", **kwargs: Any) -> None:
        super().__init__(environment, **kwargs)
        self.played: Any = None
        source = self.vf_source
        self.verifier = lambda response, task: self._verdict(source, response, task)

    def _verdict(self, source: Any, response: str, task: Task) -> Verdict:
        trace, self.played = self.played, None
        if trace is None:
            return score_with(source, response, task)
        return trace_verdict(trace, source.pass_threshold)


class VerifiersHarnessEnv(AgentEnv):
    """A ``verifiers`` taskset played by a harness through the gateway (see the module docstring).

    Args:
        environment: the verifiers taskset id or module (as for ``rlvr/Verifiers-v0``).
        harness: the verifiers harness id; ``"null"`` (verifiers' chat and MCP-tool loop) is
            the one that runs here.
        harness_kwargs: the harness's config fields (e.g. ``{"tool_timeout": 30}``).
        environment_kwargs: the taskset's config fields.
        split: ``"train"`` or ``"test"`` (held out).
        limit: tasks read from the taskset (both splits together).
        test_fraction: the share of tasks held out.
        pass_threshold: the reward at which an episode passes, in (0, 1].
        timeout_s: wall-clock seconds an episode may take (harness install included).
    """

    def __init__(self, environment: str = "", *, harness: str = "null",
                 harness_kwargs: Mapping[str, Any] | None = None,
                 environment_kwargs: Mapping[str, Any] | None = None, split: str = "train",
                 limit: int = 10_000, test_fraction: float = 0.1, pass_threshold: float = 1.0,
                 timeout_s: float = DEFAULT_AGENT_TIMEOUT_S) -> None:
        check_agent(self.play, timeout_s)
        base = VerifiersTraceEnv(environment, environment_kwargs=environment_kwargs,
                                 split=split, limit=limit, test_fraction=test_fraction,
                                 pass_threshold=pass_threshold)
        self._attach(base, self.play, timeout_s)
        if not isinstance(harness, str) or not harness:
            raise EnvArgumentError(f"harness must be a verifiers harness id, got {harness!r}")
        if harness_kwargs is not None and not isinstance(harness_kwargs, Mapping):
            raise EnvArgumentError(f"harness_kwargs must be a mapping of the harness's config "
                                   f"fields, got {harness_kwargs!r}")
        uv = uv_directory()
        harness_config: dict[str, Any] = {**dict(harness_kwargs or {}), "id": harness}
        env_vars = dict(harness_config.get("env") or {})
        env_vars["PATH"] = os.pathsep.join([uv, os.environ.get("PATH", "")])
        harness_config["env"] = env_vars
        self.vf_config = _env_config(environment, dict(environment_kwargs or {}), harness_config)
        _check_harness_playable(environment, self.vf_config, base.vf_source.tasks[0])

    async def play(self, client: Any, task: AgentTask) -> str:
        """Play one episode of ``task`` with the harness; the model is ``client`` (the gateway).

        The played trace is handed to ``step``, which takes its reward. Returns the last reply.

        Raises:
            RuntimeError: the episode or its trace failed (a harness crash, a refused model
                call, a scoring hook that raised): the runner ends the episode accordingly.
        """
        vf = verifiers_v1()
        loaders = importlib.import_module("verifiers.v1.utils.loaders")
        base: VerifiersTraceEnv = self.base
        vtask = base.vf_source.tasks[int(task.fields["index"])]
        env = loaders.load_environment(self.vf_config)  # per episode: serving() binds it
        # a base URL of its own, so the interception server's client for it is this one
        ctx = vf.ModelContext(model=POLICY_MODEL, client=vf.EvalClientConfig(
            base_url=str(client.base_url), api_key_var="RLVR_UNUSED_API_KEY"))
        async with env.serving():
            server = getattr(env, "_interception", None)
            if server is None or not isinstance(getattr(server, "clients", None), dict):
                raise RuntimeError("this verifiers version's interception server has no client "
                                   "table: rlvr/VerifiersHarness-v0 supports verifiers 0.4")
            server.clients[ctx.client.model_dump_json()] = _gateway_client_class()(client)
            episode = await env.run_episode(vtask, ctx)
        errors = [f"{e.type}: {e.message}" for e in episode.errors]
        traces = list(episode.traces)
        if len(traces) != 1:
            errors.append(f"the episode has {len(traces)} traces, expected the policy's one")
        for trace in traces:
            if not trace.ok:
                last = trace.last_error
                errors.append(f"{last.type}: {last.message}" if last is not None
                              else "the trace did not complete")
        if errors:
            raise RuntimeError(f"verifiers episode failed: {'; '.join(errors)}"[:2000])
        base.played = traces[0]
        return str(traces[0].last_reply)


def _env_config(environment: str, environment_kwargs: dict[str, Any],
                harness_config: dict[str, Any]) -> Any:
    """The taskset's ``vf.Env`` config: the harness in the subprocess runtime, one server."""
    verifiers_v1()
    loaders = importlib.import_module("verifiers.v1.utils.loaders")
    env_cls = loaders.environment_class(environment)
    config_cls = _config_type(env_cls)
    seats = [name for name, field in config_cls.model_fields.items()
             if isinstance(field.default, verifiers_v1().AgentConfig)]
    if len(seats) != 1:
        raise EnvArgumentError(
            f"verifiers taskset {environment!r} plays with {env_cls.__name__}, whose agent seats "
            f"are {seats}: rlvr/VerifiersHarness-v0 plays envs with one seat (the policy)")
    try:
        return config_cls.model_validate({
            "taskset": {**environment_kwargs, "id": environment},
            seats[0]: {"harness": harness_config, "runtime": {"type": "subprocess"}},
            "interception": {"type": "server"},
        })
    except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise EnvArgumentError(f"verifiers rejected harness {harness_config['id']!r} or "
                               f"environment_kwargs {environment_kwargs} for taskset "
                               f"{environment!r}: {type(exc).__name__}: {exc}") from exc


def _config_type(env_cls: type) -> Any:
    generic = importlib.import_module("verifiers.v1.utils.generic")
    vf = verifiers_v1()
    return generic.concrete_type(env_cls, vf.EnvConfig, origin=vf.Env) or vf.EnvConfig


def _check_harness_playable(environment: str, config: Any, task: Any) -> None:
    loaders = importlib.import_module("verifiers.v1.utils.loaders")
    vf = verifiers_v1()
    harnesses = config.agent_harnesses()
    why = None
    for harness_config in harnesses.values():
        harness = loaders.harness_class(harness_config.id)
        if harness.NEEDS_CONTAINER:
            why = f"harness {harness_config.id!r} needs a container runtime"
        elif harness.EXECUTES_CODE:
            why = (f"harness {harness_config.id!r} runs model-written code, which needs a "
                   "container runtime (the subprocess runtime is this machine)")
    if why is None and getattr(type(task), "NEEDS_CONTAINER", False):
        why = "its tasks need a container (NEEDS_CONTAINER)"
    if why is None:
        servers = [*type(task).toolsets(task.config),
                   *loaders.taskset_class(environment).toolsets(config.taskset)]
        for server in servers:
            runtime = getattr(server.config, "runtime", None)
            if getattr(server.config, "url", None) is None and not isinstance(
                    runtime, vf.SubprocessConfig):
                why = (f"tool server {type(server).__name__} runs in a "
                       f"{getattr(runtime, 'type', '?')} runtime")
    if why:
        raise EnvArgumentError(f"verifiers taskset {environment!r} is not supported: {why}; "
                               "rlvr/VerifiersHarness-v0 plays the 'null' harness and tool "
                               "servers in verifiers' subprocess runtime")


@cache
def _gateway_client_class() -> type:
    """A ``vf.Client`` whose upstream is an ``openai.AsyncOpenAI`` client (rlvr's gateway).

    Requests go whole (a streamed request is answered whole and framed as the dialect's
    events by verifiers), through the openai client's raw ``post``; a refusal comes back as
    the provider error verifiers hands to the harness program.
    """
    import httpx
    import openai

    vf = verifiers_v1()
    client_module = importlib.import_module("verifiers.v1.clients.client")
    errors = importlib.import_module("verifiers.v1.errors")

    class GatewayClient(vf.Client):  # type: ignore[misc, name-defined]
        def __init__(self, upstream: Any) -> None:
            self.upstream = upstream

        async def get_response(self, dialect: Any, body: dict[str, Any], sampling: Any,
                               session_id: str | None = None, turn: Any = None,
                               headers: Mapping[str, str] | None = None) -> Any:
            body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
            path = dialect.upstream_path
            path = path[len("/v1"):] if path.startswith("/v1/") else path
            try:
                reply = await self.upstream.post(path, body=body, cast_to=httpx.Response)
            except openai.OpenAIError as exc:
                raise errors.model_error(exc) from exc
            raw = reply.json()
            try:
                response = dialect.parse_response(dialect.validate_response(raw))
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                raise errors.model_error(f"malformed gateway response: {exc}",
                                         status_code=502) from exc
            response.raw = raw
            return response

        async def relay(self, dialect: Any, body: dict[str, Any], session_id: str | None = None,
                        headers: Mapping[str, str] | None = None) -> Any:
            response = await self.get_response(dialect, body, None, session_id, None, headers)

            async def chunks() -> Any:
                for event in dialect.stream_events(response.raw):
                    yield event

            async def close() -> None:
                return None

            return client_module.RelayReply(content_type="text/event-stream",
                                            chunks=chunks(), close=close)

    return GatewayClient


__all__ = ["VerifiersHarnessEnv", "VerifiersTraceEnv", "uv_directory"]
